"""Runs past one process: DDP, FSDP and torch.compile, the door's rules for them, ranks that die or stop, the
watchdog, and what scaling a run out changes."""
