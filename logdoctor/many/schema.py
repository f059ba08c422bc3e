"""The typed results schema: one row per log (`RESULT_SCHEMA`) and one row per event (`EVENT_SCHEMA`).

Both are read from the shipped `logdoctor/results.schema.json` (column → type and meaning), so the file
people query against and the frames written are the same thing; tests check the written Parquet against
it. A result row is BatchRow ∪ RUN_COLUMNS ∪ what makes the dataset resumable and partitioned
(`content_hash`, `bytes`, `diagnosed_at`, `logdoctor_version`, `date`, `path_part`).

Event fields: kinds have different fields, so `fields` is one Struct whose members are the union of every
kind's documented fields (events.KINDS), each with one type; a value that does not fit its type (a
tolerant parser's odd token) is null there and kept in `fields_json`, the lossless JSON text. A Struct
queries well in both polars (`pl.col("fields").struct.field("kv_gib")`) and DuckDB (`fields.kv_gib`),
and keeps the table's width fixed whatever kinds a log has.

`result_frame(records)` is the one place a result row becomes typed: the local engine and
`logdoctor.fleet` (Ray) both call it, so they write the same Parquet.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from logdoctor import regexes

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "results.schema.json"
SCHEMA_VERSION = 1
EPOCH_FLOOR_S = 400 * 86400.0  # Event.secs below this is seconds since midnight (the line printed no date)
PARTITION_COLUMNS = ("date", "path_part")
UNKNOWN_DATE = "unknown"

_SCALARS: dict[str, Any] = {"string": pl.String, "int64": pl.Int64, "float64": pl.Float64, "bool": pl.Boolean,
                            "datetime[us]": pl.Datetime("us"), "datetime[us, UTC]": pl.Datetime("us", "UTC")}
_LIST = regexes.compile(r"^list\[(.*)\]$")
_STRUCT = regexes.compile(r"^struct\{(.*)\}$")


def parse_type(text: str) -> Any:
    """A polars dtype from the schema file's notation (`int64`, `list[string]`, `struct{a: int64}`)."""
    text = text.strip()
    if text in _SCALARS:
        return _SCALARS[text]
    m = _LIST.match(text)
    if m:
        return pl.List(parse_type(m.group(1)))
    m = _STRUCT.match(text)
    if m:  # members are scalars or lists of scalars: no commas nest inside them
        members = [part.split(":", 1) for part in m.group(1).split(",")]
        return pl.Struct({name.strip(): parse_type(t) for name, t in members})
    raise ValueError(f"{SCHEMA_FILE.name}: unknown type {text!r}")


@lru_cache(maxsize=1)
def schema_document() -> dict[str, Any]:
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _columns(section: str) -> dict[str, Any]:
    doc = schema_document()
    out: dict[str, Any] = {}
    for name, spec in doc[section].items():
        out[name] = FIELDS_DTYPE if spec["type"] == "struct(event_fields)" else parse_type(spec["type"])
    return out


FIELD_TYPES: dict[str, Any] = {name: parse_type(spec["type"]) for name, spec in schema_document()["event_fields"].items()}
FIELDS_DTYPE = pl.Struct(FIELD_TYPES)
RESULT_SCHEMA: dict[str, Any] = _columns("results")
EVENT_SCHEMA: dict[str, Any] = _columns("events")


def result_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """Result records (dicts with any subset of RESULT_SCHEMA's columns) → a typed frame in schema order;
    a missing column is null, a value of another type is cast (null when it cannot be)."""
    from logdoctor.paths import display_text
    data = {c: [_text(r.get(c), display_text) if t == pl.String else r.get(c) for r in records]
            for c, t in RESULT_SCHEMA.items()}
    return pl.DataFrame(data, schema=RESULT_SCHEMA, strict=False)


def event_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """Event records (as `typed_event` makes them) → a typed frame in EVENT_SCHEMA's order."""
    data = {c: [r.get(c) for r in records] for c in EVENT_SCHEMA}
    return pl.DataFrame(data, schema=EVENT_SCHEMA, strict=False)


def _text(v: Any, display: Any) -> str | None:
    return None if v is None else display(v if isinstance(v, str) else str(v))


