"""Multi-line blocks: the lines after a block's first line in, the block's events out.

The parser (parse.py) recognises the first line of a block and opens it here; from then on it hands every
line to `BlockAssembler.absorb` until one is refused, which closes the block. Blocks are a Python traceback
with its chained exceptions and the message continuation after the final exception, a C++ stack / glog
dump (`cpp`), a faulthandler or signal dump (`fatal`) and a `Possible solutions:` list. A block becomes one
event spanning `line..end_line`; a closed traceback also yields the events its exception messages stand for
(`Exception: Capture cuda graph failed: CUDA out of memory` → `graph_capture_failed` and `torch_oom` at
the exception's line), so rules look through wrappers without reading text.

Lines another process writes into an open block (`(raylet)` inside a worker's stack) are classified by the
parser and their events held here (at most MAX_DEFERRED) until the block closes: events leave in line order.

Work and memory are bounded per block: it absorbs at most MAX_BLOCK_LINES lines, a message at most
MAX_MESSAGE_LINES (kept up to MAX_MESSAGE_CHARS), MAX_FRAMES frames, MAX_CHAIN chained exceptions and
MAX_KEPT_LINES stored lines; a line that is an event of its own (a batch line, a launch message) ends it.
Events leave unbounded: the parser cuts them to events.bound_event.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from logdoctor import regexes
from logdoctor.events import Event, clip
from logdoctor.parse.errortext import (
    RootCause,
    cuda_error_fields,
    oom_fields,
    torchrun_root_cause,
)
from logdoctor.parse.finishers import AVAILABLE_TOKENS, TRY_TOKENS
from logdoctor.parse.grammar import parse_batch, parse_message
from logdoctor.parse.values import to_int
from logdoctor.read.ingest import Line
from logdoctor.read.prefix import Prefixed

# Every pattern is bounded (`{0,N}`) and has no two adjacent quantifiers over the same characters: a log line
# is untrusted input (tests/test_linear_time.py feeds each pattern long runs).
# The final line of a traceback, `pkg.SomeError: message`; parse.py also takes it for an exception line
# printed without its traceback.
EXC_LINE = regexes.compile(
    r"^(?P<exc>(?:[A-Za-z_]\w{0,200}\.){0,32}[A-Z]\w{0,200}(?:Error|Exception|Exit|Interrupt|Failure|Fault|Warning|Failed)"
    r"|(?:[A-Za-z_]\w{0,200}\.){1,32}[A-Z]\w{0,200}(?=: )|Exception|KeyboardInterrupt|StopIteration)(?:: (?P<msg>.*))?$"
)
# A traceback frame; parse.py also opens a traceback at one pasted without its header.
FRAME_LINE = regexes.compile(r'^\s{1,64}File "(?P<file>[^"]{0,4096})", line (?P<lineno>\d{1,9})(?:, in (?P<func>.*))?')
_OOM = regexes.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)
_CPP_STACK = regexes.compile(r"^(?:frame #\d{1,9}:|Exception raised from |#\d{1,9} |\s{1,64}what\(\):|Current thread 0x|Thread 0x|"
                        r"Extension modules:|\s{1,64}File \")")
_NUMBERED = regexes.compile(r"^\s{0,64}\d{1,9}\. ")
_ITEM_NUMBER = regexes.compile(r"^\s{0,64}\d{1,9}\.\s{0,64}")
_SOLUTIONS = regexes.compile(r"^Possible (?:solutions|suggestions):$", re.MULTILINE)
_DRAFT_HINT = regexes.compile(r"draft|MTP|EAGLE")
_BACKEND = regexes.compile(r"Fail when using backend: (\w{1,64})")
MAX_FRAMES = 500
MAX_CHAIN = 50
MAX_BLOCK_LINES = 5000           # lines one traceback / C++ stack / dump may absorb before it is closed
MAX_MESSAGE_LINES = 1000         # continuation lines of one exception message (a torchrun summary of 100+ ranks)
MAX_MESSAGE_CHARS = 8192         # of which this much text is kept (the rest is read, not stored)
MAX_DEFERRED = 1000               # other processes' events held while a block is open (then it is closed)
MAX_KEPT_LINES = 200             # lines a fatal / C++ / solutions block stores for its fields

MODES = ("traceback", "exc_message", "fatal", "solutions", "cpp")
_EMITTER_KEYS = ("pod", "container", "host", "ip", "actor", "pid")


def _emitter(attrs: dict[str, str] | None) -> tuple[str | None, ...] | None:
    """Which process wrote a line, as far as its envelope says (None: it says nothing)."""
    if not attrs:
        return None
    key = tuple(attrs.get(k) for k in _EMITTER_KEYS)
    return key if any(key) else None


class _Block:
    """An open multi-line event being assembled."""

    def __init__(self, event: Event, mode: str) -> None:
        self.event = event
        self.mode = mode                    # one of MODES
        self.lines: list[str] = []          # lines kept for the fields (fatal, cpp, solutions), ≤ MAX_KEPT_LINES
        self.count = 0                      # lines absorbed so far, ≤ MAX_BLOCK_LINES
        self.message: list[str] = []        # continuation lines of the exception message, joined once at the end
        self.message_lines = 0
        self.message_chars = 0
        self.blank = False                  # the last continuation line was blank
        self.root: RootCause | None = None  # a torchrun summary being read (ChildFailedError)

    def keep(self, text: str) -> None:
        if len(self.lines) < MAX_KEPT_LINES:
            self.lines.append(text)

    def start_message(self, exception: str | None) -> None:
        self.message, self.message_lines, self.message_chars, self.blank = [], 0, 0, False
        self.root = RootCause() if "ChildFailedError" in (exception or "") else None

    def add_message(self, text: str) -> None:
        self.message_lines += 1
        if self.message_chars < MAX_MESSAGE_CHARS:
            self.message.append(text)
            self.message_chars += len(text) + 1
        if self.root is not None:
            self.root.feed(text)

    def flush_message(self) -> None:
        """The message text, joined once (appending line by line was quadratic) and cut to MAX_MESSAGE_CHARS."""
        if self.message:
            f = self.event.fields
            f["message"] = clip("\n".join([f.get("message") or "", *self.message]), MAX_MESSAGE_CHARS)
            self.message = []


def _new_record(p: Prefixed) -> bool:
    """A line that is an event of its own (a batch line, a launch message) ends an open block.

    Logs without prefixes (v0.1) give no other sign that a traceback is over: without this one
    request error swallowed every serving line after it, and the healthy run read as failed."""
    body = p.body
    if not body.strip() or body.startswith(("  ", "\t")):
        return False  # indented: part of the block
    if p.origin in ("sglang", "plain") and parse_batch(body) is not None:
        return True
    parsed = parse_message(body)
    return parsed is not None and parsed[0] != "possible_solutions"


class BlockAssembler:
    """The one open block of a source (or none), the events held while it is open, and its closing."""

    def __init__(self) -> None:
        self.block: _Block | None = None
        self.emitter: tuple[str | None, ...] | None = None   # who wrote the open block's first line
        self.deferred: list[Event] = []     # other processes' events that arrived inside the open block

    @property
    def is_open(self) -> bool:
        return self.block is not None

    def open(self, event: Event, mode: str, attrs: dict[str, str] | None) -> None:
        """Start assembling `event` (its first line read) in `mode`; `attrs`: that line's envelope."""
        self.block = _Block(event, mode)
        self.emitter = _emitter(attrs)

    def written_by_another(self, attrs: dict[str, str] | None) -> bool:
        """A line whose envelope names another writer than the open block's first line: not part of it.
        Ray's own daemon never writes part of a worker's block; another known writer does not either."""
        if attrs is None:
            return False
        emitter = _emitter(attrs)
        return emitter is not None and emitter != self.emitter and (
            self.emitter is not None or attrs.get("actor") == "raylet")

    def interleave(self, classify: Callable[[], list[Event]]) -> list[Event]:
        """A line another process wrote into the middle of the open block (a `(raylet)` line inside a
        worker's stack): `classify` makes its own events with the block set aside, and the block stays
        open; those events wait until the block closes, so events still leave in line order. When that
        line starts a block of its own, the other process has taken over the output: the held block ends
        there, as it always did."""
        held, held_emitter = self.block, self.emitter
        self.block = None
        out = classify()
        if self.block is None and len(self.deferred) < MAX_DEFERRED:
            self.block, self.emitter = held, held_emitter
            self.deferred.extend(out)
            return []
        started, started_emitter = self.block, self.emitter
        self.block = held
        closed = self.close()
        self.block, self.emitter = started, started_emitter
        return closed + out

    def close(self) -> list[Event]:
        """The open block's events (none if no block is open) and the events held meanwhile, in line order."""
        if self.deferred:
            deferred, self.deferred = self.deferred, []
            return sorted(self._close_block() + deferred, key=lambda e: e.line)  # stable: in line order
        return self._close_block()

    def _close_block(self) -> list[Event]:
        b = self.block
        if b is None:
            return []
        self.block = None
        ev = b.event
        if ev.kind == "traceback":
            b.flush_message()
            return [ev, *_derived(ev, b.root)]
        if ev.kind == "fatal_signal" and b.lines:
            ev.fields.setdefault("frames", [x.strip() for x in b.lines if x.strip().startswith("File")][:50])
        if ev.kind == "possible_solutions":
            ev.fields["items"] = [_ITEM_NUMBER.sub("", x, count=1).strip() for x in b.lines if _NUMBERED.match(x)]
        return [ev]

    def absorb(self, ln: Line, p: Prefixed) -> tuple[bool, list[Event]]:
        """Try to add this line to the open block. Returns (consumed, events closed meanwhile); a line
        not consumed has closed the block and is the parser's to classify."""
        b = self.block
        assert b is not None
        b.count += 1
        if b.count > MAX_BLOCK_LINES:
            return False, self.close()  # a block that runs on for thousands of lines is over
        text = ln.text
        body = p.body
        has_prefix = p.ts is not None or p.origin in ("nccl", "torch", "glog", "vllm", "uvicorn")
        ev = b.event
        if b.mode == "traceback":
            if has_prefix and not body.startswith("Traceback"):
                return False, self.close()
            m = FRAME_LINE.match(text)
            if m:
                frames = ev.fields["frames"]
                if len(frames) < MAX_FRAMES:  # bounded: a pathological chain cannot grow without limit
                    frames.append(clip(f'{m.group("file")}:{m.group("lineno")} in {m.group("func") or "?"}', 512))
                ev.end_line = ln.number
                return True, []
            stripped = text.strip()
            if text.startswith(("    ", "\t")) or stripped == "" or set(stripped) <= set("^~ "):
                ev.end_line = ln.number if stripped else ev.end_line
                return True, []
            if text.startswith("Traceback (most recent call last)"):
                ev.end_line = ln.number
                return True, []
            m = EXC_LINE.match(text)
            if m:
                ev.fields["exception"] = m.group("exc")
                ev.fields["message"] = clip((m.group("msg") or "").strip(), MAX_MESSAGE_CHARS)
                ev.fields["exception_line"] = ln.number
                ev.end_line = ln.number
                b.mode = "exc_message"
                b.start_message(m.group("exc"))
                if b.root is not None:
                    b.root.feed(m.group("msg") or "")
                return True, []
            if text.startswith(("During handling", "The above exception")):
                ev.end_line = ln.number
                return True, []
            if _new_record(p):
                return False, self.close()
            # something else inside a traceback (e.g. an interleaved line): keep it in the block
            ev.end_line = ln.number
            return True, []
        if b.mode == "exc_message":
            stripped = text.strip()
            if has_prefix:
                return False, self.close()
            if stripped.startswith(("During handling of the above exception", "The above exception was")):
                b.flush_message()
                if len(ev.fields["chain"]) < MAX_CHAIN:
                    ev.fields["chain"].append({"exception": ev.fields.get("exception"),
                                               "message": ev.fields.get("message"),
                                               "line": ev.fields.get("exception_line")})
                ev.end_line = ln.number
                b.mode = "traceback"
                b.start_message(None)
                return True, []
            if text.startswith("Traceback (most recent call last)"):
                return False, self.close()
            if stripped == "":
                b.blank = True
                return True, []
            if b.blank:
                # after a blank line only a chained exception continues the block
                return False, self.close()
            nxt = EXC_LINE.match(text)
            if nxt and nxt.group("msg") and nxt.group("exc").endswith(("Error", "Exception")):
                return False, self.close()  # pasted exception lines, one after another
            if b.message_lines >= MAX_MESSAGE_LINES or _new_record(p):
                return False, self.close()  # no exception message runs on for thousands of lines
            b.add_message(text)
            ev.end_line = ln.number
            return True, []
        if b.mode in ("fatal", "cpp"):
            if _CPP_STACK.match(body) or _CPP_STACK.match(text) or (text.startswith("  ") and not has_prefix) or (
                    b.mode == "fatal" and not has_prefix and ("most recent call first" in text or text.startswith(" "))):
                b.keep(text)
                ev.end_line = ln.number
                if "what():" in text:
                    ev.fields["message"] = clip(text.split("what():", 1)[1].strip())
                return True, []
            if text.strip() == "" and b.mode == "fatal":
                return True, []
            return False, self.close()
        if b.mode == "solutions":
            if _NUMBERED.match(body) or body.startswith("Open an issue") or body.startswith("Piecewise CUDA Graph") \
                    or body.startswith("To work around"):
                b.keep(body)
                ev.end_line = ln.number
                return True, []
            return False, self.close()
        return False, self.close()


