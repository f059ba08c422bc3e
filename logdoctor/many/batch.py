"""Many logs: find them, diagnose each in a worker process, stream the rows back.

One bad file never costs the others: every path becomes exactly one row, with `error` set when it
could not be read (missing, unreadable, not a regular file, binary, vanished, symlink loop, a directory
that cannot be listed, over its time budget, its worker killed). FIFOs and device files are never opened
(opening a FIFO would block forever). Workers inherit the rule set loaded once by the parent; rows are
small, so memory does not grow with the number of files.

Paths stay as Python decodes them from the file system (undecodable bytes as surrogates, so the file
can still be opened); rows carry that form and every output shows `paths.display_path` of it.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from datetime import datetime, timedelta
from typing import IO, Any

from logdoctor import regexes
from logdoctor.paths import display_path, display_text
from logdoctor.records import asdict, dataclass

# What a directory walk picks up: NAME.log / .txt / .out / .err, optionally rotated (server.log.1,
# server.log-20240101, server.log.2024-01-01) and optionally gzipped (.gz); and any other .gz file.
# Bounded repetition only: a file name is untrusted input too.
LOG_NAME = regexes.compile(r"(?:\.(?:log|txt|out|err)(?:[.-][0-9][0-9._-]{0,31})?(?:\.gz)?|\.gz)$")
_EPOCH, _MICROSECOND = datetime(1970, 1, 1), timedelta(microseconds=1)


@dataclass
class BatchRow:
    path: str
    verdict: str | None = None
    category: str | None = None
    rule: str | None = None
    title: str | None = None
    confidence: float | None = None
    evidence_line: int | None = None
    last_stage: str | None = None
    error: str | None = None
    warnings: int | None = None       # warning-severity diagnoses (MEM101 …): what `--fail-on warning` reads


# ------------------------------------------------------------------------------------------------
# discovery


def is_log_name(name: str) -> bool:
    """Whether a directory walk picks up a file of this name (see LOG_NAME)."""
    return LOG_NAME.search(name) is not None


def discover_inputs(paths: Iterable[str], all_files: bool = False) -> Iterator[tuple[str, str | None]]:
    """(path, problem) for files, directories (recursive, symlinked directories not followed) and globs.

    `problem` is None for a file to try, or why a directory could not be listed: an unreadable
    directory is a finding, not an empty one. URLs (`s3://b/logs/`, `gs://b/**/*.log`) are listed by
    `read.remote.discover_urls` with the same name filter; a missing bucket is one (url, problem). Never raises.
    """
    seen: set[str] = set()
    for p in paths:
        if "://" in p:  # s3://…, gs://…, file://…: objects, prefixes and globs listed by read.remote
            from logdoctor.read.remote import discover_urls, is_url
            if is_url(p):
                for url, problem in discover_urls(p, (lambda _name: True) if all_files else is_log_name):
                    if url not in seen:
                        seen.add(url)
                        yield url, problem
                continue
        matches = sorted(glob.glob(p, recursive=True)) if glob.has_magic(p) else [p]
        if not matches:
            yield p, None  # reported as missing
            continue
        for m in matches:
            if os.path.isdir(m) and not os.path.islink(m):
                unlisted: list[OSError] = []
                for root, dirs, files in os.walk(m, followlinks=False, onerror=unlisted.append):
                    yield from _unlisted(unlisted, seen)
                    dirs.sort()
                    for f in sorted(files):
                        full = os.path.join(root, f)
                        if (all_files or is_log_name(f)) and full not in seen:
                            seen.add(full)
                            yield full, None
                yield from _unlisted(unlisted, seen)
            elif m not in seen:
                seen.add(m)
                yield m, None


def _unlisted(errors: list[OSError], seen: set[str]) -> Iterator[tuple[str, str]]:
    while errors:
        e = errors.pop(0)
        where = os.fspath(e.filename) if e.filename is not None else "?"
        if where in seen:
            continue
        seen.add(where)
        why = "permission denied" if isinstance(e, PermissionError) else (e.strerror or str(e))
        yield where, f"cannot list directory ({why})"


def discover(paths: Iterable[str], all_files: bool = False) -> Iterator[str]:
    """The paths of discover_inputs (unlistable directories included, as their own path)."""
    for path, _ in discover_inputs(paths, all_files):
        yield path


def precheck(path: str) -> str | None:
    """Why a path cannot be read as a log (None when it can be tried).

    The same checks `open_source` makes for every other command (sniff.check_path: device, socket,
    binary, corrupt compression by magic bytes), except that FIFOs and the null device are refused
    without being opened: a directory walk must not wait for a writer on every FIFO it meets. A URL is
    checked by its metadata (no such object / bucket, access denied, empty: remote.check_url); what its
    content is wrong with (binary, corrupt) is the InputError of reading it, with the same reason.
    """
    from logdoctor.read.sniff import check_path
    return check_path(path)


def _non_text_ratio(head: bytes) -> float:
    from logdoctor.read.sniff import non_text_ratio
    return non_text_ratio(head)


# ------------------------------------------------------------------------------------------------
# per-file work (runs in worker processes)

_RULES: list[Any] | None = None  # set in the parent before workers fork: they share it copy-on-write
_EVENTS: IO[bytes] | None = None  # this process's events file (an unlinked temp file), when --events
_ENVELOPE: str | None = None      # --envelope (None: detected per file); set before workers fork, like _RULES
# the typed events of the file being diagnosed (schema.typed_event records), when a dataset wants them
_TYPED_EVENTS: list[dict[str, Any]] | None = None


def capture_typed_events(sink: list[dict[str, Any]] | None) -> None:
    """Collect each diagnosed file's events into `sink` (None: stop), typed as schema.EVENT_SCHEMA."""
    global _TYPED_EVENTS
    _TYPED_EVENTS = sink


