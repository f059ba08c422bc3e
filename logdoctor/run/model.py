"""What a Run is: the summary of one log that the fold (fold.py) fills and the rules and reports read.

A Run holds the effective server args, the SGLang version and era when known, the parallel sizes, the
launch stages reached and when, memory figures per rank, batch statistics, failures and warnings, and
the log's counts. `Run.to_dict` is its JSON form (the `run` of a report, the `summary` command).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from logdoctor import regexes
from logdoctor.records import asdict, dataclass, field

if TYPE_CHECKING:
    from logdoctor.read.citations import Citations

STAGES = ("init", "weights", "kv_pool", "graph_capture", "ready")
MAX_FAILURES = 200      # failures (and, apart, warnings) kept per run: a log of a million NCCL WARN lines
_RANK_NUMBERS = regexes.compile(r"(?<!\d)\d{1,9}(?!\d)")


@dataclass
class Stage:
    name: str
    first_line: int | None = None
    first_ts: str | None = None
    start_secs: float | None = None
    end_secs: float | None = None
    end_ts: str | None = None

    @property
    def duration_s(self) -> float | None:
        if self.start_secs is None or self.end_secs is None:
            return None
        d = self.end_secs - self.start_secs
        return round(d + 86400, 2) if d < -3600 else round(d, 2)  # time-only stamps past midnight


@dataclass
class RankStages:
    """One rank's launch as its own prefixed lines show it (StageTracker fills it; the HTML timeline reads it;
    not in the Run's JSON). O(stages) per rank: a first and last time per stage, not the lines."""
    rank: str
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)  # stage → (first, last) secs of its lines
    reached: str | None = None          # the furthest stage (STAGES order) its lines show, timed or not
    last_secs: float | None = None      # its last timed line before the server was ready: where it stopped


MAX_CAPTURE_SAMPLES = 600   # capture progress samples kept per rank (SGLang's longest lists are ~70 sizes)


@dataclass
class GraphCapture:
    """One rank's decode CUDA-graph capture as its lines show it (filled by rank_memory.py; read by
    graph_memory.py). Decode graphs only: piecewise / prefill graphs are summed apart (`prefill_gib`),
    draft-model graphs are left out."""
    begin_free_gib: float | None = None          # `Capture cuda graph begin … avail mem=` [S49/S54]
    batch_sizes: list[int] = field(default_factory=list)   # `Capture cuda graph bs [...]` [S53] / `bs=[...]` [S54]
    # (bs or None in the pre-v0.4.9 form, avail GiB, graphs done as tqdm counts them) per progress frame [S60]
    samples: list[tuple[int | None, float, int | None]] = field(default_factory=list)
    samples_dropped: int = 0                     # frames past MAX_CAPTURE_SAMPLES (the last one is always kept)
    total: int | None = None                     # the `n` of tqdm's `i/n`: graphs to capture
    ended: bool = False                          # the decode `Capture … end` line was printed
    mem_usage_gib: float | None = None           # its `mem usage=` [S51/S52/S55]: the graph pool
    end_free_gib: float | None = None            # its `avail mem=`
    prefill_gib: float | None = None             # piecewise / prefill graphs' `mem usage=` [S57 end, S55 prefill]
    prefill_sizes: list[int] = field(default_factory=list)  # `Capture cuda graph num tokens [...]` [S58] / [S56]


@dataclass
class RankMemory:
    rank: str
    free_before_weights_gib: float | None = None
    free_after_weights_gib: float | None = None
    weights_gib: float | None = None
    kv_tokens: int | None = None
    kv_gib: float | None = None
    pool_end_free_gib: float | None = None
    graph_gib: float | None = None
    graph_end_free_gib: float | None = None
    available_gpu_mem_gib: float | None = None
    dist_init_gib: float | None = None
    graph_begin_free_gib: float | None = None
    last_capture_bs: int | None = None
    graph_capture: GraphCapture | None = None    # the decode capture in detail (None: no capture line)


