"""The KV-cache budget, rebuilt from the log's own numbers (catalog section e).

    rest (KV GiB) = A − P · (1 − m)        P: free before weights (min over ranks), A: free after weights
    m_eff        = 1 − (A − KV) / P        what the numbers say was in force
    minimum m    = 1 − A / P               below it the KV budget is ≤ 0 and the launch cannot start
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .summary import RankMemory, Run

ROUNDING_TOLERANCE = 0.01  # page rounding, draft/LoRA allocations and 2-decimal logging


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
class MemoryAnalysis:
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
    missing: list[str] = field(default_factory=list)
    ranks: list[RankBudget] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None else round(v, nd)


def _rank_budget(rm: RankMemory) -> RankBudget:
    p, a, kv, tok = rm.free_before_weights_gib, rm.free_after_weights_gib, rm.kv_gib, rm.kv_tokens
    bpt = (kv * 2**30 / tok) if kv and tok else None
    eff = (1 - (a - kv) / p) if (p and a is not None and kv is not None) else None
    minimum = (1 - a / p) if (p and a is not None) else None
    return RankBudget(rm.rank, p, a, rm.weights_gib, kv, tok, _r(bpt, 1), rm.pool_end_free_gib, rm.graph_gib,
                      rm.available_gpu_mem_gib, _r(eff), _r(minimum))


def analyse(run: Run) -> MemoryAnalysis:
    ranks = [_rank_budget(rm) for rm in run.rank_list()]
    m = run.server_args.get("mem_fraction_static")
    m = float(m) if isinstance(m, (int, float)) and not isinstance(m, bool) else None
    pres = [r.pre_load_free_gib for r in ranks if r.pre_load_free_gib is not None]
    posts = [r.post_load_free_gib for r in ranks if r.post_load_free_gib is not None]
    P = min(pres) if pres else None
    A = min(posts) if posts else None
    kv_rank = next((r for r in ranks if r.kv_cache_gib is not None), None)
    KV = kv_rank.kv_cache_gib if kv_rank else None
    tokens = kv_rank.kv_tokens if kv_rank else next((r.kv_tokens for r in ranks if r.kv_tokens), None)
    weights = max((r.weights_gib for r in ranks if r.weights_gib is not None), default=None)
    missing = [name for name, v in (("mem_fraction_static (server_args line)", m),
                                    ("free memory before weights (Load weight begin)", P),
                                    ("free memory after weights (Load weight end)", A),
                                    ("KV cache size (KV Cache is allocated)", KV)) if v is None]
    eff = (1 - (A - KV) / P) if (P and A is not None and KV is not None) else None
    minimum = (1 - A / P) if (P and A is not None) else None
    reserve = (P * (1 - m)) if (P and m is not None) else None
    budget = (A - reserve) if (A is not None and reserve is not None) else None
    notes: list[str] = []
    if eff is not None and m is not None and abs(eff - m) > ROUNDING_TOLERANCE:
        notes.append(f"configured mem_fraction_static={m:g} but the numbers imply {eff:.3f}")
    return MemoryAnalysis(
        configured_mem_fraction_static=m, effective_mem_fraction_static=_r(eff), minimum_mem_fraction_static=_r(minimum),
        pre_load_free_gib=P, post_load_free_gib=A, weights_gib=weights, kv_cache_gib=KV, kv_tokens=tokens,
        bytes_per_token=_r(KV * 2**30 / tokens, 1) if KV and tokens else None,
        reserve_gib=_r(reserve, 2), kv_budget_gib=_r(budget, 2), missing=missing, ranks=ranks, notes=notes,
    )


def template_values(a: MemoryAnalysis) -> dict[str, Any]:
    """Numbers rule templates can use as `{mem.NAME}`."""
    d = {k: v for k, v in a.to_dict().items() if k not in ("ranks", "notes", "missing")}
    if a.minimum_mem_fraction_static is not None:
        d["suggest_raise_to"] = round(min(0.99, a.minimum_mem_fraction_static + 0.03), 2)
    m = a.configured_mem_fraction_static if a.configured_mem_fraction_static is not None else a.effective_mem_fraction_static
    if m is not None:
        d["suggest_lower_to"] = round(max(0.3, m - 0.05), 2)
        d["current"] = m
    return d
