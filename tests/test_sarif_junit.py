"""CI formats: `explain --format sarif` / `batch --format sarif` against the official SARIF 2.1.0 schema (shipped
in the package, validated offline), and `batch --format junit` (structure, counts, --fail-on, escaping)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "logdoctor" / "sarif-2.1.0.schema.json"
FAILED = "fixtures/logs/v0.4-kv-not-enough-tp8.log"          # MEM001, three evidence lines
INCOMPLETE = "fixtures/logs/v0.5-incomplete-after-nccl.log"  # IPC008 (a stall rule, warning)
HEALTHY = "fixtures/logs/v0.4-tp8.log"                       # no diagnosis
WARNED = "fixtures/memory/story/founding-mfs-0.55-tp8.log"   # healthy with MEM101 (warning)
CONTROL_BYTES = "fixtures/ci/port-in-use-control-bytes.log"  # CFG003; NUL, BEL, ESC, <&"'> on the evidence line
NODES = ("fixtures/launch/node0.log", "fixtures/launch/node1.log")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    cls = jsonschema.validators.validator_for(schema)  # the schema's own $schema (draft-04)
    cls.check_schema(schema)
    # every $ref is internal (#/definitions/...): nothing is fetched, the test runs offline
    assert all(ref.startswith("#") for ref in _refs(schema))
    return cls(schema)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def sarif_of(*args: str) -> tuple[dict[str, Any], int]:
    r = run("explain", "--format", "sarif", *args)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout), r.returncode


def test_the_schema_catches_a_broken_log(validator: Any) -> None:
    """The validator is not vacuous: a wrong level and a missing version are reported."""
    log, _ = sarif_of(FAILED)
    log["runs"][0]["results"][0]["level"] = "fatal"
    del log["version"]
    messages = [e.message for e in validator.iter_errors(log)]
    assert any("fatal" in m for m in messages) and any("version" in m for m in messages), messages


@pytest.mark.parametrize("fixture", [FAILED, INCOMPLETE, HEALTHY, WARNED, CONTROL_BYTES])
def test_explain_sarif_is_valid(validator: Any, fixture: str) -> None:
    log, _ = sarif_of(fixture)
    errors = sorted(validator.iter_errors(log), key=str)
    assert not errors, [e.message for e in errors[:5]]
    (run_,) = log["runs"]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "logdoctor" and driver["version"]
    assert "informationUri" not in driver  # no project page is known
    assert run_["invocations"][0]["executionSuccessful"] is True
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for res in run_["results"]:
        assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]


def test_failed_result_cites_the_evidence_lines() -> None:
    log, code = sarif_of(FAILED)
    assert code == 1
    report = json.loads(run("explain", "--format", "json", FAILED).stdout)
    primary = report["primary"]
    first = log["runs"][0]["results"][0]
    assert (first["ruleId"], first["level"]) == ("MEM001", "error") == (primary["rule"], "error")
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == FAILED  # relative stays relative
    assert loc["region"]["startLine"] == primary["line"]
    related = [r["physicalLocation"]["region"]["startLine"] for r in first["relatedLocations"]]
    assert related == [e["line"] for e in primary["evidence"]] and len(related) >= 3
    rule = log["runs"][0]["tool"]["driver"]["rules"][first["ruleIndex"]]
    assert rule["name"] == "kv-pool-does-not-fit" and rule["properties"]["category"] == "memory_pressure"
    assert rule["defaultConfiguration"]["level"] == "error"
    assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
    assert "--mem-fraction-static" in rule["help"]["text"]  # the remedies, filled with this log's numbers


def test_incomplete_is_a_warning_and_healthy_has_no_results() -> None:
    log, code = sarif_of(INCOMPLETE)
    assert code == 0
    first = log["runs"][0]["results"][0]
    assert (first["ruleId"], first["level"], first["properties"]["verdict"]) == ("IPC008", "warning", "incomplete")
    log, code = sarif_of(HEALTHY)
    assert code == 0 and log["runs"][0]["results"] == []
    assert log["runs"][0]["properties"]["verdict"] == "healthy"


def test_multi_node_results_point_at_each_node_file(validator: Any) -> None:
    log, _ = sarif_of(*NODES)
    assert not list(validator.iter_errors(log))
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for res in log["runs"][0]["results"] for loc in res.get("locations", []) + res.get("relatedLocations", [])}
    assert uris and uris <= set(NODES)


def test_batch_sarif_is_one_valid_run(validator: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.log")
    r = run("batch", "--format", "sarif", FAILED, INCOMPLETE, HEALTHY, missing)
    assert r.returncode == 2, r.stderr  # the unreadable log
    log = json.loads(r.stdout)
    assert not list(validator.iter_errors(log))
    (run_,) = log["runs"]
    by_uri = {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: res for res in run_["results"]}
    assert set(by_uri) == {FAILED, INCOMPLETE}
    assert by_uri[FAILED]["level"] == "error" and by_uri[FAILED]["ruleId"] == "MEM001"
    assert by_uri[FAILED]["locations"][0]["physicalLocation"]["region"]["startLine"] > 1
    invocation = run_["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert [n["level"] for n in invocation["toolExecutionNotifications"]] == ["error"]


def test_the_schema_ships_in_the_package() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'packages = ["logdoctor"]' in text  # hatch puts every file under logdoctor/ in the wheel
    assert SCHEMA_FILE.is_file()


# ------------------------------------------------------------------------------------------------
# JUnit


def junit_of(*args: str) -> tuple[ET.Element, int]:
    r = run("batch", "--format", "junit", *args)
    assert r.returncode in (0, 1, 2), r.stderr
    return ET.fromstring(r.stdout.encode("utf-8")), r.returncode


def _counts_agree(root: ET.Element) -> None:
    cases = root.findall("./testsuite/testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    for el in (root, root.find("testsuite")):
        assert el is not None
        assert (int(el.get("tests", -1)), int(el.get("failures", -1)), int(el.get("errors", -1))) == \
            (len(cases), failures, errors)


def test_junit_cases_failures_and_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.log")
    root, code = junit_of(FAILED, INCOMPLETE, HEALTHY, missing)
    assert code == 2
    _counts_agree(root)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert len(cases) == 4
    failure = cases[FAILED].find("failure")
    assert failure is not None and failure.get("type") == "memory_pressure"
    assert "KV cache" in (failure.get("message") or "")
    assert f"{FAILED}:" in (failure.text or "") and "Not enough memory" in (failure.text or "")  # the evidence line
    error = cases[missing].find("error")
    assert error is not None and error.get("type") == "unreadable"
    # incomplete below the default --fail-on (failed): passes, the verdict in system-out
    assert cases[INCOMPLETE].find("failure") is None
    assert "verdict: incomplete" in (cases[INCOMPLETE].findtext("system-out") or "")
    assert cases[HEALTHY].find("failure") is None and cases[HEALTHY].find("error") is None


@pytest.mark.parametrize(("fail_on", "failing"), [("failed", {FAILED}), ("incomplete", {FAILED, INCOMPLETE}),
                                                    ("warning", {FAILED, INCOMPLETE, WARNED})])
def test_junit_honours_fail_on(fail_on: str, failing: set[str]) -> None:
    root, code = junit_of("--fail-on", fail_on, FAILED, INCOMPLETE, WARNED, HEALTHY)
    assert code == 1
    _counts_agree(root)
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert failed == failing
    if fail_on != "failed":
        types = {c.get("name"): c.find("failure").get("type") for c in root.iter("testcase")  # type: ignore[union-attr]
                 if c.find("failure") is not None}
        assert types[INCOMPLETE] == "incomplete"


def test_junit_strips_what_xml_forbids_and_escapes_markup() -> None:
    raw = (ROOT / CONTROL_BYTES).read_bytes()
    assert b"\x00" in raw and b"\x07" in raw and b"\x1b" in raw  # the fixture is what its name says
    r = run("batch", "--format", "junit", CONTROL_BYTES)
    assert r.returncode == 1
    assert not any(c in r.stdout for c in "\x00\x07\x08\x0c\x1b")
    assert "&lt;&amp;" in r.stdout  # markup from the log is escaped, not interpreted
    root = ET.fromstring(r.stdout.encode("utf-8"))
    _counts_agree(root)
    failure = root.find("./testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "configuration"
    assert "<&\"'>" in (failure.text or "") and "address already in use" in (failure.text or "")


def test_junit_to_a_file_by_suffix(tmp_path: Path) -> None:
    out = tmp_path / "report.xml"
    r = run("batch", "-o", str(out), FAILED)
    assert r.returncode == 1, r.stderr
    root = ET.fromstring(out.read_bytes())
    assert root.tag == "testsuites" and root.get("failures") == "1"


def test_runs_refuses_the_batch_formats() -> None:
    r = run("runs", "--format", "junit", HEALTHY)
    assert r.returncode == 2 and "batch" in r.stderr
