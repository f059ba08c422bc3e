"""Lines to events: prefix split, one-line dispatch, and the multi-line block assembler.

Per line: the batch fast path, then the lark grammar, then the foreign formats (NCCL, torch/glog,
vLLM, uvicorn access), then block starters (tracebacks, faulthandler dumps, torchrun summaries).
Blocks (a traceback with its chained exceptions, the message continuation after the final exception,
a `Possible solutions:` list, a C++ stack) become one event spanning `line..end_line`. The final
exception message of a traceback is itself parsed, so `Exception: Capture cuda graph failed: CUDA out
of memory` yields `graph_capture_failed` and `torch_oom` events at that line.

Work and memory are linear in the input and bounded per event: a block absorbs at most MAX_BLOCK_LINES
lines and a message MAX_MESSAGE_LINES (kept up to MAX_MESSAGE_CHARS); a line that is an event of its own
(a batch line, a launch message) ends a block; every event leaving the parser is cut to the limits of
events.bound_event.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from logdoctor.events import Event, bound_event, clip
from logdoctor.parse.errortext import (
    RootCause,
    cuda_error_fields,
    oom_fields,
    torchrun_root_cause,
)
from logdoctor.parse.finishers import AVAILABLE_TOKENS, TRY_TOKENS
from logdoctor.parse.grammar import (
    extract_pairs,
    nccl_watchdog_fields,
    parse_batch,
    parse_message,
)
from logdoctor.parse.values import to_int
from logdoctor.read.citations import Citations
from logdoctor.read.ingest import Line, node_of, read_lines
from logdoctor.read.prefix import Prefixed, split_prefix

# Every pattern is bounded (`{0,N}`), guarded where it could start inside a run (`(?<![\d.])`), and has no
# two adjacent quantifiers over the same characters: a log line is untrusted input, and one line of 40k
# digits after `CUDA out of memory` took 74 s before (tests/test_linear_time.py feeds each pattern such runs).
_EXC_LINE = re.compile(
    r"^(?P<exc>(?:[A-Za-z_]\w{0,200}\.){0,32}[A-Z]\w{0,200}(?:Error|Exception|Exit|Interrupt|Failure|Fault|Warning|Failed)"
    r"|(?:[A-Za-z_]\w{0,200}\.){1,32}[A-Z]\w{0,200}(?=: )|Exception|KeyboardInterrupt|StopIteration)(?:: (?P<msg>.*))?$"
)
_FRAME = re.compile(r'^\s{1,64}File "(?P<file>[^"]{0,4096})", line (?P<lineno>\d{1,9})(?:, in (?P<func>.*))?')
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)
_WARNING = re.compile(r"^(?P<src>\S{1,512}\.py):(?P<lineno>\d{1,9}): (?P<cat>\w{0,64}Warning): (?P<msg>.*)")
_ARGPARSE = re.compile(r"^(?P<prog>[\w./-]{1,256}): error: (?P<msg>.*)")
_KERNEL = re.compile(r"^(?:\[[ \t]{0,16}\d{1,12}\.\d{1,9}\][ \t]{0,16}|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\][ \t]{0,16})?"
                     r"(?P<msg>(?:NVRM|nvidia|kernel|Out of memory: Kill|oom-kill|oom_reaper|pcieport|"
                     r"nvidia-nvlink|NVLink|Memory cgroup out of memory)\b.*)")
_KERNEL_ANYWHERE = re.compile(r"(?P<msg>(?:NVRM: |Out of memory: Kill|Memory cgroup out of memory|invoked oom-killer|"
                              r"oom-kill:|oom_reaper: |Killed process \d).*)")
_NATIVE = re.compile(r"^(?P<file>[\w./+-]{1,512}\.(?:cpp|cu|cc|cxx|c|h|hpp|cuh))(?::(?P<func>[\w:~]{1,256}))?:(?P<no>\d{1,9}):? (?P<msg>.*)"
                     r"|^(?P<lvl>WARN|ERROR): (?P<msg2>.*)")
# `…/file.cpp:123: ` in the middle of a line; the message after it must name a failure (checked by hand:
# as `.*(?:Assertion|…).*` inside the regex it was quadratic over a line of many such locations)
_NATIVE_INLINE = re.compile(r"(?<![\w./+-])(?P<file>[\w.+-]{0,256}/[\w./+-]{1,512}\.(?:cpp|cu|cc|cxx|h|hpp|cuh)):(?P<no>\d{1,9}): ")
_NATIVE_FAILURE_WORDS = ("Assertion", "failed", "error", "Error")
_ACCESS = re.compile(r'^(?P<client>\S{1,256}) - "(?P<method>[A-Z]{1,16}) (?P<path>\S{1,8192}) HTTP/[\d.]{1,8}" (?P<status>\d{3})(?!\d)')
_FATAL = re.compile(r"^(?:Fatal Python error: (?P<py>.*)|!{1,64} ?(?P<sg>Segfault encountered) ?!{0,64}|"
                    r"terminate called after throwing an instance of '(?P<cpp>[^']{1,512})'|"
                    r"\*\*\* (?P<sig>SIG\w{1,16}) received at time|"
                    r"(?P<core>Bus error|Segmentation fault|Aborted|Illegal instruction)(?: \(core dumped\))?$|"
                    r"ERROR: Unexpected (?P<bus>bus error) encountered in worker.*)")
_CPP_STACK = re.compile(r"^(?:frame #\d{1,9}:|Exception raised from |#\d{1,9} |\s{1,64}what\(\):|Current thread 0x|Thread 0x|"
                        r"Extension modules:|\s{1,64}File \")")
_NUMBERED = re.compile(r"^\s{0,64}\d{1,9}\. ")
_ITEM_NUMBER = re.compile(r"^\s{0,64}\d{1,9}\.\s{0,64}")
_SOLUTIONS = re.compile(r"^Possible (?:solutions|suggestions):$", re.M)
_DRAFT_HINT = re.compile(r"draft|MTP|EAGLE")
_BACKEND = re.compile(r"Fail when using backend: (\w{1,64})")
_PROGRESS = re.compile(r"(?<!\d)\d{1,18}/\d{1,18} \[\d")
_PERCENT = re.compile(r"(?<!\d)(\d{1,18})%")
MAX_FRAMES = 500
MAX_CHAIN = 50
MAX_BLOCK_LINES = 5000           # lines one traceback / C++ stack / dump may absorb before it is closed
MAX_MESSAGE_LINES = 1000         # continuation lines of one exception message (a torchrun summary of 100+ ranks)
MAX_MESSAGE_CHARS = 8192         # of which this much text is kept (the rest is read, not stored)
MAX_DEFERRED = 1000               # other processes' events held while a block is open (then it is closed)
MAX_KEPT_LINES = 200             # lines a fatal / C++ / solutions block stores for its fields
_CUDA_ERROR = re.compile(r"(?:CUDA|Cuda|HIP) error(?!s)")

class _Block:
    """An open multi-line event being assembled."""

    def __init__(self, event: Event, mode: str) -> None:
        self.event = event
        self.mode = mode                    # traceback | exc_message | fatal | solutions | cpp
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


_EMITTER_KEYS = ("pod", "container", "host", "ip", "actor", "pid")


def _emitter(attrs: dict[str, str] | None) -> tuple[str | None, ...] | None:
    """Which process wrote a line, as far as its envelope says (None: it says nothing)."""
    if not attrs:
        return None
    key = tuple(attrs.get(k) for k in _EMITTER_KEYS)
    return key if any(key) else None


class EventParser:
    """Feeds lines, yields events in line order. One instance per source."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.block: _Block | None = None
        self.block_emitter: tuple[str | None, ...] | None = None   # who wrote the open block's first line
        self.deferred: list[Event] = []     # other processes' events that arrived inside the open block
        self.pending_process: tuple[str | None, int] | None = None
        self.last_dead: Event | None = None
        self.last_dead_line = 0             # its line as read (the event itself may be renumbered once out)

    # -------------------------------------------------------------------------- block handling
    def _close(self) -> list[Event]:
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
            return [ev, *self._derived(ev, b.root)]
        if ev.kind == "fatal_signal" and b.lines:
            ev.fields.setdefault("frames", [x.strip() for x in b.lines if x.strip().startswith("File")][:50])
        if ev.kind == "possible_solutions":
            ev.fields["items"] = [_ITEM_NUMBER.sub("", x, count=1).strip() for x in b.lines if _NUMBERED.match(x)]
        return [ev]

    def _derived(self, tb: Event, root: RootCause | None = None) -> list[Event]:
        """Events the exception messages stand for (looked through by the rules), chain first."""
        out: list[Event] = []
        for link in tb.fields.get("chain", []):
            out.extend(self._derived_one(tb, link.get("exception"), link.get("message") or "",
                                         link.get("line") or tb.line))
        out.extend(self._derived_one(tb, tb.fields.get("exception"), tb.fields.get("message") or "",
                                     tb.fields.get("exception_line", tb.line), root))
        return out

    def _derived_one(self, tb: Event, exception: str | None, msg: str, line: int,
                     root: RootCause | None = None) -> list[Event]:
        out: list[Event] = []
        first = msg.split("\n", 1)[0]

        def mk(kind: str, fields: dict[str, Any]) -> Event:
            return Event(kind, line, fields, tb.rank, tb.ranks, tb.ts, tb.secs, first[:500], None, line,
                         self.source, tb.node)

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

    def _new_record(self, p: Prefixed) -> bool:
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

    def _continue_block(self, ln: Line, p: Prefixed) -> tuple[bool, list[Event]]:
        """Try to add this line to the open block. Returns (consumed, events closed meanwhile)."""
        b = self.block
        assert b is not None
        b.count += 1
        if b.count > MAX_BLOCK_LINES:
            return False, self._close()  # a block that runs on for thousands of lines is over
        text = ln.text
        body = p.body
        has_prefix = p.ts is not None or p.origin in ("nccl", "torch", "glog", "vllm", "uvicorn")
        ev = b.event
        if b.mode == "traceback":
            if has_prefix and not body.startswith("Traceback"):
                return False, self._close()
            m = _FRAME.match(text)
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
            m = _EXC_LINE.match(text)
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
            if self._new_record(p):
                return False, self._close()
            # something else inside a traceback (e.g. an interleaved line): keep it in the block
            ev.end_line = ln.number
            return True, []
        if b.mode == "exc_message":
            stripped = text.strip()
            if has_prefix:
                return False, self._close()
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
                return False, self._close()
            if stripped == "":
                b.blank = True
                return True, []
            if b.blank:
                # after a blank line only a chained exception continues the block
                return False, self._close()
            nxt = _EXC_LINE.match(text)
            if nxt and nxt.group("msg") and nxt.group("exc").endswith(("Error", "Exception")):
                return False, self._close()  # pasted exception lines, one after another
            if b.message_lines >= MAX_MESSAGE_LINES or self._new_record(p):
                return False, self._close()  # no exception message runs on for thousands of lines
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
            return False, self._close()
        if b.mode == "solutions":
            if _NUMBERED.match(body) or body.startswith("Open an issue") or body.startswith("Piecewise CUDA Graph") \
                    or body.startswith("To work around"):
                b.keep(body)
                ev.end_line = ln.number
                return True, []
            return False, self._close()
        return False, self._close()

    # -------------------------------------------------------------------------- one line
    def feed(self, ln: Line) -> list[Event]:
        p = split_prefix(ln.text)
        out: list[Event] = []
        if self.block is not None:
            if ln.attrs is not None:
                # Ray's own daemon never writes part of a worker's block; another known writer does not either
                emitter = _emitter(ln.attrs)
                if emitter is not None and emitter != self.block_emitter and (
                        self.block_emitter is not None or ln.attrs.get("actor") == "raylet"):
                    return self._interleaved(ln, p)
            consumed, closed = self._continue_block(ln, p)
            out.extend(closed)
            if consumed:
                return [bound_event(e) for e in out]
        out.extend(self._single(ln, p))
        if self.block is not None:
            self.block_emitter = _emitter(ln.attrs) if ln.attrs is not None else None
        return [bound_event(e) for e in out]

    def _interleaved(self, ln: Line, p: Prefixed) -> list[Event]:
        """A line another process wrote into the middle of an open block (a `(raylet)` line inside a
        worker's stack): its own event, and the block stays open; its events wait until the block
        closes, so events still leave in line order. When that line starts a block of its own, the other
        process has taken over the output: the held block ends there, as it always did."""
        held, held_emitter = self.block, self.block_emitter
        self.block = None
        out = self._single(ln, p)
        if self.block is None and len(self.deferred) < MAX_DEFERRED:
            self.block, self.block_emitter = held, held_emitter
            self.deferred.extend(out)
            return []
        started, self.block = self.block, held
        closed = self._close()
        self.block = started
        if started is not None:
            self.block_emitter = _emitter(ln.attrs)
        return [bound_event(e) for e in closed + out]

    def _event(self, kind: str, ln: Line, p: Prefixed, fields: dict[str, Any], template: str | None = None) -> Event:
        return Event(kind, ln.number, fields, p.rank, p.ranks, p.ts, p.secs, p.body, template, None, self.source,
                     node_of(ln.attrs) if ln.attrs is not None else None)

    def _single(self, ln: Line, p: Prefixed) -> list[Event]:
        body = p.body
        origin = p.origin
        if origin in ("sglang", "plain"):
            batch = parse_batch(body)
            if batch is not None:
                return [self._event(batch[0], ln, p, batch[1])]
        parsed = parse_message(body)
        if parsed is None and origin in ("torch", "glog") and body.startswith("[PG "):
            inner = body.split("] ", 1)[-1]
            parsed = parse_message(inner)
        if parsed is not None:
            kind, fields = parsed
            ev = self._event(kind, ln, p, fields)
            if kind == "scheduler_dead":
                self.last_dead, self.last_dead_line = ev, ln.number
            elif kind == "exit_code" and self.last_dead is not None and ln.number - self.last_dead_line <= 2:
                # X13 then X14: the code belongs to the rank named on the line before
                self.last_dead.fields.setdefault("exit_code", fields.get("exit_code"))
            if str(fields.get("rest", "")).endswith("Traceback (most recent call last):"):
                fields.pop("rest", None)
                self._open_traceback(ln, p, fields.get("process") or kind)
                return [ev]
            if kind == "process_exception":
                self.pending_process = (fields.get("process"), ln.number)
            if kind in ("graph_capture_failed", "possible_solutions") or (
                    kind in ("warmup_failed",) and "Traceback" in fields.get("rest", "")):
                if kind == "possible_solutions":
                    self.block = _Block(ev, "solutions")
                    return []
            if kind == "nccl_watchdog_timeout" and origin in ("torch", "glog"):
                self.block = _Block(ev, "cpp")
                return []
            return [ev]
        if origin == "nccl":
            f = {"level": p.level, "message": body, **(p.extra or {})}
            if "Watchdog caught" in body:
                f.update(nccl_watchdog_fields(body))
            return [self._event("nccl_log", ln, p, f)]
        if origin in ("torch", "glog", "gloo"):
            src = (p.extra or {}).get("source") if p.extra else ("Gloo" if origin == "gloo" else None)
            f = {"level": p.level, "source": src, "message": body}
            if "Watchdog caught collective operation timeout" in body:
                f.update(nccl_watchdog_fields(body))
                ev = self._event("nccl_watchdog_timeout", ln, p, f)
            else:
                ev = self._event("torch_log", ln, p, f)
            self.block = _Block(ev, "cpp")
            return []
        if origin == "vllm":
            return [self._event("vllm_log", ln, p, {"level": p.level, "source": (p.extra or {}).get("source"),
                                                     "message": body})]
        if origin == "uvicorn":
            m = _ACCESS.match(body)
            if m:
                return [self._event("http_access", ln, p, {"client": m.group("client"), "method": m.group("method"),
                                                            "path": m.group("path"), "status": int(m.group("status"))})]
        if body.startswith("Traceback (most recent call last)") or body.endswith("Traceback (most recent call last):"):
            process = None
            if self.pending_process and ln.number - self.pending_process[1] <= 2:
                process = self.pending_process[0]
            self._open_traceback(ln, p, process)
            return []
        m = _FATAL.match(body)
        if m:
            sig = m.group("py") or m.group("sg") or m.group("sig") or m.group("core") or \
                ("Bus error" if m.group("bus") else "SIGABRT")
            f: dict[str, Any] = {"signal": sig.strip()}
            if m.group("cpp"):
                f["exception"] = m.group("cpp")
            self.block = _Block(self._event("fatal_signal", ln, p, f), "fatal")
            return []
        if _FRAME.match(ln.text) and p.ts is None:
            # a traceback pasted without its "Traceback (most recent call last):" header
            self._open_traceback(ln, p, None)
            assert self.block is not None
            return self._continue_block(ln, p)[1]
        stripped = body[1:] if body[:1] == " " and body[1:2] != " " else body
        m = _EXC_LINE.match(stripped)
        if m and (m.group("msg") is not None or m.group("exc").endswith(("Error", "Exception"))):
            # an exception line whose traceback was not pasted: a traceback with no frames
            tb = self._event("traceback", ln, p, {"exception": m.group("exc"), "message": (m.group("msg") or "").strip(),
                                                  "frames": [], "chain": [], "partial": True,
                                                  "exception_line": ln.number})
            self.block = _Block(tb, "exc_message")
            return []
        if ("CUDA error" in body or "Cuda error" in body or "HIP error" in body) and _CUDA_ERROR.search(body) \
                and not body.lstrip().startswith(("Warning", "WARNING")):
            # not "Warning: ... may lead to ... CUDA errors." (SGLang's context-length warning)
            return [self._event("cuda_error", ln, p, cuda_error_fields(body))]
        m = _WARNING.match(body)
        if m:
            ev = self._event("python_warning", ln, p, {"source": m.group("src"), "category": m.group("cat"),
                                                       "message": m.group("msg")})
            self.block = _Block(ev, "cpp")  # the source line Python prints under the warning
            return []
        m = _ARGPARSE.match(body)
        if m:
            return [self._event("argparse_error", ln, p, {"program": m.group("prog"), "message": m.group("msg")})]
        m = _NATIVE.match(body)
        if m:
            if m.group("lvl"):  # NVSHMEM / library `WARN: ...` lines without a location
                return [self._event("native_error", ln, p, {"file": None, "source_line": None, "level": m.group("lvl"),
                                                             "message": m.group("msg2").strip()})]
            return [self._event("native_error", ln, p, {"file": m.group("file"), "source_line": to_int(m.group("no")),
                                                         "function": m.group("func"), "message": m.group("msg").strip()})]
        m = _KERNEL.match(body) or _KERNEL_ANYWHERE.search(body)
        if m:
            return [self._event("kernel_log", ln, p, {"message": m.group("msg")})]
        if body.startswith("Warning: ") or body.startswith("WARNING: "):
            return [self._event("python_warning", ln, p, {"source": None, "category": "Warning",
                                                          "message": body.split(": ", 1)[1]})]
        if "%|" in body or ("/" in body and " [" in body and _PROGRESS.search(body)):  # `in` first: C speed
            label = body.split(":", 1)[0][:80]
            pm = _PERCENT.search(body)
            return [self._event("progress", ln, p, {"label": label, "percent": to_int(pm.group(1)) if pm else None})]
        m = _NATIVE_INLINE.search(body) if "/" in body and ": " in body else None
        if m and any(w in body[m.end():] for w in _NATIVE_FAILURE_WORDS):
            # run-on pastes: a C/C++ error (e.g. a Triton/LLVM assertion) in the middle of a line. Later
            # locations are suffixes of this one's message: if it names no failure, neither do they.
            return [self._event("native_error", ln, p, {"file": m.group("file"), "source_line": to_int(m.group("no")),
                                                         "message": body[m.end():].strip()[:500]})]
        if "CUDA out of memory" in body or "Watchdog caught collective operation timeout" in body:
            # cut or wrapped pastes: the decisive text in the middle of a line
            if "Watchdog caught" in body:
                return [self._event("nccl_watchdog_timeout", ln, p, nccl_watchdog_fields(body))]
            return [self._event("torch_oom", ln, p, oom_fields(body))]
        return [self._event("unparsed", ln, p, {})]

    def _open_traceback(self, ln: Line, p: Prefixed, process: str | None) -> None:
        tb = self._event("traceback", ln, p, {"exception": None, "message": None, "frames": [], "chain": [],
                                              "process": process})
        tb.end_line = ln.number
        self.block = _Block(tb, "traceback")
        self.pending_process = None

    def finish(self) -> list[Event]:
        return [bound_event(e) for e in self._close()]


