"""Reading a results dataset back (`runs DIR`, `logdoctor.runs(DIR)`): a local directory, a file://
URL, or any fsspec URL (s3://, gs://, memory://) a dataset was copied to.

The newest row per path wins (`diagnosed_at`): a log re-diagnosed on `--resume` because its content
changed appended a second row. Locally, rows still in the journal (a batch running or killed) are read
too; events are the newest rows' events, joined on (path, content_hash). See many/dataset.py for the
layout and how it is written.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable
from typing import Any

from logdoctor.many.schema import EVENT_SCHEMA, PARTITION_COLUMNS, RESULT_SCHEMA, event_frame, result_frame
from logdoctor.paths import display_path

MARKER = "_logdoctor.json"
RUNS_DIR, EVENTS_DIR, JOURNAL_DIR = "runs", "events", "_journal"
RESULT_STAMPS = ("diagnosed_at",)  # the columns a journal line holds as ISO text
EVENT_STAMPS = ("ts",)


class DatasetError(Exception):
    """A dataset directory that cannot be written or read: the message names it."""


def is_dataset(path: str) -> bool:
    """Whether `path` (a directory or a URL) is a results dataset logdoctor wrote (its marker is there)."""
    path = _local(path)
    if _is_url(path):
        try:
            fs, where = _url_fs(path)
            return bool(fs.isfile(f"{where.rstrip('/')}/{MARKER}"))
        except Exception:  # no backend for the scheme, no credentials, no network: not a dataset we can read
            return False
    return os.path.isfile(os.path.join(path, MARKER))


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    """A file:// URL as the local path it names (other paths unchanged)."""
    return path[len("file://"):] if path.startswith("file://") else path


def _url_fs(url: str) -> tuple[Any, str]:
    """(fsspec file system, path within it) of a URL."""
    import importlib  # fsspec ships no types
    fs, where = importlib.import_module("fsspec.core").url_to_fs(url)
    return fs, str(where)


def _load(line: str, stamps: Iterable[str]) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads(line)
    for k in stamps:
        if isinstance(rec.get(k), str):
            rec[k] = dt.datetime.fromisoformat(rec[k])
    return rec




