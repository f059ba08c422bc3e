"""`batch -o DIR/`: the typed, partitioned, resumable results dataset, reading it back, and --jobs from
the cgroup CPU quota."""
from __future__ import annotations

import glob
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import logdoctor
from logdoctor.many.dataset_read import JOURNAL_DIR, MARKER, read_events, read_results
from logdoctor.many.schema import SCHEMA_FILE, parse_type
from logdoctor.many.workers import cgroup_cpu_quota, parse_cfs, parse_cpu_max
from tests.cliserver import run_cli

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
DATED = ["v0.4-tp8.log", "v0.4-kv-not-enough-tp8.log", "v0.5new-dp2-tp4-ep4.log"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), text=True)


def parts(root: Path, table: str) -> list[str]:
    return sorted(glob.glob(str(root / table / "**" / "*.parquet"), recursive=True))


def journal_lines(f: Path) -> int:
    try:
        return f.read_text().count("\n")
    except FileNotFoundError:  # its part was just written: the segment is gone
        return 0


def file_schema(section: str) -> dict[str, pl.DataType]:
    doc = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    fields = pl.Struct({k: parse_type(v["type"]) for k, v in doc["event_fields"].items()})
    return {k: fields if v["type"] == "struct(event_fields)" else parse_type(v["type"])
            for k, v in doc[section].items()}


