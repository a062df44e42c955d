"""Plain PyTorch references for every HSTU op; the Triton kernels are tested against these."""
