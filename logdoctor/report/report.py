"""Formatters: one model in, text / json / markdown out."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from logdoctor import regexes
from logdoctor.read.citations import where
from logdoctor.report.human import cut, number, text_width, wrap
from logdoctor.run.model import STAGES, Run

if TYPE_CHECKING:
    from logdoctor.diagnosis.engine import Diagnosis
    from logdoctor.diagnosis.ranking import Report
    from logdoctor.diagnosis.rules import Rule


# A log line may carry BEL, backspace or a cursor-moving escape that ingest left in: in text and Markdown
# it is shown as \xNN, never acted on by the terminal. Our own colour codes (ESC [ digits m) stay.
_CONTROL = regexes.compile(r"\x1b\[[0-9;]{0,8}m|[\x00-\x08\x0b-\x1f\x7f\x9b]")


def _terminal_safe(text: str) -> str:
    return _CONTROL.sub(lambda m: m.group() if len(m.group()) > 1 else f"\\x{ord(m.group()):02x}", text)


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _n(v: object) -> str:
    """A count or rate for people (`2,946`, not `2946.3`); what is not a number as it is."""
    return number(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def summary_text(run: Run) -> str:
    out: list[str] = []
    sa = run.server_args
    model = sa.get("model_path") or "?"
    out.append(f"log      {run.source}")
    out.append(f"model    {model}")
    par = run.parallel_text()
    out.append(f"sglang   {run.version or '?'} (era {run.era or '?'}){'   ' + par if par else ''}")
    if sa:
        keys = ("mem_fraction_static", "cuda_graph_max_bs", "chunked_prefill_size", "max_running_requests",
                "context_length", "attention_backend", "disable_cuda_graph", "enable_torch_compile",
                "disable_custom_all_reduce", "kv_cache_dtype", "quantization")
        out.append("args     " + ", ".join(f"{k}={sa[k]}" for k in keys if k in sa))
    out.append("")
    out.append("stages")
    for name in STAGES:
        st = run.stages.get(name)
        if st is None:
            out.append(f"  {name:<14} not reached")
        else:
            dur = f"{st.duration_s:.1f} s" if st.duration_s is not None else ""
            out.append(f"  {name:<14} line {st.first_line:<6} {st.first_ts or '':<24} {dur}")
    out.append(f"  last stage reached: {run.last_stage or 'none'}{'  (ready)' if run.ready else ''}")
    ranks = run.rank_list()
    if ranks:
        out.append("")
        out.append("memory per rank (GiB)   free-before  free-after  weights  kv-tokens   kv     pool-end  graphs  ready-free")
        for r in ranks:
            out.append(f"  {r.rank:<20} {_gib(r.free_before_weights_gib):>11} {_gib(r.free_after_weights_gib):>11}"
                       f" {_gib(r.weights_gib):>8} {_n(r.kv_tokens) if r.kv_tokens is not None else '-':>10}"
                       f" {_gib(r.kv_gib):>6} {_gib(r.pool_end_free_gib):>9} {_gib(r.graph_gib):>7}"
                       f" {_gib(r.available_gpu_mem_gib):>10}")
    b = run.batches
    if b.get("count"):
        out.append("")
        out.append(f"batches  {_n(b['decode_count'])} decode, {_n(b['prefill_count'])} prefill; gen throughput "
                   f"p10/median/p90 {_n(b['gen_throughput_p10'])}/{_n(b['gen_throughput_median'])}/"
                   f"{_n(b['gen_throughput_p90'])} tok/s; peak token usage {_n(b['peak_token_usage'])}, "
                   f"peak queue {_n(b['peak_queue_req'])}")
    if run.failures:
        out.append("")
        out.append(f"failures ({len(run.failures)})")
        for f in run.failures[:30]:
            rank = f.ranks or ("" if f.rank is None else f"rank{f.rank}")
            head = f"  line {f.line:<6} {rank:<12} {f.kind:<26} "
            out.append(head + cut(" ".join(f.text.split()), max(text_width() - len(head), 40)))
    out.append("")
    out.append(f"{run.line_count} lines, {run.event_count} events, {run.unparsed_count} unparsed")
    return _terminal_safe("\n".join(out))


# ------------------------------------------------------------------------------------------------
# explain: text (optionally coloured), json, markdown — all from one Report


def _style(enabled: bool) -> "dict[str, str]":
    if not enabled:
        return {k: "" for k in ("bold", "red", "green", "yellow", "dim", "cyan", "reset")}
    return {"bold": "\x1b[1m", "red": "\x1b[31m", "green": "\x1b[32m", "yellow": "\x1b[33m", "dim": "\x1b[2m",
            "cyan": "\x1b[36m", "reset": "\x1b[0m"}


def _rank_label(rank: "str | None") -> str:
    return f" {rank}" if rank else ""


def explain_text(report: "Report", color: bool = False) -> str:
    s = _style(color)
    out: list[str] = []
    p = report.primary
    verdict_color = {"failed": s["red"], "healthy": s["green"], "incomplete": s["yellow"]}[report.verdict]
    head = f"{s['bold']}{verdict_color}{report.verdict.upper()}{s['reset']}"
    if p is not None:
        head += f"  {s['bold']}{p.category}{s['reset']}  {p.rule.title}  {s['dim']}[{p.rule.id} {p.rule.name}, confidence {p.confidence:.2f}]{s['reset']}"
    elif report.verdict == "healthy":
        head += "  the server reached ready and nothing fatal followed"
    else:
        head += "  no failure and no ready line: a fragment, or a launch that stopped"
    out.append(head)
    out.append(f"{s['dim']}{report.source}{s['reset']}")
    if report.nodes:
        out.append(f"{s['dim']}{_nodes_text(report)}{s['reset']}")
    if "ranks" in report.run.parallel_source.values():  # a guess is shown as one, not as a fact
        out.append(f"{s['dim']}parallel {report.run.parallel_text()}{s['reset']}")
    budget = budget_line(report)
    if budget:
        out.append(f"{s['bold']}budget{s['reset']}   {budget}")
    out.extend(f"{s['yellow']}note: {n}{s['reset']}" for n in report.notes)
    if p is not None:
        out.append("")
        out.append(f"{s['bold']}Evidence{s['reset']}")
        for e in p.evidence:
            rank = e.ranks or ("" if e.rank is None else f"rank{e.rank}")
            out.append(f"  {s['cyan']}{where(e.node, e.line)}{s['reset']}{_rank_label(rank)}: {e.text}")
        out.append("")
        out.append(f"{s['bold']}Why{s['reset']}")
        out.extend(_wrap(p.explanation, "  "))
        out.append("")
        out.append(f"{s['bold']}What to do{s['reset']}")
        remedies = _new_remedies(p.remedies, [])
        for i, r in enumerate(remedies, 1):
            lines = _wrap(r, "     ")
            out.append(f"  {i}. {lines[0].strip()}")
            out.extend(lines[1:])
        if p.memory:
            out.append("")
            out.append(f"{s['bold']}The memory budget{s['reset']} (logdoctor memory {_file_of(report, p.node)} for the "
                       "per-rank picture)")
            out.extend(_memory_lines(p.memory, remedies))
    others = [d for d in report.diagnoses if d is not p]
    if p is None:
        # nothing failed: the warnings are what there is to read, so they are shown in full, not as a title
        shown = _worth_knowing(others)
        if shown:
            out.append("")
            out.append(f"{s['bold']}Worth knowing{s['reset']}")
            for d in shown:
                out.append(f"  {s['cyan']}{where(d.node, d.position)}{s['reset']}: {d.rule.id} {d.rule.title} "
                           f"({d.category}, {d.rule.severity})")
                out.extend(_wrap(d.explanation, "    "))
                out.extend(_wrap("→ " + d.remedies[0], "    ") if d.remedies else [])
            others = [d for d in others if d not in shown]
    if others:
        out.append("")
        out.append(f"{s['bold']}Also seen{s['reset']}")
        for d in others[:8]:
            kind = ("fatal" if d.counted else "cascade" if d.rule.cascade else
                    "did not stop the server" if d.rule.fatal else d.rule.severity)
            out.append(f"  {where(d.node, d.position)}: {d.rule.id} {d.rule.title} ({d.category}, {kind})")
    out.append("")
    out.append(f"{s['bold']}Stages{s['reset']}")
    out.append("  " + _stages_line(report.run, report.run_nodes.get("stages")))
    return _terminal_safe("\n".join(out))


WORTH_KNOWING = 3  # warnings explained in full on a report without a failure; the rest are listed by title


def budget_line(report: "Report") -> str:
    """The one-line memory budget (`weights … | KV … | graphs … | free … GiB per rank, m configured …`), empty
    when the log has no memory figures."""
    return str((report.memory or {}).get("budget_line") or "")


def _worth_knowing(diags: "list[Diagnosis]") -> "list[Diagnosis]":
    """Warnings and notes a rule wrote from this log (not the net's inferred clues, not cascades)."""
    return [d for d in diags if not d.counted and not d.rule.fatal and not d.rule.cascade and not d.rule.inferred
            and d.rule.severity in ("warning", "info") and d.explanation][:WORTH_KNOWING]


def _memory_lines(mem: dict[str, Any], remedies: "list[str]") -> list[str]:
    """The budget's formula and findings, and only the advice `remedies` (What to do) did not already say."""
    out = [f"  {ln}" for ln in mem.get("formula", [])]
    for f in mem.get("findings", []):
        out.extend(_wrap("- " + f, "  ")[:6])
    for i, a in enumerate(_new_remedies(mem.get("advice", []), remedies), 1):
        out.extend(_wrap(f"{i}) {a}", "  ")[:6])
    return out


def _stages_line(run: Run, nodes: "dict[str, str | None] | None" = None) -> str:
    parts = []
    for name in STAGES:
        st = run.stages.get(name)
        if st is None:
            parts.append(f"{name} ✗")
            continue
        dur = f" {st.duration_s:.0f}s" if st.duration_s else ""
        ts = (st.first_ts or "").split(" ")[-1]
        at = where((nodes or {}).get(name), st.first_line)
        parts.append(f"{name} ✓ ({at}{', ' + ts if ts else ''}{dur})")
    return " → ".join(parts)


def _file_of(report: "Report", node: "str | None") -> str:
    """The file a node's lines are in (the report's source for a single log)."""
    return next((n["file"] for n in report.nodes if n["node"] == node), report.source)


def _nodes_text(report: "Report") -> str:
    """`nodes    node0.log (ranks 0-7), node1.log (ranks 8-15)`: what a multi-node report read."""
    items = []
    for n in report.nodes:
        items.append(f"{n['node']} (ranks {n['ranks']})" if n.get("ranks") else n["node"])
    files = {n.get("file") for n in report.nodes}
    where_from = f" in {files.pop()} (lines of that file)" if len(files) == 1 else ""
    return f"{len(items)} nodes{where_from}: " + ", ".join(items)


def _wrap(text: str, indent: str, width: int | None = None) -> list[str]:
    """Wrapped to the terminal's width (report.human.text_width: COLUMNS, else 100 when not a terminal)."""
    return wrap(text, indent, width)


def _same(text: str) -> str:
    return " ".join(text.split()).casefold()


def _new_remedies(items: "list[str]", shown: "list[str]") -> "list[str]":
    """`items` without those already printed in `shown` (and without repeats): each remedy once a report."""
    seen = {_same(r) for r in shown}
    out = []
    for r in items:
        if _same(r) not in seen:
            seen.add(_same(r))
            out.append(r)
    return out


def explain_markdown(report: "Report") -> str:
    p = report.primary
    out = []
    if p is not None:
        out.append(f"### logdoctor: **{report.verdict}** — `{p.category}`: {p.rule.title}")
        out.append("")
        out.append(f"Rule `{p.rule.id}` ({p.rule.name}), confidence {p.confidence:.2f}. Source: `{report.source}`"
                   + (f" ({_nodes_text(report)})" if report.nodes else ""))
        out.append("")
        out.append("**Evidence**")
        out.append("")
        out.append("```")
        for e in p.evidence:
            rank = e.ranks or ("" if e.rank is None else f"rank{e.rank}")
            out.append(f"{where(e.node, e.line)}{_rank_label(rank)}: {e.text}")
        out.append("```")
        out.append("")
        out.append("**Why**")
        out.append("")
        out.append(p.explanation)
        out.append("")
        out.append("**What to do**")
        out.append("")
        remedies = _new_remedies(p.remedies, [])
        for i, r in enumerate(remedies, 1):
            out.append(f"{i}. {r}")
        if p.memory:
            out.append("")
            out.append("**The memory budget**")
            out.append("")
            out.append("```")
            out.extend(ln.strip() for ln in p.memory.get("formula", []))
            out.append("```")
            out.extend(f"- {f}" for f in p.memory.get("findings", []) + _new_remedies(p.memory.get("advice", []), remedies))
    else:
        out.append(f"### logdoctor: **{report.verdict}**")
        out.append("")
        out.append(f"Source: `{report.source}`. " + ("The server reached ready and nothing fatal followed."
                                                    if report.verdict == "healthy" else
                                                    "No failure and no ready line in this log."))
    budget = budget_line(report)
    if budget:
        out.insert(1, "")
        out.insert(2, f"Memory per rank: `{budget}`")
    others = [d for d in report.diagnoses if d is not p]
    if p is None:
        shown = _worth_knowing(others)
        for d in shown:
            out.append("")
            out.append(f"**{d.rule.title}** (`{d.rule.id}`, {d.rule.severity}, {where(d.node, d.position)})")
            out.append("")
            out.append(d.explanation)
            if d.remedies:
                out.append("")
                out.append(f"→ {d.remedies[0]}")
        others = [d for d in others if d not in shown]
    if others:
        out.append("")
        out.append("<details><summary>Also seen</summary>")
        out.append("")
        for d in others[:10]:
            out.append(f"- {where(d.node, d.position)}: `{d.rule.id}` {d.rule.title} ({d.category})")
        out.append("")
        out.append("</details>")
    out.append("")
    out.append(f"Stages: {_stages_line(report.run, report.run_nodes.get('stages'))}")
    return _terminal_safe("\n".join(out))



def rule_doc(rule: "Rule") -> str:
    out = [f"{rule.id}  {rule.name}", f"{rule.title}", ""]
    out.append(f"category: {rule.category}   severity: {rule.severity}   fatal: {rule.fatal}   stage: {rule.stage}"
               f"   versions: {rule.versions}   priority: {rule.priority}")
    out.append(f"file: {rule.path}")
    out.append("")
    out.append("What it detects")
    for name, sel in rule.selections.items():
        parts = []
        if sel.kinds:
            parts.append("event " + "|".join(sorted(sel.kinds)))
        if sel.where:
            parts.append("where " + ", ".join(f"{k} {_matcher_text(v)}" for k, v in sel.where.items()))
        if sel.any_of:
            parts.append("any of " + " | ".join(", ".join(f"{k} {_matcher_text(v)}" for k, v in alt.items())
                                                 for alt in sel.any_of))
        if sel.fuzzy:
            parts.append(f"fuzzy {sel.fuzzy.get('field', 'text')} ~ {sel.fuzzy['text']!r} (≥{sel.fuzzy.get('cutoff', 85)})")
        if sel.run:
            parts.append("run " + ", ".join(f"{k} {_matcher_text(v)}" for k, v in sel.run.items()))
        if sel.before:
            parts.append(f"before {sel.before}")
        if sel.after:
            parts.append(f"after {sel.after}")
        out.append(f"  {name}: " + "; ".join(parts))
    out.append(f"  condition: {rule.condition_text}")
    out.append("")
    out.append("Why it happens")
    out.extend(_wrap(rule.why or rule.explanation, "  "))
    out.append("")
    out.append("How to fix (templates are filled with the log's numbers)")
    for i, r in enumerate(rule.remedy, 1):
        out.append(f"  {i}. {r}")
    out.append("")
    out.append("Examples")
    for which in ("fires", "quiet"):
        for p in rule.examples.get(which, []):
            out.append(f"  {which}: {p}")
    if rule.references:
        out.append("")
        out.append("References")
        out.extend(f"  {r}" for r in rule.references)
    return "\n".join(out)


def _matcher_text(m: object) -> str:
    if isinstance(m, dict):
        return " ".join(f"{k}={_public(v)!r}" for k, v in m.items() if not k.startswith("_"))
    return f"= {m!r}"


def _public(v: object) -> object:
    """A matcher as its author wrote it: without the compiled `_rx` / `_lits` helpers, at any depth."""
    if isinstance(v, dict):
        return {k: _public(x) for k, x in v.items() if not k.startswith("_")}
    if isinstance(v, list):
        return [_public(x) for x in v]
    return v

