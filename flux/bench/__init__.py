"""Speed measurements of FLUX.1 ("benchmark" means the MLPerf one)."""
