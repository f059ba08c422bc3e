"""Template holes: what a rendered title, explanation or remedy must never contain.

A value the log does not have shows as a hole (`?`, `None`, "on rank a rank", empty quotes, a sentence
that ends on a preposition). templates.render leaves such sentences out; this is the check, used by the
tests on every rule and fixture and by `logdoctor rules test`.
"""
from __future__ import annotations

import re

from logdoctor import regexes

_HOLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a lone '?'", regexes.compile(r"(?:^|[\s=+(:/\[,])\?(?=$|[\s),.;:\]])")),
    ("None/null/nan", regexes.compile(r"\b(?:None|null|nan|NaN)\b")),
    ("'a rank'", regexes.compile(r"\b(?:rank|on|of|from|by|for|at) a rank\b(?! (?:that|which|whose|other|more))")),
    ("dangling punctuation", regexes.compile(r"(?:\s[.,;:](?:\s|$)|[,:;]\s*[.)]|\(\s*[,.;:]|\s\)|[,;:]$)")),
    ("sentence ending on a connective", regexes.compile(
        r"\b(?:of|to|with|from|than|by|the|an|is|are|was|and|or)\.(?=\s|$)")),
)
_EMPTY_QUOTES = regexes.compile(r"(?:\"\"|\u201c\u201d|``|(?<![\w'])''(?![\w']))")
# what the log or a command says is quoted: its own `None`, `()` or `''` are not holes of the template
_QUOTED = regexes.compile(r"\"[^\"\n]{1,2000}\"|\u201c[^\u201d\n]{1,2000}\u201d|`[^`\n]{1,2000}`")


def holes(text: str) -> list[str]:
    """The kinds of hole in `text` (empty list: none); an empty text is a hole too."""
    if not text.strip():
        return ["empty text"]
    prose = _QUOTED.sub("\"q\"", text)
    found = ["empty quotes"] if _EMPTY_QUOTES.search(prose) else []
    if re.search(r"(?<![\w.\]])(?:\(\s*\)|\[\s*\])", prose):
        found.append("empty brackets")
    return found + [name for name, rx in _HOLES if rx.search(prose)]


__all__ = ["holes"]
