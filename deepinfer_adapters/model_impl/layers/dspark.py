"""V4.1 DSpark draft stages (model_spec.md 2.9), stored under ``mtp.{0,1,2}``.

Each main-model step, ``observe`` turns the target layers' block inputs into
``main_x = main_norm(main_proj(main_hidden))`` and writes every stage's window
ring from it (the stage's own wkv, kv_norm, RoPE, FP8): that is all the stages do
while the main model prefills.

``draft`` then proposes ``block_size`` tokens after a sequence's last position p:
input [last sampled token, noise x (block_size - 1)] at positions p+1.., every
draft query seeing the ring (positions <= p) and *all* draft keys (non-causal
inside the block). The stages run as V4.1 blocks (single-pass hyper-connections
from a one-hot mix); the head adds the Markov head's bias token by token, and
the confidence head scores each draft position.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from deepinfer_adapters import kernels
from deepinfer_adapters.config import LayerSpec, ModelConfig
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.layers.attention_common import AttentionBase
from deepinfer_adapters.model_impl.layers.block_v41 import BlockV41
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache, StateField

WINDOW_FP8_BLOCK = 32


class DSparkAttention(AttentionBase):
    def state_fields(self, numerics: Numerics, rewind: int = 0) -> list[StateField]:
        return self.window_fields(numerics.dtype, rewind)

    def quantize_window_kv(self, kv: torch.Tensor, numerics: Numerics) -> torch.Tensor:
        return kernels.fp8_roundtrip(kv, WINDOW_FP8_BLOCK)

    def observe(self, main_x: torch.Tensor, batch: ForwardBatch, state: StateCache, numerics: Numerics) -> None:
        """Write the main tokens' context KV into this stage's ring."""
        kv = self.project_kv(main_x, self.rope(batch.positions), numerics)
        for i in range(batch.num_seqs):
            self.chunk_window(state, batch, i, kv[batch.rows(i)])

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: StateCache, numerics: Numerics) -> torch.Tensor:
        """x: the draft blocks; sequence i's block sits at positions start_pos[i].. (= p + 1..)."""
        freqs = self.rope(batch.positions)
        q, _, kv = self.project_q_kv(x, freqs, numerics)
        out = torch.empty_like(q)
        W = self.window
        for i in range(batch.num_seqs):
            rows, p = batch.rows(i), batch.start_pos[i] - 1
            ring = state.fixed(self.key, "window_kv")[batch.slots[i]]
            # the ring's slots of positions max(0, p - W + 1) .. p, in slot order
            held = (torch.arange(max(0, p - W + 1), p + 1, device=x.device) % ring.shape[0]).sort().values
            keys = torch.cat([ring[held].to(kv.dtype), kv[rows]])
            n = batch.seq_len(i)
            idx = torch.arange(keys.shape[0], device=x.device).expand(n, -1)  # every draft query sees everything
            out[rows] = self.attend(q[rows], keys, idx, numerics)
        return self.output(out, freqs, numerics)


class DSparkStage(BlockV41):
    """One draft stage: a V4.1 block with DSpark attention. Stage 0 also owns the
    main-hidden projection; the last stage the final norm, Markov and confidence heads."""

    def __init__(self, cfg: ModelConfig, layer: LayerSpec, key: str, *, vision: bool) -> None:
        super().__init__(cfg, layer, key, vision=vision, attention=DSparkAttention)
        stage = layer.index - cfg.num_hidden_layers
        D, V, R = cfg.hidden_size, cfg.vocab_size, cfg.draft.markov_rank
        if stage == 0:
            self.main_proj = Linear(D * len(cfg.draft.target_layer_ids), D, quantized=True,
                                    act_block=cfg.quant.fp8_block[1])
            self.main_norm = RMSNorm(D, cfg.rms_norm_eps)
        if stage == cfg.draft.num_stages - 1:
            self.norm = RMSNorm(D, cfg.rms_norm_eps)
            self.markov_head = nn.Module()
            self.markov_head.embed = _frozen(nn.Embedding(V, R))
            self.markov_head.head = Linear(R, V, quantized=False)
            self.confidence_head = nn.Module()
            self.confidence_head.proj = Linear(D + R, 1, quantized=False)

    def heads(self, x: torch.Tensor, head: Linear, first: torch.Tensor, numerics: Numerics,
              sample: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, n, D] collapsed output of the last stage; first [B] the last sampled tokens.

        Returns (tokens [B, n + 1]: first then n drafts, logits [B, n, V] fp32, confidence [B, n]).
        Draft i's logits get the Markov head's bias from token i before draft i is sampled."""
        logits = head(self.norm(x), numerics, torch.float32)
        tokens, embeds = [first], []
        for i in range(x.shape[1]):
            e = self.markov_head.embed.weight[tokens[-1]].to(numerics.dtype)
            logits[:, i] += self.markov_head.head(e, numerics, torch.float32)
            embeds.append(e)
            tokens.append(sample(logits[:, i]))
        markov = torch.stack(embeds, dim=1)
        conf = self.confidence_head.proj(torch.cat([x, markov], -1).float(), numerics).squeeze(-1)
        return torch.stack(tokens, dim=1), logits, conf


def _frozen(module: nn.Module) -> nn.Module:
    for p in module.parameters():
        p.requires_grad_(False)
    return module
