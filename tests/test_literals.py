"""The literal prefilter never rejects a line its regex matches (checked on every built-in pattern
against every line of the rule fixtures), and recognises the simple shapes it is meant for."""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor.diagnosis.literals import fold_case, required_literals
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
                hay = fold_case(ln) if lits[0] else ln
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
    ("(?s)anything", (False, ("anything",))),                # flags change no literal
    ("(GatedRepoError|HFValidationError)$", (False, ("GatedRepoError", "HFValidationError"))),  # a group's
    (r"(?m):\d+ in (load_model|weight_loader)$", (False, ("load_model", "weight_loader"))),  # the group, not " in "
    ("undefined symbol: |(?i)DLL load failed", (True, ("undefined symbol: ", "dll load failed"))),  # inline flag
    ("ab+cdef", (False, ("bcdef",))),                    # a repeated character ends one run and starts the next
    ("(?i)(draft|MTP|eagle)", (True, ("draft", "mtp", "eagle"))),
    ("(draft)?cuda graph|(x|yz)w", None),               # an optional group holds nothing; `yzw`/`xw` too short
    (r"\x41bcdef", None),                                # an escape not read here: no prefilter
    ("(?=abcd)abcd|(?<name>efgh)", None),                 # a lookaround: no prefilter
    ("(?P<name>efgh)ijk|[[:alpha:]]lmnop", (False, ("efgh", "lmnop"))),  # the longer of two required parts
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
    assert lits is None or any(lit in (fold_case(line) if lits[0] else line) for lit in lits[1]), lits


def test_a_bar_inside_a_class_with_an_escaped_bracket_does_not_split() -> None:
    # `[\]|]` is one class: the pattern has one branch, whose literals every match holds
    assert required_literals(r"abcdef[\]|]ghijkl") == (False, ("abcdef",))
    assert required_literals(r"abcdef[\]|]gh|ijklmn") == (False, ("abcdef", "ijklmn"))


def _net_patterns() -> list[str]:
    from logdoctor.diagnosis.net_data import load_net
    return sorted({t.regex for t in load_net().terms if t.regex})


def test_prefilter_never_rejects_a_match_of_any_shipped_pattern_on_any_fixture_line() -> None:
    """Every rule and net regex, against every line of every fixture log (and each line upper- and
    lower-cased, and with `s` written as the long s RE2 folds onto it): a line the regex matches holds one
    of its literals."""
    lines = {ln for p in sorted((ROOT / "fixtures").rglob("*.log"))
             for ln in p.read_bytes().decode("utf-8", "replace").split("\n") if ln.strip()}
    lines |= {v for ln in list(lines) for v in (ln.upper(), ln.lower(), ln.replace("s", "\u017f"))}
    patterns = [p for p in sorted(set(_patterns()) | set(_net_patterns())) if required_literals(p) is not None]
    assert len(patterns) > 150
    checked = 0
    for pattern in patterns:
        ci, lits = required_literals(pattern)  # type: ignore[misc]
        rx = compile_regex(pattern)
        for ln in lines:
            if rx.search(ln):
                hay = fold_case(ln) if ci else ln
                assert any(lit in hay for lit in lits), (pattern, ln)
                checked += 1
    assert checked > 1000


def test_most_shipped_patterns_have_a_prefilter() -> None:
    patterns = sorted(set(_patterns()) | set(_net_patterns()))
    without = [p for p in patterns if required_literals(p) is None]
    assert len(without) < len(patterns) // 10, without


def test_deeply_nested_groups_get_no_prefilter_and_no_recursion_error() -> None:
    # RE2 takes ~1,000 levels of nesting; the reader stops at MAX_DEPTH instead of recursing that deep
    from logdoctor.diagnosis.literals import MAX_DEPTH
    deep = "(" * 900 + "abcdef" + ")" * 900
    assert compile_regex(deep).search("xx abcdef")
    assert required_literals(deep) is None
    shallow = "(" * MAX_DEPTH + "abcdef" + ")" * MAX_DEPTH
    assert required_literals(shallow) == (False, ("abcdef",))
