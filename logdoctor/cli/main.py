"""The `logdoctor` command line.

Exit codes (all commands): 0 no failure found / success, 1 failure diagnosed (explain, batch),
2 usage or input error (a clear one-line message on stderr, never a traceback), 130 interrupted
(SIGINT, Ctrl-C), 143 terminated (SIGTERM), 141 output pipe closed early (`| head`).
"""
from __future__ import annotations

import io
import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import click

from logdoctor import __version__
from logdoctor.events import Event
from logdoctor.paths import OutputError, display_path, display_text
from logdoctor.read.envelope import LAYER_NAMES
from logdoctor.read.ingest import InputError

EXIT_OK, EXIT_FAILURE_FOUND, EXIT_USAGE = 0, 1, 2
EXIT_PIPE_CLOSED = 128 + 13  # what a shell reports for a writer killed by SIGPIPE


class UsageError(Exception):
    """Bad input that is the user's to fix; printed as one line, exit 2."""


class Signalled(BaseException):
    """SIGINT or SIGTERM reached the command. A BaseException, so `except Exception` (one bad file must
    not end a batch) never swallows it; it unwinds every `finally` that removes temp files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class PipeClosed(BaseException):
    """stdout's reader went away. click would turn BrokenPipeError into exit 1; this passes it by."""


class _Cli(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise PipeClosed() from None


class _ClosedStream(io.TextIOBase):
    """Stands in for a standard stream whose descriptor was closed (`<&-`, `>&-`): says so when used."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def buffer(self) -> _ClosedStream:  # ingest reads sys.stdin.buffer
        return self

    def isatty(self) -> bool:
        return False

    def read(self, *_: Any) -> NoReturn:
        raise InputError(f"<{self._name}>: {self._name} is closed")

    peek = readline = read  # type: ignore[assignment]

    def write(self, _: Any) -> NoReturn:
        raise UsageError(f"{self._name} is closed: nothing can be written (redirect it, or use -o FILE)")

    def flush(self) -> None:
        pass


def _guard_standard_streams() -> None:
    """A closed fd 0/1/2 gets /dev/null, so no file opened later lands on it (and gets our output
    or is read as stdin); the Python-level stream says it is closed when the command uses it."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            closed = getattr(sys, name) is None
        except OSError:
            nul = os.open(os.devnull, os.O_RDWR)
            if nul != fd:
                os.dup2(nul, fd)
                os.close(nul)
            closed = True
        if closed:
            setattr(sys, name, open(os.devnull, "w") if name == "stderr" else _ClosedStream(name))


def _on_signal(signum: int, _frame: Any) -> None:
    # a second signal while cleaning up ends at once
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda n, _f: os._exit(128 + n))
    raise Signalled(signum)


def _install_signal_handlers() -> None:
    for s, untouched in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(s) is untouched:  # keep an ignored SIGINT ignored (`nohup`, background jobs)
            signal.signal(s, _on_signal)


def _sources(logs: tuple[str, ...]) -> list[str]:
    if logs:
        return list(logs)
    if sys.stdin.isatty():
        raise UsageError("no log given: pass a file, several files, or '-' / pipe a log on stdin")
    return ["-"]


def _label(source: str) -> str:
    """How a source is named in reports (a file name may hold bytes a terminal would act on)."""
    return "<stdin>" if source == "-" else display_path(source)


def _require_content(run: Any, source: str) -> None:
    if run.line_count == 0:
        raise UsageError(f"{_label(source)}: empty input, nothing to analyse")


def _events(source: str, envelope: str | None = None) -> Iterator[Event]:
    """Every event of one log, its lines those of the file as given."""
    from logdoctor.parse.parse import parse_source
    events = parse_source(source, envelope)
    cite = events.citations.event
    return (cite(ev) for ev in events)


envelope_option = click.option(
    "--envelope", type=click.Choice([*LAYER_NAMES, "none"]), default=None, metavar="NAME|none",
    help="How the log was collected: peel only this envelope layer (" + ", ".join(LAYER_NAMES) + "), or none "
         "at all. Default: recognised by the shape of the first lines.")


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, float):
        return None
    return str(o)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logdoctor")
