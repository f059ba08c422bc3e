"""What the decode CUDA graphs cost, from the log's own capture lines: GiB per captured graph, the whole
capture, where a capture died, and what a smaller (or larger) `--cuda-graph-max-bs` would have cost.

Sources (folded per rank by rank_memory.py into `RankMemory.graph_capture`): `Capture cuda graph begin …
avail mem=` [S49/S54], the printed list `Capture cuda graph bs [...]` [S53] / `bs=[...]` [S54], tqdm's
`Capturing batches (bs=N avail_mem=X GB): P%|…| i/n` [S60] (TP rank 0 only; `bs=` from v0.4.9) and
`Capture cuda graph end … mem usage=` [S51/S52/S55]. Piecewise / prefill graphs are reported apart
(`prefill_gib`) and never enter the fit; draft-model graphs are left out.

The fit. SGLang captures from the largest batch size down, reading the free memory before each graph,
so a frame `(bs, avail, i)` says: after the `i` larger graphs, `avail` GiB were free. Free memory falls
by about the same amount per graph (the graphs share one memory pool, which the first and largest graph
allocates; each later graph adds its own outputs and what the pool has to grow by). So:
- with two or more samples after the first graph, GiB per graph is the least-squares slope of avail over
  graphs captured on those samples, and the first graph's extra cost (the pool) is kept apart;
- with only the begin line and one frame (ingest keeps only a tqdm bar's final state), it is the mean
  over the graphs between them, first graph included (`fit` says which).
`estimate_gib(max_bs)` assumes every graph costs the fitted slope and the pool stays: the measured (or
projected) full capture minus one slope per batch size above `max_bs` (plus one per size the era's list
would add above the largest captured), never below the remaining sizes at the slope.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from logdoctor import regexes
from logdoctor.records import dataclass, field
from logdoctor.run.model import GraphCapture, RankMemory, Run

_VERSION = regexes.compile(r"(\d{1,4})\.(\d{1,4})\.(\d{1,4})")
MAX_BS = 8192    # no list is built past this (a log or a what-if may name any number)
ListFn = Callable[[int], list[int]]


# ---- the era's default batch-size lists (catalog e.3; non-speculative, CUDA-graph padding on) ----------

def _list_v01(max_bs: int) -> list[int]:          # v0.1.24–v0.2.7: fixed, ≤ 128
    return [b for b in [1, 2, 4] + list(range(8, 129, 8)) if b <= max_bs]


def _list_v02(max_bs: int) -> list[int]:          # v0.2.15–v0.4.3: [1, 2, 4] + 8..160 step 8
    return [b for b in [1, 2, 4] + list(range(8, 161, 8)) if b <= max_bs]


def _list_v045(max_bs: int) -> list[int]:         # v0.4.5–v0.5.2: [1, 2, 4, 8] + 16.. step 8 (to 256 on big GPUs)
    return [b for b in [1, 2, 4, 8] + list(range(16, 257, 8)) if b <= max_bs]


def _list_v053(max_bs: int) -> list[int]:         # v0.5.3+: [1, 2, 4, 8, 12] + 16..256/8 + 272..496/16 + 512../32
    return [b for b in [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
            + list(range(512, min(max(max_bs, 512), MAX_BS) + 1, 32)) if b <= max_bs]


def _list_v053_spec(max_bs: int) -> list[int]:    # v0.5.3+ with speculative decoding: denser small sizes
    return [b for b in list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
            + list(range(272, min(max(max_bs, 272), MAX_BS) + 1, 16)) if b <= max_bs]


# era (stages.py) → candidate lists, likeliest first, and the default max when the log does not say
_ERA_LISTS: dict[str, tuple[tuple[ListFn, ...], int | None]] = {
    "v0.1.x": ((_list_v01,), 128),
    "v0.1.17-v0.2.13": ((_list_v01, _list_v02), 128),
    "v0.2.14-v0.3.3": ((_list_v02,), 160),
    "v0.1.17-v0.4.3": ((_list_v02, _list_v045), 160),
    # no printed list in this era means before v0.4.6.post2 (S53): v0.4.5–v0.4.6.post1, else v0.4.3–v0.4.4
    "v0.4.3-v0.5.8": ((_list_v045, _list_v02, _list_v053), None),
    "v0.5.9": ((_list_v053,), None),
    "v0.5.10+": ((_list_v053,), None),
    "v0.5.13+": ((_list_v053,), None),
    "v0.5.14+": ((_list_v053,), None),
}


_ALL_LISTS = (_list_v053, _list_v045, _list_v02, _list_v01, _list_v053_spec)


def _version_lists(version: str | None) -> tuple[ListFn, ...] | None:
    m = _VERSION.match(version or "")
    if not m:
        return None
    v = tuple(int(x) for x in m.groups())
    if v >= (0, 5, 3):
        return (_list_v053,)
    if v >= (0, 4, 5):
        return (_list_v045,)
    if v >= (0, 2, 15):
        return (_list_v02,)
    return (_list_v01,)


@dataclass
class GraphMemory:
    captured_bs: list[int]              # the batch sizes captured, ascending (printed, else the era's list)
    bs_source: str                      # "log" | "server args" | "era default (<era>)" | "unknown"
    samples: list[tuple[int | None, float]]  # (bs, avail GiB) per progress frame, capture order; bs None before v0.4.9
    per_graph_gib: float | None         # fitted GiB per captured graph
    total_gib: float | None             # the capture's graph memory (end `mem usage=`, else begin − last sample)
    failed_at_bs: int | None            # the bs being captured when the capture died; None if it finished
    #                                     (or every graph was captured and what failed came after)
    graphs_done: int | None
    graphs_total: int | None
    rank: str | None = None             # the rank whose lines these are (tqdm: TP rank 0)
    fit: str | None = None              # how per_graph_gib was computed
    first_graph_gib: float | None = None   # the first (largest) graph, which allocates the shared pool
    pool_gib: float = 0.0               # what the first graph cost above a regular one (0 when not measurable)
    total_source: str | None = None
    full_capture_gib: float | None = None  # all of captured_bs: measured when it finished, projected when it died
    finished: bool = False
    begin_free_gib: float | None = None
    sample_graphs: list[int] = field(default_factory=list)  # graphs already captured when each sample was read
    ranks_total_gib: dict[str, float] = field(default_factory=dict)  # end `mem usage=` of every rank printing one
    prefill_gib: float | None = None    # piecewise / prefill graphs (max over ranks), not in the fit
    prefill_sizes: list[int] = field(default_factory=list)
    era_list: ListFn | None = field(default=None, repr=False, compare=False)  # the era's list, for a larger max_bs

    def estimate_gib(self, max_bs: int) -> float | None:
        """Graph memory if `--cuda-graph-max-bs` were `max_bs`: the full capture less one fitted graph per
        captured size above it (a larger `max_bs` adds the era's sizes up to it). None when unknown."""
        if not self.captured_bs or self.full_capture_gib is None:
            return None
        k = sum(1 for b in self.captured_bs if b <= max_bs)
        if k == 0:
            return 0.0
        top = self.captured_bs[-1]
        extra = 0
        if max_bs > top and self.era_list is not None:
            extra = sum(1 for b in self.era_list(max_bs) if top < b <= max_bs)
        n = len(self.captured_bs)
        if self.per_graph_gib is None:  # no slope: the measured total shared evenly
            return round(self.full_capture_gib * (k + extra) / n, 2)
        est = self.full_capture_gib - self.per_graph_gib * (n - k) + self.per_graph_gib * extra
        # never below k graphs at the slope (a mean fit over n − 1 graphs can overshoot the measured total)
        return round(max(est, min(self.per_graph_gib * (k + extra), self.full_capture_gib)), 2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "captured_bs": list(self.captured_bs), "bs_source": self.bs_source, "rank": self.rank,
            "samples": [[b, a] for b, a in self.samples], "sample_graphs": list(self.sample_graphs),
            "per_graph_gib": self.per_graph_gib, "fit": self.fit, "first_graph_gib": self.first_graph_gib,
            "pool_gib": self.pool_gib, "total_gib": self.total_gib, "total_source": self.total_source,
            "full_capture_gib": self.full_capture_gib, "finished": self.finished,
            "failed_at_bs": self.failed_at_bs, "graphs_done": self.graphs_done, "graphs_total": self.graphs_total,
            "begin_free_gib": self.begin_free_gib, "ranks_total_gib": dict(self.ranks_total_gib),
            "prefill_gib": self.prefill_gib, "prefill_sizes": list(self.prefill_sizes),
        }


def graph_memory(run: Run) -> GraphMemory | None:
    """The decode graphs' memory of `run`, or None when the log shows no decode capture at all."""
    captures = [(rm, rm.graph_capture) for rm in run.rank_list() if rm.graph_capture is not None]
    if not captures:
        return None
    rm, gc = _main_capture(captures)
    printed = next((c.batch_sizes for _, c in captures if c.batch_sizes), [])
    era_fns = _version_lists(run.version) or _ERA_LISTS.get(run.era or "", ((), None))[0]
    if run.server_args.get("speculative_algorithm") not in (None, "None", ""):
        # only the v0.5.3+ speculative list is known; older eras' speculative lists are not extrapolated
        era_fns = (_list_v053_spec,) if _list_v053 in era_fns else ()
    captured, source, era_fn = _captured_list(run, printed, gc, era_fns)
    desc = sorted(captured, reverse=True)   # the capture order
    position = {b: i for i, b in enumerate(desc)}
    xs = [_graphs_before(b, done, gc.total, position) for b, _, done in gc.samples]
    points = [(x, a) for x, (_, a, _) in zip(xs, gc.samples) if x is not None]
    per_graph, first, pool, fit = _fit(gc.begin_free_gib, points)
    # an end line, or a later stage: the eras before S50 print no end line at all
    finished = any(c.ended for _, c in captures) or run.ready or "scheduler_summary" in run.kinds
    total, total_source = _total(gc, points, finished)
    if per_graph is None and finished and total is not None and captured:
        per_graph, fit = round(total / len(captured), 4), f"end mem usage over {len(captured)} sizes (no progress)"
    last = gc.samples[-1] if gc.samples else None
    graphs_total = gc.total or (len(captured) or None)
    if finished:
        failed_at, done = None, graphs_total
    else:
        done = last[2] if last else None
        failed_at = last[0] if last else None
        if failed_at is None and last is not None and done is not None and done < len(desc):
            failed_at = desc[done]   # the pre-v0.4.9 bar names no bs: the list does
        if done is not None and graphs_total and done >= graphs_total:
            failed_at = None   # every graph was captured: what failed came after (registering their buffers, …)
    full = _full_capture(finished, total, per_graph, pool, len(captured))
    prefill = [c.prefill_gib for _, c in captures if c.prefill_gib is not None]
    return GraphMemory(
        captured_bs=sorted(captured), bs_source=source, samples=[(b, a) for b, a, _ in gc.samples],
        per_graph_gib=per_graph, total_gib=total, failed_at_bs=failed_at, graphs_done=done,
        graphs_total=graphs_total, rank=rm.rank, fit=fit, first_graph_gib=first, pool_gib=pool,
        total_source=total_source, full_capture_gib=full, finished=finished, begin_free_gib=gc.begin_free_gib,
        sample_graphs=[x for x in xs if x is not None],
        ranks_total_gib={r.rank: c.mem_usage_gib for r, c in captures if c.mem_usage_gib is not None},
        prefill_gib=max(prefill) if prefill else None,
        prefill_sizes=next((c.prefill_sizes for _, c in captures if c.prefill_sizes), []),
        era_list=era_fn)


def _main_capture(captures: list[tuple[RankMemory, GraphCapture]]) -> tuple[RankMemory, GraphCapture]:
    """The rank with progress samples (the one drawing the bar), else the first rank in order."""
    return next(((r, c) for r, c in captures if c.samples), captures[0])


def _captured_list(run: Run, printed: list[int], gc: GraphCapture,
                   era_fns: tuple[ListFn, ...]) -> tuple[list[int], str, ListFn | None]:
    era_fn = era_fns[0] if era_fns else None
    if printed:   # extended past its largest size only by a known list it agrees with
        lst = sorted(set(printed))
        return lst, "log", next((fn for fn in _ALL_LISTS if fn(lst[-1]) == lst), None)
    explicit = run.server_args.get("cuda_graph_bs")
    if isinstance(explicit, list) and explicit and all(isinstance(b, int) for b in explicit):
        return sorted(set(explicit)), "server args", era_fn
    if not era_fns:
        return [], "unknown", None
    max_bs = run.server_args.get("cuda_graph_max_bs")
    seen = [b for b, _, _ in gc.samples if b is not None]
    label = f"era default ({run.era or run.version})"
    if not isinstance(max_bs, int) and seen:
        max_bs = max(seen)    # the first frame names the largest size captured
    if isinstance(max_bs, int) and max_bs > 0:
        lists = [fn(max_bs) for fn in era_fns]
        best = next((i for i, lst in enumerate(lists) if gc.total is None or len(lst) == gc.total), 0)
        return lists[best], label, era_fns[best]
    default_max = _ERA_LISTS.get(run.era or "", ((), None))[1]
    if gc.total:  # the bar's n: the era's list cut to that many sizes (the largest default is 512 + …)
        for fn in era_fns:
            lst = fn(1024)
            if len(lst) >= gc.total:
                return lst[:gc.total], label, fn
    if default_max:
        return era_fns[0](default_max), label, era_fns[0]
    return [], "unknown", era_fn


def _graphs_before(bs: int | None, done: int | None, total: int | None, position: dict[int, int]) -> int | None:
    """How many graphs were captured when a frame's avail was read: the position of its bs in the
    capture order, else tqdm's count (whose 100 % redraw still shows the last size's description)."""
    if bs is not None and bs in position:
        return position[bs]
    if done is None:
        return None
    return done - 1 if total is not None and done >= total > 0 else done


def _fit(begin: float | None, points: list[tuple[int, float]]) -> tuple[float | None, float | None, float, str | None]:
    """(GiB per graph, first graph's GiB, pool GiB above a regular graph, how) from (graphs, avail) points."""
    by_x: dict[int, float] = {}
    for x, a in points:
        by_x[x] = a     # the last read of a position: a pre-v0.4.9 update frame shows the count before its desc
    if begin is not None and 0 not in by_x:
        by_x[0] = begin
    y0 = by_x.get(0)
    later = sorted((x, a) for x, a in by_x.items() if x >= 1)
    if len(later) >= 2:
        n = len(later)
        mx = sum(x for x, _ in later) / n
        my = sum(a for _, a in later) / n
        sxx = sum((x - mx) ** 2 for x, _ in later)
        slope = -sum((x - mx) * (a - my) for x, a in later) / sxx
        first = pool = None
        if y0 is not None:
            at1 = my - slope * (1 - mx)           # the fitted line at one graph captured
            first = y0 - at1
            pool = max(0.0, first - slope)
        return (round(slope, 4), _r(first), round(pool or 0.0, 3),
                f"least squares over {n} samples after the first graph")
    if y0 is not None and later:
        x, a = later[-1]
        first = round(y0 - a, 3) if x == 1 else None
        return round((y0 - a) / x, 4), first, 0.0, f"mean over {x} graphs (begin avail to the last progress)"
    return None, None, 0.0, None


def _total(gc: GraphCapture, points: list[tuple[int, float]], finished: bool) -> tuple[float | None, str | None]:
    if gc.mem_usage_gib is not None:
        return round(gc.mem_usage_gib, 2), "capture end mem usage"
    if gc.begin_free_gib is None:
        return None, None
    if finished and gc.end_free_gib is not None:
        return round(gc.begin_free_gib - gc.end_free_gib, 2), "begin avail − end avail"
    if points:
        return round(gc.begin_free_gib - points[-1][1], 2), "begin avail − last progress"
    return None, None


def _full_capture(finished: bool, total: float | None, per_graph: float | None, pool: float,
                  n: int) -> float | None:
    """Graph memory of the whole list: measured if the capture finished, else projected from the fit."""
    if finished:
        return total
    if per_graph is None or n == 0:
        return None
    return round(pool + per_graph * n, 2)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


__all__ = ["GraphMemory", "graph_memory"]
