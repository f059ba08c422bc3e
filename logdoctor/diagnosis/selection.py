"""Which rules run: `--select` / `--extend-select` / `--ignore`, resolved against a loaded rule set as ruff does.

A selector is `ALL`, a category (`memory_pressure`, also `memory-pressure`), a rule name
(`kv-pool-does-not-fit`), or an id prefix (`MEM`, `MEM1`, `MEM001`); ids and prefixes are case-insensitive.
The broad net (diagnosis/net.py) takes part as the ids `NET001`..`NET008`, one per category, so
`--ignore NET` mutes it and `--select memory_pressure` keeps only its memory placements.

Resolution, per rule: of the selectors that match it, the most specific decides, and at equal specificity
`--ignore` wins. Specificity: `ALL` < a category < an id prefix, the longer the more specific < a full id
= the rule's name. `--select` replaces the default (`ALL`), `--extend-select` adds to it. So `--ignore MEM
--select MEM101` keeps MEM101 (the full id outranks the prefix), and `--select MEM --ignore MEM1` drops
MEM101..MEM199. A muted rule does not fire: the log is diagnosed by the rules left (and the net, if
selected), so the verdict and the root cause may change.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from logdoctor.diagnosis.net import NET_RULE_IDS
from logdoctor.diagnosis.net_data import NetData
from logdoctor.diagnosis.rules import CATEGORY_PREFIX, Rule, RuleSet
from logdoctor.records import dataclass

ALL = "ALL"
NET_PREFIX = "NET"
MAX_SELECTORS = 1_000        # selectors of one kind: a config file is input too
MAX_SELECTOR_CHARS = 100
_WIDEST, _CATEGORY = 0, 1    # specificities below any prefix's (1 + its length)


class SelectionError(ValueError):
    """A selector that names nothing (the message carries a did-you-mean); `option`: select, extend_select
    or ignore."""

    def __init__(self, message: str, option: str = "select") -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Selectors:
    """What the user chose; `select` None means the default (every rule and the net)."""
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @property
    def is_default(self) -> bool:
        return (self.select is None or [s.upper() for s in self.select] == [ALL]) \
            and not self.extend_select and not self.ignore


@dataclass(frozen=True)
class Selectable:
    """A rule, or the net's placements in one category, as selectors see it."""
    id: str
    name: str
    category: str


@dataclass(frozen=True)
class Selector:
    text: str        # as given (for messages)
    kind: str        # all | category | id (an exact id, or a name turned into its id) | prefix
    value: str       # upper-case id or prefix, or the category

    def specificity(self, item: Selectable) -> int:
        """-1 when it does not match `item`, otherwise how specific the match is."""
        if self.kind == "all":
            return _WIDEST
        if self.kind == "category":
            return _CATEGORY if item.category == self.value else -1
        if self.kind == "id":
            return 1 + len(item.id) if item.id == self.value else -1
        return 1 + len(self.value) if item.id.startswith(self.value) else -1


def split(values: Iterable[str] | str, option: str = "select") -> tuple[str, ...]:
    """Comma-separated and repeated values as one tuple of selectors ("" selects nothing)."""
    if isinstance(values, str):
        values = [values]
    out = tuple(part.strip() for v in values for part in str(v).split(",") if part.strip())
    if len(out) > MAX_SELECTORS:
        raise SelectionError(f"{len(out)} selectors, the limit is {MAX_SELECTORS}", option)
    return out


def selectors_of(values: dict[str, Any]) -> Selectors:
    """Selectors from option values (click's tuples of repeated, comma-separated strings, or lists from a
    config file). An absent or empty `select` is the default; `--select ""` selects nothing."""
    select = values.get("select")
    return Selectors(select=split(select, "select") if select else None,
                     extend_select=split(values.get("extend_select") or (), "extend_select"),
                     ignore=split(values.get("ignore") or (), "ignore"))


def selectables(rules: Iterable[Rule]) -> list[Selectable]:
    """The rules and the net's per-category placements."""
    items = [Selectable(r.id, r.name, r.category) for r in rules]
    items += [Selectable(nid, f"net-{cat.replace('_', '-')}", cat) for cat, nid in NET_RULE_IDS.items()]
    return items


