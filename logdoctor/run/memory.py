"""The KV-cache budget, rebuilt from the log's own numbers (catalog section e), and what it says.

    rest (KV GiB) = A − P · (1 − m)        P: free GiB before weights (min over ranks)
                                           A: free GiB after weights (min over ranks), m: mem_fraction_static
    m_eff        = 1 − (A − KV) / P        the fraction the numbers say was in force
    minimum m    = 1 − A / P               below it the KV budget is ≤ 0 and the launch cannot start
    reserve      = P · (1 − m)             what is left for activations and CUDA graphs

This module reads the numbers and states the findings (fraction not in force, ranks unbalanced, reserve
thin, the one-line budget); `memory_advice` predicts what-ifs on both limits and ranks the remedies.
Where a quantity has two sources (the KV line's `#tokens` and the scheduler's `max_total_num_tokens`), one
is used everywhere and the other recorded with the name of the source used.
"""
from __future__ import annotations

import math
from typing import Any

from logdoctor.records import asdict, dataclass, field
from logdoctor.run.model import RankMemory, Run

ACTIVATION_MARGIN_GIB = 1.0  # stated as an allowance wherever it is used
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
    passes_kv_check: bool | None               # kept for old callers: the same as kv_ok
    verdict: str
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    tp: int | None = None
    activations_gib: float | None = None       # one prefill chunk, SGLang's own reserve allowance (e.2)
    kv_ok: bool | None = None                  # the KV budget is > 0 (SGLang's init check passes)
    reserve_ok: bool | None = None             # the reserve holds the CUDA graphs (capture passes)
    fails_first: str | None = None             # "kv" | "reserve" | None: the first limit hit, in launch order
    unknown: list[str] = field(default_factory=list)


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
    # where m came from: "server_args" | "error text" (M03/M04/M05 print it) | None
    mem_fraction_static_source: str | None = None
    minimum_viable_from_error: float | None = None   # M05's "minimum viable = 1 - available/pre = x"
    pre_load_free_source: str | None = None     # P from 'Load weight begin', else derived from M05
    kv_tokens_source: str | None = None         # which line kv_tokens comes from
    kv_tokens_other: int | None = None          # the other source's value when it differs
    kv_tokens_other_source: str | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    tp_size: int | None = None
    graphs: dict[str, Any] | None = None       # GraphMemory.to_dict() when the log shows a capture
    fraction_not_in_force: bool = False
    ranks_unbalanced: bool = False
    headroom_gib: float | None = None          # free after capture / at ready, min over ranks
    headroom_source: str | None = None
    headroom_needed_gib: float | None = None
    headroom_needed_for: str | None = None
    reserve_thin: bool = False
    budget_line: str = ""
    remedies: list[dict[str, Any]] = field(default_factory=list)

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


def _graph_memory(run: Run) -> Any:
    """The GRAPH stage's fit of the capture (`run.graph_memory`), None until that module exists or when the
    log shows no capture."""
    try:
        from logdoctor.run.graph_memory import graph_memory
    except ImportError:
        return None
    return graph_memory(run)


def _kv_tokens(run: Run, kv_rank: RankBudget | None, ranks: list[RankBudget]) -> tuple[int | None, str | None,
                                                                                        int | None, str | None]:
    """(tokens, source, other value, other source): the KV line's `#tokens` sized the pool the KV GiB figure
    describes, so it is the one used; `max_total_num_tokens=` (page-rounded, capped, PP-synced) is recorded."""
    summary = _tokens(run.scheduler_summary.get("max_total_num_tokens"))
    line_tokens = kv_rank.kv_tokens if kv_rank else None
    if line_tokens is None and summary is None:
        line_tokens = next((r.kv_tokens for r in ranks if r.kv_tokens), None)
    if line_tokens is not None and (summary is None or kv_rank is not None):
        other = summary if summary is not None and summary != line_tokens else None
        return (line_tokens, "KV Cache is allocated. #tokens", other,
                "max_total_num_tokens=" if other is not None else None)
    return (summary, "max_total_num_tokens=", None, None) if summary is not None else (None, None, None, None)


