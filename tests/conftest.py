from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SHARED


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present (the repository's ../shared folder)")
    return SHARED
