"""Commands over one log (or the logs of one launch): parse, summary, memory, explain.

Each parses its options, calls the stages (read → parse → run → diagnosis → report) and prints.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import click

from logdoctor.cli.common import (
    EXIT_FAILURE_FOUND,
    EXIT_OK,
    UsageError,
    destination,
    dump,
    envelope_option,
    fail_on_option,
    input_sources,
    label,
    load_rules,
    output_format,
    redact_option,
    redacted,
    redactor,
    report_fails,
    require_content,
    selection_options,
)
from logdoctor.events import Event
from logdoctor.paths import display_path


def _events(source: str, envelope: str | None = None) -> Iterator[Event]:
    """Every event of one log, its lines those of the file as given."""
    from logdoctor.parse.parse import parse_source
    events = parse_source(source, envelope)
    cite = events.citations.event
    return (cite(ev) for ev in events)


@click.command("parse")
@click.argument("logs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "table"]), default="jsonl", show_default=True)
@click.option("--all/--no-unparsed", "show_all", default=True, help="Include unparsed lines (default) or not.")
@envelope_option
@redact_option
def parse_cmd(logs: tuple[str, ...], fmt: str, show_all: bool, envelope: str | None) -> None:
    """Print every event of LOG... (files, .gz, or - for stdin); lines are those of the file as given."""
    sources = input_sources(logs)
    redact = redactor(sources)
    out: Any = sys.stdout if redact is None else redact.stream(sys.stdout)
    first_json = True  # `[` with the first event: an empty input (exit 2) prints no half a document
    for source in sources:
        read = 0
        for read, ev in enumerate(_events(source, envelope), 1):
            if not show_all and ev.kind == "unparsed":
                continue
            d = ev.to_dict()
            if len(logs) > 1:
                d["source"] = display_path(source)
            if fmt == "jsonl":
                out.write(dump(d) + "\n")
            elif fmt == "json":
                out.write(("[\n" if first_json else ",\n") + dump(d))
                first_json = False
            else:
                rank = ev.ranks or ("" if ev.rank is None else str(ev.rank))
                fields = " ".join(f"{k}={_short(v)}" for k, v in ev.fields.items())
                out.write(f"{ev.line:>6}  {ev.kind:<28} {rank:<14} {ev.ts or '':<23} {fields}\n")
        if not read:  # as every command says of an empty input (exit 2)
            raise UsageError(f"{label(source)}: empty input, nothing to analyse")
    if fmt == "json":
        out.write("[]\n" if first_json else "\n]\n")
    out.flush()


def _short(v: Any, limit: int = 60) -> str:
    s = v if isinstance(v, str) else dump(v)
    s = s.replace("\n", "⏎")
    return s if len(s) <= limit else s[: limit - 1] + "…"


@click.command("summary")
@click.argument("log", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@envelope_option
@redact_option
def summary_cmd(log: str | None, fmt: str, envelope: str | None) -> None:
    """Print the run summary of LOG (or - / stdin): config, stages, memory per rank, batches, failures."""
    from logdoctor.read.citations import Citations
    from logdoctor.run.fold import summarize_source
    from logdoctor.run.model import cite_run
    source = input_sources((log,) if log else ())[0]
    citations = Citations()
    run = summarize_source(source, envelope, citations)
    cite_run(run, citations)
    run.source = label(source)
    require_content(run, source)
    redact = redactor([source])
    if fmt == "json":
        click.echo(redacted(dump(run.to_dict()), redact))
    else:
        from logdoctor.report.report import summary_text
        click.echo(redacted(summary_text(run), redact))


@click.command("memory")
@click.argument("log", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--mem-fraction-static", "mfs", type=click.FloatRange(0.05, 0.99), default=None,
              help="What-if: predict the KV cache and reserve at this value.")
@click.option("--cuda-graph-max-bs", "bs", type=click.IntRange(1, 4096), default=None,
              help="What-if: scale the CUDA-graph memory to this largest captured batch.")
@click.option("--chunked-prefill-size", "chunk", type=click.IntRange(1, 1 << 20), default=None,
              help="What-if: size the prefill activations for this chunk.")
@click.option("--max-running-requests", "max_running", type=click.IntRange(1, 1 << 20), default=None,
              help="What-if: request slots (caps the captured batches, sizes the request pool).")
@click.option("--tp", "tp", type=click.IntRange(1, 1024), default=None,
              help="What-if: split the weights over this many ranks.")
@envelope_option
@redact_option
def memory_cmd(log: str | None, fmt: str, mfs: float | None, bs: int | None, chunk: int | None,
               max_running: int | None, tp: int | None, envelope: str | None) -> None:
    """Rebuild the KV-cache budget of LOG from its own numbers and say which flag to move which way."""
    from logdoctor.report.memory_text import memory_text
    from logdoctor.run.fold import summarize_source
    from logdoctor.run.memory import analyse
    source = input_sources((log,) if log else ())[0]
    run = summarize_source(source, envelope)  # analyse compares positions: not cited
    run.source = label(source)
    require_content(run, source)
    analysis = analyse(run, mfs, bs, what_if_chunk=chunk, what_if_max_running=max_running, what_if_tp=tp)
    redact = redactor([source])
    if fmt == "json":  # the format logdoctor/memory.schema.json documents
        click.echo(redacted(dump({"schema": "logdoctor.memory/1", "source": run.source, **analysis.to_dict()}),
                            redact))
    else:
        click.echo(redacted(memory_text(analysis), redact))


def _color_enabled(stream: Any) -> bool:
    import os
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


@click.command("explain")
@click.argument("logs", nargs=-1, metavar="LOG...")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "github", "sarif", "html"]), default="text",
              show_default=True,
              help="github: GitHub Actions annotations (::error / ::warning with file and line), and the "
                   "Markdown report appended to $GITHUB_STEP_SUMMARY when that names a file. sarif: SARIF 2.1.0 "
                   "for code scanning (github/codeql-action/upload-sarif).")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR",
              help="Add rules from DIR (repeatable); a rule with the same id or name overrides a built-in.")
@selection_options
@click.option("--one-launch", is_flag=True,
              help="A directory holds the logs of one launch (one per node): diagnose them together.")
@envelope_option
@fail_on_option("Exit 1 from this verdict on: failed; incomplete (also a hang or a fragment); warning (also a "
                   "healthy launch with a warning-severity diagnosis).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 whatever was diagnosed (wins over --fail-on).")
@click.option("-o", "--output", metavar="FILE",
              help="Write the report here instead of stdout (atomically); without --format its suffix names the "
                   "format (.json, .md, .sarif, .html; anything else: text).")
@redact_option
@click.option("--follow", is_flag=True,
              help="LOG is a growing file (read like tail -F) or - a live pipe (kubectl logs -f): diagnose as lines "
                   "come and stop at the first failure (exit 1), the ready line (exit 0), the end of the pipe, a "
                   "stall (exit 3) or Ctrl-C / SIGTERM (the diagnosis so far, exit 130 / 143). A file not yet "
                   "created is waited for, a rotated or truncated one followed anew, a compressed one read to its "
                   "end. Progress on stderr when a terminal.")
@click.option("--stall-timeout", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="With --follow: no new line for this long is a stall (default 600 s while loading weights, "
                   "300 s otherwise).")
def explain_cmd(logs: tuple[str, ...], fmt: str, rule_dirs: tuple[str, ...], one_launch: bool,
                envelope: str | None, fail_on: str, exit_zero: bool, output: str | None,
                follow: bool = False, stall_timeout: float | None = None) -> int:
    """Say why the launch in LOG... failed: evidence, why, what to change.

    LOG is a file (compressed or not) or - for stdin. Several LOGs (or a directory with --one-launch) are
    the logs of one multi-node launch: read together, merged by time, the root cause found across nodes
    and cited as NODE:LINE. A single log that interleaves several pods or hosts (`kubectl logs --prefix`,
    stern) is split into its nodes the same way.

    Exit codes: 0 nothing at or past --fail-on (or --exit-zero), 1 a verdict at or past --fail-on (default:
    a failure diagnosed), 2 usage or input error, 3 --follow stalled (no line for --stall-timeout).
    """
    from logdoctor.many.launch import diagnose_logs
    fmt = output_format(fmt, output)
    dest = destination(output)  # checked before any log is read
    rules = load_rules(rule_dirs)
    # --follow: a directory is refused by the follow itself (one growing file or -), not expanded
    sources = input_sources(logs) if follow else _launch_sources(input_sources(logs), one_launch)
    from logdoctor.run.serving_series import collecting_series
    with collecting_series(fmt == "html"):  # the serving charts' series: folded for the page only
        followed = _followed(sources, rules, envelope, stall_timeout) if follow else None
        report = followed.report if followed else diagnose_logs(sources, rules, _node_labels(sources), envelope)
    if report.run.line_count == 0:
        raise UsageError(f"{', '.join(label(s) for s in sources)}: empty input, nothing to analyse")
    redact = redactor(sources)
    if redact is not None and len(sources) == 1:  # the pods / hosts one interleaved log was split into
        redact.add_hosts(str(n["node"]) for n in report.nodes)
    if fmt == "github":
        _github(report, redact, dest)
    else:
        color = dest is None and fmt == "text" and _color_enabled(sys.stdout)
        text = redacted(_explain_document(report, fmt, color, redact), redact)
        if dest is None:
            click.echo(text, color=color)  # click strips ANSI unless told
        else:
            with dest.writing() as path, open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    code = EXIT_FAILURE_FOUND if report_fails(report, fail_on) and not exit_zero else EXIT_OK
    return code if followed is None else followed.exit_code(code, exit_zero)


def _followed(sources: list[str], rules: Any, envelope: str | None, stall_timeout: float | None) -> Any:
    """explain --follow (many/follow.py); Ctrl-C there ends the follow, and the diagnosis so far is printed."""
    from logdoctor.many.follow import follow_log
    if len(sources) != 1:
        raise UsageError("--follow reads one log: a growing file or - (a pipe)")
    return follow_log(sources[0], label(sources[0]), rules, envelope, stall_timeout)


def _explain_document(report: Any, fmt: str, color: bool, redact: Any = None) -> str:
    if fmt == "html":  # redacts each text before escaping it (placeholders look like tags)
        from logdoctor.report.html_report import explain_html_page
        return explain_html_page(report, redact)
    if fmt == "json":
        return dump(report.to_dict())
    if fmt == "markdown":
        from logdoctor.report.report import explain_markdown
        return explain_markdown(report)
    if fmt == "sarif":
        from logdoctor.report.sarif import sarif_log, sarif_text
        return sarif_text(sarif_log(report))
    from logdoctor.report.report import explain_text
    return explain_text(report, color=color)


def _github(report: Any, redact: Any = None, dest: Any = None) -> None:
    """Annotations on stdout; the Markdown report appended (other steps write there too) to the job summary."""
    import os

    from logdoctor.report.github import github_text
    from logdoctor.report.report import explain_markdown
    text = redacted(github_text(report), redact)
    if dest is not None:
        with dest.writing() as path, open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n" if text else "")
    elif text:
        click.echo(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(redacted(explain_markdown(report), redact).rstrip("\n") + "\n\n")
        except OSError as e:
            raise UsageError(f"{display_path(summary)}: GITHUB_STEP_SUMMARY cannot be appended to "
                             f"({e.strerror or e})") from None


def _is_url(text: str) -> bool:
    from logdoctor.read.remote import is_url  # only for what looks like one: a plain path never loads it
    return is_url(text)


def _logs_under(where: str, discover_inputs: Any, what: str) -> list[str]:
    """The logs in a directory or under a prefix (--one-launch); one that cannot be read ends the command."""
    found = list(discover_inputs([where]))
    for path, problem in found:
        if problem is not None:
            raise UsageError(f"{label(path)}: {problem}")
    if not found:
        raise UsageError(f"{label(where)}: no logs {'in this directory' if what == 'directory' else 'under this prefix'} "
                         "(*.log, *.txt, *.out, *.err, *.gz)")
    return [path for path, _ in found]


def _launch_sources(sources: list[str], one_launch: bool) -> list[str]:
    """The files of one launch: directories expanded (--one-launch), `-` at most once, no repeats."""
    import os
    out: list[str] = []
    for s in sources:
        if one_launch and "://" in s and s.endswith("/") and _is_url(s):  # a prefix in object storage, as a directory
            from logdoctor.many.batch import discover_inputs  # (the batch machinery only when there is a listing)
            out.extend(_logs_under(s, discover_inputs, "prefix"))
        elif s != "-" and os.path.isdir(s):
            if not one_launch:
                raise UsageError(f"{label(s)}: is a directory: add --one-launch to read every log in it as the "
                                 f"logs of one launch, or use 'logdoctor batch {label(s)}' for one diagnosis per log")
            from logdoctor.many.batch import discover_inputs
            out.extend(_logs_under(s, discover_inputs, "directory"))
        else:
            out.append(s)
    if out.count("-") > 1:
        raise UsageError("- (stdin) can be given once")
    return list(dict.fromkeys(out))


def _node_labels(sources: list[str]) -> list[str]:
    """How citations name each file: its base name when those are unique, else the path as given."""
    import os
    labels = [label(s) for s in sources]
    if len(sources) < 2:
        return labels
    names = [label(os.path.basename(s)) if s != "-" else "<stdin>" for s in sources]
    return names if len(set(names)) == len(names) else labels


COMMANDS: tuple[click.Command, ...] = (parse_cmd, summary_cmd, memory_cmd, explain_cmd)
