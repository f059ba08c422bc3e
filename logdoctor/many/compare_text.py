"""A comparison (compare.py) as text or Markdown, and the words both use for numbers and values.

Nothing unknown is printed as `None`, `nan` or `?`: a missing value carries its note ("not in B's log",
"not reached: B ran out at graph 11 of 52"), a server arg set to None reads "not set".
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logdoctor.many.compare import Comparison, MemoryRow

EVIDENCE_WIDTH = 170       # a quoted log line is cut here (a torch OOM message runs to 600 characters)


def amount(delta_gib: float) -> str:
    """|delta| in MiB below 1 GiB (the log's 2-decimal GB steps are ~10 MiB), else in GiB."""
    d = abs(delta_gib)
    return f"{d * 1024:.0f} MiB" if d < 1 else f"{d:.2f} GiB"


def more_less(delta: float) -> str:
    return "more" if delta > 0 else "less"


def value_text(v: Any) -> str:
    """A server-arg value as the user wrote it; None is SGLang's "not set" (its default applies)."""
    if v is None:
        return "not set"
    if isinstance(v, float):
        return f"{v:g}" if math.isfinite(v) else "not a number"
    if isinstance(v, str):
        return repr(v)
    return str(v)


def _cell(r: MemoryRow, side: str) -> str:
    v = r.a if side == "a" else r.b
    note = r.a_note if side == "a" else r.b_note
    if v is None:
        return note or f"not in {side.upper()}'s log"
    text = f"{int(v):,}" if r.unit == "tokens" else f"{float(v):.2f}"
    return f"{text} ({note})" if note else text


def _delta_cell(r: MemoryRow) -> str:
    d = r.delta
    if d is None:
        return ""
    if r.unit == "tokens":
        return "same" if d == 0 else ("+" if d > 0 else "−") + f"{abs(d):,.0f}"
    if abs(d) < 0.005:
        return "same"
    return ("+" if d > 0 else "−") + amount(d)


def _cut(text: str | None) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= EVIDENCE_WIDTH else t[:EVIDENCE_WIDTH - 1] + "…"


def _basis(c: Comparison) -> str:
    parts = []
    for side in ("a", "b"):
        b = c.memory_basis.get(side, {})
        conf, eff = b.get("configured_mem_fraction_static"), b.get("effective_mem_fraction_static")
        name = side.upper()
        conf_s = f"configured {conf:g}" if conf is not None else f"configured: not in {name}'s log"
        eff_s = f"in force {eff:.3f}" if eff is not None else f"in force: not computable from {name}'s log"
        parts.append(f"{name} {conf_s}, {eff_s}")
    return "; ".join(parts)


def _evidence_lines(c: Comparison) -> list[str]:
    out = []
    for side in ("b", "a") if c.parting.get("stops") == "B" else ("a", "b"):
        ev = c.parting.get(side)
        if not ev:
            continue
        if ev.get("line") is None and not ev.get("text"):
            continue
        where = f"line {ev['line']}" if ev.get("line") is not None else "no line"
        out.append(f"{side.upper()} {where}: {_cut(ev.get('text') or ev.get('title'))}")
        if ev.get("progress"):
            out.append(f"{side.upper()} {ev['progress']}")
    return out


def comparison_text(c: Comparison) -> str:
    out = [f"A: {c.a}", f"B: {c.b}", "", "Where they part", f"  {c.parting.get('summary', '')}"]
    out.extend(f"    {x}" for x in _evidence_lines(c))
    if c.parting.get("note"):
        out.append(f"  {c.parting['note']}.")
    if c.decided:
        out.append(f"  {c.decided[0]}")
    out += ["", "Flags that differ (those that matter for memory and the launch first)"]
    w = max([len(f.arg) for f in c.flags + c.other_args] + [24])
    vw = min(max([len(value_text(x)) for f in c.flags + c.other_args for x in (f.a, f.b)] + [6]), 24)
    for f in c.flags:
        out.append(f"  * {f.arg:<{w}}  A {value_text(f.a):<{vw}}  B {value_text(f.b):<{vw}}  {f.area}: {f.why}")
    for f in c.other_args:
        out.append(f"    {f.arg:<{w}}  A {value_text(f.a):<{vw}}  B {value_text(f.b)}")
    if not c.flags and not c.other_args:
        out.append("  none" + (" of the args both logs print" if c.one_sided.get("summary") else ""))
    if c.one_sided.get("summary"):
        out.append(f"  {c.one_sided['summary']}")
    if c.not_compared:
        out.append(f"  not compared (per-launch values): {', '.join(c.not_compared)}")
    if c.memory:
        out += ["", "Memory per stage (GiB, min over ranks, with the fraction in force)", f"  {_basis(c)}",
                "  the reserve is P·(1 − m in force) = free after weights − KV cache", ""]
        lw = max(len(r.label) for r in c.memory) + 2
        # a note ("not reached: …") may run past the column; numbers stay aligned
        cw = min(max([len(_cell(r, 'a')) for r in c.memory] + [8]), 12)
        out.append(f"  {'':<{lw}}{'A':>{cw}}   {'B':<10} B − A")
        for r in c.memory:
            b = _cell(r, "b")
            out.append(f"  {r.label:<{lw}}{_cell(r, 'a'):>{cw}}   {b:<10} {_delta_cell(r)}".rstrip())
    if len(c.decided) > 1:
        out += ["", "What decided it"]
        out.extend(f"  - {d}" for d in c.decided[1:])
    out += ["", "Stages"]
    out.extend(f"  {s:<14} A {x:<34} B {y}" for s, x, y in c.stage_rows)
    if c.rank_rows:
        out += ["", "Per rank (GiB)"]
        out.extend(f"  {r:<8} A {x}\n  {'':<8} B {y}" for r, x, y in c.rank_rows)
    out += ["", "Outcome"]
    out.extend(f"  {w_:<30} A {_plain(x)}\n  {'':<30} B {_plain(y)}" for w_, x, y in c.outcome_rows)
    return "\n".join(out)


def _plain(v: Any) -> str:
    if v is None:
        return "not in the log"
    if isinstance(v, float):
        return f"{v:.2f}" if math.isfinite(v) else "not a number"
    return str(v)


def _md(s: str) -> str:
    return s.replace("|", "\\|")


def comparison_markdown(c: Comparison) -> str:
    out = ["# Comparison", "", f"- **A**: `{c.a}`", f"- **B**: `{c.b}`", "", "## Where they part", "",
           _md(c.parting.get("summary", ""))]
    ev = _evidence_lines(c)
    if ev:
        out.append("")
        out.extend(f"- {_md(x)}" for x in ev)
    if c.parting.get("note"):
        out += ["", _md(c.parting["note"]) + "."]
    out += ["", "## Flags that differ", ""]
    if c.flags or c.other_args:
        out += ["| arg | A | B | why it matters |", "|---|---|---|---|"]
        out.extend(f"| **{f.arg}** | {_md(value_text(f.a))} | {_md(value_text(f.b))} | {_md(f'{f.area}: {f.why}')} |"
                   for f in c.flags)
        out.extend(f"| {f.arg} | {_md(value_text(f.a))} | {_md(value_text(f.b))} | |" for f in c.other_args)
    else:
        out.append("No arg that both logs print differs.")
    if c.one_sided.get("summary"):
        out += ["", _md(c.one_sided["summary"]) + "."]
    if c.not_compared:
        out += ["", f"Not compared (per-launch values): {', '.join(c.not_compared)}."]
    if c.memory:
        out += ["", "## Memory per stage", "", _md(_basis(c)) + "; the reserve is P·(1 − m in force) = free after weights − KV cache.", "",
                "| quantity | A | B | B − A |", "|---|---:|---:|---:|"]
        out.extend(f"| {r.label} | {_md(_cell(r, 'a'))} | {_md(_cell(r, 'b'))} | {_delta_cell(r)} |" for r in c.memory)
    if c.decided:
        out += ["", "## What decided it", ""]
        out.extend(f"- {_md(d)}" for d in c.decided)
    return "\n".join(out) + "\n"
