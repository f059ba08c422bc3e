"""Many logs: find them, diagnose each in a worker process, stream the rows back.

One bad file never costs the others: every path becomes exactly one row, with `error` set when it
could not be read (missing, unreadable, not a regular file, binary, vanished, symlink loop). FIFOs and
device files are never opened (opening a FIFO would block forever). Workers hold the rule set once;
rows are small, so memory does not grow with the number of files.
"""
from __future__ import annotations

import glob
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BINARY_SAMPLE = 8192
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".log.gz", ".txt.gz")


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


# ------------------------------------------------------------------------------------------------
# discovery


def discover(paths: Iterable[str], all_files: bool = False) -> Iterator[str]:
    """Files, directories (recursive, symlinked directories not followed), globs; never raises."""
    seen: set[str] = set()
    for p in paths:
        matches = sorted(glob.glob(p, recursive=True)) if glob.has_magic(p) else [p]
        if not matches:
            yield p  # reported as missing
            continue
        for m in matches:
            if os.path.isdir(m) and not os.path.islink(m):
                for root, dirs, files in os.walk(m, followlinks=False, onerror=lambda e: None):
                    dirs.sort()
                    for f in sorted(files):
                        full = os.path.join(root, f)
                        if (all_files or f.endswith(LOG_SUFFIXES)) and full not in seen:
                            seen.add(full)
                            yield full
            elif m not in seen:
                seen.add(m)
                yield m