def cli() -> None:
    """Read SGLang server logs and say why a launch failed.

    Exit codes: 0 no failure, 1 failure diagnosed, 2 usage or input error, 130 / 143 interrupted
    (SIGINT / SIGTERM), 141 output pipe closed.
    """


@cli.command("parse")
@click.argument("logs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "table"]), default="jsonl", show_default=True)
@click.option("--all/--no-unparsed", "show_all", default=True, help="Include unparsed lines (default) or not.")
@envelope_option
def parse_cmd(logs: tuple[str, ...], fmt: str, show_all: bool, envelope: str | None) -> None:
    """Print every event of LOG... (files, .gz, or - for stdin); lines are those of the file as given."""
    out = sys.stdout
    first_json = True
    if fmt == "json":
        out.write("[")
    for source in _sources(logs):
        for ev in _events(source, envelope):
            if not show_all and ev.kind == "unparsed":
                continue
            d = ev.to_dict()
            if len(logs) > 1:
                d["source"] = display_path(source)
            if fmt == "jsonl":
                out.write(_dump(d) + "\n")
            elif fmt == "json":
                out.write(("\n" if first_json else ",\n") + _dump(d))
                first_json = False
            else:
                rank = ev.ranks or ("" if ev.rank is None else str(ev.rank))
                fields = " ".join(f"{k}={_short(v)}" for k, v in ev.fields.items())
                out.write(f"{ev.line:>6}  {ev.kind:<28} {rank:<14} {ev.ts or '':<23} {fields}\n")
    if fmt == "json":
        out.write("\n]\n")


def _short(v: Any, limit: int = 60) -> str:
    s = v if isinstance(v, str) else _dump(v)
    s = s.replace("\n", "⏎")
    return s if len(s) <= limit else s[: limit - 1] + "…"


@cli.command("summary")
@click.argument("log", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@envelope_option
def summary_cmd(log: str | None, fmt: str, envelope: str | None) -> None:
    """Print the run summary of LOG (or - / stdin): config, stages, memory per rank, batches, failures."""
    from logdoctor.read.citations import Citations, cite_run
    from logdoctor.run.summary import summarize_source
    source = _sources((log,) if log else ())[0]
    citations = Citations()
    run = summarize_source(source, envelope, citations)
    cite_run(run, citations)
    run.source = _label(source)
    _require_content(run, source)
    if fmt == "json":
        click.echo(_dump(run.to_dict()))
    else:
        from logdoctor.report.report import summary_text
        click.echo(summary_text(run))


@cli.command("memory")
@click.argument("log", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--mem-fraction-static", "mfs", type=click.FloatRange(0.05, 0.99), default=None,
              help="What-if: predict the KV cache and reserve at this value.")
@click.option("--cuda-graph-max-bs", "bs", type=click.IntRange(1, 4096), default=None,
              help="What-if: scale the CUDA-graph memory to this largest captured batch.")
@envelope_option
def memory_cmd(log: str | None, fmt: str, mfs: float | None, bs: int | None, envelope: str | None) -> None:
    """Rebuild the KV-cache budget of LOG from its own numbers and say which flag to move which way."""
    from logdoctor.run.memory import analyse, memory_text
    from logdoctor.run.summary import summarize_source
    source = _sources((log,) if log else ())[0]
    run = summarize_source(source, envelope)  # analyse compares positions: not cited
    run.source = _label(source)
    _require_content(run, source)
    analysis = analyse(run, mfs, bs)
    if fmt == "json":
        click.echo(_dump(analysis.to_dict()))
    else:
        click.echo(memory_text(analysis))


def _color_enabled(stream: Any) -> bool:
    import os
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _load_rules(extra: tuple[str, ...]) -> list[Any]:
    from logdoctor.diagnosis.rules import RuleError, load_ruleset
    try:
        return load_ruleset(list(extra))
    except RuleError as e:
        raise UsageError(str(e)) from None


@cli.command("explain")
@click.argument("logs", nargs=-1, metavar="LOG...")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR",
              help="Add rules from DIR (repeatable); a rule with the same id or name overrides a built-in.")
@click.option("--one-launch", is_flag=True,
              help="A directory holds the logs of one launch (one per node): diagnose them together.")
@envelope_option
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when a failure is diagnosed.")
def explain_cmd(logs: tuple[str, ...], fmt: str, rule_dirs: tuple[str, ...], one_launch: bool,
                envelope: str | None, exit_zero: bool) -> int:
    """Say why the launch in LOG... failed: evidence, why, what to change.

    LOG is a file (compressed or not) or - for stdin. Several LOGs (or a directory with --one-launch) are
    the logs of one multi-node launch: read together, merged by time, the root cause found across nodes
    and cited as NODE:LINE. A single log that interleaves several pods or hosts (`kubectl logs --prefix`,
    stern) is split into its nodes the same way.

    Exit codes: 0 no failure found, 1 failure diagnosed, 2 usage or input error.
    """
    from logdoctor.many.launch import diagnose_logs
    rules = _load_rules(rule_dirs)
    sources = _launch_sources(_sources(logs), one_launch)
    report = diagnose_logs(sources, rules, _node_labels(sources), envelope)
    if report.run.line_count == 0:
        raise UsageError(f"{', '.join(_label(s) for s in sources)}: empty input, nothing to analyse")
    if fmt == "json":
        click.echo(_dump(report.to_dict()))
    elif fmt == "markdown":
        from logdoctor.report.report import explain_markdown
        click.echo(explain_markdown(report))
    else:
        from logdoctor.report.report import explain_text
        color = _color_enabled(sys.stdout)
        click.echo(explain_text(report, color=color), color=color)  # click strips ANSI unless told
    return EXIT_FAILURE_FOUND if report.verdict == "failed" and not exit_zero else EXIT_OK


def _launch_sources(sources: list[str], one_launch: bool) -> list[str]:
    """The files of one launch: directories expanded (--one-launch), `-` at most once, no repeats."""
    import os

    from logdoctor.many.batch import discover_inputs
    out: list[str] = []
    for s in sources:
        if s != "-" and os.path.isdir(s):
            if not one_launch:
                raise UsageError(f"{_label(s)}: is a directory: add --one-launch to read every log in it as the "
                                 f"logs of one launch, or use 'logdoctor batch {_label(s)}' for one diagnosis per log")
            found = list(discover_inputs([s]))
            for path, problem in found:
                if problem is not None:
                    raise UsageError(f"{_label(path)}: {problem}")
            if not found:
                raise UsageError(f"{_label(s)}: no logs in this directory (*.log, *.txt, *.out, *.err, *.gz)")
            out.extend(path for path, _ in found)
        else:
            out.append(s)
    if out.count("-") > 1:
        raise UsageError("- (stdin) can be given once")
    return list(dict.fromkeys(out))


def _node_labels(sources: list[str]) -> list[str]:
    """How citations name each file: its base name when those are unique, else the path as given."""
    import os
    labels = [_label(s) for s in sources]
    if len(sources) < 2:
        return labels
    names = [_label(os.path.basename(s)) if s != "-" else "<stdin>" for s in sources]
    return names if len(set(names)) == len(names) else labels


@cli.group("rules")
def rules_group() -> None:
    """List, document, check and test rules."""


@rules_group.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR")
def rules_list(fmt: str, rule_dirs: tuple[str, ...]) -> None:
    """List every rule (built-in and --rules DIR)."""
    rules = sorted(_load_rules(rule_dirs), key=lambda r: r.id)
    rows = [{"id": r.id, "name": r.name, "category": r.category, "severity": r.severity, "stage": r.stage,
             "title": r.title} for r in rules]
    if fmt == "json":
        click.echo(_dump(rows))
    elif fmt == "csv":
        import csv
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["id"])
        w.writeheader()
        w.writerows(rows)
    else:
        for r in rows:
            click.echo(f"{r['id']:<7} {r['category']:<22} {r['severity']:<8} {r['name']:<40} {r['title']}")
        click.echo(f"{len(rows)} rules")


