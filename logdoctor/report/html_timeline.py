"""The HTML report's per-rank stage timeline: init, weights, KV pool, graph capture, warm-up, ready or failure,
one row per rank on one time axis, showing where each rank stopped.

Each row is drawn from the rank's own lines (`Run.rank_stages`, folded by run/stages.py): a stage runs from the
first to the last line the rank printed in it, so ranks that finish loading at different times show it. Where a
rank's lines carry no time (or it printed none in a stage it went through: only TP0 prints some lines), the
run-wide span stands in, drawn lighter and titled "run-wide". Warm-up and ready are the main process's (uvicorn,
the warm-up requests, the ready line), the same on every row. A rank's row ends at its last line before ready:
a failure of its own is marked at the time its line says (`✗ failed in X`), a rank that merely went quiet with
`■ stopped in X`; a failure no rank printed (the main process's) is one dashed line across the chart.

`rank_rows` is the data (tested without a browser); `timeline` draws it as inline SVG, every label escaped by
the page's `t`.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from logdoctor import regexes
from logdoctor.read.prefix import split_prefix
from logdoctor.records import dataclass, field
from logdoctor.report.html_report import CHART_W, LABEL_W, ROW_H, axis
from logdoctor.run.model import STAGES, _rank_sort_key

if TYPE_CHECKING:
    from logdoctor.run.model import RankMemory, RankStages, Run

# the launch's stages in order as the timeline shows them: warm-up (not one of the Run's STAGES, which the
# diagnoses and the JSON read) sits between graph capture and ready
TIMELINE_STAGES = (*STAGES[:-1], "warmup", STAGES[-1])
STAGE_COLORS = {"init": "#90a4ae", "weights": "#5c6bc0", "kv_pool": "#26a69a", "graph_capture": "#ffa726",
                "warmup": "#8d6e63", "ready": "#2e7d32"}
_INDEX = {name: i for i, name in enumerate(TIMELINE_STAGES)}
_RANK_NUMBER = regexes.compile(r"(\d{1,9})\s*$")
_DAY = 86400.0


@dataclass
class Segment:
    stage: str
    start: float
    end: float
    runwide: bool = False          # the run-wide span, standing in for times the rank's own lines do not give


@dataclass
class RankRow:
    rank: str
    reached: str | None            # the furthest stage the rank got to (TIMELINE_STAGES)
    segments: list[Segment] = field(default_factory=list)
    failed: bool = False           # a fatal line of its own
    failed_at: float | None = None  # when that line was printed (None: its time is unknown)


def stamp_secs(ts: str | None) -> float | None:
    """A printed SGLang stamp (`2026-03-03 09:42:48`, `09:42:48.123`) in the seconds `Event.secs` uses."""
    return split_prefix(f"[{ts}] ").secs if ts else None


def _memory_reached(rm: RankMemory | None) -> str | None:
    """The last stage a rank's memory figures show it in (lines the stage fold may not count as the rank's)."""
    if rm is None:
        return None
    if rm.graph_capture is not None or rm.graph_begin_free_gib is not None or rm.graph_gib is not None:
        return "graph_capture"
    if rm.kv_tokens is not None or rm.kv_gib is not None:
        return "kv_pool"
    if rm.free_after_weights_gib is not None or rm.weights_gib is not None:
        return "weights"
    if rm.free_before_weights_gib is not None or rm.dist_init_gib is not None:
        return "init"
    return None


def _reached(run: Run, rs: RankStages | None, rm: RankMemory | None) -> str | None:
    seen = [s for s in (rs.reached if rs else None, _memory_reached(rm)) if s is not None]
    reached = max(seen, key=_INDEX.__getitem__) if seen else run.last_stage
    # the main process warms up and prints ready once every rank is done: a rank past its pools went there too
    if reached in ("kv_pool", "graph_capture"):
        if run.ready:
            return "ready"
        if run.warmup is not None:
            return "warmup"
    return reached


def failed_ranks(run: Run, labels: list[str]) -> dict[str, float | None]:
    """Rank label → when its first fatal line was printed (None: time unknown)."""
    out: dict[str, float | None] = {}
    numbers = {label: m.group(1) for label in labels if (m := _RANK_NUMBER.search(label))}
    for f in run.failures:
        for label in labels:
            if label == f.ranks or (f.ranks is None and f.rank is not None and numbers.get(label) == str(f.rank)):
                out.setdefault(label, stamp_secs(f.ts))
    return out


def _runwide(run: Run, end_of_log: float | None) -> dict[str, tuple[float, float]]:
    """The run-wide span of each stage with a time: to its end line, else to the next stage's start."""
    timed = [(n, run.stages[n]) for n in STAGES if n in run.stages and run.stages[n].start_secs is not None]
    out: dict[str, tuple[float, float]] = {}
    for j, (name, st) in enumerate(timed):
        assert st.start_secs is not None
        nxt = timed[j + 1][1].start_secs if j + 1 < len(timed) else None
        end = st.end_secs if st.end_secs is not None else (nxt if nxt is not None else end_of_log)
        out[name] = (st.start_secs, max(st.start_secs, end if end is not None else st.start_secs))
    return out


