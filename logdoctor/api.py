"""The public Python API (what `import logdoctor` offers a notebook or a script).

- `diagnose(source, rules=None) -> Report`: one log's diagnosis, the same as `logdoctor explain` (the
  same code: `many.launch.diagnose_logs`, so a file that interleaves several pods is split the same way).
- `events(source) -> polars.DataFrame`: one row per event, what `logdoctor parse` prints, typed.
- `runs(paths) -> polars.DataFrame`: one row per log, what `logdoctor runs` prints, plus `error`.

A source is a path (`str` or `os.PathLike`; compressed files and `-` for stdin as on the command line),
`bytes`, a `str` holding the log itself, or an open file object (binary or text). A `str` is the log's
text when it contains a line break, else a path: a one-line log without its newline is passed as bytes
(`text.encode()`) or with the newline. Content that is not a path is copied to a private temporary file
for the reading (`read.memory_source`), so every source type reads exactly as a file does.

Errors are exceptions with a one-line message naming the source: `InputError` (missing, a directory,
binary, empty, ...), `RuleError` (a rule directory that does not load), `ValueError` (an unknown
`envelope`, `kind` or column), `TypeError` (a source of another type). The API reads no config file and
no environment variable: what it does is what its arguments say.

polars is imported by `events` and `runs` only: `diagnose` and `import logdoctor` never import it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import IO, TYPE_CHECKING, Any

from logdoctor.diagnosis import ranking
from logdoctor.diagnosis.rules import Rule, RuleError, load_ruleset
from logdoctor.read.memory_source import is_file_object, renamed, spooled
from logdoctor.read.sniff import InputError, display_name

if TYPE_CHECKING:
    import polars as pl

Source = str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes] | IO[str]
Rules = None | str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Sequence[Rule]

EPOCH_FLOOR_S = 400 * 86400.0   # Event.secs below this is seconds since midnight (the log printed no date)


# ------------------------------------------------------------------------------------------------
# the report


class Report(ranking.Report):
    """One log's diagnosis: `verdict` ("failed" | "healthy" | "incomplete"), `primary` (the root cause,
    a `Diagnosis`, or None), `diagnoses` (all, the primary first), `run` (the fold of the log: config,
    stages, memory per rank, batches), `memory` (the KV-budget analysis, the `memory` object of the JSON
    report, or None), `notes`, `source`.

    `to_dict()` is the document `logdoctor explain --format json` prints (schema logdoctor.diagnosis/1);
    `to_json()`, `to_markdown()` and `to_text()` are its other formats; a notebook shows `_repr_html_()`."""

    @classmethod
    def of(cls, report: ranking.Report) -> Report:
        """The public Report of a ranking's Report (the same objects, not copies)."""
        if isinstance(report, cls):
            return report
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})

    def to_json(self, indent: int | None = None) -> str:
        """`logdoctor explain --format json` (byte for byte with the default `indent`)."""
        from logdoctor.report.json_text import dump
        return dump(self.to_dict(), indent)

    def to_markdown(self) -> str:
        """`logdoctor explain --format markdown`: ready to paste into an issue."""
        from logdoctor.report.report import explain_markdown
        return explain_markdown(self)

    def to_text(self) -> str:
        """`logdoctor explain` as it prints without colour."""
        from logdoctor.report.report import explain_text
        return explain_text(self, color=False)

    def _repr_html_(self) -> str:
        from logdoctor.report.html import explain_html
        return explain_html(self)

    def __repr__(self) -> str:
        p = self.primary
        cause = f" {p.rule.id} {p.rule.name} at line {p.position}" if p is not None else ""
        return f"<logdoctor.Report {self.verdict}{cause} of {self.source}>"


# ------------------------------------------------------------------------------------------------
# sources and rules


def _is_content(source: Any) -> bool:
    if isinstance(source, (bytes, bytearray, memoryview)) or is_file_object(source):
        return True
    return isinstance(source, str) and ("\n" in source or "\r" in source)


def _content_name(source: Any) -> str:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<bytes>"
    if isinstance(source, str):
        return "<text>"
    name = getattr(source, "name", None)
    return name if isinstance(name, str) and name else "<stream>"


