"""`batch PATHS -o DIR/`: results as a Parquet dataset written while the batch runs, resumable.

Layout (see results.schema.json for the columns):

    DIR/_logdoctor.json                       marker: schema version, partitioning
    DIR/runs/date=2026-03-03/part-*.parquet   one row per log (schema.RESULT_SCHEMA)
    DIR/events/date=2026-03-03/part-*.parquet one row per event (schema.EVENT_SCHEMA), with --events
    DIR/_journal/*.jsonl                      rows (and events) not yet in a part: append-only

Each finished log goes to the journal at once (one JSON line, flushed: a crash, Ctrl-C or SIGKILL loses
at most the logs in flight). Every `row_group` rows (and at the end) the buffer becomes one part file
per partition, written under a temporary name and renamed; then that journal segment is removed. Events
are flushed the same way every EVENT_ROW_GROUP events. The parent holds only the current buffer, the
resume key set (path → content hash) and the list of paths to do.

`--resume` first compacts a journal left by a crash into parts, then skips every log whose path is
present with the same content hash (the worker hashes the file and returns at once). A log whose
content changed is diagnosed again and its new row is appended: on read-back (`read_results`) the
newest `diagnosed_at` per path wins; events are tied to their row by (path, content_hash). A row with
`error` set (unreadable, over its time budget) has no hash and is always tried again.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from typing import IO, Any

from logdoctor.many.dataset_read import (
    EVENT_STAMPS,
    EVENTS_DIR,
    JOURNAL_DIR,
    MARKER,
    RESULT_STAMPS,
    RUNS_DIR,
    DatasetError,
    is_dataset,
    newest_hashes,
    part_keys,
    read_journal,
)
from logdoctor.many.schema import (
    EPOCH_FLOOR_S,
    SCHEMA_VERSION,
    UNKNOWN_DATE,
    content_digest,
    event_frame,
    launch_date,
    path_component,
    result_frame,
    result_record,
)
from logdoctor.paths import display_path
from logdoctor.records import dataclass, field

ROW_GROUP = 2000
EVENT_ROW_GROUP = 50_000
HEAD_BYTES = 64 * 1024


# ------------------------------------------------------------------------------------------------
# partitioning


@dataclass(frozen=True)
class Partitioning:
    """`none`, `date` (the launch's date) or `path:N` (the N-th path component, negative from the end)."""
    kind: str = "none"
    n: int = 0

    @classmethod
    def parse(cls, text: str | None) -> Partitioning:
        text = (text or "none").strip()
        if text in ("none", "date"):
            return cls(text)
        if text.startswith("path:"):
            try:
                return cls("path", int(text[5:]))
            except ValueError:
                pass
        raise DatasetError(f"--partition-by {text}: use date, path:N (N-th path component; -2: the parent "
                           "directory) or none")

    def __str__(self) -> str:
        return f"path:{self.n}" if self.kind == "path" else self.kind

    def directory(self, rec: dict[str, Any]) -> str:
        """The hive directory of a record (its partition column holds the same value)."""
        if self.kind == "date":
            return f"date={rec.get('date') or UNKNOWN_DATE}"
        if self.kind == "path":
            return f"path_part={_hive_value(rec.get('path_part'))}"
        return ""


def _hive_value(v: str | None) -> str:
    """A value safe as one directory name (hive style: percent-encoded; none is hive's default partition,
    which polars, DuckDB and Spark read back as null)."""
    from urllib.parse import quote
    return quote(v, safe="-_.@+") if v else "__HIVE_DEFAULT_PARTITION__"


def is_dataset_target(output: str | None) -> bool:
    """Whether `-o` names a dataset directory: it ends with a slash, or is a dataset already (any other
    existing directory stays an error: `-o DIR` meant a file there)."""
    return output is not None and (output.endswith(("/", os.sep)) or is_dataset(output))


# ------------------------------------------------------------------------------------------------
# worker side: one path → one record (and its events), or "already present"

_KNOWN: dict[str, str] = {}          # display path → content hash already in the dataset (set before fork)
_PARTITIONING = Partitioning()
_WITH_EVENTS = False


@dataclass
class Skipped:
    path: str


def fingerprint(path: str) -> tuple[str, int, bytes]:
    """(content hash, size, first bytes) of the log as stored; a URL is read through fsspec."""
    h = content_digest()
    size = 0
    head = b""
    f: IO[bytes]
    if "://" in path and not path.startswith("file://"):
        import importlib  # fsspec is an optional dependency (logdoctor[s3] ...) and ships no types
        f = importlib.import_module("fsspec").open(path, "rb").open()
    else:
        f = open(path[7:] if path.startswith("file://") else path, "rb")
    with f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            if len(head) < HEAD_BYTES:
                head += chunk[:HEAD_BYTES - len(head)]
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size, head


def dataset_work(path: str) -> Any:
    """What a worker makes of one path: Skipped, or (record, events)."""
    from logdoctor.many import batch
    try:
        digest: str | None
        digest, size, head = fingerprint(path) if batch.precheck(path) is None else (None, None, b"")
    except (OSError, ValueError, ImportError):
        digest, size, head = None, None, b""
    shown = display_path(path)
    if digest is not None and _KNOWN.get(shown) == digest:
        return Skipped(shown)
    events: list[dict[str, Any]] | None = [] if _WITH_EVENTS else None
    batch.capture_typed_events(events)
    try:
        row, run = batch.diagnose_path(path, True)
        report = batch.last_report()
    finally:
        batch.capture_typed_events(None)
    date = report_date(report) if row.error is None else None
    if date is None:
        date = launch_date(head)
    rec = result_record(row, run, digest if row.error is None else None, size, date,
                        path_component(shown, _PARTITIONING.n) if _PARTITIONING.kind == "path" else None)
    rec["path"] = shown
    evs = events if events is not None and row.error is None else []
    for ev in evs:
        ev.update(content_hash=rec["content_hash"], date=rec["date"], path_part=rec["path_part"])
    return rec, evs


def report_date(report: Any) -> str | None:
    """The date of the launch's first timed stage, when the log printed dates."""
    if report is None:
        return None
    for s in report.run.stages.values():
        if s.start_secs is not None:
            if s.start_secs >= EPOCH_FLOOR_S:
                return (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=s.start_secs)).date().isoformat()
            return None
    return None


