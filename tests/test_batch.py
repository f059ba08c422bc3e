from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from cliserver import run_cli

from logdoctor.diagnosis.rules import load_rule
from logdoctor.many.batch import BatchRow, discover, run_batch

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
RUNS = ROOT / "fixtures" / "runs"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return run_cli(args, text=True, cwd=cwd)  # a real process, forked from tests/cliserver.py's warm server


@pytest.fixture
def hazard_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    (d / "nested").mkdir(parents=True)
    shutil.copy(LOGS / "v0.4-kv-not-enough-tp8.log", d / "failed.log")
    shutil.copy(LOGS / "v0.4-tp8.log", d / "nested" / "healthy.log")
    (d / "empty.log").write_bytes(b"")
    (d / "binary.log").write_bytes(bytes(range(256)) * 64)
    os.symlink(d / "loop-b.log", d / "loop-a.log")
    os.symlink(d / "loop-a.log", d / "loop-b.log")
    os.mkfifo(d / "pipe.log")
    os.symlink("/dev/null", d / "device.log")
    os.symlink(d, d / "nested" / "dir-loop")  # a symlinked directory is not followed
    return d


def test_hazards_get_their_rows_and_the_rest_completes(hazard_dir: Path) -> None:
    p = cli("batch", str(hazard_dir), "--format", "json", "--no-progress", "--jobs", "2")
    assert p.returncode == 2, p.stderr  # some files could not be read
    rows = {Path(r["path"]).name: r for r in json.loads(p.stdout)}
    assert rows["failed.log"]["verdict"] == "failed" and rows["failed.log"]["category"] == "memory_pressure"
    assert rows["healthy.log"]["verdict"] == "healthy"
    assert rows["empty.log"]["error"] == "empty file"
    assert rows["binary.log"]["error"].startswith("binary file")
    assert rows["loop-a.log"]["error"] == "symlink loop" and rows["loop-b.log"]["error"] == "symlink loop"
    assert rows["pipe.log"]["error"] == "not a regular file (FIFO)"
    assert rows["device.log"]["error"] == "not a regular file (device)"
    assert len(rows) == 8


def test_unreadable_and_vanishing_files_are_rows_not_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "good.log"
    shutil.copy(LOGS / "v0.4-tp8.log", good)
    locked = tmp_path / "locked.log"
    locked.write_text("x\n")
    real_open = open

    def guarded_open(file, *a, **k):  # root can read anything, so deny this one path by hand
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *a, **k)

    monkeypatch.setattr("builtins.open", guarded_open)
    rows = [r for r, _ in run_batch([str(locked), str(tmp_path / "gone.log"), str(good)], [], jobs=1)]
    by = {Path(r.path).name: r for r in rows}
    assert by["locked.log"].error == "permission denied"
    assert by["gone.log"].error == "no such file"
    assert by["good.log"].verdict == "healthy" and by["good.log"].error is None


def test_batch_agrees_with_explain_file_by_file() -> None:
    p = cli("batch", str(LOGS), "--format", "json", "--no-progress")
    rows = json.loads(p.stdout)
    assert len(rows) == len(list(discover([str(LOGS)])))
    for r in rows:
        e = json.loads(cli("explain", "--format", "json", r["path"]).stdout)
        assert r["verdict"] == e["verdict"], r["path"]
        prim = e["primary"] or {}
        assert r["category"] == prim.get("category") and r["rule"] == prim.get("rule"), r["path"]
        assert r["evidence_line"] == prim.get("line"), r["path"]


def test_parquet_outputs_read_back_with_documented_columns(tmp_path: Path) -> None:
    out, events = tmp_path / "rows.parquet", tmp_path / "events.parquet"
    p = cli("batch", str(LOGS), "--format", "parquet", "-o", str(out), "--events", str(events), "--no-progress")
    assert p.returncode in (0, 1), p.stderr
    df = pl.read_parquet(out)
    assert df.columns == list(BatchRow.__dataclass_fields__)
    assert df.height == len(list(discover([str(LOGS)])))
    ev = pl.read_parquet(events)
    from logdoctor.many.schema import EVENT_SCHEMA
    assert dict(ev.schema) == EVENT_SCHEMA  # typed as the dataset's events (logdoctor/results.schema.json)
    assert ev.filter(pl.col("kind") == "server_ready").height >= 5
    json.loads(ev["fields_json"][0])
    kv = ev.filter(pl.col("kind") == "kv_cache_allocated").drop_nulls("ts")
    assert kv.height and kv["ts"].dtype == pl.Datetime("us") and kv["rank_number"].dtype == pl.Int64
    assert kv["fields"].struct.field("kv_gib").drop_nulls().len() > 0 and kv["fields"].struct.field("kv_gib").dtype == pl.Float64
    assert not list(tmp_path.glob(".logdoctor-*"))


