"""Many logs on a Ray cluster: `logdoctor.fleet`, the engine behind `logdoctor batch … --engine ray`.

    import logdoctor.fleet as fleet
    fleet.init()                                       # a local Ray; fleet.init("auto") joins a cluster
    ds = fleet.dataset(["s3://bucket/logs/"])          # ray.data.Dataset, one row per log
    ds.write_parquet("s3://bucket/results/runs/")      # or fleet.write(paths, "s3://bucket/results/")
    rows = fleet.rows(["logs/"])                       # the rows `logdoctor batch` makes, in the driver

The pipeline is Ray Data's: the files are read as whole objects → `map_batches(diagnose_batch)` → rows
of `many.schema.RESULT_SCHEMA`, the same typed table the local engine writes. The reader is
`read_binary_files`' own (a `FileBasedDatasource`, one row per file) with two changes: the bytes stay as
stored (`read_binary_files` decompresses by file name, so a cut-short `.gz` would fail its task) and a
file that cannot be read is a row (there it fails the job); an object in S3/GCS/… is one ranged GET. `diagnose_batch` spools each log's bytes to a private temporary
file and diagnoses it with the local engine's own code (`sniff` decides compression by magic bytes,
`diagnose_source`, `batch.row_of_report`, `schema.result_record`), so a row is the row the local engine
makes for that file: same columns, same values, the path as the local engine shows it.

What is read is decided in the driver, as the local engine decides it (`batch.discover_inputs`:
directory walks and prefixes keep log names only, globs, URLs through fsspec with their usual
credentials); a missing bucket, an unlistable directory, a FIFO or an object that cannot be opened is an
error row, never a failed job. The rule set is loaded once in the driver and shipped once through the
object store; each worker process keeps it (`_WORKER_CACHE`), not each batch.

Memory: a log is held whole while it is diagnosed (in the object store between the read and the
diagnosis, and in one worker), so a node needs about (tasks in flight × BATCH_SIZE × the largest log)
of memory; a compressed log is held compressed. A log over `max_bytes` (default 1 GiB) gets an error row
instead of a node's memory: give such multi-GB logs to the local engine, which streams them.
`--timeout` has no effect here: Ray cannot stop a task in the middle of one log the way the local
engine's worker pool does (every pattern is linear-time anyway, so a log takes time in its size).

Ray is an optional dependency (`pip install 'logdoctor[ray]'`): this module imports it only when a
function is called, and `require_ray` turns its absence into one line naming the extra.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from contextlib import nullcontext
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from logdoctor.many.batch import BatchRow, discover_inputs, precheck, row_of_report
from logdoctor.paths import display_path

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

RAY_EXTRA = "pip install 'logdoctor[ray]'"
BATCH_SIZE = 16                  # logs per map_batches call: ~16 × the largest log held by one worker
MAX_BYTES = 1 << 30              # a log larger than this (as stored) is an error row, not a worker's memory
READ_CHUNK = 8 << 20
HEAD_BYTES = 64 * 1024           # where the launch date is looked for when the report has none


class FleetError(Exception):
    """Ray missing, or a cluster that cannot be reached: a one-line message."""


def require_ray() -> Any:
    """The `ray` module with Ray Data, or FleetError naming the extra to install."""
    try:
        import ray
        import ray.data  # noqa: F401  (the extra is ray[data]: pyarrow, pandas)
    except ImportError as e:
        raise FleetError(f"--engine ray needs Ray Data ({e.name or e}): {RAY_EXTRA}") from None
    return ray


# ------------------------------------------------------------------------------------------------
# the cluster


def init(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Start a local Ray (`num_cpus`, default: the usable CPUs) or join the cluster at `address`
    (`auto`, `ray://head:10001`, `head:6379`; default `$RAY_ADDRESS`, which `ray job submit` sets); True
    when this call started or joined it (the caller then calls `shutdown`), False when Ray was up already."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a CLI run does not report usage unless asked
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address is None:
            from logdoctor.many.workers import usable_cpus
            ray.init(num_cpus=num_cpus or usable_cpus(), **quiet)
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise FleetError(f"cannot start {where}: {' '.join(str(e).split())[:300]}") from None
    _quiet_data()
    return True


def shutdown() -> None:
    require_ray().shutdown()


def _quiet_data() -> None:
    """No progress bars or execution banners on stderr (the CLI's stderr is for per-file errors)."""
    import ray.data
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


# ------------------------------------------------------------------------------------------------
# worker side: one batch of (path, bytes) → result rows


_WORKER_CACHE: dict[str, tuple[str, Any]] = {}   # what → (object ref, value): fetched once per worker process


def _shared(value: Any, what: str) -> Any:
    """`[ref]` (a one-element list holding an object ref: in a list so that Ray passes the ref, not a copy
    per task) → the object, fetched once per worker process and kept; anything else as it is."""
    if not (isinstance(value, list) and len(value) == 1 and type(value[0]).__name__ == "ObjectRef"):
        return value
    key = value[0].hex()
    hit = _WORKER_CACHE.get(what)
    if hit is None or hit[0] != key:
        import ray
        hit = _WORKER_CACHE[what] = (key, ray.get(value[0]))
    return hit[1]


def _rules_of(shared: Any) -> Any:
    """The rule set a batch names: None (the built-ins, loaded once per worker), `[ref]`, or a rule list."""
    if shared is None:
        hit = _WORKER_CACHE.get("builtin")
        if hit is None:
            from logdoctor.diagnosis.rules import load_ruleset
            hit = _WORKER_CACHE["builtin"] = ("", load_ruleset(()))
        return hit[1]
    return _shared(shared, "rules")


def diagnose_batch(batch: pa.Table, rules: Any = None, envelope: str | None = None,
                   partition_by: str | None = None, known: Any = None) -> pa.Table:
    """Ray Data's `map_batches` function: a table of `path` (as the local engine shows it), `bytes` (the
    log as stored, compressed or not) and optionally `read_error` → one RESULT_SCHEMA row per log.

    `rules`: None (the built-ins), a loaded rule list, or `[ray.put(rules)]`; `known` (the same forms): a
    {display path: content hash} of logs already in a dataset (`--resume`), which get no row. Never
    raises for a log: what cannot be diagnosed is a row with `error` set."""
    from logdoctor.many.schema import result_frame
    ruleset = _rules_of(rules)
    from logdoctor.many.dataset import Partitioning
    part = Partitioning.parse(partition_by)
    cols = batch.column_names
    paths = batch.column("path").to_pylist()
    datas = batch.column("bytes").to_pylist()
    errors = batch.column("read_error").to_pylist() if "read_error" in cols else [None] * len(paths)
    skip = _shared(known, "known") or {}
    records = [_record(p, d, e, ruleset, envelope, part, skip) for p, d, e in zip(paths, datas, errors)]
    return result_frame([r for r in records if r is not None]).to_arrow()


def _record(path: str, data: bytes | None, read_error: str | None, rules: Any, envelope: str | None,
            part: Any, known: dict[str, str]) -> dict[str, Any] | None:
    from logdoctor.many.dataset import report_date
    from logdoctor.many.schema import content_digest, launch_date, path_component, result_record
    from logdoctor.read.memory_source import spooled
    shown = display_path(path)
    path_part = path_component(shown, part.n) if part.kind == "path" else None
    if read_error is not None or data is None:
        rec = result_record(BatchRow(path, error=read_error or "read failed"), None, None, None,
                            path_part=path_part)
    else:
        with spooled(data, shown) as copy:
            problem = precheck(copy)
            if problem is not None:  # as the local engine: no hash, size or date for what it refuses
                rec = result_record(BatchRow(path, error=problem), None, None, None, path_part=path_part)
            else:
                digest = content_digest()
                digest.update(data)
                if known and known.get(shown) == digest.hexdigest():
                    return None  # already in the dataset, unchanged
                row, run, report = _diagnose_copy(copy, path, rules, envelope)
                date = report_date(report) if report is not None else None
                rec = result_record(row, run, digest.hexdigest() if row.error is None else None, len(data),
                                    date or launch_date(data[:HEAD_BYTES]), path_part)
    rec["path"] = shown
    return rec


def _diagnose_copy(copy: str, path: str, rules: Any, envelope: str | None
                   ) -> tuple[BatchRow, dict[str, Any] | None, Any]:
    """batch._diagnose_path on a temporary copy of `path` that passed its precheck: the same error texts,
    the report labelled with `path`'s display form."""
    from logdoctor.diagnosis.ranking import diagnose_source
    from logdoctor.read.sniff import InputError
    row = BatchRow(path)
    try:
        report = diagnose_source(copy, rules, display_path(path), envelope)
    except InputError as e:
        row.error = e.reason
        return row, None, None
    except (OSError, EOFError) as e:
        row.error = f"read failed ({e})"
        return row, None, None
    except RecursionError:
        row.error = "input too deeply nested"
        return row, None, None
    except Exception as e:  # one broken file must not end the batch
        row.error = f"internal error: {type(e).__name__}: {e}"
        return row, None, None
    row, run = row_of_report(path, report, True)
    return row, run, report


# ------------------------------------------------------------------------------------------------
# reading: the files the driver found, as whole objects, bytes as stored


@lru_cache(maxsize=1)
def _datasource_classes() -> tuple[type, type]:
    """(the datasource, its metadata provider), defined on first use: ray is optional."""
    import pyarrow as pa
    from ray.data.datasource import DefaultFileMetadataProvider, FileBasedDatasource

    from logdoctor.read.remote import reason_of

    schema = pa.schema([("path", pa.string()), ("bytes", pa.large_binary()), ("read_error", pa.string())])

    class Listed(DefaultFileMetadataProvider):
        """The driver listed the files already (batch.discover_inputs): no second listing, no HEAD per object."""

        def expand_paths(self, paths: Any, filesystem: Any, partitioning: Any = None,
                         ignore_missing_paths: bool = False) -> Any:
            for p in paths:
                yield p, None

    class LogFiles(FileBasedDatasource):
        """Each file as one row: `path` (as the driver named it), `bytes` (as stored: compression is the
        readers' business, by magic bytes), `read_error` (why it could not be read, else null)."""

        def __init__(self, paths: list[str], prefix: str, max_bytes: int, objects: Any = None, **kwargs: Any) -> None:
            super().__init__(paths, **kwargs)
            self._prefix, self._max_bytes, self._objects = prefix, max_bytes, objects

        def resolve_compression(self, path: str, open_args: dict[str, Any]) -> str | None:
            return None

        def _open_input_source(self, filesystem: Any, path: str, **open_args: Any) -> Any:
            if self._objects is not None:  # an object store: fetched in _read_stream, one GET
                return nullcontext(_Unopened(""))
            open_args["compression"] = None
            try:
                return filesystem.open_input_stream(path, **open_args)
            except Exception as e:  # an object that cannot be opened is a row, not a failed task
                return nullcontext(_Unopened(reason_of(e)))

        def _read_stream(self, f: Any, path: str) -> Any:
            data: bytes | None = None
            error: str | None = None
            if isinstance(f, _Unopened) and self._objects is not None:
                data, error = _fetch(self._objects, path, self._max_bytes)
            elif isinstance(f, _Unopened):
                error = str(f)
            else:
                try:
                    data = _read_bounded(f, self._max_bytes)
                except Exception as e:
                    error = reason_of(e)
            if data is None and error is None:
                error = (f"larger than {self._max_bytes / (1 << 30):.1f} GiB: too large for the Ray engine, "
                         "which holds a log whole (use the local engine, which streams it)")
            yield pa.table({"path": [self._prefix + path], "bytes": [data], "read_error": [error]}, schema=schema)

        def _rows_per_file(self) -> int:
            return 1

    return LogFiles, Listed


class _Unopened(str):
    """Why `_open_input_source` could not open an object ("" for an object `_read_stream` fetches itself)."""


def _fetch(fs: Any, path: str, limit: int) -> tuple[bytes | None, str | None]:
    """An object's bytes in one ranged GET (pyarrow's fsspec stream would HEAD it first, twice the requests
    against the per-prefix rate); (None, None) when it holds more than `limit` bytes, (None, why) on failure."""
    from logdoctor.read.remote import reason_of
    try:
        data = fs.cat_file(path, start=0, end=limit + 1)
    except Exception as e:
        if "range" not in str(e).lower():
            return None, reason_of(e)
        try:  # an empty object has no byte 0 to range over: S3 answers 416
            data = fs.cat_file(path)
        except Exception as again:
            return None, reason_of(again)
    return (None, None) if len(data) > limit else (bytes(data), None)


def _read_bounded(f: Any, limit: int) -> bytes | None:
    """The whole stream, or None when it holds more than `limit` bytes (read no further than that)."""
    parts: list[bytes] = []
    while chunk := f.read(READ_CHUNK):
        parts.append(bytes(chunk))
        if sum(map(len, parts)) > limit:
            return None
    return b"".join(parts)


def _read(files: list[str], scheme: str, max_bytes: int) -> ray.data.Dataset:
    import ray.data
    LogFiles, Listed = _datasource_classes()
    if not scheme:
        source = LogFiles(files, "", max_bytes, meta_provider=Listed())
    else:
        from logdoctor.read.remote import filesystem_of
        fs, _ = filesystem_of(files[0])  # fsspec, configured as the local engine's (credentials, endpoint)
        stripped = [fs._strip_protocol(f) for f in files]
        prefix = files[0][: len(files[0]) - len(stripped[0])]  # "s3://": the rows name the URL as listed
        source = LogFiles(stripped, prefix, max_bytes, fs, meta_provider=Listed(), filesystem=fs)
    return ray.data.read_datasource(source)


# ------------------------------------------------------------------------------------------------
# the pipeline


def _found(paths: Sequence[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """(files to read, error records) as the local engine finds them (and refuses them: see precheck)."""
    from logdoctor.many.schema import result_record
    from logdoctor.read.remote import is_url
    files: list[str] = []
    errors: list[dict[str, Any]] = []
    for path, problem in discover_inputs(paths):
        if problem is None and (not is_url(path) or path.startswith("file://")):
            problem = precheck(path)  # the driver refuses FIFOs, devices and unreadable files, as batch does
        if problem is None:
            files.append(path)
        else:
            errors.append({**result_record(BatchRow(path, error=problem), None, None, None),
                           "path": display_path(path)})
    return files, errors


def dataset(paths: str | Sequence[str], rules: Any = None, *, envelope: str | None = None,
            partition_by: str | None = None, batch_size: int = BATCH_SIZE, max_bytes: int = MAX_BYTES,
            concurrency: int | None = None, known: dict[str, str] | None = None) -> ray.data.Dataset:
    """The results of every log under `paths` (files, directories, globs, URLs) as a Ray Dataset with
    RESULT_SCHEMA's columns, one row per log (error rows included). Lazy: nothing runs until it is consumed
    (`write_parquet`, `iter_batches`, `take_all`). Starts a local Ray if none is running. `known`:
    {display path: content hash} of logs to leave out when unchanged (a dataset's `--resume`)."""
    import ray
    require_ray()
    if not ray.is_initialized():
        init()
    _quiet_data()
    wanted = [paths] if isinstance(paths, str) else list(paths)
    files, errors = _found(wanted)
    shared = [ray.put(_loaded(rules))]
    skip = [ray.put(known)] if known else None
    parts: list[ray.data.Dataset] = []
    from logdoctor.read.remote import is_url, scheme_of
    groups: dict[str, list[str]] = {}  # by scheme ("": local paths, which Ray opens as they are named)
    for f in files:
        groups.setdefault((scheme_of(f) or "") if is_url(f) else "", []).append(f)
    for scheme, group in groups.items():
        parts.append(_read(group, scheme, max_bytes).map_batches(
            diagnose_batch, batch_format="pyarrow", batch_size=batch_size, concurrency=concurrency,
            fn_kwargs={"rules": shared, "envelope": envelope, "partition_by": partition_by, "known": skip}))
    if errors or not parts:
        from logdoctor.many.schema import result_frame
        parts.append(ray.data.from_arrow(result_frame(errors).to_arrow()))
    ds = parts[0]
    ds = ds.union(*parts[1:]) if len(parts) > 1 else ds
    global _last_found
    _last_found = len(files) + len(errors)
    return ds


_last_found = 0  # the logs (and error rows) the last `dataset` call found: what write_dataset counts against


def _loaded(rules: Any) -> Any:
    from logdoctor.diagnosis.rules import load_ruleset
    if rules is None:
        return load_ruleset(())
    if isinstance(rules, (str, os.PathLike)):
        return load_ruleset([os.fspath(rules)])
    items = list(rules)
    if all(isinstance(r, (str, os.PathLike)) for r in items):
        return load_ruleset([os.fspath(r) for r in items])
    return rules


def records(paths: str | Sequence[str], rules: Any = None, **options: Any) -> list[dict[str, Any]]:
    """Every result record (RESULT_SCHEMA's columns), sorted by path, in the driver."""
    out: list[dict[str, Any]] = []
    batch: Any  # a pyarrow.Table (batch_format)
    for batch in dataset(paths, rules, **options).iter_batches(batch_format="pyarrow", batch_size=1024):
        out.extend(batch.to_pylist())
    out.sort(key=lambda r: r["path"])
    return out


def rows(paths: str | Sequence[str], rules: Any = None, **options: Any) -> list[BatchRow]:
    """The BatchRows `logdoctor batch` makes of `paths` (path in its display form), sorted by path."""
    fields = [f for f in BatchRow.__dataclass_fields__ if f != "path"]
    return [BatchRow(str(r["path"]), **{f: r.get(f) for f in fields}) for r in records(paths, rules, **options)]


def write(paths: str | Sequence[str], out: str, rules: Any = None, *, partition_by: str | None = None,
          **options: Any) -> Any:
    """The results of `paths` as a dataset at `out` (a directory or URL prefix, `s3://bucket/results`) in
    `many.dataset`'s layout (marker, `runs/` hive-partitioned as `partition_by` says), the Parquet written
    by the Ray workers; no journal, no `--resume`. A `many.dataset.DatasetSummary`."""
    from logdoctor.many import dataset as results
    from logdoctor.many.dataset_read import RUNS_DIR
    part = results.Partitioning.parse(partition_by)
    ds = dataset(paths, rules, partition_by=str(part), **options).materialize()  # written and counted once
    column = {"date": "date", "path": "path_part"}.get(part.kind)
    root = out.rstrip("/")
    _write_marker(root, str(part))
    # ~ROW_GROUP rows a block, not one block per batch: 10^6 logs are ~500 files (PUTs), not 60,000 small ones
    ds = ds.repartition(max(1, -(-ds.count() // results.ROW_GROUP)))
    ds.write_parquet(f"{root}/{RUNS_DIR}", partition_cols=[column] if column else None)
    summary = results.DatasetSummary()
    batch: Any  # a pyarrow.Table (batch_format)
    for batch in ds.select_columns(["path", "error", "verdict", "warnings"]).iter_batches(batch_format="pyarrow"):
        for rec in batch.to_pylist():
            summary.count(rec)
    from logdoctor.read.remote import filesystem_of
    fs, where = filesystem_of(root)
    summary.parts = len(fs.glob(f"{where}/{RUNS_DIR}/**/*.parquet"))
    return summary


def _write_marker(root: str, partition_by: str) -> None:
    """`many.dataset`'s marker file, through fsspec (a URL) or the file system."""
    from logdoctor import __version__
    from logdoctor.many.dataset_read import MARKER
    from logdoctor.many.schema import SCHEMA_VERSION
    from logdoctor.read.remote import filesystem_of
    fs, where = filesystem_of(root)
    marker = f"{where}/{MARKER}"
    if fs.exists(marker):
        raise FleetError(f"{display_path(root)}: already holds a results dataset; name a new prefix")
    fs.makedirs(where, exist_ok=True)
    with fs.open(marker, "w") as f:
        json.dump({"format": "logdoctor-results", "schema_version": SCHEMA_VERSION, "partition_by": partition_by,
                   "logdoctor_version": __version__, "schema": "logdoctor/results.schema.json"}, f, indent=1)


def write_dataset(paths: Sequence[str], root: str, rules: Any = None, *, partition_by: str | None = None,
                  resume: bool = False, row_group: int | None = None, envelope: str | None = None,
                  **options: Any) -> Any:
    """`batch PATHS -o DIR/ --engine ray`: the local dataset layout of `many.dataset` (marker, journal, parts,
    `--resume`), written by the driver as Ray's rows arrive; a `many.dataset.DatasetSummary`. A URL
    `root` (`s3://bucket/results/`) is written by the workers instead (`write`), without `--resume`."""
    from logdoctor.many import dataset as results
    from logdoctor.read.remote import is_url
    if is_url(root) and not root.startswith("file://"):
        if resume:
            raise FleetError(f"--resume: {display_path(root)} is in object storage, where the Ray engine writes "
                             "a dataset once; resume works on a local -o DIR/")
        return write(paths, root, rules, partition_by=partition_by, envelope=envelope, **options)
    partitioning = results.open_dataset(root, partition_by, resume)
    summary = results.DatasetSummary()
    known, summary.recovered = results.resume_keys(root, partitioning) if resume else ({}, 0)
    writer = results.DatasetWriter(root, partitioning, row_group or results.ROW_GROUP)
    found = 0
    try:
        ds = dataset(list(paths), rules, envelope=envelope, partition_by=str(partitioning), known=known, **options)
        batch: Any  # a pyarrow.Table (batch_format)
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for rec in batch.to_pylist():
                found += 1
                writer.add(rec, [])
                summary.count(rec)
    finally:
        writer.close()  # what arrived before an error or Ctrl-C still becomes parts
        summary.parts = writer.parts
    summary.skipped = max(0, _last_found - found)
    return summary


__all__ = ["BATCH_SIZE", "MAX_BYTES", "FleetError", "dataset", "diagnose_batch", "init", "records", "require_ray",
           "rows", "shutdown", "write", "write_dataset"]
