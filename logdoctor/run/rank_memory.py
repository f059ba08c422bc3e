"""Memory figures per rank (`Run.ranks`): free memory before and after the weights, the weights, the KV
pool, the CUDA graphs, and what the scheduler reported, each from the line that prints it.

A rank is the event's prefix label (`TP3`, `DP1 TP3`), or `TP<n>` from an inline rank, or `TP0` for a
log with no rank at all. These are the numbers `memory.py` rebuilds the KV-cache budget from.
"""
from __future__ import annotations

from typing import Any

from logdoctor.events import Event
from logdoctor.run.model import RankMemory, Run

# fields that are text by nature (kept when the numeric filter below drops malformed values)
_NON_NUMERIC_KEYS = frozenset({"label", "dtype", "model_class", "draft", "va_upper_bound"})


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class RankMemoryFold:
    """Folds memory lines into `run.ranks`, one RankMemory per rank label (O(ranks))."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def _rank_mem(self, ev: Event) -> RankMemory:
        label = ev.ranks or ("TP0" if ev.rank is None else f"TP{ev.rank}")
        rm = self.run.ranks.get(label)
        if rm is None:
            rm = self.run.ranks[label] = RankMemory(label)
        return rm

    def add(self, ev: Event) -> None:
        k = ev.kind
        # tolerant bags keep malformed values as text; memory arithmetic only takes real numbers
        f = {key: v for key, v in ev.fields.items()
             if key in _NON_NUMERIC_KEYS or _num(v) is not None}
        if k == "weight_load_begin" and "avail_gib" in f:
            self._rank_mem(ev).free_before_weights_gib = f["avail_gib"]
        elif k == "weight_load_end":
            rm = self._rank_mem(ev)
            rm.free_after_weights_gib = f.get("avail_gib", rm.free_after_weights_gib)
            rm.weights_gib = _num(f.get("weight_gib")) if _num(f.get("weight_gib")) is not None else rm.weights_gib
            if rm.weights_gib is None and rm.free_before_weights_gib is not None and rm.free_after_weights_gib is not None:
                rm.weights_gib = round(rm.free_before_weights_gib - rm.free_after_weights_gib, 2)
        elif k == "kv_cache_allocated" and not f.get("va_upper_bound"):
            rm = self._rank_mem(ev)
            if rm.kv_gib is None or f.get("label") in (None, "", "Target"):
                rm.kv_tokens = f.get("tokens", rm.kv_tokens)
                rm.kv_gib = f.get("kv_gib", rm.kv_gib)
        elif k == "memory_pool_end":
            self._rank_mem(ev).pool_end_free_gib = f.get("avail_gib")
        elif k == "dist_init_end":
            self._rank_mem(ev).dist_init_gib = f.get("mem_usage_gib")
        elif k == "graph_capture_begin" and not f.get("draft"):
            self._rank_mem(ev).graph_begin_free_gib = f.get("avail_gib")
        elif k == "graph_capture_progress" and (ev.ranks or ev.rank is not None or len(self.run.ranks) <= 1):
            rm = self._rank_mem(ev)  # tqdm bars carry no prefix: only attribute them when ranks are unambiguous
            if isinstance(f.get("bs"), int):
                rm.last_capture_bs = f["bs"]
        elif k == "graph_capture_end" and not f.get("draft"):
            rm = self._rank_mem(ev)
            if f.get("mem_usage_gib") is not None:
                rm.graph_gib = round((rm.graph_gib or 0.0) + f["mem_usage_gib"], 2)
            rm.graph_end_free_gib = f.get("avail_gib", rm.graph_end_free_gib)
        elif k == "scheduler_summary":
            rm = self._rank_mem(ev)
            rm.available_gpu_mem_gib = f.get("available_gpu_mem_gib")
            if rm.kv_tokens is None:
                rm.kv_tokens = f.get("max_total_num_tokens")


__all__ = ["RankMemoryFold"]