def parse_selector(text: str, items: list[Selectable]) -> Selector:
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectionError(f"selector {text[:40]!r}… is longer than {MAX_SELECTOR_CHARS} characters")
    upper, lower = text.upper(), text.lower()
    if upper == ALL:
        return Selector(text, "all", ALL)
    category = lower.replace("-", "_")
    if category in CATEGORY_PREFIX:
        return Selector(text, "category", category)
    by_name = next((i for i in items if i.name == lower or i.name == lower.replace("_", "-")), None)
    if by_name is not None:
        return Selector(text, "id", by_name.id)
    if any(i.id == upper for i in items):
        return Selector(text, "id", upper)
    codes = [*CATEGORY_PREFIX.values(), NET_PREFIX]
    if any(i.id.startswith(upper) for i in items) or any(c.startswith(upper) for c in codes):
        return Selector(text, "prefix", upper)
    raise SelectionError(f"unknown rule selector {text!r}" + _did_you_mean(text, items))


def _did_you_mean(text: str, items: list[Selectable]) -> str:
    from rapidfuzz import fuzz, process
    candidates = sorted({ALL, *CATEGORY_PREFIX, *CATEGORY_PREFIX.values(), NET_PREFIX,
                         *(i.id for i in items), *(i.name for i in items)})
    lower = text.lower().replace("_", "-")
    # the start of a category or a name (`memory`, `kv-pool`) is likelier meant than a short code near it
    begun = [c for c in candidates if len(lower) > 3 and c.lower().replace("_", "-").startswith(lower)]
    begun = [c for c in begun if c in CATEGORY_PREFIX] or begun
    if len(begun) == 1:
        return f" (did you mean {begun[0]!r}?)"
    # ids are upper-case, names and categories lower-case: compare without case
    hit = process.extractOne(text.lower(), candidates, scorer=fuzz.ratio, processor=str.lower, score_cutoff=60)
    return f" (did you mean {hit[0]!r}?)" if hit else " (see 'logdoctor rules list')"


def active_ids(items: list[Selectable], chosen: Selectors) -> set[str]:
    """The ids the selectors leave running; SelectionError on a selector that names nothing."""
    def parsed(texts: tuple[str, ...], option: str) -> list[Selector]:
        try:
            return [parse_selector(s, items) for s in texts]
        except SelectionError as e:
            raise SelectionError(str(e), option) from None

    select = parsed(chosen.select if chosen.select is not None else (ALL,), "select")
    select += parsed(chosen.extend_select, "extend_select")
    ignore = parsed(chosen.ignore, "ignore")
    keep: set[str] = set()
    for item in items:
        chose = max((s.specificity(item) for s in select), default=-1)
        muted = max((s.specificity(item) for s in ignore), default=-1)
        if chose >= 0 and chose > muted:  # equally specific: the ignore wins
            keep.add(item.id)
    return keep


def select_rules(rules: list[Rule], chosen: Selectors) -> RuleSet:
    """The rule set with only the selected rules, and the net narrowed to the selected categories.

    The default selection returns `rules` itself: output is what it was without selectors."""
    if chosen.is_default and isinstance(rules, RuleSet):
        return rules
    net = getattr(rules, "net", None)
    if net is None:
        from logdoctor.diagnosis.net_data import load_net
        net = load_net()
    items = selectables(rules)
    keep = active_ids(items, chosen)
    categories = frozenset(cat for cat, nid in NET_RULE_IDS.items() if nid in keep)
    return RuleSet([r for r in rules if r.id in keep], net=narrow_net(net, categories))


@dataclass
class SelectedNet(NetData):
    """A net that may place failures only in `categories` (what the selection left of NET001..NET008)."""
    categories: frozenset[str] = frozenset(CATEGORY_PREFIX)


def narrow_net(net: NetData, categories: frozenset[str]) -> NetData:
    if categories >= frozenset(CATEGORY_PREFIX) and not isinstance(net, SelectedNet):
        return net
    fields = {f: getattr(net, f) for f in NetData.__dataclass_fields__}
    fields.update(terms=[t for t in net.terms if t.category in categories],
                  subsystems=[s for s in net.subsystems if s.category in categories],
                  stalls={stage: info for stage, info in net.stalls.items() if info.get("category") in categories})
    return SelectedNet(**fields, categories=categories)


def summary(rules: list[Rule]) -> dict[str, Any]:
    """What a selected rule set runs: the rule ids and the net's ids (for `logdoctor config`)."""
    net = getattr(rules, "net", None)
    categories = getattr(net, "categories", frozenset(CATEGORY_PREFIX))
    return {"rules": sorted(r.id for r in rules),
            "net": sorted(nid for cat, nid in NET_RULE_IDS.items() if cat in categories)}


__all__ = ["ALL", "SelectedNet", "SelectionError", "Selectors", "active_ids", "narrow_net", "parse_selector",
           "select_rules", "selectables", "selectors_of", "split", "summary"]
