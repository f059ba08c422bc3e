"""Commands over rule files: `rules list`, `explain`, `check`, `test` and `new` (a skeleton from a log line)."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from logdoctor.cli.common import (
    EXIT_FAILURE_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    cited,
    destination,
    dump,
    event_at,
    load_rules,
    selection_options,
)
from logdoctor.paths import display_path


@click.group("rules")
def rules_group() -> None:
    """List, document, check and test rules."""


@rules_group.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR")
@selection_options
def rules_list(fmt: str, rule_dirs: tuple[str, ...]) -> None:
    """List every rule (built-in and --rules DIR) that --select / --ignore leave running."""
    rules = sorted(load_rules(rule_dirs), key=lambda r: r.id)
    rows = [{"id": r.id, "name": r.name, "category": r.category, "severity": r.severity, "stage": r.stage,
             "title": r.title} for r in rules]
    if fmt == "json":
        click.echo(dump(rows))
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
    from logdoctor.report.human import did_you_mean, lookup
    rules = load_rules(rule_dirs)
    by_name = {**{r.name: r for r in rules}, **{r.id: r for r in rules}}  # `mem001` is MEM001
    hit = lookup(rule_id, by_name)
    if hit is None:
        raise UsageError(f"no rule {rule_id!r}{did_you_mean(rule_id, by_name)}; see 'logdoctor rules list'")
    rule = by_name[hit]
    from logdoctor.report.report import rule_doc
    click.echo(rule_doc(rule))


@rules_group.command("check")
@click.argument("directory", required=False)
def rules_check(directory: str | None) -> int:
    """Validate rule files (schema, patterns, conditions); problems as file:line: message, exit 2."""

    from logdoctor.diagnosis.rules import check_dir
    from logdoctor.resources import builtin_rules_dir
    rules, problems = check_dir(_rules_dir(directory) if directory else builtin_rules_dir())
    _require_rules(directory, rules, problems)
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

    from logdoctor.diagnosis.rules import check_dir
    from logdoctor.diagnosis.ruletest import run_examples
    from logdoctor.resources import builtin_rules_dir
    rules, problems = check_dir(_rules_dir(directory) if directory else builtin_rules_dir())
    _require_rules(directory, rules, problems)
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


@rules_group.command("new")
@click.option("--from", "source", required=True, metavar="LOG[:LINE]",
              help="The log (and line) whose failure the rule should recognise.")
@click.option("-o", "--output", metavar="FILE.yaml", help="Write the skeleton here instead of stdout.")
@click.option("--id", "rule_id", default=None, help="Rule id (default: the next free UNK9xx).")
def rules_new(source: str, output: str | None, rule_id: str | None) -> None:
    """Write a rule skeleton (valid against the schema) for the failure at LOG[:LINE]."""
    from logdoctor.diagnosis.ranking import diagnose_source
    from logdoctor.many.clusters import rule_skeleton, signature
    from logdoctor.parse.parse import parse_source
    dest = destination(output)
    path, line = _split_source(source)
    events = cited(parse_source(path))
    if line is None:
        report = diagnose_source(path, load_rules(()))
        line = report.primary.position if report.primary else None
    target = event_at(events, line)
    if target is None:
        raise UsageError(f"{source}: no event to build a rule from (name a line with --from LOG:LINE)")
    kind, field_name, text = target
    used = {r.id for r in load_rules(())}
    rid = rule_id or next(f"UNK{n}" for n in range(900, 1000) if f"UNK{n}" not in used)
    name = output and Path(output).stem or ("new-" + "-".join(signature(text).lower().split()[:4]))
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name).strip("-")[:60] or "new-rule"
    example = _example_path(path, output)
    if os.path.isabs(example):
        click.echo(f"logdoctor: {display_path(path)} is outside the rules' parent directory: copy it there and "
                   f"fix examples.fires (rule files name examples by relative paths)", err=True)
    skeleton = rule_skeleton(rid, name, kind, field_name, text, example)
    if output and dest:
        with dest.writing() as written:
            Path(written).write_text(skeleton, encoding="utf-8")
        click.echo(f"wrote {display_path(output)}: edit category/explanation/remedy, add a quiet example, then "
                   f"'logdoctor rules check {shlex.quote(display_path(Path(output).parent))}'", err=True)
    else:
        click.echo(skeleton, nl=False)


def _rules_dir(directory: str) -> Path:
    """DIR of `rules check` / `rules test`: an input like any other, so one line and exit 2 when it is not a
    directory or holds no rule file (nothing would be checked)."""
    shown = display_path(directory)
    if not os.path.isdir(directory):
        raise UsageError(f"{shown}: {'not a directory' if os.path.exists(directory) else 'no such directory'}")
    return Path(directory)


def _require_rules(directory: str | None, rules: list[Any], problems: list[Any]) -> None:
    if directory and not rules and not problems:
        raise UsageError(f"{display_path(directory)}: no rule files (*.yaml) in this directory")


def _example_path(log: str, rule_file: str | None) -> str:
    """The example log as rule files name it: relative to the rules root's parent (the directory above
    the nearest `rules/` or schema-holding directory), without '..'; absolute when it is not below it."""
    start = Path(rule_file).resolve().parent if rule_file else Path.cwd()
    base = next((p.parent for p in (start, *start.parents) if p.name == "rules" or (p / "schema.json").exists()),
                start)
    resolved = Path(log).resolve()
    rel = os.path.relpath(resolved, base)
    return str(resolved) if rel == ".." or rel.startswith(".." + os.sep) else rel


def _split_source(source: str) -> tuple[str, int | None]:
    if ":" in source and source.rsplit(":", 1)[1].isdigit() and not os.path.exists(source):
        p, n = source.rsplit(":", 1)
        return p, int(n)
    return source, None
