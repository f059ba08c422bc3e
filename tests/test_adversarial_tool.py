"""tools/adversarial.py: the table runs, reports structured rows, and its runner judges what it sees.

The real attacks are exercised on a cheap subset only (the whole table takes minutes); the runner's own
judgement (exit codes, tracebacks on stderr only, planted code, timeouts, processes left behind, peak
RSS) is checked with small stand-in commands whose outcome is known.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import adversarial
from adversarial_kit import ATTACKS, Attack, Spec

ROW_KEYS = {"attack", "item", "expected", "result", "exit", "time_s", "peak_rss_mb", "procs", "status", "problems"}


def test_the_table_covers_every_item_of_the_issue() -> None:
    assert len(ATTACKS) >= 40
    assert {a.item for a in ATTACKS} == set(range(1, 9))
    names = [a.name for a in ATTACKS]
    assert len(names) == len(set(names)), "attack names are how --only finds them: they must be unique"


def test_list_prints_every_attack(capsys: pytest.CaptureFixture[str]) -> None:
    assert adversarial.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(a.name in out for a in ATTACKS)


def test_a_cheap_subset_runs_and_reports_structured_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "rows.json"
    code = adversarial.main(["--only", "input: lone-CR", "--only", "stdio: stdin closed", "--timeout", "60",
                             "--json", str(report)])
    rows = json.loads(report.read_text())
    assert [r["attack"] for r in rows] == ["input: lone-CR line ends", "stdio: stdin closed, explain with no file"]
    for r in rows:
        assert set(r) == ROW_KEYS
        assert r["status"] in ("pass", "FAIL")
        assert isinstance(r["exit"], int) and r["time_s"] >= 0 and r["peak_rss_mb"] > 0
        assert r["result"] and (r["status"] == "pass") == (r["problems"] == [])
    assert code == (1 if any(r["status"] == "FAIL" for r in rows) else 0)
    table = capsys.readouterr().out
    assert "| attack | expected | result | exit | time s | peak RSS MB | pass/FAIL |" in table
    assert sum(ln.startswith("|") for ln in table.splitlines()) == 2 + len(rows)  # header, rule, rows


def test_no_match_is_a_usage_error() -> None:
    assert adversarial.main(["--only", "no attack has this name"]) == 2


# ------------------------------------------------------------------------------------------------
# the runner, on stand-in commands


def _run(code: str, spec: Spec, timeout: float = 60) -> dict[str, object]:
    attack = Attack("stand-in", 1, "whatever", lambda sb: spec)
    return adversarial.run_attack(attack, [sys.executable, "-c", code], ROOT, timeout, 8 << 30, keep=False)


def test_exit_code_and_a_traceback_on_stderr_fail_a_row() -> None:
    row = _run("import sys; sys.stderr.write('Traceback (most recent call last):\\n'); sys.exit(3)",
               Spec([], {0}))
    assert row["status"] == "FAIL" and row["exit"] == 3
    assert any("exit 3" in p for p in row["problems"]) and any("Traceback" in p for p in row["problems"])


def test_a_traceback_quoted_on_stdout_is_evidence_not_a_crash() -> None:
    row = _run("print('evidence: Traceback (most recent call last):')", Spec([], {0}))
    assert row["status"] == "pass", row["problems"]


def test_planted_code_that_ran_fails_the_row() -> None:
    # the stand-in does what a planted pickle would: create the sandbox's marker file
    spec = Spec([], {0})
    code = "import os, pathlib; pathlib.Path(os.environ['HOME']).parent.joinpath('PLANTED-CODE-RAN').touch()"
    row = _run(code, spec)
    assert row["status"] == "FAIL" and "PLANTED CODE RAN" in row["problems"][0]


def test_a_hang_is_killed_at_the_timeout() -> None:
    row = _run("import time; time.sleep(600)", Spec([], {0}, timeout=1))
    assert row["status"] == "FAIL" and row["problems"] == [f"timeout after {round(row['time_s'])} s"]


def test_a_process_left_behind_is_reported_and_killed() -> None:
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(600)\n"
    row = _run(code, Spec([], {0}))
    assert row["status"] == "FAIL" and any("left running" in p for p in row["problems"])


def test_peak_rss_is_measured_and_bounded() -> None:
    row = _run("x = b'a' * (300 << 20)", Spec([], {0}, max_rss_mb=100))
    assert row["peak_rss_mb"] >= 250  # type: ignore[operator]
    assert any("peak RSS" in p for p in row["problems"])


def test_the_memory_cap_applies_to_the_command() -> None:
    row = _run("import sys\ntry:\n    x = b'a' * (3 << 30)\nexcept MemoryError:\n    sys.exit(7)\n",
               Spec([], {7}, mem_gb=1.0))
    assert row["status"] == "pass", row["problems"]
