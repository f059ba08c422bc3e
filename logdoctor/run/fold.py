"""Events to one Run, folded in one place: `Folding`.

What comes in: a log's events in line order (the parse stage), and on the bulk path the periodic batch
lines that ingest hands over raw instead of as events. What goes out: the log's `Run` (model.py).

`RunBuilder` folds one event at a time and composes the pieces of the fold, each owning some of the
Run's fields: `StageTracker` (stages.py: stages, era, parallel sizes), `RankMemoryFold`
(rank_memory.py: memory per rank), `BatchStats` (batches.py: batch counts, peaks, throughput); what is
left - counts, version, server args, the scheduler's summary, failures and warnings - is here.
`Folding` passes events through once, folding each on its way, and finishes the builder when they
end: diagnosis indexes the events of a Folding, `summarize` just drains one, so every path through
the tool sees the same Run. `fold_source` is the usual start: read, parse and fold one log.

Memory is bounded whatever the log's size: the builder keeps counters, one record per stage and per
rank, at most MAX_FAILURES failures and warnings, and throughput quantiles that turn into a histogram;
no event is kept. When asked (`series=True`, or inside serving_series.collecting_series: the HTML
report), it also folds the serving figures over time into at most MAX_POINTS buckets (`ServingSeries`,
kept beside the Run, never in its JSON).
"""
from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from logdoctor import regexes
from logdoctor.events import Event
from logdoctor.parse.serverargs import parse_server_args
from logdoctor.run.batches import BATCH_KINDS, BatchStats
from logdoctor.run.model import MAX_FAILURES, Failure, Run
from logdoctor.run.rank_memory import RankMemoryFold
from logdoctor.run.serving_series import ServingSeries, attach, series_wanted
from logdoctor.run.stages import StageTracker

if TYPE_CHECKING:
    from logdoctor.read.citations import Citations
    from logdoctor.read.ingest import BatchSink, Line

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
# failure kinds the launch survives: listed as warnings
_SURVIVED_FAILURE_KINDS = frozenset({"custom_allreduce_setup_failed", "model_import_failed", "kernel_log"})
WARNING_KINDS = frozenset({
    "custom_allreduce_disabled", "python_warning", "mem_fraction_reduced", "max_total_tokens_capped",
    "memory_unbalanced", "kv_retract", "request_truncated", "kv_leak",
})
# the quantities a failure's message prints that the memory analysis uses (fractions, GiB); not positions, which
# depend on how the log was collected
FAILURE_VALUE_KEYS = frozenset({
    "mem_fraction_static", "minimum", "viable", "requested", "profiled",
    "tried_gib", "free_gib", "total_gib", "in_use_gib", "allocated_gib", "reserved_gib", "this_process_gib",
})
_NCCL_FAIL = frozenset({"WARN", "ERROR", "ABORT"})
_SERVING_KINDS = frozenset({"decode_batch", "prefill_batch", "http_access"})
_VERSION = regexes.compile(r"\bsglang(?:==| version:? ?|-)v?(\d{1,4}\.\d{1,4}\.\d{1,4}(?:\.post\d{1,4}|rc\d{1,4})?)", re.IGNORECASE)