def lost_record(path: str, error: str | None) -> dict[str, Any]:
    """The record of a path that was never diagnosed (unlistable, over budget, worker died)."""
    from logdoctor.many.batch import BatchRow
    rec = result_record(BatchRow(path, error=error), None, None, None)
    rec["path"] = display_path(path)
    return rec


# ------------------------------------------------------------------------------------------------
# parent side: journal, buffer, parts


def _jsonable(v: Any) -> Any:
    return v.isoformat() if isinstance(v, (dt.datetime, dt.date)) else v


def _dump(rec: dict[str, Any]) -> str:
    return json.dumps({k: _jsonable(v) for k, v in rec.items()}, ensure_ascii=False, default=str) + "\n"


@dataclass
class _Segment:
    """One journal file and the records of it not yet in a part."""
    path: str
    file: IO[str]
    records: list[dict[str, Any]] = field(default_factory=list)


class DatasetWriter:
    """Append records (and their events) to a dataset directory; see the module doc."""

    def __init__(self, root: str, partitioning: Partitioning, row_group: int = ROW_GROUP,
                 with_events: bool = False, event_row_group: int = EVENT_ROW_GROUP) -> None:
        self.root, self.partitioning = root, partitioning
        self.row_group, self.event_row_group = max(1, row_group), max(1, event_row_group)
        self.with_events = with_events
        self.parts = 0
        self.rows = 0
        os.makedirs(os.path.join(root, JOURNAL_DIR), exist_ok=True)
        self._rows = self._segment("rows")
        self._events = self._segment("events") if with_events else None

    def _segment(self, what: str) -> _Segment:
        name = os.path.join(self.root, JOURNAL_DIR, f"{what}-{_stamp()}.jsonl")
        return _Segment(name, open(name, "a", encoding="utf-8"))

    def add(self, record: dict[str, Any], events: list[dict[str, Any]]) -> None:
        # events first: a crash between the two leaves orphan events, which compaction drops
        if self._events is not None and events:
            self._events.file.write("".join(_dump(e) for e in events))
            self._events.file.flush()
            self._events.records.extend(events)
        self._rows.file.write(_dump(record))
        self._rows.file.flush()
        self._rows.records.append(record)
        self.rows += 1
        if self._events is not None and len(self._events.records) >= self.event_row_group:
            self._events = self._commit(self._events, EVENTS_DIR, event_frame)
        if len(self._rows.records) >= self.row_group:
            self._rows = self._commit(self._rows, RUNS_DIR, result_frame)

    def close(self) -> None:
        """Write what is buffered as parts and remove the journal segments."""
        if self._events is not None:
            self._commit(self._events, EVENTS_DIR, event_frame, reopen=False)
        self._commit(self._rows, RUNS_DIR, result_frame, reopen=False)

    def _commit(self, seg: _Segment, table: str, make: Any, reopen: bool = True) -> Any:
        seg.file.close()
        self.parts += write_parts(self.root, table, make(seg.records), self.partitioning)
        os.unlink(seg.path)  # only once every part of it is durable
        return self._segment("rows" if table == RUNS_DIR else "events") if reopen else None


