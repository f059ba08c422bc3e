"""Batch statistics of a run: how many `Decode batch` / `Prefill batch` lines, their peaks, and the
quantiles of decode throughput (`Run.batches`).

Batch lines come two ways, and both give the same figures: one event at a time (`BatchStats.add`), or
in bulk as newline-joined raw lines that ingest hands over without parsing them (`add_batch_lines`,
which is how multi-GB serving logs are read; read/bulkscan.py finds their figures). Memory stays bounded: throughput keeps exact values up
to `EXACT_LIMIT` and then switches to a log-spaced histogram (≤0.5 % relative error).

Both ways also feed `series` (serving_series.py: the figures over time, for the HTML report) when one was
given; when not, they do nothing more than one `is None` test per call.
"""
from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable
from typing import Any

from logdoctor.events import Event
from logdoctor.read import bulkscan
from logdoctor.read.bulkscan import DECODE, PREFILL, Figures
from logdoctor.run.serving_series import ServingSeries

EXACT_LIMIT = 200_000
BATCH_KINDS = frozenset({"decode_batch", "prefill_batch"})
PENDING_STRINGS = 1 << 16   # distinct printed throughput strings held before they are converted (Python path)


class Quantiles:
    """Exact percentiles for small samples, a log histogram beyond EXACT_LIMIT.

    Either way the result depends only on the multiset of values, never on their order or on how they
    were grouped on the way in. So bulk blocks are taken whole: packed doubles from the compiled scan, or
    (the Python path) the printed strings, counted in C by a Counter and converted once per distinct string
    when a figure is asked for or PENDING_STRINGS distinct ones are held."""

    RATIO = 1.01
    LOG_RATIO = math.log(RATIO)  # what math.log(v, RATIO) divides by: the C binning divides by the same

    def __init__(self) -> None:
        self.values: array[float] | None = array("d")
        self.bins: dict[int, int] = {}
        self.count = 0
        self._sorted: list[float] | None = None
        self._pending: Counter[bytes] = Counter()   # printed values not yet in `values` / `bins`

    def add(self, v: float) -> None:
        if not math.isfinite(v):
            return  # inf / nan are not figures; binning them would raise or print nonsense
        self.count += 1
        if self.values is not None:
            self.values.append(v)
            if self.count > EXACT_LIMIT:
                self._to_bins()
            return
        self._bin(v)

    def extend(self, values: Iterable[float]) -> None:
        values = [v for v in values if math.isfinite(v)]
        if self.values is not None:
            before = len(self.values)
            self.values.extend(values)
            self.count += len(self.values) - before
            if self.count > EXACT_LIMIT:
                self._to_bins()
            return
        for v in values:
            self.add(v)

    def extend_figures(self, figures: Figures) -> None:
        """The throughput values of one bulk block (finite by construction: at most 15 + 12 digits)."""
        packed = figures.tput_packed
        if packed is not None:
            if not packed:
                return
            self.count += len(packed) // 8
            if self.values is not None:
                self.values.frombytes(packed)
                if self.count > EXACT_LIMIT:
                    self._to_bins()
                return
            assert bulkscan.native is not None  # packed values come from the compiled scan only
            bulkscan.native.bin_values(packed, self.LOG_RATIO, self.bins)
            return
        strings = figures.tput_strings
        if not strings:
            return
        self.count += len(strings)
        self._pending.update(strings)
        if self.values is not None and self.count > EXACT_LIMIT:
            self._to_bins()
        elif len(self._pending) > PENDING_STRINGS:
            self._take_pending()

    def _take_pending(self) -> None:
        """The pending printed values into `values` (exact) or `bins`, one conversion per distinct string."""
        pending = self._pending
        if not pending:
            return
        if self.values is not None:
            for s, n in pending.items():
                self.values.extend(array("d", [float(s)]) * n)
        else:
            bins = self.bins
            for s, n in pending.items():
                k = self._key(float(s))
                bins[k] = bins.get(k, 0) + n
        pending.clear()

    def _to_bins(self) -> None:
        values, self.values = self.values, None
        assert values is not None
        if bulkscan.native is not None:
            bulkscan.native.bin_values(values, self.LOG_RATIO, self.bins)
        else:
            for v, n in Counter(values).items():
                k = self._key(v)
                self.bins[k] = self.bins.get(k, 0) + n
        self._take_pending()

    def _key(self, v: float) -> int:
        return -10**9 if v <= 0 else math.floor(math.log(v, self.RATIO))

    def _bin(self, v: float) -> None:
        k = self._key(v)
        self.bins[k] = self.bins.get(k, 0) + 1

    def quantile(self, q: float) -> float | None:
        if self.count == 0:
            return None
        self._take_pending()  # `count` includes them: the exact limit is judged by it
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

    def add_batch_lines(self, blob: bytes) -> int:
        """Newline-joined raw batch lines, envelope and all (the bulk path): only the figures that
        `add` takes from a parsed event are searched for (read/bulkscan.py, one pass when compiled).
        Returns how many lines the blob holds."""
        if self.series is not None:
            self.series.add_batch_lines(blob)
        scan = bulkscan.scanned(blob)
        self.n_decode += scan.count(DECODE)
        self.n_prefill += scan.count(PREFILL)
        f = scan.figures()
        self.decode_tput.extend_figures(f)
        if f.peak_usage is not None and (self.peak_usage is None or f.peak_usage > self.peak_usage):
            self.peak_usage = f.peak_usage
        if f.peak_queue is not None and (self.peak_queue is None or f.peak_queue > self.peak_queue):
            self.peak_queue = f.peak_queue
        if f.peak_running is not None and (self.peak_running is None or f.peak_running > self.peak_running):
            self.peak_running = f.peak_running
        return scan.count(b"\n") + 1

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
