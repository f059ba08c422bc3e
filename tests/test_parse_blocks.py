"""The seam between line dispatch (parse.py) and block assembly (blocks.py), on synthetic logs built here.

The assembler keeps lines while a block is open, closes it at the first line that is not part of it, and
then hands back the block's event with the events derived from it; events of other processes printed
meanwhile wait and come out after the block, in line order; a runaway block is cut at MAX_BLOCK_LINES.
"""
from __future__ import annotations

import importlib
import re
from functools import partial
from pathlib import Path

from logdoctor.events import Event
from logdoctor.parse.blocks import MAX_BLOCK_LINES, MAX_DEFERRED, BlockAssembler
from logdoctor.parse.parse import EventParser, parse_lines, parse_text
from logdoctor.read.ingest import Line
from logdoctor.read.prefix import split_prefix

TS = "[2025-06-01 10:00:00 TP0] "
TRACEBACK = [
    TS + "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 310, in capture',
    "    raise Exception(",
    ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. "
     "GPU 0 has a total capacity of 79.15 GiB of which 1.50 GiB is free."),
]
NEXT_RECORD = TS + "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=14.9 GB."


def _line(number: int, text: str, **attrs: str) -> Line:
    return Line(number, text, attrs=attrs or None)


def _absorb_all(blocks: BlockAssembler, lines: list[Line]) -> list[tuple[bool, list[Event]]]:
    return [blocks.absorb(ln, split_prefix(ln.text)) for ln in lines]


def test_a_traceback_closes_at_the_next_prefixed_record_with_its_derived_events() -> None:
    lines = [_line(i, t) for i, t in enumerate([*TRACEBACK, NEXT_RECORD], start=1)]
    parser = EventParser("synthetic.log")
    # the launch message leaves at once; the traceback it starts is opened in the assembler
    assert [e.kind for e in parser.feed(lines[0])] == ["process_exception"]
    assert parser.blocks.is_open and parser.blocks.block is not None
    assert parser.blocks.block.event.kind == "traceback"

    # the frames and the exception line are the block's: nothing leaves while it is open
    steps = _absorb_all(parser.blocks, lines[1:4])
    assert steps == [(True, []), (True, []), (True, [])]

    # the next prefixed record is refused, and the block closes into its events
    consumed, closed = parser.blocks.absorb(lines[4], split_prefix(lines[4].text))
    assert not consumed and not parser.blocks.is_open
    tb, *derived = closed
    assert tb.kind == "traceback" and (tb.line, tb.end_line) == (1, 4)
    assert tb.fields["exception"] == "Exception"
    assert tb.fields["frames"] == ["/sglang/srt/model_executor/cuda_graph_runner.py:310 in capture"]
    # what the final message stands for, at the exception's line, from the traceback's source and rank
    assert [e.kind for e in derived] == ["graph_capture_failed", "torch_oom"]
    assert all(e.line == 4 and e.rank == 0 and e.source == "synthetic.log" for e in derived)
    assert derived[1].fields["exception"] == "Exception"


def test_through_the_parser_the_refused_line_is_an_event_of_its_own() -> None:
    events = parse_text("\n".join([*TRACEBACK, NEXT_RECORD]) + "\n")
    assert [(e.kind, e.line, e.end_line) for e in events] == [
        ("process_exception", 1, None), ("traceback", 1, 4), ("graph_capture_failed", 4, 4), ("torch_oom", 4, 4),
        ("weight_load_end", 5, None)]


WORKER = {"actor": "SGLangEngine", "pid": "4102"}
RAYLET = {"actor": "raylet"}


def test_events_of_another_process_wait_for_the_block_and_leave_in_line_order() -> None:
    worker = [_line(i, t, **WORKER) for i, t in enumerate(TRACEBACK, start=1)]
    # raylet lines printed inside the worker's traceback: after the frame and after the exception line
    raylet_a = _line(3, "Spilled 2048 MiB, 10 objects, write throughput 512 MiB/s.", **RAYLET)
    raylet_b = _line(6, "A worker died or was killed while executing a task.", **RAYLET)
    stream = [worker[0], worker[1], raylet_a,
              Line(4, worker[2].text, attrs=WORKER), Line(5, worker[3].text, attrs=WORKER), raylet_b]
    stream += [_line(7, NEXT_RECORD, **WORKER)]

    parser = EventParser("ray.log")
    out_by_line: dict[int, list[Event]] = {}
    for ln in stream:
        out_by_line[ln.number] = parser.feed(ln)
        if ln in (raylet_a, raylet_b):
            # held while the block is open: nothing leaves, the block stays open
            assert out_by_line[ln.number] == [] and parser.blocks.is_open
    assert parser.blocks.deferred == []  # released when line 7 closed the block
    released = out_by_line[7]
    lines = [e.line for e in released]
    assert lines == sorted(lines)
    assert {3, 6} <= set(lines), "the raylet lines' events come out with the block"
    tb = next(e for e in released if e.kind == "traceback")
    assert (tb.line, tb.end_line) == (1, 5) and tb.fields["exception"] == "Exception"
    # the block's events, then the held ones, then the record that closed it: one line order
    assert lines[-1] == 7


