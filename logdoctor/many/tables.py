"""Row sets to polars frames and out: table / csv / json / jsonl / parquet, group-by, sort, filter.

Only the many-runs commands import this module (polars costs ~0.2 s to import; `explain` never pays it).
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import polars as pl

from logdoctor import regexes
from logdoctor.paths import display_text
from logdoctor.report.human import did_you_mean, lookup, number

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
# what `runs --format table` shows unless --columns says otherwise: what a person reads first (what
# happened, what ran, the flags and figures that decide memory); csv / json / parquet keep every column
RUN_TABLE_COLUMNS = ("path", "verdict", "category", "rule", "last_stage", "model", "tp", "mem_fraction_static",
                     "weights_gib", "kv_tokens", "time_to_ready_s", "gen_throughput_median")


def frame(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> pl.DataFrame:
    """Rows to a frame; text in its display form (polars, parquet and JSON need valid UTF-8, and a file
    name may not be: see paths.display_path)."""
    data = {c: [display_text(v) if isinstance(v, str) else v for v in (r.get(c) for r in rows)] for c in columns}
    return pl.DataFrame(data, strict=False, infer_schema_length=None)


_FILTER = regexes.compile(r"^\s*([A-Za-z_][\w.]*)\s*(==|!=|>=|<=|=|>|<|~)\s*(.*?)\s*$")


def _no_column(option: str, given: str, name: str, columns: Sequence[str]) -> ValueError:
    return ValueError(f"{option} {given}: no column {name!r}{did_you_mean(name, columns)}")


def _column(option: str, given: str, name: str, columns: Sequence[str]) -> str:
    """`name` as a column of the table (any case), or ValueError naming the option."""
    hit = lookup(name, columns)
    if hit is None:
        raise _no_column(option, given, name, columns)
    return hit


def _polars_reason(e: Exception) -> str:
    """The line of a polars error that says what is wrong (`unclosed character class`), not its
    multi-line dump of the expression."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    said = [ln[len("error:"):].strip() for ln in lines if ln.startswith("error:")]
    return (said or lines or [type(e).__name__])[0]


def apply_filters(df: pl.DataFrame, filters: Sequence[str]) -> pl.DataFrame:
    """`col=value`, `col!=value`, `col>=n`, `col~regex` (all must hold)."""
    for f in filters:
        m = _FILTER.match(f)
        if not m:
            raise ValueError(f"--filter {f}: use COL=VALUE, COL!=VALUE, COL>N, COL<N or COL~REGEX")
        name, op, raw = m.groups()
        col = _column("--filter", f, name, df.columns)
        c = pl.col(col)
        dtype = df.schema[col]
        value: Any = raw
        if dtype.is_numeric() and op != "~":
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"--filter {f}: {col} is numeric, {raw!r} is not a number") from None
        if op in ("=", "=="):
            expr = c == value if raw not in ("", "null", "None") else c.is_null()
        elif op == "!=":
            expr = c != value if raw not in ("", "null", "None") else c.is_not_null()
        elif op == "~":
            try:  # polars' (Rust) regex syntax: checked on its own so the error names the pattern
                pl.Series([""], dtype=pl.Utf8).str.contains(raw)
            except pl.exceptions.PolarsError as e:
                raise ValueError(f"--filter {f}: bad regex: {_polars_reason(e)}") from None
            expr = c.cast(pl.Utf8).str.contains(raw)
        else:
            expr = {">": c > value, "<": c < value, ">=": c >= value, "<=": c <= value}[op]
        try:
            df = df.filter(expr)
        except pl.exceptions.PolarsError as e:
            raise ValueError(f"--filter {f}: {_polars_reason(e)}") from None
    return df


def apply_sort(df: pl.DataFrame, sort: str | None) -> pl.DataFrame:
    if not sort:
        return df
    keys = [k.strip() for k in sort.split(",") if k.strip()]
    desc = [k.startswith("-") for k in keys]
    names = [_column("--sort", sort, k.lstrip("-"), df.columns) for k in keys]
    return df.sort(names, descending=desc, nulls_last=True)


def select_columns(df: pl.DataFrame, columns: str | None, fmt: str, default: Sequence[str] = ()
                   ) -> tuple[pl.DataFrame, str | None]:
    """`--columns COL[,COL]` (any format), else `default` for the table format only (machine formats keep
    every column); returns the frame and, when the table leaves columns out, a line saying so."""
    if columns:
        names = [_column("--columns", columns, k.strip(), df.columns) for k in columns.split(",") if k.strip()]
        if not names:
            raise ValueError(f"--columns {columns!r}: name at least one column")
        return df.select(list(dict.fromkeys(names))), None
    shown = [c for c in default if c in df.columns]
    if fmt != "table" or not shown or len(shown) == len(df.columns):
        return df, None
    carried = ["tp_source"] if "tp" in shown and "tp_source" in df.columns else []  # render_table marks tp with it
    return df.select(shown + carried), (f"{len(shown)} of {len(df.columns)} columns: --columns COL,COL... to "
                                        "choose, --format csv / json for all")


def group_runs(df: pl.DataFrame, by: str) -> pl.DataFrame:
    keys = [_column("--group-by", by, k.strip(), df.columns) for k in by.split(",") if k.strip()]
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
    """An aligned text table, numbers right-aligned and as people read them (report.human.number). When
    the frame says where `tp` came from (`tp_source`), a guessed tp reads `8 (inferred from ranks)` and
    the source column is folded into it."""
    if "tp" in df.columns and "tp_source" in df.columns:
        inferred = (pl.col("tp_source") == "ranks") & pl.col("tp").is_not_null()
        df = df.with_columns(pl.when(inferred).then(pl.col("tp").cast(pl.Utf8) + " (inferred from ranks)")
                             .otherwise(pl.col("tp").cast(pl.Utf8)).alias("tp")).drop("tp_source")
    cols = df.columns
    right = [df.schema[c].is_numeric() for c in cols]
    rows = [["" if v is None else _cell(v, max_width, c) for c, v in zip(cols, r)] for r in df.iter_rows()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if rj else v.ljust(w) for v, w, rj in zip(cells, widths, right)).rstrip()
    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _cell(v: Any, limit: int, column: str = "") -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return number(v, column)
    s = display_text(str(v))  # one cell, one line, no terminal escapes
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
