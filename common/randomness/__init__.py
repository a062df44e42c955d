"""common/randomness: moved here from the flat layout."""
