"""Literals every match of a regex must contain, for a cheap `in` test before the regex engine runs.

Rules match thousands of chatty lines (NCCL INFO, unrecognised text) against dozens of patterns; a
substring test in C rejects almost all of them, and a rule whose literals no event holds never compiles its
regex at all. Conservative by construction: when a pattern's structure is not simple enough to be sure (an
escape or a construct not read here), there is no prefilter and the regex decides alone.

What is read: literal characters and escaped punctuation; groups (`(...)`, `(?:...)`, `(?P<n>...)`) whose
every alternative holds a literal, when the group cannot be skipped; quantifiers (`*`, `+`, `?`, `{m,n}`);
classes, `.`, anchors and the `\\d \\w \\s \\b`-style escapes as text that holds no literal. An `i` flag
anywhere (`(?i)`, `(?i:...)`) makes the whole result case-insensitive: the literals and the text are then
compared through `fold_case`, which keeps every case-insensitive match of an ASCII literal (RE2 folds only
`ſ` and the Kelvin sign onto ASCII letters, and lower() already maps the Kelvin sign to `k`).
"""
from __future__ import annotations

from typing import Union

MIN_LITERAL = 3          # shorter literals reject too little to be worth a test
MAX_DEPTH = 50           # groups nested deeper (RE2 takes up to 1,000): no prefilter, and no deep recursion
_PLAIN_ESCAPES = frozenset("dDwWsSbBAzZ")  # a class or a zero-width test: no text the match must hold
_QUANTIFIED = frozenset("*+?{")

# an item of a parsed branch: a literal character, a group (its alternatives), or anything else
Item = Union[str, "Alternatives", None]


class _Unread(Exception):
    """A construct this reader does not know: the pattern gets no prefilter."""


class Alternatives:
    """A group's (or the pattern's) branches, each a list of (item, required, repeated) triples: `required`,
    the item occurs at least once in every match of the branch; `repeated`, it had a quantifier."""

    def __init__(self, branches: list[list[tuple[Item, bool, bool]]]) -> None:
        self.branches = branches


def fold_case(text: str) -> str:
    """The text as case-insensitive literals are compared with it (see the module's docstring)."""
    low = text.lower()
    return low if low.isascii() else low.replace("\u017f", "s")


def required_literals(pattern: str) -> tuple[bool, tuple[str, ...]] | None:
    """(case-insensitive, literals) such that any match contains one of the literals, or None.

    With case-insensitive True the literals are folded (fold_case) and only a folded text holds them."""
    reader = _Reader(pattern)
    try:
        top = reader.alternatives()
        if reader.i != len(pattern):  # an unbalanced `)`
            raise _Unread()
    except _Unread:
        return None
    lits = _of_alternatives(top)
    if lits is None:
        return None
    if reader.ci:
        if not all(lit.isascii() for lit in lits):
            return None
        lits = tuple(dict.fromkeys(lit.lower() for lit in lits))
    return reader.ci, lits


def _of_alternatives(alts: Alternatives) -> tuple[str, ...] | None:
    """Literals one of which every match of some branch holds: each branch's best, together."""
    out: list[str] = []
    for branch in alts.branches:
        best = _of_branch(branch)
        if best is None:
            return None
        out.extend(lit for lit in best if lit not in out)
    return tuple(out)


def _of_branch(branch: list[tuple[Item, bool, bool]]) -> tuple[str, ...] | None:
    """The most selective literal set every match of the branch holds: a run of required literal characters,
    or a required group's literals (the candidate whose shortest literal is longest)."""
    candidates: list[tuple[str, ...]] = []
    run: list[str] = []
    for item, required, repeated in branch:
        if isinstance(item, str) and required:
            if not repeated:
                run.append(item)
                continue
            # `ab+c`: every match holds "ab" and "bc", not "abc"; the repeated character ends one run and
            # starts the next
            candidates.append(("".join(run) + item,))
            run = [item]
            continue
        if run:
            candidates.append(("".join(run),))
            run = []
        if isinstance(item, Alternatives) and required:
            inner = _of_alternatives(item)
            if inner is not None:
                candidates.append(inner)
    if run:
        candidates.append(("".join(run),))
    candidates = [c for c in candidates if c and min(map(len, c)) >= MIN_LITERAL]
    if not candidates:
        return None
    return max(candidates, key=lambda c: (min(map(len, c)), -len(c)))


