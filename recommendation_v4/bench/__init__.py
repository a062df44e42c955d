"""recommendation_v4/bench: moved here from the flat layout."""
