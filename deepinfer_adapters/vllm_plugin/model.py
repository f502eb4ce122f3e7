"""vLLM model classes wrapping our model_impl (one class per architecture name).

vLLM's contract (vllm/model_executor/models/interfaces_base.py):
``__init__(*, vllm_config, prefix)``, ``embed_input_ids``, ``forward(input_ids,
positions, intermediate_tensors=None, inputs_embeds=None)`` returning one hidden
row per token, ``compute_logits(hidden)`` and ``load_weights(weights)``.

Each step, ``forward`` reads the per-step metadata of our state layer from the
forward context (query_start_loc, seq_lens, block table), builds a
``ForwardBatch`` (a request's state slot is the id of its first vLLM block),
binds a ``VllmStateCache`` over the pages vLLM allocated, resets the fixed state
of sequences that start at position 0, and runs our model. The model's LM head
is moved out (``lm_head``) so the model returns the final normed hidden rows,
and ``compute_logits`` applies the head to the rows vLLM samples from.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context

from deepinfer_adapters.config import ModelConfig, load_config
from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.vllm_plugin.state_layer import DeepinferStateLayer
from deepinfer_adapters.vllm_plugin.weights import dense_from_stream

logger = logging.getLogger(__name__)

STATE_LAYER = "deepinfer.layers.0.state"  # vLLM wants exactly one integer in a cache layer's name


@contextlib.contextmanager
def float32_default():
    """vLLM sets torch's default dtype to --dtype in its workers; our model assumes float32
    wherever it creates a tensor without naming a dtype (as in the standalone engine)."""
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(prev)


class _HiddenOut(nn.Module):
    """Stands in for the LM head inside our model: returns the normed hidden rows."""

    def forward(self, x: torch.Tensor, numerics: Numerics, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        return x if out_dtype is None else x.to(out_dtype)  # the rows as the head would read them


def numerics_for(dtype: torch.dtype) -> Numerics:
    """vLLM ``--dtype``: bfloat16 -> the reference numerics (bf16 + quantization points);
    float32 -> plain float32 (as the standalone engine's ``numerics="float32"``). Both
    batch-invariant: vLLM batches requests its own way, and a request's tokens must not
    depend on it."""
    if dtype == torch.bfloat16:
        return Numerics.reference().invariant()
    if dtype == torch.float32:
        return Numerics.float32().invariant()
    raise ConfigError(f"dtype {dtype} is not supported by deepinfer-adapters' model; use bfloat16 or float32",
                      "dtype")


def checkpoint_config(model_dir: str | Path, arch_name: str, want_v41: bool) -> ModelConfig:
    cfg = load_config(model_dir)
    if cfg.is_v41 != want_v41:
        raise ConfigError(f"{model_dir}: config.json names architecture {arch_name} but its fields describe a "
                          f"{cfg.arch} checkpoint; use DeepseekV41ForCausalLM for v41 and DeepseekV4ForCausalLM "
                          "for v4 / v4-0731", "architectures")
    return cfg


class _DeepinferForCausalLM(nn.Module):
    arch_name: str = ""
    is_v41: bool = False

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        mc = vllm_config.model_config
        self.model_dir = Path(mc.model)
        self.cfg = checkpoint_config(self.model_dir, self.arch_name, self.is_v41)
        self.numerics = numerics_for(mc.dtype)
        self.num_draft_tokens = self._draft_tokens(vllm_config.speculative_config)
        cls = self._impl_class()
        kwargs = {"model_dir": self.model_dir}
        if "with_draft" in inspect.signature(cls.__init__).parameters:
            kwargs["with_draft"] = self.num_draft_tokens > 0
        with float32_default():  # our model picks its own dtypes; vLLM sets its --dtype as the default here
            self.model = cls(self.cfg, self.numerics, **kwargs)
        self.model.eval()
        self.lm_head = self.model.head
        self.model.head = _HiddenOut()
        # a verify step may be rolled back by up to num_draft_tokens positions
        self.state_layer = DeepinferStateLayer(self.model.state_spec(rewind=self.num_draft_tokens), STATE_LAYER,
                                               vllm_config)
        self.vocab_size = self.cfg.vocab_size
        self._cache = None
        self._cache_ptr = None
        self._row_slots: list[int] = []  # state slot of each input-batch row of the last step

    def _draft_tokens(self, spec) -> int:
        if spec is None:
            return 0
        from deepinfer_adapters.vllm_plugin.dspark import is_our_proposer

        if spec.method != "custom_class" or not is_our_proposer(spec.model):
            raise ConfigError(f"speculative method {spec.method!r} is not supported with deepinfer-adapters' "
                              "model; use {\"method\": \"dspark\"} (our DSpark drafter)", "speculative_config")
        draft = self.cfg.draft
        if draft is None or draft.kind != "dspark":
            raise ConfigError(f"{self.model_dir}: this checkpoint has no DSpark draft stages", "speculative_config")
        if not self.is_v41:
            raise ConfigError("DSpark speculative decoding under vLLM runs on V4.1 checkpoints only",
                              "speculative_config")
        k = spec.num_speculative_tokens
        if not 1 <= k <= draft.block_size:
            raise ConfigError(f"num_speculative_tokens={k}: DSpark proposes at most block_size={draft.block_size} "
                              "tokens per step", "speculative_config.num_speculative_tokens")
        return k

    def _impl_class(self) -> type:
        raise NotImplementedError

    # ----------------------------------------------------------- contract ----
    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed.weight[input_ids]

    def get_input_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:  # older vLLM name
        return self.embed_input_ids(input_ids)

    def _state(self):
        kv = self.state_layer.kv_cache
        kv = kv[0] if isinstance(kv, list) else kv
        if self._cache is None or self._cache_ptr != kv.data_ptr():
            self._cache, self._cache_ptr = self.state_layer.state_cache(), kv.data_ptr()
        return self._cache

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, intermediate_tensors=None,
                inputs_embeds: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        if inputs_embeds is not None:
            raise ValueError("deepinfer-adapters' vLLM model takes token ids, not inputs_embeds")
        num_tokens = input_ids.shape[0]
        out = torch.zeros(num_tokens, self.cfg.hidden_size, dtype=torch.float32, device=input_ids.device)
        attn_metadata = get_forward_context().attn_metadata
        if isinstance(attn_metadata, list):
            attn_metadata = attn_metadata[0] if attn_metadata else None
        meta = attn_metadata.get(STATE_LAYER) if attn_metadata else None
        if meta is None:  # profiling / dummy run: no requests, no state to touch
            return out
        batch, tables = self._batch(meta, input_ids, positions)
        if batch.num_tokens == 0:
            return out
        state = self._state()
        state.bind(tables)
        for slot, start in zip(batch.slots, batch.start_pos):
            if start == 0:
                state.reset(slot)
        with float32_default():
            hidden = self.model(batch, state).logits  # the normed hidden rows (see _HiddenOut)
        out[: batch.num_tokens] = hidden
        return out

    def _batch(self, meta, input_ids: torch.Tensor, positions: torch.Tensor):
        num_reqs = int(meta.num_reqs)
        qsl = meta.query_start_loc_cpu[: num_reqs + 1].tolist()
        # where each request's new tokens start: vLLM's positions are exact (num_computed_tokens);
        # seq_lens may be an upper bound under async scheduling
        first_pos = positions[torch.tensor(qsl[:-1], dtype=torch.long)].tolist() if num_reqs else []
        block_table = meta.block_table_tensor[:num_reqs].to(torch.long)
        self._row_slots = block_table[:, 0].tolist()
        bs = self.state_layer.block_size
        cu, starts, slots, tables = [0], [], [], {}
        for i in range(num_reqs):
            q = qsl[i + 1] - qsl[i]
            if q == 0:
                continue
            if qsl[i] != cu[-1]:
                raise ValueError("vLLM's query_start_loc is not contiguous from 0")
            cu.append(qsl[i + 1])
            start = int(first_pos[i])
            starts.append(start)
            n_blocks = -(-(start + q) // bs)
            row = block_table[i, :n_blocks]
            slot = int(row[0])
            slots.append(slot)
            tables[slot] = row
        T = cu[-1]
        batch = ForwardBatch(input_ids=input_ids[:T].to(torch.long), positions=positions[:T].to(torch.long),
                             cu_seqlens=cu, start_pos=starts, slots=slots)
        batch.logits_rows = torch.arange(T, device=input_ids.device)
        return batch, tables

    @torch.inference_mode()
    def propose_dspark(self, sampled_token_ids: list[list[int]], num_tokens_no_spec, k: int) -> list[list[int]]:
        """DSpark drafts for vLLM's proposer (dspark.py): row i's last sampled token sits at position
        num_tokens_no_spec[i] - 1, so the last position this step processed is one before it."""
        rows = [i for i, toks in enumerate(sampled_token_ids) if toks]
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        if not rows:
            return drafts
        last = [sampled_token_ids[i][-1] for i in rows]
        positions = [int(num_tokens_no_spec[i]) - 2 for i in rows]
        slots = [self._row_slots[i] for i in rows]
        self.model.head = self.lm_head  # draft() samples through the model's own head
        try:
            with float32_default():
                out = self.model.draft(last, positions, slots, self._state())
        finally:
            self.model.head = _HiddenOut()
        for i, tokens in zip(rows, out.tokens[:, :k].tolist()):
            drafts[i] = tokens
        return drafts

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        with float32_default():
            return self.lm_head(hidden_states.float(), self.numerics)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        dense = dense_from_stream(weights, self.cfg, torch.float32)
        self.model.head = self.lm_head  # load through the model's own name mapping, then move it out again
        try:
            with float32_default():
                self.model.load_weights(dense)
        finally:
            self.model.head = _HiddenOut()
        return {name for name, _ in self.named_parameters()} | {name for name, _ in self.named_buffers()}


class DeepseekV41ForCausalLM(_DeepinferForCausalLM):
    arch_name, is_v41 = "DeepseekV41ForCausalLM", True

    def _impl_class(self) -> type:
        from deepinfer_adapters.model_impl.deepseek_v41 import DeepseekV41ForCausalLM as Impl

        return Impl


class DeepseekV4ForCausalLM(_DeepinferForCausalLM):
    arch_name, is_v41 = "DeepseekV4ForCausalLM", False

    def _impl_class(self) -> type:
        from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM as Impl

        return Impl
