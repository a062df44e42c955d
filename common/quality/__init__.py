"""common/quality: moved here from the flat layout."""
