"""The public API for runs, for notebooks and scripts: one log's `Run`, and a table of many runs.

`run_of(path)` gives what `logdoctor summary` prints (the fold of one log: configuration, stages, memory per
rank, batches, failures); `runs_table(paths)` gives what `logdoctor runs` prints, as a polars DataFrame
with one row per log, plus the files that could not be read and why. polars is imported only by
`runs_table`, so `import logdoctor.runs` stays light.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from logdoctor.read.citations import Citations
from logdoctor.run.fold import summarize_source
from logdoctor.run.model import Run, cite_run

if TYPE_CHECKING:
    import polars as pl


def run_of(source: str, envelope: str | None = None) -> Run:
    """The Run of one log (a path, a compressed file, or `-` for stdin), its lines those of the file as given."""
    citations = Citations()
    run = summarize_source(source, envelope, citations)
    cite_run(run, citations)
    return run


@dataclass
class RunsTable:
    frame: pl.DataFrame                                   # one row per readable log, sorted by path
    errors: dict[str, str] = field(default_factory=dict)  # path -> why it could not be read


def runs_table(paths: Sequence[str], rule_dirs: Sequence[str] = (), jobs: int = 1,
               timeout: float | None = None, envelope: str | None = None) -> RunsTable:
    """Files, directories and globs → one row per run (the columns of `logdoctor runs`).

    A bad file never costs the others their rows: it is listed in `errors`. `timeout` is each file's
    budget in seconds (None: none), as `logdoctor runs --timeout` takes it."""
    from logdoctor.many.batch import RUN_COLUMNS, collect
    from logdoctor.many.tables import frame
    rows, runs = collect(paths, list(rule_dirs), jobs, want_run=True, timeout=timeout, envelope=envelope)
    return RunsTable(frame(runs, RUN_COLUMNS), {r.path: r.error for r in rows if r.error is not None})

__all__ = ["Run", "RunsTable", "run_of", "runs_table"]
