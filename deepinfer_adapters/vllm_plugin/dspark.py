"""DSpark speculative decoding under vLLM: ``--speculative-config '{"method": "dspark", "num_speculative_tokens": 5}'``.

vLLM implements ``dspark`` only in its V2 GPU model runner, with its own draft
model class fed by the target's auxiliary hidden states. Our drafter is part of
our model: the target's forward already writes every DSpark stage's window ring
(``observe``), and ``draft()`` proposes the whole block in one pass. So for our
architectures the config hook routes ``dspark`` to vLLM's ``custom_class``
proposer interface with :class:`DSparkProposer`, which works on every runner
(V1 included, i.e. the CPU). Verification is vLLM's rejection sampler; rejected
drafts cost nothing to undo because our state is sized for rewinds
(``state_spec(rewind=k)``, model_impl/state.py).

vLLM's V1 runner has no confidence-scheduled (adaptive) verification; a request
for it is refused by vLLM with its own error.
"""

from __future__ import annotations

import importlib
from typing import Any

PROPOSER = "deepinfer_adapters.vllm_plugin.dspark.DSparkProposer"


def is_our_proposer(path: str | None) -> bool:
    """``path`` names DSparkProposer or a subclass of it (e.g. one with another draft policy)."""
    if path == PROPOSER:
        return True
    module, _, name = (path or "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(cls, type) and issubclass(cls, DSparkProposer)


def route_dspark_to_our_proposer(vllm_config: Any) -> None:
    """Config hook step: ``method="dspark"`` -> ``custom_class`` with our proposer (the draft is
    the target model itself; vLLM's dspark draft-model config is dropped)."""
    spec = vllm_config.speculative_config
    spec.method = "custom_class"
    spec.model = PROPOSER
    spec.draft_model_config = spec.target_model_config
    spec.draft_parallel_config = spec.target_parallel_config
    spec.parallel_drafting = False
    spec.prompt_lookup_max = spec.prompt_lookup_min = 0


class DSparkProposer:
    """vLLM's custom proposer contract: ``__init__(vllm_config)``, ``load_model(target)`` and
    ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None)``
    returning each input-batch row's draft tokens (empty for rows that sampled nothing)."""

    def __init__(self, vllm_config: Any) -> None:
        self.num_tokens = vllm_config.speculative_config.num_speculative_tokens
        self.target = None

    def load_model(self, target_model: Any) -> None:
        if not hasattr(target_model, "propose_dspark"):
            raise TypeError(f"{PROPOSER} drafts with deepinfer-adapters' own model classes; vLLM built "
                            f"{type(target_model).__name__}")
        self.target = target_model

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any,
                slot_mappings: Any = None, **_: Any) -> list[list[int]]:
        return self.target.propose_dspark(sampled_token_ids, num_tokens_no_spec, self.num_tokens)
