"""Literals every match of a regex must contain, for a cheap `in` test before the regex engine runs.

Rules match thousands of chatty lines (NCCL INFO, unrecognised text) against dozens of patterns; a
substring test in C rejects almost all of them. Conservative by construction: when a pattern's
structure is not simple enough to be sure, there is no prefilter and the regex decides alone.
"""
from __future__ import annotations

from logdoctor.regexes import split_top

_META = set(".^$*+?{}[]()|\\")


def required_literals(pattern: str) -> tuple[bool, tuple[str, ...]] | None:
    """(case-insensitive, literals) such that any match contains one of the literals, or None.

    A cheap `in` test on these rejects most lines before the regex engine is called. Conservative:
    only top-level alternations whose every branch has a plain literal run of 4+ characters qualify.
    """
    ci = False
    if pattern.startswith("(?i)"):
        ci, pattern = True, pattern[4:]
    pattern = _strip_outer_group(pattern)
    if pattern.startswith("(?") or "(?i" in pattern:
        return None
    lits = []
    for b in split_top(pattern):
        best = _longest_literal(b)
        if len(best) < 4:
            return None
        lits.append(best.lower() if ci else best)
    return ci, tuple(lits)


def _strip_outer_group(p: str) -> str:
    """`(a|b)` or `(?:a|b)` enclosing the whole pattern → `a|b`."""
    while p.startswith("(") and p.endswith(")") and not p.endswith("\\)"):
        inner_start = 3 if p.startswith("(?:") else (1 if not p.startswith("(?") else -1)
        if inner_start < 0:
            return p
        depth, i = 0, 0
        while i < len(p):
            c = p[i]
            if c == "\\":
                i += 2
                continue
            if c == "[":
                i = _after_class(p, i)
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0 and i != len(p) - 1:
                    return p  # the first group closes before the end: not one enclosing group
            i += 1
        p = p[inner_start:-1]
    return p


def _longest_literal(branch: str) -> str:
    """The longest run of characters every match of this (group-free part of the) branch contains."""
    best, run, depth, i = "", "", 0, 0
    while i < len(branch):
        c = branch[i]
        nxt = branch[i + 1] if i + 1 < len(branch) else ""
        if c == "\\" and nxt and not nxt.isalnum():
            ch, step = nxt, 2
        elif c in _META or c == "\\":
            if c in "*?{" and run:
                run = run[:-1]  # the char before an optional quantifier is not required
            if depth == 0 and len(run) > len(best):
                best = run
            run = ""
            if c == "(":
                depth += 1
            elif c == ")":
                depth = max(0, depth - 1)
            elif c == "[":
                i = _after_class(branch, i)
                continue
            elif c == "{":  # a repeat count `{m,n}`: its digits are not text the match contains
                j = branch.find("}", i)
                i = j + 1 if j > 0 else len(branch)
                continue
            elif c == "\\":
                i += 2
                continue
            i += 1
            continue
        else:
            ch, step = c, 1
        if depth == 0:
            nq = branch[i + step] if i + step < len(branch) else ""
            if nq in ("*", "?", "{"):
                if len(run) > len(best):
                    best = run
                run = ""
                i += step
                continue
            run += ch
        i += step
    if depth == 0 and len(run) > len(best):
        best = run
    return best




def _after_class(p: str, i: int) -> int:
    """Index just past the character class `[...]` that starts at i (a `]` right after `[` is literal)."""
    j = p.find("]", i + 2)
    return (j + 1) if j > 0 else len(p)
