"""The transformers V4-Flash harness moved to ``deepinfer_adapters.model_impl.hf_v4``
(the benchmarks use it too); this name stays for the tests that import it from here."""

from deepinfer_adapters.model_impl.hf_v4 import (  # noqa: F401
    HFLoadReport,
    build_hf_model,
    convert_state_dict,
    copy_weights_to_hf,
    hf_config,
    hf_config_from_dict,
    hf_logits,
    hf_model_from_ours,
    name_mapping,
    new_hf_model,
    use_lowest_index_tie_break,
)
