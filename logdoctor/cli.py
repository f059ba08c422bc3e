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


def _require_content(run: Any, source: str) -> None:
    if run.line_count == 0:
        raise UsageError(f"{'<stdin>' if source == '-' else source}: empty input, nothing to analyse")


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
    from .summary import summarize_source
    source = _sources((log,) if log else ())[0]
    run = summarize_source(source)
    _require_content(run, source)
    if fmt == "json":
        click.echo(_dump(run.to_dict()))
    else:
        from .report import summary_text
        click.echo(summary_text(run))


@cli.command("memory")
@click.argument("log", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--mem-fraction-static", "mfs", type=click.FloatRange(0.05, 0.99), default=None,
              help="What-if: predict the KV cache and reserve at this value.")
@click.option("--cuda-graph-max-bs", "bs", type=click.IntRange(1, 4096), default=None,
              help="What-if: scale the CUDA-graph memory to this largest captured batch.")
def memory_cmd(log: str | None, fmt: str, mfs: float | None, bs: int | None) -> None:
    """Rebuild the KV-cache budget of LOG from its own numbers and say which flag to move which way."""
    from .memory import analyse, memory_text
    from .summary import summarize_source
    source = _sources((log,) if log else ())[0]
    run = summarize_source(source)
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
    from .rules import RuleError, load_ruleset
    try:
        return load_ruleset(list(extra))
    except RuleError as e:
        raise UsageError(str(e)) from None


@cli.command("explain")
@click.argument("log", required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR",
              help="Add rules from DIR (repeatable); a rule with the same id or name overrides a built-in.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when a failure is diagnosed.")
def explain_cmd(log: str | None, fmt: str, rule_dirs: tuple[str, ...], exit_zero: bool) -> int:
    """Say why the launch in LOG (a file, or - / stdin) failed: evidence, why, what to change.

    Exit codes: 0 no failure found, 1 failure diagnosed, 2 usage or input error.
    """
    from .diagnose import diagnose_source
    rules = _load_rules(rule_dirs)
    source = _sources((log,) if log else ())[0]
    report = diagnose_source(source, rules, "<stdin>" if source == "-" else source)
    _require_content(report.run, source)
    if fmt == "json":
        click.echo(_dump(report.to_dict()))
    elif fmt == "markdown":
        from .report import explain_markdown
        click.echo(explain_markdown(report))
    else:
        from .report import explain_text
        color = _color_enabled(sys.stdout)
        click.echo(explain_text(report, color=color), color=color)  # click strips ANSI unless told
    return EXIT_FAILURE_FOUND if report.verdict == "failed" and not exit_zero else EXIT_OK


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
    from .report import rule_doc
    click.echo(rule_doc(rule))


@rules_group.command("check")
@click.argument("directory", required=False)
def rules_check(directory: str | None) -> int:
    """Validate rule files (schema, patterns, conditions); problems as file:line: message, exit 2."""
    from pathlib import Path

    from .resources import builtin_rules_dir
    from .rules import check_dir
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

    from .resources import builtin_rules_dir
    from .ruletest import run_examples
    from .rules import check_dir
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


from .cli_many import register as _register_many  # noqa: E402  (commands over many logs)

_register_many(cli, rules_group)


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
