"""The seams of the run stage: Folding is a pass-through that folds on its way, every path folds the
same Run, and the fold's pieces (batch statistics, stage tracking) agree with the whole."""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor.diagnosis.ranking import diagnose, diagnose_source
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.parse.parse import parse_source, parse_text
from logdoctor.run.batches import BATCH_KINDS, BatchStats
from logdoctor.run.fold import (
    Folding,
    RunBuilder,
    fold_source,
    summarize,
    summarize_source,
)
from logdoctor.run.model import Run
from logdoctor.run.stages import StageTracker

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
FIXTURES = ["v0.5new-dp2-tp4-ep4.log", "v0.4.7-mla-tp8-healthy-serving.log", "v0.5-capture-oom-tp4.log",
            "v0.1-router-tp1.log", "v0.3-tp2.log", "torchrun-child-failed.txt"]
RULES = load_ruleset()

BATCH_LINES = [
    ("[2025-06-12 08:33:02 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
     "#running-req: 0, #queue-req: 0"),
    ("[2025-06-12 08:33:40 TP0] Decode batch. #running-req: 3, #token: 7675, token usage: 0.01, cuda graph: True, "
     "gen throughput (token/s): 137.41, #queue-req: 0"),
    ("[2025-06-12 08:33:40 TP0] Prefill batch. #new-seq: 3, #new-token: 3091, #cached-token: 4608, token usage: 0.41, "
     "#running-req: 3, #queue-req: 12"),
    ("[2025-06-12 08:33:42 TP0] Decode batch. #running-req: 26, #token: 15614, token usage: 0.03, cuda graph: True, "
     "gen throughput (token/s): 267.13, #queue-req: 5"),
    ("[2025-06-12 08:33:43 TP0] Decode batch. #running-req: 6, #token: 15700, token usage: 0.04, cuda graph: False, "
     "gen throughput (token/s): 12.5, #queue-req: 0"),
]


def _serving_log(path: Path, n: int) -> None:
    """A launch, then more batch lines than ingest's sample: the bulk path takes most of them."""
    launch = (LOGS / "v0.5early-tp2.log").read_text().rstrip("\n")
    body = [f"[2025-12-02 11:{i // 600 % 60:02d}:{i // 10 % 60:02d} TP0] Decode batch, #running-req: {i % 40}, "
            f"#token: {1000 + i}, token usage: 0.{(i * 7) % 89:02d}, cuda graph: True, "
            f"gen throughput (token/s): {1000 + (i * 37) % 2000:.2f}, #queue-req: {i % 23}, " for i in range(n)]
    path.write_text(launch + "\n" + "\n".join(body) + "\n")


# ------------------------------------------------------------------------------------------------
# Folding


@pytest.mark.parametrize("name", FIXTURES)
def test_folding_passes_every_event_through_and_folds_what_summarize_folds(name: str) -> None:
    path = LOGS / name
    events = list(parse_source(path))
    folding = Folding(iter(events), source=str(path))
    passed = list(folding)
    assert len(passed) == len(events) and all(a is b for a, b in zip(passed, events))
    assert folding.finished
    assert folding.run.to_dict() == summarize(events, str(path)).to_dict()
    assert folding.run.line_count == max(ev.end_line or ev.line for ev in events)


def test_folding_finishes_only_at_the_end_and_is_read_once() -> None:
    events = list(parse_source(LOGS / "v0.5new-dp2-tp4-ep4.log"))
    folding = Folding(events, source="x")
    it = iter(folding)
    next(it)
    assert not folding.finished and folding.run.batches == {}  # the fold so far: batches come at finish
    for _ in it:
        pass
    assert folding.finished and folding.run.batches["count"] == summarize(events).batches["count"]
    with pytest.raises(RuntimeError, match="read once"):
        iter(folding)


def test_folding_into_a_given_builder() -> None:
    builder = RunBuilder("given")
    run = Folding(parse_source(LOGS / "v0.3-tp2.log"), builder).drain()
    assert run is builder.run and run.source == "given" and run.tp_size == 2


