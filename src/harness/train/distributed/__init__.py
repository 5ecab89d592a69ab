"""Several processes, one run; the package imports nothing itself.

devices.py   devices and launches;   sharding.py   trainer=fsdp;   shard_sums.py   sums over shards
heartbeat.py   each rank's heartbeat;   watchdog.py   a rank that dies or stops"""
