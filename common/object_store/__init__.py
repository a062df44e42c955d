"""Datasets in an S3-compatible object store: `s3://bucket/prefix` wherever a data path is taken.

- `location`: `ObjectPath`, the small part of pathlib's API the loaders use, over objects;
  `Location` is either, a `Path` or an `ObjectPath`; `data_location(text)` makes one from text, and
  `config_location(config, field)` from a config's binding, once, as the config is read.
- `endpoint`: where the store is and which profile signs (the AWS variables and config files a
  user already has); never the secrets themselves.
- `client`: every request (GET, ranged GET, HEAD, LIST, PUT) goes through one client per process,
  which times it and counts it (`requests`), for the load profile.
- `requests`: the tally of requests by kind, sizes and latencies.
- `publish`: a locally generated dataset uploaded to a prefix (multipart when large).
"""
