"""common/run: moved here from the flat layout."""
