"""Fixtures of the storage/ tests: the DLIO 2.0.0 environment the replay and datagen tests run in."""

from __future__ import annotations

import pytest

from storage.dlio.environment.dlio_env import DlioEnvError, ensure_dlio_env
from tests.environment import unavailable


@pytest.fixture(scope="session")
def dlio_env():
    """.venv-dlio, built on first use; skips with one line where it cannot be built, fails under
    MLPERF_REQUIRE_DLIO=1 (CI)."""
    try:
        return ensure_dlio_env()
    except DlioEnvError as error:
        unavailable(f"no DLIO 2.0.0 env: {error}", require_env="MLPERF_REQUIRE_DLIO")