def _stamp() -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{now}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def write_parts(root: str, table: str, df: Any, partitioning: Partitioning) -> int:
    """One part file per partition of `df` under root/table/, each written atomically; the count."""
    import polars as pl
    if df.height == 0:
        return 0
    dirs = [partitioning.directory(r) for r in df.select("date", "path_part").iter_rows(named=True)]
    df = df.with_columns(pl.Series("__dir", dirs, dtype=pl.String))
    written = 0
    for (where,), part in df.group_by(["__dir"], maintain_order=True):
        target = os.path.join(root, table, str(where)) if where else os.path.join(root, table)
        os.makedirs(target, exist_ok=True)
        name = f"part-{_stamp()}.parquet"
        tmp = os.path.join(target, f".{name}.tmp")
        part.drop("__dir").write_parquet(tmp, row_group_size=max(1, part.height))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(target, name))
        written += 1
    _fsync_dir(os.path.join(root, table))
    return written


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# opening, resuming, reading back


def open_dataset(root: str, partition_by: str | None, resume: bool) -> Partitioning:
    """Check (or create) the dataset at `root`; its partitioning. DatasetError when `root` holds something
    else, or a dataset without --resume, or --partition-by differs from the dataset's."""
    if "://" in root:
        raise DatasetError(f"{display_path(root)}: a dataset is written to a local directory (its journal is "
                           "appended to per log); write it locally, then copy it (aws s3 sync, gsutil rsync)")
    marker = os.path.join(root, MARKER)
    if os.path.isfile(marker):
        if not resume:
            raise DatasetError(f"{display_path(root)}: already holds a results dataset: --resume to continue it, "
                               "or name a new directory")
        try:
            with open(marker, encoding="utf-8") as f:
                meta = json.load(f)
            had = Partitioning.parse(meta.get("partition_by"))
        except (OSError, ValueError) as e:
            raise DatasetError(f"{display_path(marker)}: unreadable marker ({e})") from None
        if int(meta.get("schema_version", 0)) != SCHEMA_VERSION:
            raise DatasetError(f"{display_path(root)}: schema version {meta.get('schema_version')}, this logdoctor "
                               f"writes {SCHEMA_VERSION}")
        if partition_by is not None and Partitioning.parse(partition_by) != had:
            raise DatasetError(f"{display_path(root)}: partitioned by {had}, not {partition_by}")
        return had
    if os.path.isdir(root) and any(not n.startswith(".") for n in os.listdir(root)):
        raise DatasetError(f"{display_path(root)}: not empty and not a logdoctor dataset (no {MARKER})")
    part = Partitioning.parse(partition_by)
    try:
        os.makedirs(root, exist_ok=True)
        from logdoctor import __version__
        tmp = marker + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"format": "logdoctor-results", "schema_version": SCHEMA_VERSION, "partition_by": str(part),
                       "logdoctor_version": __version__, "schema": "logdoctor/results.schema.json"}, f, indent=1)
        os.replace(tmp, marker)
    except OSError as e:
        raise DatasetError(f"{display_path(root)}: cannot create the dataset ({e.strerror or e})") from None
    return part


