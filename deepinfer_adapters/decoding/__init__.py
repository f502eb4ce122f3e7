"""Host-agnostic token choice: sampling parameters, the seeded, batch-invariant sampler,
and structured-output grammars (xgrammar)."""
