"""What-ifs on both memory limits and the remedies, computed from the run's own numbers (catalog e.1–e.5).

A launch meets two limits in order: the KV check at init (budget A − P·(1 − m) must be > 0) and then the
reserve P·(1 − m), which must hold the request pools and the CUDA graphs (capture) and, while serving,
the prefill activations. A what-if predicts both and names the one that fails first; a remedy carries the
value the numbers say would work, ranked by whether it fixes the limit that failed, then by the KV tokens
it costs. Values SGLang printed in its error (the fraction, the minimum viable fraction, the size torch
tried to allocate) are read from the failure texts and used.
"""
from __future__ import annotations

import math
from typing import Any

from logdoctor.run.memory import ACTIVATION_MARGIN_GIB, GIB, GIB_LIMIT, MemoryAnalysis, WhatIf, _gib, _r, prefill_activations_gib
from logdoctor.run.model import Run

MFS_MAX = 0.95          # above it nothing is left for graphs and activations on any GPU: never advised
HEADROOM_KEEP_GIB = 1.0  # what a remedy keeps free after capture, at least, for the first prefill
_ERROR_VALUES = {  # failure kind -> the numbers its message carries that the analysis uses (finishers read them)
    "kv_not_enough_memory": ("mem_fraction_static", "minimum", "viable"),
    "kv_no_memory_after_weights": ("mem_fraction_static", "minimum", "viable"),
    "torch_oom": ("tried_gib", "free_gib"),
}


def error_values(run: Run) -> dict[str, float]:
    """Numbers SGLang and torch print inside the failure: `mem_fraction_static` (M03/M04/M05), `minimum`
    (M05 `Raise … above s`), `viable` (M05 `minimum viable = x`), `tried_gib` / `free_gib` (torch OOM); the
    first failure that prints each wins."""
    out: dict[str, float] = {}
    for f in run.failures:
        for key in _ERROR_VALUES.get(f.kind, ()):
            v = f.values.get(key)
            if key not in out and isinstance(v, (int, float)):
                out[key] = float(v)
    fractions = ("mem_fraction_static", "minimum", "viable")  # a fraction outside [0, 1] is no fraction
    return {k: v for k, v in out.items()
            if math.isfinite(v) and 0 <= v < GIB_LIMIT and (k not in fractions or v <= 1)}


def valid_mfs(v: float) -> bool:
    """A fraction SGLang accepts and this tool would advise: in (0, MFS_MAX]."""
    return 0 < v <= MFS_MAX


# ------------------------------------------------------------------------------------------------
# the prediction


def _overhead_gib(a: MemoryAnalysis) -> float:
    """What the reserve loses before the graphs (req-to-token pools and buffers): A − KV − 'Memory pool end'."""
    ends = [r.pool_end_free_gib for r in a.ranks if r.pool_end_free_gib is not None]
    if a.post_load_free_gib is None or a.kv_cache_gib is None or not ends or a.kv_estimated:
        return 0.0
    return max(0.0, a.post_load_free_gib - a.kv_cache_gib - min(ends))


def _current_bs(a: MemoryAnalysis, gm: Any) -> int | None:
    if a.cuda_graph_max_bs:
        return a.cuda_graph_max_bs
    return max(gm.captured_bs) if gm is not None and gm.captured_bs else None


def graph_estimate(a: MemoryAnalysis, gm: Any, bs: int | None) -> tuple[float | None, str]:
    """(GiB of CUDA graphs with the largest captured batch `bs` (None: as the log ran), how it was got)."""
    cur = _current_bs(a, gm)
    target = bs or cur
    if gm is not None and target:
        est = _gib(gm.estimate_gib(target))
        if est is not None:
            return est, f"fitted from the capture ({gm.per_graph_gib or 0:.2f} GiB per graph)"
    if gm is not None and bs is None and _gib(gm.total_gib) is not None:
        return _gib(gm.total_gib), "the capture's mem usage"
    if a.graph_gib is not None:
        if bs and cur and bs != cur:
            return a.graph_gib * bs / cur, f"scaled linearly from the log's {a.graph_gib:.2f} GiB at bs {cur}"
        return a.graph_gib, "the capture's mem usage"
    return None, ""