def parse_lines(lines: Iterable[Line], source: str = "", citations: Citations | None = None) -> Iterator[Event]:
    """Events in line order, `line` the position in the stream as read. A line read out of file order
    (`Line.origin`, a newest-first export) is noted in `citations`, which turns positions back into
    the lines as given (citations.py)."""
    parser = EventParser(source)
    feed = parser.feed
    if citations is None:
        for ln in lines:
            yield from feed(ln)
    else:
        note = citations.note_origin
        for ln in lines:
            if ln.origin is not None:
                note(ln.number, ln.origin)
            yield from feed(ln)
    for ev in parser.finish():
        yield ev


class SourceEvents:
    """The events of one source in reading order (`line` is the position, as diagnosis orders by it),
    with `citations`, the map from positions to the lines of the file as given (`citations.event(ev)`
    before showing an event). The map is filled as the events are read."""

    def __init__(self, events: Iterator[Event], citations: Citations) -> None:
        self._events = events
        self.citations = citations

    def __iter__(self) -> SourceEvents:
        return self

    def __next__(self) -> Event:
        return next(self._events)


def parse_source(source: str | os.PathLike[str], envelope: str | None = None) -> SourceEvents:
    """Every event of one file (or `-`), in line order. Raises ingest.InputError if unreadable.
    `envelope`: as `ingest.read_lines` takes it."""
    citations = Citations()
    return SourceEvents(parse_lines(read_lines(source, None, envelope), str(source), citations), citations)


def parse_text(text: str, source: str = "<text>") -> list[Event]:
    from logdoctor.read.ingest import lines_from_text
    return list(parse_lines(lines_from_text(text), source))


__all__ = ["EventParser", "SourceEvents", "parse_lines", "parse_source", "parse_text", "oom_fields", "extract_pairs"]
