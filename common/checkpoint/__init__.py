"""common/checkpoint: moved here from the flat layout."""