# ------------------------------------------------------------------------------ derived from a traceback
def _derived(tb: Event, root: RootCause | None = None) -> list[Event]:
    """Events the exception messages stand for (looked through by the rules), chain first."""
    out: list[Event] = []
    for link in tb.fields.get("chain", []):
        out.extend(_derived_one(tb, link.get("exception"), link.get("message") or "", link.get("line") or tb.line))
    out.extend(_derived_one(tb, tb.fields.get("exception"), tb.fields.get("message") or "",
                            tb.fields.get("exception_line", tb.line), root))
    return out


def _derived_one(tb: Event, exception: str | None, msg: str, line: int, root: RootCause | None = None) -> list[Event]:
    out: list[Event] = []
    first = msg.split("\n", 1)[0]

    def mk(kind: str, fields: dict[str, Any]) -> Event:
        # at the exception's line, from the traceback's source, rank and time
        return Event(kind, line, fields, tb.rank, tb.ranks, tb.ts, tb.secs, first[:500], None, line, tb.source, tb.node)

    parsed = parse_message(first) if first else None
    if parsed is not None:
        kind, fields = parsed
        fields["exception"] = exception
        if kind == "graph_capture_failed":
            fields["piecewise"] = fields.get("piecewise") or "Piecewise CUDA Graph" in msg
            fields["draft"] = bool(_DRAFT_HINT.search(first[:60])) or any(
                "eagle_draft" in fr or "multi_layer_eagle" in fr for fr in tb.fields.get("frames", []))
            bm = _BACKEND.search(msg)
            if bm:
                fields["backend"] = bm.group(1)
        elif kind == "batch_out_of_memory":
            tm = TRY_TOKENS.search(msg)
            am = AVAILABLE_TOKENS.search(msg)
            if tm:
                fields["tokens"] = to_int(tm.group(1))
            if am:
                fields["available"] = to_int(am.group(1))
        out.append(mk(kind, fields))
    if _OOM.search(msg) and "memory" in msg.lower() and (
            "CUDA" in msg or "GPU" in msg or "OutOfMemory" in (exception or "")):
        f = oom_fields(msg)
        f["exception"] = exception
        out.append(mk("torch_oom", f))
    elif "CUDA error" in msg or "cudaError" in msg or "Cuda error" in msg or "HIP error" in msg:
        f = cuda_error_fields(msg)
        f["exception"] = exception
        out.append(mk("cuda_error", f))
    solutions = _SOLUTIONS.search(msg)
    if solutions:
        offset = msg.count("\n", 0, solutions.start())
        items = [_ITEM_NUMBER.sub("", x, count=1).strip() for x in msg[solutions.end():].split("\n")
                 if _NUMBERED.match(x)]
        ps = mk("possible_solutions", {"items": items})
        ps.line = ps.end_line = line + offset
        ps.text = solutions.group(0)
        out.append(ps)
    if "ChildFailedError" in (exception or ""):
        out.append(mk("child_failed_error", root.fields() if root is not None else torchrun_root_cause(msg)))
    return out


__all__ = [
    "EXC_LINE",
    "FRAME_LINE",
    "MAX_BLOCK_LINES",
    "MAX_CHAIN",
    "MAX_DEFERRED",
    "MAX_FRAMES",
    "MAX_KEPT_LINES",
    "MAX_MESSAGE_CHARS",
    "MAX_MESSAGE_LINES",
    "MODES",
    "BlockAssembler",
]
