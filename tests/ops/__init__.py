"""The ops (harness.ops): the loss component and the twins, loop and vectorized."""
