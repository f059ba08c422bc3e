"""The `logdoctor` command line.

Exit codes (all commands): 0 no failure found / success, 1 failure diagnosed (explain, batch),
2 usage or input error (a clear one-line message on stderr, never a traceback).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from . import __version__
from .events import Event
from .ingest import InputError

EXIT_OK, EXIT_FAILURE_FOUND, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input that is the user's to fix; printed as one line, exit 2."""


def _sources(logs: tuple[str, ...]) -> list[str]:
    if logs:
        return list(logs)
    if sys.stdin.isatty():
        raise UsageError("no log given: pass a file, several files, or '-' / pipe a log on stdin")
    return ["-"]


def _events(source: str) -> Iterator[Event]:
    from .parse import parse_source
    return parse_source(source)


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, float):
        return None
    return str(o)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logdoctor")
def cli() -> None:
    """Read SGLang server logs and say why a launch failed.

    Exit codes: 0 no failure, 1 failure diagnosed, 2 usage or input error.
    """


@cli.command("parse")
@click.argument("logs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "table"]), default="jsonl", show_default=True)
@click.option("--all/--no-unparsed", "show_all", default=True, help="Include unparsed lines (default) or not.")
def parse_cmd(logs: tuple[str, ...], fmt: str, show_all: bool) -> None:
    """Print every event of LOG... (files, .gz, or - for stdin)."""
    out = sys.stdout
    first_json = True
    if fmt == "json":
        out.write("[")
    for source in _sources(logs):
        for ev in _events(source):
            if not show_all and ev.kind == "unparsed":
                continue
            d = ev.to_dict()
            if len(logs) > 1:
                d["source"] = source
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
def summary_cmd(log: str | None, fmt: str) -> None:
    """Print the run summary of LOG (or - / stdin): config, stages, memory per rank, batches, failures."""
    from .summary import summarize
    source = _sources((log,) if log else ())[0]
    run = summarize(_events(source), source)
    if fmt == "json":
        click.echo(_dump(run.to_dict()))
    else:
        from .report import summary_text
        click.echo(summary_text(run))


def main() -> None:
    try:
        rv = cli.main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("logdoctor: aborted", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_USAGE)
    except (InputError, UsageError) as e:
        click.echo(f"logdoctor: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        click.echo("logdoctor: interrupted", err=True)
        sys.exit(130)
    except RecursionError:
        click.echo("logdoctor: input too deeply nested to analyse", err=True)
        sys.exit(EXIT_USAGE)
    except Exception as e:  # never a traceback: say what failed in one line
        click.echo(f"logdoctor: internal error: {type(e).__name__}: {e}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


if __name__ == "__main__":
    main()
