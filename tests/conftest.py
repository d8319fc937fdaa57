from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SHARED


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present (the repository's ../shared folder)")
    return SHARED


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray cluster of two CPUs, started once for every test that needs one (~14 s to start)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'servesim[ray]')")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