def rank_rows(run: Run) -> list[RankRow]:
    """One row per rank (the ranks of the memory figures and of the stage lines, in rank order; one row for
    the whole run when no line names a rank), each with its timed segments up to where it stopped."""
    labels = sorted(set(run.ranks) | set(run.rank_stages), key=_rank_sort_key)
    failed = failed_ranks(run, labels)
    runwide = _runwide(run, run.last_secs)
    w = run.warmup
    ready = run.stages.get("ready")
    # a log whose lines name no rank at all (TP1 from v0.4.6.post2 prints no prefix) has one process: its
    # run-wide spans are that rank's own
    standing_in = bool(run.rank_stages) or len(labels) > 1
    rows = []
    for label in labels or ["all ranks"]:
        rs = run.rank_stages.get(label)
        reached = _reached(run, rs, run.ranks.get(label))
        row = RankRow(label, reached, failed=label in failed, failed_at=failed.get(label))
        stop = _INDEX.get(reached or "", len(TIMELINE_STAGES) - 1)
        for name in STAGES[:-1]:
            if _INDEX[name] > stop:
                break
            own = rs.spans.get(name) if rs is not None else None
            if own is not None:
                row.segments.append(Segment(name, own[0], own[1]))
            elif name in runwide:
                row.segments.append(Segment(name, *runwide[name], runwide=standing_in))
        last = row.segments[-1] if row.segments else None
        if last is not None and last.stage == reached:
            # the rank stopped in this stage: its row runs on to its last line, or to its failure
            ends = [last.end, rs.last_secs if rs is not None else None, row.failed_at]
            last.end = max(e for e in ends if e is not None)
        if reached in ("warmup", "ready") and w is not None and w.start_secs is not None:
            end = w.end_secs if w.end_secs is not None else (row.failed_at or run.last_secs or w.start_secs)
            row.segments.append(Segment("warmup", w.start_secs, max(end, w.start_secs)))
        if reached == "ready" and ready is not None and ready.start_secs is not None:
            row.segments.append(Segment("ready", ready.start_secs, ready.start_secs))
        rows.append(row)
    return rows


def _main_failure(run: Run, rows: list[RankRow]) -> tuple[str, float] | None:
    """The first timed failure of a launch that did not get ready, when no rank's row shows one: the main
    process's (`Initialization failed. warmup error`, `Rank 0 scheduler is dead`)."""
    if run.ready or any(r.failed for r in rows):
        return None
    return next(((f.kind, s) for f in run.failures if (s := stamp_secs(f.ts)) is not None), None)


def _unwrap(rows: list[RankRow], main: tuple[str, float] | None) -> tuple[list[RankRow], tuple[str, float] | None]:
    """Time-only stamps (`HH:MM:SS`, before v0.3.4) restart at midnight: times more than half a day before the
    first one are the next day's."""
    starts = [s.start for r in rows for s in r.segments]
    if not starts or starts[0] >= 2 * _DAY:   # dated stamps (epoch seconds) never wrap
        return rows, main
    first = starts[0]

    def fix(v: float) -> float:
        return v + _DAY if v < first - _DAY / 2 else v
    for r in rows:
        for s in r.segments:
            s.start, s.end = fix(s.start), fix(s.end)
        if r.failed_at is not None:
            r.failed_at = fix(r.failed_at)
    return rows, (None if main is None else (main[0], fix(main[1])))


def _untimed(rows: list[RankRow], t: Callable[[object], str]) -> list[str]:
    by_stage: dict[str, list[str]] = {}
    for r in rows:
        by_stage.setdefault(r.reached or "unknown", []).append(r.rank)
    stopped = "; ".join(f"{t(stage)}: {t(', '.join(ranks))}" for stage, ranks in by_stage.items())
    return ["<h2>Stages per rank</h2>",
            f'<p class="no-timeline">The log\'s lines carry no time stamps: no timeline. Where each rank got to: '
            f"{stopped}.</p>"]