def analyse(run: Run, what_if_mfs: float | None = None, what_if_bs: int | None = None, *,
            what_if_chunk: int | None = None, what_if_max_running: int | None = None,
            what_if_tp: int | None = None) -> MemoryAnalysis:
    from logdoctor.run import memory_advice  # advice builds on this analysis: imported when needed
    ranks = [_rank_budget(rm) for rm in run.rank_list()]
    sa = run.server_args
    errors = memory_advice.error_values(run)
    m = _num(sa.get("mem_fraction_static"))
    if m is not None and abs(m) > GIB_LIMIT:
        m = None  # `mem_fraction_static=1e300` is no setting: unknown rather than overflowing below
    m_source = "server_args" if m is not None else None
    m_error = errors.get("mem_fraction_static")
    if m is None and m_error is not None:
        m, m_source = m_error, "error text"
    pres = [r.pre_load_free_gib for r in ranks if r.pre_load_free_gib is not None]
    posts = [r.post_load_free_gib for r in ranks if r.post_load_free_gib is not None]
    P = min(pres) if pres else None
    A = min(posts) if posts else None
    p_source = "Load weight begin. avail mem=" if P is not None else None
    viable = errors.get("viable")
    if P is None and A is not None and viable is not None and 0 < viable < 0.999 and A > 0:
        # M05 prints 1 − A/P: the P SGLang measured follows from it (to its 4 decimals)
        P, p_source = round(A / (1 - viable), 2), "SGLang's error: A / (1 − minimum viable)"
    kv_rank = next((r for r in ranks if r.kv_cache_gib is not None), None)
    KV = kv_rank.kv_cache_gib if kv_rank else None
    kv_estimated = False
    if KV is None:
        # before v0.4.1.post6 no line prints the KV size; "Memory pool end" ≈ A − KV (plus small req pools)
        ends = [(r.post_load_free_gib, r.pool_end_free_gib) for r in ranks
                if r.post_load_free_gib is not None and r.pool_end_free_gib is not None]
        if ends:
            after, pool_end = min(ends)
            KV, kv_estimated = round(after - pool_end, 2), True
    tokens, tokens_source, tokens_other, tokens_other_source = _kv_tokens(run, kv_rank, ranks)
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
    era = "v0.5.14+" if any(f.kind == "kv_no_memory_after_weights" for f in run.failures) else run.era
    missing = [name for name, v in (("mem_fraction_static (the server_args line)", m),
                                    ("free memory before weights ('Load weight begin. avail mem=')", P),
                                    ("free memory after weights ('Load weight end. … avail mem=')", A),
                                    ("KV cache size ('KV Cache is allocated. …')", KV)) if v is None]
    a = MemoryAnalysis(
        era=era, shortage=shortage_stage(run), configured_mem_fraction_static=m,
        effective_mem_fraction_static=_r(eff), minimum_mem_fraction_static=_r(minimum), pre_load_free_gib=P,
        post_load_free_gib=A, weights_gib=weights, kv_cache_gib=KV, kv_tokens=tokens, bytes_per_token=bpt,
        reserve_gib=_r(reserve, 2), kv_budget_gib=_r(budget, 2), graph_gib=graphs, cuda_graph_max_bs=bs,
        context_len=ctx, missing=missing, ranks=ranks, kv_estimated=kv_estimated,
        mem_fraction_static_source=m_source, minimum_viable_from_error=errors.get("viable"),
        pre_load_free_source=p_source,
        kv_tokens_source=tokens_source, kv_tokens_other=tokens_other, kv_tokens_other_source=tokens_other_source,
        chunked_prefill_size=_chunk(run), max_running_requests=_tokens(
            run.scheduler_summary.get("max_running_requests", sa.get("max_running_requests"))),
        tp_size=_tokens(run.tp_size) or _tokens(sa.get("tp_size")),
    )
    gm = _graph_memory(run)
    a.graphs = gm.to_dict() if gm is not None else None
    if a.graph_gib is None and gm is not None and gm.total_gib is not None and gm.failed_at_bs is None:
        a.graph_gib = _gib(gm.total_gib)
    a.formula = _formula_lines(era, P, A, m_used, KV, bpt)
    if p_source and p_source.startswith("SGLang"):
        a.formula.append(f"  (P = {P:.2f} GiB = A / (1 − {viable:.4f}), from SGLang's 'minimum viable': the log has no "
                         "'Load weight begin' line)")
    if kv_estimated:
        a.formula.append("  (KV size estimated as A − 'Memory pool end' free memory: this SGLang prints no KV size)")
    if m_source == "error text":
        a.formula.append(f"  (m = {m:g} read from the error message: the log has no server_args line)")
    _states(a, run, gm)
    a.findings = _findings(a, ranks, run)
    if m_error is not None and m is not None and abs(m_error - m) > 1e-6:
        # the error prints the server's own value: a different server_args line belongs to another process
        a.findings.insert(0, f"the error text says mem_fraction_static={m_error:g} but the server_args line says {m:g}: "
                             f"{m:g} is used here; the server that failed ran with {m_error:g}.")
    a.remedies = memory_advice.remedies(a, run, gm, errors)
    a.advice = [r["text"] for r in a.remedies]
    if any(v is not None for v in (what_if_mfs, what_if_bs, what_if_chunk, what_if_max_running, what_if_tp)):
        # unless asked for, the fraction is the one the run had: in force when the configured one was not
        in_force = a.effective_mem_fraction_static if a.fraction_not_in_force else None
        base_m = round(in_force, 2) if in_force is not None else (m_used or 0.0)
        a.what_if = memory_advice.what_if(a, what_if_mfs if what_if_mfs is not None else base_m, what_if_bs,
                                          gm, chunk=what_if_chunk, max_running=what_if_max_running, tp=what_if_tp)
    return a


