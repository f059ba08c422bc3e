"""What a rule costs per event, counted at load time: the limits no rule file may exceed.

Every selection scans its candidate events and runs each of its matchers once per event, so the work a
rule adds per character of event text is the sum of what its matchers cost:
- a regex costs its RE2 program size (instructions). RE2 is linear in the text, but when its DFA meets
  more states than its cache holds (wide counted repetitions such as `a.{0,300}` on text full of `a`)
  every character costs a step per live instruction: ~4 ns per instruction per character measured.
  400 patterns of 9,000 instructions made a 430-line log take 86-160 s;
- a fuzzy text costs its length squared / 256 (rapidfuzz's partial ratio is quadratic past 64
  characters: 1.3 ms per 500-character needle against a 4,000-character event text);
- a value test (eq, ranges, contains, one item of `in`) costs 1; a selection costs 4 to visit an event.
The limits come from the shipped rules: one regex may have `MAX_REGEX_PROGRAM` instructions (largest
built-in: 2,437), a rule may cost `MAX_RULE_COST` (costliest built-in: 3,485) and hold
`MAX_RULE_REGEXES` regexes, all user rules together `MAX_USER_RULES_COST` and `MAX_USER_REGEXES`.
Each RE2 object keeps a DFA cache sized by `regex_memory`, so the regex count bounds memory too.
The built-in rules are not counted: they are shipped, not supplied. What load-time counting cannot
exclude (a DFA-hostile pattern under the limits, on a log crafted against it) is cut off by the
matching time budget for user rules in engine.py.
"""
from __future__ import annotations

from typing import Any

from logdoctor.records import dataclass

MAX_REGEX_PROGRAM = 3_000       # RE2 instructions; the largest built-in pattern has 2,437
MAX_RULE_COST = 5_000           # the costliest built-in rule: 3,485
MAX_RULE_REGEXES = 32           # the most in one built-in rule: 10
MAX_USER_RULES_COST = 100_000   # ~3x the whole built-in set (31,495): a copied and edited rule tree fits
MAX_USER_REGEXES = 400          # the built-in rules have 163
MAX_MATCHER_DEPTH = 3           # `in: [{ne: {regex: ...}}]`; deeper nesting means nothing more
# RE2's memory budget for one pattern (program + DFA cache), by program size: at ~2 KiB per instruction
# the DFA keeps its states (at 450 B a 4,600-instruction pattern thrashed and ran 8x slower), and the
# memory of all user patterns stays under MAX_USER_RULES_COST x 2 KiB + MAX_USER_REGEXES x 1 MiB.
REGEX_MEM_PER_INSTRUCTION = 2 << 10
REGEX_MIN_MEM, REGEX_MAX_MEM = 1 << 20, 8 << 20
SELECTION_VISIT_COST = 4


def regex_memory(program_size: int) -> int:
    """The RE2 `max_mem` for a pattern of this many instructions."""
    return max(REGEX_MIN_MEM, min(REGEX_MAX_MEM, program_size * REGEX_MEM_PER_INSTRUCTION))


@dataclass
class Cost:
    units: int = 0
    regexes: int = 0

    def add(self, other: Cost) -> None:
        self.units += other.units
        self.regexes += other.regexes


def matcher_cost(m: Any) -> Cost:
    """Cost of one compiled matcher (see rules._compile_matcher: `_rx` holds the RE2 object)."""
    if not isinstance(m, dict):
        return Cost(1)
    cost = Cost()
    for op, arg in m.items():
        if op == "regex":
            rx = m.get("_rx")
            size = max(rx.programsize, rx.reverseprogramsize) if rx is not None else len(arg)
            cost.add(Cost(size, 1))
        elif op in ("eq", "ne"):
            cost.add(matcher_cost(arg))
        elif op == "in":
            for item in arg:
                cost.add(matcher_cost(item))
        elif not op.startswith("_"):
            cost.add(Cost(1))
    return cost


def fuzzy_cost(fuzzy: dict[str, Any] | None) -> Cost:
    if not fuzzy:
        return Cost()
    texts = fuzzy.get("text") or []
    texts = [texts] if isinstance(texts, str) else texts
    return Cost(sum(max(8, len(t) * len(t) // 256) for t in texts))


def selection_cost(sel: Any) -> Cost:
    """Per-event cost of a compiled rules.Selection (its `run` checks run once per log: cost 1 each)."""
    cost = Cost(SELECTION_VISIT_COST)
    for m in sel.where.values():
        cost.add(matcher_cost(m))
    for alt in sel.any_of:
        for m in alt.values():
            cost.add(matcher_cost(m))
    cost.add(fuzzy_cost(sel.fuzzy))
    for m in (sel.run or {}).values():
        c = matcher_cost(m)
        cost.add(Cost(1, c.regexes))
    return cost


def rule_cost_problem(selections: dict[str, Any]) -> tuple[Cost, str | None, str | None]:
    """(total cost, why it is too costly or None, the selection to blame)."""
    total = Cost()
    worst, worst_cost = None, Cost(-1)
    for name, sel in selections.items():
        c = selection_cost(sel)
        total.add(c)
        if c.units > worst_cost.units:
            worst, worst_cost = name, c
    if total.regexes > MAX_RULE_REGEXES:
        return total, f"{total.regexes} regexes in one rule; the limit is {MAX_RULE_REGEXES}", worst
    if total.units > MAX_RULE_COST:
        return total, (f"matching costs {total.units} units per event, over the limit of {MAX_RULE_COST} "
                       f"(selection {worst!r} costs {worst_cost.units}: make regexes simpler, bound "
                       "wide repetitions, or use fewer alternatives)"), worst
    return total, None, None


def user_rules_problem(total_units: int, total_regexes: int) -> str | None:
    if total_regexes > MAX_USER_REGEXES:
        return f"the user rules hold {total_regexes} regexes together; the limit is {MAX_USER_REGEXES}"
    if total_units > MAX_USER_RULES_COST:
        return (f"the user rules cost {total_units} units per event together, over the limit of "
                f"{MAX_USER_RULES_COST}")
    return None