def test_the_held_events_are_bounded_by_max_deferred() -> None:
    blocks = BlockAssembler()
    blocks.open(Event("traceback", 1, {"frames": [], "chain": []}), "traceback", WORKER)

    def one_event(n: int) -> list[Event]:
        return [Event("unparsed", n)]

    for n in range(2, MAX_DEFERRED + 2):
        assert blocks.written_by_another(RAYLET)
        assert blocks.interleave(partial(one_event, n)) == []
    assert len(blocks.deferred) == MAX_DEFERRED and blocks.is_open
    # one more: the block is closed rather than hold without limit, and everything leaves in line order
    out = blocks.interleave(partial(one_event, MAX_DEFERRED + 2))
    assert not blocks.is_open and blocks.deferred == []
    assert [e.line for e in out] == list(range(1, MAX_DEFERRED + 3))


def test_a_line_of_the_same_writer_is_not_another_process() -> None:
    blocks = BlockAssembler()
    blocks.open(Event("traceback", 1, {"frames": [], "chain": []}), "traceback", WORKER)
    assert not blocks.written_by_another(dict(WORKER))
    assert not blocks.written_by_another(None)
    assert blocks.written_by_another({"actor": "SGLangEngine", "pid": "4103"})


def test_max_block_lines_closes_a_runaway_block() -> None:
    # a traceback whose body never ends: indented lines are all part of a traceback, so only the cap ends it
    body = [f"    frame_{i} = compute(frame_{i - 1})" for i in range(MAX_BLOCK_LINES + 50)]
    text = "\n".join(["Traceback (most recent call last):", *body, "RuntimeError: never reached"]) + "\n"
    parser = EventParser("runaway.log")
    events = []
    for ln in parse_lines_from(text):
        events.extend(parser.feed(ln))
        if ln.number == MAX_BLOCK_LINES + 1:
            assert parser.blocks.is_open and parser.blocks.block is not None
            assert parser.blocks.block.count == MAX_BLOCK_LINES
        if ln.number == MAX_BLOCK_LINES + 2:
            # the line over the cap closes the block and is classified on its own
            assert [e.kind for e in events] == ["traceback", "unparsed"]
    events.extend(parser.finish())
    tbs = [e for e in events if e.kind == "traceback"]
    assert len(tbs) == 2, "the cut traceback, then the exception line on its own (a frameless traceback)"
    assert (tbs[0].line, tbs[0].end_line) == (1, MAX_BLOCK_LINES + 1)
    assert tbs[0].fields["exception"] is None
    assert tbs[1].line == MAX_BLOCK_LINES + 52 and tbs[1].fields["exception"] == "RuntimeError"
    assert [e.line for e in events] == sorted(e.line for e in events)
    # every line after the cap is an event of its own: nothing was swallowed
    assert sum(e.kind == "unparsed" for e in events) == 50
    assert len(list(parse_lines(parse_lines_from(text)))) == len(events)


def parse_lines_from(text: str) -> list[Line]:
    return [Line(i, t) for i, t in enumerate(text.rstrip("\n").split("\n"), start=1)]


def test_every_parse_module_with_patterns_is_in_the_regex_audit() -> None:
    """Patterns moved out of parse.py must still be fed long runs by tests/test_linear_time.py."""
    audit = Path(__file__).with_name("test_linear_time.py").read_text()
    audited = set(re.findall(r'"(logdoctor\.[\w.]+)"', audit.split("AUDITED_MODULES = [", 1)[1].split("]", 1)[0]))
    parse_dir = Path(__file__).resolve().parent.parent / "logdoctor" / "parse"
    for path in sorted(parse_dir.glob("*.py")):
        name = f"logdoctor.parse.{path.stem}"
        module = importlib.import_module(name)
        if any(isinstance(v, re.Pattern) for v in vars(module).values()):
            assert name in audited, f"{name} has module-level patterns but is not in AUDITED_MODULES"