def tokens_for(a: MemoryAnalysis, budget_gib: float) -> int | None:
    return max(0, int(budget_gib * GIB / a.bytes_per_token)) if a.bytes_per_token else None


def what_if(a: MemoryAnalysis, m: float, bs: int | None, gm: Any = None, *, chunk: int | None = None,
            max_running: int | None = None, tp: int | None = None) -> WhatIf:
    P, A = a.pre_load_free_gib, a.post_load_free_gib
    w = WhatIf(m, bs, None, None, None, None, None, None, "", chunked_prefill_size=chunk,
               max_running_requests=max_running, tp=tp)
    if not P or A is None:
        w.unknown = [n for n, v in (("free memory before the weights (P)", P), ("free memory after the weights (A)", A))
                     if not v]
        w.verdict = "cannot predict: the log lacks the free memory before and after the weights"
        return w
    if (not math.isfinite(m) or abs(m) > GIB_LIMIT or any(v is not None and not 0 < v < 10**9
                                                          for v in (bs, chunk, max_running, tp))):
        w.mem_fraction_static = m if math.isfinite(m) else 0.0
        w.verdict = "cannot predict: a value asked for is not a usable number"
        return w
    unknown: list[str] = []
    a_new = A
    if tp is not None and tp != a.tp_size:
        if a.tp_size and a.weights_gib is not None:
            a_new = A + a.weights_gib - a.weights_gib * a.tp_size / tp  # weights split over tp ranks
            unknown.append(f"free memory before the weights at --tp {tp} (the log's P is kept)")
        else:
            unknown.append(f"weights per rank at --tp {tp} (the log shows no tp size or no weights figure)")
        unknown.append(f"KV bytes per token at --tp {tp} (split over ranks for MHA/GQA, replicated for MLA)")
        unknown.append(f"CUDA-graph memory per rank at --tp {tp} (the log's figure is kept)")
    budget = a_new - P * (1 - m)
    reserve = P * (1 - m)
    w.kv_ok = w.passes_kv_check = budget > 0
    w.kv_budget_gib, w.reserve_gib = _r(budget, 2), _r(reserve, 2)
    if tp is None or tp == a.tp_size:
        w.kv_tokens = tokens_for(a, budget) if budget > 0 else 0
        if w.kv_tokens is None:
            unknown.append("KV bytes per token (the log prints no KV size with a token count)")
    graph_bs = bs
    cur = _current_bs(a, gm)
    if max_running is not None and (graph_bs or cur) and max_running < (graph_bs or cur or 0):
        graph_bs = max_running  # SGLang captures no batch larger than the request slots
    graph, _how = graph_estimate(a, gm, graph_bs)
    overhead = _overhead_gib(a)
    if max_running is not None and a.max_running_requests and overhead:
        overhead *= max_running / a.max_running_requests  # the req-to-token pool grows with the slots
    w.activations_gib = prefill_activations_gib(chunk or a.chunked_prefill_size)
    if graph is None:
        unknown.append("CUDA-graph memory (the log shows no finished capture to measure or fit)")
    else:
        w.graph_gib_estimate = _r(graph, 2)
        w.headroom_gib = _r(reserve - overhead - graph, 2)
        w.reserve_ok = reserve - overhead - graph > 0
        need = _runtime_need(a, chunk)
        if need is not None and w.headroom_gib is not None:
            w.reserve_ok = w.reserve_ok and w.headroom_gib > need
    w.fails_first = "kv" if w.kv_ok is False else ("reserve" if w.reserve_ok is False else None)
    w.unknown = unknown
    w.verdict = _verdict(a, w, P, a_new)
    return w


