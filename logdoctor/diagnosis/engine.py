"""Rules over events and the Run: selections, conditions, and one Diagnosis per firing rule.

Rules never see raw lines: a selection matches event kinds, event fields (equals, ranges, RE2 regex,
substring), a fuzzy text match (rapidfuzz, the score feeds the confidence), or run-summary fields, among
them the KV budget's values under `memory.` (`rule_run_dict`: `memory.fraction_not_in_force`, `memory.reserve_thin`).
Every event also exposes `stage` (the launch stage the log had reached when it was printed), `line`,
`rank`, `ranks`, `text` and `kind` as pseudo-fields.

User rules (`--rules DIR`) are data from someone else, and a regex can still be slow: their cost is
counted at load (rule_cost.py), and all user rules together get `USER_RULES_TIME_BUDGET` seconds of
matching per log, after which the log is an input error naming the slowest rule. RE2 is linear, but a
DFA-hostile pattern (`a.{0,300}zq` on text full of `a`) costs ~4 ns per instruction per character,
which no load-time limit that still admits useful rules can rule out.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from logdoctor.diagnosis.condition import evaluate, positive_names
from logdoctor.diagnosis.literals import fold_case
from logdoctor.diagnosis.rules import LiteralNeed, Rule, Selection
from logdoctor.diagnosis.templates import lookup, render  # noqa: F401  (diagnose fills templates via engine.render)
from logdoctor.events import Event
from logdoctor.read.sniff import InputError
from logdoctor.records import dataclass, field
from logdoctor.run.memory import analyse, template_values
from logdoctor.run.model import Run

PERIODIC = frozenset({"decode_batch", "prefill_batch", "http_access", "progress", "checkpoint_progress",
                      "graph_capture_progress"})
FIRST_BATCHES_OF = frozenset({"prefill_batch", "decode_batch"})
FIRST_BATCHES_KEPT = 2               # of the periodic batch lines, only the first ones reach the rules
MAX_KEPT_EVENTS = 100_000
CHATTY_KEPT = 1_000
# what the kept telling events may hold in all (text and field strings, estimated): 60k NCCL WARN lines of
# 8 KiB each took 2 GB when every one was kept whole
MAX_KEPT_BYTES = 48 << 20
MAX_TEXT = 4_096
MAX_EVIDENCE = 8
USER_RULES_TIME_BUDGET = 10.0        # seconds of matching per log for all user rules together
_STAGE_OF_KIND = {
    "dist_init_begin": "init", "nccl_version": "init", "dist_init_end": "init", "weight_load_begin": "weights", "kv_cache_allocated": "kv_pool",
    "memory_pool_end": "kv_pool", "graph_capture_begin": "graph_capture", "uvicorn_started": "warmup",
    "uvicorn_running": "warmup", "server_ready": "runtime",
}
_STAGE_RANK = {"args": 0, "init": 1, "weights": 2, "kv_pool": 3, "graph_capture": 4, "warmup": 5, "runtime": 6}


@dataclass
class Evidence:
    line: int
    rank: int | None
    ranks: str | None
    text: str
    kind: str
    end_line: int | None = None
    node: str | None = None           # set when the report covers several nodes (ranking.cite_report)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"line": self.line, "rank": self.ranks or (None if self.rank is None else f"rank{self.rank}"),
                             "text": self.text}
        if self.node is not None:
            d["node"] = self.node
        return d


@dataclass
class Diagnosis:
    rule: Rule
    evidence: list[Evidence]
    position: int                     # where in the log the cause shows (line)
    confidence: float
    values: dict[str, Any]
    explanation: str = ""
    remedies: list[str] = field(default_factory=list)
    memory: dict[str, Any] | None = None
    counted: bool = False             # set by the ranking: this diagnosis is a failure of this run
    node: str | None = None           # the node `position` is on, when the report covers several
    inferred: dict[str, Any] | None = None  # the broad net's clue (net.py): from, weight, term / subsystem

    @property
    def category(self) -> str:
        return self.rule.category

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rule": self.rule.id, "name": self.rule.name, "category": self.rule.category,
            "title": self.rule.title, "severity": self.rule.severity, "fatal": self.counted,
            "confidence": round(self.confidence, 3), "line": self.position,
        }
        if self.node is not None:
            d["node"] = self.node
        d["evidence"] = [e.to_dict() for e in self.evidence]
        d["explanation"], d["remedies"] = self.explanation, self.remedies
        if self.inferred is not None:
            d["inferred"] = self.inferred
        if self.memory is not None:
            d["memory"] = self.memory
        return d


class EventIndex:
    """The non-periodic events of one log, by kind, each with the stage it was printed in.

    Memory stays bounded on logs of any size: at most MAX_KEPT_EVENTS telling events holding at most
    MAX_KEPT_BYTES (past either, only the last CHATTY_KEPT more), and of the chatty ones (unrecognised
    lines, NCCL INFO, torch info/warning lines) only the first and the last CHATTY_KEPT, their text cut to
    MAX_TEXT characters. Failures sit at the end of a log or among the telling events, so the rules lose
    nothing they match on. Built over a `run.fold.Folding` (ranking.diagnose), the one pass that indexes
    the events also folds the run.
    """

    def __init__(self, events: Iterable[Event]) -> None:
        kept: list[tuple[Event, str]] = []
        chatty_head: list[tuple[Event, str]] = []
        chatty_tail: deque[tuple[Event, str]] = deque(maxlen=CHATTY_KEPT)
        overflow_tail: deque[tuple[Event, str]] = deque(maxlen=CHATTY_KEPT)
        kept_bytes = 0
        first_batches: list[tuple[Event, str]] = []
        stage = "args"
        for ev in events:
            k = ev.kind
            s = _STAGE_OF_KIND.get(k)
            if s is not None and _STAGE_RANK[s] > _STAGE_RANK[stage]:
                stage = s
            if k in PERIODIC:
                if k in FIRST_BATCHES_OF and len(first_batches) < FIRST_BATCHES_KEPT:
                    first_batches.append((ev, stage))  # a warm-up that never finished shows only these
                continue
            # chatty: unrecognised lines, NCCL INFO, torch info / warning lines (tested inline: a log can hold
            # millions)
            if k == "unparsed" or ((level := ev.fields.get("level")) == "INFO" and k == "nccl_log") or \
                    (k == "torch_log" and level in ("I", "W", None)):
                if len(ev.text) > MAX_TEXT:
                    ev.text = ev.text[:MAX_TEXT]
                (chatty_head if len(chatty_head) < CHATTY_KEPT else chatty_tail).append((ev, stage))
            elif len(kept) < MAX_KEPT_EVENTS and kept_bytes < MAX_KEPT_BYTES:
                kept.append((ev, stage))
                kept_bytes += _weight(ev)
            else:
                if len(ev.text) > MAX_TEXT:
                    ev.text = ev.text[:MAX_TEXT]
                overflow_tail.append((ev, stage))
        merged = sorted(kept + chatty_head + list(chatty_tail) + list(overflow_tail) + first_batches,
                        key=lambda x: x[0].line)
        self.events: list[Event] = [e for e, _ in merged]
        self.stages: list[str] = [st for _, st in merged]
        self.by_kind: dict[str, list[int]] = {}
        for i, ev in enumerate(self.events):
            self.by_kind.setdefault(ev.kind, []).append(i)
        self._hay: dict[tuple[str, str, bool], str] = {}
        self._has: dict[tuple[str, str, bool, tuple[str, ...]], bool] = {}
        self._groups: dict[tuple[str, str], dict[str, list[int]]] = {}

    def candidates(self, kinds: frozenset[str] | None) -> Iterable[int]:
        if kinds is None:
            return range(len(self.events))
        idx: list[int] = []
        for k in kinds:
            idx.extend(self.by_kind.get(k, ()))
        return sorted(idx)

    def candidates_for(self, sel: Selection) -> Iterable[int]:
        """The events `sel` may match, in order: of its kinds, those a kind-wide test cannot rule out.

        A kind is passed over when none of its events' text holds a literal the selection needs (one `in` over
        the kind's texts joined, instead of a test per event), and only events whose field has a value the
        selection needs are kept (`level: WARN`). Every event returned is still matched in full."""
        if not sel.needs and not sel.alt_needs and not sel.equals:
            return self.candidates(sel.kinds)
        idx: list[int] = []
        for k in (sel.kinds if sel.kinds is not None else self.by_kind):
            events = self.by_kind.get(k)
            if not events:
                continue
            if any(not self._holds(k, need) for need in sel.needs):
                continue
            if sel.alt_needs and all(any(not self._holds(k, need) for need in alt) for alt in sel.alt_needs):
                continue
            for path, values in sel.equals:
                groups = self._grouped(k, path)
                events = [i for v in values for i in groups.get(v, ())]
                if not events:
                    break
            idx.extend(events)
        return sorted(idx)

    def _holds(self, kind: str, need: LiteralNeed) -> bool:
        """Whether some event of `kind` may hold one of the literals in the field (as match_value reads it)."""
        path, ci, lits = need
        key = (kind, path, ci, lits)
        hit = self._has.get(key)
        if hit is None:
            hay_key = (kind, path, ci)
            hay = self._hay.get(hay_key)
            if hay is None:
                texts = [value if type(value) is str else _text(value)
                         for value in self._values(kind, path) if value is not None]
                hay = "\n".join(texts)
                # folded once, joined: the same text (a newline is neither cased nor case-ignorable, so even
                # a final sigma lowers as it does at the end of its own text)
                self._hay[hay_key] = hay = fold_case(hay) if ci else hay
            hit = self._has[key] = any(lit in hay for lit in lits)
        return hit

    def _grouped(self, kind: str, path: str) -> dict[str, list[int]]:
        """The events of `kind` by str(value) of a field (match_value compares a string matcher so)."""
        groups = self._groups.get((kind, path))
        if groups is None:
            groups = self._groups[(kind, path)] = {}
            for i, value in zip(self.by_kind[kind], self._values(kind, path)):
                if value is not None:
                    groups.setdefault(str(value), []).append(i)
        return groups

    def _values(self, kind: str, path: str) -> Iterator[Any]:
        """The value at `path` of each event of `kind`, in order, as _lookup reads it (a one-step field
        directly: a kind can have thousands of events)."""
        events, idx = self.events, self.by_kind[kind]
        if path == "text":
            return (events[i].text for i in idx)
        if path in _EVENT_ATTRS or path == "stage" or "." in path:
            stages = self.stages
            return (_lookup(events[i], stages[i], path) for i in idx)
        return (events[i].fields.get(path) for i in idx)


def _weight(ev: Event) -> int:
    """Roughly what an event holds: its text, its string fields, and the objects around them."""
    return 256 + len(ev.text) + sum(len(v) for v in ev.fields.values() if isinstance(v, str))


WRAPPER_PRIORITY = 10          # rules at or below this priority wrap another error (rules/README: wrappers 10)


def is_wrapper(verdict: str, primary: Diagnosis | None) -> bool:
    """A failure whose primary rule wraps another error (SGLang's "Capture cuda graph failed: <inner>", a child
    that died): it names where the launch failed, not why."""
    return (verdict == "failed" and primary is not None and primary.category != "unknown"
            and primary.rule.priority <= WRAPPER_PRIORITY and not primary.rule.inferred)


def rules_named_it(verdict: str, primary: Diagnosis | None) -> bool:
    """Whether the rules settled the ranking: the log is healthy, or a rule other than a wrapper names the
    failure. Otherwise the broad net may have its say (net.refine)."""
    return verdict == "healthy" or (verdict == "failed" and primary is not None and primary.category != "unknown"
                                    and not is_wrapper(verdict, primary))


def position(ev: Event) -> int:
    """The line where an event's decisive text is: a traceback's final exception, else its first line."""
    return int(ev.fields.get("exception_line") or ev.line)


_EVENT_ATTRS = frozenset({"text", "line", "rank", "ranks", "kind", "ts"})  # paths that name an Event attribute


def _lookup(ev: Event, stage: str, path: str) -> Any:
    if path == "stage":
        return stage
    if path in _EVENT_ATTRS:
        return getattr(ev, path)
    if "." not in path:  # one step, what lookup would take: the index asks this of thousands of events
        return ev.fields.get(path)
    return _lookup_dict(ev.fields, path)


_lookup_dict = lookup  # dict / list steps only, shared with the templates


def match_value(value: Any, m: Any) -> bool:
    if not isinstance(m, dict):
        if isinstance(m, bool) or m is None:
            return value is m or value == m
        if isinstance(m, (int, float)) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) == float(m)
        return str(value) == str(m) if value is not None else False
    for op, arg in m.items():
        if op.startswith("_"):  # compiled helpers: _rx, _lits
            continue
        if op == "exists":
            if (value is not None) != bool(arg):
                return False
        elif op == "eq":
            if not match_value(value, arg):
                return False
        elif op == "ne":
            if match_value(value, arg):
                return False
        elif op in ("lt", "le", "gt", "ge"):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return False
            v = float(value)
            if not {"lt": v < arg, "le": v <= arg, "gt": v > arg, "ge": v >= arg}[op]:
                return False
        elif op == "in":
            if not any(match_value(value, a) for a in arg):
                return False
        elif op == "regex":
            if value is None:
                return False
            lits = m.get("_lits")
            if lits is not None:
                text = _text(value)
                hay = fold_case(text) if lits[0] else text
                if not any(lit in hay for lit in lits[1]):
                    return False  # none of the literals every match contains: no need to run the regex
            rx = m.get("_rx")
            if rx is None:
                from logdoctor.diagnosis.rules import compile_regex
                rx = m["_rx"] = compile_regex(arg, m.get("_mem"))  # checked at load time; compiled on first use
            if rx.search(_text(value)) is None:
                return False
        elif op == "contains":
            if value is None or arg not in _text(value):
                return False
    return True


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}={_text(v)}" for k, v in value.items())
    return str(value)


@dataclass
class SelectionResult:
    events: list[int]
    score: float = 100.0
    truth: bool = False


class RulesTooSlow(InputError):
    """User rules spent their time budget on one log (a batch row error; exit 2 for explain)."""


class UserRuleClock:
    """Time spent by user rules on one log, checked between events (RE2 searches cannot be interrupted)."""

    def __init__(self, budget: float | None = None) -> None:
        self.budget = USER_RULES_TIME_BUDGET if budget is None else budget
        self.spent: dict[str, float] = {}
        self.paths: dict[str, str] = {}
        self.rule: Rule | None = None
        self.started = self.before = 0.0

    def start(self, rule: Rule) -> None:
        self.rule, self.started, self.before = rule, time.monotonic(), sum(self.spent.values())
        self.paths[rule.id] = str(rule.path)

    def stop(self) -> None:
        if self.rule is not None:
            self.spent[self.rule.id] = self.spent.get(self.rule.id, 0.0) + time.monotonic() - self.started
            self.rule = None

    def check(self) -> None:
        if self.rule is None or self.before + time.monotonic() - self.started <= self.budget:
            return
        self.stop()
        slowest = max(self.spent, key=lambda k: self.spent[k])
        raise RulesTooSlow(f"rule {slowest} ({self.paths[slowest]}) took {self.spent[slowest]:.1f} s of the "
                           f"{self.budget:g} s that user rules may spend matching one log; make its regexes "
                           "simpler (bound wide repetitions such as .{0,300})")


def _select(sel: Selection, index: EventIndex, run_dict: dict[str, Any],
            clock: UserRuleClock | None = None) -> SelectionResult:
    if sel.run is not None and sel.kinds is None and not sel.where and not sel.fuzzy and not sel.any_of:
        ok = all(match_value(_lookup_dict(run_dict, k), m) for k, m in sel.run.items())
        return SelectionResult([], 100.0, ok)
    if sel.run is not None and not all(match_value(_lookup_dict(run_dict, k), m) for k, m in sel.run.items()):
        return SelectionResult([], 100.0, False)
    hits: list[int] = []
    best = 0.0
    where = list(sel.where.items())
    alternatives = [list(alt.items()) for alt in sel.any_of]
    events, stages = index.events, index.stages
    for i in index.candidates_for(sel):
        if clock is not None:
            clock.check()
        ev, stage = events[i], stages[i]
        if where and not _all_match(ev, stage, where):
            continue
        if alternatives and not any(_all_match(ev, stage, alt) for alt in alternatives):
            continue
        if sel.fuzzy:
            value = _lookup(ev, stage, sel.fuzzy.get("field", "text"))
            if value is None:
                continue
            texts = sel.fuzzy["text"]
            texts = [texts] if isinstance(texts, str) else texts
            cutoff = float(sel.fuzzy.get("cutoff", 85))
            hay = _text(value)[:4000]
            from rapidfuzz import (
                fuzz,  # only rules with fuzzy selections pay for the import
            )
            score = max(fuzz.partial_ratio(t, hay, score_cutoff=cutoff) for t in texts)
            if score < cutoff:
                continue
            best = max(best, score)
        hits.append(i)
    return SelectionResult(hits, best if sel.fuzzy else 100.0, bool(hits))


def _all_match(ev: Event, stage: str, checks: list[tuple[str, Any]]) -> bool:
    for path, m in checks:
        if not match_value(_lookup(ev, stage, path), m):
            return False
    return True


def _order_filter(results: dict[str, SelectionResult], rule: Rule, index: EventIndex) -> None:
    """Apply `before:` / `after:` constraints (relative to the first event of another selection)."""
    for name, sel in rule.selections.items():
        res = results[name]
        for ref, keep_before in ((sel.before, True), (sel.after, False)):
            if ref is None:
                continue
            other = results[ref].events
            if not other:
                if keep_before:
                    continue  # nothing to be before: every event qualifies
                res.events, res.truth = [], False
                continue
            pivot = position(index.events[other[0]])
            res.events = [i for i in res.events
                          if (position(index.events[i]) < pivot if keep_before else position(index.events[i]) > pivot)]
            res.truth = bool(res.events)


def evaluate_rule(rule: Rule, index: EventIndex, run: Run, run_dict: dict[str, Any],
                  clock: UserRuleClock | None = None) -> Diagnosis | None:
    """One rule over one log; a user rule (not built in) runs against `clock` when one is given. `run_dict`
    is what `rule_run_dict` builds (the Run with the KV budget's values under `memory`)."""
    if clock is not None and not rule.builtin:
        clock.start(rule)
        try:
            results = {name: _select(sel, index, run_dict, clock) for name, sel in rule.selections.items()}
        finally:
            clock.stop()
    else:
        results = {name: _select(sel, index, run_dict) for name, sel in rule.selections.items()}
    _order_filter(results, rule, index)
    truth = {name: r.truth for name, r in results.items()}
    if not evaluate(rule.condition, truth):
        return None
    positives = [n for n in positive_names(rule.condition) if truth.get(n)]
    ev_idx: set[int] = set()
    for n in positives:
        ev_idx.update(results[n].events)
    evs = sorted((index.events[i] for i in ev_idx), key=position)
    anchor_ev: Event | None = None
    if rule.anchor and results[rule.anchor].events:
        anchor_ev = index.events[results[rule.anchor].events[0]]
    elif evs:
        anchor_ev = evs[0]
    pos = position(anchor_ev) if anchor_ev is not None else (run.line_count or 0) + 1
    scores = [results[n].score for n in positives if rule.selections[n].fuzzy]
    confidence = rule.confidence * (min(scores) / 100.0 if scores else 1.0)
    evidence = _pick_evidence(evs, anchor_ev)
    values: dict[str, Any] = {"run": run_dict}
    if anchor_ev is not None:
        rank = anchor_ev.ranks or (f"rank {anchor_ev.rank}" if anchor_ev.rank is not None else None)
        values.update({"ev": {**anchor_ev.fields, "text": anchor_ev.text}, "rank": rank, "line": pos})
    for n in rule.selections:
        if results[n].events:
            values[n] = index.events[results[n].events[0]].fields
            values[n + "_count"] = len(results[n].events)
    return Diagnosis(rule, evidence, pos, confidence, values)


def _pick_evidence(evs: list[Event], anchor: Event | None) -> list[Evidence]:
    """One line per position; the anchor's rank first, then a few lines from other ranks."""
    seen: set[int] = set()
    own: list[Evidence] = []
    other: list[Evidence] = []
    anchor_rank = anchor.ranks if anchor is not None else None
    for e in evs:
        pos = position(e)
        if pos in seen:
            continue
        seen.add(pos)
        item = Evidence(pos, e.rank, e.ranks, _evidence_text(e), e.kind, e.end_line)
        (own if e.ranks == anchor_rank else other).append(item)
    picked = own[:MAX_EVIDENCE - 2] + other[:2] if other else own[:MAX_EVIDENCE]
    return sorted(picked, key=lambda x: x.line)


def _evidence_text(ev: Event) -> str:
    if ev.kind == "traceback":
        exc = ev.fields.get("exception") or "Traceback"
        msg = (ev.fields.get("message") or "").split("\n", 1)[0]
        return f"{exc}: {msg}"[:300] if msg else exc
    return ev.text if len(ev.text) <= 300 else ev.text[:299] + "…"


def rule_run_dict(run: Run, memory_values: dict[str, Any] | None = None) -> dict[str, Any]:
    """What `run:` selections and `{run.…}` placeholders read: `Run.to_dict()` whose `memory` is the KV
    budget's values (`run.memory.template_values`: `memory.fraction_not_in_force`, `memory.reserve_thin`, …).

    The per-rank figures `Run.to_dict()` keeps under `memory` stay reachable as `memory.ranks.N` and, for
    rules written against the old shape, `memory.N`. `memory_values`: the values when the caller already
    has them (ranking.diagnose computes the analysis once for the rules and the report)."""
    d = run.to_dict()
    if memory_values is None:
        memory_values = template_values(analyse(run))
    per_rank = d.get("memory")
    ranks: list[Any] = per_rank if isinstance(per_rank, list) else []
    d["memory"] = {**{str(i): r for i, r in enumerate(ranks)}, "ranks": ranks, **memory_values}
    return d


def evaluate_all(rules: list[Rule], index: EventIndex, run: Run,
                 memory_values: dict[str, Any] | None = None) -> list[Diagnosis]:
    run_dict = rule_run_dict(run, memory_values)
    clock = UserRuleClock()
    return [d for rule in rules if (d := evaluate_rule(rule, index, run, run_dict, clock)) is not None]
