"""Commands over many logs: batch, runs, compare, clusters.

`batch` / `runs` / `clusters` exit codes: 0 all logs read and none failed, 1 at least one failed launch
diagnosed (`batch`, `runs`), 2 a usage error, no log found, or at least one file could not be read or ran
over its time budget (every other file's row is still written; stderr names each such file). Outputs
(`-o`, `--events`) are checked before any log is read, so a wrong destination costs nothing; see
`paths.Destination` for how they are written.
"""
from __future__ import annotations

import os
import sys
from typing import IO, Any

import click

from logdoctor.cli.common import (
    EXIT_FAILURE_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    cited,
    destination,
    dump,
    envelope_option,
    event_at,
    fail_on_option,
    label,
    load_rules,
    meets_fail_on,
    output_format,
    redact_option,
    redacted,
    redacting,
    redactor,
    selection_options,
)
from logdoctor.many import DEFAULT_TIMEOUT_S
from logdoctor.paths import Destination, display_path

EVENT_SCHEMA = ("path", "line", "rank", "ts", "kind", "fields")


def _jobs(jobs: int | None) -> int:
    from logdoctor.many.workers import usable_cpus
    return max(1, jobs or usable_cpus())


def _progress(no_progress: bool) -> bool:
    return not no_progress and sys.stderr.isatty()


def _collect(paths: tuple[str, ...], rule_dirs: tuple[str, ...], jobs: int | None, no_progress: bool,
             want_run: bool, timeout: float, events: list[IO[bytes]] | None = None, envelope: str | None = None
             ) -> tuple[list[Any], list[dict[str, Any]]]:
    from logdoctor.many.batch import collect
    if not paths:
        raise UsageError("no logs given: pass files, directories or globs")
    if "-" in paths and not os.path.lexists("-"):
        raise UsageError("-: batch, runs and clusters read files, not stdin (use 'logdoctor explain -')")
    rules = load_rules(rule_dirs)  # a broken --rules DIR is reported once, before any worker starts
    rows, runs = collect(paths, list(rule_dirs), _jobs(jobs), want_run, events, _progress(no_progress), timeout,
                         rules, envelope)
    if not rows:  # nothing was read: an input error like an empty file (exit 2)
        raise UsageError(f"{' '.join(display_path(p) for p in paths)}: no logs found "
                         "(*.log, *.txt, *.out, *.err, rotated or .gz)")
    return rows, runs


ENGINE = "logdoctor.engine"  # ctx.meta: {"engine": ..., "ray_address": ...}, noted by batch's --engine options


