"""`server_args=ServerArgs(model_path='…', tp_size=8, …)` to a typed dict.

A small scanner rather than `ast.literal_eval`: pasted ServerArgs lines are often cut mid-way, and
nested values (`LoRARef(...)`, dicts, enum reprs like `<Foo.BAR: 1>`) must not lose the fields around
them. Fields before the cut are kept; an unterminated last value is dropped.
"""
from __future__ import annotations

import ast
import math
import warnings
from typing import Any

_CLOSERS = {"(": ")", "[": "]", "{": "}", "<": ">"}


MAX_VALUE_CHARS = 16384      # a value longer than this stays text (literal_eval is not for megabytes)
MAX_NESTING = 8              # lists / dicts nested deeper stay text
NUMBER_LIMIT = 10**18        # as values.NUMBER_LIMIT: beyond it a number is not a setting


def _plain(value: Any, depth: int = 0) -> bool:
    """True when value is JSON-safe data a setting can be: bounded numbers (no inf/nan, no complex),
    strings, bools, None, and lists / tuples / str-keyed dicts of those. Sets, bytes, complex, 1e999 and
    5000-digit ints are not, and stay as the text the log printed."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return -NUMBER_LIMIT < value < NUMBER_LIMIT
    if isinstance(value, float):
        return math.isfinite(value) and -NUMBER_LIMIT < value < NUMBER_LIMIT
    if depth >= MAX_NESTING:
        return False
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _convert(raw: str) -> Any:
    raw = raw.strip()
    if raw in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[raw]
    if raw[:1] in "'\"[({-0123456789" and len(raw) <= MAX_VALUE_CHARS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. SyntaxWarning on `1abc`: the value stays text
                value = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError, OverflowError):
            return raw
        return value if _plain(value) else raw
    return raw


def parse_server_args(text: str) -> dict[str, Any]:
    """`text` is what follows `server_args=ServerArgs(`; returns the fields that survived intact."""
    out: dict[str, Any] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip()
        if not key.isidentifier():
            break
        j = eq + 1
        depth: list[str] = []
        quote: str | None = None
        while j < n:
            c = text[j]
            if quote:
                if c == "\\":
                    j += 2
                    continue
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c in _CLOSERS:
                depth.append(_CLOSERS[c])
            elif depth and c == depth[-1]:
                depth.pop()
            elif not depth and c in ",)":
                break
            j += 1
        if j >= n:
            break  # no `,` or `)` after it: the line was cut in this value (0.8 cut to 0. would lie)
        out[key] = _convert(text[eq + 1:j])
        if j < n and text[j] == ")":
            break
        i = j + 1
    return out
