"""The serving section of the HTML report: decode throughput, KV token usage, and queued / running
requests over time, three inline-SVG charts on one shared time axis (`serving_section`).

The figures are the run's `ServingSeries` (run/serving_series.py), folded only when the HTML format
was asked for; a run folded without one, or a log with no batch line, gets no section. Like the rest
of the page (html_report.py) the charts are hand-written SVG: no script, no URL, and every text that
reaches the page passes through the page's `t` (redact, then escape). Each series is one `<path>`
whose `data-points` says how many buckets it draws (a gap in the line is a span with no batch line);
each bucket has a transparent column with a `<title>` tooltip giving its figures.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from logdoctor.run.serving_series import MIN_CHART_POINTS, Point, ServingSeries, series_of

if TYPE_CHECKING:
    from logdoctor.run.model import Run

CHART_W = 760              # as the page's other charts
LEFT, RIGHT = 70, 20       # room for the y tick labels, and after the last bucket
TOP, PLOT_H, BOTTOM = 10, 100, 22
THROUGHPUT_COLOR, USAGE_COLOR, QUEUE_COLOR, RUNNING_COLOR = "#00838f", "#5c6bc0", "#c62828", "#9e9e9e"

Text = Callable[[object], str]


def serving_section(run: Run, t: Text) -> list[str]:
    """`<h2>Serving</h2>` and the three charts; [] when the log has no batch line or no series was folded."""
    series = series_of(run)
    batch_lines = int((run.batches or {}).get("count") or 0)
    if series is None or batch_lines == 0:
        return []
    if not series.buckets:
        return ["<h2>Serving</h2>",
                f"<p>{t(f'The log has {batch_lines:,} batch lines, and they carry no time stamps (SGLang before v0.2.14 prints none): no serving charts.')}</p>"]
    chart = series.for_chart()
    span = chart.span
    assert span is not None
    axis = _TimeAxis(span[0], span[1], chart.dated, chart.width)
    points = chart.points()
    dp = len(chart.dp_ranks)
    per = f"per {_secs(chart.width)} bucket"
    if dp > 1:
        tput_caption = (f"Decode throughput (tokens/s), {per}: each DP rank's mean gen throughput over its Decode "
                        f"batch lines in the bucket, summed over the {dp} DP ranks (a rank with no line in a bucket "
                        f"adds nothing; buckets are widened, to no fewer than {MIN_CHART_POINTS}, until each rank has about two "
                        f"lines in each).")
    else:
        tput_caption = f"Decode throughput (tokens/s), {per}: the mean gen throughput of the Decode batch lines in the bucket."
    anyrank = " of any DP rank" if dp > 1 else ""
    out = ["<h2>Serving</h2>",
           f"<p>{t(_summary(chart, axis))}</p>",
           f"<p>{t(tput_caption)}</p>",
           _chart("throughput-chart", points, axis, t, [("throughput", "gen throughput", THROUGHPUT_COLOR, False,
                                                         lambda p: p.throughput)], "tok/s"),
           f"<p>{t(f'KV cache token usage (used / max_total_num_tokens), {per}: the highest{anyrank} in the bucket.')}</p>",
           _chart("token-usage-chart", points, axis, t, [("token-usage", "token usage", USAGE_COLOR, True,
                                                          lambda p: p.usage)], "", y_max=1.0),
           f"<p>{t(f'Requests waiting (#queue-req) and running (#running-req), {per}: the highest{anyrank} in the bucket.')}</p>",
           _chart("queue-chart", points, axis, t, [("queue", "#queue-req", QUEUE_COLOR, True, lambda p: p.queue),
                                                   ("running", "#running-req", RUNNING_COLOR, True, lambda p: p.running)], ""),
           _legend(t)]
    return out


def _summary(s: ServingSeries, axis: _TimeAxis) -> str:
    text = (f"{s.line_count:,} batch lines from {axis.label(s.first, full=True)} to {axis.label(s.last, full=True)} "
            f"({_secs(s.last - s.first)}), in {len(s.buckets)} buckets of {_secs(s.width)}; "
            f"times as the log prints them" + ("" if s.dated else " (no date: seconds since midnight)") + ".")
    if s.untimed:
        text += f" {s.untimed:,} batch lines without a time stamp are not shown."
    return text


class _TimeAxis:
    """Seconds on the prefix's scale → x, and the clock labels of the shared axis."""

    def __init__(self, t0: float, t1: float, dated: bool, bucket: float) -> None:
        self.t0, self.t1, self.dated, self.bucket = t0, max(t1, t0 + 1.0), dated, bucket
        self.plot_w = CHART_W - LEFT - RIGHT

    def x(self, secs: float) -> float:
        return LEFT + self.plot_w * (secs - self.t0) / (self.t1 - self.t0)

    def label(self, secs: float, full: bool = False) -> str:
        if not self.dated:
            s = int(secs) % 86400
            return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
        try:
            when = datetime.fromtimestamp(secs, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return f"{secs:.0f}s"
        if full:
            return when.strftime("%Y-%m-%d %H:%M:%S")
        return when.strftime("%m-%d %H:%M" if self.t1 - self.t0 > 86400 else "%H:%M:%S")

    def ticks(self, y: float, t: Text) -> list[str]:
        """Five clock labels under the plot (the last one ends at the plot's end: it is not cut off)."""
        out = []
        for k in range(5):
            secs = self.t0 + (self.t1 - self.t0) * k / 4
            anchor = "end" if k == 4 else "middle"
            out.append(f'<text class="x-tick" x="{self.x(secs):.1f}" y="{y:.1f}" text-anchor="{anchor}" '
                       f'fill="#757575">{t(self.label(secs))}</text>')
        return out


Series = tuple[str, str, str, bool, Callable[[Point], Any]]   # (class, name, colour, step?, value of a point)


def _chart(chart_id: str, points: Sequence[Point], axis: _TimeAxis, t: Text, series: list[Series], unit: str,
           y_max: float | None = None) -> str:
    values = [v for *_, value in series for p in points if (v := value(p)) is not None]
    top = _nice(max(values, default=0.0))
    if y_max is not None:  # a fraction keeps its 0–1 scale (unless a line printed more)
        top = max(y_max, top)
    height = TOP + PLOT_H + BOTTOM

    def y_of(v: float) -> float:
        return TOP + PLOT_H * (1 - min(max(v, 0.0), top) / top) if top > 0 else TOP + PLOT_H

    svg = [f'<svg id="{chart_id}" role="img" width="{CHART_W}" height="{height}" viewBox="0 0 {CHART_W} {height}">',
           f'<rect x="{LEFT}" y="{TOP}" width="{axis.plot_w}" height="{PLOT_H}" fill="#fafafa" stroke="#e0e0e0"/>']
    for k in range(3):  # y ticks: 0, half, top
        v = top * k / 2
        y = y_of(v)
        svg.append(f'<line x1="{LEFT}" x2="{LEFT + axis.plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eeeeee"/>'
                   f'<text class="y-tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#757575">'
                   f'{t(_num(v))}</text>')
    width = axis.x(axis.t0 + axis.bucket) - axis.x(axis.t0)
    for cls, name, color, step, value in series:
        d, n = _path(points, axis, value, y_of, step, width)
        svg.append(f'<path class="series series-{cls}" data-points="{n}" d="{d}" fill="none" stroke="{color}" '
                   f'stroke-width="1.6"><title>{t(name)}</title></path>')
    svg.append('<g class="tips">')
    for p in points:
        figures = ", ".join(f"{name} {_num(v)}{' ' + unit if unit else ''}" for _, name, _, _, value in series
                            if (v := value(p)) is not None)
        tip = f"{axis.label(p.start)}: {figures or 'no figure'} ({p.lines} line{'' if p.lines == 1 else 's'})"
        svg.append(f'<rect x="{axis.x(p.start):.1f}" y="{TOP}" width="{max(width, 1.0):.1f}" height="{PLOT_H}" '
                   f'fill="transparent"><title>{t(tip)}</title></rect>')
    svg.append("</g>")
    svg.extend(axis.ticks(TOP + PLOT_H + 15, t))
    svg.append("</svg>")
    return "".join(svg)


def _path(points: Sequence[Point], axis: _TimeAxis, value: Callable[[Point], Any], y_of: Callable[[float], float],
          step: bool, width: float) -> tuple[str, int]:
    """SVG path data over the points that have a value, broken where buckets are missing, and their count.
    A step series holds its value across its bucket; a line joins the buckets' centres."""
    parts: list[str] = []
    n = 0
    prev_end: float | None = None
    for p in points:
        v = value(p)
        if v is None:
            prev_end = None
            continue
        n += 1
        x0 = axis.x(p.start)
        y = y_of(float(v))
        joined = prev_end is not None and abs(prev_end - x0) < 0.01
        if step:
            parts.append((f"V{y:.1f}" if joined else f"M{x0:.1f} {y:.1f}") + f" H{x0 + width:.1f}")
        else:
            parts.append(f"{'L' if joined else 'M'}{x0 + width / 2:.1f} {y:.1f}")
        prev_end = x0 + width
    return " ".join(parts), n


def _legend(t: Text) -> str:
    items = (("gen throughput", THROUGHPUT_COLOR), ("token usage", USAGE_COLOR), ("#queue-req", QUEUE_COLOR),
             ("#running-req", RUNNING_COLOR))
    return '<div class="legend">' + "".join(f'<span><i style="background:{c}"></i>{t(n)}</span>' for n, c in items) + "</div>"


def _nice(v: float) -> float:
    """The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k) at or above v: an axis top."""
    if not v > 0 or not math.isfinite(v):
        return 1.0
    k = 10.0 ** math.floor(math.log10(v))
    return next(k * m for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if k * m >= v * (1 - 1e-12))


def _num(v: float) -> str:
    if v >= 100 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.2f}"


def _secs(s: float) -> str:
    if s < 120:
        return f"{s:g} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


__all__ = ["serving_section"]
