"""Lines to events: the parse stage's entry points and its line dispatch.

In: `Line`s (logdoctor.read.ingest), one source at a time. Out: `Event`s in line order, each cut to the
limits of events.bound_event. Per line, after the prefix split (read.prefix): while a block is open the
line goes to the block assembler (blocks.py), which keeps it or closes the block; otherwise it is
classified here — the batch fast path, then the lark grammar (grammar.py, finishers.py), then the foreign
formats (NCCL, torch/glog, vLLM, uvicorn access), then block starters (tracebacks, faulthandler dumps,
C++ stacks, `Possible solutions:` lists), which open a block, then the remaining one-line shapes (native
errors, kernel lines, warnings, progress bars). Unknown lines become `unparsed` events: kept, never dropped.

Entry points: `parse_lines` (lines → events), `parse_source` (a file or `-` → `SourceEvents`, the events
with their citations), `parse_text` (a string → a list of events), and `EventParser`, one per source.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from logdoctor import regexes
from logdoctor.events import MAX_TEXT_CHARS, Event, bound_event
from logdoctor.parse.blocks import EXC_LINE, FRAME_LINE, BlockAssembler
from logdoctor.parse.errortext import cuda_error_fields, oom_fields
from logdoctor.parse.grammar import (
    extract_pairs,
    may_parse_check,
    nccl_watchdog_fields,
    parse_batch,
    parse_message,
)
from logdoctor.parse.values import to_int
from logdoctor.read.citations import Citations
from logdoctor.read.ingest import Line, node_of, read_lines
from logdoctor.read.prefix import NCCL_LINE, Prefixed, split_prefix

# Every pattern is bounded (`{0,N}`), guarded where it could start inside a run (`(?<![\d.])`), and has no
# two adjacent quantifiers over the same characters: a log line is untrusted input, and one line of 40k
# digits after `CUDA out of memory` took 74 s before (tests/test_linear_time.py feeds each pattern such runs).
_WARNING = regexes.compile(r"^(?P<src>\S{1,512}\.py):(?P<lineno>\d{1,9}): (?P<cat>\w{0,64}Warning): (?P<msg>.*)")
_ARGPARSE = regexes.compile(r"^(?P<prog>[\w./-]{1,256}): error: (?P<msg>.*)")
_KERNEL = regexes.compile(r"^(?:\[[ \t]{0,16}\d{1,12}\.\d{1,9}\][ \t]{0,16}|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\][ \t]{0,16})?"
                     r"(?P<msg>(?:NVRM|nvidia|kernel|Out of memory: Kill|oom-kill|oom_reaper|pcieport|"
                     r"nvidia-nvlink|NVLink|Memory cgroup out of memory)\b.*)")
_KERNEL_ANYWHERE = regexes.compile(r"(?P<msg>(?:NVRM: |Out of memory: Kill|Memory cgroup out of memory|invoked oom-killer|"
                              r"oom-kill:|oom_reaper: |Killed process \d).*)")
_NATIVE = regexes.compile(r"^(?P<file>[\w./+-]{1,512}\.(?:cpp|cu|cc|cxx|c|h|hpp|cuh))(?::(?P<func>[\w:~]{1,256}))?:(?P<no>\d{1,9}):? (?P<msg>.*)"
                     r"|^(?P<lvl>WARN|ERROR): (?P<msg2>.*)")
# `…/file.cpp:123: ` in the middle of a line; the message after it must name a failure (checked by hand:
# as `.*(?:Assertion|…).*` inside the regex it was quadratic over a line of many such locations)
_NATIVE_INLINE = regexes.compile(r"(?<![\w./+-])(?P<file>[\w.+-]{0,256}/[\w./+-]{1,512}\.(?:cpp|cu|cc|cxx|h|hpp|cuh)):(?P<no>\d{1,9}): ")
_NATIVE_FAILURE_WORDS = ("Assertion", "failed", "error", "Error")
_ACCESS = regexes.compile(r'^(?P<client>\S{1,256}) - "(?P<method>[A-Z]{1,16}) (?P<path>\S{1,8192}) HTTP/[\d.]{1,8}" (?P<status>\d{3})(?!\d)')
_FATAL = regexes.compile(r"^(?:Fatal Python error: (?P<py>.*)|!{1,64} ?(?P<sg>Segfault encountered) ?!{0,64}|"
                    r"terminate called after throwing an instance of '(?P<cpp>[^']{1,512})'|"
                    r"\*\*\* (?P<sig>SIG\w{1,16}) received at time|"
                    r"(?P<core>Bus error|Segmentation fault|Aborted|Illegal instruction)(?: \(core dumped\))?$|"
                    r"ERROR: Unexpected (?P<bus>bus error) encountered in worker.*)")
_PROGRESS = regexes.compile(r"(?<!\d)\d{1,18}/\d{1,18} \[\d")
_PERCENT = regexes.compile(r"(?<!\d)(\d{1,18})%")
_CUDA_ERROR = regexes.compile(r"(?:CUDA|Cuda|HIP) error(?!s)")
# first characters of a line that split_prefix tries other prefixes on before NCCL's (SGLang's `[`, uvicorn,
# vLLM, glog and torch levels): such a line takes the whole path
_OTHER_PREFIX_STARTS = frozenset("[IWEDCTF")
# NCCL chatter repeats a few `host:pid:tid [rank] ` heads (one a rank and thread) over thousands of lines:
# each head is matched once (bounded memo)
_NCCL_INFO = "NCCL INFO "
_NCCL_INFO_AT = " NCCL INFO "
NCCL_HEADS_MAX = 4096
# host, pid, rank, rank label, location, library: what NCCL_LINE gives a head, or None when it takes none
NcclHead = tuple[str, str, int, str, str, str] | None
_UNSEEN: Any = object()  # a head not matched yet (None is a head that takes the whole path)


def _nccl_head(head: str) -> NcclHead:
    """What NCCL_LINE makes of a line `head + "NCCL INFO " + body`, whatever the body: the match of `head`
    followed by `NCCL INFO ` alone, when its library starts right after `head` (an earlier `NCCL WARN` inside
    the head, or no match at all: None, and the line takes the whole path)."""
    m = NCCL_LINE.match(head + _NCCL_INFO)
    if m is None or m.start("lib") != len(head) or m.group("level") != "INFO":
        return None
    host, pid, _, rank, loc, lib, _, _ = m.groups()
    return host, pid, int(rank), f"rank{rank}", loc.strip(), lib


class EventParser:
    """Feeds lines, yields events in line order. One instance per source."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.blocks = BlockAssembler()
        self.pending_process: tuple[str | None, int] | None = None
        self.last_dead: Event | None = None
        self.last_dead_line = 0             # its line as read (the event itself may be renumbered once out)
        self._nccl_heads: dict[str, NcclHead] = {}
        self._may_parse: Callable[[str], bool] | None = None  # the grammar's prefilter, once a body needs it

    def feed(self, ln: Line) -> list[Event]:
        ev = self.nccl_chatter(ln)
        return [ev] if ev is not None else self.dispatch(ln)

    def dispatch(self, ln: Line) -> list[Event]:
        """feed, for a line that nccl_chatter did not take."""
        p = split_prefix(ln.text)
        blocks = self.blocks
        out: list[Event] = []
        if blocks.block is not None:
            if ln.attrs is not None and blocks.written_by_another(ln.attrs):
                # its own events, held until the open block closes (or it closes the block by starting one)
                return [bound_event(e) for e in blocks.interleave(lambda: self._single(ln, p))]
            consumed, closed = blocks.absorb(ln, p)
            out.extend(closed)
            if consumed:
                return [bound_event(e) for e in out]
        out.extend(self._single(ln, p))
        return [bound_event(e) for e in out]

    def nccl_chatter(self, ln: Line) -> Event | None:
        """The event of a bare `host:pid:tid [rank] NCCL INFO …` line (NCCL_DEBUG=INFO prints thousands), made
        directly: what split_prefix and _single make of it, without feed's dispatch. None for any other line,
        and for one that path would treat otherwise (another level, a message the grammar takes, a watchdog, a
        long text): feed takes those the whole way."""
        text = ln.text
        at = text.find(_NCCL_INFO_AT)
        if at < 0 or self.blocks.block is not None or text[:1] in _OTHER_PREFIX_STARTS:
            return None
        cut = at + 1
        head = text[:cut]
        heads = self._nccl_heads
        parts = heads.get(head, _UNSEEN)
        if parts is _UNSEEN:
            if len(heads) >= NCCL_HEADS_MAX:
                heads.clear()
            parts = heads[head] = _nccl_head(head)
        if parts is None:
            return None
        host, pid, rank, label, loc, lib = parts
        body = text[cut + len(_NCCL_INFO):]
        if "\n" in body:  # NCCL_LINE's message (`.*`) stops there
            body = body[:body.index("\n")]
        if len(body) > MAX_TEXT_CHARS or "Watchdog caught" in body:
            return None
        may_parse = self._may_parse
        if may_parse is None:
            may_parse = self._may_parse = may_parse_check()
        if may_parse(body) and parse_message(body) is not None:
            return None
        fields = {"level": "INFO", "message": body, "host": host, "pid": pid, "location": loc, "library": lib}
        attrs = ln.attrs
        return Event("nccl_log", ln.number, fields, rank, label, None, None, body, None, None, self.source,
                     node_of(attrs) if attrs is not None else None)

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
                    self.blocks.open(ev, "solutions", ln.attrs)
                    return []
            if kind == "nccl_watchdog_timeout" and origin in ("torch", "glog"):
                self.blocks.open(ev, "cpp", ln.attrs)
                return []
            return [ev]
        if origin == "nccl":
            f: dict[str, Any] = {"level": p.level, "message": body, **(p.extra or {})}
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
            self.blocks.open(ev, "cpp", ln.attrs)
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
            f = {"signal": sig.strip()}
            if m.group("cpp"):
                f["exception"] = m.group("cpp")
            self.blocks.open(self._event("fatal_signal", ln, p, f), "fatal", ln.attrs)
            return []
        if FRAME_LINE.match(ln.text) and p.ts is None:
            # a traceback pasted without its "Traceback (most recent call last):" header
            self._open_traceback(ln, p, None)
            return self.blocks.absorb(ln, p)[1]
        stripped = body[1:] if body[:1] == " " and body[1:2] != " " else body
        m = EXC_LINE.match(stripped)
        if m and (m.group("msg") is not None or m.group("exc").endswith(("Error", "Exception"))):
            # an exception line whose traceback was not pasted: a traceback with no frames
            tb = self._event("traceback", ln, p, {"exception": m.group("exc"), "message": (m.group("msg") or "").strip(),
                                                  "frames": [], "chain": [], "partial": True,
                                                  "exception_line": ln.number})
            self.blocks.open(tb, "exc_message", ln.attrs)
            return []
        if ("CUDA error" in body or "Cuda error" in body or "HIP error" in body) and _CUDA_ERROR.search(body) \
                and not body.lstrip().startswith(("Warning", "WARNING")):
            # not "Warning: ... may lead to ... CUDA errors." (SGLang's context-length warning)
            return [self._event("cuda_error", ln, p, cuda_error_fields(body))]
        m = _WARNING.match(body)
        if m:
            ev = self._event("python_warning", ln, p, {"source": m.group("src"), "category": m.group("cat"),
                                                       "message": m.group("msg")})
            self.blocks.open(ev, "cpp", ln.attrs)  # the source line Python prints under the warning
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
        self.blocks.open(tb, "traceback", ln.attrs)
        self.pending_process = None

    def finish(self) -> list[Event]:
        return [bound_event(e) for e in self.blocks.close()]


def parse_lines(lines: Iterable[Line], source: str = "", citations: Citations | None = None) -> Iterator[Event]:
    """Events in line order, `line` the position in the stream as read. A line read out of file order
    (`Line.origin`, a newest-first export) is noted in `citations`, which turns positions back into
    the lines as given (citations.py)."""
    parser = EventParser(source)
    dispatch, chatter = parser.dispatch, parser.nccl_chatter
    note = citations.note_origin if citations is not None else None
    for ln in lines:
        if ln.origin is not None and note is not None:
            note(ln.number, ln.origin)
        ev = chatter(ln)  # feed's first step, taken here: no list made for the thousands of such lines
        if ev is not None:
            yield ev
        else:
            yield from dispatch(ln)
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