def precheck(path: str) -> str | None:
    """Why a path cannot be read as a log (None when it can be tried)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file" if not os.path.islink(path) else "broken symlink"
    except PermissionError:
        return "permission denied"
    except OSError as e:
        return "symlink loop" if e.errno == 40 else f"cannot stat ({e.strerror or e})"
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "not a regular file (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (device)"
    if stat.S_ISSOCK(mode):
        return "not a regular file (socket)"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if st.st_size == 0:
        return "empty file"
    try:
        with open(path, "rb") as f:
            head = f.read(BINARY_SAMPLE)
    except PermissionError:
        return "permission denied"
    except OSError as e:
        return f"cannot read ({e.strerror or e})"
    if head[:2] == b"\x1f\x8b":
        return None
    if head.count(b"\x00") > len(head) // 10 or _non_text_ratio(head) > 0.3:
        return "binary file (not a text log)"
    return None


def _non_text_ratio(head: bytes) -> float:
    if not head:
        return 0.0
    text = head.decode("utf-8", errors="replace")
    bad = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\n\r\t\x1b"))
    return bad / max(len(text), 1)


# ------------------------------------------------------------------------------------------------
# per-file work (runs in worker processes)

_RULES: list[Any] | None = None
_EVENTS_DIR: str | None = None


def _init_worker(rule_dirs: list[str], events_dir: str | None) -> None:
    global _RULES, _EVENTS_DIR
    from .rules import load_ruleset
    _RULES = load_ruleset(rule_dirs)
    _EVENTS_DIR = events_dir


def diagnose_path(path: str, want_run: bool = False) -> tuple[BatchRow, dict[str, Any] | None]:
    """One file to one row (and optionally the flattened run); never raises."""
    from .diagnose import diagnose_source
    from .ingest import InputError
    row = BatchRow(path)
    problem = precheck(path)
    if problem is not None:
        row.error = problem
        return row, None
    assert _RULES is not None
    try:
        if _EVENTS_DIR is not None:
            report = _diagnose_with_events(path)
        else:
            report = diagnose_source(path, _RULES)
    except InputError as e:
        row.error = str(e).split(": ", 1)[-1]
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
    row.verdict = report.verdict
    row.last_stage = report.run.last_stage
    p = report.primary
    if p is not None:
        row.category, row.rule, row.title = p.category, p.rule.id, p.rule.title
        row.confidence = round(p.confidence, 3)
        row.evidence_line = p.position
    run = flatten_run(report) if want_run else None
    return row, run


def _diagnose_with_events(path: str) -> Any:
    """Diagnose and also write every event of this file to a part file for --events."""
    from .diagnose import diagnose
    from .parse import parse_source
    assert _EVENTS_DIR is not None and _RULES is not None
    part = Path(_EVENTS_DIR) / f"part-{os.getpid()}-{abs(hash(path))}.jsonl"
    with open(part, "a", encoding="utf-8") as out:
        def tee() -> Iterator[Any]:
            for ev in parse_source(path):
                out.write(json.dumps({"path": path, "line": ev.line, "rank": ev.ranks or (None if ev.rank is None else str(ev.rank)),
                                      "ts": ev.ts, "kind": ev.kind,
                                      "fields": json.dumps(ev.fields, default=str, ensure_ascii=False)},
                                     ensure_ascii=False) + "\n")
                yield ev
        return diagnose(tee(), _RULES, path)


def _work(args: tuple[str, bool]) -> tuple[BatchRow, dict[str, Any] | None]:
    return diagnose_path(*args)


def run_batch(paths: list[str], rule_dirs: list[str], jobs: int, want_run: bool = False,
              events_dir: str | None = None, progress: bool = False) -> Iterator[tuple[BatchRow, dict[str, Any] | None]]:
    """Yield (row, run) per path, in completion order."""
    total = len(paths)
    done = 0
    bar = _Progress(total) if progress else None
    if jobs <= 1 or total <= 1:
        _init_worker(rule_dirs, events_dir)
        for p in paths:
            res = diagnose_path(p, want_run)
            done += 1
            if bar:
                bar.update(done)
            yield res
    else:
        import multiprocessing as mp
        ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(rule_dirs, events_dir)) as pool:
            for res in pool.imap_unordered(_work, [(p, want_run) for p in paths], chunksize=max(1, min(64, total // (jobs * 8) or 1))):
                done += 1
                if bar:
                    bar.update(done)
                yield res
    if bar:
        bar.close()


class _Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.last = -1

    def update(self, done: int) -> None:
        pct = int(100 * done / max(self.total, 1))
        if pct != self.last:
            self.last = pct
            sys.stderr.write(f"\r{done}/{self.total} logs ({pct}%)")
            sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


# ------------------------------------------------------------------------------------------------
# runs: one flat row per run


RUN_COLUMNS = [
    "path", "model", "sglang_version", "era", "tp", "dp", "pp", "ep", "mem_fraction_static",
    "effective_mem_fraction_static", "cuda_graph_max_bs", "chunked_prefill_size", "attention_backend",
    "free_before_weights_gib", "free_after_weights_gib", "weights_gib", "kv_tokens", "kv_gib",
    "graph_capture_s", "time_to_ready_s", "gen_throughput_p10", "gen_throughput_median", "gen_throughput_p90",
    "peak_token_usage", "last_stage", "verdict", "category", "rule",
]


def flatten_run(report: Any) -> dict[str, Any]:
    from .memory import analyse
    run = report.run
    sa = run.server_args
    mem = analyse(run)
    stages = run.stages
    first = next((s for s in stages.values() if s.start_secs is not None), None)
    ready = stages.get("ready")
    gc = stages.get("graph_capture")
    p = report.primary
    return {
        "path": run.source, "model": sa.get("model_path"), "sglang_version": run.version, "era": run.era,
        "tp": run.tp_size, "dp": run.dp_size, "pp": run.pp_size, "ep": run.ep_size,
        "mem_fraction_static": _f(sa.get("mem_fraction_static")),
        "effective_mem_fraction_static": mem.effective_mem_fraction_static,
        "cuda_graph_max_bs": _i(sa.get("cuda_graph_max_bs")), "chunked_prefill_size": _i(sa.get("chunked_prefill_size")),
        "attention_backend": sa.get("attention_backend") if isinstance(sa.get("attention_backend"), str) else None,
        "free_before_weights_gib": mem.pre_load_free_gib, "free_after_weights_gib": mem.post_load_free_gib,
        "weights_gib": mem.weights_gib, "kv_tokens": mem.kv_tokens, "kv_gib": mem.kv_cache_gib,
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
    return asdict(row)


# ------------------------------------------------------------------------------------------------
# output (atomic: a temp file in the target directory, renamed when complete)


def atomic_output(target: str) -> tuple[Any, str]:
    d = os.path.dirname(os.path.abspath(target)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".logdoctor-", suffix=".part", dir=d)
    os.close(fd)
    return tmp, target


def finish_output(tmp: str, target: str) -> None:
    os.replace(tmp, target)


def discard_output(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
