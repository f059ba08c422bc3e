"""The text of `logdoctor memory`: the budget, the formula with the run's numbers, one row and one bar per
rank, the findings, the ranked remedies and the what-if. Letters draw the bars, so no colour is needed.

An unknown quantity is written `unknown` (a name, not a `?`), except inside the fixed-width per-rank table
and the bars, where `-` and `?` stand for a missing cell.
"""
from __future__ import annotations

from logdoctor.report.human import wrap
from logdoctor.run.memory import MemoryAnalysis, RankBudget, WhatIf

BAR_WIDTH = 60
BAR_LEGEND = "W weights  K KV cache  G CUDA graphs  r reserve (activations)  . free at ready  ? unknown"


def rank_bar(r: RankBudget) -> str:
    """`|WWWWKKKKGGrr..|` scaled to the free memory before weights."""
    total = r.pre_load_free_gib
    if not total:
        return "?" * BAR_WIDTH
    parts: list[tuple[str, float | None]] = [("W", r.weights_gib), ("K", r.kv_cache_gib), ("G", r.graph_gib)]
    known = sum(v for _, v in parts if v)
    free = r.available_gpu_mem_gib
    reserve = total - known - (free or 0.0)
    cells: list[str] = []
    for ch, v in parts + [("r", reserve if reserve > 0 else 0.0), (".", free)]:
        if v is None:
            continue
        cells.append(ch * min(BAR_WIDTH, round(BAR_WIDTH * max(0.0, min(v, total)) / total)))
    bar = "".join(cells)[:BAR_WIDTH]
    return bar + "?" * (BAR_WIDTH - len(bar))


def _f(v: float | None, spec: str = ".2f") -> str:
    return "unknown" if v is None else format(v, spec)


def _gib(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.2f} GiB"


