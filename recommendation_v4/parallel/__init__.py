"""recommendation_v4/parallel: moved here from the flat layout."""
