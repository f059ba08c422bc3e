"""A line another process writes into the middle of a block (Ray's `(raylet)` daemon inside a worker's
stack, a second actor's INFO line inside the first one's traceback) does not end or split the block."""
from __future__ import annotations

from logdoctor.parse.parse import parse_text

WORKER = "(SGLangEngine pid=4102) "
OTHER = "(SGLangEngine pid=4103) "
RAYLET = "(raylet) Spilled 2048 MiB, 10 objects, write throughput 512 MiB/s. Set RAY_verbose_spill_logs=0 to disable this message."

TRACEBACK = [
    "[2025-12-15 21:08:40 TP2] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2711, in run_scheduler_process',
    "    scheduler = Scheduler(",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1801, in init_memory_pool',
    "    raise RuntimeError(",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
]


def _log(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _tracebacks(events: list) -> list:
    return [e for e in events if e.kind == "traceback"]


def test_raylet_line_inside_a_worker_traceback_keeps_one_block() -> None:
    lines = [WORKER + t for t in TRACEBACK]
    lines.insert(3, RAYLET)
    events = parse_text(_log(lines))
    tbs = _tracebacks(events)
    assert len(tbs) == 1
    assert tbs[0].fields["exception"] == "RuntimeError"
    assert "Not enough memory" in tbs[0].fields["message"]
    assert tbs[0].line == 1 and tbs[0].end_line == 7
    # the raylet line is an event of its own, and events still leave in line order
    assert any(e.line == 4 for e in events if e.kind != "traceback")
    assert [e.line for e in events] == sorted(e.line for e in events)


def test_raylet_line_inside_a_block_started_by_a_plain_line() -> None:
    lines = list(TRACEBACK)
    lines.insert(2, RAYLET)
    tbs = _tracebacks(parse_text(_log(lines)))
    assert len(tbs) == 1 and tbs[0].fields["exception"] == "RuntimeError"


def test_another_actors_line_inside_a_traceback_does_not_split_it() -> None:
    lines = [WORKER + t for t in TRACEBACK]
    lines.insert(2, OTHER + "[2025-12-15 21:08:40 TP3] Capture cuda graph begin. This can take up to several minutes. avail mem=4.44 GB")
    events = parse_text(_log(lines))
    tbs = _tracebacks(events)
    assert len(tbs) == 1 and tbs[0].fields["exception"] == "RuntimeError"
    assert [e.line for e in events] == sorted(e.line for e in events)


def test_another_actor_starting_its_own_traceback_ends_the_first() -> None:
    first = [WORKER + t for t in TRACEBACK[:3]]
    second = [OTHER + t.replace("TP2", "TP3") for t in TRACEBACK]
    tbs = _tracebacks(parse_text(_log(first + second)))
    assert len(tbs) == 2
    assert tbs[1].line == 4 and tbs[1].fields["exception"] == "RuntimeError"


def test_plain_logs_are_untouched_by_the_emitter_check() -> None:
    tbs = _tracebacks(parse_text(_log(TRACEBACK)))
    assert len(tbs) == 1 and tbs[0].end_line == 6
