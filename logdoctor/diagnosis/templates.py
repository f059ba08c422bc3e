"""Rule templates: `{name}`, `{a.b:.2f}`, `{{`/`}}` and optional `[[ ... ]]` parts, checked and filled safely.

A template comes from a rule file, which may be someone else's. So a field can only name plain dict /
list lookups (no attribute access, no indexing syntax, no code), a format spec is a small, fully parsed
subset of Python's with width and precision at most `MAX_FORMAT_WIDTH` (`{line:999999999}` would build
a gigabyte string), and one filled field is at most `MAX_FIELD_CHARS` characters.
"""
from __future__ import annotations

import re
from typing import Any

from logdoctor import regexes

MAX_FORMAT_WIDTH = 100
MAX_FIELD_CHARS = 1_000

_FIELD = regexes.compile(r"\{([^{}]*)\}")
_NAME = regexes.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*")
# [[fill]align][sign][#][0][width][,|_][.precision][type]; the fill is any one character but a brace
_SPEC = regexes.compile(r"(?:([^{}])?([<>=^]))?([-+ ])?(#)?(0)?(\d+)?([,_])?(?:\.(\d+))?([bcdeEfFgGnosxX%])?")
_PLACEHOLDER = regexes.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.]*)(?::([^{}]*))?\}")


def template_problem(text: str) -> str | None:
    """Why a rule's template cannot be filled safely, or None when it can."""
    for m in _FIELD.finditer(text.replace("{{", "").replace("}}", "")):
        name, _, spec = m.group(1).partition(":")
        if not _NAME.fullmatch(name):
            return f"bad placeholder {{{_clip(m.group(1))}}}: use {{name}} or {{name:.2f}}"
        if ":" in m.group(1):
            problem = _spec_problem(spec)
            if problem:
                return f"bad format in {{{_clip(m.group(1))}}}: {problem}"
    return None


def _spec_problem(spec: str) -> str | None:
    s = _SPEC.fullmatch(spec)
    if s is None:
        return "use a spec like .2f, >8 or ,d"
    for what, digits in (("width", s.group(6)), ("precision", s.group(8))):
        # compare as text first: a 5000-digit width must not reach int()
        if digits is not None and (len(digits.lstrip("0")) > 3 or int(digits) > MAX_FORMAT_WIDTH):
            return f"{what} {_clip(digits, 12)} is over {MAX_FORMAT_WIDTH}"
    return None


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def lookup(values: dict[str, Any], path: str) -> Any:
    """`a.b.0` through dicts and lists only: a template can never reach an attribute."""
    cur: Any = values
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and part.isdigit() and len(part) < 10 and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def missing(v: Any) -> bool:
    """No value to show: None, an empty or blank string, "None", an empty list or mapping."""
    if v is None:
        return True
    if isinstance(v, str):
        return v.strip() in ("", "None", "?")
    return isinstance(v, (list, dict)) and not v


def render(template: str, values: dict[str, Any]) -> str:
    """Fill `{name}` / `{a.b:.2f}` from `values`, leaving out what has no value.

    `[[ ... ]]` marks an optional part: it is dropped when a placeholder inside it has no value. Outside
    such parts, a sentence (up to `. `, `! ` or `? `) with a placeholder that has no value is dropped
    whole, so a sentence about numbers the log does not contain disappears instead of reading "? GiB".
    """
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        v = lookup(values, m.group(1))
        return "" if missing(v) else _clip(format_value(v, m.group(2)), MAX_FIELD_CHARS)
    kept = [s for s in _sentences(_drop_empty_optionals(template, values)) if _all_present(s, values)]
    return " ".join(_PLACEHOLDER.sub(sub, " ".join(kept)).split())


def _all_present(text: str, values: dict[str, Any]) -> bool:
    return all(not missing(lookup(values, ph.group(1))) for ph in _PLACEHOLDER.finditer(text) if ph.group(1))


def _sentences(text: str) -> list[str]:
    """`text` cut after each `. ` / `! ` / `? ` that is outside a placeholder (a linear scan)."""
    out: list[str] = []
    start = depth = 0
    n = len(text)
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        elif ch in ".!?" and depth == 0 and i + 1 < n and text[i + 1].isspace():
            out.append(text[start:i + 1])
            start = i + 1
    out.append(text[start:])
    return out


def _drop_empty_optionals(template: str, values: dict[str, Any]) -> str:
    """`[[ ... ]]` parts kept (without brackets) or dropped; a linear scan, not a lazy regex."""
    out: list[str] = []
    pos = 0
    while True:
        start = template.find("[[", pos)
        end = template.find("]]", start + 2) if start >= 0 else -1
        if end < 0:
            out.append(template[pos:])
            return "".join(out)
        inner = template[start + 2:end]
        out.append(template[pos:start])
        if _all_present(inner, values):
            out.append(inner)
        pos = end + 2


def format_value(v: Any, spec: str | None) -> str:
    """One value as text; a spec the value does not take (or an unsafe one) falls back to plain text."""
    try:
        if spec and _spec_problem(spec) is None:
            try:
                return format(v, spec)
            except (ValueError, TypeError, OverflowError):
                pass  # `.2f` on a string, `d` on a float: the plain form below
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, list):
            return ", ".join(_clip(format_value(x, None), MAX_FIELD_CHARS) for x in v[:100])
        return str(v)
    except (ValueError, TypeError, OverflowError):
        return "?"  # e.g. an int of more than 4300 digits has no decimal form
