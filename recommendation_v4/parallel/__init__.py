"""DLRM-HSTU's parallelism: sharding, resharding on resume, qcomms, the train pipeline, table init."""