@dataclass
class Failure:
    line: int
    kind: str
    rank: int | None
    ranks: str | None
    ts: str | None
    text: str
    # the numbers the parser read from the message (a fraction, the minimum viable one, torch's "Tried to allocate"),
    # so that what runs on a Run reads them as values, never from the text again
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    source: str = ""
    server_args: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    era: str | None = None
    tp_size: int | None = None
    dp_size: int | None = None
    pp_size: int | None = None
    ep_size: int | None = None
    # where each size above came from: "server_args" (printed) or "ranks" (guessed from the largest rank seen)
    parallel_source: dict[str, str] = field(default_factory=dict)
    stages: dict[str, Stage] = field(default_factory=dict)
    last_stage: str | None = None
    ranks: dict[str, RankMemory] = field(default_factory=dict)
    scheduler_summary: dict[str, Any] = field(default_factory=dict)
    batches: dict[str, Any] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    warnings: list[Failure] = field(default_factory=list)
    line_count: int = 0
    last_serving_line: int = 0          # last batch or HTTP 200 line: the server was alive up to here
    event_count: int = 0
    unparsed_count: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    templates: set[str] = field(default_factory=set)
    # for the HTML timeline only, kept out of `to_dict` (the JSON of every report stays as it was):
    # each rank's own stage times, and the run-wide warm-up (main-process lines: uvicorn listening or the
    # first warm-up request, to ready or to the warm-up failure)
    rank_stages: dict[str, RankStages] = field(default_factory=dict, repr=False, compare=False)
    warmup: Stage | None = field(default=None, repr=False, compare=False)
    last_secs: float | None = field(default=None, repr=False, compare=False)  # the last timed line folded

    @property
    def ready(self) -> bool:
        return "ready" in self.stages

    def parallel_text(self) -> str:
        """`tp=8 (inferred from ranks), dp=2`: the sizes known, a guessed one marked as such."""
        sizes = (("tp", self.tp_size), ("dp", self.dp_size), ("pp", self.pp_size), ("ep", self.ep_size))
        return ", ".join(f"{n}={v}" + (" (inferred from ranks)" if self.parallel_source.get(n) == "ranks" else "")
                         for n, v in sizes if v)

    def rank_list(self) -> list[RankMemory]:
        return sorted(self.ranks.values(), key=lambda r: _rank_sort_key(r.rank))

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "version": self.version,
            "era": self.era,
            "parallel": {"tp": self.tp_size, "dp": self.dp_size, "pp": self.pp_size, "ep": self.ep_size},
            "parallel_source": dict(self.parallel_source),
            "server_args": self.server_args,
            "stages": {n: {"first_line": s.first_line, "ts": s.first_ts, "end_ts": s.end_ts,
                           "duration_s": s.duration_s} for n, s in self.stages.items()},
            "last_stage": self.last_stage,
            "ready": self.ready,
            "last_serving_line": self.last_serving_line or None,
            "memory": [_rank_dict(r) for r in self.rank_list()],
            "scheduler_summary": self.scheduler_summary,
            "batches": self.batches,
            "failures": [asdict(f) for f in self.failures],
            "warnings": [asdict(f) for f in self.warnings],
            "counts": {"lines": self.line_count, "events": self.event_count, "unparsed": self.unparsed_count,
                       "kinds": dict(sorted(self.kinds.items()))},
        }


def _rank_dict(r: RankMemory) -> dict[str, Any]:
    """A rank's figures as the Run's JSON shows them: the capture's frames are counted, not listed (up to
    MAX_CAPTURE_SAMPLES per rank would dwarf the rest of a report; `logdoctor memory` shows the fit)."""
    d = asdict(r)
    capture = d.get("graph_capture")
    if capture is not None:
        capture["sample_count"] = len(capture.pop("samples")) + capture["samples_dropped"]
    return d


def rank_label(ev: Any) -> str | None:
    """The rank an event's line is from, as `Run.ranks` names it: the prefix label (`TP3`, `DP1 TP3`), `TP<n>`
    for an inline rank (`[gpu_id=n]`), None for a line of the main process."""
    return ev.ranks or (None if ev.rank is None else f"TP{ev.rank}")


def _rank_sort_key(label: str) -> tuple[int, ...]:
    """`TP2` before `TP10`, `DP0 TP1` before `DP1 TP0`: ranks in the order of their numbers."""
    nums = [int(x) for x in _RANK_NUMBERS.findall(label)]
    return tuple(nums) if nums else (-1,)


def cite_run(run: Run, citations: Citations) -> dict[str, Any]:
    """The run's stage and failure lines as given (in place); returns the nodes they are on
    (`{"stages": {name: node}, "failures": [node...], "warnings": [node...]}`) when there are several."""
    nodes: dict[str, Any] = {"stages": {}, "failures": [], "warnings": []}
    if not citations.active:
        return nodes
    for name, st in run.stages.items():
        node, st.first_line = citations.cite(st.first_line)
        nodes["stages"][name] = node
    for key in ("failures", "warnings"):
        for f in getattr(run, key):
            node, f.line = citations.cite(f.line)
            nodes[key].append(node)
    if run.last_serving_line:
        run.last_serving_line = citations.line(run.last_serving_line)
    return nodes if citations.several_nodes else {"stages": {}, "failures": [], "warnings": []}


__all__ = ["MAX_CAPTURE_SAMPLES", "MAX_FAILURES", "STAGES", "Failure", "GraphCapture", "RankMemory", "RankStages", "Run",
           "Stage", "cite_run", "rank_label"]
