"""Several processes, one run: the parts of training that only ranks need.

    devices.py     which devices and launches the harness accepts (read before torch is)
    sharding.py    trainer=fsdp's strategy;   shard_sums.py   a whole tensor's figures summed from its shards
    heartbeat.py   each rank's heartbeat file;   watchdog.py   a rank that dies or stops, named

The package imports nothing itself."""
