"""Lines to events: prefix split, one-line dispatch, and the multi-line block assembler.

Per line: the batch fast path, then the lark grammar, then the foreign formats (NCCL, torch/glog,
vLLM, uvicorn access), then block starters (tracebacks, faulthandler dumps, torchrun summaries).
Blocks (a traceback with its chained exceptions, the message continuation after the final exception,
a `Possible solutions:` list, a C++ stack) become one event spanning `line..end_line`. The final
exception message of a traceback is itself parsed, so `Exception: Capture cuda graph failed: CUDA out
of memory` yields `graph_capture_failed` and `torch_oom` events at that line.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .events import Event
from .grammar import extract_pairs, nccl_watchdog_fields, parse_batch, parse_message
from .ingest import Line, read_lines
from .prefix import Prefixed, split_prefix

_EXC_LINE = re.compile(
    r"^(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Warning|Failed)"
    r"|(?:[A-Za-z_]\w*\.)+[A-Z]\w*(?=: )|Exception|KeyboardInterrupt|StopIteration)(?:: (?P<msg>.*))?$"
)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<lineno>\d+)(?:, in (?P<func>.*))?')
_CUDA_ERROR_NAME = re.compile(r"`(cudaError\w+)'|\b(cudaError\w+)\b")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)
_SIZE = r"(-?[\d.]+) ?([KMGT]i?B)"
_OOM_TRIED = re.compile(r"Tried to allocate " + _SIZE)
_OOM_TOTAL = re.compile(_SIZE + r" total capacity|total capacity of " + _SIZE)
_OOM_FREE = re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free")
_OOM_INUSE = re.compile(r"this process has " + _SIZE + r" memory in use|Process \d+ has " + _SIZE + r" memory in use")
_OOM_ALLOC = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch|" + _SIZE + r" already allocated")
_OOM_RESERVED = re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated|" + _SIZE + r" reserved in total by PyTorch")
_OOM_GPU = re.compile(r"GPU (\d+)")
_WARNING = re.compile(r"^(?P<src>\S+\.py):(?P<lineno>\d+): (?P<cat>\w*Warning): (?P<msg>.*)")
_ARGPARSE = re.compile(r"^(?P<prog>[\w./-]+): error: (?P<msg>.*)")
_KERNEL = re.compile(r"^(?:\[\s*\d+\.\d+\]\s*|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\s*)?"
                     r"(?P<msg>(?:NVRM|nvidia|kernel|Out of memory: Kill|oom-kill|oom_reaper|pcieport|"
                     r"nvidia-nvlink|NVLink|Memory cgroup out of memory)\b.*)")
_KERNEL_ANYWHERE = re.compile(r"(?P<msg>(?:NVRM: |Out of memory: Kill|Memory cgroup out of memory|invoked oom-killer|"
                              r"oom-kill:|oom_reaper: |Killed process \d+).*)")
_NATIVE = re.compile(r"^(?P<file>[\w./+-]+\.(?:cpp|cu|cc|cxx|c|h|hpp|cuh))(?::(?P<func>[\w:~]+))?:(?P<no>\d+):? (?P<msg>.*)"
                     r"|^(?P<lvl>WARN|ERROR): (?P<msg2>.*)")
_NATIVE_INLINE = re.compile(r"(?P<file>/[\w./+-]+\.(?:cpp|cu|cc|cxx|h|hpp|cuh)):(?P<no>\d+): (?P<msg>.*(?:Assertion|failed|error|Error).*)")
_ACCESS = re.compile(r'^(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d+)')
_FATAL = re.compile(r"^(?:Fatal Python error: (?P<py>.*)|!+ ?(?P<sg>Segfault encountered) ?!*|"
                    r"terminate called after throwing an instance of '(?P<cpp>[^']+)'|"
                    r"\*\*\* (?P<sig>SIG\w+) received at time|"
                    r"(?P<core>Bus error|Segmentation fault|Aborted|Illegal instruction)(?: \(core dumped\))?$|"
                    r"ERROR: Unexpected (?P<bus>bus error) encountered in worker.*)")
_CPP_STACK = re.compile(r"^(?:frame #\d+:|Exception raised from |#\d+ |\s+what\(\):|Current thread 0x|Thread 0x|"
                        r"Extension modules:|\s+File \")")
_NUMBERED = re.compile(r"^\s*\d+\. ")
_SECTION = re.compile(r"^(?:=+|-+)$")
MAX_FRAMES = 500
MAX_CHAIN = 50
_TORCHRUN_ROOT = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)(?:.*?Signal (\d+) \((\w+)\))?", re.S)


def _gib(num: str, unit: str) -> float | None:
    scale = {"B": 1 / 2**30, "KB": 1 / 2**20, "KiB": 1 / 2**20, "MB": 1 / 1024, "MiB": 1 / 1024,
             "GB": 1.0, "GiB": 1.0, "TB": 1024.0, "TiB": 1024.0}
    try:
        return round(float(num) * scale.get(unit, 1.0), 4)
    except ValueError:
        return None  # a damaged number: unknown, never NaN in the JSON


def _first(m: re.Match[str] | None) -> float | None:
    if m is None:
        return None
    g = [x for x in m.groups() if x is not None]
    return _gib(g[0], g[1]) if len(g) >= 2 else None


_CUDA_MSG = re.compile(r"(?:CUDA|Cuda|CUDART|HIP) error(?::\s*|\s+(?P<file>[^\s:']+):(?P<no>\d+)\s*:?\s*)'?(?P<msg>[^'\n]+)'?")
CUDA_ERROR_NAMES = {
    "an illegal memory access was encountered": "cudaErrorIllegalAddress",
    "out of memory": "cudaErrorMemoryAllocation",
    "operation not permitted when stream is capturing": "cudaErrorStreamCaptureUnsupported",
    "operation failed due to a previous error during capture": "cudaErrorStreamCaptureInvalidated",
    "peer access is not supported between these two devices": "cudaErrorPeerAccessUnsupported",
    "invalid resource handle": "cudaErrorInvalidResourceHandle",
    "invalid device context": "cudaErrorDeviceUninitialized",
    "mapping of buffer object failed": "cudaErrorMapBufferObjectFailed",
    "no kernel image is available for execution on the device": "cudaErrorNoKernelImageForDevice",
    "invalid device function": "cudaErrorInvalidDeviceFunction",
    "invalid device ordinal": "cudaErrorInvalidDevice",
    "CUDA driver version is insufficient for CUDA runtime version": "cudaErrorInsufficientDriver",
    "no CUDA-capable device is detected": "cudaErrorNoDevice",
    "device-side assert triggered": "cudaErrorAssert",
    "unspecified launch failure": "cudaErrorLaunchFailure",
    "misaligned address": "cudaErrorMisalignedAddress",
    "an illegal instruction was encountered": "cudaErrorIllegalInstruction",
    "invalid argument": "cudaErrorInvalidValue",
    "initialization error": "cudaErrorInitializationError",
    "system not yet initialized": "cudaErrorSystemNotReady",
    "the launch timed out and was terminated": "cudaErrorLaunchTimeout",
}


def cuda_error_fields(message: str) -> dict[str, Any]:
    """The error text, its cudaError name (printed by newer PyTorch, else looked up) and source location."""
    m = _CUDA_MSG.search(message)
    text = (m.group("msg") if m else message.split("\n", 1)[0]).strip()
    f: dict[str, Any] = {"message": text}
    if m and m.group("file"):
        f["file"], f["source_line"] = m.group("file"), int(m.group("no"))
    n = _CUDA_ERROR_NAME.search(message)
    f["cuda_error_name"] = (n.group(1) or n.group(2)) if n else CUDA_ERROR_NAMES.get(text.rstrip(". "))
    return f


def oom_fields(message: str) -> dict[str, Any]:
    f: dict[str, Any] = {}
    for key, rx in (("tried_gib", _OOM_TRIED), ("total_gib", _OOM_TOTAL), ("free_gib", _OOM_FREE),
                    ("in_use_gib", _OOM_INUSE), ("allocated_gib", _OOM_ALLOC), ("reserved_gib", _OOM_RESERVED)):
        v = _first(rx.search(message))
        if v is not None:
            f[key] = v
    m = _OOM_GPU.search(message)
    if m:
        f["gpu"] = int(m.group(1))
    m = re.search(r"this process has " + _SIZE + r" memory in use", message)
    if m:
        f["this_process_gib"] = _gib(m.group(1), m.group(2))
    others = [{"pid": int(pm.group(1)), "gib": _gib(pm.group(2), pm.group(3))}
              for pm in re.finditer(r"Process (\d+) has " + _SIZE + r" memory in use", message)]
    if others:
        f["other_processes"] = others
    return f


class _Block:
    """An open multi-line event being assembled."""

    def __init__(self, event: Event, mode: str) -> None:
        self.event = event
        self.mode = mode                    # traceback | exc_message | fatal | solutions | cpp
        self.lines: list[str] = []


class EventParser:
    """Feeds lines, yields events in line order. One instance per source."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.block: _Block | None = None
        self.pending_process: tuple[str | None, int] | None = None
        self.last_dead: Event | None = None

    # -------------------------------------------------------------------------- block handling
    def _close(self) -> list[Event]:
        b = self.block
        if b is None:
            return []
        self.block = None
        ev = b.event
        if ev.kind == "traceback":
            return [ev, *self._derived(ev)]
        if ev.kind == "fatal_signal" and b.lines:
            ev.fields.setdefault("frames", [x.strip() for x in b.lines if x.strip().startswith("File")][:50])
        if ev.kind == "possible_solutions":
            ev.fields["items"] = [re.sub(r"^\s*\d+\.\s*", "", x).strip() for x in b.lines if _NUMBERED.match(x)]
        return [ev]

    def _derived(self, tb: Event) -> list[Event]:
        """Events the exception messages stand for (looked through by the rules), chain first."""
        out: list[Event] = []
        for link in tb.fields.get("chain", []):
            out.extend(self._derived_one(tb, link.get("exception"), link.get("message") or "",
                                         link.get("line") or tb.line))
        out.extend(self._derived_one(tb, tb.fields.get("exception"), tb.fields.get("message") or "",
                                     tb.fields.get("exception_line", tb.line)))
        return out

    def _derived_one(self, tb: Event, exception: str | None, msg: str, line: int) -> list[Event]:
        out: list[Event] = []
        first = msg.split("\n", 1)[0]

        def mk(kind: str, fields: dict[str, Any]) -> Event:
            return Event(kind, line, fields, tb.rank, tb.ranks, tb.ts, tb.secs, first[:500], None, line,
                         self.source)

        parsed = parse_message(first) if first else None
        if parsed is not None:
            kind, fields = parsed
            fields["exception"] = exception
            if kind == "graph_capture_failed":
                fields["piecewise"] = fields.get("piecewise") or "Piecewise CUDA Graph" in msg
                fields["draft"] = bool(re.search(r"draft|MTP|EAGLE", first[:60])) or any(
                    "eagle_draft" in fr or "multi_layer_eagle" in fr for fr in tb.fields.get("frames", []))
                bm = re.search(r"Fail when using backend: (\w+)", msg)
                if bm:
                    fields["backend"] = bm.group(1)
            elif kind == "batch_out_of_memory":
                tm = re.search(r"Try to allocate (\d+) tokens", msg)
                am = re.search(r"Avail?able tokens: (\d+)", msg)
                if tm:
                    fields["tokens"] = int(tm.group(1))
                if am:
                    fields["available"] = int(am.group(1))
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
        solutions = re.search(r"^Possible (?:solutions|suggestions):$", msg, re.M)
        if solutions:
            offset = msg.count("\n", 0, solutions.start())
            items = [re.sub(r"^\s*\d+\.\s*", "", x).strip() for x in msg[solutions.end():].split("\n") if _NUMBERED.match(x)]
            ps = mk("possible_solutions", {"items": items})
            ps.line = ps.end_line = line + offset
            ps.text = solutions.group(0)
            out.append(ps)
        if "ChildFailedError" in (exception or ""):
            m = _TORCHRUN_ROOT.search(msg)
            f = {}
            if m:
                f = {"root_cause_rank": int(m.group(1)), "exit_code": int(m.group(2)),
                     "signal": m.group(4)}
            out.append(mk("child_failed_error", f))
        return out

    def _continue_block(self, ln: Line, p: Prefixed) -> tuple[bool, list[Event]]:
        """Try to add this line to the open block. Returns (consumed, events closed meanwhile)."""
        b = self.block
        assert b is not None
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
                    frames.append(f'{m.group("file")}:{m.group("lineno")} in {m.group("func") or "?"}')
                ev.end_line = ln.number
                return True, []
            if text.startswith(("    ", "\t")) or text.strip() == "" or set(text.strip()) <= set("^~ "):
                ev.end_line = ln.number if text.strip() else ev.end_line
                return True, []
            if text.startswith("Traceback (most recent call last)"):
                ev.end_line = ln.number
                return True, []
            m = _EXC_LINE.match(text)
            if m:
                ev.fields["exception"] = m.group("exc")
                ev.fields["message"] = (m.group("msg") or "").strip()
                ev.fields["exception_line"] = ln.number
                ev.end_line = ln.number
                b.mode = "exc_message"
                return True, []
            if text.startswith(("During handling", "The above exception")):
                ev.end_line = ln.number
                return True, []
            # something else inside a traceback (e.g. an interleaved line): keep it in the block
            ev.end_line = ln.number
            return True, []
        if b.mode == "exc_message":
            stripped = text.strip()
            if has_prefix:
                return False, self._close()
            if stripped.startswith(("During handling of the above exception", "The above exception was")):
                if len(ev.fields["chain"]) < MAX_CHAIN:
                    ev.fields["chain"].append({"exception": ev.fields.get("exception"),
                                               "message": ev.fields.get("message"),
                                               "line": ev.fields.get("exception_line")})
                ev.end_line = ln.number
                b.mode = "traceback"
                b.lines = []
                return True, []
            if text.startswith("Traceback (most recent call last)"):
                return False, self._close()
            if stripped == "":
                b.lines.append("")
                return True, []
            if b.lines and b.lines[-1] == "":
                # after a blank line only a chained exception continues the block
                return False, self._close()
            nxt = _EXC_LINE.match(text)
            if nxt and nxt.group("msg") and nxt.group("exc").endswith(("Error", "Exception")):
                return False, self._close()  # pasted exception lines, one after another
            b.lines.append(text)
            ev.fields["message"] = (ev.fields.get("message") or "") + "\n" + text
            ev.end_line = ln.number
            return True, []
        if b.mode in ("fatal", "cpp"):
            if _CPP_STACK.match(body) or _CPP_STACK.match(text) or (text.startswith("  ") and not has_prefix) or (
                    b.mode == "fatal" and not has_prefix and ("most recent call first" in text or text.startswith(" "))):
                b.lines.append(text)
                ev.end_line = ln.number
                if "what():" in text:
                    ev.fields["message"] = text.split("what():", 1)[1].strip()
                return True, []
            if text.strip() == "" and b.mode == "fatal":
                return True, []
            return False, self._close()
        if b.mode == "solutions":
            if _NUMBERED.match(body) or body.startswith("Open an issue") or body.startswith("Piecewise CUDA Graph") \
                    or body.startswith("To work around"):
                b.lines.append(body)
                ev.end_line = ln.number
                return True, []
            return False, self._close()
        return False, self._close()

    # -------------------------------------------------------------------------- one line
    def feed(self, ln: Line) -> list[Event]:
        p = split_prefix(ln.text)
        out: list[Event] = []
        if self.block is not None:
            consumed, closed = self._continue_block(ln, p)
            out.extend(closed)
            if consumed:
                return out
        out.extend(self._single(ln, p))
        return out

    def _event(self, kind: str, ln: Line, p: Prefixed, fields: dict[str, Any], template: str | None = None) -> Event:
        return Event(kind, ln.number, fields, p.rank, p.ranks, p.ts, p.secs, p.body, template, None, self.source)

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
                self.last_dead = ev
            elif kind == "exit_code" and self.last_dead is not None and ln.number - self.last_dead.line <= 2:
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
        if "CUDA error" in body or "Cuda error" in body or "HIP error" in body:
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
            return [self._event("native_error", ln, p, {"file": m.group("file"), "source_line": int(m.group("no")),
                                                         "function": m.group("func"), "message": m.group("msg").strip()})]
        m = _KERNEL.match(body) or _KERNEL_ANYWHERE.search(body)
        if m:
            return [self._event("kernel_log", ln, p, {"message": m.group("msg")})]
        if body.startswith("Warning: ") or body.startswith("WARNING: "):
            return [self._event("python_warning", ln, p, {"source": None, "category": "Warning",
                                                          "message": body.split(": ", 1)[1]})]
        if "%|" in body or re.search(r"\d+/\d+ \[\d", body):
            label = body.split(":", 1)[0][:80]
            pm = re.search(r"(\d+)%", body)
            return [self._event("progress", ln, p, {"label": label, "percent": int(pm.group(1)) if pm else None})]
        m = _NATIVE_INLINE.search(body)
        if m:
            # run-on pastes: a C/C++ error (e.g. a Triton/LLVM assertion) in the middle of a line
            return [self._event("native_error", ln, p, {"file": m.group("file"), "source_line": int(m.group("no")),
                                                         "message": m.group("msg").strip()[:500]})]
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
        return self._close()


def parse_lines(lines: Iterable[Line], source: str = "") -> Iterator[Event]:
    parser = EventParser(source)
    for ln in lines:
        yield from parser.feed(ln)
    for ev in parser.finish():
        yield ev


def parse_source(source: str | os.PathLike[str]) -> Iterator[Event]:
    """Every event of one file (or `-`), in line order. Raises ingest.InputError if unreadable."""
    return parse_lines(read_lines(source), str(source))


def parse_text(text: str, source: str = "<text>") -> list[Event]:
    from .ingest import lines_from_text
    return list(parse_lines(lines_from_text(text), source))


__all__ = ["EventParser", "parse_lines", "parse_source", "parse_text", "oom_fields", "extract_pairs"]
