"""One look at a block of raw lines on the bulk path: how often given needles occur (lines, periodic marks,
envelope tells; `ingest._scan_block` decides with them) and the batch figures (`run/batches.py` folds
them): decode throughput values, peaks of token usage, `#queue-req` and `#running-req`.

Two implementations give the same results, bit for bit: the compiled `_bulkscan` (one C pass per block,
built by the wheel's build hook or `tools/build_accelerator.py`) when it imports, and the Python here
(counts by `bytes.count`, figures by the bounded regexes below) when it does not. The Python is what
defines them; tests/test_bulkscan_native.py holds the C to it.

ingest scans a block to classify it and then hands that same block to the batch sink, which asks again:
the last block's scan is kept (one, by identity), so a block is read once, not twice.
"""
from __future__ import annotations

import re
from array import array
from types import ModuleType

from logdoctor import regexes

try:
    import logdoctor.read._bulkscan as _native_module
    native: ModuleType | None = _native_module
except ImportError:  # no compiler where it was installed: the Python path, same results
    native = None

# bounded numerals with a guard after them: a 400-digit value does not match at all (rather than
# giving inf, or its first 15 digits, or a ValueError from int() beyond 4300 digits)
_DECIMAL = rb"([0-9]{1,15}(?:\.[0-9]{1,12}(?![0-9])|(?!\.?[0-9])))"
# `\/`: some JSON encoders (fluent-bit) escape the slash of an enveloped line
RX_TPUT = regexes.compile(rb"gen throughput \(token\\?/s\): " + _DECIMAL)
RX_USAGE = regexes.compile(rb"token usage: " + _DECIMAL)
RX_QUEUE = regexes.compile(rb"#queue-req: ([0-9]{1,15})(?![0-9])")
RX_RUNNING = regexes.compile(rb"#running-req: ([0-9]{1,15})(?![0-9])")

DECODE, PREFILL = b"Decode batch", b"Prefill batch"
# what the batch sink counts when the block is not the one ingest just scanned
SINK_NEEDLES = (b"\n", DECODE, PREFILL)


class Figures:
    """The batch figures of one block. Throughput comes as packed doubles (C) or as the printed strings
    (Python: converting only distinct strings is what keeps it fast); both stand for the same floats."""

    __slots__ = ("tput_packed", "tput_strings", "peak_usage", "peak_queue", "peak_running")

    def __init__(self, tput_packed: bytes | None, tput_strings: list[bytes] | None, peak_usage: float | None,
                 peak_queue: int | None, peak_running: int | None) -> None:
        self.tput_packed = tput_packed
        self.tput_strings = tput_strings
        self.peak_usage = peak_usage
        self.peak_queue = peak_queue
        self.peak_running = peak_running

    def tput_values(self) -> array[float]:
        """Every throughput value, in the block's order (for tests and small blocks)."""
        if self.tput_packed is not None:
            out = array("d")
            out.frombytes(self.tput_packed)
            return out
        return array("d", map(float, self.tput_strings or ()))


def _peak_float(strings: list[bytes]) -> float | None:
    # steady serving prints few distinct values: convert each once
    return max(map(float, set(strings))) if strings else None


def _peak_int(strings: list[bytes]) -> int | None:
    return max(map(int, set(strings))) if strings else None


def python_figures(block: bytes) -> Figures:
    """The figures by regex: the definition the C pass is held to."""
    return Figures(None, RX_TPUT.findall(block), _peak_float(RX_USAGE.findall(block)),
                   _peak_int(RX_QUEUE.findall(block)), _peak_int(RX_RUNNING.findall(block)))


class BlockScan:
    """Needle counts of one block (all at once in C; on demand, then kept, in Python) and its figures."""

    __slots__ = ("block", "_counts", "_figures")

    def __init__(self, block: bytes, counts: dict[bytes, int], figures: Figures | None) -> None:
        self.block = block
        self._counts = counts
        self._figures = figures

    def count(self, needle: bytes) -> int:
        n = self._counts.get(needle)
        if n is None:
            n = self._counts[needle] = self.block.count(needle)
        return n

    def has(self, needle: bytes) -> bool:
        n = self._counts.get(needle)
        return needle in self.block if n is None else n > 0  # `in` stops at the first: no count wanted

    def figures(self) -> Figures:
        if self._figures is None:
            self._figures = python_figures(self.block)
        return self._figures


_last: tuple[bytes, BlockScan] | None = None   # one tuple, swapped whole: safe for threads sharing it


def scan(block: bytes, needles: tuple[bytes, ...] = SINK_NEEDLES, use_native: bool = True) -> BlockScan:
    """The scan of `block`, counting `needles` (non-empty, none holding a newline but b"\\n" itself)."""
    global _last
    mod = native if use_native else None
    if mod is not None:
        counts, packed, usage, queue, running = mod.scan(block, needles)
        result = BlockScan(block, dict(zip(needles, counts)), Figures(packed, None, usage, queue, running))
    else:
        result = BlockScan(block, {}, None)
    _last = (block, result)
    return result


def scanned(block: bytes) -> BlockScan:
    """The scan of a block the sink was handed: ingest's own when it is the block ingest just scanned."""
    last = _last
    if last is not None and last[0] is block:
        return last[1]
    return scan(block)


def forget() -> None:
    """Drop the kept scan (its block is up to a few MiB)."""
    global _last
    _last = None


__all__ = ["DECODE", "PREFILL", "RX_QUEUE", "RX_RUNNING", "RX_TPUT", "RX_USAGE", "SINK_NEEDLES", "BlockScan",
           "Figures", "forget", "native", "python_figures", "scan", "scanned"]
