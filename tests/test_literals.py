"""The literal prefilter never rejects a line its regex matches (checked on every built-in pattern
against every line of the rule fixtures), and recognises the simple shapes it is meant for."""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor.diagnosis.literals import required_literals
from logdoctor.diagnosis.rules import builtin_rules, compile_regex

ROOT = Path(__file__).resolve().parent.parent


def _patterns() -> list[str]:
    out: set[str] = set()
    for rule in builtin_rules():
        for sel in rule.selections.values():
            for group in [sel.where, *sel.any_of]:
                for m in group.values():
                    if isinstance(m, dict) and "regex" in m:
                        out.add(m["regex"])
    return sorted(out)


def test_prefilter_never_rejects_a_match() -> None:
    lines = [ln for p in sorted((ROOT / "fixtures" / "rules").rglob("*.log"))
             for ln in p.read_bytes().decode("utf-8", "replace").split("\n") if ln.strip()]
    checked = 0
    for pattern in _patterns():
        lits = required_literals(pattern)
        if lits is None:
            continue
        rx = compile_regex(pattern)
        for ln in lines:
            if rx.search(ln):
                hay = ln.lower() if lits[0] else ln
                assert any(lit in hay for lit in lits[1]), (pattern, ln)
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("pattern, expected", [
    ("Bootstrap Root : mismatch", (False, ("Bootstrap Root : mismatch",))),
    ("(?i)(CUDA out of memory|cudaErrorMemoryAllocation)", (True, ("cuda out of memory", "cudaerrormemoryallocation"))),
    ("colou?r scheme", (False, ("r scheme",))),
    ("abc|de", None),                 # a branch without a 4-character literal: no prefilter
    ("(a+)+$", None),
    ("x\\.y\\.zz", (False, ("x.y.zz",))),
    ("(?s)anything", None),
])
def test_shapes(pattern: str, expected: object) -> None:
    assert required_literals(pattern) == expected


@pytest.mark.parametrize("pattern, line", [
    ("a{1000}", "a" * 1000),
    ("(.{1,5}){1,4}[#@]", "some text #"),
    ("Error{1,3}: bad input", "Errorrr: bad input"),
    ("rank {0,4}1000 failed", "rank 1000 failed"),
    ("x{2,}yyyy", "xxxyyyy"),
])
def test_repeat_counts_are_not_required_text(pattern: str, line: str) -> None:
    # the digits of `{m,n}` were taken for a literal the line must contain: such regexes never matched
    assert compile_regex(pattern).search(line)
    lits = required_literals(pattern)
    assert lits is None or any(lit in (line.lower() if lits[0] else line) for lit in lits[1]), lits


def test_a_bar_inside_a_class_with_an_escaped_bracket_does_not_split() -> None:
    # `[\]|]` is one class: the pattern has one branch, whose literals every match holds
    assert required_literals(r"abcdef[\]|]ghijkl") == (False, ("abcdef",))
    assert required_literals(r"abcdef[\]|]gh|ijklmn") == (False, ("abcdef", "ijklmn"))
