"""V4 draft heads (model_spec.md 2.9): the V4-Flash MTP layer and the 0731 DSpark stages.

MTP (``mtp.0``): for the token pair (stream H_t of the main model before its HC
head, token t+1) at position t:
``x = e_proj(enorm(embed(tok_{t+1}))) + h_proj(hnorm(H_t))`` (per stream), one
window-only V4 block with its own ring, then its own HC head, norm and the shared
head: logits for token t+2. The block's output stream feeds a further step.

DSpark (0731, ``mtp.0-2``), as in the V4.1 reference and vLLM's V4 DSpark model,
with V4 blocks (per-sublayer mHC, V4 attention numerics) since 0731 is a V4 backbone:
- context: ``main_x = main_norm(main_proj(main_hidden))`` where main_hidden is the
  target layers' inputs averaged over the streams; every stage turns main_x into
  window KV (its own wkv, kv_norm, RoPE, FP8) in its own ring. Nothing else runs.
- draft: the block ``[last sampled token, noise x (block-1)]`` at positions p+1..,
  every query sees the ring (positions <= p) and the whole block (non-causal); the
  stages run in order, then ``mtp.2``'s HC head, norm and the shared head.
- Markov walk: ``logits_i += markov_w2(markov_w1[tok_i])``, pick tok_{i+1};
  confidence ``proj([hidden_i ; markov_w1[tok_i]])`` (fp32; a sigmoid gives the
  acceptance probability).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from deepinfer_adapters.config import ModelConfig
from deepinfer_adapters.model_impl.base import DraftOutput, ModelOutput
from deepinfer_adapters.model_impl.batch import ForwardBatch
from deepinfer_adapters.model_impl.deepseek_v4 import BlockV4, HyperHead
from deepinfer_adapters.model_impl.layers.attention_v4 import AttentionV4
from deepinfer_adapters.model_impl.layers.linear import Linear
from deepinfer_adapters.model_impl.layers.norm import RMSNorm
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.model_impl.state import StateCache

if TYPE_CHECKING:
    from deepinfer_adapters.model_impl.deepseek_v4 import DeepseekV4ForCausalLM


class MTPLayerV4(BlockV4):
    def __init__(self, cfg: ModelConfig, stage: int) -> None:
        super().__init__(cfg, cfg.draft_layers[stage])
        D, block = cfg.hidden_size, cfg.quant.fp8_block[1]
        self.e_proj = Linear(D, D, quantized=True, act_block=block)
        self.h_proj = Linear(D, D, quantized=True, act_block=block)
        self.enorm = RMSNorm(D, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(D, cfg.rms_norm_eps)
        self.norm = RMSNorm(D, cfg.rms_norm_eps)
        self.hc_head = HyperHead(cfg)


class DSparkAttentionV4(AttentionV4):
    """Window-only attention whose ring holds the *target's* context KV (from main_x) and
    whose queries, a draft block, see that ring and their whole block."""

    def write_context(self, main_x: torch.Tensor, batch: ForwardBatch, state: StateCache,
                      numerics: Numerics) -> None:
        kv = self.project_kv(main_x, self.rope(batch.positions), numerics)
        for i in range(batch.num_seqs):
            self.window_keys(state, batch.slots[i], batch.start_pos[i], kv[batch.rows(i)])

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: StateCache, numerics: Numerics) -> torch.Tensor:
        freqs = self.rope(batch.positions)
        q, _, kv = self.project_q_kv(x, freqs, numerics)
        outs = []
        for i in range(batch.num_seqs):
            rows, start = batch.rows(i), batch.start_pos[i]  # start = first draft position = p + 1
            ring = state.fixed(self.key, "window_kv")[batch.slots[i]]
            ctx = ring[torch.arange(max(0, start - self.window), start) % self.window].to(kv.dtype)
            keys = torch.cat([ctx, kv[rows]])
            idx = torch.arange(keys.shape[0]).expand(batch.seq_len(i), -1)
            outs.append(self.attend(q[rows], keys, idx, numerics))
        return self.output(torch.cat(outs), freqs, numerics)


class MarkovHead(nn.Module):
    def __init__(self, vocab: int, rank: int) -> None:
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)  # previous token -> rank-r code
        self.markov_w2 = Linear(rank, vocab, quantized=False)  # code -> vocabulary bias
        self.requires_grad_(False)


class ConfidenceHead(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = Linear(dim, 1, quantized=False)
        self.requires_grad_(False)


class DSparkStageV4(BlockV4):
    attention_cls = DSparkAttentionV4

    def __init__(self, cfg: ModelConfig, stage: int) -> None:
        super().__init__(cfg, cfg.draft_layers[stage])
        assert cfg.draft is not None
        D = cfg.hidden_size
        if stage == 0:
            self.main_proj = Linear(D * len(cfg.draft.target_layer_ids), D, quantized=True,
                                    act_block=cfg.quant.fp8_block[1])
            self.main_norm = RMSNorm(D, cfg.rms_norm_eps)
        if stage == cfg.draft.num_stages - 1:
            self.norm = RMSNorm(D, cfg.rms_norm_eps)
            self.hc_head = HyperHead(cfg)
            self.markov_head = MarkovHead(cfg.vocab_size, cfg.draft.markov_rank)
            self.confidence_head = ConfidenceHead(D + cfg.draft.markov_rank)


def build_draft_layers(cfg: ModelConfig) -> list[nn.Module]:
    assert cfg.draft is not None
    cls = MTPLayerV4 if cfg.draft.kind == "mtp" else DSparkStageV4
    return [cls(cfg, s) for s in range(cfg.draft.num_stages)]


class MTPDrafter:
    """V4-Flash's MTP head over a model's ``mtp`` layers (a plain object: no parameters of its own)."""

    def __init__(self, model: DeepseekV4ForCausalLM) -> None:
        self.model = model

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, hidden: torch.Tensor, state: StateCache, *, stage: int = 0) -> ModelOutput:
        """batch: token t+1 at position t for every row whose main-model stream is ``hidden``
        [T, hc, D]. Returns logits (for batch.default_logits_rows()) of token t+2 and, in
        ``hidden``, this layer's output stream for a further draft step."""
        m = self.model
        num = m.numerics
        layer = m.mtp[stage]
        e = layer.enorm(m.embed_tokens(batch.input_ids))
        x = layer.e_proj(e, num).unsqueeze(1) + layer.h_proj(layer.hnorm(hidden.to(num.dtype)), num)
        x = layer(x, batch, state, num)
        rows = batch.default_logits_rows()
        return ModelOutput(logits=m.logits(layer.norm(layer.hc_head(x[rows]))), hidden=x)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


