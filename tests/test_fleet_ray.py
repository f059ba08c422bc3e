"""The Ray engine (`logdoctor.fleet`, `batch --engine ray`) gives the local engine's rows, on a real local Ray.

One Ray per module (starting one takes seconds): `num_cpus=2`, started after the S3 server so its worker
processes inherit the server's endpoint and fake credentials, and shut down at the end; the test that
starts it fails (never skips) when Ray cannot start. The CLI test joins that Ray with `--ray-address`
rather than starting a second one.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cliserver import run_cli
from s3server import S3Server, s3  # noqa: F401  (the module-scoped fixture, found by its name)

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
COMPRESSED = ROOT / "fixtures" / "compressed"


@pytest.fixture(scope="module")
def fleet(s3: S3Server) -> Iterator[Any]:  # noqa: F811
    import ray

    import logdoctor.fleet as fleet
    assert fleet.init(num_cpus=2), "a Ray was already running in the test process"
    try:
        yield fleet
    finally:
        ray.shutdown()
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plain logs, a .gz, a subdirectory, a binary file, a gzip stream cut short, an empty file, and files
    a directory walk does not pick up (notes.md; .zst is read when named, not when walked)."""
    d = tmp_path_factory.mktemp("fleet") / "logs"
    (d / "nested").mkdir(parents=True)
    for name in ("v0.5-capture-oom-tp4.log", "v0.4-tp8.log", "host-oom-killed.log"):
        shutil.copy(LOGS / name, d / name)
    shutil.copy(LOGS / "torchrun-child-failed.txt", d / "nested" / "torchrun-child-failed.txt")
    (d / "nested" / "v0.2-tp2.log.gz").write_bytes(gzip.compress((LOGS / "v0.2-tp2.log").read_bytes(), mtime=0))
    whole = gzip.compress((COMPRESSED / "tp8-mem-fraction.log.gz").read_bytes(), mtime=0)
    (d / "truncated.log.gz").write_bytes(whole[: len(whole) // 2])
    shutil.copy(COMPRESSED / "tp8-mem-fraction.log.zst", d / "tp8-mem-fraction.log.zst")
    shutil.copy(COMPRESSED / "random-bytes.log", d / "random-bytes.log")
    (d / "empty.log").write_bytes(b"")
    (d / "notes.md").write_text("not a log\n")
    return d


def _local_rows(paths: list[str]) -> list[dict[str, Any]]:
    from logdoctor.many.batch import collect, row_dict
    rows, _ = collect(paths, [], 1)
    return [row_dict(r) for r in rows]


def _same_columns(local: list[dict[str, Any]], ray: list[dict[str, Any]]) -> None:
    assert [r["path"] for r in ray] == [r["path"] for r in local]
    for column in local[0]:
        assert [r[column] for r in ray] == [r[column] for r in local], column


def test_the_rows_are_the_local_engines_column_by_column(fleet: Any, logs: Path) -> None:
    from logdoctor.many.batch import row_dict
    local = _local_rows([str(logs)])
    ray = [row_dict(r) for r in fleet.rows([str(logs)])]
    _same_columns(local, ray)
    by_name = {os.path.basename(r["path"]): r for r in ray}
    assert set(by_name) == {"v0.5-capture-oom-tp4.log", "v0.4-tp8.log", "host-oom-killed.log",
                            "torchrun-child-failed.txt", "v0.2-tp2.log.gz", "truncated.log.gz", "random-bytes.log",
                            "empty.log"}
    assert by_name["v0.2-tp2.log.gz"]["last_stage"] == "ready"           # gzip: sniffed from the bytes
    assert by_name["random-bytes.log"]["error"] == "binary file (not a text log)"
    assert by_name["empty.log"]["error"] == "empty file"
    assert by_name["truncated.log.gz"]["error"] is not None              # an error row, not a failed job
    named = fleet.rows([str(logs / "tp8-mem-fraction.log.zst")])         # zstd, named explicitly
    assert [r.verdict for r in named] == [r["verdict"] for r in _local_rows([str(logs / "tp8-mem-fraction.log.zst")])]
    assert named[0].verdict == "failed"
    assert {r["verdict"] for r in ray if r["error"] is None} >= {"failed", "healthy"}


def test_the_results_table_is_the_local_datasets(fleet: Any, logs: Path, tmp_path: Path) -> None:
    """Every RESULT_SCHEMA column (hash, size, date, ...) as `batch -o DIR/` writes it; and --resume on Ray
    skips what is there."""
    import polars as pl

    from logdoctor.many.dataset import run_dataset_batch
    from logdoctor.many.dataset_read import read_results
    from logdoctor.many.schema import RESULT_SCHEMA, result_frame
    run_dataset_batch([str(logs)], str(tmp_path / "local"), partition_by="date", resume=False, with_events=False,
                      rule_dirs=[], jobs=1, progress=False, timeout=None, rules=None, envelope=None)
    local = read_results(str(tmp_path / "local")).drop("diagnosed_at")
    ray = result_frame(fleet.records([str(logs)], partition_by="date")).drop("diagnosed_at")
    assert ray.schema == local.schema and list(ray.schema) == [c for c in RESULT_SCHEMA if c != "diagnosed_at"]
    for column in local.columns:
        assert ray[column].to_list() == local[column].to_list(), column

    root = str(tmp_path / "on-ray")
    first = fleet.write_dataset([str(logs)], root, partition_by="date")
    assert (first.diagnosed, first.skipped, len(first.errors)) == (8, 0, 3)
    again = fleet.write_dataset([str(logs)], root, partition_by="date", resume=True)
    assert (again.skipped, again.diagnosed) == (5, 3)  # the logs that were diagnosed; error rows carry no hash and are tried again
    back = read_results(root).drop("diagnosed_at")
    assert back.sort("path").select(local.columns).equals(local.sort("path"))
    assert pl.scan_parquet(f"{root}/runs/**/*.parquet", hive_partitioning=True).select("date").collect().height >= 8


def test_objects_in_s3_are_the_rows_of_their_local_copies(fleet: Any, s3: S3Server, logs: Path) -> None:  # noqa: F811
    s3.make_bucket("ray-fleet")
    for p in sorted(logs.rglob("*")):
        if p.is_file():
            s3.put("ray-fleet", f"logs/{p.relative_to(logs)}", p.read_bytes())
    from logdoctor.many.batch import row_dict
    remote = [row_dict(r) for r in fleet.rows(["s3://ray-fleet/logs/", "s3://no-such-bucket/logs/"])]
    assert remote[0]["path"].startswith("s3://no-such-bucket") and remote[0]["error"]  # a row, not a lost batch
    remote = remote[1:]
    local = _local_rows([str(logs)])
    for r in local:
        r["path"] = r["path"].replace(str(logs), "s3://ray-fleet/logs", 1)
    _same_columns(local, remote)

    # results written into the bucket by the workers: the marker, and runs/ partitioned by date
    summary = fleet.write_dataset(["s3://ray-fleet/logs/"], "s3://ray-fleet/results/", partition_by="date")
    assert (summary.diagnosed, len(summary.errors)) == (8, 3)
    import polars as pl
    import s3fs
    fs = s3fs.S3FileSystem()
    assert json.loads(fs.cat("ray-fleet/results/_logdoctor.json"))["partition_by"] == "date"
    parts = fs.glob("ray-fleet/results/runs/date=*/*.parquet")
    back = pl.concat([pl.read_parquet(fs.open(p, "rb").read()) for p in parts], how="diagonal_relaxed")
    assert sorted(back["path"].to_list()) == [r["path"] for r in local]
    # and read back as a dataset: the date comes from the directory names the workers wrote
    from logdoctor.many.dataset_read import read_results
    table = read_results("s3://ray-fleet/results/")
    assert sorted(table["path"].to_list()) == sorted(r["path"] for r in local)
    assert set(table["date"].to_list()) == {p.split("date=", 1)[1].split("/", 1)[0] for p in parts}


def test_the_cli_engine_ray_prints_what_the_local_engine_prints(fleet: Any, logs: Path) -> None:
    import ray
    address = ray.get_runtime_context().gcs_address
    local = run_cli(["batch", str(logs), "--format", "json"], text=True, timeout=120)
    # a real process (not the fork server): Ray's driver state must not be forked; 120 s is a hang guard
    on_ray = subprocess.run([sys.executable, "-m", "logdoctor", "batch", str(logs), "--format", "json",
                             "--engine", "ray", "--ray-address", address], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert on_ray.returncode == local.returncode == 2, on_ray.stderr  # unreadable files → exit 2
    assert json.loads(on_ray.stdout) == json.loads(local.stdout)
    assert on_ray.stderr == local.stderr  # only the per-file error lines: no Ray banners or progress bars
    assert ray.is_initialized()  # the CLI left the cluster it joined running


def test_without_ray_the_engine_is_a_one_line_error_naming_the_extra(tmp_path: Path, logs: Path) -> None:
    fake = tmp_path / "no-ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\", name='ray')\n")
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    done = subprocess.run([sys.executable, "-m", "logdoctor", "batch", str(logs), "--engine", "ray"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "logdoctor: --engine ray needs Ray Data (ray): pip install 'logdoctor[ray]'"]
    assert done.stdout == ""