class _Reader:
    """Reads a pattern (RE2 / Python syntax) into Alternatives; _Unread on anything it does not know."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.ci = False
        self.depth = 0

    def alternatives(self) -> Alternatives:
        branches: list[list[tuple[Item, bool, bool]]] = [[]]
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == ")":
                break
            if c == "|":
                self.i += 1
                branches.append([])
                continue
            item = self.atom()
            if isinstance(item, _FlagsOnly):
                continue
            at = self.i
            required = self.quantifier()
            branches[-1].append((item, required, self.i != at))
        return Alternatives(branches)

    def atom(self) -> Item | _FlagsOnly:
        p, i = self.p, self.i
        c = p[i]
        if c == "\\":
            if i + 1 >= len(p):
                raise _Unread()
            nxt = p[i + 1]
            self.i = i + 2
            if not nxt.isalnum():
                return nxt
            if nxt in _PLAIN_ESCAPES:
                return None
            raise _Unread()  # \x41, \pL, \Q...\E, \1, \n ...: not read here
        if c == "[":
            self.i = _after_class(p, i)
            return None
        if c in ".^$":
            self.i = i + 1
            return None
        if c == "(":
            return self.group()
        if c in _QUANTIFIED:  # a quantifier with nothing before it
            raise _Unread()
        self.i = i + 1
        return c

    def group(self) -> Item | _FlagsOnly:
        p = self.p
        i = self.i + 1
        if p.startswith("?", i):
            if p.startswith("?:", i):
                i += 2
            elif p.startswith("?P<", i) or (p.startswith("?<", i) and p[i + 2:i + 3] not in ("=", "!")):
                close = p.find(">", i)
                if close < 0:
                    raise _Unread()
                i = close + 1
            else:
                j = i + 1
                while j < len(p) and (p[j].isalpha() or p[j] == "-"):
                    j += 1
                flags = p[i + 1:j]
                if not flags or j >= len(p) or p[j] not in ":)":
                    raise _Unread()  # a lookaround, a comment, a conditional
                if "i" in flags:
                    self.ci = True
                if p[j] == ")":  # `(?i)`: flags for what follows, no group
                    self.i = j + 1
                    return _FLAGS_ONLY
                i = j + 1
        self.i = i
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unread()
        inner = self.alternatives()
        self.depth -= 1
        if self.i >= len(p) or p[self.i] != ")":
            raise _Unread()
        self.i += 1
        return inner

    def quantifier(self) -> bool:
        """Skips the quantifier after an atom, if any; whether the atom must occur at least once."""
        p, i = self.p, self.i
        if i >= len(p) or p[i] not in _QUANTIFIED:
            return True
        c = p[i]
        if c == "{":
            close = p.find("}", i)
            body = p[i + 1:close] if close > 0 else ""
            low, _, high = body.partition(",")
            if not low.isdigit() or not (high == "" or high.isdigit()):
                raise _Unread()  # `{` as a literal, or a count not read here
            self.i = close + 1
            required = int(low) >= 1
        else:
            self.i = i + 1
            required = c == "+"
        if self.i < len(p) and p[self.i] in "?+":  # lazy / possessive
            self.i += 1
        if self.i < len(p) and p[self.i] in _QUANTIFIED:
            raise _Unread()  # a quantified quantifier
        return required


class _FlagsOnly:
    """What `(?i)` alone is: flags for what follows, no item."""


_FLAGS_ONLY = _FlagsOnly()


def _after_class(p: str, i: int) -> int:
    """Index just past the character class `[...]` that starts at i (a `]` first in the class is literal,
    `\\]` is escaped, `[:alpha:]` is a named class inside it)."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[" and p.startswith("[:", j):
            close = p.find(":]", j + 2)
            if close < 0:
                raise _Unread()
            j = close + 2
            continue
        if c == "]":
            return j + 1
        j += 1
    raise _Unread()