def _cell(v: float | int | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _header(a: MemoryAnalysis) -> list[str]:
    m_src = " (read from the error text)" if a.mem_fraction_static_source == "error text" else ""
    tokens = f"{a.kv_tokens:,} tokens" if a.kv_tokens else "unknown tokens"
    if a.kv_tokens_source:
        tokens += f" from '{a.kv_tokens_source}'"
        if a.kv_tokens_other is not None:
            tokens += f"; '{a.kv_tokens_other_source}' says {a.kv_tokens_other:,}"
    out = [f"KV-cache budget  (era {a.era or 'unknown'}"
           f"{', memory ran out: ' + a.shortage if a.shortage else ''})"]
    if a.budget_line:
        out.append(f"  {a.budget_line}")
    out += [f"  configured mem_fraction_static  {_f(a.configured_mem_fraction_static, 'g')}{m_src}",
            f"  effective (from the numbers)    {_f(a.effective_mem_fraction_static, '.3f')}",
            f"  minimum that can start          {_f(a.minimum_mem_fraction_static, '.3f')}"
            + (f"  (SGLang's error: minimum viable {a.minimum_viable_from_error:.4f})"
               if a.minimum_viable_from_error is not None else ""),
            f"  P free before weights {_gib(a.pre_load_free_gib)}   A after {_gib(a.post_load_free_gib)}   "
            f"weights {_gib(a.weights_gib)}   reserve {_gib(a.reserve_gib)}",
            f"  KV {_gib(a.kv_cache_gib)} / {tokens} ("
            + ("unknown bytes per token" if a.bytes_per_token is None else f"{a.bytes_per_token:,.0f} B/token") + ")",
            f"  headroom {_gib(a.headroom_gib)}" + (f" ({a.headroom_source})" if a.headroom_source else "")
            + (f"; needed {a.headroom_needed_gib:.2f} GiB for {a.headroom_needed_for}" if a.headroom_needed_gib else "")]
    g = a.graphs
    if g:
        done = (f", died at bs {g.get('failed_at_bs')} after {g.get('graphs_done')} of {g.get('graphs_total')} graphs"
                if g.get("failed_at_bs") is not None else "")
        per = g.get("per_graph_gib")
        out.append(f"  CUDA graphs: {len(g.get('captured_bs') or [])} batch sizes ({g.get('bs_source')}), "
                   f"{_gib(per)} per graph, total {_gib(g.get('total_gib'))}{done}")
    return out


def _ranks(a: MemoryAnalysis) -> list[str]:
    out = ["", "Per rank (GiB)        before   after  weights     KV  tokens    pool-end  graphs  at-ready  m_eff"]
    for r in a.ranks:
        out.append(f"  {r.rank:<18} {_cell(r.pre_load_free_gib):>7} {_cell(r.post_load_free_gib):>7}"
                   f" {_cell(r.weights_gib):>8} {_cell(r.kv_cache_gib):>6} {_cell(r.kv_tokens, 'd'):>7}"
                   f" {_cell(r.pool_end_free_gib):>10} {_cell(r.graph_gib):>7} {_cell(r.available_gpu_mem_gib):>9}"
                   f" {_cell(r.effective_mem_fraction_static, '.3f'):>6}")
    out += ["", "GPU memory per rank (of the free memory before weights)"]
    out += [f"  {r.rank:<18} |{rank_bar(r)}| {_gib(r.pre_load_free_gib)}" for r in a.ranks]
    out.append(f"  {BAR_LEGEND}")
    return out


def what_if_text(w: WhatIf) -> list[str]:
    asked = [f"--mem-fraction-static {w.mem_fraction_static:g}"]
    for flag, v in (("--cuda-graph-max-bs", w.cuda_graph_max_bs), ("--chunked-prefill-size", w.chunked_prefill_size),
                    ("--max-running-requests", w.max_running_requests), ("--tp", w.tp)):
        if v is not None:
            asked.append(f"{flag} {v}")
    first = {"kv": "the KV check (init)", "reserve": "the reserve (graphs / activations)"}.get(w.fails_first or "")
    out = ["", "What if " + " ".join(asked)]
    terms = [f"KV budget {_gib(w.kv_budget_gib)}",
             f"KV tokens {w.kv_tokens:,}" if w.kv_tokens is not None else "KV tokens unknown",
             f"reserve {_gib(w.reserve_gib)}", "graphs " + ("≈" if w.graph_gib_estimate is not None else "") + _gib(w.graph_gib_estimate),
             f"headroom {_gib(w.headroom_gib)}"]
    if w.activations_gib is not None:
        terms.append(f"SGLang's prefill allowance {w.activations_gib:.2f} GiB (its sizing rule, not a measurement)")
    out.append("  " + ", ".join(terms))
    if w.kv_ok is None:
        out.append("  fails first: cannot tell (the unknown terms below)")
    else:
        out.append(f"  fails first: {first}" if first else
                   ("  fails first: neither limit" if w.reserve_ok else
                    "  fails first: not the KV check; the reserve is unknown"))
    if w.unknown:
        out.extend(wrap("unknown: " + "; ".join(w.unknown), "    ", first="  "))
    out.extend(wrap(w.verdict, "    ", first="  → "))
    return out


def memory_text(a: MemoryAnalysis) -> str:
    out = _header(a)
    out += ["", "The formula with this run's numbers"]
    out.extend("  " + ln for ln in a.formula)
    if a.ranks:
        out += _ranks(a)
    if a.findings:
        out += ["", "Findings"]
        for x in a.findings:
            out.extend(wrap(x, "    ", first="  - "))
    if a.advice:
        out += ["", "What to change (ranked: fixes what failed first, then fewest KV tokens lost)"]
        for i, x in enumerate(a.advice, 1):
            out.extend(wrap(x, "     ", first=f"  {i}. "))
    if a.what_if is not None:
        out += what_if_text(a.what_if)
    return "\n".join(out)


__all__ = ["BAR_LEGEND", "BAR_WIDTH", "memory_text", "rank_bar", "what_if_text"]
