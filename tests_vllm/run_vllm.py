"""Child process: vllm.LLM over a checkpoint, greedy, mixed-length prompts -> JSON.

Usage: run_vllm MODEL_DIR DTYPE OUT_JSON [SPECULATIVE_CONFIG_JSON]
DSPARK_PROPOSER=module.Class: the class that {"method": "dspark"} is routed to (a test subclass of
our DSparkProposer), set here in the process whose config hook does the routing."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    model_dir, dtype, out = sys.argv[1:4]
    speculative = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    if os.environ.get("DSPARK_PROPOSER"):
        from deepinfer_adapters.vllm_plugin import dspark

        dspark.PROPOSER = os.environ["DSPARK_PROPOSER"]
    from vllm import LLM, SamplingParams

    from tests_vllm.helpers import MAX_TOKENS, prompts

    t0 = time.time()
    llm = LLM(model=model_dir, dtype=dtype, enforce_eager=True, max_model_len=256, max_num_seqs=4,
              seed=0, speculative_config=speculative, disable_log_stats=False)
    t1 = time.time()
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    res = llm.generate([{"prompt_token_ids": p} for p in prompts()], params, use_tqdm=False)
    t2 = time.time()
    from vllm import ModelRegistry

    arch = llm.llm_engine.model_config.architecture
    model_cls = ModelRegistry._try_load_model_cls(arch)
    metrics = {m.name: getattr(m, "value", getattr(m, "values", None)) for m in llm.get_metrics()
               if "spec_decode" in m.name}  # a Vector (per-position counts) has .values
    json.dump({"tokens": [list(r.outputs[0].token_ids) for r in res], "init_s": t1 - t0, "generate_s": t2 - t1,
               "spec_metrics": metrics,
               "model_cls": f"{model_cls.__module__}:{model_cls.__qualname__}", "pid": os.getpid()},
              open(out, "w"))


if __name__ == "__main__":
    main()
