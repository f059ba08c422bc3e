"""Events to one Run: the fold of a log (configuration, stages, memory per rank, batches, failures).

The fold is streaming and bounded: batch statistics keep exact values up to `EXACT_LIMIT` and then
switch to a log-spaced histogram (≤0.5 % relative error), so memory does not grow with log size.
"""
from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from logdoctor.events import Event
from logdoctor.parse.serverargs import parse_server_args

if TYPE_CHECKING:
    from logdoctor.read.citations import Citations

STAGES = ("init", "weights", "kv_pool", "graph_capture", "ready")
EXACT_LIMIT = 200_000
MAX_FAILURES = 200

# event kinds that mean something went wrong (fatal or not: the rules decide which matter)
FAILURE_KINDS = frozenset({
    "traceback", "torch_oom", "cuda_error", "nccl_error", "cudart_error", "graph_capture_failed",
    "kv_not_enough_memory", "kv_no_memory_after_weights", "memory_unbalanced", "rank_load_incomplete",
    "batch_out_of_memory", "req_slots_exhausted", "retract_failed", "hybrid_state_cache_insufficient",
    "host_memory_insufficient", "fatal_signal", "killed", "scheduler_dead", "exit_code", "child_terminated",
    "nccl_watchdog_timeout", "scheduler_watchdog_timeout", "health_check_failed", "init_failed", "warmup_failed",
    "gpu_arch_unsupported", "port_unavailable", "child_failed_error", "argparse_error", "native_error",
    "mooncake_init_failed", "nccl_library_load_failed", "deepep_missing", "p2p_test_failed",
    "custom_allreduce_setup_failed", "model_import_failed", "process_exception", "sigquit_received",
    "kernel_log",
})
_NCCL_FAIL = re.compile(r"WARN|ERROR|ABORT")
_SERVING_KINDS = frozenset({"decode_batch", "prefill_batch", "http_access"})
# bounded numerals with a guard after them: a 400-digit value does not match at all (rather than
# giving inf, or its first 15 digits, or a ValueError from int() beyond 4300 digits)
_DECIMAL = rb"([0-9]{1,15}(?:\.[0-9]{1,12}(?![0-9])|(?!\.?[0-9])))"
# `\/`: some JSON encoders (fluent-bit) escape the slash of an enveloped line
_RX_TPUT = re.compile(rb"gen throughput \(token\\?/s\): " + _DECIMAL)
_RX_USAGE = re.compile(rb"token usage: " + _DECIMAL)
_RX_QUEUE = re.compile(rb"#queue-req: ([0-9]{1,15})(?![0-9])")
_RX_RUNNING = re.compile(rb"#running-req: ([0-9]{1,15})(?![0-9])")
_RANK_NUMBERS = re.compile(r"(?<!\d)\d{1,9}(?!\d)")
_RANK_NAMES = re.compile(r"(?<![A-Z])([A-Z]{1,16})(\d{1,6})(?!\d)")


class Quantiles:
    """Exact percentiles for small samples, a log histogram beyond EXACT_LIMIT."""

    RATIO = 1.01

    def __init__(self) -> None:
        self.values: array[float] | None = array("d")
        self.bins: dict[int, int] = {}
        self.count = 0
        self._sorted: list[float] | None = None

    def add(self, v: float) -> None:
        if not math.isfinite(v):
            return  # inf / nan are not figures; binning them would raise or print nonsense
        self.count += 1
        if self.values is not None:
            self.values.append(v)
            if len(self.values) > EXACT_LIMIT:
                for x in self.values:
                    self._bin(x)
                self.values = None
            return
        self._bin(v)

    def extend(self, values: Iterable[float]) -> None:
        values = [v for v in values if math.isfinite(v)]
        if self.values is not None:
            before = len(self.values)
            self.values.extend(values)
            self.count += len(self.values) - before
            if len(self.values) > EXACT_LIMIT:
                for x in self.values:
                    self._bin(x)
                self.values = None
            return
        for v in values:
            self.add(v)

    def _bin(self, v: float) -> None:
        k = -10**9 if v <= 0 else int(math.floor(math.log(v, self.RATIO)))
        self.bins[k] = self.bins.get(k, 0) + 1

    def quantile(self, q: float) -> float | None:
        if self.count == 0:
            return None
        if self.values is not None:
            if self._sorted is None or len(self._sorted) != len(self.values):
                self._sorted = sorted(self.values)
            s = self._sorted
            pos = q * (len(s) - 1)
            lo = int(math.floor(pos))
            hi = min(lo + 1, len(s) - 1)
            return round(s[lo] + (s[hi] - s[lo]) * (pos - lo), 2)
        target = q * (self.count - 1)
        seen = 0
        for k in sorted(self.bins):
            seen += self.bins[k]
            if seen > target:
                return 0.0 if k == -10**9 else round(self.RATIO ** (k + 0.5), 2)
        return None


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


