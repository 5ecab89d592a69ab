"""The command line (harness.cli): train.py run for real, and the door that refuses bad values in one line."""
