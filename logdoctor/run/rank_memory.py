"""Memory figures per rank (`Run.ranks`): free memory before and after the weights, the weights, the KV
pool, the CUDA graphs, and what the scheduler reported, each from the line that prints it.

A rank is the event's prefix label (`TP3`, `DP1 TP3`), or `TP<n>` from an inline rank, or `TP0` for a
log with no rank at all. These are the numbers `memory.py` rebuilds the KV-cache budget from.
"""
from __future__ import annotations

from typing import Any

from logdoctor.events import Event
from logdoctor.run.model import MAX_CAPTURE_SAMPLES, GraphCapture, RankMemory, Run, rank_label

# fields that are text by nature (kept when the numeric filter below drops malformed values)
_NON_NUMERIC_KEYS = frozenset({"label", "dtype", "model_class", "draft", "va_upper_bound"})


# the kinds `RankMemoryFold.add` reads
_MEMORY_KINDS = frozenset({"weight_load_begin", "weight_load_end", "kv_cache_allocated", "memory_pool_end",
                           "dist_init_end", "graph_capture_begin", "graph_capture_sizes", "graph_capture_progress",
                           "graph_capture_end", "scheduler_summary"})


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class RankMemoryFold:
    """Folds memory lines into `run.ranks`, one RankMemory per rank label (O(ranks))."""

    def __init__(self, run: Run) -> None:
        self.run = run
        # which capture the latest `Capture … begin` opened (decode | prefill | draft): tqdm frames carry
        # no such word, and a draft model's capture prints the same `Capturing batches (` bars
        self.capture_phase: str | None = None
        self._tp0_rank: RankMemory | None = None
        self._tp0_for = -1

    def _rank_mem(self, ev: Event) -> RankMemory:
        return self._rank_mem_label(rank_label(ev) or "TP0")  # the main process's figures are TP0's

    def _rank_mem_label(self, label: str) -> RankMemory:
        rm = self.run.ranks.get(label)
        if rm is None:
            rm = self.run.ranks[label] = RankMemory(label)
        return rm

    def add(self, ev: Event) -> None:
        k = ev.kind
        if k not in _MEMORY_KINDS:  # most lines (NCCL INFO, unrecognised text) hold no memory figure
            return
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
        elif k == "graph_capture_begin":
            self._capture_begin(ev, f, ev.fields)
            if not f.get("draft"):
                self._rank_mem(ev).graph_begin_free_gib = f.get("avail_gib")
        elif k == "graph_capture_sizes":
            self._capture_sizes(ev)
        elif k == "graph_capture_progress":
            self._capture_progress(ev, f)
            if ev.ranks or ev.rank is not None or len(self.run.ranks) <= 1:
                rm = self._rank_mem(ev)  # tqdm bars carry no prefix: only attribute them when ranks are unambiguous
                if isinstance(f.get("bs"), int):
                    rm.last_capture_bs = f["bs"]
        elif k == "graph_capture_end":
            self._capture_end(ev, f)
            if not f.get("draft"):
                rm = self._rank_mem(ev)
                if f.get("mem_usage_gib") is not None:
                    rm.graph_gib = round((rm.graph_gib or 0.0) + f["mem_usage_gib"], 2)
                rm.graph_end_free_gib = f.get("avail_gib", rm.graph_end_free_gib)
        elif k == "scheduler_summary":
            rm = self._rank_mem(ev)
            rm.available_gpu_mem_gib = f.get("available_gpu_mem_gib")
            if rm.kv_tokens is None:
                rm.kv_tokens = f.get("max_total_num_tokens")

    # ---- the decode graph capture in detail (RankMemory.graph_capture; graph_memory.py fits it) -------

    def _capture(self, rm: RankMemory) -> GraphCapture:
        if rm.graph_capture is None:
            rm.graph_capture = GraphCapture()
        return rm.graph_capture

    def _capture_begin(self, ev: Event, f: dict[str, Any], raw: dict[str, Any]) -> None:
        phase = _capture_phase(raw)
        self.capture_phase = phase
        if phase == "prefill" and isinstance(raw.get("num_tokens"), list):   # [S56] prints its sizes
            self._capture(self._rank_mem(ev)).prefill_sizes = _ints(raw["num_tokens"])
        if phase != "decode":
            return
        rm = self._rank_mem(ev)
        # a second decode capture on a rank (a relaunch in the same file) starts over; prefill graphs
        # (captured before or after the decode ones, by era) stay
        old = rm.graph_capture
        gc = rm.graph_capture = GraphCapture(begin_free_gib=f.get("avail_gib"))
        if old is not None:
            gc.prefill_gib, gc.prefill_sizes = old.prefill_gib, old.prefill_sizes
            gc.batch_sizes = old.batch_sizes if not old.samples and not old.ended else []
        sizes = raw.get("batch_sizes")      # [S54] prints the list in the begin line
        if isinstance(sizes, list):
            gc.batch_sizes = _ints(sizes)

    def _capture_sizes(self, ev: Event) -> None:
        raw = ev.fields
        if isinstance(raw.get("batch_sizes"), list):
            self._capture(self._rank_mem(ev)).batch_sizes = _ints(raw["batch_sizes"])
        elif isinstance(raw.get("num_tokens"), list):
            self._capture(self._rank_mem(ev)).prefill_sizes = _ints(raw["num_tokens"])

    def _capture_progress(self, ev: Event, f: dict[str, Any]) -> None:
        """A tqdm frame `Capturing batches (bs=N avail_mem=X GB): P%|…| i/n` as a (bs, avail, i) sample.

        SGLang sets the description before capturing `bs`, so `avail` is the free memory after the `i`
        larger graphs; only TP rank 0 of a group draws the bar, without a prefix, so an unprefixed frame
        goes to the one rank labelled TP0 (with several, e.g. plain DP, it is ambiguous and dropped)."""
        if self.capture_phase not in (None, "decode") or _num(f.get("avail_gib")) is None:
            return
        rm = self._rank_mem(ev) if (ev.ranks or ev.rank is not None) else self._tp0()
        if rm is None:
            return
        gc = self._capture(rm)
        if gc.ended:
            return
        bs = f.get("bs") if isinstance(f.get("bs"), int) else None
        done = f.get("done") if isinstance(f.get("done"), int) else None
        if gc.samples and done is not None and gc.samples[-1][2] is not None and done < gc.samples[-1][2]:
            return  # a second bar in the same capture (one per stream): the fit reads the first
        sample = (bs, float(f["avail_gib"]), done)
        if len(gc.samples) < MAX_CAPTURE_SAMPLES:
            gc.samples.append(sample)
        else:  # bounded, and the last frame (where a capture died) is always the one kept
            gc.samples[-1] = sample
            gc.samples_dropped += 1
        if isinstance(f.get("total"), int):
            gc.total = f["total"]

    def _tp0(self) -> RankMemory | None:
        ranks = self.run.ranks
        if not ranks:
            return self._rank_mem_label("TP0")
        if self._tp0_for != len(ranks):   # looked up again only when a rank appears: O(ranks) per new rank
            tp0 = [rm for label, rm in ranks.items() if "TP0" in label.split()]
            self._tp0_rank, self._tp0_for = (tp0[0] if len(tp0) == 1 else None), len(ranks)
        return self._tp0_rank

    def _capture_end(self, ev: Event, f: dict[str, Any]) -> None:
        phase = _capture_phase(ev.fields)
        if phase == "draft":
            return
        gc = self._capture(self._rank_mem(ev))
        usage = _num(f.get("mem_usage_gib"))
        if phase == "prefill":
            if usage is not None:
                gc.prefill_gib = round((gc.prefill_gib or 0.0) + usage, 2)
            return
        gc.ended = True
        gc.mem_usage_gib = usage
        gc.end_free_gib = _num(f.get("avail_gib"))


def _capture_phase(fields: dict[str, Any]) -> str:
    """decode (the batch-size graphs, target verify included), prefill (piecewise / prefill graphs) or
    draft (a speculative draft model's graphs), from the begin / end line's flags (finishers.py)."""
    if fields.get("draft") or fields.get("role") == "draft":
        return "draft"
    if fields.get("piecewise") or fields.get("phase") == "prefill":
        return "prefill"
    return "decode"


def _ints(values: list[Any]) -> list[int]:
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)][:MAX_CAPTURE_SAMPLES]


__all__ = ["RankMemoryFold"]
