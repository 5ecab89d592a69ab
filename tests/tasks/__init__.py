"""The tasks (harness.tasks): the doctor's diagnosis, and mode=eval."""
