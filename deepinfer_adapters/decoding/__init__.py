"""Host-agnostic token choice: sampling parameters and the seeded, batch-invariant
sampler (later: speculative verification, the confidence scheduler, grammar masks)."""
