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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the package once. Many tests run `python -m logdoctor.cli` from the checkout; where
    PYTHONDONTWRITEBYTECODE is set (as on CI) each such process would otherwise compile ~200 modules again
    (~0.25 s a process). Reading .pyc files is allowed under that variable; only writing them by import is not."""
    import compileall
    compileall.compile_dir(str(ROOT / "logdoctor"), quiet=1, workers=1)
