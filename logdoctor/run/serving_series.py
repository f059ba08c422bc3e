"""Serving figures over time, in O(1) memory: decode throughput, token usage, queue and running requests
per time bucket (`ServingSeries`), for the serving charts of the HTML report.

Fed like `batches.BatchStats`, two ways that give the same series: one parsed `decode_batch` /
`prefill_batch` event at a time (`add`), or newline-joined raw batch lines, envelope and all, in bulk
(`add_batch_lines`; one bounded regex finds each line's SGLang prefix and kind, four more its figures).
Only the HTML report needs it, so it is opt-in: a RunBuilder folds one when asked (`series=True`) or
inside `collecting_series(True)`, which is how `explain --format html` asks without every caller on the
way passing a flag; otherwise no batch line does any work for it.

Buckets lie on a grid of `width` seconds counted from 0 (the times as the prefix prints them: epoch
seconds when a date is printed, seconds since midnight when only a time is). When the span would take
more than `max_points` buckets the width doubles and neighbours merge, so the series always covers the
whole log. Every figure a bucket keeps merges exactly (counts, maxima, throughput in integer hundredths
of a token/s), so the series depends only on which lines came, never on the order they came in: the
bulk path and the event path can interleave differently and still agree.

Lines without a time stamp (eras before v0.2.14 print none) are counted, not charted. The series is
attached to the Run as a plain attribute (`series_of(run)`), never in `Run.to_dict()`: the JSON of
every report stays what it was.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

from logdoctor import regexes
from logdoctor.events import Event
from logdoctor.records import dataclass, field

MAX_POINTS = 400          # buckets at most: the chart's resolution, and the series' memory
MAX_DP_RANKS = 64         # DP ranks told apart (a hostile log cannot grow a bucket without bound)
FIGURE_LIMIT = 1e15       # a value at or past this is no figure a log prints (the bulk regexes take 15 digits)
NO_DP = -1                # the key of lines whose prefix names no DP rank
MIN_RANK_LINES = 2.0      # with DP: each rank's decode lines per bucket it appears in, at least, in a chart
MIN_CHART_POINTS = 8      # ... but a chart is never widened below this many buckets

_WANTED: ContextVar[bool] = ContextVar("logdoctor_serving_series", default=False)

# One batch line in one match: the SGLang prefix (read/prefix.py's form, as bytes), the kind, and then its
# `key: value` items, separated as the parsed line's items are (`, `; `. ` / `, ` right after `batch`):
# an item is one of the four keys read, with a bounded numeral and a guard after it (a 400-digit value
# is no figure), or anything else up to the next comma. A group keeps its value from the item that set
# it, so one match yields every figure of the line; `full token usage` or `(mixed #running-req: n)` are
# other items, as they are other keys in the parsed line. Every repetition is bounded, and nothing
# follows the items: a match never backtracks into them.
_DECIMAL = rb"([0-9]{1,15}(?:\.[0-9]{1,12}(?![0-9])|(?!\.?[0-9])))"
_ITEM = (rb"#running-req: ([0-9]{1,15})(?![0-9])|token usage: " + _DECIMAL
         + rb"|gen throughput \(token\\?/s\): " + _DECIMAL + rb"|#queue-req: ([0-9]{1,15})(?![0-9])|[^,\n]{0,256}")
_LINE = regexes.compile(
    rb"\[((?:(?:[0-9]{4}-)?[0-9]{2}-[0-9]{2} )?[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,]([0-9]{1,9}))?"
    rb"((?: [A-Z][A-Z_]{0,15}[0-9]{1,6}){0,12})\] ?(Decode|Prefill) batch"
    rb"(?:[ \t]{0,8}\[[0-9]{1,9}\])?(?:\(mixed #running-req: [0-9]{1,15}\))?"
    rb"(?:(?:, |(?<=batch)[.,] |(?<=\))\. )(?:" + _ITEM + rb")){0,64}"
)
CLOCK_CACHE = 4096        # distinct `date HH:MM` prefixes remembered (then forgotten: a hostile log has millions)
_DP = regexes.compile(r"(?<![A-Z_])DP([0-9]{1,6})(?![0-9])")
_DP_BYTES = regexes.compile(_DP.pattern.encode())


@contextmanager
def collecting_series(enabled: bool = True) -> Iterator[None]:
    """Within this block a RunBuilder made without `series=` folds a ServingSeries when `enabled`."""
    token = _WANTED.set(enabled)
    try:
        yield
    finally:
        _WANTED.reset(token)


def series_wanted() -> bool:
    """What `collecting_series` asked for here (False outside any)."""
    return _WANTED.get()


@lru_cache(maxsize=4096)
def _day_secs(date: str) -> float:
    """Epoch seconds of a `YYYY-MM-DD` date, as the prefix parser counts them (0 for no real date)."""
    from datetime import date as _date
    try:
        return float(_date.fromisoformat(date).toordinal() - 719163) * 86400.0
    except ValueError:
        return 0.0


def _figure(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < FIGURE_LIMIT:
        return None  # nan fails the comparison too
    return float(v)


@dataclass(slots=True)
class Bucket:
    """The batch lines of one time bucket."""
    lines: int = 0
    decode_lines: int = 0
    tput: dict[int, list[int]] = field(default_factory=dict)   # DP rank → [sum in 1/100 token/s, lines]
    usage: float | None = None
    queue: int | None = None
    running: int | None = None

    def merge(self, other: Bucket) -> None:
        self.lines += other.lines
        self.decode_lines += other.decode_lines
        for dp, (total, n) in other.tput.items():
            mine = self.tput.setdefault(dp, [0, 0])
            mine[0] += total
            mine[1] += n
        self.usage = _max(self.usage, other.usage)
        self.queue = _max(self.queue, other.queue)
        self.running = _max(self.running, other.running)

    def throughput(self) -> float | None:
        """Decode tokens/s: each DP rank's mean over its lines here, summed over the ranks (one rank
        without DP). None when no decode line here printed a throughput."""
        if not self.tput:
            return None
        return sum(total / n for total, n in self.tput.values()) / 100.0


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    return a if b is None or a >= b else b


@dataclass(frozen=True, slots=True)
class Point:
    """One bucket as the charts draw it."""
    start: float          # seconds (the prefix's scale) where the bucket begins
    lines: int
    decode_lines: int
    throughput: float | None
    usage: float | None
    queue: int | None
    running: int | None


class ServingSeries:
    """At most `max_points` buckets of batch lines over the whole log (see the module docstring)."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(2, max_points)
        self.width = 1.0                       # seconds per bucket: 2**k
        self.buckets: dict[int, Bucket] = {}
        self.lo = self.hi = 0                  # the indices of the first and last bucket
        self.untimed = 0                       # batch lines without a time stamp: not charted
        self.dated = False                     # some time carried a date (epoch seconds, not since midnight)
        self.dp_ranks: set[int] = set()        # DP ranks seen (at most MAX_DP_RANKS)
        self.first = float("inf")              # the earliest and the latest time of a charted line
        self.last = float("-inf")
        self._clock_secs: dict[bytes, tuple[float, int]] = {}
        self._dp_of: dict[bytes, int | None] = {}  # prefix label → DP rank (bulk path)

    # ------------------------------------------------------------------ feeding

    def add(self, ev: Event) -> None:
        """One parsed batch event."""
        if ev.secs is None:
            self.untimed += 1
            return
        f = ev.fields
        dp = NO_DP
        if ev.ranks and "DP" in ev.ranks:
            m = _DP.search(ev.ranks)
            if m:
                dp = int(m.group(1))
        decode = ev.kind == "decode_batch"
        if ev.ts is not None and len(ev.ts) >= 10 and ev.ts[4:5] == "-":
            self.dated = True
        self._point(ev.secs, dp, decode, _figure(f.get("gen_throughput")) if decode else None,
                    _figure(f.get("token_usage")), _int_figure(f.get("queue_req")), _int_figure(f.get("running_req")))

    def add_batch_lines(self, blob: bytes) -> None:
        """Newline-joined raw batch lines (envelopes, access lines and all, as ingest hands them over).

        One findall yields every line's figures; lines are then taken a bucket at a time (a serving log
        prints dozens of lines per bucket, in time order), so the per-line work is a few local operations."""
        rows = _LINE.findall(blob)
        self.untimed += max(0, blob.count(b"Decode batch") + blob.count(b"Prefill batch") - len(rows))
        clock_secs = self._clock_secs
        run: list[tuple[bytes, ...]] = []
        run_idx: int | None = None
        run_secs = 0.0
        width = self.width
        first, last = self.first, self.last
        for row in rows:
            clock, frac = row[0], row[1]
            minute = clock_secs.get(clock[:-3])  # lines of one minute share their date and HH:MM
            if minute is None:
                minute = self._minute(clock[:-3])
            # summed in split_prefix's order (time of day, fraction, then the date): the same float
            secs = minute[1] + int(clock[-2:]) + (float(b"0." + frac) if frac else 0.0) + minute[0]
            if secs < first:
                first = secs
            if secs > last:
                last = secs
            idx = int(secs // width)
            if idx != run_idx:
                if run:
                    self._rows(run_secs, run)
                    width = self.width
                    run = []
                run_idx, run_secs = int(secs // width), secs
            run.append(row)
        if run:
            self._rows(run_secs, run)
        self.first, self.last = first, last

    def _minute(self, minute: bytes) -> tuple[float, int]:
        """(epoch seconds of the date, seconds of HH:MM) of a prefix's `[YYYY-MM-DD ]HH:MM`, as split_prefix
        counts them, remembered."""
        day = 0.0
        if len(minute) == 16:  # a full date; `MM-DD` (multimodal_gen) has no year: no epoch
            day = _day_secs(minute[:10].decode("ascii"))
            self.dated = True
        if len(self._clock_secs) >= CLOCK_CACHE:
            self._clock_secs.clear()
        found = self._clock_secs[minute] = (day, int(minute[-5:-3]) * 3600 + int(minute[-2:]) * 60)
        return found

    def _rows(self, secs: float, rows: list[tuple[bytes, ...]]) -> None:
        """Lines that all fall in the bucket of `secs` (findall rows of _LINE), taken column by column."""
        b = self._bucket(secs)
        b.lines += len(rows)
        _, _, labels, kinds, running, usage, tput, queue = zip(*rows)
        b.usage = _max(b.usage, max(map(float, filter(None, usage)), default=None))
        b.queue = _max(b.queue, max(map(int, filter(None, queue)), default=None))
        b.running = _max(b.running, max(map(int, filter(None, running)), default=None))
        decode = kinds.count(b"Decode")
        if not decode:
            return
        b.decode_lines += decode
        one_label = labels.count(labels[0]) == len(labels)
        for label in ((labels[0],) if one_label else set(labels)):
            dp = self._dp_of.get(label, NO_DP - 1)
            if dp == NO_DP - 1:
                dp = self._dp_label(label)
            if dp is None:
                continue
            values = [v for v, k, lab in zip(tput, kinds, labels) if v and k == b"Decode" and (one_label or lab == label)]
            if values:
                acc = b.tput.get(dp)
                if acc is None:
                    acc = b.tput[dp] = [0, 0]
                # hundredths of a token/s: integer sums merge exactly, in any order
                acc[0] += sum(map(round, map((100.0).__mul__, map(float, values))))
                acc[1] += len(values)

    def _dp_label(self, label: bytes) -> int | None:
        """The DP rank a prefix label names (NO_DP: none), remembered; None past MAX_DP_RANKS ranks."""
        m = _DP_BYTES.search(label) if b"DP" in label else None
        dp = self._dp_rank(int(m.group(1)) if m else NO_DP)
        if len(self._dp_of) < CLOCK_CACHE:
            self._dp_of[label] = dp
        return dp

    def _dp_rank(self, dp: int) -> int | None:
        if dp == NO_DP or dp in self.dp_ranks:
            return dp
        if len(self.dp_ranks) < MAX_DP_RANKS:
            self.dp_ranks.add(dp)
            return dp
        return None  # a DP rank past the cap: its line counts, its throughput is not summed

    def _point(self, secs: float, dp: int, decode: bool, tput: float | None, usage: float | None,
               queue: int | None, running: int | None) -> None:
        self.first, self.last = min(self.first, secs), max(self.last, secs)
        b = self._bucket(secs)
        b.lines += 1
        if decode:
            b.decode_lines += 1
        rank = self._dp_rank(dp)
        if tput is not None and rank is not None:
            acc = b.tput.get(rank)
            if acc is None:
                acc = b.tput[rank] = [0, 0]
            acc[0] += round(tput * 100)
            acc[1] += 1
        if usage is not None and (b.usage is None or usage > b.usage):
            b.usage = usage
        if queue is not None and (b.queue is None or queue > b.queue):
            b.queue = queue
        if running is not None and (b.running is None or running > b.running):
            b.running = running

    def _bucket(self, secs: float) -> Bucket:
        """The bucket of `secs`, the width doubled first as often as the span needs."""
        idx = int(secs // self.width)
        if not self.buckets:
            self.lo = self.hi = idx
        elif idx < self.lo or idx > self.hi:
            lo, hi = min(self.lo, idx), max(self.hi, idx)
            while hi - lo + 1 > self.max_points:
                self._double()
                idx, lo, hi = idx >> 1, lo >> 1, hi >> 1
            self.lo, self.hi = lo, hi
        b = self.buckets.get(idx)
        if b is None:
            b = self.buckets[idx] = Bucket()
        return b

    def _double(self) -> None:
        """Twice the width: each pair of neighbouring buckets becomes one."""
        merged: dict[int, Bucket] = {}
        for idx in sorted(self.buckets):
            b = self.buckets[idx]
            into = merged.get(idx >> 1)
            if into is None:
                merged[idx >> 1] = b
            else:
                into.merge(b)
        self.buckets = merged
        self.width *= 2
        self.lo >>= 1
        self.hi >>= 1

    def copy(self) -> ServingSeries:
        out = ServingSeries(self.max_points)
        out.width, out.lo, out.hi, out.untimed, out.dated = self.width, self.lo, self.hi, self.untimed, self.dated
        out.dp_ranks = set(self.dp_ranks)
        out.first, out.last = self.first, self.last
        out.buckets = {idx: Bucket(b.lines, b.decode_lines, {dp: list(v) for dp, v in b.tput.items()}, b.usage,
                                   b.queue, b.running) for idx, b in self.buckets.items()}
        return out

    def for_chart(self) -> ServingSeries:
        """The series as the charts draw it. With several DP ranks, each prints its own Decode lines at its
        own moments, so a narrow bucket may hold DP0's line and not DP1's, and the sum over the ranks
        would saw between one rank's rate and all of theirs: the buckets are widened (neighbours merged)
        until every rank has on average MIN_RANK_LINES decode lines in each bucket it has any in."""
        out = self.copy()
        while len(out.dp_ranks) > 1 and len(out.buckets) > MIN_CHART_POINTS and out._sparse_rank():
            out._double()
        return out

    def _sparse_rank(self) -> bool:
        lines: dict[int, int] = {}
        present: dict[int, int] = {}
        for b in self.buckets.values():
            for dp, (_, n) in b.tput.items():
                lines[dp] = lines.get(dp, 0) + n
                present[dp] = present.get(dp, 0) + 1
        return any(lines[dp] < MIN_RANK_LINES * present[dp] for dp in lines if dp != NO_DP)

    # ------------------------------------------------------------------ reading

    def points(self) -> list[Point]:
        """The buckets in time order (only those with a line: a gap is a span with no batch line)."""
        return [Point(idx * self.width, b.lines, b.decode_lines, b.throughput(), b.usage, b.queue, b.running)
                for idx, b in sorted(self.buckets.items())]

    @property
    def span(self) -> tuple[float, float] | None:
        """(start of the first bucket, end of the last), seconds; None when nothing was charted."""
        if not self.buckets:
            return None
        return self.lo * self.width, (self.hi + 1) * self.width

    @property
    def line_count(self) -> int:
        return sum(b.lines for b in self.buckets.values())

    def key(self) -> tuple[Any, ...]:
        """Everything the series holds, comparable (tests: the bulk path and the event path agree)."""
        return (self.width, self.untimed, self.dated, sorted(self.dp_ranks), self.first, self.last,
                [(idx, b.lines, b.decode_lines, sorted(b.tput.items()), b.usage, b.queue, b.running)
                 for idx, b in sorted(self.buckets.items())])


def _int_figure(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < FIGURE_LIMIT else None


_ATTR = "serving_series"


def attach(run: Any, series: ServingSeries | None) -> None:
    """Keep `series` with the Run (an attribute, not a field: `Run.to_dict()` never sees it)."""
    setattr(run, _ATTR, series)


def series_of(run: Any) -> ServingSeries | None:
    """The series folded with this Run, or None when none was asked for."""
    s = getattr(run, _ATTR, None)
    return s if isinstance(s, ServingSeries) else None


__all__ = ["MAX_POINTS", "MIN_CHART_POINTS", "Bucket", "Point", "ServingSeries", "attach", "collecting_series", "series_of",
           "series_wanted"]