def recover(root: str, partitioning: Partitioning) -> int:
    """Turn journal segments a crashed batch left into parts (rows first; events only of rows present);
    the number of rows recovered."""
    jdir = os.path.join(root, JOURNAL_DIR)
    if not os.path.isdir(jdir):
        return 0
    names = sorted(os.listdir(jdir))
    # a segment whose part was renamed into place just before the crash is in both: keep the part's
    in_parts = set(part_keys(root, RUNS_DIR, ["path", "diagnosed_at"]))
    rows: list[dict[str, Any]] = []
    for n in names:
        if n.startswith("rows-"):
            rows += [r for r in read_journal(os.path.join(jdir, n), RESULT_STAMPS)
                     if (r.get("path"), r.get("diagnosed_at")) not in in_parts]
    write_parts(root, RUNS_DIR, result_frame(rows), partitioning)
    if any(n.startswith("events-") for n in names):
        present = set(newest_hashes(root).items()) - set(part_keys(root, EVENTS_DIR, ["path", "content_hash"]))
        events: list[dict[str, Any]] = []
        for n in names:
            if n.startswith("events-"):
                events += [e for e in read_journal(os.path.join(jdir, n), EVENT_STAMPS)
                           if (e.get("path"), e.get("content_hash")) in present]
        write_parts(root, EVENTS_DIR, event_frame(events), partitioning)
    for n in names:
        if n.startswith(("rows-", "events-")):
            os.unlink(os.path.join(jdir, n))
    return len(rows)


def resume_keys(root: str, partitioning: Partitioning) -> tuple[dict[str, str], int]:
    """Recover a crashed batch's journal, then the (path → hash) set to skip and the rows recovered."""
    recovered = recover(root, partitioning)
    return newest_hashes(root), recovered


# ------------------------------------------------------------------------------------------------
# the batch


@dataclass
class DatasetSummary:
    """What one `batch -o DIR/` run did (counts only: the rows are in the dataset)."""
    diagnosed: int = 0
    skipped: int = 0
    recovered: int = 0
    parts: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (display path, why)
    verdicts: dict[str, int] = field(default_factory=dict)
    with_warnings: set[str] = field(default_factory=set)  # verdicts seen with warnings

    def count(self, rec: dict[str, Any]) -> None:
        """One result record done (whichever engine diagnosed it)."""
        self.diagnosed += 1
        if rec.get("error"):
            self.errors.append((rec["path"], rec["error"]))
        else:
            verdict = rec.get("verdict") or ""
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1
            if rec.get("warnings"):
                self.with_warnings.add(verdict)

    def line(self, root: str) -> str:
        return (f"logdoctor: {display_path(root)}: {self.diagnosed} log(s) diagnosed, {self.skipped} already "
                f"present, {self.recovered} recovered from the journal, {self.parts} part file(s) written")


def run_dataset_batch(inputs: list[str], root: str, *, partition_by: str | None, resume: bool,
                      with_events: bool, rule_dirs: list[str], jobs: int, progress: bool,
                      timeout: float | None, rules: list[Any] | None, envelope: str | None,
                      row_group: int = ROW_GROUP) -> DatasetSummary:
    """Diagnose every log of `inputs` into the dataset at `root` (see the module doc). DatasetError for
    a directory that is not (or not yet) a dataset, as `open_dataset` says."""
    global _KNOWN, _PARTITIONING, _WITH_EVENTS
    from logdoctor.many.batch import BatchRow, discover_inputs, run_batch
    partitioning = open_dataset(root, partition_by, resume)
    summary = DatasetSummary()
    try:
        known, summary.recovered = resume_keys(root, partitioning) if resume else ({}, 0)
        writer = DatasetWriter(root, partitioning, row_group, with_events)
    except OSError as e:
        raise DatasetError(f"{display_path(root)}: {e.strerror or e}") from None
    found = list(discover_inputs(inputs))
    # set before the workers fork: they share them copy-on-write
    _KNOWN, _PARTITIONING, _WITH_EVENTS = known, partitioning, with_events

    def add(rec: dict[str, Any], events: list[dict[str, Any]]) -> None:
        writer.add(rec, events)
        summary.count(rec)
    try:
        for p, problem in found:
            if problem is not None:
                add(lost_record(p, problem), [])
        files = [p for p, problem in found if problem is None]
        results = run_batch(files, rule_dirs, jobs, True, None, progress, timeout, rules, envelope, work=dataset_work)
        try:
            for res in results:
                if isinstance(res, Skipped):
                    summary.skipped += 1
                elif isinstance(res[0], BatchRow):  # over budget or its worker died
                    add(lost_record(res[0].path, res[0].error), [])
                else:
                    add(*res)
        finally:
            results.close()
    finally:
        writer.close()  # what was diagnosed before an error or Ctrl-C still becomes parts
        summary.parts = writer.parts
        _KNOWN = {}
    return summary
