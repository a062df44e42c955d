"""common/config: moved here from the flat layout."""