@dataclass
class Failure:
    line: int
    kind: str
    rank: int | None
    ranks: str | None
    ts: str | None
    text: str


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

    @property
    def ready(self) -> bool:
        return "ready" in self.stages

    def rank_list(self) -> list[RankMemory]:
        return sorted(self.ranks.values(), key=lambda r: _rank_sort_key(r.rank))

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "version": self.version,
            "era": self.era,
            "parallel": {"tp": self.tp_size, "dp": self.dp_size, "pp": self.pp_size, "ep": self.ep_size},
            "server_args": self.server_args,
            "stages": {n: {"first_line": s.first_line, "ts": s.first_ts, "end_ts": s.end_ts,
                           "duration_s": s.duration_s} for n, s in self.stages.items()},
            "last_stage": self.last_stage,
            "ready": self.ready,
            "last_serving_line": self.last_serving_line or None,
            "memory": [asdict(r) for r in self.rank_list()],
            "scheduler_summary": self.scheduler_summary,
            "batches": self.batches,
            "failures": [asdict(f) for f in self.failures],
            "warnings": [asdict(f) for f in self.warnings],
            "counts": {"lines": self.line_count, "events": self.event_count, "unparsed": self.unparsed_count,
                       "kinds": dict(sorted(self.kinds.items()))},
        }


_NON_NUMERIC_KEYS = frozenset({"label", "dtype", "model_class", "draft", "va_upper_bound"})


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _rank_sort_key(label: str) -> tuple[int, ...]:
    nums = [int(x) for x in _RANK_NUMBERS.findall(label)]
    return tuple(nums) if nums else (-1,)


_STAGE_OF = {
    "dist_init_begin": "init", "dist_init_end": "init", "nccl_version": "init",
    "weight_load_begin": "weights", "weight_load_end": "weights", "checkpoint_progress": "weights",
    "kv_cache_allocated": "kv_pool", "memory_pool_end": "kv_pool", "swa_pool_split": "kv_pool",
    "mamba_cache_allocated": "kv_pool",
    "graph_capture_begin": "graph_capture", "graph_capture_end": "graph_capture",
    "graph_capture_progress": "graph_capture", "graph_capture_sizes": "graph_capture",
    "server_ready": "ready",
}
_STAGE_END = {"dist_init_end": "init", "weight_load_end": "weights", "memory_pool_end": "kv_pool",
              "graph_capture_end": "graph_capture", "server_ready": "ready"}
_ERA_HINTS = [  # (kind, predicate on fields/text, era) — the newest matching wins
    ("weight_load_begin", lambda e: e.ranks is not None and e.text.startswith("load"), "v0.1.x"),
    ("prefill_batch", lambda e: e.text.startswith("new fill batch"), "v0.1.x"),
    ("graph_capture_begin", lambda e: "role" in e.fields, "v0.5.14+"),
    ("weight_load_end", lambda e: "elapsed_s" in e.fields and "dtype" not in e.fields, "v0.5.10+"),
    ("weight_load_end", lambda e: "elapsed_s" in e.fields and "dtype" in e.fields, "v0.5.9"),
    ("kv_cache_allocated", lambda e: "dtype" in e.fields, "v0.5.13+"),
    ("weight_load_end", lambda e: "weight_gib" in e.fields and "elapsed_s" not in e.fields, "v0.4.3-v0.5.8"),
    ("weight_load_end", lambda e: "weight_gib" not in e.fields and "model_class" in e.fields, "v0.1.17-v0.4.3"),
]
_ERA_ORDER = ["v0.1.x", "v0.1.17-v0.4.3", "v0.4.3-v0.5.8", "v0.5.9", "v0.5.10+", "v0.5.13+", "v0.5.14+"]
_VERSION = re.compile(r"\bsglang(?:==| version:? ?|-)v?(\d{1,4}\.\d{1,4}\.\d{1,4}(?:\.post\d{1,4}|rc\d{1,4})?)", re.IGNORECASE)


