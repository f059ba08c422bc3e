"""Where a launch got to and what it was: stages reached, the SGLang era, the parallel sizes.

`StageTracker` fills these fields of a Run as events come:
- `stages` / `last_stage`: the first line and time of each launch stage (init → weights → KV pool →
  graph capture → ready) and when it ended; "last stage reached" diagnoses a hang that prints no error;
- `rank_stages`: the same per rank label (`TP3`, `DP0 TP3 EP3`, `TP<n>` for an inline `[gpu_id=n]`: the
  labels of `Run.ranks`), from the rank's own lines only: the first and last time of its lines in each
  stage, the furthest stage they show, and its last timed line before ready (where it stopped);
- `warmup`: the run-wide warm-up, printed by the main process (catalog b.8-b.10): from `Uvicorn running`
  [S69], a custom `Running warmup` [S66/S67] or the first warm-up request (`GET /get_model_info`,
  `/model_info`, `POST /generate`, `/encode`), whichever comes first, to the ready line [S63] or to
  `Initialization failed. warmup error` [X16]. `Started server process` [S68] is not its start: the
  warm-up thread only polls until uvicorn listens. Not a STAGE: last_stage and the diagnoses stay as they are;
- `era`: which SGLang release range printed the log, from the shape of a few lines (the newest wins);
- `tp_size` / `dp_size` / `pp_size` / `ep_size`, at `finish`: from the server args when printed, else
  from the largest rank each prefix name (`TP3`, `DP1`...) showed; `parallel_source` says which
  (`server_args` or `ranks`: a guess, since a rank that prints nothing is not seen).
"""
from __future__ import annotations

import re
from collections.abc import Callable

from logdoctor import regexes
from logdoctor.events import Event
from logdoctor.run.model import STAGES, RankStages, Run, Stage, rank_label

_RANK_NAMES = regexes.compile(r"(?<![A-Z])([A-Z]{1,16})(\d{1,6})(?!\d)")

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
_STAGE_INDEX = {name: i for i, name in enumerate(STAGES)}
_WARMUP_START = frozenset({"uvicorn_running", "warmup"})
# what SGLang's `_wait_and_warmup` asks the server for before it prints the ready line
_WARMUP_PATHS = ("/get_model_info", "/model_info", "/generate", "/encode")
_ERA_HINTS: list[tuple[str, Callable[[Event], bool], str]] = [  # (kind, predicate, era): the newest matching wins
    ("weight_load_begin", lambda e: e.ranks is not None and e.text.startswith("load"), "v0.1.x"),
    ("prefill_batch", lambda e: e.text.startswith("new fill batch"), "v0.1.x"),
    ("graph_capture_begin", lambda e: "role" in e.fields, "v0.5.14+"),
    ("weight_load_end", lambda e: "elapsed_s" in e.fields and "dtype" not in e.fields, "v0.5.10+"),
    ("weight_load_end", lambda e: "elapsed_s" in e.fields and "dtype" in e.fields, "v0.5.9"),
    ("kv_cache_allocated", lambda e: "dtype" in e.fields, "v0.5.13+"),
    ("weight_load_end", lambda e: "weight_gib" in e.fields and "elapsed_s" not in e.fields, "v0.4.3-v0.5.8"),
    ("weight_load_end", lambda e: "weight_gib" not in e.fields and "model_class" in e.fields, "v0.1.17-v0.4.3"),
]
_ERA_KINDS = frozenset(kind for kind, _, _ in _ERA_HINTS)
MAX_LABELS_SEEN = 4096
_ERA_ORDER = ["v0.1.x", "v0.1.17-v0.4.3", "v0.4.3-v0.5.8", "v0.5.9", "v0.5.10+", "v0.5.13+", "v0.5.14+"]
# server-arg key, Run attribute, rank prefix name
_SIZES = (("tp_size", "tp_size", "TP"), ("dp_size", "dp_size", "DP"), ("pp_size", "pp_size", "PP"),
          ("ep_size", "ep_size", "EP"))


