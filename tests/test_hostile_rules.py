"""Rule files copied from strangers: nothing they say can run code, touch files, or hang the tool."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from logdoctor.diagnosis.engine import match_value
from logdoctor.diagnosis.rules import RuleError, _compile_matcher, check_dir, load_rule

BASE = """\
id: UNK950
name: hostile
title: A rule written by someone else
category: unknown
severity: error
match:
  x: {{event: traceback, where: {{message: {{regex: {pattern}}}}}}}
condition: x
explanation: whatever happened here
remedy: [do something]
examples: {{fires: [a.log], quiet: [b.log]}}
"""


def rule_file(tmp: Path, text: str, name: str = "hostile") -> Path:
    p = tmp / "rules" / "unknown" / f"{name}.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_catastrophic_backtracking_pattern_runs_in_linear_time(tmp_path: Path) -> None:
    rule = load_rule(rule_file(tmp_path, BASE.format(pattern="'^(a+)+$'")))
    matcher = rule.selections["x"].where["message"]
    hostile = "a" * 200_000 + "!"
    t0 = time.perf_counter()
    assert match_value(hostile, matcher) is False
    # a backtracking engine needs ~2^200000 steps here; RE2 is linear. Generous bound, not a benchmark.
    assert time.perf_counter() - t0 < 5.0


def test_backreferences_and_lookaround_are_refused(tmp_path: Path) -> None:
    for pattern in ("'(a)\\1'", "'(?=x)y'", "'(?<!x)y'"):
        with pytest.raises(RuleError, match="bad regex"):
            load_rule(rule_file(tmp_path, BASE.format(pattern=pattern)))


def test_billion_laughs_is_refused_before_expansion(tmp_path: Path) -> None:
    bomb = ["a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']"]
    prev = "a"
    for name in "bcdefghi":
        bomb.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
        prev = name
    t0 = time.perf_counter()
    with pytest.raises(RuleError, match="aliases are not allowed"):
        load_rule(rule_file(tmp_path, "\n".join(bomb) + "\n"))
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['touch /tmp/pwned']",
                                 "!!python/name:os.system", "!!python/object/new:subprocess.Popen [['true']]"])
def test_object_tags_never_construct(tmp_path: Path, tag: str) -> None:
    marker = Path("/tmp/pwned")
    marker.unlink(missing_ok=True)
    text = BASE.format(pattern="'x'").replace("explanation: whatever happened here", f"explanation: {tag}")
    with pytest.raises(RuleError):
        load_rule(rule_file(tmp_path, text))
    assert not marker.exists()


def test_deeply_nested_yaml_is_an_error_not_a_crash(tmp_path: Path) -> None:
    text = BASE.format(pattern="'x'") + "extra: " + "[" * 5000 + "]" * 5000 + "\n"
    rules, problems = check_dir(rule_file(tmp_path, text).parent.parent)
    assert not rules and len(problems) == 1


@pytest.mark.parametrize("bad, message", [
    ("match: [1, 2]", "match"),
    ("condition: 42", "condition"),
    ("remedy: do this", "remedy"),
    ("priority: 'high'", "priority"),
    ("confidence: 7", "confidence"),
])
def test_wrong_types_are_reported_with_a_line(tmp_path: Path, bad: str, message: str) -> None:
    key = bad.split(":")[0]
    lines = [ln for ln in BASE.format(pattern="'x'").splitlines()
             if not ln.startswith(key + ":") and not (key == "match" and ln.startswith("  x:"))]
    text = "\n".join(lines) + "\n" + bad + "\n"
    with pytest.raises(RuleError) as e:
        load_rule(rule_file(tmp_path, text))
    assert message in str(e.value) and e.value.line >= 1


def test_templates_cannot_reach_attributes() -> None:
    from logdoctor.diagnosis.engine import render
    values = {"ev": {"message": "hi"}, "run": {}}
    # no attribute is reached: the placeholder has no value, so its sentence is left out
    assert render("{ev.message.__class__}", values) == ""
    assert render("Said {ev.message}. Class {ev.message.__class__}.", values) == "Said hi."
    assert render("{ev.message}", values) == "hi"
    assert render("{{ev.message}}", values) == "{ev.message}"


def test_unused_matcher_keys_stay_inert() -> None:
    m = _compile_matcher({"regex": "a+", "contains": "b"})
    assert match_value("ab", m) and not match_value("a", m)
