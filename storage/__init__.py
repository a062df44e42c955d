"""The storage and load toolkit, a layer above the training runtime (common/): the load profile of a
run, its DLIO export and replays, emulated accelerators, the host's page cache and throttled
storage, and the sweep. It imports common/; common/ never imports it."""