@pytest.mark.parametrize("name", FIXTURES)
def test_summarize_source_is_the_run_diagnose_source_folds(name: str) -> None:
    path = str(LOGS / name)
    assert summarize_source(path).to_dict() == diagnose_source(path, RULES).run.to_dict()


def test_the_same_run_on_the_bulk_path(tmp_path: Path) -> None:
    p = tmp_path / "serve.log"
    _serving_log(p, 6000)
    run = summarize_source(str(p))
    assert run.batches["decode_count"] == p.read_text().count("Decode batch")
    assert run.kinds.get("decode_batch", 0) < 6000  # most of them took the bulk path
    assert run.to_dict() == diagnose_source(str(p), RULES).run.to_dict()
    assert run.to_dict() == fold_source(str(p)).drain().to_dict()


def test_fold_source_label_names_run_and_events() -> None:
    folding = fold_source(str(LOGS / "v0.3-tp2.log"), label="node-a")
    assert {ev.source for ev in folding} == {"node-a"} and folding.run.source == "node-a"


def test_diagnose_takes_a_folding_or_events_and_refuses_two_builders() -> None:
    path = LOGS / "v0.5-capture-oom-tp4.log"
    by_source = diagnose_source(str(path), RULES).to_dict()
    assert diagnose(fold_source(str(path)), RULES, str(path)).to_dict() == by_source
    with pytest.raises(ValueError, match="own builder"):
        diagnose(fold_source(str(path)), RULES, str(path), RunBuilder(str(path)))


# ------------------------------------------------------------------------------------------------
# the pieces


def test_batch_stats_bulk_lines_equal_batch_events() -> None:
    events = parse_text("\n".join(BATCH_LINES))
    assert [ev.kind for ev in events] == ["prefill_batch", "decode_batch", "prefill_batch", "decode_batch",
                                          "decode_batch"]
    one_by_one, bulk = BatchStats(), BatchStats()
    for ev in events:
        assert ev.kind in BATCH_KINDS
        one_by_one.add(ev)
    bulk.add_batch_lines("\n".join(BATCH_LINES[:2]).encode())  # ingest hands batch lines over in chunks
    bulk.add_batch_lines("\n".join(BATCH_LINES[2:]).encode())
    assert bulk.to_dict() == one_by_one.to_dict()
    d = bulk.to_dict()
    assert (d["count"], d["decode_count"], d["prefill_count"]) == (5, 3, 2)
    assert (d["peak_token_usage"], d["peak_queue_req"], d["peak_running_req"]) == (0.41, 12, 26)
    assert d["gen_throughput_median"] == 137.41


def test_batch_stats_of_no_batches() -> None:
    d = BatchStats().to_dict()
    assert d["count"] == 0 and d["gen_throughput_median"] is None and d["peak_queue_req"] is None


def test_stage_tracker_sizes_from_rank_prefixes_without_server_args() -> None:
    text = "\n".join(f"[2026-05-01 10:00:14 DP{dp} TP{tp} EP{tp}] Load weight begin. avail mem=78.46 GB"
                     for dp in range(2) for tp in range(4))
    run = Run()
    tracker = StageTracker(run)
    for ev in parse_text(text):
        tracker.add(ev)
    tracker.finish()
    assert (run.tp_size, run.dp_size, run.ep_size, run.pp_size) == (4, 2, 4, None)
    assert list(run.stages) == ["weights"] and run.last_stage == "weights"


def test_stage_tracker_server_args_win_over_rank_prefixes() -> None:
    run = Run(server_args={"tp_size": 8, "dp_size": 1})
    tracker = StageTracker(run)
    for ev in parse_text("[2026-05-01 10:00:14 DP1 TP3] Load weight begin. avail mem=78.46 GB"):
        tracker.add(ev)
    tracker.finish()
    assert (run.tp_size, run.dp_size) == (8, 1)


def test_stage_tracker_last_stage_is_the_furthest_reached() -> None:
    run = summarize(parse_source(LOGS / "v0.5-capture-oom-tp4.log"))
    assert run.last_stage == "graph_capture" and "ready" not in run.stages
    assert list(run.stages) == ["init", "weights", "kv_pool", "graph_capture"]
