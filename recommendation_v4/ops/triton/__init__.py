"""Triton kernels for the HSTU ops. Import the kernel modules lazily (the dispatchers in
`recommendation_v4.ops` do): `triton.jit` decides at import time whether a kernel is
compiled or interpreted (`TRITON_INTERPRET=1`)."""
