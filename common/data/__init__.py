"""common/data: moved here from the flat layout."""
