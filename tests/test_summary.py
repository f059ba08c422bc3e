"""The run summary of one complete launch log per SGLang era, and of failing variants."""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor.run.fold import summarize_source

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
ALL = ["init", "weights", "kv_pool", "graph_capture", "ready"]


@pytest.mark.parametrize("name, era, tp, dp, ranks, mfs", [
    ("v0.2-tp2.log", "v0.1.17-v0.2.13", 2, 1, 2, 0.87),
    ("v0.3-tp2.log", "v0.2.14-v0.3.3", 2, 1, 2, 0.87),
    ("v0.4-tp8.log", "v0.4.3-v0.5.8", 8, 1, 8, 0.81),
    ("v0.5early-tp2.log", "v0.4.3-v0.5.8", 2, 1, 2, 0.834),
    ("v0.5new-dp2-tp4-ep4.log", "v0.5.14+", 4, 2, 8, 0.824),
])
def test_complete_launch_per_era(name: str, era: str, tp: int, dp: int, ranks: int, mfs: float) -> None:
    run = summarize_source(str(LOGS / name))
    assert run.era == era and run.tp_size == tp and run.dp_size == dp
    assert list(run.stages) == ALL and run.last_stage == "ready" and run.ready
    assert run.server_args["mem_fraction_static"] == mfs and isinstance(run.server_args["tp_size"], int)
    mem = run.rank_list()
    assert len(mem) == ranks
    for r in mem:
        assert r.free_before_weights_gib and r.free_after_weights_gib and r.kv_tokens and r.pool_end_free_gib
        assert r.free_before_weights_gib > r.free_after_weights_gib > r.pool_end_free_gib
        if not era.startswith(("v0.1", "v0.2")):  # no "KV Cache is allocated" line before v0.4.1.post6
            assert r.free_after_weights_gib > r.kv_gib
    for name_, st in run.stages.items():
        assert st.first_line and (st.duration_s is None or st.duration_s >= 0), name_
    assert run.batches["count"] > 0 and run.batches["gen_throughput_median"] > 0
    assert run.failures == []


def test_router_era_has_weights_and_batches_but_no_ready_line() -> None:
    run = summarize_source(str(LOGS / "v0.1-router-tp1.log"))
    assert run.era == "v0.1.x" and "weights" in run.stages and not run.ready
    assert run.batches["prefill_count"] > 0 and run.batches["decode_count"] > 0
    assert run.scheduler_summary["max_total_num_tokens"] > 0


def test_serving_log_batch_statistics() -> None:
    run = summarize_source(str(LOGS / "v0.4.7-mla-tp8-healthy-serving.log"))
    b = run.batches
    assert b["count"] >= 200 and b["gen_throughput_p10"] <= b["gen_throughput_median"] <= b["gen_throughput_p90"]
    assert 0 < b["peak_token_usage"] <= 1 and b["peak_queue_req"] >= 0


def test_failing_variant_lists_failures_in_time_order_with_ranks() -> None:
    run = summarize_source(str(LOGS / "v0.5-capture-oom-tp4.log"))
    assert run.last_stage == "graph_capture" and not run.ready
    lines = [f.line for f in run.failures]
    assert lines == sorted(lines)
    oom = [f for f in run.failures if f.kind == "torch_oom"]
    assert oom and all(f.ranks for f in oom)
