"""The benchmarks (benchmarks/) run end to end at a tiny size; no timing is asserted."""
