"""Fields from the free text of error messages: PyTorch OOM figures, CUDA error names, torchrun summaries.

Used on exception messages and on stray lines (parse.py). Like every pattern of the parser these are
bounded and guarded against starting inside a run (a lookbehind on digits), so a message of 40k digits after
`CUDA out of memory` is read in linear time; numbers go through values.to_int / to_float.
"""
from __future__ import annotations

import re
from itertools import islice
from typing import Any

from logdoctor import regexes
from logdoctor.parse.values import to_float, to_int

_CUDA_ERROR_NAME = regexes.compile(r"`(cudaError\w{1,64})'|\b(cudaError\w{1,64})\b")
_SIZE = r"(?<![\d.])(-?[\d.]{1,32}) ?([KMGT]i?B)"
_OOM_TRIED = regexes.compile(r"Tried to allocate " + _SIZE)
_OOM_TOTAL = regexes.compile(_SIZE + r" total capacity|total capacity of " + _SIZE)
_OOM_FREE = regexes.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free")
_OOM_INUSE = regexes.compile(r"this process has " + _SIZE + r" memory in use|Process \d{1,12} has " + _SIZE + r" memory in use")
_OOM_ALLOC = regexes.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch|" + _SIZE + r" already allocated")
_OOM_RESERVED = regexes.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated|" + _SIZE + r" reserved in total by PyTorch")
_OOM_GPU = regexes.compile(r"GPU (\d{1,6})(?!\d)")
_OOM_THIS = regexes.compile(r"this process has " + _SIZE + r" memory in use")
_OOM_OTHER = regexes.compile(r"Process (\d{1,12}) has " + _SIZE + r" memory in use")
MAX_OTHER_PROCESSES = 64


def _gib(num: str, unit: str) -> float | None:
    scale = {"B": 1 / 2**30, "KB": 1 / 2**20, "KiB": 1 / 2**20, "MB": 1 / 1024, "MiB": 1 / 1024,
             "GB": 1.0, "GiB": 1.0, "TB": 1024.0, "TiB": 1024.0}
    v = to_float(num)  # a damaged or absurd number (`2..5`, 400 digits, `1e999`): unknown, never inf/NaN
    return None if v is None else round(v * scale.get(unit, 1.0), 4)


def _first(m: re.Match[str] | None) -> float | None:
    if m is None:
        return None
    g = [x for x in m.groups() if x is not None]
    return _gib(g[0], g[1]) if len(g) >= 2 else None


_CUDA_MSG = regexes.compile(r"(?:CUDA|Cuda|CUDART|HIP) error(?::[ \t]{0,16}|[ \t]{1,16}(?P<file>[^\s:']{1,256}):(?P<no>\d{1,9})"
                       r"[ \t]{0,16}:?[ \t]{0,16})'?(?P<msg>[^'\n]{1,2000})'?")
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
        f["file"], f["source_line"] = m.group("file"), to_int(m.group("no"))
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
        f["gpu"] = to_int(m.group(1))
    m = _OOM_THIS.search(message)
    if m:
        f["this_process_gib"] = _gib(m.group(1), m.group(2))
    others = [{"pid": to_int(pm.group(1)), "gib": _gib(pm.group(2), pm.group(3))}
              for pm in islice(_OOM_OTHER.finditer(message), MAX_OTHER_PROCESSES)]
    if others:
        f["other_processes"] = others
    return f


# torchrun's ChildFailedError summary, read line by line (a `Root Cause.*?rank.*?exitcode` regex with
# re.S over the whole message took minutes on a few thousand `Root Cause … rank` lines)
_TR_RANK = regexes.compile(r"rank[ \t]{0,32}:[ \t]{0,32}(\d{1,9})(?!\d)")
_TR_EXIT = regexes.compile(r"exitcode[ \t]{0,32}:[ \t]{0,32}(-?\d{1,9})(?!\d)")
_TR_SIGNAL = regexes.compile(r"Signal (\d{1,4}) \((\w{1,32})\)")
_TR_ENTRY = regexes.compile(r"^\s{0,64}(?:\[\d{1,9}\]:|=)")


class RootCause:
    """The `Root Cause (first observed failure):` entry of a torchrun summary: rank, exitcode, signal."""

    __slots__ = ("exit_code", "rank", "signal", "stage")

    def __init__(self) -> None:
        self.stage = 0           # 0 before `Root Cause`, 1 wants rank, 2 wants exitcode, 3 wants signal, 4 done
        self.rank: int | None = None
        self.exit_code: int | None = None
        self.signal: str | None = None

    def feed(self, text: str) -> None:
        if self.stage == 0:
            idx = text.find("Root Cause")
            if idx < 0:
                return
            self.stage, text = 1, text[idx + len("Root Cause"):]
        elif self.stage == 3 and _TR_ENTRY.match(text):
            self.stage = 4       # the next entry or the closing rule: this one named no signal
        if self.stage == 1:
            m = _TR_RANK.search(text)
            if m is None:
                return
            self.rank, self.stage, text = int(m.group(1)), 2, text[m.end():]
        if self.stage == 2:
            m = _TR_EXIT.search(text)
            if m is None:
                return
            self.exit_code, self.stage, text = int(m.group(1)), 3, text[m.end():]
        if self.stage == 3:
            m = _TR_SIGNAL.search(text)
            if m is not None:
                self.signal, self.stage = m.group(2), 4

    def fields(self) -> dict[str, Any]:
        if self.stage < 3:
            return {}
        return {"root_cause_rank": self.rank, "exit_code": self.exit_code, "signal": self.signal}


def torchrun_root_cause(message: str) -> dict[str, Any]:
    root = RootCause()
    for line in message.split("\n"):
        root.feed(line)
    return root.fields()
