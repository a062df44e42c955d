"""retinanet/bench: moved here from the flat layout."""
