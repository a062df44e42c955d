"""Data loading every trainer shares: the window loader, epochs, time windows, the batch arena."""
