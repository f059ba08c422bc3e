from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor.diagnosis.rules import RuleError, check_dir, load_rule

ROOT = Path(__file__).resolve().parent.parent
GOOD = """\
id: CFG900
name: {name}
title: A test rule for the loader
category: configuration
severity: error
match:
  port: {{event: port_unavailable}}
condition: port
explanation: Port {{ev.port}} was busy.
remedy: [Pick another --port.]
examples:
  fires: [fixtures/logs/v0.5-port-in-use.log]
  quiet: [fixtures/logs/v0.4-tp8.log]
"""


def write(tmp: Path, name: str, text: str) -> Path:
    d = tmp / "rules" / "configuration"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.yaml"
    p.write_text(text)
    return p


def test_good_rule_loads(tmp_path: Path) -> None:
    rule = load_rule(write(tmp_path, "busy-port", GOOD.format(name="busy-port")))
    assert rule.id == "CFG900" and rule.fatal and rule.category == "configuration"


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.replace("match:", "a: &x [1]\nb: *x\nmatch:"), "aliases are not allowed"),
    (lambda t: t.replace("title: A test rule for the loader", "title: !!python/object/apply:os.system ['true']"), "could not determine a constructor"),
    (lambda t: t + "colour: red\n", "Additional properties are not allowed"),
    (lambda t: t.replace("severity: error", "severity: 3"), "severity"),
    (lambda t: t.replace("{event: port_unavailable}", "{event: port_unavailable, where: {port: {regex: '(a)\\1'}}}"), "bad regex"),
    (lambda t: t.replace("{event: port_unavailable}", "{event: no_such_kind}"), "unknown event kind"),
    (lambda t: t.replace("condition: port", "condition: port and (missing"), "condition"),
    (lambda t: t.replace("condition: port", "condition: nope"), "unknown selection"),
    (lambda t: t.replace("id: CFG900", "id: MEM900"), "must start with CFG"),
    (lambda t: t.replace("Port {ev.port} was busy.", "Port {ev.__class__()} was busy."), "bad placeholder"),
])
def test_bad_rules_are_rejected_with_file_and_line(tmp_path: Path, mutate, message: str) -> None:
    p = write(tmp_path, "busy-port", mutate(GOOD.format(name="busy-port")))
    with pytest.raises(RuleError) as e:
        load_rule(p)
    assert message in str(e.value)
    assert str(e.value).startswith(f"{p}:")
    assert e.value.line >= 1


def test_name_must_match_file(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="must equal the file name"):
        load_rule(write(tmp_path, "other", GOOD.format(name="busy-port")))


def test_huge_rule_file_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "busy-port", GOOD.format(name="busy-port") + "# " + "x" * 300_000 + "\n")
    with pytest.raises(RuleError, match="limited to"):
        load_rule(p)


def test_duplicate_ids_are_reported(tmp_path: Path) -> None:
    write(tmp_path, "busy-port", GOOD.format(name="busy-port"))
    write(tmp_path, "busy-port-two", GOOD.format(name="busy-port-two"))
    rules, problems = check_dir(tmp_path / "rules")
    assert len(rules) == 1 and "duplicate id CFG900" in str(problems[0])


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], capture_output=True, text=True,
                          input=stdin, cwd=ROOT)


def test_rules_check_cli_reports_problems_and_exits_2(tmp_path: Path) -> None:
    write(tmp_path, "busy-port", GOOD.format(name="busy-port").replace("severity: error", "severity: loud"))
    p = run_cli("rules", "check", str(tmp_path / "rules"))
    assert p.returncode == 2
    assert "busy-port.yaml:5:" in p.stdout and "Traceback" not in p.stderr


def test_user_rules_override_and_add(tmp_path: Path) -> None:
    text = GOOD.format(name="busy-port").replace("title: A test rule for the loader", "title: My own port rule")
    text = text.replace("severity: error", "severity: error\npriority: 99")
    write(tmp_path, "busy-port", text)
    p = run_cli("explain", "--format", "json", "--rules", str(tmp_path / "rules"), "fixtures/logs/v0.5-port-in-use.log")
    d = json.loads(p.stdout)
    assert d["verdict"] == "failed"
    assert any(x["rule"] == "CFG900" and x["title"] == "My own port rule" for x in d["diagnoses"])
    listed = run_cli("rules", "list", "--format", "json", "--rules", str(tmp_path / "rules"))
    assert any(r["id"] == "CFG900" for r in json.loads(listed.stdout))


def test_rules_explain_prints_documentation() -> None:
    p = run_cli("rules", "explain", "MEM001")
    assert p.returncode == 0
    for section in ("What it detects", "Why it happens", "How to fix", "Examples"):
        assert section in p.stdout
    assert run_cli("rules", "explain", "NOPE999").returncode == 2