def _chunk(run: Run) -> int | None:
    v = run.server_args.get("chunked_prefill_size", run.scheduler_summary.get("chunked_prefill_size"))
    return _tokens(v)


def prefill_activations_gib(chunk: int | None) -> float | None:
    """SGLang's own reserve allowance for one prefill chunk (e.2, v0.5.3+: max(chunk, 2048) × 1.5 MiB)."""
    return None if chunk is None else round(max(chunk, 2048) * 1.5 / 1024, 2)


def _states(a: MemoryAnalysis, run: Run, gm: Any) -> None:
    """The yes/no findings a rule can select on, and the one-line budget."""
    m, eff = a.configured_mem_fraction_static, a.effective_mem_fraction_static
    tolerance = ROUNDING_TOLERANCE * (3 if a.kv_estimated else 1)
    if eff is not None and m is not None:
        # only a KV cache larger than m allows is impossible; a smaller one is a --max-total-tokens cap, a hybrid
        # split, a draft model's share or page rounding
        a.fraction_not_in_force = eff - m > tolerance
    a.ranks_unbalanced = _spread(a.ranks) is not None
    # per rank: the scheduler's figure at ready, else the free memory its capture ended with; the least of them
    free_after: dict[str, tuple[float, str]] = {}
    for rm in run.rank_list():
        end = _gib(rm.graph_end_free_gib)
        if end is not None:
            free_after[rm.rank] = (end, "Capture cuda graph end. avail mem=")
    for r in a.ranks:
        if r.available_gpu_mem_gib is not None:
            free_after[r.rank] = (r.available_gpu_mem_gib, "available_gpu_mem= at ready")
    if free_after:
        rank, (a.headroom_gib, a.headroom_source) = min(free_after.items(), key=lambda kv: kv[1][0])
        if len(free_after) > 1:
            a.headroom_source += f" ({rank}, the least of {len(free_after)} ranks)"
    # the log measures one need, the next larger graph; prefill activations are printed nowhere, and SGLang's own
    # allowance (max(chunk, 2048) × 1.5 MiB) sizes the whole reserve, graphs included, so it is no measure of what
    # is left: a stated general margin stands in for them
    needs = [(ACTIVATION_MARGIN_GIB, f"a general margin of {ACTIVATION_MARGIN_GIB:g} GiB for prefill and decode activations "
                                     "(an allowance, not measured: the log prints no activation sizes)")]
    per_graph = _gib(getattr(gm, "per_graph_gib", None)) if gm is not None else None
    if per_graph:
        needs.append((round(per_graph, 2), f"the next larger CUDA graph (≈{per_graph:.2f} GiB per graph, fitted from "
                                           "the capture)"))
    if a.headroom_gib is not None:
        a.headroom_needed_gib, a.headroom_needed_for = max(needs)
    if a.headroom_gib is not None and a.headroom_needed_gib is not None:
        a.reserve_thin = a.headroom_gib < a.headroom_needed_gib
    a.budget_line = budget_line(a)