class StageTracker:
    """Stages, era and parallel sizes of one Run (the fields above), folded one event at a time."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.max_rank: dict[str, int] = {}   # rank prefix name → largest number seen: O(names)
        self.labels_seen: set[str] = set()
        self.era_rank = -1

    def add(self, ev: Event) -> None:
        if ev.ranks and ev.ranks not in self.labels_seen:
            if len(self.labels_seen) < MAX_LABELS_SEEN:
                self.labels_seen.add(ev.ranks)  # a label gives the same maxima every time it is printed
            for name, num in _RANK_NAMES.findall(ev.ranks):
                self.max_rank[name] = max(self.max_rank.get(name, 0), int(num))
        self._stage(ev)
        self._warmup(ev)
        if ev.kind in _ERA_KINDS:
            self._era(ev)
        if ev.secs is not None:
            self.run.last_secs = ev.secs
            if not self.run.ready and self.run.rank_stages:
                rs = self.run.rank_stages.get(rank_label(ev) or "")
                if rs is not None:
                    rs.last_secs = ev.secs

    def _stage(self, ev: Event) -> None:
        k = ev.kind
        stage = _STAGE_OF.get(k)
        if stage is None:
            return
        run = self.run
        st = run.stages.get(stage)
        if st is None:
            st = run.stages[stage] = Stage(stage, ev.line, ev.ts, ev.secs)
            if STAGES.index(stage) >= STAGES.index(run.last_stage or "init") or run.last_stage is None:
                run.last_stage = stage
        if _STAGE_END.get(k) == stage or k == "graph_capture_end":
            st.end_secs, st.end_ts = ev.secs, ev.ts
        label = rank_label(ev)
        if label is not None:
            self._rank_stage(label, stage, ev.secs)

    def _rank_stage(self, label: str, stage: str, secs: float | None) -> None:
        rs = self.run.rank_stages.get(label)
        if rs is None:
            rs = self.run.rank_stages[label] = RankStages(label)
        if rs.reached is None or _STAGE_INDEX[stage] > _STAGE_INDEX[rs.reached]:
            rs.reached = stage
        if secs is not None:
            span = rs.spans.get(stage)
            # the last line's time, not the largest: time-only stamps restart at midnight
            rs.spans[stage] = (secs, secs) if span is None else (span[0], secs)

    def _warmup(self, ev: Event) -> None:
        run, k = self.run, ev.kind
        w = run.warmup
        if k in ("server_ready", "warmup_failed"):
            if w is not None and w.end_ts is None and w.end_secs is None:
                w.end_secs, w.end_ts = ev.secs, ev.ts
            return
        if run.ready or (w is not None and w.start_secs is not None):
            return
        if k in _WARMUP_START or (k == "http_access" and run.stages
                                  and str(ev.fields.get("path", "")).startswith(_WARMUP_PATHS)):
            if w is None:
                run.warmup = Stage("warmup", ev.line, ev.ts, ev.secs)
            elif ev.secs is not None:   # its first line had no time (uvicorn before v0.3.4): the first that does
                w.first_ts, w.start_secs = ev.ts, ev.secs

    def _era(self, ev: Event) -> None:
        for kind, pred, era in _ERA_HINTS:
            if ev.kind == kind and pred(ev):
                idx = _ERA_ORDER.index(era)
                if idx > self.era_rank:
                    self.era_rank = idx
                    self.run.era = era
                break

    def finish(self) -> None:
        """Parallel sizes (needs the server args, which may come late) and the eras only the whole
        log tells apart (by the shape of its stage stamps)."""
        run = self.run
        sa = run.server_args
        for size_key, attr, rank_name in _SIZES:
            v = sa.get(size_key)
            if isinstance(v, int):
                setattr(run, attr, v)
                run.parallel_source[attr.removesuffix("_size")] = "server_args"
            elif rank_name in self.max_rank:
                setattr(run, attr, self.max_rank[rank_name] + 1)
                run.parallel_source[attr.removesuffix("_size")] = "ranks"
        if run.era in (None, "v0.1.17-v0.4.3"):
            stamps = [s.first_ts for s in run.stages.values() if s.first_ts]
            if stamps and all(len(t) == 8 for t in stamps):
                run.era = "v0.2.14-v0.3.3"  # time-only prefixes
            elif run.stages and not stamps and run.era is not None:
                run.era = "v0.1.17-v0.2.13"  # no prefix at all, rank inline as [gpu_id=N] / [gpu=N]


__all__ = ["StageTracker"]
