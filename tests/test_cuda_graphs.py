"""DecodeGraphs' bucketing and padding, run eagerly on the CPU (capture=False): what a CUDA
graph replays, minus the graph (tests/gpu/test_decode_graphs_gpu.py replays it on the GPU)."""

from __future__ import annotations

import copy

import pytest
import torch

from deepinfer_adapters.model_impl.batch import DecodeBatch, ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs, batch_buckets, len_bucket


def test_buckets():
    assert batch_buckets(8) == [1, 2, 4, 8]
    assert batch_buckets(50) == [1, 2, 4, 8, 16, 24, 32, 48, 50]
    assert len_bucket(100, 256) == 256  # capped at the host's max_len
    assert len_bucket(1500, 8192) == 2048 and len_bucket(5000, 8192) == 8192 and len_bucket(10, 8192) == 1024


def test_padded_decode_equals_the_unpadded_step_and_touches_only_the_padding_slot(tiny_checkpoint):
    model = DeepseekV41ForCausalLM.from_pretrained(tiny_checkpoint("v41"), Numerics.float32(quant=True).invariant(),
                                                   progress=False, with_draft=False)
    state = model.new_state(5, 256)  # slots 0-2: sequences, 3: idle, 4: padding
    prompts = [list(range(3, 3 + n)) for n in (20, 7, 33)]
    model(ForwardBatch.build([(s, 0, p) for s, p in enumerate(prompts)]), state)
    unpadded = copy.deepcopy(state)  # gets the same step without padding rows
    graphs = DecodeGraphs(model, state, pad_slot=4, max_batch=8, max_len=256, device="cpu", capture=False)
    assert graphs.bucket(3) == 4
    ids, pos, slots = torch.tensor([5, 6, 7]), torch.tensor([20, 7, 33]), torch.tensor([0, 1, 2])
    got = graphs.run(ids, pos, slots, 34)
    want = model.decode(DecodeBatch(ids, pos, slots, 256), unpadded)  # length bucket 256: same index scan
    assert torch.equal(got, want)
    changed = {key[0] for key, t in state._tensors.items() if not torch.equal(t[4], unpadded._tensors[key][4])}
    assert changed, "the padding row wrote nothing to the padding slot"
    for key, t in state._tensors.items():
        assert torch.equal(t[:4], unpadded._tensors[key][:4]), f"{key}: padding changed a real or idle slot"
    with pytest.raises(ValueError, match="bucket"):
        graphs.run(torch.zeros(9, dtype=torch.long), torch.zeros(9, dtype=torch.long), torch.zeros(9, dtype=torch.long), 1)
