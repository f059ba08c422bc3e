"""Every input the fuzzer (tools/fuzz.py) ever found crashing is replayed here, and must now pass."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from fuzz import TARGETS  # noqa: E402

CASES = sorted((ROOT / "fixtures" / "fuzz").glob("*.bin"))


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_crash_input_is_handled(path: Path) -> None:
    target = path.name.split("-", 1)[0]
    TARGETS[target](path.read_bytes())


def test_the_regression_corpus_is_not_empty() -> None:
    assert CASES, "fixtures/fuzz/ should keep the inputs that once crashed"
