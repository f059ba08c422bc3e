"""Diagnoses to a verdict and a ranked list: the root cause first, the rest as context.

Root cause = the first fatal diagnosis in the log (by the line of its decisive text), ties broken by
rule priority (specific rules over wrappers such as `Capture cuda graph failed:`). Cascades (SIGQUIT
from a child, "scheduler is dead", other ranks' aborts) never lead. A rule of category `unknown` leads
only when no rule names a cause. Verdicts: `failed`, `healthy` (reached ready, nothing fatal after),
`incomplete` (no fatal failure and no ready line; a `stall: true` rule may say where it stopped).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from logdoctor.diagnosis.engine import Diagnosis, EventIndex, evaluate_all, render, rules_named_it
from logdoctor.diagnosis.rules import Rule
from logdoctor.events import Event
from logdoctor.read.citations import Citations
from logdoctor.records import dataclass, field
from logdoctor.run.fold import Folding, RunBuilder, fold_source
from logdoctor.run.memory import analyse, template_values
from logdoctor.run.model import Run, cite_run

if TYPE_CHECKING:
    from logdoctor.diagnosis.net_data import NetData

SCHEMA = "logdoctor.diagnosis/1"
SERVING_MARGIN = 10  # lines of other ranks' output that may still interleave after a fatal error


@dataclass
class Report:
    source: str
    verdict: str
    primary: Diagnosis | None
    diagnoses: list[Diagnosis]
    run: Run
    memory: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    # the nodes read ({"node", "file", "ranks", "lines"}), when the report covers several
    nodes: list[dict[str, Any]] = field(default_factory=list)
    # the nodes the run's stage / failure / warning lines are on (run.model.cite_run), several nodes only
    run_nodes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "source": self.source,
            "verdict": self.verdict,
            "primary": self.primary.to_dict() if self.primary else None,
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "run": self.run.to_dict(),
        }
        if self.memory and self.memory.get("budget_line"):
            d["memory"] = self.memory  # the KV budget (memory.schema.json), on every log with memory figures
        if self.nodes:
            d["nodes"] = self.nodes
            _add_run_nodes(d["run"], self.run_nodes)
        if self.notes:
            d["notes"] = self.notes
        return d


def _add_run_nodes(run: dict[str, Any], nodes: dict[str, Any]) -> None:
    """`node` beside every stage / failure / warning line of a multi-node run."""
    for name, node in nodes.get("stages", {}).items():
        if name in run["stages"] and node is not None:
            run["stages"][name]["node"] = node
    for key in ("failures", "warnings"):
        for item, node in zip(run[key], nodes.get(key, [])):
            if node is not None:
                item["node"] = node


def _is_fatal(d: Diagnosis) -> bool:
    return d.rule.fatal and not d.rule.cascade


def _key(d: Diagnosis) -> tuple[int, int]:
    return (d.position, -d.rule.priority)


def was_serving(run: Run) -> bool:
    """Batch lines show a server that was serving (v0.1.3-v0.1.17 print no ready line), unless the only one is
    a single prefill: SGLang prints the ready line after its warm-up request, whose few new tokens print a
    prefill line and no decode line, so that alone is a warm-up that did not finish."""
    b = run.batches
    return bool(b.get("count")) and not (b.get("decode_count", 0) == 0 and b.get("prefill_count", 0) <= 1)


def rank_diagnoses(diags: list[Diagnosis], run: Run) -> tuple[str, Diagnosis | None, list[Diagnosis]]:
    # a catch-all (`unknown`) diagnosis on text a specific rule already explains is noise
    ready_line = run.stages["ready"].first_line if "ready" in run.stages else None

    serving_until = run.last_serving_line

    def counts(d: Diagnosis) -> bool:
        """Fatal, not before a ready line the server went on to print, and not followed by more serving
        (a request-level traceback after which batches keep coming did not end the server)."""
        if not _is_fatal(d) or (ready_line is not None and d.position <= ready_line):
            return False
        block_end = max([d.position] + [e.end_line or e.line for e in d.evidence if e.line == d.position])
        # v0.1 servers print no ready line: batches after the block show the server went on just the same
        serving = ready_line is not None or was_serving(run)
        return not (serving and serving_until > block_end + SERVING_MARGIN)

    # catch-alls (`unknown`) say "the cause is not in this log": noise once a specific rule names one
    if any(counts(d) and d.category != "unknown" for d in diags):
        diags = [d for d in diags if d.category != "unknown"]
    fatal = [d for d in diags if counts(d)]
    for d in fatal:
        d.counted = True
    if fatal:
        known = sorted((d for d in fatal if d.category != "unknown"), key=_key)
        primary = known[0] if known else sorted(fatal, key=_key)[0]
        verdict = "failed"
    elif ready_line is not None or was_serving(run):
        # v0.1.3-v0.1.17 print no ready line; batch lines mean the server was serving
        primary, verdict = None, "healthy"
    else:
        stalls = sorted((d for d in diags if d.rule.stall), key=_key)
        primary, verdict = (stalls[0] if stalls else None), "incomplete"
    rest = sorted((d for d in diags if d is not primary), key=lambda d: (not _is_fatal(d), d.position, -d.rule.priority))
    ordered = ([primary] if primary else []) + rest
    return verdict, primary, ordered


def budget_lead(diags: list[Diagnosis]) -> Diagnosis | None:
    """A memory warning (the budget story: a fraction not in force, a thin reserve, unbalanced ranks) to lead a
    launch that did not come up when nothing else names why: no failure, no stall rule and no stage the net
    can name. It never leads over a failure, and the verdict stays what the ranking said."""
    return next((d for d in diags if d.category == "memory_pressure" and d.rule.severity == "warning"
                 and not d.rule.fatal and not d.rule.cascade and not d.rule.inferred), None)


def diagnose_source(source: str, rules: list[Rule], label: str | None = None,
                    envelope: str | None = None) -> Report:
    """Read, parse, fold, match and rank one log; periodic batch lines take the bulk path.

    `envelope`: as `ingest.read_lines` takes it (None: detect by shape)."""
    citations = Citations()
    return diagnose(fold_source(source, label, envelope, citations), rules, label or source, citations=citations)


def diagnose(events: Iterable[Event], rules: list[Rule], source: str = "",
             builder: RunBuilder | None = None, citations: Citations | None = None,
             net: NetData | None = None) -> Report:
    """Fold, match and rank one log's events (streaming: events are consumed once).

    Events are ordered by position; a `Folding` (fold_source) brings its own builder, other events are
    folded into `builder` (default: a new one). `citations` (filled while the events are read) turns
    positions into the lines as given once the ranking is done."""
    folding = events if isinstance(events, Folding) else Folding(events, builder, source)
    if builder is not None and folding.builder is not builder:
        raise ValueError("diagnose: a Folding comes with its own builder; pass one or the other")
    index = EventIndex(folding)
    run = folding.run
    # the budget first: rules select on its values (`run: {memory.reserve_thin: true}`) as well as fill them in
    mem = analyse(run)
    mem_values = template_values(mem)
    mem_dict = mem.to_dict()  # one copy, shared by the report and its memory diagnoses
    diags = evaluate_all(rules, index, run, mem_values)
    verdict, primary, ordered = rank_diagnoses(diags, run)
    if not rules_named_it(verdict, primary):  # the net (and its modules) only where the rules left the cause open
        from logdoctor.diagnosis.net import refine
        from logdoctor.diagnosis.net_data import load_net
        verdict, primary, ordered = refine(verdict, primary, ordered, index, run,
                                           lambda: net if net is not None else getattr(rules, "net", None) or load_net())
    if primary is None and verdict != "healthy":
        primary = budget_lead(ordered)
        if primary is not None:
            ordered = [primary] + [d for d in ordered if d is not primary]
    report = Report(source, verdict, primary, ordered, run, mem_dict)
    if citations is not None:
        cite_report(report, citations)  # after ranking: nothing orders by position any more
    for d in ordered:
        if d.rule.inferred:  # written by the net from the log's own text: not a template
            if d.category == "memory_pressure":
                d.memory = mem_dict
            continue
        d.values["mem"] = mem_values
        d.explanation = render(d.rule.explanation, d.values)
        d.remedies = [text for r in d.rule.remedy if (text := render(r, d.values))]
        if d.category == "memory_pressure":
            d.memory = mem_dict
            if d.counted:
                d.remedies = computed_remedies(mem.remedies, d.remedies)
    return report


def computed_remedies(computed: list[dict[str, Any]], from_rule: list[str]) -> list[str]:
    """A memory failure's remedies: the analysis's, ranked by what the run's own numbers say each fixes, then
    the rule's for flags the analysis does not size (`--disable-cuda-graph`), then its cautions."""
    if not computed:
        return from_rule
    sized = [r for r in computed if r.get("value") is not None]
    flags = {r["flag"] for r in computed if r.get("flag")}  # a caution about a flag also overrules the rule on it
    cautions = [r["text"] for r in computed if r.get("value") is None]
    rest = [text for text in from_rule if not any(flag in text for flag in flags)]
    return [r["text"] for r in sized] + rest + cautions


def cite_report(report: Report, citations: Citations) -> None:
    """Every position a report shows, as (node, line as given); in place, once, after ranking."""
    if not citations.active:
        return
    several = citations.several_nodes
    for d in report.diagnoses:
        d.node = citations.node(d.position) if several else None
        d.position = citations.line(d.position)
        if "line" in d.values and isinstance(d.values["line"], int):
            d.values["line"] = d.position
        for e in d.evidence:
            e.node = citations.node(e.line) if several else None
            e.line = citations.line(e.line)
            if e.end_line is not None:
                e.end_line = citations.line(e.end_line)
    report.run_nodes = cite_run(report.run, citations)


__all__ = ["Report", "budget_lead", "cite_report", "diagnose", "diagnose_source", "rank_diagnoses", "SCHEMA"]