def _note_engine(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(ENGINE, {})[param.name] = value
    return value


def _on_ray_engine() -> bool:
    """Whether this batch runs on Ray (`--engine ray`, or `--ray-address`, which implies it)."""
    noted = click.get_current_context().meta.get(ENGINE, {})
    return noted.get("engine") == "ray" or bool(noted.get("ray_address"))


def _on_ray(work: Any, jobs: int | None) -> Any:
    """`batch --engine ray`: start a local Ray (or join --ray-address), `work(fleet)`, then shut it down."""
    from logdoctor.fleet import FleetError, init, shutdown
    address = click.get_current_context().meta.get(ENGINE, {}).get("ray_address") or None
    try:
        started = init(address, jobs)
    except FleetError as e:
        raise UsageError(str(e)) from None
    try:
        import logdoctor.fleet as fleet
        return work(fleet)
    except FleetError as e:
        raise UsageError(str(e)) from None
    finally:
        if started:
            shutdown()


def _ray_collect(paths: tuple[str, ...], rule_dirs: tuple[str, ...], jobs: int | None, envelope: str | None,
                 events: bool = False) -> tuple[list[Any], list[dict[str, Any]]]:
    """_collect on Ray (logdoctor.fleet): the same rows, sorted by path."""
    if events:
        raise UsageError("--events: not with --engine ray (the Ray engine writes the results table only)")
    if not paths:
        raise UsageError("no logs given: pass files, directories or globs")
    if "-" in paths and not os.path.lexists("-"):
        raise UsageError("-: batch, runs and clusters read files, not stdin (use 'logdoctor explain -')")
    rules = load_rules(rule_dirs)
    rows = _on_ray(lambda fleet: fleet.rows(list(paths), rules, envelope=envelope), jobs)
    if not rows:
        raise UsageError(f"{' '.join(display_path(p) for p in paths)}: no logs found "
                         "(*.log, *.txt, *.out, *.err, rotated or .gz)")
    return rows, []


def _emit(df: Any, fmt: str, dest: Destination | None, footer: str | None = None, redact: Any = None) -> None:
    from logdoctor.many.tables import write
    if redact is not None:  # the frame's strings, so every format (parquet too) writes them redacted
        from logdoctor.report.redact import redact_frame
        df, footer = redact_frame(df, redact.text), footer and redact.text(footer)
    if dest is None:
        write(df, fmt, None, sys.stdout, footer)
        return
    with dest.writing() as path:  # Ctrl-C or an error leaves no partial output file
        write(df, fmt, path, None, footer)


def _emit_text(text: str, dest: Destination | None, redact: Any = None) -> None:
    text = redacted(text, redact)
    if dest is None:
        sys.stdout.write(text)
        return
    with dest.writing() as path, open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _batch_document(rows: list[Any], fmt: str, fail_on: str, rule_dirs: tuple[str, ...]) -> str:
    """`batch --format junit | sarif`: one test case / one SARIF result per row."""
    from logdoctor.many.batch import row_dict
    if fmt == "junit":
        from logdoctor.many.junit import junit_xml
        return junit_xml(rows, lambda r: meets_fail_on(r.verdict, bool(r.warnings), fail_on))
    from logdoctor.report.sarif import batch_sarif_log, sarif_text
    rules = {r.id: r for r in load_rules(rule_dirs)}
    return sarif_text(batch_sarif_log([row_dict(r) for r in rows], rules)) + "\n"


def _write_events(dest: Destination, files: list[IO[bytes]]) -> None:
    import polars as pl

    from logdoctor.many.schema import EVENT_SCHEMA
    from logdoctor.many.workers import scratch_path
    as_json = {**EVENT_SCHEMA, "ts": pl.Int64}  # the workers write ts as microseconds (many/batch.py)
    for f in files:
        f.flush()
    parts = [scratch_path(f) for f in files if os.fstat(f.fileno()).st_size > 0]
    with dest.writing() as path:
        if parts:
            pl.scan_ndjson(parts, schema=as_json).with_columns(pl.col("ts").cast(EVENT_SCHEMA["ts"])) \
                .sink_parquet(path)
        else:
            pl.DataFrame(schema=EVENT_SCHEMA).write_parquet(path)


def _check_outputs(fmt: str, output: str | None, events_out: str | None = None
                   ) -> tuple[Destination | None, Destination | None]:
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet needs -o FILE")
    dest, events_dest = destination(output), destination(events_out)
    if dest and events_dest and dest.same_file(events_dest) and not dest.through:
        raise UsageError(f"{display_path(events_out or '')}: --events names the same file as -o")
    return dest, events_dest


def _batch_dataset(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int | None, no_progress: bool,
                   rule_dirs: tuple[str, ...], timeout: float, events_out: str | None, envelope: str | None,
                   fail_on: str, partition_by: str | None, resume: bool, row_group: int) -> int:
    """`batch -o DIR/`: see many/dataset.py; a summary line on stderr, the exit code of batch."""
    from click.core import ParameterSource

    from logdoctor.many.dataset import EVENTS_DIR, DatasetError, is_dataset_target, run_dataset_batch
    ctx = click.get_current_context()
    if output is None or not is_dataset_target(output):
        raise UsageError("--partition-by / --resume: write a dataset, -o DIR/ (a directory)")
    if ctx.get_parameter_source("fmt") is ParameterSource.COMMANDLINE and fmt != "parquet":
        raise UsageError(f"-o {display_path(output)}: a directory is a Parquet dataset (--format parquet)")
    if redacting():
        raise UsageError("--redact: a dataset is written as logs finish and cannot be redacted; write -o FILE")
    root = output.rstrip("/" + os.sep) or output
    with_events = events_out is not None
    if with_events and os.path.abspath(events_out or "") != os.path.abspath(os.path.join(root, EVENTS_DIR)):
        raise UsageError(f"--events {display_path(events_out or '')}: with -o DIR/ the events are a dataset "
                         f"too: --events {display_path(os.path.join(root, EVENTS_DIR))}/")
    if not paths:
        raise UsageError("no logs given: pass files, directories or globs")
    rules = load_rules(rule_dirs)
    try:
        if _on_ray_engine():  # --engine ray: the same dataset, written by this process as Ray's rows arrive
            if with_events:
                raise UsageError("--events: not with --engine ray (the Ray engine writes the results table only)")
            summary = _on_ray(lambda fleet: fleet.write_dataset(list(paths), root, rules, partition_by=partition_by,
                                                                resume=resume, row_group=row_group, envelope=envelope),
                              jobs)
        else:
            summary = run_dataset_batch(list(paths), root, partition_by=partition_by, resume=resume,
                                        with_events=with_events, rule_dirs=list(rule_dirs), jobs=_jobs(jobs),
                                        progress=_progress(no_progress), timeout=timeout, rules=rules,
                                        envelope=envelope, row_group=row_group)
    except DatasetError as e:
        raise UsageError(str(e)) from None
    if summary.diagnosed + summary.skipped == 0:
        raise UsageError(f"{' '.join(display_path(p) for p in paths)}: no logs found "
                         "(*.log, *.txt, *.out, *.err, rotated or .gz)")
    click.echo(summary.line(root), err=True)
    for path, why in summary.errors:
        click.echo(f"logdoctor: {path}: {why}", err=True)
    if summary.errors:
        return EXIT_USAGE
    fails = any(meets_fail_on(v, v in summary.with_warnings, fail_on) for v in summary.verdicts)
    return EXIT_FAILURE_FOUND if fails else EXIT_OK


def register(cli: click.Group) -> None:
    fmt_opt = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "jsonl", "parquet", "junit",
                                                                "sarif"]),
                           default="table", show_default=True)
    out_opt = click.option("-o", "--output", metavar="FILE",
                           help="Write here instead of stdout (atomically; a symlink's target, FIFO or device "
                                "is written through, an existing file keeps its mode).")
    jobs_opt = click.option("--jobs", "-j", type=click.IntRange(1, 256), default=None,
                            help="Worker processes (default: the CPUs this process may use — affinity and "
                                 "cgroup quota; never more than the files, nor twice the CPUs).")
    prog_opt = click.option("--no-progress", is_flag=True, help="No progress bar (it is only shown on a terminal).")
    rules_opt = click.option("--rules", "rule_dirs", multiple=True, metavar="DIR")
    timeout_opt = click.option("--timeout", type=click.FloatRange(min=0), default=DEFAULT_TIMEOUT_S,
                               show_default=True, metavar="SECONDS",
                               help="Time budget per log; a log over it gets an error row and the rest "
                                    "completes (0: no budget).")

    def many_logs(f: Any) -> Any:
        """The options `batch` and `runs` share."""
        for opt in (redact_option, selection_options, rules_opt, prog_opt, timeout_opt, jobs_opt, out_opt, fmt_opt):
            f = opt(f)
        return f


    @cli.command("batch")
    @click.argument("paths", nargs=-1)
    @many_logs
    @click.option("--events", "events_out", metavar="FILE.parquet", help="Also write every event of every log "
                  "(with -o DIR/: --events DIR/events/, a partitioned dataset).")
    @click.option("--partition-by", "partition_by", metavar="date|path:N|none",
                  help="With -o DIR/: hive partitions by the launch's date or the N-th path component "
                       "(default: none).")
    @click.option("--resume", is_flag=True, help="With -o DIR/: continue that dataset, skipping logs already "
                  "in it (same path and content hash).")
    @click.option("--row-group-size", "row_group", type=click.IntRange(1), default=2000, show_default=True,
                  help="With -o DIR/: rows per part file (each finished log is journalled at once).")
    @click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                  expose_value=False, callback=_note_engine,
                  help="local: worker processes on this machine; ray: a Ray Data pipeline (logdoctor[ray]) on a "
                       "local Ray with --jobs CPUs, or on the cluster at --ray-address. Same rows.")
    @click.option("--ray-address", "ray_address", metavar="ADDR", expose_value=False, callback=_note_engine,
                  help="The Ray cluster to run on (auto, HOST:6379, ray://HOST:10001; default: $RAY_ADDRESS, as "
                       "`ray job submit` sets it); implies --engine ray.")
    @envelope_option
    @fail_on_option("Exit 1 when a row is at or past this verdict: failed; incomplete (also a hang or a "
                       "fragment); warning (also a healthy launch with a warning-severity diagnosis).")
    def batch_cmd(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int | None, no_progress: bool,
                  rule_dirs: tuple[str, ...], timeout: float, events_out: str | None, envelope: str | None,
                  fail_on: str, partition_by: str | None = None, resume: bool = False, row_group: int = 2000) -> int:
        """Diagnose every log under PATHS (files, directories, globs, .gz): one row per log.

        `-o DIR/` (a trailing slash, or a dataset already) writes a Parquet dataset as logs finish
        (DIR/runs/, DIR/events/ with --events), resumable with --resume; `logdoctor runs DIR` reads it.

        Exit codes: 0 every log read and none at or past --fail-on, 1 at least one row at or past --fail-on
        (default: a failed launch), 2 a usage error or a log that could not be read or ran over --timeout.
        """
        from logdoctor.many.dataset import is_dataset_target
        if is_dataset_target(output) or partition_by is not None or resume:
            return _batch_dataset(paths, fmt, output, jobs, no_progress, rule_dirs, timeout, events_out, envelope,
                                  fail_on, partition_by, resume, row_group)
        from logdoctor.many.batch import BatchRow, row_dict
        fmt = output_format(fmt, output)  # `-o x.parquet` without --format writes parquet
        dest, events_dest = _check_outputs(fmt, output, events_out)
        if redacting() and events_dest is not None:
            raise UsageError("--events: the event table cannot be redacted; leave out --events or --redact")
        # events go to unlinked temp files (one per worker): nothing to clean up, even after SIGKILL
        event_files: list[IO[bytes]] = []
        try:
            if _on_ray_engine():
                rows, _ = _ray_collect(paths, rule_dirs, jobs, envelope, events_dest is not None)
            else:
                rows, _ = _collect(paths, rule_dirs, jobs, no_progress, False, timeout,
                                   event_files if events_dest else None, envelope)
            redact = redactor(_read(rows))
            from logdoctor.many.tables import (  # polars: only once the workers have forked
                batch_summary,
                frame,
            )
            if fmt in ("junit", "sarif"):
                _emit_text(_batch_document(rows, fmt, fail_on, rule_dirs), dest, redact)
            else:
                df = frame([row_dict(r) for r in rows], list(BatchRow.__dataclass_fields__))
                _emit(df, fmt, dest, batch_summary(df) if fmt == "table" else None, redact)
            if events_dest is not None:
                _write_events(events_dest, event_files)
        finally:
            for f in event_files:
                f.close()
        if any(r.error for r in rows):
            _report_unreadable([r for r in rows if r.error])
            return EXIT_USAGE
        return EXIT_FAILURE_FOUND if _any_fails(rows, fail_on) else EXIT_OK

    @cli.command("runs")
    @click.argument("paths", nargs=-1)
    @many_logs
    @click.option("--group-by", "group_by", metavar="COL[,COL]", help="Aggregate runs per value (polars).")
    @click.option("--sort", "sort", metavar="COL[,-COL]", help="Sort by columns (- for descending).")
    @click.option("--filter", "filters", multiple=True, metavar="COL=VALUE",
                  help="Keep rows where COL=VALUE (also != > < >= <= ~regex); repeatable.")
    @click.option("--columns", "columns", metavar="COL[,COL]",
                  help="Show these columns, in this order (default: every column, except the table format, "
                       "which shows the dozen a person reads first).")
    def runs_cmd(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int | None, no_progress: bool,
                 rule_dirs: tuple[str, ...], timeout: float, group_by: str | None, sort: str | None,
                 filters: tuple[str, ...], columns: str | None) -> int:
        """One row per run: the run summary flattened (model, flags, memory, KV tokens, throughput, outcome)."""
        from logdoctor.many.batch import RUN_COLUMNS
        fmt = output_format(fmt, output)
        if fmt in ("junit", "sarif"):
            raise UsageError(f"--format {fmt}: a batch format (logdoctor batch --format {fmt})")
        dest, _ = _check_outputs(fmt, output)
        from logdoctor.many.dataset_read import DatasetError, dataset_runs, is_dataset
        if paths and any(is_dataset(p) for p in paths):  # a results dataset (batch -o DIR/): no log is read again
            if not all(is_dataset(p) for p in paths):
                raise UsageError("runs: give either results datasets (batch -o DIR/) or logs, not both")
            try:
                rows, df = dataset_runs(list(paths))
            except DatasetError as e:
                raise UsageError(str(e)) from None
        else:
            rows, runs = _collect(paths, rule_dirs, jobs, no_progress, True, timeout)
        from logdoctor.many.tables import (
            RUN_TABLE_COLUMNS,
            apply_filters,
            apply_sort,
            frame,
            group_runs,
            select_columns,
        )
        if not paths or not is_dataset(paths[0]):
            df = frame(runs, RUN_COLUMNS)
        try:
            df = apply_filters(df, filters)
            if group_by:
                df = group_runs(df, group_by)
            df = apply_sort(df, sort)
            df, left_out = select_columns(df, columns, fmt, () if group_by else RUN_TABLE_COLUMNS)
        except ValueError as e:
            raise UsageError(str(e)) from None
        bad = [r for r in rows if r.error]
        footer = "\n".join([f"unreadable: {display_path(r.path)}: {r.error}" for r in bad]
                           + ([left_out] if left_out else [])) or None
        _emit(df, fmt, dest, footer if fmt == "table" else None, redactor(_read(rows)))
        _report_unreadable(bad)
        return _exit_code(rows)

    @cli.command("compare")
    @click.argument("a")
    @click.argument("b")
    @click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
    @rules_opt
    @selection_options
    @redact_option
    def compare_cmd(a: str, b: str, fmt: str, rule_dirs: tuple[str, ...]) -> None:
        """Two runs side by side: where they part, the flags that differ (memory and launch first), memory per
        stage with the fraction in force, and the difference that decided it."""
        from logdoctor.diagnosis.ranking import diagnose_source
        from logdoctor.many.compare import compare, comparison_markdown, comparison_text
        rules = load_rules(rule_dirs)
        reports = [diagnose_source(s, rules, display_path(s)) for s in (a, b)]
        for s, r in zip((a, b), reports):
            if r.run.line_count == 0:  # as every command says of an empty input
                raise UsageError(f"{label(s)}: empty input, nothing to analyse")
        c = compare(*reports)
        redact = redactor([a, b])
        if fmt == "json":
            click.echo(redacted(dump(c.to_dict()), redact))
        elif fmt == "markdown":
            click.echo(redacted(comparison_markdown(c), redact), nl=False)
        else:
            click.echo(redacted(comparison_text(c), redact))

    @cli.command("clusters")
    @click.argument("paths", nargs=-1)
    @click.option("--all", "all_failures", is_flag=True, help="Cluster every failure, not only unexplained ones.")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @timeout_opt
    @jobs_opt
    @prog_opt
    @rules_opt
    @selection_options
    @redact_option
    def clusters_cmd(paths: tuple[str, ...], all_failures: bool, fmt: str, timeout: float, jobs: int | None,
                     no_progress: bool, rule_dirs: tuple[str, ...]) -> int:
        """Group failures no rule explains (category unknown; --all: every failure) by masked signature."""
        from logdoctor.many.batch import BatchRow
        from logdoctor.many.clusters import cluster, clusters_text
        rows, _ = _collect(paths, rule_dirs, jobs, no_progress, False, timeout)
        # the decisive line, not the rule title, is what identifies an unexplained failure
        items = [{"path": display_path(r.path), "line": r.evidence_line, "kind": r.rule,
                  "text": _evidence_text(r.path, r.evidence_line) or r.title or ""}
                 for r in rows if isinstance(r, BatchRow) and r.verdict == "failed"
                 and (all_failures or r.category == "unknown")]
        cl = cluster(items)
        click.echo(redacted(dump([c.to_dict() for c in cl]) if fmt == "json" else clusters_text(cl),
                            redactor(_read(rows))))
        bad = [r for r in rows if r.error]
        _report_unreadable(bad)
        return EXIT_USAGE if bad else EXIT_OK

def _read(rows: list[Any]) -> list[str]:
    """The logs that were read, in row order: what `--redact` numbers its placeholders by."""
    return [r.path for r in rows if not r.error]


def _report_unreadable(bad: list[Any]) -> None:
    for r in bad:
        click.echo(f"logdoctor: {display_path(r.path)}: {r.error}", err=True)


def _exit_code(rows: list[Any]) -> int:
    if any(r.error for r in rows):
        return EXIT_USAGE
    return EXIT_FAILURE_FOUND if any(r.verdict == "failed" for r in rows) else EXIT_OK


def _any_fails(rows: list[Any], fail_on: str) -> bool:
    """Whether a batch row is at or past `--fail-on` (each row counts its warnings as it is diagnosed)."""
    return any(meets_fail_on(r.verdict, bool(r.warnings), fail_on) for r in rows)


def _evidence_text(path: str, line: int | None) -> str | None:
    if line is None:
        return None
    try:
        from logdoctor.parse.parse import parse_source
        hit = event_at(cited(parse_source(path)), line)
    except Exception:
        return None
    return hit[2] if hit else None