def _set_events(sink: IO[bytes] | None) -> None:
    global _EVENTS
    _EVENTS = sink


def diagnose_path(path: str, want_run: bool = False) -> tuple[BatchRow, dict[str, Any] | None]:
    """One file to one row (and optionally the flattened run); never raises."""
    if _EVENTS is None:
        return _diagnose_path(path, want_run)
    _EVENTS.flush()
    start = _EVENTS.tell()
    row, run = _diagnose_path(path, want_run)
    _EVENTS.flush()
    if row.error is not None:  # no half a file's events next to an error row
        _EVENTS.truncate(start)
        _EVENTS.seek(start)
    return row, run


def _diagnose_path(path: str, want_run: bool) -> tuple[BatchRow, dict[str, Any] | None]:
    from logdoctor.diagnosis.ranking import diagnose_source
    from logdoctor.read.ingest import InputError
    global _LAST_REPORT
    _LAST_REPORT = None
    row = BatchRow(path)
    problem = precheck(path)
    if problem is not None:
        row.error = problem
        return row, None
    assert _RULES is not None
    try:
        if _EVENTS is not None or _TYPED_EVENTS is not None:
            report = _diagnose_with_events(path)
        else:
            report = diagnose_source(path, _RULES, display_path(path), _ENVELOPE)
    except InputError as e:
        row.error = e.reason
        return row, None
    except FileNotFoundError:
        row.error = "vanished during the run"
        return row, None
    except (OSError, EOFError) as e:
        row.error = f"read failed ({e})"
        return row, None
    except RecursionError:
        row.error = "input too deeply nested"
        return row, None
    except Exception as e:  # one broken file must not end the batch
        row.error = f"internal error: {type(e).__name__}: {e}"
        return row, None
    _LAST_REPORT = report
    return row_of_report(path, report, want_run)


_LAST_REPORT: Any = None  # the Report of the file this process diagnosed last (for the dataset's date column)


def last_report() -> Any:
    """The Report `diagnose_path` made last in this process (None after a file that could not be read)."""
    return _LAST_REPORT


def row_of_report(path: str, report: Any, want_run: bool = False) -> tuple[BatchRow, dict[str, Any] | None]:
    """A diagnosed log's row (and its flattened run when `want_run`): the one place a Report becomes a row,
    whatever engine read the log (this module's workers, `logdoctor.fleet` on Ray)."""
    row = BatchRow(path)
    row.verdict = report.verdict
    row.last_stage = report.run.last_stage
    row.warnings = sum(d.rule.severity == "warning" for d in report.diagnoses)
    p = report.primary
    if p is not None:
        row.category, row.rule, row.title = p.category, p.rule.id, p.rule.title
        row.confidence = round(p.confidence, 3)
        row.evidence_line = p.position
    run = flatten_run(report) if want_run else None
    return row, run


