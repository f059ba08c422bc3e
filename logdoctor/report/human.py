"""Output for people: the width text wraps to, numbers as people read them, and names looked up the way
people type them (any case, with a "did you mean" when there is no such name).

Width: the terminal's (`shutil.get_terminal_size`, which reads `COLUMNS` first), kept within
MIN_WIDTH..MAX_WIDTH so prose stays readable on a very wide terminal and usable on a narrow one. Output
that is not a terminal (a pipe, a file, CI) is PIPED_WIDTH wide unless `COLUMNS` says otherwise, so
the same log gives the same text wherever it is redirected.

Numbers: only the human formats (table, text) use these; json / csv / parquet keep the values as they are.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable

MIN_WIDTH, MAX_WIDTH, PIPED_WIDTH = 40, 120, 100


def text_width() -> int:
    """Columns to wrap prose to (see the module doc)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        width = int(columns)
    elif _is_terminal():
        import shutil  # only on a terminal: with bz2 and lzma it is ~2 ms of every piped run's start
        width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns
    else:
        width = PIPED_WIDTH
    return max(MIN_WIDTH, min(MAX_WIDTH, width))


def _is_terminal() -> bool:
    try:
        return bool(sys.stdout.isatty())
    except (AttributeError, ValueError):
        return False


def wrap(text: str, indent: str, width: int | None = None, first: str | None = None) -> list[str]:
    """`text` wrapped to `width` (default: text_width()), its lines indented by `indent` (the first by
    `first`, e.g. a list marker); never split at a hyphen or inside a word, so a flag like
    `--disable-custom-all-reduce` or a path stays whole and can be copied."""
    import textwrap
    lead = indent if first is None else first
    return textwrap.wrap(text, width=width or text_width(), initial_indent=lead, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False) or [lead]


def cut(text: str, width: int) -> str:
    """One line of at most `width` characters (an ellipsis marks the cut)."""
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def number(v: float, column: str = "") -> str:
    """A number as a person reads it: `1,068,480` not `1.06848e+06`, GiB with 2 decimals, a fraction with
    up to 4 significant digits; line numbers as they are."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v) if "line" in column or abs(v) < 1000 else f"{v:,}"
    if not math.isfinite(v):
        return "not a number" if math.isnan(v) else ("∞" if v > 0 else "−∞")
    if column.endswith("_gib"):
        return f"{v:,.2f}"
    if v.is_integer() and abs(v) < 1e15:
        return number(int(v), column)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 0.001:
        return f"{v:.2g}"
    return f"{v:.4g}"


def lookup(name: str, names: Iterable[str]) -> str | None:
    """The one of `names` that `name` is, ignoring case (None: no such name)."""
    folded = name.casefold()
    return next((n for n in names if n.casefold() == folded), None)


def did_you_mean(name: str, names: Iterable[str], limit: int = 3) -> str:
    """` (did you mean 'X' or 'Y'?)` for the names closest to `name`, or "" when none is close."""
    from rapidfuzz import fuzz, process, utils
    candidates = list(dict.fromkeys(names))
    hits = process.extract(name, candidates, scorer=fuzz.WRatio, processor=utils.default_process, limit=None,
                           score_cutoff=70)
    best = max((h[1] for h in hits), default=0)
    # only the names about as close as the closest, in name order (MEM001 before MEM005 for `mem00`)
    close = sorted(h[0] for h in hits if h[1] >= best - 5)[:limit]
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f" (did you mean {' or '.join(quoted) if len(quoted) < 3 else ', '.join(quoted[:-1]) + ' or ' + quoted[-1]}?)"


__all__ = ["MAX_WIDTH", "MIN_WIDTH", "PIPED_WIDTH", "cut", "did_you_mean", "lookup", "number", "text_width", "wrap"]
