"""The model checks of the preflight: bugs planted in TinyLM, each caught by its check; no false alarm on the
built-in models."""
