"""Signals (harness.signals): the gate, and real runs, sweeps and workers signalled, each ending within a bound."""