def timeline(run: Run, t: Callable[[object], str]) -> list[str]:
    rows = rank_rows(run)
    rows, main = _unwrap(rows, _main_failure(run, rows))
    if not any(r.segments for r in rows):
        return _untimed(rows, t)
    times = [v for r in rows for s in r.segments for v in (s.start, s.end)]
    times += [r.failed_at for r in rows if r.failed_at is not None] + ([main[1]] if main else [])
    t0, t1 = min(times), max(times)
    t1 = max(t1, t0 + 1.0)
    plot_w = CHART_W - LABEL_W - 170  # room on the right for "✗ failed in graph_capture"

    def x_of(secs: float) -> float:
        return LABEL_W + plot_w * (min(max(secs, t0), t1) - t0) / (t1 - t0)

    height = len(rows) * ROW_H + 34
    svg = [f'<svg id="timeline-chart" role="img" width="{CHART_W}" height="{height}" viewBox="0 0 {CHART_W} {height}">']
    for i, row in enumerate(rows):
        y = 8 + i * ROW_H
        label, reached = t(row.rank), t(row.reached or "")
        svg.append(f'<g class="rank-row" data-rank="{label}" data-reached="{reached}">'
                   f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{label}</text>')
        end_x = float(LABEL_W)
        for s in row.segments:
            x0, x1 = x_of(s.start), x_of(s.end)
            width = max(x1 - x0, 4.0 if s.stage == "ready" else 2.0)
            how = " (run-wide: this rank's lines give no time)" if s.runwide else ""
            svg.append(f'<rect class="stage stage-{s.stage}{" runwide" if s.runwide else ""}" x="{x0:.1f}" y="{y}" '
                       f'width="{width:.1f}" height="{ROW_H - 6}" fill="{STAGE_COLORS[s.stage]}"'
                       + (' fill-opacity="0.4"' if s.runwide else "")
                       + f'><title>{label} {s.stage}: {s.start - t0:.0f}s → {s.end - t0:.0f}s{how}</title></rect>')
            end_x = max(end_x, x0 + width)
        if row.failed:
            fx = x_of(row.failed_at) if row.failed_at is not None else end_x
            when = f" at {row.failed_at - t0:.0f}s" if row.failed_at is not None else " (time unknown)"
            svg.append(f'<line class="failure" x1="{fx:.1f}" x2="{fx:.1f}" y1="{y - 2}" y2="{y + ROW_H - 4}" '
                       f'stroke="#c62828" stroke-width="2"><title>{label} failed{when}</title></line>'
                       f'<text class="stopped failed" x="{fx + 3:.1f}" y="{y + 13}" fill="#c62828" font-weight="bold">'
                       f'✗ failed in {reached or "?"}</text>')
        elif row.reached != "ready":
            svg.append(f'<text class="stopped" x="{end_x + 3:.1f}" y="{y + 13}" fill="#ef6c00">■ stopped in '
                       f'{reached or "?"}</text>')
        svg.append("</g>")
    if main is not None:
        mx = x_of(main[1])
        svg.append(f'<g class="main-failure"><line x1="{mx:.1f}" x2="{mx:.1f}" y1="4" y2="{8 + len(rows) * ROW_H}" '
                   f'stroke="#c62828" stroke-width="2" stroke-dasharray="4 3"><title>the main process: {t(main[0])} '
                   f'at {main[1] - t0:.0f}s</title></line><text x="{mx + 3:.1f}" y="{8 + len(rows) * ROW_H - 4}" '
                   f'fill="#c62828">✗ {t(main[0])}</text></g>')
    svg.extend(axis(len(rows), plot_w, t1 - t0, "s"))
    legend = "".join(f'<span><i style="background:{c}"></i>{n.replace("_", " ")}</span>' for n, c in STAGE_COLORS.items())
    if any(s.runwide for r in rows for s in r.segments):
        legend += '<span><i style="background:#9e9e9e;opacity:.4"></i>run-wide times (the rank\'s lines give none)</span>'
    return ["<h2>Stages per rank</h2>",
            "<p>Seconds from the first stage line. Each row is the rank's own lines, first to last in each stage;"
            " warm-up and ready are the main process's. A row ends where the rank's lines stop.</p>",
            "".join(svg), f'<div class="legend">{legend}</div>']


__all__ = ["STAGE_COLORS", "TIMELINE_STAGES", "RankRow", "Segment", "failed_ranks", "rank_rows", "stamp_secs",
           "timeline"]
