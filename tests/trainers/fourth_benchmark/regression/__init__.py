"""A linear regression on one .npy file per sample: the fourth benchmark of the registry test."""