def _runtime_need(a: MemoryAnalysis, chunk: int | None) -> float | None:
    """A run that died while serving with H GiB free needed more than H for its prefill: the lower bound the
    log proves, scaled with the chunk as SGLang's allowance scales."""
    if a.shortage != "runtime" or a.headroom_gib is None:
        return None
    now, new = a.chunked_prefill_size, chunk or a.chunked_prefill_size
    scale = max(new, 2048) / max(now, 2048) if now and new else 1.0
    return a.headroom_gib * scale


def _verdict(a: MemoryAnalysis, w: WhatIf, P: float, a_new: float) -> str:
    tok = f" (≈{w.kv_tokens:,} tokens)" if w.kv_tokens else ""
    graphs = (f"≈{w.graph_gib_estimate:.2f} GiB of CUDA graphs" if w.graph_gib_estimate is not None
              else "CUDA graphs of unknown size")
    if w.fails_first == "kv":
        minimum = 1 - a_new / P
        text = f"fails first at the KV check: the KV budget would be {w.kv_budget_gib:.2f} GiB; "
        if a_new <= 0:
            text += (f"no --mem-fraction-static can start it: the weights per rank would need {-a_new:.2f} GiB more "
                     f"than the {P:.2f} GiB free before loading")
        elif not valid_mfs(minimum):
            text += (f"no --mem-fraction-static SGLang accepts can start it: after the weights only {a_new:.2f} GiB of "
                     f"{P:.2f} GiB would be free")
        else:
            text += f"the minimum mem_fraction_static is {minimum:.3f}"
    elif w.fails_first == "reserve":
        text = (f"passes the KV check with {w.kv_budget_gib:.2f} GiB{tok} but fails first on the reserve: "
                f"{w.reserve_gib:.2f} GiB leaves {w.headroom_gib:.2f} GiB after {graphs}"
                + (" and the prefill this run died on" if a.shortage == "runtime" else " (capture runs out of memory)"))
    else:
        text = f"passes the KV check with {w.kv_budget_gib:.2f} GiB for the KV cache{tok}"
        if w.reserve_ok:
            text += f" and the reserve: {w.reserve_gib:.2f} GiB leaves {w.headroom_gib:.2f} GiB after {graphs}"
            if w.headroom_gib is not None and w.headroom_gib < ACTIVATION_MARGIN_GIB:
                text += (f", under the {ACTIVATION_MARGIN_GIB:g} GiB general margin for activations (thin; an "
                         "allowance, not measured from the log)")
        else:
            text += "; the reserve cannot be checked: " + "; ".join(u for u in w.unknown if "CUDA-graph" in u)
    if a.context_len and w.kv_tokens is not None and 0 < w.kv_tokens < a.context_len:
        text += f"; fewer tokens than one {a.context_len:,}-token request"
    return text


# ------------------------------------------------------------------------------------------------
# the remedies

_FAILED_LIMIT = {"init": "kv", "graph_capture": "reserve", "runtime": "reserve", "kv_pool": "reserve",
                 "weights": "weights"}
_TIER_ROOT, _TIER_FIX, _TIER_OTHER, _TIER_NOTE, _TIER_CAUTION = 0, 1, 2, 3, 4  # NOTE: "no value can …"


def _remedy(flag: str | None, value: float | int | None, fixes: str | None, lost: int | None, text: str,
            tier: int) -> dict[str, Any]:
    return {"flag": flag, "value": value, "fixes": fixes, "kv_tokens_lost": lost, "text": text, "_tier": tier}


def _floor2(v: float) -> float:
    return math.floor(v * 100 + 1e-9) / 100


def _ceil2(v: float) -> float:
    return math.ceil(v * 100 - 1e-9) / 100


