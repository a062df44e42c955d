"""MLPerf: the mllog tracker and the official compliance check of its log."""