def _diagnose_with_events(path: str) -> Any:
    """Diagnose and also append every event of this file, as JSON lines, to this process's events file."""
    from logdoctor.diagnosis.ranking import diagnose
    from logdoctor.parse.parse import parse_source
    from logdoctor.read.citations import Citations
    assert _RULES is not None
    out, shown = _EVENTS, display_path(path)
    events = parse_source(path) if _ENVELOPE is None else parse_source(path, _ENVELOPE)
    # events stay in reading order for the diagnosis; their rows cite the lines as given
    citations = getattr(events, "citations", None) or Citations()

    def tee() -> Iterator[Any]:
        if out is None:  # typed records for a dataset (see capture_typed_events)
            from logdoctor.many.schema import typed_event
            typed, cite, text = _TYPED_EVENTS, citations.line, display_text(shown)
            assert typed is not None
            for ev in events:
                typed.append(typed_event(ev, text, cite(ev.line), cite(ev.end_line if ev.end_line is not None
                                                                       else ev.line)))
                yield ev
            return
        # the same typed records as a dataset's, as JSON lines (`ts` in microseconds) for the parent to type
        from logdoctor.many.schema import typed_event
        cite, text = citations.line, display_text(shown)
        for ev in events:
            rec = typed_event(ev, text, cite(ev.line), cite(ev.end_line if ev.end_line is not None else ev.line))
            if rec["ts"] is not None:
                rec["ts"] = (rec["ts"] - _EPOCH) // _MICROSECOND
            out.write(json.dumps(rec, default=str, ensure_ascii=False).encode("utf-8", "backslashreplace") + b"\n")
            yield ev
    return diagnose(tee(), _RULES, shown, citations=citations)


def run_batch(paths: list[str], rule_dirs: list[str], jobs: int, want_run: bool = False,
              events: list[IO[bytes]] | None = None, progress: bool = False, timeout: float | None = None,
              rules: list[Any] | None = None, envelope: str | None = None,
              work: Callable[[str], Any] | None = None) -> Generator[Any, None, None]:
    """Yield (row, run) per path, in completion order.

    `work(path)`: what each worker makes of a path instead of `diagnose_path(path, want_run)` (the
    dataset writer's record); it must never raise, and a lost path still yields `(BatchRow(error), None)`.

    `timeout` (seconds, None or 0 for none) is each file's budget: a file over it gets the row
    `timed out after N s` and its worker is replaced. With a budget even `jobs=1` runs in a worker
    process, because only a separate process can be stopped in the middle of a regex. `events`: a list
    that receives the unlinked temp files holding every event as JSON lines (the caller closes them).
    `envelope`: as `ingest.read_lines` takes it, for every file (None: detected per file).
    """
    global _RULES, _ENVELOPE
    from logdoctor.many.workers import Pool, worker_count
    if rules is None:
        from logdoctor.diagnosis.rules import load_ruleset
        rules = load_ruleset(rule_dirs)
    _RULES = rules
    _ENVELOPE = envelope
    total = len(paths)
    bar = _Progress(total) if progress else None
    if timeout is not None and timeout <= 0:
        timeout = None
    each: Callable[[str], Any] = work if work is not None else (lambda p: diagnose_path(p, want_run))
    if timeout is None and worker_count(jobs, total) == 1:
        results = _in_process(paths, each, events)
    else:
        def lost(path: str, why: str) -> tuple[BatchRow, dict[str, Any] | None]:  # over budget, or worker died
            return BatchRow(path, error=why), None
        pool: Pool[str, Any] = Pool(each, lost, _set_events, jobs, timeout, events is not None,
                                    events if events is not None else [])
        results = pool.run(paths)
    try:
        for done, res in enumerate(results, 1):
            if bar:
                bar.update(done)
            yield res
    finally:
        results.close()
        if bar:
            bar.close()


def collect(paths: Iterable[str], rule_dirs: list[str], jobs: int, want_run: bool = False,
            events: list[IO[bytes]] | None = None, progress: bool = False, timeout: float | None = None,
            rules: list[Any] | None = None, envelope: str | None = None
            ) -> tuple[list[BatchRow], list[dict[str, Any]]]:
    """Files, directories and globs → every row (an error row for what cannot be read) and the flattened runs,
    both sorted by path; `run_batch`'s arguments otherwise."""
    found = list(discover_inputs(paths))
    rows = [BatchRow(p, error=problem) for p, problem in found if problem is not None]
    runs: list[dict[str, Any]] = []
    files = [p for p, problem in found if problem is None]
    with closing(run_batch(files, rule_dirs, jobs, want_run, events, progress, timeout, rules, envelope)) as results:
        for row, run in results:
            rows.append(row)
            if run is not None:
                runs.append(run)
    rows.sort(key=lambda r: r.path)
    runs.sort(key=lambda r: r["path"])
    return rows, runs


