"""`server_args=ServerArgs(model_path='…', tp_size=8, …)` to a typed dict.

A small scanner rather than `ast.literal_eval`: pasted ServerArgs lines are often cut mid-way, and
nested values (`LoRARef(...)`, dicts, enum reprs like `<Foo.BAR: 1>`) must not lose the fields around
them. Fields before the cut are kept; an unterminated last value is dropped.
"""
from __future__ import annotations

import ast
import warnings
from typing import Any

_CLOSERS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def _convert(raw: str) -> Any:
    raw = raw.strip()
    if raw in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[raw]
    if raw[:1] in "'\"[({-0123456789":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. SyntaxWarning on `1abc`: the value stays text
                return ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
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
