"""Row sets to polars frames and out: table / csv / json / jsonl / parquet, group-by, sort, filter.

Only the many-runs commands import this module (polars costs ~0.2 s to import; `explain` never pays it).
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import polars as pl

from logdoctor.paths import display_text

FORMATS = ("table", "csv", "json", "jsonl", "parquet")


def frame(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> pl.DataFrame:
    """Rows to a frame; text in its display form (polars, parquet and JSON need valid UTF-8, and a file
    name may not be: see paths.display_path)."""
    data = {c: [display_text(v) if isinstance(v, str) else v for v in (r.get(c) for r in rows)] for c in columns}
    return pl.DataFrame(data, strict=False, infer_schema_length=None)


_FILTER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(==|!=|>=|<=|=|>|<|~)\s*(.*?)\s*$")


def apply_filters(df: pl.DataFrame, filters: Sequence[str]) -> pl.DataFrame:
    """`col=value`, `col!=value`, `col>=n`, `col~regex` (all must hold)."""
    for f in filters:
        m = _FILTER.match(f)
        if not m:
            raise ValueError(f"bad --filter {f!r}: use COL=VALUE, COL!=VALUE, COL>N, COL<N or COL~REGEX")
        col, op, raw = m.groups()
        if col not in df.columns:
            raise ValueError(f"bad --filter {f!r}: no column {col!r} (columns: {', '.join(df.columns)})")
        c = pl.col(col)
        dtype = df.schema[col]
        value: Any = raw
        if dtype.is_numeric() and op != "~":
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"bad --filter {f!r}: {col} is numeric") from None
        if op in ("=", "=="):
            expr = c == value if raw not in ("", "null", "None") else c.is_null()
        elif op == "!=":
            expr = c != value if raw not in ("", "null", "None") else c.is_not_null()
        elif op == "~":
            expr = c.cast(pl.Utf8).str.contains(raw)
        else:
            expr = {">": c > value, "<": c < value, ">=": c >= value, "<=": c <= value}[op]
        df = df.filter(expr)
    return df


def apply_sort(df: pl.DataFrame, sort: str | None) -> pl.DataFrame:
    if not sort:
        return df
    keys = [k.strip() for k in sort.split(",") if k.strip()]
    desc = [k.startswith("-") for k in keys]
    names = [k.lstrip("-") for k in keys]
    for n in names:
        if n not in df.columns:
            raise ValueError(f"bad --sort {sort!r}: no column {n!r}")
    return df.sort(names, descending=desc, nulls_last=True)


def group_runs(df: pl.DataFrame, by: str) -> pl.DataFrame:
    keys = [k.strip() for k in by.split(",") if k.strip()]
    for k in keys:
        if k not in df.columns:
            raise ValueError(f"bad --group-by {by!r}: no column {k!r}")
    aggs = [pl.len().alias("runs"),
            (pl.col("verdict") == "failed").sum().alias("failed"),
            (pl.col("verdict") == "healthy").sum().alias("healthy")]
    if "kv_tokens" in df.columns:
        aggs += [pl.col("kv_tokens").median().alias("median_kv_tokens")]
    if "gen_throughput_median" in df.columns:
        aggs += [pl.col("gen_throughput_median").median().alias("median_gen_throughput")]
    if "category" in df.columns:
        aggs += [pl.col("category").drop_nulls().unique().sort().str.join(",").alias("failure_categories")]
    return df.group_by(keys, maintain_order=False).agg(aggs).sort(keys, nulls_last=True)


def render_table(df: pl.DataFrame, max_width: int = 60) -> str:
    cols = df.columns
    rows = [["" if v is None else _cell(v, max_width) for v in r] for r in df.iter_rows()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return "\n".join(out)


def _cell(v: Any, limit: int) -> str:
    s = f"{v:g}" if isinstance(v, float) else display_text(str(v))  # one cell, one line, no terminal escapes
    return s if len(s) <= limit else s[: limit - 1] + "…"


def write(df: pl.DataFrame, fmt: str, path: str | None, stream: Any, footer: str | None = None) -> None:
    """Write to `path` (opened once: it may be a FIFO) or to `stream`; `footer` follows a table."""
    if fmt == "parquet":
        if path is None:
            raise ValueError("--format parquet needs -o FILE")
        df.write_parquet(path)
        return
    if fmt == "csv":
        text = df.write_csv()
    elif fmt == "json":
        text = json.dumps(df.to_dicts(), default=str, ensure_ascii=False, indent=1) + "\n"
    elif fmt == "jsonl":
        text = "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in df.to_dicts())
    else:
        text = render_table(df) + "\n" + ("\n" + footer + "\n" if footer else "")
    if path is None:
        stream.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def batch_summary(df: pl.DataFrame) -> str:
    """Counts by verdict, category and rule, for the end of `batch --format table`."""
    out = []
    verdicts = df.group_by("verdict").len().sort("len", descending=True)
    out.append("by verdict:  " + ", ".join(f"{v or 'error'} {n}" for v, n in verdicts.iter_rows()))
    failed = df.filter(pl.col("verdict") == "failed")
    if failed.height:
        cats = failed.group_by("category").len().sort("len", descending=True)
        out.append("by category: " + ", ".join(f"{c} {n}" for c, n in cats.iter_rows()))
        rules = failed.group_by(["rule", "title"]).len().sort("len", descending=True)
        out.append("by rule:")
        out.extend(f"  {n:>5}  {r}  {t}" for r, t, n in rules.select("rule", "title", "len").iter_rows())
    errors = df.filter(pl.col("error").is_not_null())
    if errors.height:
        out.append(f"not diagnosed: {errors.height} file(s) (unreadable or over the time budget: see error)")
    return "\n".join(out)