# ------------------------------------------------------------------------------------------------
# one event → one typed record (runs in the worker that parsed the log)


def typed_event(ev: Any, path: str, line: int, end_line: int) -> dict[str, Any]:
    """An Event (its first and last line as cited) as a record of EVENT_SCHEMA; the partition and hash
    columns are the log's and are filled in by the caller."""
    secs = ev.secs
    ts = None
    if isinstance(secs, (int, float)) and secs >= EPOCH_FLOOR_S:
        ts = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=round(secs * 1e6))
    return {"path": path, "line": line, "end_line": end_line, "rank": ev.ranks or (None if ev.rank is None else str(ev.rank)),
            "rank_number": ev.rank, "ts": ts, "ts_text": ev.ts, "secs": secs, "kind": ev.kind,
            "fields": typed_fields(ev.fields),
            "fields_json": json.dumps(ev.fields, default=str, ensure_ascii=False)}


def typed_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The documented fields of one event, each coerced to its FIELD_TYPES type (None when it does not fit)."""
    out: dict[str, Any] = {}
    for k, v in fields.items():
        t = FIELD_TYPES.get(k)
        if t is not None and v is not None:
            out[k] = _coerce(v, t)
    return out


def _coerce(v: Any, t: Any) -> Any:
    if t == pl.String:
        return v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
    if t == pl.Boolean:
        return v if isinstance(v, bool) else None
    if t == pl.Int64:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v if -(1 << 63) <= v < (1 << 63) else None
        if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 63:
            return int(v)
        if isinstance(v, str) and v.strip().lstrip("-").isdigit() and len(v) < 19:
            return int(v)
        return None
    if t == pl.Float64:
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return float(v)
        try:
            return float(v) if isinstance(v, str) else None
        except ValueError:
            return None
    if isinstance(t, pl.List):
        if not isinstance(v, list):
            return None
        return [_coerce(x, t.inner) if x is not None else None for x in v]
    if isinstance(t, pl.Struct):
        if not isinstance(v, dict):
            return None
        return {f.name: _coerce(v[f.name], f.dtype) if v.get(f.name) is not None else None for f in t.fields}
    return None


# ------------------------------------------------------------------------------------------------
# partitions


def launch_date(head: bytes) -> str:
    """The launch's date from the first dated time stamp in the log's first bytes, else UNKNOWN_DATE."""
    m = _DATED.search(head)
    return m.group(1).decode("ascii") if m else UNKNOWN_DATE


_DATED = regexes.compile(rb"(?<![0-9])((?:19|20)[0-9]{2}-[01][0-9]-[0-3][0-9])[ T][0-2][0-9]:[0-5][0-9]:[0-5][0-9]")


def path_component(path: str, n: int) -> str | None:
    """The n-th component of a path or URL (0 = the first after the scheme / root; negative from the end,
    -1 being the file name); None when there is no such component."""
    rest = path.split("://", 1)[1] if "://" in path else path
    parts = [p for p in rest.replace("\\", "/").split("/") if p]
    try:
        return parts[n]
    except IndexError:
        return None


# ------------------------------------------------------------------------------------------------
# one log → one result record (any engine)


def content_digest() -> Any:
    """A fresh hash object for `content_hash` (update it with the log's bytes as stored; `.hexdigest()`)."""
    import hashlib
    return hashlib.blake2b(digest_size=16)


def result_record(row: Any, run: dict[str, Any] | None, content_hash: str | None, size: int | None,
                  date: str = UNKNOWN_DATE, path_part: str | None = None,
                  diagnosed_at: dt.datetime | None = None) -> dict[str, Any]:
    """A BatchRow and its flattened run (batch.row_of_report) plus the dataset columns → a record for
    result_frame. `diagnosed_at` defaults to now (UTC)."""
    from dataclasses import asdict

    from logdoctor import __version__
    rec: dict[str, Any] = dict(run or {})
    rec.update(asdict(row))  # the row's path (as given) and outcome win over the run's copies
    rec.update(content_hash=content_hash, bytes=size, logdoctor_version=__version__, date=date, path_part=path_part,
               diagnosed_at=diagnosed_at or dt.datetime.now(dt.timezone.utc))
    return rec
