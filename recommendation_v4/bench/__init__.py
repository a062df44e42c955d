"""Speed and memory measurements of DLRM-HSTU ("benchmark" means the MLPerf one)."""
