"""Speed measurements of RetinaNet ("benchmark" means the MLPerf one)."""