def _fraction(m: float) -> str:
    """0.9 as 0.90 beside an in-force 0.88; 0.848 as it was given."""
    return f"{m:.2f}" if abs(m * 100 - round(m * 100)) < 1e-9 else f"{m:g}"


def budget_line(a: MemoryAnalysis) -> str:
    """`weights 70.3 | KV 10.4 (159K tok) | graphs 9.3 | free 2.0 GiB per rank, m configured 0.55, in force 0.88`;
    an unknown term is named unknown; empty when the log has no memory figures at all."""
    if all(v is None for v in (a.weights_gib, a.kv_cache_gib, a.graph_gib, a.headroom_gib, a.pre_load_free_gib)):
        return ""
    g = lambda v: "unknown" if v is None else f"{v:.1f}"
    tok = f" ({a.kv_tokens / 1000:.0f}K tok)" if a.kv_tokens else ""
    graphs = f"graphs {g(a.graph_gib)}"
    if a.graph_gib is None and a.graphs and a.graphs.get("failed_at_bs") is not None:
        full = _gib(a.graphs.get("full_capture_gib"))
        graphs = f"graphs ≈{full:.1f} needed, capture died" if full is not None else "graphs unknown, capture died"
    parts = [f"weights {g(a.weights_gib)}", f"KV {g(a.kv_cache_gib)}{tok}", graphs,
             f"free {g(a.headroom_gib)} GiB per rank" if a.headroom_gib is not None else "free unknown (GiB per rank)"]
    m = a.configured_mem_fraction_static
    mtext = f"m configured {_fraction(m)}" if m is not None else "m not printed"
    if a.effective_mem_fraction_static is not None:
        mtext += f", in force {a.effective_mem_fraction_static:.2f}"
    return " | ".join(parts) + ", " + mtext


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
    # an effective fraction is computed only from P, A and KV: all three are known whenever it is
    if (eff is not None and m is not None and P is not None and A is not None and KV is not None
            and abs(eff - m) > tolerance):
        if eff > m:
            need_p = (A - KV) / (1 - m) if m < 1 else None
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
    spread = _spread(ranks)
    if spread is not None:
        lo, hi = spread
        out.append(f"rank {lo[0]} had {lo[1]:.2f} GiB free before the weights, {hi[1] - lo[1]:.2f} GiB less than "
                   f"{hi[0]} ({hi[1]:.2f} GiB): another process is using that GPU. SGLang sizes every rank by the "
                   "smallest value.")
    if a.reserve_thin and a.headroom_gib is not None:
        out.append(f"the reserve after capture is thin: {a.headroom_gib:.2f} GiB free ({a.headroom_source}), below "
                   f"the {a.headroom_needed_gib:.2f} GiB {a.headroom_needed_for} needs.")
    if a.kv_tokens_other is not None:
        out.append(f"two sources give the KV pool size: '{a.kv_tokens_source}' {a.kv_tokens:,} and "
                   f"'{a.kv_tokens_other_source}' {a.kv_tokens_other:,} (page rounding, caps); every figure here uses "
                   f"{a.kv_tokens:,}, the count the KV size line describes.")
    if a.kv_tokens and a.context_len and a.kv_tokens < a.context_len:
        out.append(f"the KV pool holds {a.kv_tokens:,} tokens, less than one full-length request "
                   f"(context_len={a.context_len:,}): long prompts will be truncated or rejected.")
    elif a.kv_tokens and a.context_len:
        out.append(f"the KV pool holds {a.kv_tokens:,} tokens: {a.kv_tokens // a.context_len} request(s) at the full "
                   f"context length of {a.context_len:,}, about {a.kv_tokens // 4096} at 4K tokens each.")
    return out


