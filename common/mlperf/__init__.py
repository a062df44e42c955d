"""common/mlperf: moved here from the flat layout."""
