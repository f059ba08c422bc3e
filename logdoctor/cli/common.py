"""What every command shares: exit codes, the usage error, option definitions, how sources are named, and
the JSON dump. Command modules (`one`, `rules`, `many`) import this; none imports another.
"""
from __future__ import annotations

import sys
from typing import Any

import click

from logdoctor.paths import Destination, OutputError, display_path
from logdoctor.read.envelope import LAYER_NAMES
from logdoctor.report.json_text import dump as dump  # the commands print JSON through common

EXIT_OK, EXIT_FAILURE_FOUND, EXIT_USAGE = 0, 1, 2
EXIT_PIPE_CLOSED = 128 + 13  # what a shell reports for a writer killed by SIGPIPE


class UsageError(Exception):
    """Bad input that is the user's to fix; printed as one line, exit 2."""


def input_sources(logs: tuple[str, ...]) -> list[str]:
    if logs:
        return list(logs)
    if sys.stdin.isatty():
        raise UsageError("no log given: pass a file, several files, or '-' / pipe a log on stdin")
    return ["-"]


def label(source: str) -> str:
    """How a source is named in reports (a file name may hold bytes a terminal would act on)."""
    return "<stdin>" if source == "-" else display_path(source)


def require_content(run: Any, source: str) -> None:
    if run.line_count == 0:
        raise UsageError(f"{label(source)}: empty input, nothing to analyse")


envelope_option = click.option(
    "--envelope", type=click.Choice([*LAYER_NAMES, "none"]), default=None, metavar="NAME|none",
    help="How the log was collected: peel only this envelope layer (" + ", ".join(LAYER_NAMES) + "), or none "
         "at all. Default: recognised by the shape of the first lines.")


def load_rules(extra: tuple[str, ...]) -> list[Any]:
    from logdoctor.diagnosis.rules import RuleError, load_ruleset
    try:
        rules = load_ruleset(list(extra))
    except RuleError as e:
        raise UsageError(str(e)) from None
    return _selected(rules)


# `--select` / `--extend-select` / `--ignore` (diagnosis/selection.py): the options note their values in the
# context and `load_rules` applies them, so a command needs only the decorator
SELECTION = "logdoctor.selection"
_SELECTION_HELP = {
    "--select": "Run only these rules: ids, id prefixes (MEM, MEM1), names, categories or ALL (default: ALL). "
                "Comma-separated, repeatable.",
    "--extend-select": "Run these rules as well as the selected ones.",
    "--ignore": "Do not run these rules (the more specific selector wins over --select; NET mutes the broad net).",
}


def _note_selectors(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(SELECTION, {})[param.name] = value
    return value


def selection_options(f: Any) -> Any:
    for flag, text in reversed(_SELECTION_HELP.items()):
        f = click.option(flag, multiple=True, metavar="SEL[,SEL]", expose_value=False, callback=_note_selectors,
                         help=text)(f)
    return f


def _selected(rules: Any) -> Any:
    ctx = click.get_current_context(silent=True)
    chosen = ctx.meta.get(SELECTION) if ctx is not None else None
    if not chosen or not any(chosen.values()):  # no selector given: every rule (as selection.select_rules)
        return rules
    from logdoctor.diagnosis.selection import SelectionError, select_rules, selectors_of
    try:
        return select_rules(rules, selectors_of(chosen))
    except SelectionError as e:  # the config module names where a value came from (a file, a variable)
        origin = ctx.meta.get("logdoctor.origin") if ctx is not None else None
        where = origin(ctx, e.option) if origin else None
        raise UsageError(f"{where or '--' + e.option.replace('_', '-')}: {e}") from None


def destination(path: str | None) -> Destination | None:
    """Check an output path before any work starts: `PATH: what is wrong`, exit 2."""
    if path is None:
        return None
    try:
        return Destination.check(path)
    except OutputError as e:
        raise UsageError(str(e)) from None


def cited(events: Any) -> list[Any]:
    """A source's events with the lines of the file as given (what LOG:LINE and reports name)."""
    return [events.citations.event(e) for e in events]


def event_at(events: list[Any], line: int | None) -> tuple[str, str, str] | None:
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


# `--fail-on`, weakest first: a threshold fails the verdicts at or past it (`explain`, `batch`)
FAIL_ON = ("failed", "incomplete", "warning")


def fail_on_option(help_text: str) -> Any:
    return click.option("--fail-on", "fail_on", type=click.Choice(FAIL_ON), default="failed", show_default=True,
                        help=help_text)


def meets_fail_on(verdict: str | None, warned: bool, fail_on: str) -> bool:
    """Whether a launch with this verdict (and a warning-severity diagnosis or not) is at or past `fail_on`."""
    if verdict == "failed":
        return True
    if verdict == "incomplete":
        return fail_on in ("incomplete", "warning")
    return fail_on == "warning" and warned


def report_fails(report: Any, fail_on: str) -> bool:
    """`meets_fail_on` for a Report: a warning is a warning-severity diagnosis (e.g. MEM101) anywhere in it."""
    return meets_fail_on(report.verdict, any(d.rule.severity == "warning" for d in report.diagnoses), fail_on)


# `--redact` (report/redact.py): the option notes itself in the context, like the selection options, and
# `redactor` gives a command what its output goes through (None without --redact)
REDACT = "logdoctor.redact"


def _note_redact(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta[REDACT] = bool(value)
    return value


redact_option = click.option(
    "--redact", is_flag=True, expose_value=False, callback=_note_redact,
    help="Replace IP addresses, host names, user names in paths, model directories under a home directory and "
         "secret-looking tokens by stable placeholders (<ip-1>, <host-1>, <user-1>, <path-1>, <secret-1>), "
         "numbered in order of first appearance in the log: safe to paste publicly.")


def redacting() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(REDACT))


def redactor(sources: Any = ()) -> Any:
    """A `report.redact.Redactor` seeded from these logs, in order, when --redact was given, else None."""
    if not redacting():
        return None
    from logdoctor.report.redact import redactor_for
    return redactor_for([s for s in sources if isinstance(s, str)])


def redacted(text: str, redact: Any) -> str:
    return redact.text(text) if redact is not None else text


# `-o FILE`'s suffix names the format when --format was not given on the command line (a config or
# environment default yields to it: it is the more specific wish); an explicit --format is written whatever
# the suffix says; a suffix the command has no format for keeps the format in force
SUFFIX_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "jsonl",
                  ".ndjson": "jsonl", ".md": "markdown", ".markdown": "markdown", ".sarif": "sarif", ".xml": "junit",
                  ".html": "html", ".htm": "html"}


def output_format(fmt: str, output: str | None, param: str = "fmt") -> str:
    import os

    from click.core import ParameterSource
    ctx = click.get_current_context(silent=True)
    if output is None or ctx is None or ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE:
        return fmt
    wanted = SUFFIX_FORMATS.get(os.path.splitext(output)[1].lower())
    choices = next((getattr(p.type, "choices", ()) for p in ctx.command.params if p.name == param), ())
    return wanted if wanted is not None and wanted in choices else fmt