@pytest.fixture(scope="module")
def dated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Three dated fixture logs and their dataset (partitioned by date, with events)."""
    base = tmp_path_factory.mktemp("dated")
    logs = base / "logs"
    logs.mkdir()
    for name in DATED:
        shutil.copy(LOGS / name, logs / name)
    out = base / "results"
    p = cli("batch", str(logs), "-o", f"{out}/", "--partition-by", "date", "--events", f"{out}/events/",
            "--no-progress")
    assert p.returncode in (0, 1), p.stderr
    return logs, out


def test_written_parquet_has_the_schema_file_s_columns_and_types(dated: tuple[Path, Path]) -> None:
    _, out = dated
    for table, section in (("runs", "results"), ("events", "events")):
        found = parts(out, table)
        assert found
        for part in found:
            assert dict(pl.read_parquet_schema(part)) == file_schema(section), part
    assert json.loads((out / MARKER).read_text())["schema_version"] == 1


def test_events_are_typed(dated: tuple[Path, Path]) -> None:
    _, out = dated
    ev = read_events(str(out))
    assert ev.schema["ts"] == pl.Datetime("us") and ev.schema["rank_number"] == pl.Int64
    kv = ev.filter(pl.col("kind") == "kv_cache_allocated", pl.col("path").str.ends_with("v0.4-tp8.log"))
    assert sorted(kv["rank_number"]) == list(range(8)) and set(kv["rank"]) == {f"TP{i}" for i in range(8)}
    assert kv["ts"].null_count() == 0 and kv["ts"].dt.year().to_list()[0] >= 2024
    tokens = kv.select(pl.col("fields").struct.field("tokens"))["tokens"]
    assert tokens.dtype == pl.Int64 and tokens.null_count() == 0
    assert kv.select(pl.col("fields").struct.field("kv_gib"))["kv_gib"].dtype == pl.Float64
    first = kv.row(0, named=True)
    assert json.loads(first["fields_json"])["tokens"] == first["fields"]["tokens"]
    tb = ev.filter(pl.col("kind") == "traceback", pl.col("path").str.ends_with("v0.4-kv-not-enough-tp8.log"))
    frames = tb.select(pl.col("fields").struct.field("frames"))["frames"]
    assert tb.height > 0 and frames.dtype == pl.List(pl.String) and frames.list.len().min() > 0


def test_date_partitions_match_the_launch_dates(dated: tuple[Path, Path]) -> None:
    _, out = dated
    dirs = {Path(p).parent.name for p in parts(out, "runs")}
    df = read_results(str(out))
    assert df.height == len(DATED)
    assert dirs == {f"date={d}" for d in df["date"]}
    assert all(d[:2] == "20" and len(d) == 10 for d in df["date"])
    ts = read_events(str(out)).filter(pl.col("ts").is_not_null()).group_by("path").agg(pl.col("ts").min())
    first = {p: t.date().isoformat() for p, t in ts.iter_rows()}
    assert all(first[p] == d for p, d in df.select("path", "date").iter_rows())


def test_runs_reads_the_dataset_like_the_logs(dated: tuple[Path, Path]) -> None:
    logs, out = dated
    from_logs = cli("runs", str(logs), "--format", "json", "--no-progress")
    from_data = cli("runs", str(out), "--format", "json")
    assert from_data.returncode == from_logs.returncode and from_data.stdout == from_logs.stdout
    grouped = cli("runs", str(out), "--group-by", "verdict", "--filter", "tp>=4", "--sort", "-runs", "--format", "json")
    assert sum(g["runs"] for g in json.loads(grouped.stdout)) == len(DATED)
    assert logdoctor.runs(str(out)).to_dicts() == logdoctor.runs(str(logs)).to_dicts()


def test_a_dataset_at_a_url_reads_back_the_same(dated: tuple[Path, Path]) -> None:
    import fsspec
    _, out = dated
    fs = fsspec.filesystem("memory")
    fs.put(str(out), "/copied-results", recursive=True)  # as `aws s3 sync` would put it in a bucket
    try:
        assert logdoctor.runs("memory://copied-results").to_dicts() == logdoctor.runs(str(out)).to_dicts()
        assert read_events("memory://copied-results").equals(read_events(str(out)))
        assert logdoctor.runs(f"file://{out}").to_dicts() == logdoctor.runs(str(out)).to_dicts()
    finally:
        fs.rm("/copied-results", recursive=True)


def test_path_partitions_and_a_changed_log_is_diagnosed_again(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for team in ("alpha", "beta"):
        (logs / team).mkdir(parents=True)
        shutil.copy(LOGS / "v0.1-router-tp1.log", logs / team / "a.log")
    out = tmp_path / "out"
    p = cli("batch", str(logs), "-o", f"{out}/", "--partition-by", "path:-2", "--no-progress")
    assert p.returncode in (0, 1), p.stderr
    assert {Path(p).parent.name for p in parts(out, "runs")} == {"path_part=alpha", "path_part=beta"}
    before = read_results(str(out))
    assert set(before["path_part"]) == {"alpha", "beta"}
    shutil.copy(LOGS / "v0.4-kv-not-enough-tp8.log", logs / "beta" / "a.log")  # the log changed
    again = cli("batch", str(logs), "-o", f"{out}/", "--resume", "--no-progress")
    assert "1 log(s) diagnosed, 1 already present" in again.stderr, again.stderr
    after = read_results(str(out)).sort("path")
    assert after.height == 2
    beta = after.filter(pl.col("path_part") == "beta").row(0, named=True)
    old_beta = before.filter(pl.col("path_part") == "beta").row(0, named=True)
    assert beta["verdict"] == "failed" and old_beta["verdict"] != "failed"
    assert beta["content_hash"] != old_beta["content_hash"] and beta["diagnosed_at"] > old_beta["diagnosed_at"]
    alpha_before = before.filter(pl.col("path_part") == "alpha")["diagnosed_at"].to_list()
    assert after.filter(pl.col("path_part") == "alpha")["diagnosed_at"].to_list() == alpha_before
    # a dataset is never overwritten by accident, nor a directory that is not one
    assert cli("batch", str(logs), "-o", f"{out}/", "--no-progress").returncode == 2
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = cli("batch", str(logs), "-o", f"{other}/", "--no-progress")
    assert refused.returncode == 2 and "not a logdoctor dataset" in refused.stderr


def test_a_batch_killed_halfway_resumes_with_every_log_exactly_once(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    names = ["v0.5-capture-oom-tp4.log", "v0.4-tp8.log", "v0.5new-dp2-tp4-ep4.log", "v0.4-kv-not-enough-tp8.log"]
    for i in range(40):
        shutil.copy(LOGS / names[i % len(names)], logs / f"copy-{i:02d}.log")
    out = tmp_path / "out"
    args = [sys.executable, "-m", "logdoctor.cli", "batch", str(logs), "-o", f"{out}/", "--jobs", "1",
            "--row-group-size", "4", "--events", f"{out}/events/", "--no-progress"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    journal = out / JOURNAL_DIR
    deadline = time.monotonic() + 60  # a hang guard, not a speed goal
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            done = len(parts(out, "runs"))
            lines = sum(journal_lines(f) for f in journal.glob("rows-*.jsonl")) if journal.is_dir() else 0
            if done >= 2 and lines >= 1:  # some rows in parts, some only in the journal
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
        proc.stderr.close()  # type: ignore[union-attr]
    before = read_results(str(out))  # parts and journal alike
    assert 0 < before.height < 40, "the batch was not killed halfway"
    assert any(journal.glob("rows-*.jsonl"))
    resumed = cli("batch", str(logs), "-o", f"{out}/", "--resume", "--events", f"{out}/events/", "--jobs", "1",
                  "--no-progress")
    assert resumed.returncode in (0, 1), resumed.stderr
    assert f"{40 - before.height} log(s) diagnosed, {before.height} already present" in resumed.stderr
    raw = pl.read_parquet(parts(out, "runs"))  # every part, before any de-duplication
    assert raw.height == 40 and raw["path"].n_unique() == 40
    after = read_results(str(out))
    kept = after.join(before.select("path", "diagnosed_at"), on="path", suffix="_before")
    assert kept.height == before.height and (kept["diagnosed_at"] == kept["diagnosed_at_before"]).all()
    assert not list(journal.glob("*.jsonl")) and not glob.glob(str(out / "**" / ".*.tmp"), recursive=True)
    # events: one whole set per log, none twice: every copy of a log has as many as the others
    ev = pl.read_parquet(parts(out, "events")).group_by("path").len()
    assert ev.height == 40
    source = ev.with_columns(pl.col("path").str.extract(r"copy-(\d+)").cast(pl.Int64).mod(len(names)).alias("src"))
    assert source.group_by("src").agg(pl.col("len").n_unique())["len"].to_list() == [1] * len(names)


@pytest.mark.parametrize(("text", "cpus"), [("max 100000\n", None), ("200000 100000\n", 2.0), ("150000 100000", 1.5),
                                            ("50000", 0.5), ("", None), ("garbage 1", None)])
def test_cgroup_v2_cpu_max(text: str, cpus: float | None) -> None:
    assert parse_cpu_max(text) == cpus


def test_cgroup_v1_cfs_and_the_tightest_ancestor(tmp_path: Path) -> None:
    assert parse_cfs("-1\n", "100000\n") is None and parse_cfs("300000", "100000") == 3.0
    v2 = tmp_path / "v2"
    (v2 / "kubepods" / "pod1").mkdir(parents=True)
    (v2 / "kubepods" / "cpu.max").write_text("400000 100000\n")
    (v2 / "kubepods" / "pod1" / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(str(v2), "0::/kubepods/pod1\n") == 1.5
    assert cgroup_cpu_quota(str(v2), "0::/elsewhere\n") is None
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct" / "docker" / "abc").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us").write_text("250000\n")
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(str(v1), "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n") == 2.5