def remedies(a: MemoryAnalysis, run: Run, gm: Any, errors: dict[str, float]) -> list[dict[str, Any]]:
    """The remedies, ranked: the root cause first, then those that fix the limit that failed, by the KV
    tokens they cost (fewest first), then the rest, then what not to do."""
    failed = _FAILED_LIMIT.get(a.shortage or "")
    if a.shortage is None and a.fraction_not_in_force:
        failed = "config"  # a healthy run whose flag did not arrive: that is what to fix first
    out: list[dict[str, Any]] = []
    m = a.configured_mem_fraction_static if a.configured_mem_fraction_static is not None else a.effective_mem_fraction_static
    _short_rank_remedy(a, m, out)
    if a.shortage == "init":
        _init_remedies(a, gm, errors, m, out)
    elif a.shortage in ("graph_capture", "runtime", "kv_pool"):
        _reserve_remedies(a, run, gm, errors, m, out)
    elif a.shortage is None:
        _healthy_remedies(a, gm, out)
    _context_remedy(a, gm, out)
    for r in out:
        if r["text"].startswith("no ") and r["_tier"] == _TIER_OTHER:
            r["_tier"] = _TIER_NOTE  # says what cannot work: after what can
        elif r["fixes"] == failed and r["_tier"] == _TIER_OTHER:
            r["_tier"] = _TIER_FIX
    out.sort(key=lambda r: (r["_tier"], r["kv_tokens_lost"] is None, r["kv_tokens_lost"] or 0))
    for r in out:
        del r["_tier"]
    return out


def _short_rank_remedy(a: MemoryAnalysis, m: float | None, out: list[dict[str, Any]]) -> None:
    from logdoctor.run.memory import _short_rank
    short = _short_rank(a.ranks)
    if short is None or a.shortage not in ("init", "weights", "kv_pool") or m is None:
        return
    rank, p_short, p_others = short
    budget_without = (p_others - (a.weights_gib or 0.0)) - p_others * (1 - m)
    tok = tokens_for(a, budget_without) if budget_without > 0 else 0
    out.append(_remedy(None, None, "kv", -(tok or 0) + (a.kv_tokens or 0) if tok is not None else None,
                       f"FREE the GPU of rank {rank} first: it had {p_short:.2f} GiB free before the weights against "
                       f"{p_others:.2f} GiB on the others, and SGLang sizes every rank by the smallest. Without the other "
                       f"process the KV budget at m={m:g} would be {budget_without:.2f} GiB (nvidia-smi shows who holds it).",
                       _TIER_ROOT))


def _graph_need(a: MemoryAnalysis, gm: Any) -> tuple[float | None, str]:
    return graph_estimate(a, gm, None)


def sglang_reserve_gib(a: MemoryAnalysis, gm: Any) -> tuple[float, str] | None:
    """The reserve SGLang's own default fraction keeps (e.2, v0.5.3+): 512 MiB + max(chunk, 2048) × 1.5 MiB
    + max_bs × 2 MiB + tp/8 GiB, at least 10 GiB on a GPU above 60 GiB; with what it assumed."""
    if not a.pre_load_free_gib:
        return None
    chunk = a.chunked_prefill_size or 8192
    bs = _current_bs(a, gm) or 160
    tp = a.tp_size or 1
    mib = 512 + max(chunk, 2048) * 1.5 + bs * 2 + tp / 8 * 1024
    if a.pre_load_free_gib > 60:
        mib = max(mib, 10 * 1024)
    assumed = [n for n, v in (("chunk 8192", a.chunked_prefill_size), ("max bs 160", _current_bs(a, gm)),
                              ("tp 1", a.tp_size)) if v is None]
    return mib / 1024, (f"keeps SGLang's own default reserve of {mib / 1024:.2f} GiB for activations and graphs"
                        + (f", assuming {', '.join(assumed)}" if assumed else ""))