class RunBuilder:
    """Folds events one at a time (streaming) into `run`; `finish` once they are all in.

    `series`: also fold the serving figures over time (serving_series.py, for the HTML report; a cost
    per batch line, so only when asked). None: as `collecting_series` says here (default off)."""

    def __init__(self, source: str = "", series: bool | None = None) -> None:
        self.run = Run(source=source)
        self.batch_stats = BatchStats()
        if series if series is not None else series_wanted():
            self.batch_stats.series = ServingSeries()
        self.stage_tracker = StageTracker(self.run)
        self.rank_memory = RankMemoryFold(self.run)
        self.last_line = 0

    def add_batch_lines(self, blob: bytes, last_line: int = 0) -> None:
        """Bulk statistics of newline-joined `Decode batch` / `Prefill batch` lines (the fast path;
        this method is ingest's BatchSink). `last_line` is the number of the last of these lines: the
        server was still serving then."""
        self.last_line = max(self.last_line, last_line)
        self.run.last_serving_line = max(self.run.last_serving_line, last_line)
        self.run.event_count += self.batch_stats.add_batch_lines(blob)  # it counts the lines anyway

    def add(self, ev: Event) -> None:
        run = self.run
        run.event_count += 1
        k = ev.kind
        run.kinds[k] = run.kinds.get(k, 0) + 1
        if (k == "nccl_log" and ev.secs is None and ev.fields.get("level") == "INFO"
                and (not ev.ranks or ev.ranks in self.stage_tracker.labels_seen)):
            return  # NCCL_DEBUG=INFO chatter (thousands of lines): no stage, time, era, memory figure or failure in it
        if k in _SERVING_KINDS:
            run.last_serving_line = max(run.last_serving_line, ev.line)
        if k in BATCH_KINDS:
            self.batch_stats.add(ev)
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
        self.stage_tracker.add(ev)
        self.rank_memory.add(ev)
        if k == "server_args":
            run.server_args = parse_server_args(ev.fields.get("rest", ""))
        elif k == "scheduler_summary" and not run.scheduler_summary:
            run.scheduler_summary = dict(ev.fields)
        self._failure(ev)

    def _failure(self, ev: Event) -> None:
        run, k = self.run, ev.kind
        level = ev.fields.get("level")
        if k in FAILURE_KINDS or (k == "nccl_log" and str(level) in _NCCL_FAIL) or \
                (k == "torch_log" and level in ("E", "F")):
            target = run.warnings if k in _SURVIVED_FAILURE_KINDS or (k == "nccl_log" and level == "WARN") \
                else run.failures
        elif k in WARNING_KINDS:
            target = run.warnings
        else:
            return
        if len(target) < MAX_FAILURES:
            values = {key: v for key, v in ev.fields.items()
                      if key in FAILURE_VALUE_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}
            target.append(Failure(ev.line, k, ev.rank, ev.ranks, ev.ts, ev.text[:500], values))

    def finish(self, line_count: int | None = None) -> Run:
        """The Run, complete: parallel sizes and era, batch statistics, and `line_count` (at least the
        last line the bulk path saw) when given."""
        run = self.run
        self.stage_tracker.finish()
        run.batches = self.batch_stats.to_dict()
        if self.batch_stats.series is not None:
            attach(run, self.batch_stats.series)
        if line_count is not None:
            run.line_count = max(line_count, self.last_line)
        return run


class Folding:
    """Events passed through once, unchanged and in order, each folded into `builder` on its way.

    When the events end the builder is finished with the last line an event covers, and `run` is the
    whole Run (before that it is the fold so far). Nothing is kept: a Folding can be read only once.
    """

    def __init__(self, events: Iterable[Event], builder: RunBuilder | None = None, source: str = "") -> None:
        self.builder = builder if builder is not None else RunBuilder(source)
        self.finished = False
        self._events: Iterable[Event] | None = events

    @property
    def run(self) -> Run:
        return self.builder.run

    def __iter__(self) -> Iterator[Event]:
        events, self._events = self._events, None
        if events is None:
            raise RuntimeError("a Folding is read once: its events are not kept")
        return self._fold(events)

    def _fold(self, events: Iterable[Event]) -> Iterator[Event]:
        add = self.builder.add
        last = 0
        for ev in events:
            add(ev)
            n = ev.end_line or ev.line
            if n > last:
                last = n
            yield ev
        self.builder.finish(last)
        self.finished = True

    def drain(self) -> Run:
        """Fold every event and return the Run (the events themselves are dropped)."""
        deque(self, maxlen=0)
        return self.run


def fold_lines(read: Callable[[BatchSink], Iterable[Line]], label: str,
               citations: Citations | None = None, series: bool | None = None) -> Folding:
    """Parse and fold the lines `read(sink)` yields, where `sink` is the builder's own: the periodic
    batch lines go to it in bulk instead of being parsed (which is why the builder must exist before
    the lines are read). For a source other than a path (a stream read once, a filtered node).
    `series` as RunBuilder takes it."""
    # the parser (and lark) is imported once a log is read, not by whoever needs only the builder
    from logdoctor.parse.parse import parse_lines
    builder = RunBuilder(label, series)
    return Folding(parse_lines(read(builder.add_batch_lines), label, citations), builder)


def fold_source(source: str | os.PathLike[str], label: str | None = None, envelope: str | None = None,
                citations: Citations | None = None, series: bool | None = None) -> Folding:
    """Read, parse and fold one log, batch lines on the bulk path (constant memory). `label` names the
    log in the Run and the events (default: `source`); `envelope` as `ingest.read_lines` takes it. The
    run's positions are in reading order; `citations`, when given, is filled with the map that turns
    them into lines as given (model.cite_run); `series` as RunBuilder takes it."""
    from logdoctor.read.ingest import read_lines
    return fold_lines(lambda sink: read_lines(source, sink, envelope), label or str(source), citations, series)


def summarize_source(source: str, envelope: str | None = None, citations: Citations | None = None) -> Run:
    """The Run of one log (fold_source, drained)."""
    return fold_source(source, None, envelope, citations).drain()


def summarize(events: Iterable[Event], source: str = "") -> Run:
    """The Run of events already parsed (every batch line among them as an event)."""
    return Folding(events, source=source).drain()


__all__ = ["FAILURE_KINDS", "WARNING_KINDS", "Folding", "RunBuilder", "fold_lines", "fold_source",
           "summarize", "summarize_source"]
