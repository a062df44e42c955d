"""common/distributed: moved here from the flat layout."""