def _spread(ranks: list[RankBudget]) -> tuple[tuple[str, float], tuple[str, float]] | None:
    """((rank, GiB), (rank, GiB)): the least and most free memory before weights, when they differ by more
    than rounding and a CUDA context (1 GiB or 5 %)."""
    pres = [(r.rank, r.pre_load_free_gib) for r in ranks if r.pre_load_free_gib is not None]
    if len(pres) < 2:
        return None
    lo = min(pres, key=lambda x: x[1])
    hi = max(pres, key=lambda x: x[1])
    return (lo, hi) if hi[1] - lo[1] > max(1.0, 0.05 * hi[1]) else None


def _short_rank(ranks: list[RankBudget]) -> tuple[str, float, float] | None:
    """(rank, its free GiB, the others' median) when one rank saw much less free memory before weights."""
    pres = sorted((r.pre_load_free_gib, r.rank) for r in ranks if r.pre_load_free_gib is not None)
    if len(pres) < 2:
        return None
    (lo, rank), others = pres[0], [p for p, _ in pres[1:]]
    median = others[len(others) // 2]
    return (rank, lo, median) if median - lo > max(1.0, 0.05 * median) else None


def template_values(a: MemoryAnalysis) -> dict[str, Any]:
    """Numbers rule templates can use as `{mem.NAME}`."""
    d = {k: v for k, v in a.to_dict().items() if k not in ("ranks", "what_if")}
    # the suggestions are the computed remedies' values where there are some (the old fixed steps otherwise)
    computed = {(r["flag"], r["fixes"]): r["value"] for r in reversed(a.remedies) if r["value"] is not None}
    if computed.get(("--mem-fraction-static", "kv")) is not None:
        d["suggest_raise_to"] = computed[("--mem-fraction-static", "kv")]
    elif a.minimum_mem_fraction_static is not None and a.minimum_mem_fraction_static + 0.03 <= 0.95:
        d["suggest_raise_to"] = round(a.minimum_mem_fraction_static + 0.03, 2)
    m = a.configured_mem_fraction_static if a.configured_mem_fraction_static is not None else a.effective_mem_fraction_static
    if m is not None:
        d["suggest_lower_to"] = computed.get(("--mem-fraction-static", "reserve"), round(max(0.3, m - 0.04), 2))
        d["current"] = m
    if computed.get(("--cuda-graph-max-bs", "reserve")) is not None:
        d["suggest_cuda_graph_max_bs"] = computed[("--cuda-graph-max-bs", "reserve")]
    d["advice_text"] = " ".join(a.advice)
    d["first_remedy"] = a.remedies[0]["text"] if a.remedies else ""
    pres = [r.pre_load_free_gib for r in a.ranks if r.pre_load_free_gib is not None]
    if pres:
        d["max_pre_load_free_gib"], d["min_pre_load_free_gib"] = max(pres), min(pres)
        d["pre_load_spread_gib"] = round(max(pres) - min(pres), 2)
    short = _short_rank(a.ranks)
    if short is not None:
        d["short_rank"], d["short_rank_free_gib"] = short[0], short[1]
    return d
