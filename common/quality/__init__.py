"""Quality metrics computed across ranks."""