@contextmanager
def _readable(source: Source, name: str | None) -> Iterator[tuple[str, str, bool]]:
    """(a path the readers open, the name reports and errors give the source, whether it is a copy)."""
    if _is_content(source):
        shown = name or _content_name(source)
        data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
        with spooled(data, shown) as path:  # type: ignore[arg-type]
            try:
                yield path, shown, True
            except InputError as e:
                raise renamed(e, path, shown) from None
        return
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"a log source is a path, bytes, a str or a file object, not {type(source).__name__}")
    path = os.fspath(source)
    if not isinstance(path, str):
        raise TypeError("a bytes path is not accepted: bytes are the log's content (pass os.fsdecode(path))")
    yield path, name or display_name(path), False


def _ruleset(rules: Rules) -> list[Rule]:
    """None: the built-in rules; paths: the built-ins plus those directories (`--rules DIR`, in order);
    a list of loaded rules (`diagnosis.rules.load_ruleset(...)`): those rules as they are."""
    if rules is None:
        return load_ruleset(())
    if isinstance(rules, (str, os.PathLike)):
        rules = [rules]
    items = list(rules)
    if items and all(isinstance(r, Rule) for r in items):
        return rules if isinstance(rules, list) else items  # type: ignore[return-value]  # a RuleSet keeps its net
    if all(isinstance(r, (str, os.PathLike)) for r in items):
        return load_ruleset([os.fspath(r) for r in items if not isinstance(r, Rule)])
    raise TypeError("rules: rule directories (paths) or a list of loaded rules, not a mix")


# ------------------------------------------------------------------------------------------------
# diagnose


def diagnose(source: Source, rules: Rules = None, *, envelope: str | None = None,
             name: str | None = None) -> Report:
    """Diagnose one log, as `logdoctor explain` does: verdict, root cause, evidence, remedies.

    `rules`: extra rule directories (added to the built-ins, overriding by id or name) or a list of
    loaded rules. `envelope`: how the log was collected (`logdoctor explain --envelope`; None: detected).
    `name`: how the report names the source (default: the path as given, `<bytes>`, `<text>`, or a file
    object's `name`). Raises InputError for a source that cannot be read or holds no line."""
    from logdoctor.many.launch import diagnose_logs
    ruleset = _ruleset(rules)
    with _readable(source, name) as (path, shown, copied):
        report = diagnose_logs([path], ruleset, [shown], envelope)
        if copied:
            _name_copy(report, path, shown)
    if report.run.line_count == 0:
        raise InputError(shown, "empty input, nothing to analyse")
    return Report.of(report)


def _name_copy(report: ranking.Report, path: str, shown: str) -> None:
    """A report read from a temporary copy names the source as given (several nodes name their file)."""
    copy = display_name(path)
    if report.source == copy:
        report.source = shown
    if report.run.source == copy:
        report.run.source = shown
    for node in report.nodes:
        if node.get("file") == copy:
            node["file"] = shown


# ------------------------------------------------------------------------------------------------
# events


EVENT_COLUMNS = ["line", "end_line", "kind", "rank", "ranks", "ts", "time", "secs", "node", "template", "text"]


def events(source: Source, *, kind: str | None = None, envelope: str | None = None,
           name: str | None = None) -> pl.DataFrame:
    """Every event of one log (what `logdoctor parse` prints) as a polars DataFrame, one row per event.

    Columns: `line` / `end_line` (Int64, lines of the input as given; end_line = line for one line),
    `kind`, `rank` (Int64, null when the line names none), `ranks` (the label as printed, "DP0 TP3"),
    `ts` (the time as printed), `time` (Datetime, the log's own clock, no time zone: set when the line
    carries a date), `secs` (Float64: epoch seconds when the line has a date, else seconds since
    midnight), `node`, `template` (catalog id), `text`, and `fields` (the kind's fields as JSON text, as
    `batch --events` writes them: kinds have different fields).

    `kind="kv_cache_allocated"` (any kind of `logdoctor.events.KINDS`): only that kind's events, its
    fields as typed columns instead of `fields` (a field named like a column is `fields.<name>`)."""
    import polars as pl

    from logdoctor.events import KINDS
    from logdoctor.parse.parse import parse_source
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}{_did_you_mean(kind, KINDS)}")
    cols: dict[str, list[Any]] = {c: [] for c in EVENT_COLUMNS}
    kept: list[dict[str, Any]] = []
    with _readable(source, name) as (path, shown, _):
        parsed = parse_source(path, envelope)
        cite = parsed.citations.event
        lines = 0
        for ev in parsed:
            lines += 1
            if kind is not None and ev.kind != kind:
                continue
            ev = cite(ev)
            for c, v in zip(EVENT_COLUMNS, (ev.line, ev.end_line or ev.line, ev.kind, ev.rank, ev.ranks, ev.ts,
                                            None, ev.secs, ev.node, ev.template, ev.text)):
                cols[c].append(v)
            kept.append(ev.fields)
    if lines == 0:
        raise InputError(shown, "empty input, nothing to analyse")
    schema: dict[str, Any] = {"line": pl.Int64, "end_line": pl.Int64, "kind": pl.String, "rank": pl.Int64, "ranks": pl.String,
              "ts": pl.String, "time": pl.Datetime("us"), "secs": pl.Float64, "node": pl.String,
              "template": pl.String, "text": pl.String}
    df = pl.DataFrame(cols, schema=schema)
    secs = pl.col("secs")
    df = df.with_columns(pl.when(secs >= EPOCH_FLOOR_S).then((secs * 1e6).round().cast(pl.Int64))
                         .otherwise(None).cast(pl.Datetime("us")).alias("time"))
    if kind is None:
        return df.with_columns(pl.Series("fields", [json.dumps(f, ensure_ascii=False, default=str) for f in kept],
                                         dtype=pl.String))
    return df.hstack(_field_columns(kept, set(EVENT_COLUMNS)))


