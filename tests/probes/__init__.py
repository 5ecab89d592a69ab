"""The probes (harness.probes): their outputs read back, their numbers, their plumbing. A fork that deletes the
probes deletes this folder with them (tests/project/test_layout.py)."""
