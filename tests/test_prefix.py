from __future__ import annotations

import pytest

from logdoctor.read.ingest import lines_from_text
from logdoctor.read.prefix import split_prefix


@pytest.mark.parametrize("line, body, ranks, rank, origin", [
    ("Load weight begin.", "Load weight begin.", None, None, "plain"),
    ("[14:03:22 TP0] Load weight begin.", "Load weight begin.", "TP0", 0, "sglang"),
    ("[2025-04-27 14:03:22 TP3] x", "x", "TP3", 3, "sglang"),
    ("[2025-12-02 14:03:22.123 DP0 TP3 EP3] x", "x", "DP0 TP3 EP3", 3, "sglang"),
    ("[2026-01-01 00:00:00 PP1 ATTN_CP0 TP2] x", "x", "PP1 ATTN_CP0 TP2", 2, "sglang"),
    ("[2025-05-01 10:00:00] x", "x", None, None, "sglang"),
    ("[2025-05-01 10:00:00 DP1] x", "x", "DP1", 1, "sglang"),
    ("[gpu_id=1] Load weight begin. avail mem=10.00 GB", "Load weight begin. avail mem=10.00 GB", "TP1", 1, "sglang"),
    ("[gpu=2] Init nccl begin.", "Init nccl begin.", "TP2", 2, "sglang"),
    ("Rank 0: load weight begin.", "load weight begin.", "TP0", 0, "sglang"),
    ("[2025-05-01 10:00:00] INFO:     Started server process [1]", "Started server process [1]", None, None, "uvicorn"),
    ("INFO:     Uvicorn running on http://x:1 (Press CTRL+C to quit)", "Uvicorn running on http://x:1 (Press CTRL+C to quit)", None, None, "uvicorn"),
    ("host-1:72:72 [3] NCCL INFO Bootstrap: Using eth0", "Bootstrap: Using eth0", "rank3", 3, "nccl"),
    ("[2026-02-25 18:08:45] h:1:1 [3] os/linux.cc:200 NCCL WARN connect refused", "connect refused", "rank3", 3, "nccl"),
    ("[rank0]:[E1130 01:45:25.890538359 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog", "[Rank 0] Watchdog", "rank0", 0, "torch"),
    ("E1130 01:46:32.635000 878 torch/distributed/elastic/multiprocessing/api.py:986] failed", "failed", None, None, "glog"),
    ("WARNING 05-25 00:00:25 custom_all_reduce.py:74] Custom allreduce is disabled", "Custom allreduce is disabled", None, None, "vllm"),
    ("[Gloo] Rank 0 is connected to 1 peer ranks.", "Rank 0 is connected to 1 peer ranks.", None, None, "gloo"),
])
def test_prefix_forms(line: str, body: str, ranks: str | None, rank: int | None, origin: str) -> None:
    p = split_prefix(line)
    assert (p.body, p.ranks, p.rank, p.origin) == (body, ranks, rank, origin)


@pytest.mark.parametrize("line, body, ranks, rank, origin", [
    ("(SchedulerActor pid=123, ip=10.0.0.1) [2025-01-01 10:00:00 TP0] x", "x", "TP0", 0, "sglang"),
    ("2025-01-01T10:00:00.123456789Z [2025-01-01 10:00:00 TP5] x", "x", "TP5", 5, "sglang"),
    ("Jan 01 10:00:00 gpu-node python3[4242]: [2025-01-01 10:00:00 TP1] x", "x", "TP1", 1, "sglang"),
    ("3: [2025-01-01 10:00:00 TP3] x", "x", "TP3", 3, "sglang"),
])
def test_collector_envelopes_are_peeled_before_the_prefix(line: str, body: str, ranks: str | None, rank: int | None,
                                                           origin: str) -> None:
    # the envelope is ingest's (envelope.py): the prefix stage sees the line without it
    [ln] = list(lines_from_text(line + "\n"))
    p = split_prefix(ln.text)
    assert (p.body, p.ranks, p.rank, p.origin) == (body, ranks, rank, origin)


def test_timestamps_give_seconds() -> None:
    a = split_prefix("[2025-04-27 14:03:22 TP0] x")
    b = split_prefix("[2025-04-27 14:03:52.500 TP0] x")
    assert a.ts == "2025-04-27 14:03:22"
    assert b.secs - a.secs == pytest.approx(30.5)