def _field_columns(rows: list[dict[str, Any]], taken: set[str]) -> list[pl.Series]:
    """One typed column per field of one kind (nulls where an event lacks it); a field whose values
    polars cannot type together (an int here, a list there) stays JSON text."""
    import polars as pl
    keys: dict[str, None] = {}
    for f in rows:
        keys.update(dict.fromkeys(f))
    out = []
    for key in keys:
        values = [f.get(key) for f in rows]
        column = f"fields.{key}" if key in taken else key
        try:
            series = pl.Series(column, values, strict=False)
            if series.dtype != pl.Object:  # Object: values of no one type (polars keeps the Python objects)
                out.append(series)
                continue
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            pass
        out.append(pl.Series(column, [None if v is None else json.dumps(v, default=str) for v in values],
                                 dtype=pl.String))
    return out


def _did_you_mean(word: str, choices: Any) -> str:
    import difflib
    close = difflib.get_close_matches(word, list(choices), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# ------------------------------------------------------------------------------------------------
# runs


def runs(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, rules: Rules = None,
         jobs: int = 1, columns: Sequence[str] | None = None, envelope: str | None = None,
         timeout: float | None = None) -> pl.DataFrame:
    """One row per log (files, directories searched for logs, globs), the columns of `logdoctor runs`
    (model, flags, memory, KV tokens, throughput, verdict, category, rule) plus `error`.

    A file that cannot be read keeps its row, with only `path` and `error` (why) set: one bad file never
    costs the others theirs. InputError when no log at all could be read. Rows are sorted by path.
    `jobs`: worker processes (1: in this process); `timeout`: each file's budget in seconds (None: none);
    `columns`: the columns to keep, in that order (ValueError for an unknown one)."""
    from logdoctor.many.batch import RUN_COLUMNS, collect
    from logdoctor.many.tables import frame
    from logdoctor.paths import display_path
    wanted = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    every = [*RUN_COLUMNS, "error"]
    if columns is not None:
        unknown = [c for c in columns if c not in every]
        if unknown:
            raise ValueError(f"unknown column {unknown[0]!r}{_did_you_mean(unknown[0], every)} "
                             f"(columns: {', '.join(every)})")
    from logdoctor.many.dataset_read import dataset_results, is_dataset
    if wanted and all(is_dataset(p) for p in wanted):  # results of `batch -o DIR/`: no log is read again
        df = dataset_results(wanted, every)
        return df.select(list(columns)) if columns is not None else df
    rows, found = collect(wanted, [], jobs, want_run=True, timeout=timeout, rules=_ruleset(rules), envelope=envelope)
    errors = [r for r in rows if r.error is not None]
    if not found:
        if not errors:
            raise InputError(", ".join(wanted) or "runs", "no logs found")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InputError(errors[0].path, f"{errors[0].error}{more}")
    table = [{**r, "error": None} for r in found]
    table += [{"path": display_path(r.path), "error": r.error} for r in errors]
    table.sort(key=lambda r: r["path"])
    import polars as pl
    df = frame(table, every).with_columns(pl.col("error").cast(pl.String))  # text even when every file was read
    return df.select(list(columns)) if columns is not None else df


__all__ = ["InputError", "Report", "RuleError", "Source", "diagnose", "events", "runs"]