def _init_remedies(a: MemoryAnalysis, gm: Any, errors: dict[str, float], m: float | None,
                   out: list[dict[str, Any]]) -> None:
    P, A = a.pre_load_free_gib, a.post_load_free_gib
    lo = max(v for v in (a.minimum_mem_fraction_static, errors.get("viable"), errors.get("minimum"), 0.0)
             if v is not None)
    src = (f"; SGLang's error: raise above {errors.get('minimum', lo):.3f}, minimum viable {errors['viable']:.4f}"
           if errors.get("viable") is not None and abs(errors["viable"] - lo) < 0.0015 else "")
    graph, how = _graph_need(a, gm)
    if P and A is not None and lo < MFS_MAX:
        overhead = _overhead_gib(a)
        hi = MFS_MAX if graph is None else min(MFS_MAX, _floor2(1 - (graph + overhead + HEADROOM_KEEP_GIB) / P))
        sglang = sglang_reserve_gib(a, gm)
        if graph is None and sglang is not None and _floor2(1 - sglang[0] / P) > lo + 0.005:
            hi = min(MFS_MAX, _floor2(1 - sglang[0] / P))  # the reserve SGLang's own default would keep
        target = _ceil2(lo + 0.03) if graph is None and hi == MFS_MAX else hi
        target = min(target, MFS_MAX)
        if target > lo + 0.005 and valid_mfs(target):
            tok = tokens_for(a, A - P * (1 - target))
            reserve = P * (1 - target)
            graph_note = (f", graphs ≈{graph:.2f} GiB ({how})" if graph is not None
                          else f" ({sglang[1]})" if sglang is not None and hi < MFS_MAX
                          else "; the CUDA-graph memory is unknown, so the value keeps a margin above the minimum")
            out.append(_remedy("--mem-fraction-static", target, "kv", -(tok or 0) + (a.kv_tokens or 0) if tok is not None else None,
                               f"RAISE --mem-fraction-static to {target:.2f} (minimum {lo:.3f}{src}; below it the KV "
                               f"budget is ≤ 0): the KV cache gets {A - P * (1 - target):.2f} GiB"
                               + (f" (≈{tok:,} tokens)" if tok else "") + f" and the reserve {reserve:.2f} GiB{graph_note}.",
                               _TIER_OTHER))
        elif graph is not None:
            out.append(_remedy("--mem-fraction-static", None, "kv", None,
                               f"no --mem-fraction-static fits both limits: the KV cache needs more than {lo:.3f}{src}, the "
                               f"CUDA graphs (≈{graph:.2f} GiB, {how}) need at most {hi:.2f}; lower --cuda-graph-max-bs "
                               "with the fraction, or give each GPU more room (below).", _TIER_OTHER))
    elif P and A is not None:
        out.append(_remedy("--mem-fraction-static", None, "kv", None,
                           f"no --mem-fraction-static can start this launch: the weights ({a.weights_gib or P - A:.2f} GiB) "
                           f"leave {A:.2f} GiB of {P:.2f} GiB (minimum viable {lo:.3f}{src}, above {MFS_MAX}); what would: "
                           "a larger --tp, a quantized checkpoint, or freeing the GPUs.", _TIER_OTHER))
    elif lo > 0 and valid_mfs(_ceil2(lo + 0.03)):
        target = _ceil2(lo + 0.03)
        out.append(_remedy("--mem-fraction-static", target, "kv", None,
                           f"RAISE --mem-fraction-static to {target:.2f}: SGLang's error says the minimum is {lo:.4f}; the "
                           "log lacks the free-memory figures to size the KV cache it would get.", _TIER_OTHER))
    else:
        out.append(_remedy("--mem-fraction-static", None, "kv", None,
                           "RAISE --mem-fraction-static (this is an init-time shortage: the weights left no room for the "
                           "KV cache); the log lacks the free-memory figures to compute the minimum.", _TIER_OTHER))
    tp_text = "a larger --tp"
    if P and a.weights_gib and a.tp_size and m is not None and 0 < m < 1:
        # budget at tp' = P − W·tp/tp' − P(1 − m) > 0  ⇔  tp' > W·tp / (P·m)
        need = a.weights_gib * a.tp_size / (P * m)
        tp_new = 1 << max(0, math.ceil(math.log2(max(need * 1.05, a.tp_size + 1))))
        tp_text = f"a larger --tp ({tp_new}: weights ≈{a.weights_gib * a.tp_size / tp_new:.2f} GiB per rank)"
        out.append(_remedy("--tp", tp_new, "kv", None,
                           f"or give each GPU more room: {tp_text}, a quantized checkpoint, or stop other processes on "
                           "the GPUs.", _TIER_OTHER))
    else:
        out.append(_remedy(None, None, "kv", None, f"or give each GPU more room: {tp_text}, a quantized checkpoint, or "
                           "stop other processes on the GPUs.", _TIER_OTHER))