def _in_process(paths: list[str], each: Callable[[str], Any], events: list[IO[bytes]] | None
                ) -> Generator[Any, None, None]:
    import tempfile
    if events is not None:
        sink = tempfile.TemporaryFile(prefix="logdoctor-")
        events.append(sink)
        _set_events(sink)
    try:
        for p in paths:
            yield each(p)
    finally:
        _set_events(None)


class _Progress:
    """click's bar (drawn only on a terminal, with an ETA), and the rate in logs/s after it."""

    def __init__(self, total: int) -> None:
        import time

        import click
        self.started = time.monotonic()
        self.done = 0
        self.bar = click.progressbar(length=total, label="logs", file=sys.stderr, show_pos=True, show_eta=True,
                                     item_show_func=lambda rate: rate)

    def update(self, done: int) -> None:
        import time
        elapsed = time.monotonic() - self.started
        rate = f"{done / elapsed:,.1f} logs/s" if elapsed > 0 and done else None
        self.bar.update(done - self.done, rate)
        self.done = done

    def close(self) -> None:
        self.bar.render_finish()


# ------------------------------------------------------------------------------------------------
# runs: one flat row per run


RUN_COLUMNS = [
    "path", "model", "sglang_version", "era", "tp", "tp_source", "dp", "pp", "ep", "mem_fraction_static",
    "effective_mem_fraction_static", "cuda_graph_max_bs", "chunked_prefill_size", "attention_backend",
    "free_before_weights_gib", "free_after_weights_gib", "weights_gib", "kv_tokens", "kv_gib",
    "graph_capture_s", "time_to_ready_s", "gen_throughput_p10", "gen_throughput_median", "gen_throughput_p90",
    "peak_token_usage", "last_stage", "verdict", "category", "rule",
]


def flatten_run(report: Any) -> dict[str, Any]:
    run = report.run
    sa = run.server_args
    mem = report.memory or {}  # the KV budget diagnosis already worked out for this run
    stages = run.stages
    first = next((s for s in stages.values() if s.start_secs is not None), None)
    ready = stages.get("ready")
    gc = stages.get("graph_capture")
    p = report.primary
    return {
        "path": run.source, "model": sa.get("model_path"), "sglang_version": run.version, "era": run.era,
        "tp": run.tp_size, "tp_source": run.parallel_source.get("tp"), "dp": run.dp_size, "pp": run.pp_size, "ep": run.ep_size,
        "mem_fraction_static": _f(sa.get("mem_fraction_static")),
        "effective_mem_fraction_static": mem.get('effective_mem_fraction_static'),
        "cuda_graph_max_bs": _i(sa.get("cuda_graph_max_bs")), "chunked_prefill_size": _i(sa.get("chunked_prefill_size")),
        "attention_backend": sa.get("attention_backend") if isinstance(sa.get("attention_backend"), str) else None,
        "free_before_weights_gib": mem.get('pre_load_free_gib'), "free_after_weights_gib": mem.get('post_load_free_gib'),
        "weights_gib": mem.get('weights_gib'), "kv_tokens": mem.get('kv_tokens'), "kv_gib": mem.get('kv_cache_gib'),
        "graph_capture_s": gc.duration_s if gc else None,
        "time_to_ready_s": (round(ready.start_secs - first.start_secs, 2)
                            if ready and first and ready.start_secs is not None and first.start_secs is not None else None),
        "gen_throughput_p10": run.batches.get("gen_throughput_p10"),
        "gen_throughput_median": run.batches.get("gen_throughput_median"),
        "gen_throughput_p90": run.batches.get("gen_throughput_p90"),
        "peak_token_usage": run.batches.get("peak_token_usage"),
        "last_stage": run.last_stage, "verdict": report.verdict,
        "category": p.category if p else None, "rule": p.rule.id if p else None,
    }


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _i(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def row_dict(row: BatchRow) -> dict[str, Any]:
    """The row as it is written: path in its display form, text escaped (see paths.display_path)."""
    d = asdict(row)
    return {k: display_text(v) if isinstance(v, str) else v for k, v in d.items()}
