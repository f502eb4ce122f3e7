"""A test-only DSpark proposer that, on every other verify step of a request, replaces our
drafter's tokens by the known greedy continuation with one wrong token.

Random tiny weights make DSpark's own drafts all rejected (the target rolls back all 5
positions); the oracle's drafts get 2 of 5 accepted (rolled back by 3). Alternating the two
within every request exercises both rollbacks, one after the other, in one vLLM engine.
The choice is by the parity of the row's token count: a fully rejected step adds 1 token, a
partially accepted one 3, so the parity flips after every step whichever comes first.
Our drafter still runs every step (the super() call).
Expected sequences come from the JSON file named by ORACLE_SEQUENCES: [prompt + greedy output, ...].
"""

from __future__ import annotations

import json
import os

from deepinfer_adapters.vllm_plugin.dspark import DSparkProposer

WRONG_AT = 2  # draft index replaced by a wrong token: 2 accepted per oracle step


class OracleProposer(DSparkProposer):
    def __init__(self, vllm_config) -> None:
        super().__init__(vllm_config)
        self.sequences = json.load(open(os.environ["ORACLE_SEQUENCES"]))

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **kw):
        drafts = super().propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings)
        for i, own in enumerate(drafts):
            n = int(num_tokens_no_spec[i])
            if not own or n % 2 == 0:  # even: keep our drafter's own tokens
                continue
            row = token_ids_cpu[i, :n].tolist()
            # a step's accepted tokens may run past max_tokens (vLLM trims the output later)
            seq = next(s for s in self.sequences if row[: len(s)] == s[:n])
            want = seq[n : n + len(own)]
            if len(want) > WRONG_AT:
                want[WRONG_AT] = (want[WRONG_AT] + 1) % 1000
            drafts[i] = want + own[len(want) :]  # past the known sequence: our (rejected) drafts
        return drafts
