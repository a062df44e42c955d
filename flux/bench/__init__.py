"""flux/bench: moved here from the flat layout."""