class RunBuilder:
    """Folds events one at a time (streaming)."""

    def __init__(self, source: str = "") -> None:
        self.run = Run(source=source)
        self.decode_tput = Quantiles()
        self.n_decode = 0
        self.n_prefill = 0
        self.n_access = 0
        self.last_line = 0
        self.peak_usage: float | None = None
        self.peak_queue: int | None = None
        self.peak_running: int | None = None
        self.max_rank: dict[str, int] = {}
        self.era_rank = -1

    def add_batch_lines(self, blob: bytes, last_line: int = 0) -> None:
        """Bulk statistics of newline-joined `Decode batch` / `Prefill batch` lines (the fast path).

        `last_line` is the number of the last of these lines: the server was still serving then."""
        self.last_line = max(self.last_line, last_line)
        self.run.last_serving_line = max(self.run.last_serving_line, last_line)
        n_decode = blob.count(b"Decode batch")
        self.n_decode += n_decode
        self.n_prefill += blob.count(b"Prefill batch")
        self.run.event_count += blob.count(b"\n") + 1
        self.n_access += blob.count(b'HTTP/1.1"') + blob.count(b'HTTP/1.1\\"')  # plain, and inside JSON
        self.decode_tput.extend(map(float, _RX_TPUT.findall(blob)))
        usage = _RX_USAGE.findall(blob)
        if usage:
            u = max(map(float, usage))
            if self.peak_usage is None or u > self.peak_usage:
                self.peak_usage = u
        queue = _RX_QUEUE.findall(blob)
        if queue:
            q = max(map(int, queue))
            if self.peak_queue is None or q > self.peak_queue:
                self.peak_queue = q
        running = _RX_RUNNING.findall(blob)
        if running:
            r = max(map(int, running))
            if self.peak_running is None or r > self.peak_running:
                self.peak_running = r

    def _rank_mem(self, ev: Event) -> RankMemory:
        label = ev.ranks or ("TP0" if ev.rank is None else f"TP{ev.rank}")
        rm = self.run.ranks.get(label)
        if rm is None:
            rm = self.run.ranks[label] = RankMemory(label)
        return rm

    def add(self, ev: Event) -> None:
        run = self.run
        run.event_count += 1
        k = ev.kind
        run.kinds[k] = run.kinds.get(k, 0) + 1
        if k in _SERVING_KINDS:
            run.last_serving_line = max(run.last_serving_line, ev.line)
        if k == "decode_batch":
            self.n_decode += 1
            f = ev.fields
            t = f.get("gen_throughput")
            if isinstance(t, (int, float)):
                self.decode_tput.add(float(t))
            self._peaks(f)
            return
        if k == "prefill_batch":
            self.n_prefill += 1
            self._peaks(ev.fields)
            return
        if k == "unparsed":
            run.unparsed_count += 1
            if ev.text and "sglang" in ev.text.lower():
                m = _VERSION.search(ev.text)
                if m:
                    run.version = m.group(1)
            return
        if ev.template:
            run.templates.add(ev.template)
        if ev.ranks:
            for name, num in _RANK_NAMES.findall(ev.ranks):
                self.max_rank[name] = max(self.max_rank.get(name, 0), int(num))
        stage = _STAGE_OF.get(k)
        if stage is not None:
            st = run.stages.get(stage)
            if st is None:
                st = run.stages[stage] = Stage(stage, ev.line, ev.ts, ev.secs)
                if STAGES.index(stage) >= STAGES.index(run.last_stage or "init") or run.last_stage is None:
                    run.last_stage = stage
            if _STAGE_END.get(k) == stage or k == "graph_capture_end":
                st.end_secs, st.end_ts = ev.secs, ev.ts
        self._memory(ev)
        self._era(ev)
        if k == "server_args":
            run.server_args = parse_server_args(ev.fields.get("rest", ""))
        elif k == "scheduler_summary" and not run.scheduler_summary:
            run.scheduler_summary = dict(ev.fields)
        if k in FAILURE_KINDS or (k == "nccl_log" and _NCCL_FAIL.fullmatch(str(ev.fields.get("level")))) or \
                (k == "torch_log" and ev.fields.get("level") in ("E", "F")):
            target = run.failures
            if k in ("custom_allreduce_setup_failed", "model_import_failed", "kernel_log") or \
                    (k == "nccl_log" and ev.fields.get("level") == "WARN"):
                target = run.warnings
            if len(target) < MAX_FAILURES:
                target.append(Failure(ev.line, k, ev.rank, ev.ranks, ev.ts, ev.text[:500]))
        elif k in ("custom_allreduce_disabled", "python_warning", "mem_fraction_reduced", "max_total_tokens_capped",
                   "memory_unbalanced", "kv_retract", "request_truncated", "kv_leak") and \
                len(run.warnings) < MAX_FAILURES:
            run.warnings.append(Failure(ev.line, k, ev.rank, ev.ranks, ev.ts, ev.text[:500]))

    def _peaks(self, f: dict[str, Any]) -> None:
        u = f.get("token_usage")
        if isinstance(u, (int, float)) and (self.peak_usage is None or u > self.peak_usage):
            self.peak_usage = float(u)
        q = f.get("queue_req")
        if isinstance(q, int) and (self.peak_queue is None or q > self.peak_queue):
            self.peak_queue = q
        r = f.get("running_req")
        if isinstance(r, int) and (self.peak_running is None or r > self.peak_running):
            self.peak_running = r

    def _memory(self, ev: Event) -> None:
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

    def _era(self, ev: Event) -> None:
        for kind, pred, era in _ERA_HINTS:
            if ev.kind == kind and pred(ev):
                idx = _ERA_ORDER.index(era)
                if idx > self.era_rank:
                    self.era_rank = idx
                    self.run.era = era
                break

    def finish(self, line_count: int | None = None) -> Run:
        run = self.run
        sa = run.server_args
        for size_key, attr, rank_name in (("tp_size", "tp_size", "TP"), ("dp_size", "dp_size", "DP"),
                                          ("pp_size", "pp_size", "PP"), ("ep_size", "ep_size", "EP")):
            v = sa.get(size_key)
            if isinstance(v, int):
                setattr(run, attr, v)
            elif rank_name in self.max_rank:
                setattr(run, attr, self.max_rank[rank_name] + 1)
        if run.era in (None, "v0.1.17-v0.4.3"):
            stamps = [s.first_ts for s in run.stages.values() if s.first_ts]
            if stamps and all(len(t) == 8 for t in stamps):
                run.era = "v0.2.14-v0.3.3"  # time-only prefixes
            elif run.stages and not stamps and run.era is not None:
                run.era = "v0.1.17-v0.2.13"  # no prefix at all, rank inline as [gpu_id=N] / [gpu=N]
        run.batches = {
            "count": self.n_decode + self.n_prefill,
            "decode_count": self.n_decode,
            "prefill_count": self.n_prefill,
            "gen_throughput_p10": self.decode_tput.quantile(0.10),
            "gen_throughput_median": self.decode_tput.quantile(0.50),
            "gen_throughput_p90": self.decode_tput.quantile(0.90),
            "peak_token_usage": self.peak_usage,
            "peak_queue_req": self.peak_queue,
            "peak_running_req": self.peak_running,
        }
        if line_count is not None:
            run.line_count = max(line_count, self.last_line)
        return run


def summarize_source(source: str, envelope: str | None = None, citations: Citations | None = None) -> Run:
    """Parse and fold one log with the bulk path for batch lines (constant memory).

    `envelope` as `ingest.read_lines` takes it. The run's positions are in reading order; `citations`,
    when given, is filled with the map that turns them into lines as given (citations.cite_run)."""
    from logdoctor.parse.parse import parse_lines
    from logdoctor.read.ingest import read_lines
    b = RunBuilder(source)
    last_line = 0
    for ev in parse_lines(read_lines(source, b.add_batch_lines, envelope), source, citations):
        b.add(ev)
        last_line = max(last_line, ev.end_line or ev.line)
    return b.finish(last_line)


def summarize(events: Iterable[Event], source: str = "") -> Run:
    b = RunBuilder(source)
    last_line = 0
    for ev in events:
        b.add(ev)
        last_line = max(last_line, ev.end_line or ev.line)
    return b.finish(last_line)