class DSparkDrafter:
    """The 0731 DSpark stages over a model's ``mtp`` layers."""

    def __init__(self, model: DeepseekV4ForCausalLM) -> None:
        self.model = model

    def observe(self, main_hidden: torch.Tensor, batch: ForwardBatch, state: StateCache) -> None:
        """Write every stage's context KV for the batch's tokens (called by the main forward)."""
        num = self.model.numerics
        first = self.model.mtp[0]
        main_x = first.main_norm(first.main_proj(main_hidden.to(num.dtype), num))
        for stage in self.model.mtp:
            stage.attn.write_context(main_x, batch, state, num)

    @torch.no_grad()
    def block_forward(self, batch: ForwardBatch, state: StateCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft blocks (sequence i's block at positions start_pos[i].., = p + 1..) through the
        stages -> (base logits [T, V] fp32 of every row, collapsed pre-norm hidden [T, D])."""
        m = self.model
        x = m.embed_tokens(batch.input_ids).unsqueeze(1).repeat(1, m.cfg.hc_mult, 1)
        for stage in m.mtp:
            x = stage(x, batch, state, m.numerics)
        last = m.mtp[-1]
        h = last.hc_head(x)
        return m.logits(last.norm(h)), h

    def block_batch(self, last_tokens: list[int], positions: list[int], slots: list[int]) -> ForwardBatch:
        """Draft blocks ``[last token, noise x (block_size - 1)]`` at positions p + 1.."""
        draft = self.model.cfg.draft
        assert draft is not None and draft.noise_token_id is not None
        noise = [draft.noise_token_id] * (draft.block_size - 1)
        return ForwardBatch.build([(s, p + 1, [t, *noise]) for t, p, s in zip(last_tokens, positions, slots)])

    @torch.no_grad()
    def draft(self, last_tokens: list[int], positions: list[int], slots: list[int], state: StateCache,
              sample: Callable[[torch.Tensor], torch.Tensor] = greedy) -> DraftOutput:
        """Propose ``block_size`` tokens for each sequence whose last processed position is
        ``positions[i]`` and whose next token (sampled from the main model) is ``last_tokens[i]``."""
        logits, hidden = self.block_forward(self.block_batch(last_tokens, positions, slots), state)
        n, bs = len(slots), self.model.cfg.draft.block_size
        logits, hidden = logits.view(n, bs, -1), hidden.view(n, bs, -1)
        markov = self.model.mtp[-1].markov_head
        prev, out, codes = torch.tensor(last_tokens, dtype=torch.long), [], []
        for i in range(bs):  # sequential: draft i's bias comes from the token drafted before it
            code = markov.markov_w1.weight[prev].to(hidden.dtype)
            logits[:, i] += markov.markov_w2(code.float(), self.model.numerics)
            prev = sample(logits[:, i])
            out.append(prev)
            codes.append(code)
        feats = torch.cat([hidden, torch.stack(codes, dim=1)], dim=-1).float()
        conf = self.model.mtp[-1].confidence_head.proj(feats, self.model.numerics).squeeze(-1)
        return DraftOutput(tokens=torch.stack(out, dim=1), logits=logits, confidence=conf)


def make_drafter(model: DeepseekV4ForCausalLM) -> MTPDrafter | DSparkDrafter:
    assert model.cfg.draft is not None
    return MTPDrafter(model) if model.cfg.draft.kind == "mtp" else DSparkDrafter(model)
