"""The top level's public API, as a notebook uses it: `logdoctor.diagnose` (one log's Report) and
`logdoctor.runs` (one log's Run, and a table of many)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from logdoctor.diagnose import diagnose_source
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.runs import run_of, runs_table

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], capture_output=True, text=True,
                          check=False, timeout=120)


def test_run_of_is_what_summary_prints() -> None:
    for name in ("v0.4-kv-not-enough-tp8.log", "v0.5new-dp2-tp4-ep4.log", "v0.1-router-tp1.log"):
        run = run_of(str(LOGS / name))
        printed = json.loads(_cli("summary", "--format", "json", str(LOGS / name)).stdout)
        got = json.loads(json.dumps(run.to_dict(), default=str))
        got["source"] = printed["source"]  # the CLI shows the path escaped for a terminal
        assert got == printed


def test_run_of_and_diagnose_source_fold_the_same_run() -> None:
    rules = load_ruleset(())
    path = str(LOGS / "v0.5-capture-oom-tp4.log")
    assert run_of(path).to_dict() == diagnose_source(path, rules).run.to_dict()


def test_runs_table_has_one_row_per_log_and_keeps_the_good_rows_of_a_batch_with_a_bad_file(tmp_path: Path) -> None:
    for name in ("v0.4-kv-not-enough-tp8.log", "v0.4-tp8.log", "v0.5-port-in-use.log"):
        (tmp_path / name).write_bytes((LOGS / name).read_bytes())
    (tmp_path / "broken.log").write_bytes(b"\x00" * 4096)   # binary: not a log
    table = runs_table([str(tmp_path)])
    df = table.frame
    assert sorted(Path(p).name for p in df["path"].to_list()) == [
        "v0.4-kv-not-enough-tp8.log", "v0.4-tp8.log", "v0.5-port-in-use.log"]
    assert [Path(p).name for p in table.errors] == ["broken.log"]
    by_name = {Path(r["path"]).name: r for r in df.to_dicts()}
    assert by_name["v0.4-kv-not-enough-tp8.log"]["verdict"] == "failed"
    assert by_name["v0.4-kv-not-enough-tp8.log"]["category"] == "memory_pressure"
    assert by_name["v0.4-kv-not-enough-tp8.log"]["tp"] == 8
    # the same rows `logdoctor runs --format json` prints
    printed = json.loads(_cli("runs", "--format", "json", "--no-progress", str(tmp_path)).stdout)
    assert [r["verdict"] for r in printed] == df["verdict"].to_list()


def test_importing_the_public_api_does_not_import_polars() -> None:
    code = "import sys, logdoctor.runs, logdoctor.diagnose; sys.exit('polars' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
