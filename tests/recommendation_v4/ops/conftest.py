"""Shared pytest fixtures for the HSTU op tests (helpers live in `hstu_ops_testing.py`)."""

import pytest

from recommendation_v4.ops import kernel as kernel_module


@pytest.fixture
def fresh_fallback_log():
    """Forget which Triton fallbacks were logged, so a test can observe the one-time log."""
    saved = set(kernel_module._logged_fallbacks)
    kernel_module._logged_fallbacks.clear()
    yield
    kernel_module._logged_fallbacks.clear()
    kernel_module._logged_fallbacks.update(saved)
