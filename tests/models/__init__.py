"""The built-in models (harness.models)."""
