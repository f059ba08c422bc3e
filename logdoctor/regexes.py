"""Regular expressions compiled once per Python feature release, not once per run.

Python compiles a regex in Python code (re._parser, re._compiler). logdoctor's ~240 patterns — every
module's own, the grammar's lexer, the line prefilter — cost each run 25-30 ms, more than anything else a
short log needs. `tools/build_regexes.py` records what that compiler hands the regex engine for each of
them (`_sre.compile`'s arguments: the program, a list of ints, and the group names) and writes it as data,
`logdoctor/regex_programs.py`, which names the engine it was built for. `compile()` gives a pattern from
its recorded program when the running engine is that one (the same CPython feature release: its
`_sre.MAGIC`, code size and limits), and from `re.compile` for any other engine or any pattern not
recorded. Either way it is the same `re.Pattern`. The engine checks every program it is given (`_sre`
validates the code before use), and the recorded programs ship inside the package, as its code does.
"""
from __future__ import annotations

import re
import sys
from typing import Any, AnyStr

__all__ = ["LEXER_RE", "compile", "engine_identity", "split_top"]

_programs: dict[tuple[Any, int], tuple[Any, ...]] | None = None   # loaded at the first compile()
_made: dict[tuple[Any, int], re.Pattern[Any]] = {}
# set by tools/build_regexes.py: every pattern compile() is asked for, with what the engine was handed
recording: dict[tuple[Any, int], tuple[Any, ...]] | None = None


def engine_identity() -> str:
    """What a recorded program is valid for: the interpreter release and its regex engine's format."""
    import _sre
    return f"{sys.implementation.cache_tag}-{_sre.MAGIC}-{_sre.CODESIZE}-{_sre.MAXREPEAT}-{_sre.MAXGROUPS}"


def _load() -> dict[tuple[Any, int], tuple[Any, ...]]:
    global _programs
    if _programs is None:
        try:
            from logdoctor import regex_programs
            _programs = regex_programs.PROGRAMS if regex_programs.ENGINE == engine_identity() else {}
        except Exception:  # missing or of another shape: compiled as usual
            _programs = {}
    return _programs


def compile(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:  # noqa: A001 - re's name
    """`re.compile(pattern, flags)`, from the recorded program when there is one for this engine."""
    key = (pattern, int(flags))
    if recording is not None:
        return _record(key)
    made = _made.get(key)  # lark's lexer asks for the same patterns again and again, as re's own cache serves
    if made is not None:
        return made
    program = _load().get(key)
    if program is not None:
        import _sre
        final_flags, code, groups, groupindex, indexgroup = program
        try:
            compiled: re.Pattern[AnyStr] = _sre.compile(pattern, final_flags, list(code), groups, dict(groupindex),
                                                          indexgroup)
            _made[key] = compiled  # bounded: one per recorded program
            return compiled
        except Exception:  # a program the engine refuses: compile it as usual
            pass
    return re.compile(pattern, flags)


def _record(key: tuple[Any, int]) -> re.Pattern[Any]:
    """Compile through the stdlib compiler and keep the arguments it hands the engine (3.11+)."""
    from re import _compiler  # type: ignore[attr-defined]
    assert recording is not None
    engine = _compiler._sre
    handed: list[tuple[Any, ...]] = []

    class Capture:
        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def compile(self, *args: Any) -> Any:
            handed.append(args)
            return engine.compile(*args)

    _compiler._sre = Capture()
    try:
        compiled: re.Pattern[Any] = _compiler.compile(key[0], key[1])
    finally:
        _compiler._sre = engine
    _, final_flags, code, groups, groupindex, indexgroup = handed[-1]
    recording[key] = (int(final_flags), tuple(int(c) for c in code), int(groups),
                      tuple(sorted(dict(groupindex).items())), tuple(indexgroup))
    return compiled


class _LexerRe:
    """What lark's lexer takes for its `re` module: compile and match through `compile` above."""

    error = re.error

    @staticmethod
    def compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
        return compile(pattern, flags)

    @staticmethod
    def match(pattern: str, string: str, flags: int = 0) -> re.Match[str] | None:
        return compile(pattern, flags).match(string)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


LEXER_RE = _LexerRe()


def split_top(p: str) -> list[str]:
    """The top-level alternatives of a pattern (a `|` inside a group or a class does not split; an escaped
    character, `]` in a class included, is skipped). The grammar's prefilter reads its anchors with it."""
    parts, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if p[i + 1:i + 2] == "]":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(p[start:i])
            start = i + 1
        i += 1
    parts.append(p[start:])
    return parts
