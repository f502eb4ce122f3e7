"""Speculative decoding in the standalone engine (DSpark / 0731 DSpark draft stages).

After a step samples a sequence's next token, the model's draft stages propose up to
``k`` more (``model.draft``: one block per sequence, from the rings the main forward
keeps in step). The next step feeds the last token and the drafts as one chunk and
samples a token after every one of its rows, each with the request's own sampler at
that position. Draft i is accepted while it equals the token sampled before it; the
first mismatch ends the run with the sampled token, and with all k accepted the last
row's token comes as a bonus. So a step yields 1..k+1 tokens, exactly the tokens the
engine would have produced one at a time (greedy or seeded sampling alike: the sampler
draws from a hash of (seed, position), so a token depends only on its logits and
position). The rejected drafts' state is dropped by restarting the sequence after its
accepted prefix: the state is sized to rewind over k positions (model_impl/state.py).

Confidence-scheduled verification: DSpark also predicts, per draft token, the logit of
its acceptance. With ``min_confidence`` > 0 only the leading drafts whose cumulative
acceptance probability stays at or above it are verified (a short verify when the
drafter is unsure); 0 verifies all k.
"""

from __future__ import annotations

import torch

from deepinfer_adapters.errors import ConfigError
from deepinfer_adapters.model_impl.state import StateCache


def accepted(drafts: list[int], sampled: list[int]) -> int:
    """How many leading drafts equal the token sampled before them (``sampled`` has one
    token per verified row: len(drafts) + 1)."""
    n = 0
    while n < len(drafts) and drafts[n] == sampled[n]:
        n += 1
    return n


class Drafter:
    """Proposes draft tokens with the model's draft stages."""

    def __init__(self, model: torch.nn.Module, num_tokens: int, min_confidence: float = 0.0) -> None:
        if not getattr(model, "with_draft", False) or not hasattr(model, "draft"):
            raise ConfigError(f"speculative decoding needs a model with draft stages (DSpark); "
                              f"{type(model).__name__} here has none", "speculative_tokens")
        block = model.cfg.draft.block_size
        if not 1 <= num_tokens <= block:
            raise ConfigError(f"speculative_tokens is {num_tokens}; this model's draft block proposes "
                              f"1..{block}", "speculative_tokens")
        self.model, self.num_tokens, self.min_confidence = model, num_tokens, min_confidence

    def __call__(self, keys: list[int], last_tokens: list[int], positions: list[int], slots: list[int],
                 state: StateCache) -> list[list[int]]:
        """Drafts per sequence whose last processed position is ``positions[i]`` and whose next
        token is ``last_tokens[i]`` (``keys``: the requests, for drafters that want them)."""
        if not keys:
            return []
        out = self.model.draft(last_tokens, positions, slots, state)
        tokens = out.tokens[:, : self.num_tokens].tolist()
        if self.min_confidence > 0:
            sure = torch.sigmoid(out.confidence[:, : self.num_tokens].float()).cumprod(-1) >= self.min_confidence
            return [row[: int(n)] for row, n in zip(tokens, sure.sum(-1).tolist())]
        return tokens
