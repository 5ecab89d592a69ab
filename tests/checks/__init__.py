"""The preflight's checks (harness.checks) held to the bugs they claim to catch: the data checks (data/), the
model checks on a tiny model (model/) and on real LLM code (real_models/)."""
