"""`logdoctor report LOG|DIR...`: one self-contained HTML page of one log or of a fleet of them.

One log (a file, `-`, or a directory holding one log): the page `explain --format html` writes, byte for
byte. Several: the fleet page (many/html_fleet.py): outcome by category, outcome against the flags that
varied, a table of runs and the primary diagnosis of the first DETAILED_RUNS. The logs are found and
diagnosed as `batch` finds and diagnoses them (`batch.collect`: the same walk, worker pool, progress bar
and --timeout), so the page's counts are batch's rows.

Exit codes, as batch's: 0 the page was written and no log is at or past --fail-on; 1 at least one is
(default: a failed launch); 2 a usage error, no log found, or a log that could not be read or ran over
--timeout — the page is still written with that log as a row showing its error, and stderr names it.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import click

from logdoctor.cli.common import (
    EXIT_FAILURE_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    destination,
    envelope_option,
    fail_on_option,
    label,
    load_rules,
    meets_fail_on,
    redact_option,
    redacted,
    redactor,
    report_fails,
    selection_options,
)
from logdoctor.many import DEFAULT_TIMEOUT_S
from logdoctor.paths import Destination, display_path


def _write(page: str, dest: Destination | None) -> None:
    if dest is None:
        sys.stdout.write(page)
        return
    with dest.writing() as path, open(path, "w", encoding="utf-8") as f:  # Ctrl-C leaves no half page
        f.write(page)


def _one_log(source: str, rules: list[Any], envelope: str | None, fail_on: str, dest: Destination | None) -> int:
    """The single-log page, as `explain LOG --format html` makes it (its diagnosis, its redaction)."""
    from logdoctor.many.launch import diagnose_logs
    from logdoctor.report.html_report import explain_html_page
    from logdoctor.run.serving_series import collecting_series
    with collecting_series(True):  # the page's serving charts
        report = diagnose_logs([source], rules, [label(source)], envelope)
    if report.run.line_count == 0:
        raise UsageError(f"{label(source)}: empty input, nothing to analyse")
    redact = redactor([source])
    if redact is not None:  # the pods / hosts an interleaved log was split into, as explain names them
        redact.add_hosts(str(n["node"]) for n in report.nodes)
    _write(redacted(explain_html_page(report, redact), redact) + "\n", dest)
    return EXIT_FAILURE_FOUND if report_fails(report, fail_on) else EXIT_OK


def _fleet(paths: tuple[str, ...], rules: list[Any], jobs: int, progress: bool, timeout: float,
           envelope: str | None, fail_on: str, dest: Destination | None) -> int:
    from logdoctor.many.batch import collect
    from logdoctor.many.html_fleet import fleet_html_page, run_details
    rows, runs = collect(paths, [], jobs, True, None, progress, timeout, rules, envelope)
    details = run_details(rows, rules, jobs, timeout, envelope)
    redact = redactor([r.path for r in rows if not r.error])  # numbered by the logs, in batch's row order
    _write(redacted(fleet_html_page(rows, runs, details, redact), redact) + "\n", dest)
    bad = [r for r in rows if r.error]
    for r in bad:
        click.echo(f"logdoctor: {display_path(r.path)}: {r.error}", err=True)
    if bad:
        return EXIT_USAGE
    return EXIT_FAILURE_FOUND if any(meets_fail_on(r.verdict, bool(r.warnings), fail_on) for r in rows) else EXIT_OK


@click.command("report")
@click.argument("paths", nargs=-1, metavar="LOG|DIR...")
@click.option("-o", "--output", metavar="FILE",
              help="Write the page here instead of stdout (atomically; a symlink's target, FIFO or device is "
                   "written through, an existing file keeps its mode).")
@click.option("--jobs", "-j", type=click.IntRange(1, 256), default=None,
              help="Worker processes for several logs (default: the usable cores).")
@click.option("--no-progress", is_flag=True, help="No progress bar (it is only shown on a terminal).")
@click.option("--timeout", type=click.FloatRange(min=0), default=DEFAULT_TIMEOUT_S, show_default=True,
              metavar="SECONDS", help="Time budget per log of several; a log over it is a row with an error.")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR",
              help="Add rules from DIR (repeatable); a rule with the same id or name overrides a built-in.")
@selection_options
@envelope_option
@fail_on_option("Exit 1 when a log is at or past this verdict: failed; incomplete (also a hang or a fragment); "
                "warning (also a healthy launch with a warning-severity diagnosis).")
@redact_option
def report_cmd(paths: tuple[str, ...], output: str | None, jobs: int | None, no_progress: bool, timeout: float,
               rule_dirs: tuple[str, ...], envelope: str | None, fail_on: str) -> int:
    """One self-contained HTML page (no script, no network) for LOG, or for the logs under DIR.

    One log: the page of `explain --format html`. Several (files, directories, globs, .gz): outcome by
    category, outcome against the flags that varied (mem fraction, cuda graph max bs, tp, ...), a table of
    runs with failures first, and the primary diagnosis of each failure. - reads one log from stdin.

    Exit codes: 0 written and no log at or past --fail-on, 1 at least one log at or past --fail-on (default:
    a failed launch), 2 a usage error, no log found, or a log that could not be read (still a row of the page).
    """
    from logdoctor.many.batch import discover_inputs
    from logdoctor.many.workers import usable_cpus
    if not paths:
        raise UsageError("no logs given: pass files, directories or globs (or - for one log on stdin)")
    dest = destination(output)  # checked before any log is read
    stdin = "-" in paths and not os.path.lexists("-")
    if stdin and len(paths) > 1:
        raise UsageError("-: report reads stdin as its only log; pass several logs as files")
    rules = load_rules(rule_dirs)  # a broken --rules DIR is reported once, before any worker starts
    found = [("-", None)] if stdin else list(discover_inputs(paths))
    if not found:
        raise UsageError(f"{' '.join(display_path(p) for p in paths)}: no logs found "
                         "(*.log, *.txt, *.out, *.err, rotated or .gz)")
    if len(found) == 1 and found[0][1] is None:
        return _one_log(found[0][0], rules, envelope, fail_on, dest)
    progress = not no_progress and sys.stderr.isatty()
    return _fleet(paths, rules, max(1, jobs or usable_cpus()), progress, timeout, envelope, fail_on, dest)


COMMANDS: tuple[click.Command, ...] = (report_cmd,)