def test_runs_grouped_by_mem_fraction_static() -> None:
    p = cli("runs", str(RUNS), "--group-by", "mem_fraction_static", "--format", "json", "--no-progress")
    groups = {g["mem_fraction_static"]: g for g in json.loads(p.stdout)}
    assert set(groups) == {0.8, 0.85, 0.88, 0.9, 0.95}
    assert groups[0.88]["runs"] == 2 and groups[0.88]["healthy"] == 2
    assert groups[0.95]["failed"] == 1 and groups[0.95]["failure_categories"] == "memory_pressure"
    kv = [groups[m]["median_kv_tokens"] for m in (0.8, 0.85, 0.9, 0.95)]
    assert kv == sorted(kv) and kv[0] > 300_000


def test_runs_filter_and_sort() -> None:
    p = cli("runs", str(RUNS), "--filter", "verdict=healthy", "--sort", "-kv_tokens", "--format", "json", "--no-progress")
    rows = json.loads(p.stdout)
    assert [r["mem_fraction_static"] for r in rows] == [0.9, 0.88, 0.88, 0.85, 0.8]
    bad = cli("runs", str(RUNS), "--filter", "nope=1", "--no-progress")
    assert bad.returncode == 2 and "no column 'nope'" in bad.stderr


def test_compare_names_the_difference_that_matters() -> None:
    p = cli("compare", str(RUNS / "llama8b-mfs0.90-4.log"), str(RUNS / "llama8b-mfs0.95-5.log"), "--format", "json")
    d = json.loads(p.stdout)
    assert [(f["arg"], f["a"], f["b"], f["matters"]) for f in d["server_args"]] == [("mem_fraction_static", 0.9, 0.95, True)]
    # where they part leads, then the first memory difference in launch order
    assert d["divergence"] == ["B ran out of memory at graph 1 of 36 (bs=256), while A captured all 36 graphs and reached ready.",
                               "B had 3.94 GiB more KV cache than A (59.70 vs 55.76 GiB) and ran out at graph 1 of 36."]
    assert d["parting"]["b"]["title"] == "CUDA ran out of memory while capturing CUDA graphs"
    assert any(s.startswith("With m in force 0.950 in B against 0.900 in A, B's reserve for graphs and activations was "
                            "3.94 GiB smaller") for s in d["decided"])


def test_clusters_and_rules_new(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(3):
        (d / f"x{i}.log").write_text(
            f"[2025-01-01 10:00:0{i} TP{i}] Scheduler hit an exception: Traceback (most recent call last):\n"
            f'  File "/opt/app/thing.py", line {10 + i}, in run\n'
            f"    frobnicate()\n"
            f"FrobnicationError: the frobnicator at 0x7f{i}a3 failed after {i + 2} attempts on /dev/nvidia{i}\n")
    (d / "other.log").write_text("WidgetError: widgets are out of stock\n")
    p = cli("clusters", str(d), "--format", "json", "--no-progress")
    clusters = json.loads(p.stdout)
    assert clusters[0]["count"] == 3 and len(clusters[0]["files"]) == 3
    assert "<hex>" in clusters[0]["signature"] and "<n>" in clusters[0]["signature"]
    assert clusters[1]["count"] == 1
    out = tmp_path / "rules" / "unknown" / "frobnicator-failed.yaml"
    out.parent.mkdir(parents=True)
    src = f"{d / 'x0.log'}:4"
    p = cli("rules", "new", "--from", src, "-o", str(out))
    assert p.returncode == 0, p.stderr
    rule = load_rule(out)
    assert rule.category == "unknown" and rule.id.startswith("UNK9")
    from logdoctor.diagnosis.ruletest import fires_on
    assert fires_on(rule, d / "x2.log") and not fires_on(rule, d / "other.log")


def test_ctrl_c_leaves_no_partial_output(tmp_path: Path) -> None:
    d = tmp_path / "many"
    d.mkdir()
    for i in range(3000):  # far more than can finish before the interrupt
        shutil.copy(LOGS / "v0.4-tp8.log", d / f"run{i:04d}.log")
    out = tmp_path / "out.csv"
    proc = subprocess.Popen([sys.executable, "-m", "logdoctor.cli", "batch", str(d), "--format", "csv", "-o", str(out),
                             "--jobs", "1", "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not out.exists()
    assert not list(tmp_path.glob(".logdoctor-*"))
