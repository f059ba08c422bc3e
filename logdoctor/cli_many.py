"""Commands over many logs: batch, runs, compare, clusters, rules new.

`batch` / `runs` exit codes: 0 all logs read and none failed, 1 at least one failed launch diagnosed,
2 a usage error or at least one file could not be read (every other file's row is still written).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

EXIT_OK, EXIT_FAILURE_FOUND, EXIT_USAGE = 0, 1, 2


def _jobs(jobs: int | None) -> int:
    return max(1, jobs or os.cpu_count() or 1)


def _progress(no_progress: bool) -> bool:
    return not no_progress and sys.stderr.isatty()


def _collect(paths: tuple[str, ...], rule_dirs: tuple[str, ...], jobs: int | None, no_progress: bool,
             want_run: bool, events_dir: str | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
    from .batch import discover, run_batch
    from .cli import UsageError, _load_rules
    if not paths:
        raise UsageError("no logs given: pass files, directories or globs")
    _load_rules(rule_dirs)  # report a broken --rules DIR once, before any worker starts
    files = list(discover(paths))
    rows, runs = [], []
    for row, run in run_batch(files, list(rule_dirs), _jobs(jobs), want_run, events_dir, _progress(no_progress)):
        rows.append(row)
        if run is not None:
            runs.append(run)
    rows.sort(key=lambda r: r.path)
    runs.sort(key=lambda r: r["path"])
    return rows, runs


def _emit(df: Any, fmt: str, output: str | None, footer: str | None = None) -> None:
    from .batch import atomic_output, discard_output, finish_output
    from .tables import write
    if output is None:
        if fmt == "parquet":
            from .cli import UsageError
            raise UsageError("--format parquet needs -o FILE")
        write(df, fmt, None, sys.stdout)
        if footer and fmt == "table":
            sys.stdout.write("\n" + footer + "\n")
        return
    tmp, target = atomic_output(output)
    try:
        write(df, fmt, tmp, None)
        if footer and fmt == "table":
            with open(tmp, "a", encoding="utf-8") as f:
                f.write("\n" + footer + "\n")
        finish_output(tmp, target)
    except BaseException:
        discard_output(tmp)  # Ctrl-C or an error leaves no partial output file
        raise


def register(cli: click.Group, rules_group: click.Group) -> None:
    fmt_opt = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "jsonl", "parquet"]),
                           default="table", show_default=True)
    out_opt = click.option("-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout.")
    jobs_opt = click.option("--jobs", "-j", type=click.IntRange(1, 256), default=None,
                            help="Worker processes (default: all cores).")
    prog_opt = click.option("--no-progress", is_flag=True, help="No progress bar (it is only shown on a terminal).")
    rules_opt = click.option("--rules", "rule_dirs", multiple=True, metavar="DIR")

    def many_logs(f: Any) -> Any:
        """The options `batch` and `runs` share."""
        for opt in (rules_opt, prog_opt, jobs_opt, out_opt, fmt_opt):
            f = opt(f)
        return f

    @cli.command("batch")
    @click.argument("paths", nargs=-1)
    @many_logs
    @click.option("--events", "events_out", metavar="FILE.parquet", help="Also write every event of every log.")
    def batch_cmd(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int | None, no_progress: bool,
                  rule_dirs: tuple[str, ...], events_out: str | None) -> int:
        """Diagnose every log under PATHS (files, directories, globs, .gz): one row per log."""
        import shutil
        import tempfile

        from .batch import BatchRow, atomic_output, discard_output, finish_output, row_dict
        from .tables import batch_summary, frame
        events_dir = tempfile.mkdtemp(prefix="logdoctor-events-") if events_out else None
        try:
            rows, _ = _collect(paths, rule_dirs, jobs, no_progress, False, events_dir)
            cols = list(BatchRow.__dataclass_fields__)
            df = frame([row_dict(r) for r in rows], cols)
            _emit(df, fmt, output, batch_summary(df))
            if events_out and events_dir:
                import polars as pl
                parts = sorted(Path(events_dir).glob("*.jsonl"))
                tmp, target = atomic_output(events_out)
                try:
                    schema = {"path": pl.Utf8, "line": pl.Int64, "rank": pl.Utf8, "ts": pl.Utf8, "kind": pl.Utf8,
                              "fields": pl.Utf8}
                    if parts:
                        pl.scan_ndjson([str(p) for p in parts], schema=schema).sink_parquet(tmp)
                    else:
                        pl.DataFrame(schema=schema).write_parquet(tmp)
                    finish_output(tmp, target)
                except BaseException:
                    discard_output(tmp)
                    raise
        finally:
            if events_dir:
                shutil.rmtree(events_dir, ignore_errors=True)
        return _exit_code(rows)

    @cli.command("runs")
    @click.argument("paths", nargs=-1)
    @many_logs
    @click.option("--group-by", "group_by", metavar="COL[,COL]", help="Aggregate runs per value (polars).")
    @click.option("--sort", "sort", metavar="COL[,-COL]", help="Sort by columns (- for descending).")
    @click.option("--filter", "filters", multiple=True, metavar="COL=VALUE",
                  help="Keep rows where COL=VALUE (also != > < >= <= ~regex); repeatable.")
    def runs_cmd(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int | None, no_progress: bool,
                 rule_dirs: tuple[str, ...], group_by: str | None, sort: str | None, filters: tuple[str, ...]) -> int:
        """One row per run: the run summary flattened (model, flags, memory, KV tokens, throughput, outcome)."""
        from .batch import RUN_COLUMNS
        from .cli import UsageError
        from .tables import apply_filters, apply_sort, frame, group_runs
        rows, runs = _collect(paths, rule_dirs, jobs, no_progress, True)
        df = frame(runs, RUN_COLUMNS)
        try:
            df = apply_filters(df, filters)
            if group_by:
                df = group_runs(df, group_by)
            df = apply_sort(df, sort)
        except ValueError as e:
            raise UsageError(str(e)) from None
        bad = [r for r in rows if r.error]
        footer = "\n".join(f"unreadable: {r.path}: {r.error}" for r in bad) or None
        _emit(df, fmt, output, footer)
        for r in bad:
            click.echo(f"logdoctor: {r.path}: {r.error}", err=True)
        return _exit_code(rows)

    @cli.command("compare")
    @click.argument("a")
    @click.argument("b")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @rules_opt
    def compare_cmd(a: str, b: str, fmt: str, rule_dirs: tuple[str, ...]) -> None:
        """Two runs side by side: differing args, stages, memory per rank, outcome, and where they diverge."""
        from .cli import _dump, _load_rules
        from .compare import compare, comparison_text
        from .diagnose import diagnose_source
        rules = _load_rules(rule_dirs)
        c = compare(diagnose_source(a, rules), diagnose_source(b, rules))
        click.echo(_dump(c.to_dict()) if fmt == "json" else comparison_text(c))

    @cli.command("clusters")
    @click.argument("paths", nargs=-1)
    @click.option("--all", "all_failures", is_flag=True, help="Cluster every failure, not only unexplained ones.")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @jobs_opt
    @prog_opt
    @rules_opt
    def clusters_cmd(paths: tuple[str, ...], all_failures: bool, fmt: str, jobs: int | None, no_progress: bool,
                     rule_dirs: tuple[str, ...]) -> None:
        """Group failures no rule explains (category unknown; --all: every failure) by masked signature."""
        from .batch import BatchRow
        from .cli import _dump
        from .clusters import cluster, clusters_text
        rows, _ = _collect(paths, rule_dirs, jobs, no_progress, False)
        # the decisive line, not the rule title, is what identifies an unexplained failure
        items = [{"path": r.path, "line": r.evidence_line, "kind": r.rule,
                  "text": _evidence_text(r.path, r.evidence_line) or r.title or ""}
                 for r in rows if isinstance(r, BatchRow) and r.verdict == "failed"
                 and (all_failures or r.category == "unknown")]
        cl = cluster(items)
        click.echo(_dump([c.to_dict() for c in cl]) if fmt == "json" else clusters_text(cl))

    @rules_group.command("new")
    @click.option("--from", "source", required=True, metavar="LOG[:LINE]",
                  help="The log (and line) whose failure the rule should recognise.")
    @click.option("-o", "--output", metavar="FILE.yaml", help="Write the skeleton here instead of stdout.")
    @click.option("--id", "rule_id", default=None, help="Rule id (default: the next free UNK9xx).")
    def rules_new(source: str, output: str | None, rule_id: str | None) -> None:
        """Write a rule skeleton (valid against the schema) for the failure at LOG[:LINE]."""
        from .cli import UsageError, _load_rules
        from .clusters import rule_skeleton, signature
        from .diagnose import diagnose_source
        from .parse import parse_source
        path, line = _split_source(source)
        events = list(parse_source(path))
        if line is None:
            report = diagnose_source(path, _load_rules(()))
            line = report.primary.position if report.primary else None
        target = _event_at(events, line)
        if target is None:
            raise UsageError(f"{source}: no event to build a rule from (name a line with --from LOG:LINE)")
        kind, field_name, text = target
        used = {r.id for r in _load_rules(())}
        rid = rule_id or next(f"UNK{n}" for n in range(900, 1000) if f"UNK{n}" not in used)
        name = output and Path(output).stem or ("new-" + "-".join(signature(text).lower().split()[:4]))
        name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name).strip("-")[:60] or "new-rule"
        skeleton = rule_skeleton(rid, name, kind, field_name, text, path)
        if output:
            Path(output).write_text(skeleton, encoding="utf-8")
            click.echo(f"wrote {output}: edit category/explanation/remedy, add a quiet example, then "
                       f"'logdoctor rules check {Path(output).parent}'", err=True)
        else:
            click.echo(skeleton, nl=False)


def _exit_code(rows: list[Any]) -> int:
    if any(r.error for r in rows):
        return EXIT_USAGE
    return EXIT_FAILURE_FOUND if any(r.verdict == "failed" for r in rows) else EXIT_OK


def _split_source(source: str) -> tuple[str, int | None]:
    if ":" in source and source.rsplit(":", 1)[1].isdigit() and not os.path.exists(source):
        p, n = source.rsplit(":", 1)
        return p, int(n)
    return source, None


def _event_at(events: list[Any], line: int | None) -> tuple[str, str, str] | None:
    """(kind, field to match, its text) of the most telling event covering `line`."""
    if line is None:
        return None
    covering = [e for e in events if e.kind != "unparsed" and
                (e.line <= line <= (e.end_line or e.line) or e.fields.get("exception_line") == line)]
    covering = covering or [e for e in events if e.line == line]
    if not covering:
        return None
    e = sorted(covering, key=lambda e: (e.kind == "traceback", e.line))[0]
    if e.kind == "traceback":
        return "traceback", "message", (e.fields.get("message") or "").split("\n", 1)[0]
    return e.kind, "text", e.text


def _evidence_text(path: str, line: int | None) -> str | None:
    if line is None:
        return None
    try:
        from .parse import parse_source
        hit = _event_at(list(parse_source(path)), line)
    except Exception:
        return None
    return hit[2] if hit else None