@rules_group.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR")
def rules_explain(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """Print a rule's documentation: what it detects, why it happens, how to fix, examples."""
    rules = _load_rules(rule_dirs)
    rule = next((r for r in rules if rule_id in (r.id, r.name)), None)
    if rule is None:
        raise UsageError(f"no rule {rule_id!r} (see 'logdoctor rules list')")
    from logdoctor.report.report import rule_doc
    click.echo(rule_doc(rule))


@rules_group.command("check")
@click.argument("directory", required=False)
def rules_check(directory: str | None) -> int:
    """Validate rule files (schema, patterns, conditions); problems as file:line: message, exit 2."""
    from pathlib import Path

    from logdoctor.diagnosis.rules import check_dir
    from logdoctor.resources import builtin_rules_dir
    rules, problems = check_dir(Path(directory) if directory else builtin_rules_dir())
    for p in problems:
        click.echo(str(p))
    if problems:
        click.echo(f"{len(problems)} problem(s), {len(rules)} valid rule(s)", err=True)
        return EXIT_USAGE
    click.echo(f"{len(rules)} rule(s) OK")
    return EXIT_OK


@rules_group.command("test")
@click.argument("directory", required=False)
def rules_test(directory: str | None) -> int:
    """Run every rule's fires/quiet examples; exit 1 when one does not behave."""
    from pathlib import Path

    from logdoctor.diagnosis.rules import check_dir
    from logdoctor.diagnosis.ruletest import run_examples
    from logdoctor.resources import builtin_rules_dir
    rules, problems = check_dir(Path(directory) if directory else builtin_rules_dir())
    for p in problems:
        click.echo(str(p))
    if problems:
        return EXIT_USAGE
    failures = 0
    for rule in sorted(rules, key=lambda r: r.id):
        for outcome in run_examples(rule):
            if not outcome.ok:
                failures += 1
                click.echo(f"FAIL {rule.id} {outcome.which} {outcome.path}: {outcome.message}")
    total = sum(len(r.examples.get("fires", [])) + len(r.examples.get("quiet", [])) for r in rules)
    click.echo(f"{total - failures} passed, {failures} failed")
    return EXIT_FAILURE_FOUND if failures else EXIT_OK


from logdoctor.cli.many import (
    register as _register_many,  # commands over many logs (import last: it imports cli)
)

_register_many(cli, rules_group)


def _say(message: str) -> None:
    """One line on stderr; the message may quote a file name, so it is escaped."""
    try:
        click.echo(f"logdoctor: {display_text(message)}", err=True)
    except OSError:
        pass  # stderr itself is gone: the exit code still tells


def _silence_stdout() -> None:
    """After the reader of stdout went away, let the interpreter's final flush go nowhere."""
    try:
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, sys.stdout.fileno())
        os.close(nul)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _run() -> int:
    try:
        rv = cli.main(standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:  # click's prompt on EOF; ours never prompt
        _say("aborted")
        return EXIT_USAGE
    except click.ClickException as e:
        e.show()
        return EXIT_USAGE
    except (InputError, UsageError, OutputError) as e:
        _say(str(e))
        return EXIT_USAGE
    except (PipeClosed, BrokenPipeError):
        _silence_stdout()
        return EXIT_PIPE_CLOSED
    except Signalled as e:
        _say("interrupted" if e.signum == signal.SIGINT else "terminated")
        return 128 + e.signum
    except KeyboardInterrupt:  # SIGINT before the handler was installed, or as a library
        _say("interrupted")
        return 128 + signal.SIGINT
    except RecursionError:
        _say("input too deeply nested to analyse")
        return EXIT_USAGE
    except Exception as e:  # never a traceback: say what failed in one line
        _say(f"internal error: {type(e).__name__}: {e}")
        return EXIT_USAGE
    return rv if isinstance(rv, int) else EXIT_OK


def main() -> None:
    _guard_standard_streams()
    _install_signal_handlers()
    code = _run()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()
    sys.exit(code)


if __name__ == "__main__":
    main()
