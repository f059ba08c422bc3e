"""Rule conditions: `a and not (b or c)`, `1 of oom_*`, `all of x_*` over selection names."""
from __future__ import annotations

import fnmatch
import re
from typing import Union

from logdoctor import regexes
from logdoctor.records import dataclass

MAX_DEPTH = 50
_TOKEN = regexes.compile(r"\s*(\(|\)|[A-Za-z_][A-Za-z0-9_]*\*?|\d+|\S)")


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Quant:
    quant: str            # "1" (any) or "all"
    names: tuple[str, ...]


@dataclass(frozen=True)
class Not:
    arg: "Node"


@dataclass(frozen=True)
class BoolOp:
    op: str               # "and" | "or"
    args: tuple["Node", ...]


Node = Union[Name, Quant, Not, BoolOp]


def parse_condition(text: str, names: set[str]) -> Node:
    tokens = [t for t in _TOKEN.findall(text) if t]
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise ValueError("unexpected character")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("unexpected end of condition")
        pos += 1
        return tokens[pos - 1]

    def expr(depth: int = 0) -> Node:
        args = [term(depth)]
        while peek() == "or":
            take()
            args.append(term(depth))
        return args[0] if len(args) == 1 else BoolOp("or", tuple(args))

    def term(depth: int) -> Node:
        args = [factor(depth)]
        while peek() == "and":
            take()
            args.append(factor(depth))
        return args[0] if len(args) == 1 else BoolOp("and", tuple(args))

    def factor(depth: int) -> Node:
        if depth > MAX_DEPTH:  # `(((…)))` and `not not …` alike: parsing and evaluating both recurse
            raise ValueError("nested too deeply")
        t = take()
        if t == "not":
            return Not(factor(depth + 1))
        if t == "(":
            node = expr(depth + 1)
            if take() != ")":
                raise ValueError("missing ')'")
            return node
        if t in ("1", "any", "all") and peek() == "of":
            take()
            pattern = take()
            matched = tuple(sorted(n for n in names if fnmatch.fnmatchcase(n, pattern)))
            if not matched:
                raise ValueError(f"{pattern!r} matches no selection")
            return Quant("all" if t == "all" else "1", matched)
        if t in ("and", "or", ")", "of"):
            raise ValueError(f"unexpected {t!r}")
        if t not in names:
            raise ValueError(f"unknown selection {t!r}")
        return Name(t)

    node = expr()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r}")
    return node


def evaluate(node: Node, truth: dict[str, bool]) -> bool:
    if isinstance(node, Name):
        return truth[node.name]
    if isinstance(node, Quant):
        vals = [truth[n] for n in node.names]
        return all(vals) if node.quant == "all" else any(vals)
    if isinstance(node, Not):
        return not evaluate(node.arg, truth)
    if node.op == "and":
        return all(evaluate(a, truth) for a in node.args)
    return any(evaluate(a, truth) for a in node.args)


def positive_names(node: Node, negated: bool = False) -> set[str]:
    """Selections that count as evidence (those not under a `not`)."""
    if isinstance(node, Name):
        return set() if negated else {node.name}
    if isinstance(node, Quant):
        return set() if negated else set(node.names)
    if isinstance(node, Not):
        return positive_names(node.arg, not negated)
    out: set[str] = set()
    for a in node.args:
        out |= positive_names(a, negated)
    return out
