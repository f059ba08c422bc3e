from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture(autouse=True)
def _no_logdoctor_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's LOGDOCTOR_* settings (or a config file above the repo) must not change what tests see."""
    import os
    for name in list(os.environ):
        if name.startswith("LOGDOCTOR_"):
            monkeypatch.delenv(name)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