def part_keys(root: str, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    import polars as pl
    parts = _parts(root, table)
    if not parts:
        return []
    return list(pl.scan_parquet(parts, hive_partitioning=False).select(columns).unique().collect().iter_rows())


def read_journal(path: str, stamps: Iterable[str]) -> list[dict[str, Any]]:
    """Every complete line (a line cut by the crash is dropped: that log was in flight)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                out.append(_load(line, stamps))
            except ValueError:
                continue
    return out


def newest_hashes(root: str) -> dict[str, str]:
    """path → content hash of the newest row per path (rows with an error carry no hash: left out)."""
    import polars as pl
    df = read_results(root, ["path", "content_hash", "diagnosed_at"])
    df = df.filter(pl.col("content_hash").is_not_null())
    return dict(df.select("path", "content_hash").iter_rows())


def _parts(root: str, table: str) -> list[str]:
    import glob
    return sorted(glob.glob(os.path.join(glob.escape(os.path.join(root, table)), "**", "*.parquet"), recursive=True))


def read_results(root: str, columns: list[str] | None = None) -> Any:
    """Every result row of the dataset (parts and any journal), the newest row per path, sorted by path."""
    import polars as pl
    root = _local(root)
    frames = []
    parts = [] if _is_url(root) else _parts(root, RUNS_DIR)
    if _is_url(root):  # each part through fsspec: its own partition columns hold the directory's values
        frames += [_read_remote(root, RUNS_DIR)]
    elif parts:
        frames.append(pl.scan_parquet(parts, hive_partitioning=True, schema=RESULT_SCHEMA,
                                      hive_schema={"date": pl.String, "path_part": pl.String}).collect())
    jdir = os.path.join(root, JOURNAL_DIR)
    if not _is_url(root) and os.path.isdir(jdir):
        rows = [r for n in sorted(os.listdir(jdir)) if n.startswith("rows-")
                for r in read_journal(os.path.join(jdir, n), RESULT_STAMPS)]
        if rows:
            frames.append(result_frame(rows))
    df = pl.concat(frames, how="vertical_relaxed") if frames else result_frame([])
    df = df.select(list(RESULT_SCHEMA))
    df = (df.sort("diagnosed_at", nulls_last=False).unique("path", keep="last", maintain_order=True)
          .sort("path"))
    return df.select(columns) if columns is not None else df


def _read_remote(url: str, table: str) -> Any:
    import polars as pl
    fs, where = _url_fs(url)
    names = sorted(fs.glob(f"{where.rstrip('/')}/{table}/**/*.parquet"))
    schema = RESULT_SCHEMA if table == RUNS_DIR else EVENT_SCHEMA
    frames = []
    for name in names:
        with fs.open(name, "rb") as f:
            frame = pl.read_parquet(f)
        # pyarrow's partitioned writes (Ray's) keep a partition column only in the directory name
        hive = _hive_values(name)
        frame = frame.with_columns([pl.lit(hive.get(c), dtype=pl.String).alias(c) for c in PARTITION_COLUMNS
                                    if c not in frame.columns])
        frames.append(frame)
    return pl.concat(frames, how="vertical_relaxed").cast(pl.Schema(schema)) if frames else pl.DataFrame(schema=schema)


def _hive_values(name: str) -> dict[str, str]:
    """`…/date=2026-03-03/path_part=a%2Fb/part-0.parquet` → {"date": "2026-03-03", "path_part": "a/b"}."""
    from urllib.parse import unquote
    return {k: unquote(v) for k, _, v in (seg.partition("=") for seg in name.split("/")[:-1] if "=" in seg)}


def read_events(root: str) -> Any:
    """The events of the rows read_results keeps (joined on path and content hash)."""
    import polars as pl
    root = _local(root)
    if _is_url(root):
        return _read_remote(root, EVENTS_DIR).join(read_results(root, ["path", "content_hash"]),
                                                   on=["path", "content_hash"], how="semi")
    parts = _parts(root, EVENTS_DIR)
    if not parts:
        return event_frame([])
    ev = pl.scan_parquet(parts, hive_partitioning=True, schema=EVENT_SCHEMA,
                         hive_schema={"date": pl.String, "path_part": pl.String}).collect()
    keep = read_results(root, ["path", "content_hash"])
    return ev.join(keep, on=["path", "content_hash"], how="semi")


def dataset_runs(roots: list[str]) -> tuple[list[Any], Any]:
    """`runs DIR...`: the rows (BatchRow: path, verdict, error; for exit codes and the unreadable footer)
    and the typed frame of RUN_COLUMNS of every diagnosed log, newest row per path, sorted by path."""
    import polars as pl

    from logdoctor.many.batch import RUN_COLUMNS, BatchRow
    frames = []
    for root in roots:
        try:
            frames.append(read_results(root))
        except (OSError, pl.exceptions.PolarsError) as e:
            raise DatasetError(f"{display_path(root)}: unreadable results dataset ({e})") from None
    df = pl.concat(frames) if len(frames) > 1 else frames[0]
    if len(frames) > 1:
        df = df.sort("diagnosed_at").unique("path", keep="last").sort("path")
    rows = [BatchRow(p, verdict=v, error=e) for p, v, e in df.select("path", "verdict", "error").iter_rows()]
    return rows, df.filter(pl.col("error").is_null()).select(RUN_COLUMNS)


def dataset_results(roots: list[str], columns: list[str]) -> Any:
    """`logdoctor.runs(DIR)`: `columns` of every row (an unreadable log keeps only path and error)."""
    import polars as pl
    rows, runs = dataset_runs(roots)
    bad = pl.DataFrame({"path": [r.path for r in rows if r.error], "error": [r.error for r in rows if r.error]},
                       schema={"path": pl.String, "error": pl.String})
    good = runs.with_columns(pl.lit(None, dtype=pl.String).alias("error"))
    return pl.concat([good, bad], how="diagonal_relaxed").sort("path").select(columns)
