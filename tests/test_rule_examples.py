"""Every rule's `fires` / `quiet` examples, collected as one test each (sqlfluff-style)."""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor.diagnosis.rules import check_dir
from logdoctor.diagnosis.ruletest import fires_on

ROOT = Path(__file__).resolve().parent.parent
RULES, PROBLEMS = check_dir(ROOT / "rules")


def test_builtin_rules_are_valid() -> None:
    assert [str(p) for p in PROBLEMS] == []
    assert len(RULES) >= 4


def _cases() -> list[tuple[str, str, Path]]:
    out = []
    for rule in sorted(RULES, key=lambda r: r.id):
        for which in ("fires", "quiet"):
            for path in rule.example_paths(which):
                out.append((rule.id, which, path))
    return out


@pytest.mark.parametrize("rule_id, which, path", _cases(),
                         ids=[f"{r}-{w}-{p.name}" for r, w, p in _cases()])
def test_rule_example(rule_id: str, which: str, path: Path) -> None:
    rule = next(r for r in RULES if r.id == rule_id)
    assert path.is_file(), f"{rule_id}: example {path} missing"
    assert fires_on(rule, path) is (which == "fires")


def test_every_rule_has_both_kinds_of_example() -> None:
    for rule in RULES:
        assert rule.examples["fires"] and rule.examples["quiet"], rule.id


def test_ids_and_names_are_unique() -> None:
    assert len({r.id for r in RULES}) == len(RULES)
    assert len({r.name for r in RULES}) == len(RULES)
