"""Batch statistics of a run: how many `Decode batch` / `Prefill batch` lines, their peaks, and the
quantiles of decode throughput (`Run.batches`).

Batch lines come two ways, and both give the same figures: one event at a time (`BatchStats.add`), or
in bulk as newline-joined raw lines that ingest hands over without parsing them (`add_batch_lines`,
which is how multi-GB serving logs are read). Memory stays bounded: throughput keeps exact values up
to `EXACT_LIMIT` and then switches to a log-spaced histogram (≤0.5 % relative error).

Both ways also feed `series` (serving_series.py: the figures over time, for the HTML report) when one was
given; when not, they do nothing more than one `is None` test per call.
"""
from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable
from typing import Any

from logdoctor.events import Event
from logdoctor.run.serving_series import ServingSeries

EXACT_LIMIT = 200_000
BATCH_KINDS = frozenset({"decode_batch", "prefill_batch"})

# bounded numerals with a guard after them: a 400-digit value does not match at all (rather than
# giving inf, or its first 15 digits, or a ValueError from int() beyond 4300 digits)
_DECIMAL = rb"([0-9]{1,15}(?:\.[0-9]{1,12}(?![0-9])|(?!\.?[0-9])))"
# `\/`: some JSON encoders (fluent-bit) escape the slash of an enveloped line
_RX_TPUT = re.compile(rb"gen throughput \(token\\?/s\): " + _DECIMAL)
_RX_USAGE = re.compile(rb"token usage: " + _DECIMAL)
_RX_QUEUE = re.compile(rb"#queue-req: ([0-9]{1,15})(?![0-9])")
_RX_RUNNING = re.compile(rb"#running-req: ([0-9]{1,15})(?![0-9])")


class Quantiles:
    """Exact percentiles for small samples, a log histogram beyond EXACT_LIMIT."""

    RATIO = 1.01

    def __init__(self) -> None:
        self.values: array[float] | None = array("d")
        self.bins: dict[int, int] = {}
        self.count = 0
        self._sorted: list[float] | None = None

    def add(self, v: float) -> None:
        if not math.isfinite(v):
            return  # inf / nan are not figures; binning them would raise or print nonsense
        self.count += 1
        if self.values is not None:
            self.values.append(v)
            if len(self.values) > EXACT_LIMIT:
                for x in self.values:
                    self._bin(x)
                self.values = None
            return
        self._bin(v)

    def extend(self, values: Iterable[float]) -> None:
        values = [v for v in values if math.isfinite(v)]
        if self.values is not None:
            before = len(self.values)
            self.values.extend(values)
            self.count += len(self.values) - before
            if len(self.values) > EXACT_LIMIT:
                for x in self.values:
                    self._bin(x)
                self.values = None
            return
        for v in values:
            self.add(v)

    def _bin(self, v: float) -> None:
        k = -10**9 if v <= 0 else math.floor(math.log(v, self.RATIO))
        self.bins[k] = self.bins.get(k, 0) + 1

    def quantile(self, q: float) -> float | None:
        if self.count == 0:
            return None
        if self.values is not None:
            if self._sorted is None or len(self._sorted) != len(self.values):
                self._sorted = sorted(self.values)
            s = self._sorted
            pos = q * (len(s) - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, len(s) - 1)
            return round(s[lo] + (s[hi] - s[lo]) * (pos - lo), 2)
        target = q * (self.count - 1)
        seen = 0
        for k in sorted(self.bins):
            seen += self.bins[k]
            if seen > target:
                return 0.0 if k == -10**9 else round(self.RATIO ** (k + 0.5), 2)
        return None


class BatchStats:
    """Counts, peaks and decode-throughput quantiles over a log's batch lines (O(1) besides Quantiles)."""

    def __init__(self) -> None:
        self.decode_tput = Quantiles()
        self.n_decode = 0
        self.n_prefill = 0
        self.peak_usage: float | None = None
        self.peak_queue: int | None = None
        self.peak_running: int | None = None
        self.series: ServingSeries | None = None   # the figures over time, when asked for

    def add(self, ev: Event) -> None:
        """One parsed batch event (a kind in BATCH_KINDS)."""
        if self.series is not None:
            self.series.add(ev)
        f = ev.fields
        if ev.kind == "decode_batch":
            self.n_decode += 1
            t = f.get("gen_throughput")
            if isinstance(t, (int, float)):
                self.decode_tput.add(float(t))
        else:
            self.n_prefill += 1
        u = f.get("token_usage")
        if isinstance(u, (int, float)) and (self.peak_usage is None or u > self.peak_usage):
            self.peak_usage = float(u)
        q = f.get("queue_req")
        if isinstance(q, int) and (self.peak_queue is None or q > self.peak_queue):
            self.peak_queue = q
        r = f.get("running_req")
        if isinstance(r, int) and (self.peak_running is None or r > self.peak_running):
            self.peak_running = r

    def add_batch_lines(self, blob: bytes) -> None:
        """Newline-joined raw batch lines, envelope and all (the bulk path): only the figures that
        `add` takes from a parsed event are searched for, by one bounded regex each."""
        if self.series is not None:
            self.series.add_batch_lines(blob)
        self.n_decode += blob.count(b"Decode batch")
        self.n_prefill += blob.count(b"Prefill batch")
        self.decode_tput.extend(map(float, _RX_TPUT.findall(blob)))
        usage = _RX_USAGE.findall(blob)
        if usage:
            u = max(map(float, usage))
            if self.peak_usage is None or u > self.peak_usage:
                self.peak_usage = u
        queue = _RX_QUEUE.findall(blob)
        if queue:
            q = max(map(int, queue))
            if self.peak_queue is None or q > self.peak_queue:
                self.peak_queue = q
        running = _RX_RUNNING.findall(blob)
        if running:
            r = max(map(int, running))
            if self.peak_running is None or r > self.peak_running:
                self.peak_running = r

    def to_dict(self) -> dict[str, Any]:
        """`Run.batches`."""
        return {
            "count": self.n_decode + self.n_prefill,
            "decode_count": self.n_decode,
            "prefill_count": self.n_prefill,
            "gen_throughput_p10": self.decode_tput.quantile(0.10),
            "gen_throughput_median": self.decode_tput.quantile(0.50),
            "gen_throughput_p90": self.decode_tput.quantile(0.90),
            "peak_token_usage": self.peak_usage,
            "peak_queue_req": self.peak_queue,
            "peak_running_req": self.peak_running,
        }


__all__ = ["BATCH_KINDS", "EXACT_LIMIT", "BatchStats", "Quantiles"]
