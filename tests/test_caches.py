"""Damaged caches never break or slow the tool for good: they are ignored and written anew."""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor import grammar, rules


def test_damaged_grammar_cache_is_removed(tmp_path: Path) -> None:
    cache = tmp_path / "sglang.lark.cache"
    cache.write_bytes(b"garbage\n")
    grammar._drop_if_damaged(str(cache))
    assert not cache.exists()
    good = tmp_path / "ok.cache"
    good.write_bytes(b"0" * 64 + b"\nrest")
    grammar._drop_if_damaged(str(good))
    assert good.exists()


def test_damaged_rule_cache_is_ignored_and_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    d = Path(__file__).resolve().parent.parent / "rules"
    first, problems = rules.check_dir(d)
    assert not problems
    caches = list((tmp_path / "logdoctor").glob("rules-*.json"))
    assert len(caches) == 1
    caches[0].write_text('{"broken')
    again, problems = rules.check_dir(d)
    assert not problems and [r.id for r in again] == [r.id for r in first]
    assert caches[0].read_text().startswith("{") and len(caches[0].read_text()) > 1000
