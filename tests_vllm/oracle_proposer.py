"""A test-only DSpark proposer that proposes the known greedy continuation with one wrong token.

Random tiny weights make DSpark's own drafts all rejected; this one forces partial acceptance
(2 of 5 per step) so the target's rollback of the rejected positions is exercised inside vLLM.
It still runs our drafter every step (the super() call) and then overwrites its tokens.
Expected sequences come from the JSON file named by ORACLE_SEQUENCES: [prompt + greedy output, ...].
"""

from __future__ import annotations

import json
import os

from deepinfer_adapters.vllm_plugin.dspark import DSparkProposer

WRONG_AT = 2  # draft index replaced by a wrong token: 2 accepted per full step


class OracleProposer(DSparkProposer):
    def __init__(self, vllm_config) -> None:
        super().__init__(vllm_config)
        self.sequences = json.load(open(os.environ["ORACLE_SEQUENCES"]))

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **kw):
        drafts = super().propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings)
        for i, own in enumerate(drafts):
            if not own:
                continue
            n = int(num_tokens_no_spec[i])
            row = token_ids_cpu[i, :n].tolist()
            seq = next(s for s in self.sequences if s[:n] == row)
            want = seq[n : n + len(own)]
            if len(want) > WRONG_AT:
                want[WRONG_AT] = (want[WRONG_AT] + 1) % 1000
            drafts[i] = want
        return drafts