def _pick_bs(gm: Any, cur: int, ok: Any) -> tuple[int, float] | None:
    """The largest captured batch size below `cur` whose graphs pass `ok(estimate)`, with that estimate."""
    for b in sorted((b for b in gm.captured_bs if 1 <= b < cur), reverse=True):
        est = _gib(gm.estimate_gib(b))
        if est is not None and ok(est):
            return b, est
    return None


def _reserve_remedies(a: MemoryAnalysis, run: Run, gm: Any, errors: dict[str, float], m: float | None,
                      out: list[dict[str, Any]]) -> None:
    P = a.pre_load_free_gib
    where = {"graph_capture": "while capturing CUDA graphs", "runtime": "while serving (prefill/decode)",
             "kv_pool": "while allocating the memory pool"}[a.shortage or "runtime"]
    overhead = _overhead_gib(a)
    graph_full, how = _graph_need(a, gm)
    reserve = P * (1 - m) if P and m is not None else None
    cur = _current_bs(a, gm)
    per = _gib(getattr(gm, "per_graph_gib", None)) if gm is not None else None
    # GiB the failure needed beyond what it had, plus what a remedy keeps free: the larger of what the graph
    # fit says and what torch's "Tried to allocate X … of which Y is free" says
    shorts: list[float] = []
    if a.shortage == "graph_capture" and reserve is not None and graph_full is not None:
        shorts.append(graph_full + overhead + HEADROOM_KEEP_GIB - reserve)
    if errors.get("tried_gib") is not None:
        shorts.append(errors["tried_gib"] - errors.get("free_gib", 0.0) + HEADROOM_KEEP_GIB)
    short = max(shorts) if shorts else None
    # --cuda-graph-max-bs: sized from the per-graph cost when the capture shows it
    if gm is not None and gm.captured_bs and cur and reserve is not None and graph_full is not None and short is not None:
        picked = _pick_bs(gm, cur, lambda est: graph_full - est >= short)
        if picked is not None:
            b, est = picked
            keep = reserve - overhead - est if a.shortage == "graph_capture" else HEADROOM_KEEP_GIB + graph_full - est - short
            out.append(_remedy("--cuda-graph-max-bs", b, "reserve", 0,
                               f"LOWER --cuda-graph-max-bs from {cur} to {b}: keeps {keep:.1f} GiB of headroom after ≈{est:.2f} "
                               f"GiB of CUDA graphs (up to bs {cur} they need ≈{graph_full:.2f} GiB, {how}); the KV cache "
                               "is unchanged.", _TIER_OTHER))
        else:
            out.append(_remedy("--cuda-graph-max-bs", None, "reserve", 0,
                               f"no --cuda-graph-max-bs ≥ 1 frees enough: even the smallest graphs leave the reserve "
                               f"{short:.2f} GiB short; --disable-cuda-graph would (slower decoding).", _TIER_OTHER))
    elif a.shortage == "graph_capture":
        half = max(8, cur // 2) if cur else 64
        out.append(_remedy("--cuda-graph-max-bs", half, "reserve", 0,
                           f"LOWER --cuda-graph-max-bs{f' from {cur}' if cur else ''} to {half}: graph memory grows with "
                           "the largest captured batch (the log shows no capture progress to size it); the KV cache is "
                           "unchanged.", _TIER_OTHER))
    # --mem-fraction-static: the fraction that gives the reserve what was short
    if m is not None and P and short is not None and a.bytes_per_token and valid_mfs(m):
        m_new = _floor2(m - max(short, 0.0) / P)
        lo = a.minimum_mem_fraction_static or 0.0
        if m_new > lo + 0.005 and valid_mfs(m_new):
            gib = (m - m_new) * P
            lost = int(gib * GIB / a.bytes_per_token)
            covers = f" (about {gib / per:.0f} graphs at {per:.2f} GiB each)" if per else ""
            kv_after = f"; the KV cache shrinks to ≈{max(0, (a.kv_tokens or 0) - lost):,} tokens ({lost:,} fewer)"
            out.append(_remedy("--mem-fraction-static", m_new, "reserve", lost,
                               f"LOWER --mem-fraction-static from {m:g} to {m_new:.2f}: +{gib:.2f} GiB of reserve{covers}, "
                               f"what was short {where}{kv_after}. Each −0.01 moves {P * 0.01:.2f} GiB from the KV "
                               "cache to the reserve.", _TIER_OTHER))
        else:
            out.append(_remedy("--mem-fraction-static", None, "reserve", None,
                               f"no --mem-fraction-static frees the {short:.2f} GiB needed and still leaves a KV cache "
                               f"(it would go below the minimum {lo:.3f}); shrink the graphs or the prefill chunk instead.",
                               _TIER_OTHER))
    elif m is not None and valid_mfs(m):
        lower = round(max(0.3, m - 0.04), 2)
        out.append(_remedy("--mem-fraction-static", lower, "reserve", _tokens_lost(a, m, lower),
                           f"LOWER --mem-fraction-static from {m:g} to about {lower:.2f}"
                           + (f" (+{P * (m - lower):.2f} GiB of reserve)" if P else "")
                           + f": memory ran out {where}, after the KV cache took its share (the log does not show how "
                           "much more was needed).", _TIER_OTHER))
    else:
        out.append(_remedy("--mem-fraction-static", None, "reserve", None,
                           f"LOWER --mem-fraction-static: memory ran out {where}, after the KV cache took its share.",
                           _TIER_OTHER))
    if a.shortage == "runtime":
        chunk = a.chunked_prefill_size
        if chunk and chunk > 1:
            new = chunk // 2
            before, after = prefill_activations_gib(chunk), prefill_activations_gib(new)
            out.append(_remedy("--chunked-prefill-size", new, "reserve", 0,
                               f"LOWER --chunked-prefill-size from {chunk} to {new}: smaller prefill activations (SGLang "
                               f"allows {before:.2f} → {after:.2f} GiB for a chunk); or lower --max-running-requests; the "
                               "KV cache is unchanged.", _TIER_OTHER))
        else:
            out.append(_remedy("--chunked-prefill-size", None, "reserve", 0,
                               "LOWER --chunked-prefill-size (smaller prefill activations) or --max-running-requests; the "
                               "KV cache is unchanged.", _TIER_OTHER))
    out.append(_remedy("--mem-fraction-static", None, None, None, "never raise --mem-fraction-static for this failure: it "
                       "takes memory from the reserve that ran out.", _TIER_CAUTION))


def _tokens_lost(a: MemoryAnalysis, m: float, m_new: float) -> int | None:
    if not a.pre_load_free_gib or not a.bytes_per_token:
        return None
    return int((m - m_new) * a.pre_load_free_gib * GIB / a.bytes_per_token)


def _healthy_remedies(a: MemoryAnalysis, gm: Any, out: list[dict[str, Any]]) -> None:
    m, eff, lo, P = (a.configured_mem_fraction_static, a.effective_mem_fraction_static, a.minimum_mem_fraction_static,
                     a.pre_load_free_gib)
    if a.fraction_not_in_force and m is not None and eff is not None and valid_mfs(round(eff, 2)):
        at_m = (f"at {m:g} this launch could not start (minimum {lo:.3f})" if lo is not None and m <= lo
                else f"at {m:g} the KV cache would be {a.post_load_free_gib - P * (1 - m):.2f} GiB"
                if P and a.post_load_free_gib is not None else f"{m:g} is not what ran")
        out.append(_remedy("--mem-fraction-static", round(eff, 2), "config", 0,
                           f"SET --mem-fraction-static {eff:.2f} where the server reads it, to keep what ran: the configured "
                           f"{m:g} never took effect (the numbers say {eff:.3f}); {at_m}.", _TIER_OTHER))
    if not (a.reserve_thin and a.headroom_gib is not None and a.headroom_needed_gib is not None):
        return
    gap = a.headroom_needed_gib - a.headroom_gib
    cur = _current_bs(a, gm)
    total, _how = graph_estimate(a, gm, None)
    if gm is not None and gm.captured_bs and cur and total is not None:
        picked = _pick_bs(gm, cur, lambda est: total - est >= gap)
        if picked is not None:
            b, est = picked
            out.append(_remedy("--cuda-graph-max-bs", b, "reserve", 0,
                               f"LOWER --cuda-graph-max-bs from {cur} to {b}: keeps {a.headroom_gib + total - est:.1f} GiB of "
                               f"headroom (graphs ≈{est:.2f} GiB instead of ≈{total:.2f}), enough for "
                               f"{a.headroom_needed_for}; the KV cache is unchanged.", _TIER_OTHER))
    m_run = eff if eff is not None else m
    if m_run is not None and P and lo is not None:
        m_new = _floor2(m_run - gap / P)
        if m_new > lo + 0.005 and valid_mfs(m_new):
            lost = _tokens_lost(a, m_run, m_new)
            out.append(_remedy("--mem-fraction-static", m_new, "reserve", lost,
                               f"or LOWER --mem-fraction-static to {m_new:.2f}: +{gap:.2f} GiB of headroom for "
                               f"{a.headroom_needed_for}" + (f"; the KV cache loses ≈{lost:,} tokens" if lost else "") + ".",
                               _TIER_OTHER))


def _context_remedy(a: MemoryAnalysis, gm: Any, out: list[dict[str, Any]]) -> None:
    P, A, bpt, ctx = a.pre_load_free_gib, a.post_load_free_gib, a.bytes_per_token, a.context_len
    if not (a.kv_tokens and ctx and a.kv_tokens < ctx and bpt and P and A):
        return
    need_gib = ctx * bpt / GIB
    m_need = _ceil2(1 - (A - need_gib) / P)
    graph, _how = graph_estimate(a, gm, None)
    hi = MFS_MAX if graph is None else min(MFS_MAX, _floor2(1 - (graph + _overhead_gib(a) + HEADROOM_KEEP_GIB) / P))
    if valid_mfs(m_need) and m_need <= hi:
        out.append(_remedy("--mem-fraction-static", m_need, "context", -((tokens_for(a, A - P * (1 - m_need)) or 0)
                                                                         - a.kv_tokens),
                           f"to hold one full {ctx:,}-token request the KV cache needs {need_gib:.2f} GiB: "
                           f"--mem-fraction-static {m_need:.2f}, or a smaller --context-length.", _TIER_OTHER))
        return
    best = tokens_for(a, A - P * (1 - hi)) or 0
    out.append(_remedy("--context-length", best if best >= 1 else None, "context", 0,
                       f"no --mem-fraction-static holds one full {ctx:,}-token request: it needs {need_gib:.2f} GiB of KV "
                       f"cache and {hi:.2f} (the most that leaves the graphs their reserve) gives {A - P * (1 - hi):.2f} GiB"
                       + (f"; use --context-length {best} or less, or a larger --tp." if best >= 1 else
                          "; use a larger --tp or a quantized checkpoint."), _TIER_OTHER))


__all__ = ["HEADROOM_KEEP_GIB", "MFS_MAX", "error_values", "graph_estimate", "remedies", "tokens_for", "valid_mfs",
           "what_if"]
