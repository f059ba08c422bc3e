"""The KV-cache budget, rebuilt from the log's own numbers (catalog section e), and what to change.

    rest (KV GiB) = A − P · (1 − m)        P: free GiB before weights (min over ranks)
                                           A: free GiB after weights (min over ranks), m: mem_fraction_static
    m_eff        = 1 − (A − KV) / P        the fraction the numbers say was in force
    minimum m    = 1 − A / P               below it the KV budget is ≤ 0 and the launch cannot start
    reserve      = P · (1 − m)             what is left for activations and CUDA graphs

Advice follows the direction of the shortage: at init (KV budget ≤ 0) the fraction goes up; in graph
capture or at runtime it goes down (or the graphs / prefill chunk get smaller).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from logdoctor.run.model import RankMemory, Run

ROUNDING_TOLERANCE = 0.01  # page rounding, small req_to_token pools, 2-decimal logging
GIB = float(1 << 30)
# A memory figure outside ±GIB_LIMIT GiB (an exbibyte) is not a GPU's: it is dropped as unknown. Figures
# closer to zero than TINY_GIB count as zero, so no ratio below can overflow to inf (5e-324 as P would).
GIB_LIMIT = 1e6
TINY_GIB = 1e-9


@dataclass
class RankBudget:
    rank: str
    pre_load_free_gib: float | None
    post_load_free_gib: float | None
    weights_gib: float | None
    kv_cache_gib: float | None
    kv_tokens: int | None
    bytes_per_token: float | None
    pool_end_free_gib: float | None
    graph_gib: float | None
    available_gpu_mem_gib: float | None
    effective_mem_fraction_static: float | None
    minimum_mem_fraction_static: float | None


@dataclass
class WhatIf:
    mem_fraction_static: float
    cuda_graph_max_bs: int | None
    kv_budget_gib: float | None
    kv_tokens: int | None
    reserve_gib: float | None
    graph_gib_estimate: float | None
    headroom_gib: float | None
    passes_kv_check: bool | None
    verdict: str


@dataclass
class MemoryAnalysis:
    era: str | None
    shortage: str | None                      # init | weights | kv_pool | graph_capture | runtime | None
    configured_mem_fraction_static: float | None
    effective_mem_fraction_static: float | None
    minimum_mem_fraction_static: float | None
    pre_load_free_gib: float | None
    post_load_free_gib: float | None
    weights_gib: float | None
    kv_cache_gib: float | None
    kv_tokens: int | None
    bytes_per_token: float | None
    reserve_gib: float | None
    kv_budget_gib: float | None
    graph_gib: float | None
    cuda_graph_max_bs: int | None
    context_len: int | None
    kv_estimated: bool = False                 # KV size inferred from "Memory pool end" (old eras)
    formula: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    ranks: list[RankBudget] = field(default_factory=list)
    what_if: WhatIf | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(v, nd)


def _num(v: Any) -> float | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _gib(v: Any) -> float | None:
    """A GiB figure fit for the arithmetic below (finite, within ±GIB_LIMIT), else None."""
    f = _num(v)
    if f is None or abs(f) > GIB_LIMIT:
        return None
    return 0.0 if abs(f) < TINY_GIB else f


def _tokens(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 10**15 else None


def _rank_budget(rm: RankMemory) -> RankBudget:
    p, a, kv = _gib(rm.free_before_weights_gib), _gib(rm.free_after_weights_gib), _gib(rm.kv_gib)
    tok = _tokens(rm.kv_tokens)
    bpt = (kv * GIB / tok) if kv and tok else None
    eff = (1 - (a - kv) / p) if (p and a is not None and kv is not None) else None
    minimum = (1 - a / p) if (p and a is not None) else None
    weights = _gib(rm.weights_gib)
    if weights is None:
        weights = _r(p - a, 2) if p is not None and a is not None else None
    return RankBudget(rm.rank, p, a, weights, kv, tok, _r(bpt, 1), _gib(rm.pool_end_free_gib), _gib(rm.graph_gib),
                      _gib(rm.available_gpu_mem_gib), _r(eff), _r(minimum))


_SHORTAGE_INIT = {"kv_not_enough_memory", "kv_no_memory_after_weights"}


def shortage_stage(run: Run) -> str | None:
    """Where memory ran out, from the failures and the stages reached (None when it did not)."""
    ready = run.stages.get("ready")
    capture = run.stages.get("graph_capture")
    kv = run.stages.get("kv_pool")
    weights = run.stages.get("weights")
    for f in run.failures:
        if f.kind in _SHORTAGE_INIT:
            return "init"
        if f.kind == "batch_out_of_memory" or f.kind == "req_slots_exhausted":
            return "runtime"
        if f.kind in ("torch_oom", "graph_capture_failed") and (f.kind == "torch_oom" or "memory" in f.text):
            line = f.line
            if ready is not None and ready.first_line is not None and line > ready.first_line:
                return "runtime"
            if capture is not None and capture.first_line is not None and line > capture.first_line:
                return "graph_capture"
            if kv is not None and kv.first_line is not None and line > kv.first_line:
                return "kv_pool"
            if weights is not None:
                return "weights"
            return "runtime" if run.batches.get("count") else None
    return None


def _formula_lines(era: str | None, P: float | None, A: float | None, m: float | None, kv: float | None,
                   bpt: float | None) -> list[str]:
    p = f"{P:.2f}" if P is not None else "P"
    a = f"{A:.2f}" if A is not None else "A"
    ms = f"{m:g}" if m is not None else "m"
    lines: list[str] = []
    if era and era.startswith("v0.5.14"):
        lines.append("v0.5.14+ (kv_cache_configurator): slack = P·(1 − m); rest = A − slack − multimodal reserve;"
                     " rest ≤ 0 raises 'Loaded weights leave no GPU memory for the KV cache'")
    elif era and era.startswith("v0.1.x"):
        lines.append("v0.1.x (router model_runner): rest = A − P·(1 − m) in bytes; tokens = rest // cell_size")
    else:
        lines.append("v0.2–v0.5.13 (model_runner profile_max_num_token): rest = A − P·(1 − m), P = free memory after"
                     " distributed init (min over ranks), A = free memory after the weights")
    if P is not None and A is not None and m is not None:
        reserve = P * (1 - m)
        rest = A - reserve
        lines.append(f"  reserve = P·(1 − m) = {p} × (1 − {ms}) = {reserve:.2f} GiB  (activations, CUDA graphs)")
        lines.append(f"  KV budget = A − reserve = {a} − {reserve:.2f} = {rest:.2f} GiB")
        if bpt and rest > 0:
            lines.append(f"  KV tokens = {rest:.2f} GiB × 2^30 / {bpt:,.0f} B/token ≈ {int(rest * GIB / bpt):,}")
        elif rest <= 0:
            lines.append("  ≤ 0: no KV cache can be allocated → 'Not enough memory. Please try to increase"
                         " --mem-fraction-static.'")
    else:
        lines.append(f"  KV budget = {a} − {p} × (1 − {ms})  (missing numbers: see below)")
    if kv is not None and P and A is not None:
        lines.append(f"  observed KV cache {kv:.2f} GiB → m_eff = 1 − (A − KV)/P = 1 − ({a} − {kv:.2f})/{p}"
                     f" = {1 - (A - kv) / P:.3f}")
    return lines


def analyse(run: Run, what_if_mfs: float | None = None, what_if_bs: int | None = None) -> MemoryAnalysis:
    ranks = [_rank_budget(rm) for rm in run.rank_list()]
    sa = run.server_args
    m = _num(sa.get("mem_fraction_static"))
    if m is not None and abs(m) > GIB_LIMIT:
        m = None  # `mem_fraction_static=1e300` is no setting: unknown rather than overflowing below
    pres = [r.pre_load_free_gib for r in ranks if r.pre_load_free_gib is not None]
    posts = [r.post_load_free_gib for r in ranks if r.post_load_free_gib is not None]
    P = min(pres) if pres else None
    A = min(posts) if posts else None
    kv_rank = next((r for r in ranks if r.kv_cache_gib is not None), None)
    KV = kv_rank.kv_cache_gib if kv_rank else None
    kv_estimated = False
    if KV is None:
        # before v0.4.1.post6 no line prints the KV size; "Memory pool end" ≈ A − KV (plus small req pools)
        ends = [(r.post_load_free_gib, r.pool_end_free_gib) for r in ranks
                if r.post_load_free_gib is not None and r.pool_end_free_gib is not None]
        if ends:
            a, e = min(ends)
            KV, kv_estimated = round(a - e, 2), True
    tokens = kv_rank.kv_tokens if kv_rank else next((r.kv_tokens for r in ranks if r.kv_tokens), None)
    bpt = _r(KV * GIB / tokens, 1) if KV and tokens else None
    weights = max((r.weights_gib for r in ranks if r.weights_gib is not None), default=None)
    graphs = max((r.graph_gib for r in ranks if r.graph_gib is not None), default=None)
    bs = _tokens(sa.get("cuda_graph_max_bs"))
    ctx = _tokens(run.scheduler_summary.get("context_len"))
    eff = (1 - (A - KV) / P) if (P and A is not None and KV is not None) else None
    minimum = (1 - A / P) if (P and A is not None) else None
    m_used = m if m is not None else eff
    reserve = P * (1 - m_used) if (P and m_used is not None) else None
    budget = A - reserve if (A is not None and reserve is not None) else None
    missing = [name for name, v in (("mem_fraction_static (the server_args line)", m),
                                    ("free memory before weights ('Load weight begin. avail mem=')", P),
                                    ("free memory after weights ('Load weight end. … avail mem=')", A),
                                    ("KV cache size ('KV Cache is allocated. …')", KV)) if v is None]
    a = MemoryAnalysis(
        era=run.era, shortage=shortage_stage(run), configured_mem_fraction_static=m,
        effective_mem_fraction_static=_r(eff), minimum_mem_fraction_static=_r(minimum), pre_load_free_gib=P,
        post_load_free_gib=A, weights_gib=weights, kv_cache_gib=KV, kv_tokens=tokens, bytes_per_token=bpt,
        reserve_gib=_r(reserve, 2), kv_budget_gib=_r(budget, 2), graph_gib=graphs, cuda_graph_max_bs=bs,
        context_len=ctx, missing=missing, ranks=ranks, kv_estimated=kv_estimated,
    )
    a.formula = _formula_lines(run.era, P, A, m_used, KV, bpt)
    if kv_estimated:
        a.formula.append("  (KV size estimated as A − 'Memory pool end' free memory: this SGLang prints no KV size)")
    a.findings = _findings(a, ranks, run)
    a.advice = _advice(a, run)
    if what_if_mfs is not None or what_if_bs is not None:
        a.what_if = what_if(a, what_if_mfs if what_if_mfs is not None else (m_used or 0.0), what_if_bs)
    return a


def _findings(a: MemoryAnalysis, ranks: list[RankBudget], run: Run) -> list[str]:
    out: list[str] = []
    P, A, KV, m, eff = (a.pre_load_free_gib, a.post_load_free_gib, a.kv_cache_gib, a.configured_mem_fraction_static,
                        a.effective_mem_fraction_static)
    if a.missing:
        have = [n for n, v in (("P", P), ("A", A), ("KV", KV), ("m", m)) if v is not None]
        out.append("missing from the log: " + "; ".join(a.missing) +
                   (f". Still known: {', '.join(have)}." if have else "."))
        if P and A is not None and m is None:
            out.append(f"without m: any mem_fraction_static below {1 - A / P:.3f} cannot start (1 − A/P).")
        if P is None and A is not None and KV is not None and m is not None and m < 1:
            out.append(f"without P: the numbers imply P ≈ (A − KV)/(1 − m) = {(A - KV) / (1 - m):.2f} GiB free before"
                       " the weights.")
    tolerance = ROUNDING_TOLERANCE * (3 if a.kv_estimated else 1)  # req pools hide inside an estimate
    if eff is not None and m is not None and abs(eff - m) > tolerance:
        if eff > m:
            need_p = (A - KV) / (1 - m) if (A is not None and KV is not None and m < 1) else None
            msg = (f"the configured mem_fraction_static={m:g} cannot have been in force: with P={P:.2f} GiB and "
                   f"A={A:.2f} GiB, m={m:g} leaves a KV budget of {A - P * (1 - m):.2f} GiB, yet the log shows a "
                   f"{KV:.2f} GiB KV cache — that needs m ≈ {eff:.3f}.")
            out.append(msg)
            checks = ["check that the server_args line belongs to this run and that the flag reached the server "
                      "(launcher scripts, config files and environment wrappers can override it; a typo'd flag is "
                      "rejected by argparse, a value in the wrong process is not)",
                      f"'Memory pool end. avail mem=' should read about P·(1 − m_eff) = {P * (1 - eff):.2f} GiB"]
            if need_p is not None:
                checks.append(f"the only way m={m:g} fits these numbers is P ≈ {need_p:.2f} GiB on some rank "
                              "(another process holding memory), which would show as a much lower 'Load weight begin. "
                              "avail mem=' on that rank and a 'memory capacity is unbalanced' message")
            out.append("what to check: " + "; ".join(checks) + ".")
        else:
            out.append(f"the KV cache ({KV:.2f} GiB) is smaller than m={m:g} allows ({A - P * (1 - m):.2f} GiB): "
                       "--max-total-tokens capped it, a hybrid (SWA/Mamba) split or a draft model took a share, or "
                       "the pool was rounded to pages.")
    reduced = [f for f in run.warnings if f.kind == "mem_fraction_reduced"]
    if reduced:
        out.append(f"SGLang lowered mem_fraction_static itself (multimodal model): '{reduced[0].text[:120]}'.")
    pres = [(r.rank, r.pre_load_free_gib) for r in ranks if r.pre_load_free_gib is not None]
    if len(pres) > 1:
        lo = min(pres, key=lambda x: x[1])
        hi = max(pres, key=lambda x: x[1])
        if hi[1] - lo[1] > max(1.0, 0.05 * hi[1]):
            out.append(f"rank {lo[0]} had {lo[1]:.2f} GiB free before the weights, {hi[1] - lo[1]:.2f} GiB less than "
                       f"{hi[0]} ({hi[1]:.2f} GiB): another process is using that GPU. SGLang sizes every rank by the "
                       "smallest value.")
    if a.kv_tokens and a.context_len and a.kv_tokens < a.context_len:
        out.append(f"the KV pool holds {a.kv_tokens:,} tokens, less than one full-length request "
                   f"(context_len={a.context_len:,}): long prompts will be truncated or rejected.")
    elif a.kv_tokens and a.context_len:
        out.append(f"the KV pool holds {a.kv_tokens:,} tokens: {a.kv_tokens // a.context_len} request(s) at the full "
                   f"context length of {a.context_len:,}, about {a.kv_tokens // 4096} at 4K tokens each.")
    return out


def _tokens_at(a: MemoryAnalysis, m: float) -> int | None:
    if a.pre_load_free_gib is None or a.post_load_free_gib is None or not a.bytes_per_token:
        return None
    rest = a.post_load_free_gib - a.pre_load_free_gib * (1 - m)
    return max(0, int(rest * GIB / a.bytes_per_token))


def _advice(a: MemoryAnalysis, run: Run) -> list[str]:
    out: list[str] = []
    P, A = a.pre_load_free_gib, a.post_load_free_gib
    m = a.configured_mem_fraction_static if a.configured_mem_fraction_static is not None else a.effective_mem_fraction_static
    step = P * 0.01 if P else None
    short = _short_rank(a.ranks)
    if short is not None and a.shortage in ("init", "weights", "kv_pool") and m is not None:
        rank, p_short, p_others = short
        weights = a.weights_gib or 0.0
        budget_without = (p_others - weights) - p_others * (1 - m)
        out.append(f"FREE the GPU of rank {rank} first: it had {p_short:.2f} GiB free before the weights against "
                   f"{p_others:.2f} GiB on the others, and SGLang sizes every rank by the smallest. Without the other "
                   f"process the KV budget at m={m:g} would be {budget_without:.2f} GiB (nvidia-smi shows who holds it).")
    if a.shortage == "init":
        if a.minimum_mem_fraction_static is not None and a.minimum_mem_fraction_static >= 0.99:
            out.append(f"no --mem-fraction-static can start this launch: the weights ({a.weights_gib or 0:.2f} GiB) leave "
                       f"{A:.2f} GiB of {P:.2f} GiB; use a larger --tp, a quantized checkpoint, or free the GPUs.")
        elif a.minimum_mem_fraction_static is not None:
            target = min(0.99, round(a.minimum_mem_fraction_static + 0.03, 2))
            tok = _tokens_at(a, target)
            out.append(f"RAISE --mem-fraction-static to at least {a.minimum_mem_fraction_static:.3f} (below it the KV "
                       f"budget is ≤ 0); {target:.2f} leaves a {(A - P * (1 - target)):.2f} GiB KV cache"
                       + (f" (≈{tok:,} tokens)" if tok else "") + f" and a {P * (1 - target):.2f} GiB reserve for graphs.")
        else:
            out.append("RAISE --mem-fraction-static (this is an init-time shortage: the weights left no room for the "
                       "KV cache); the log lacks the free-memory figures to compute the minimum.")
        out.append("or give each GPU more room: a larger --tp, a quantized checkpoint, or stop other processes on the GPUs.")
    elif a.shortage in ("graph_capture", "runtime", "kv_pool"):
        where = {"graph_capture": "while capturing CUDA graphs", "runtime": "while serving (prefill/decode)",
                 "kv_pool": "while allocating the memory pool"}[a.shortage]
        if m is not None:
            lower = round(max(0.3, m - 0.04), 2)
            tok_now, tok_low = _tokens_at(a, m), _tokens_at(a, lower)
            if a.kv_tokens and a.bytes_per_token and P:
                # anchor on the pool the log shows, move it by the memory the lower fraction gives back
                tok_now = a.kv_tokens
                tok_low = max(0, int(a.kv_tokens - P * (m - lower) * GIB / a.bytes_per_token))
            extra = f" (+{P * (m - lower):.2f} GiB of reserve)" if P else ""
            kv_note = f"; the KV cache shrinks to ≈{tok_low:,} tokens from ≈{tok_now:,}" if tok_low and tok_now else ""
            out.append(f"LOWER --mem-fraction-static from {m:g} to about {lower:.2f}{extra}: memory ran out {where}, "
                       f"after the KV cache took its share{kv_note}. Each −0.01 moves "
                       f"{step:.2f} GiB from the KV cache to the reserve." if step else
                       f"LOWER --mem-fraction-static from {m:g} to about {lower:.2f}: memory ran out {where}.")
        else:
            out.append(f"LOWER --mem-fraction-static: memory ran out {where}, after the KV cache took its share.")
        if a.shortage == "graph_capture":
            bs = a.cuda_graph_max_bs
            half = max(8, bs // 2) if bs else None
            out.append(f"or lower --cuda-graph-max-bs{f' from {bs} to {half}' if bs else ' (e.g. to 64)'}: graph memory "
                       "grows with the largest captured batch; the KV cache is unchanged.")
        if a.shortage == "runtime":
            chunk = run.server_args.get("chunked_prefill_size")
            out.append(f"or lower --chunked-prefill-size{f' from {chunk} to {chunk // 2}' if isinstance(chunk, int) and chunk > 0 else ''}"
                       " (smaller prefill activations) or --max-running-requests; the KV cache is unchanged.")
        out.append("never raise --mem-fraction-static for this failure: it takes memory from the reserve that ran out.")
    if a.kv_tokens and a.context_len and a.kv_tokens < a.context_len and m is not None and a.bytes_per_token and P and A:
        need = 1 - (A - a.context_len * a.bytes_per_token / GIB) / P
        out.append(f"to hold one full {a.context_len:,}-token request the KV cache needs "
                   f"{a.context_len * a.bytes_per_token / GIB:.2f} GiB: mem_fraction_static ≥ {need:.3f}, or a smaller "
                   "--context-length.")
    return out


def _short_rank(ranks: list[RankBudget]) -> tuple[str, float, float] | None:
    """(rank, its free GiB, the others' median) when one rank saw much less free memory before weights."""
    pres = sorted((r.pre_load_free_gib, r.rank) for r in ranks if r.pre_load_free_gib is not None)
    if len(pres) < 2:
        return None
    (lo, rank), others = pres[0], [p for p, _ in pres[1:]]
    median = others[len(others) // 2]
    return (rank, lo, median) if median - lo > max(1.0, 0.05 * median) else None


def what_if(a: MemoryAnalysis, m: float, bs: int | None) -> WhatIf:
    P, A = a.pre_load_free_gib, a.post_load_free_gib
    if not P or A is None:
        return WhatIf(m, bs, None, None, None, None, None, None,
                      "cannot predict: the log lacks the free memory before and after the weights")
    if not math.isfinite(m) or abs(m) > GIB_LIMIT or (bs is not None and not 0 < bs < 10**9):
        return WhatIf(m if math.isfinite(m) else 0.0, bs, None, None, None, None, None, None,
                      "cannot predict: the mem_fraction_static or batch size asked for is not a usable number")
    budget = A - P * (1 - m)
    reserve = P * (1 - m)
    tokens = max(0, int(budget * GIB / a.bytes_per_token)) if a.bytes_per_token and budget > 0 else (0 if budget <= 0 else None)
    graph = None
    if a.graph_gib is not None:
        graph = a.graph_gib * (bs / a.cuda_graph_max_bs) if (bs and a.cuda_graph_max_bs) else a.graph_gib
    headroom = reserve - graph if graph is not None else None
    passes = budget > 0
    if not passes:
        verdict = (f"the launch cannot pass the KV check: the KV budget would be {budget:.2f} GiB; the minimum "
                   f"mem_fraction_static is {1 - A / P:.3f}")
    else:
        verdict = f"passes the KV check with {budget:.2f} GiB for the KV cache" + (f" (≈{tokens:,} tokens)" if tokens else "")
        if headroom is not None:
            verdict += f"; {headroom:.2f} GiB left for activations after ≈{graph:.2f} GiB of graphs"
        if a.context_len and tokens is not None and tokens < a.context_len:
            verdict += f"; fewer tokens than one {a.context_len:,}-token request"
    return WhatIf(m, bs, _r(budget, 2), tokens, _r(reserve, 2), _r(graph, 2), _r(headroom, 2), passes, verdict)


def template_values(a: MemoryAnalysis) -> dict[str, Any]:
    """Numbers rule templates can use as `{mem.NAME}`."""
    d = {k: v for k, v in a.to_dict().items() if k not in ("ranks", "what_if")}
    if a.minimum_mem_fraction_static is not None:
        d["suggest_raise_to"] = round(min(0.99, a.minimum_mem_fraction_static + 0.03), 2)
    m = a.configured_mem_fraction_static if a.configured_mem_fraction_static is not None else a.effective_mem_fraction_static
    if m is not None:
        d["suggest_lower_to"] = round(max(0.3, m - 0.04), 2)
        d["current"] = m
    d["advice_text"] = " ".join(a.advice)
    pres = [r.pre_load_free_gib for r in a.ranks if r.pre_load_free_gib is not None]
    if pres:
        d["max_pre_load_free_gib"], d["min_pre_load_free_gib"] = max(pres), min(pres)
        d["pre_load_spread_gib"] = round(max(pres) - min(pres), 2)
    short = _short_rank(a.ranks)
    if short is not None:
        d["short_rank"], d["short_rank_free_gib"] = short[0], short[1]
    return d


# ------------------------------------------------------------------------------------------------
# the picture


BAR_WIDTH = 60
BAR_LEGEND = "W weights  K KV cache  G CUDA graphs  r reserve (activations)  . free at ready  ? unknown"


def rank_bar(r: RankBudget) -> str:
    """`|WWWWKKKKGGrr..|` scaled to the free memory before weights; letters, so no colour is needed."""
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


def memory_text(a: MemoryAnalysis) -> str:
    out: list[str] = []
    f = lambda v, spec=".2f": "?" if v is None else format(v, spec)
    out.append(f"KV-cache budget  (era {a.era or '?'}{', memory ran out: ' + a.shortage if a.shortage else ''})")
    out.append(f"  configured mem_fraction_static  {f(a.configured_mem_fraction_static, 'g')}")
    out.append(f"  effective (from the numbers)    {f(a.effective_mem_fraction_static, '.3f')}")
    out.append(f"  minimum that can start          {f(a.minimum_mem_fraction_static, '.3f')}")
    out.append(f"  P free before weights {f(a.pre_load_free_gib)} GiB   A after {f(a.post_load_free_gib)} GiB   "
               f"weights {f(a.weights_gib)} GiB   KV {f(a.kv_cache_gib)} GiB / {a.kv_tokens if a.kv_tokens else '?'} tokens"
               f" ({f(a.bytes_per_token, ',.0f')} B/token)   reserve {f(a.reserve_gib)} GiB")
    out.append("")
    out.append("The formula with this run's numbers")
    out.extend("  " + ln for ln in a.formula)
    if a.ranks:
        out.append("")
        out.append("Per rank (GiB)        before   after  weights     KV  tokens    pool-end  graphs  at-ready  m_eff")
        for r in a.ranks:
            out.append(f"  {r.rank:<18} {f(r.pre_load_free_gib):>7} {f(r.post_load_free_gib):>7} {f(r.weights_gib):>8}"
                       f" {f(r.kv_cache_gib):>6} {r.kv_tokens if r.kv_tokens else '?':>7} {f(r.pool_end_free_gib):>10}"
                       f" {f(r.graph_gib):>7} {f(r.available_gpu_mem_gib):>9} {f(r.effective_mem_fraction_static, '.3f'):>6}")
        out.append("")
        out.append("GPU memory per rank (of the free memory before weights)")
        for r in a.ranks:
            out.append(f"  {r.rank:<18} |{rank_bar(r)}| {f(r.pre_load_free_gib)} GiB")
        out.append(f"  {BAR_LEGEND}")
    if a.findings:
        out.append("")
        out.append("Findings")
        out.extend(f"  - {x}" for x in a.findings)
    if a.advice:
        out.append("")
        out.append("What to change")
        out.extend(f"  {i}. {x}" for i, x in enumerate(a.advice, 1))
    if a.what_if is not None:
        w = a.what_if
        out.append("")
        out.append(f"What if --mem-fraction-static {w.mem_fraction_static:g}"
                   + (f" --cuda-graph-max-bs {w.cuda_graph_max_bs}" if w.cuda_graph_max_bs else ""))
        out.append(f"  KV budget {f(w.kv_budget_gib)} GiB, KV tokens {w.kv_tokens if w.kv_tokens is not None else '?'}, "
                   f"reserve {f(w.reserve_gib)} GiB, graphs ≈{f(w.graph_gib_estimate)} GiB, headroom {f(w.headroom_gib)} GiB")
        out.append(f"  → {w.verdict}")
    return "\n".join(out)
