"""The what-if model: a discrete-event simulation (SimPy) of every rank's loader against a storage and
its client hosts' cores, driven by measured runs' load profiles, for clusters larger than any run here
(`python -m storage.whatif`, docs/whatif.md)."""
