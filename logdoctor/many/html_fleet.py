"""Many logs as one self-contained HTML page (`logdoctor report DIR -o report.html`).

The look of `explain --format html` (its CSS, verdict colours and escaping come from report/html_report.py
and report/html.py), for a fleet of runs: a headline (N logs: k failed, k incomplete, k healthy, k
unreadable); the outcome by category as an inline-SVG bar chart stacked by verdict; the outcome against each
server flag that varied among the runs (one small chart per flag, a bar per value; a flag with one value is
listed as the same in every run); a table of runs, failures first, each diagnosed run linking to a section
with its primary diagnosis (evidence, why, what to do).

Bounded whatever the fleet: at most TABLE_ROWS rows in the table, DETAILED_RUNS sections, FLAG_VALUES bars
per flag and CATEGORY_BARS categories; the page says what it left out and that `logdoctor batch` lists
every row. A fleet of 100k logs makes a page of a few MB.

The rows and flattened runs come from `batch.collect` (batch's worker pool). A row carries no text of its
log, so `run_details` diagnoses the detailed runs once more in the same pool and, for the other rows the
table shows, reads only the cited line. Every text from a log goes through `t`: redacted, then escaped.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from logdoctor.many.batch import BatchRow
from logdoctor.paths import display_path
from logdoctor.read.citations import where
from logdoctor.records import dataclass, field
from logdoctor.report.html import VERDICT_COLORS
from logdoctor.report.html_report import CHART_W, CSS, ROW_H, escaper, log_lines

TABLE_ROWS = 2000        # rows of the runs table (failures first)
DETAILED_RUNS = 200      # runs given a section with their primary diagnosis
FLAG_VALUES = 24         # bars per flag chart; the rarer values are one "other" bar
CATEGORY_BARS = 30       # bars of the category chart; the rarer categories are one "other" bar
EVIDENCE_ROWS = 8        # evidence lines of a detailed run
TEXT_WIDTH = 300         # characters of a cited line in a section
CELL_WIDTH = 160         # characters of a cited line in the table
EXPLANATION_WIDTH = 4000
BAR_LABEL_W = 190
VERDICTS = ("failed", "incomplete", "unreadable", "healthy")   # the table's order, and the bars' stacking
COLORS = {**VERDICT_COLORS, "unreadable": "#757575"}
# the server flags a fleet is compared on (flatten_run's columns), in the order people ask about them
FLAGS = (("mem_fraction_static", "mem fraction static"), ("cuda_graph_max_bs", "cuda graph max bs"),
         ("tp", "tp"), ("dp", "dp"), ("ep", "ep"), ("pp", "pp"), ("chunked_prefill_size", "chunked prefill size"),
         ("attention_backend", "attention backend"), ("model", "model"), ("sglang_version", "SGLang version"))
FLEET_CSS = CSS + """
table.runs{border-collapse:collapse;font-size:.85em;width:100%}
table.runs th,table.runs td{border-bottom:1px solid #eee;padding:.2em .4em;text-align:left;vertical-align:top}
table.runs th{background:#f5f5f5;position:sticky;top:0} table.runs td.n{text-align:right}
table.runs code.t{white-space:pre-wrap;word-break:break-all}
section.run{border-top:1px solid #e0e0e0;margin-top:1em;scroll-margin-top:1em} section.run:target{outline:2px solid #00838f}
.same li{font-size:.9em} h3.flag{font-size:.95em;margin:1em 0 .2em}
"""


@dataclass
class Detail:
    """What the page shows of one log besides its row (small: it crosses a worker's pipe)."""
    line_text: str | None                                   # the cited line as the log has it
    budget: str = ""
    evidence: list[tuple[str, str]] = field(default_factory=list)   # (where, text)
    explanation: str = ""
    remedies: list[str] = field(default_factory=list)
    diagnosed: bool = False                                  # a section can be written


def verdict_of(row: BatchRow) -> str:
    return "unreadable" if row.error else (row.verdict or "incomplete")


def category_of(row: BatchRow) -> str:
    """The category bar a row counts in: its primary diagnosis's category, `unreadable`, or `none`."""
    return "unreadable" if row.error else (row.category or "none")


def ordered(rows: Iterable[BatchRow]) -> list[BatchRow]:
    """Failures first, then incomplete, unreadable and healthy runs; by path within each."""
    return sorted(rows, key=lambda r: (VERDICTS.index(verdict_of(r)), r.path))


# ---------------------------------------------------------------------------------------------- details

def cited_line(path: str, line: int | None) -> str | None:
    """Line `line` of a log as given (decompressed), or None when it cannot be read again."""
    if line is None or line < 1:
        return None
    return log_lines(path, {line}, TEXT_WIDTH).get(line)


def _detail(item: tuple[str, int | None, bool], rules: list[Any], envelope: str | None) -> tuple[str, Detail | None]:
    """(path, line, diagnose?) → what the page shows of it; runs in a worker, never raises."""
    path, line, full = item
    detail = Detail(cited_line(path, line))
    if not full:
        return path, detail
    from logdoctor.diagnosis.ranking import diagnose_source
    from logdoctor.report.report import budget_line
    try:
        report = diagnose_source(path, rules, display_path(path), envelope)
    except Exception:  # the row already says what failed; here only the section is missing
        return path, detail
    p = report.primary
    if p is None:
        return path, detail
    for ev in p.evidence[:EVIDENCE_ROWS]:
        rank = ev.ranks or ("" if ev.rank is None else f"rank{ev.rank}")
        detail.evidence.append((where(ev.node, ev.line) + (f" {rank}" if rank else ""), ev.text[:TEXT_WIDTH]))
    detail.budget, detail.explanation = budget_line(report), p.explanation[:EXPLANATION_WIDTH]
    detail.remedies = [r[:EXPLANATION_WIDTH] for r in p.remedies[:EVIDENCE_ROWS]]
    detail.diagnosed = True
    return path, detail


def run_details(rows: list[BatchRow], rules: list[Any], jobs: int, timeout: float | None,
                envelope: str | None = None) -> dict[str, Detail]:
    """Path → Detail for the rows the page shows with a cited line: the first DETAILED_RUNS of them (in the
    table's order) diagnosed again for their sections, the others only their cited line read."""
    from logdoctor.many.workers import Pool
    shown = [r for r in ordered(rows)[:TABLE_ROWS] if r.evidence_line is not None and not r.error]
    items = [(r.path, r.evidence_line, i < DETAILED_RUNS) for i, r in enumerate(shown)]
    pool: Pool[tuple[str, int | None, bool], tuple[str, Detail | None]] = Pool(
        lambda item: _detail(item, rules, envelope), lambda item, _why: (item[0], None), lambda _scratch: None,
        jobs, timeout if timeout else None)
    return {path: d for path, d in pool.run(items) if d is not None}


# ---------------------------------------------------------------------------------------------- charts

def _bar_chart(svg_id: str, group_cls: str, key: str, bars: list[tuple[str, Counter[str]]],
               t: Callable[[object], str]) -> str:
    """Horizontal bars, one per (value, verdict counts), stacked by verdict, the count at the end."""
    top = max((sum(c.values()) for _, c in bars), default=0) or 1
    plot_w = CHART_W - BAR_LABEL_W - 50
    height = len(bars) * ROW_H + 8
    svg = [f'<svg id="{t(svg_id)}" role="img" width="{CHART_W}" height="{height}" viewBox="0 0 {CHART_W} {height}">']
    for i, (value, counts) in enumerate(bars):
        y, x, n = 4 + i * ROW_H, float(BAR_LABEL_W), sum(counts.values())
        label = value if len(value) <= 28 else value[:27] + "…"
        svg.append(f'<g class="{group_cls}" data-{key}="{t(value)}" data-count="{n}">'
                   f'<text x="{BAR_LABEL_W - 6}" y="{y + 13}" text-anchor="end">{t(label)}<title>{t(value)}</title></text>')
        for verdict in VERDICTS:
            if counts.get(verdict):
                w = plot_w * counts[verdict] / top
                svg.append(f'<rect class="verdict verdict-{verdict}" data-count="{counts[verdict]}" x="{x:.1f}" y="{y}" '
                           f'width="{w:.1f}" height="{ROW_H - 6}" fill="{COLORS[verdict]}"><title>{t(value)}: '
                           f'{counts[verdict]} {verdict}</title></rect>')
                x += w
        svg.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{n}</text></g>')
    svg.append("</svg>")
    return "".join(svg)


def _capped(counts: dict[str, Counter[str]], cap: int, order: Callable[[str], Any]) -> list[tuple[str, Counter[str]]]:
    """At most `cap` bars: the most frequent values in `order`, the rest summed into one `other` bar."""
    if len(counts) <= cap:
        return sorted(counts.items(), key=lambda kv: order(kv[0]))
    by_size = sorted(counts, key=lambda v: (-sum(counts[v].values()), order(v)))
    kept, rest = by_size[:cap - 1], by_size[cap - 1:]
    other: Counter[str] = Counter()
    for v in rest:
        other.update(counts[v])
    return [*sorted(((v, counts[v]) for v in kept), key=lambda kv: order(kv[0])), (f"{len(rest)} other values", other)]


def _tally(pairs: Iterable[tuple[str, str]]) -> dict[str, Counter[str]]:
    """(value, verdict) pairs → value → verdict counts (one Counter per value, not per pair)."""
    out: dict[str, Counter[str]] = {}
    for (value, verdict), n in Counter(pairs).items():
        out.setdefault(value, Counter())[verdict] = n
    return out


def _categories(rows: list[BatchRow], t: Callable[[object], str]) -> list[str]:
    counts = _tally((category_of(r), verdict_of(r)) for r in rows)
    bars = _capped(counts, CATEGORY_BARS, lambda c: (-sum(counts[c].values()), c))
    return ["<h2>Outcome by category</h2>",
            "<p>The primary diagnosis's category of each log (<code>none</code>: no diagnosis), stacked by verdict.</p>",
            _bar_chart("category-chart", "category-bar", "category", bars, t), _legend()]


def _value(v: Any) -> str:
    if v is None:
        return "unknown"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _value_order(v: str) -> tuple[int, float, str]:
    if v == "unknown":
        return 2, 0.0, v
    try:
        return 0, float(v), v
    except ValueError:
        return 1, 0.0, v


def _flags(runs: list[dict[str, Any]], t: Callable[[object], str]) -> list[str]:
    out = ["<h2>Outcome against the flags</h2>"]
    if not runs:
        return [*out, "<p>No log could be read: no flags to compare.</p>"]
    same: list[str] = []
    for name, title in FLAGS:
        counts = _tally((_value(run.get(name)), run.get("verdict") or "incomplete") for run in runs)
        known = [v for v in counts if v != "unknown"]
        if len(known) <= 1:  # one value, or one value and logs that do not say: not a variation worth a chart
            unknown = sum(counts["unknown"].values()) if "unknown" in counts else 0
            said = t(known[0]) + (f" (unknown in {unknown} run{'s' * (unknown != 1)})" if unknown else "") if known else "unknown"
            same.append(f"<li><code>{t(name)}</code>: {said}</li>")
            continue
        out.append(f'<h3 class="flag">{t(title)} <code>{t(name)}</code></h3>')
        out.append(_bar_chart(f"flag-{name}", "value-bar", "value", _capped(counts, FLAG_VALUES, _value_order), t))
    if len(out) == 1:
        out.append("<p>No flag varied among the runs.</p>")
    else:
        out.insert(1, f"<p>Each flag that varied among the {len(runs)} runs that could be read, a bar per value, "
                      "stacked by verdict.</p>" + _legend())
    if same:
        out.append(f'<p>Same in every run:</p><ul class="same">{"".join(same)}</ul>')
    return out


def _legend() -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{COLORS[v]}"></i>{v}</span>'
                                             for v in VERDICTS) + "</div>"


# ---------------------------------------------------------------------------------------------- table, sections

def _cell(v: Any, t: Callable[[object], str]) -> str:
    return "" if v is None else t(_value(v))


def _common_dir(rows: list[BatchRow]) -> str:
    """The directory every log is under (shown once above the table), or ""."""
    import os
    dirs = {os.path.dirname(display_path(r.path)) for r in rows}
    try:
        common = os.path.commonpath(list(dirs)) if dirs else ""
    except ValueError:  # absolute and relative paths mixed
        return ""
    return common + os.sep if common else ""


def _table(shown: list[BatchRow], total: int, runs: dict[str, dict[str, Any]], details: dict[str, Detail],
           detailed: dict[str, int], t: Callable[[object], str]) -> list[str]:
    head = ("#", "log", "verdict", "category", "rule", "last stage", "tp", "mem fraction", "graph max bs",
            "KV tokens", "cited line")
    body = []
    under = _common_dir(shown)
    for i, r in enumerate(shown, 1):
        run = runs.get(display_path(r.path), {})
        verdict = verdict_of(r)
        path = t(display_path(r.path)[len(under):])
        if r.path in detailed:
            path = f'<a href="#run-{detailed[r.path]}">{path}</a>'
        if r.error:
            cited = f"error: {t(r.error)}"
        elif r.evidence_line is not None:
            text = (details.get(r.path) or Detail(None)).line_text
            text = text if text is None or len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 1] + "…"
            cited = f"<code>L{r.evidence_line}</code>" + (f' <code class="t">{t(text)}</code>' if text else "")
        else:
            cited = ""
        rule = f"<code>{t(r.rule)}</code> {t(r.title or '')}" if r.rule else ""
        cells = [str(i), path, f'<b style="color:{COLORS[verdict]}">{verdict}</b>', _cell(r.category, t), rule,
                 _cell(r.last_stage, t), *(_cell(run.get(k), t) for k in ("tp", "mem_fraction_static",
                                                                         "cuda_graph_max_bs", "kv_tokens")), cited]
        body.append(f'<tr id="row-{i}" data-verdict="{verdict}">' + "".join(
            f'<td class="n">{c}</td>' if j in (0, 6, 7, 8, 9) else f"<td>{c}</td>" for j, c in enumerate(cells)) + "</tr>")
    note = "" if total <= len(shown) else (f"<p>The table shows the first {len(shown):,} of {total:,} logs (failures "
                                            "first); <code>logdoctor batch</code> lists every one.</p>")
    where_ = f"<p>Logs under <code>{t(under)}</code>.</p>" if under else ""
    return ["<h2>Runs</h2>", where_, note, '<table class="runs" id="runs"><thead><tr>'
            + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>"]


def _section(n: int, row_n: int, r: BatchRow, d: Detail, t: Callable[[object], str]) -> str:
    verdict = verdict_of(r)
    out = [f'<section class="run" id="run-{n}"><h3>{n}. <code>{t(display_path(r.path))}</code></h3>',
           f'<p><b style="color:{COLORS[verdict]}">{verdict.upper()}</b> {t(r.category or "")} · {t(r.title or "")} '
           f'<span class="src">[{t(r.rule or "")}]</span> <a href="#row-{row_n}">↑ table</a></p>']
    if d.budget:
        out.append(f"<p><b>budget</b> <code>{t(d.budget)}</code></p>")
    if d.evidence:
        out.append("<h4>Evidence</h4><ul>" + "".join(f'<li class="ev"><code>{t(w)}</code> <code class="t">{t(x)}</code></li>'
                                                    for w, x in d.evidence) + "</ul>")
    out.append(f"<h4>Why</h4><p>{t(d.explanation)}</p>")
    if d.remedies:
        out.append("<h4>What to do</h4><ol>" + "".join(f"<li>{t(x)}</li>" for x in d.remedies) + "</ol>")
    return "".join(out) + "</section>"


def _headline(rows: list[BatchRow], t: Callable[[object], str]) -> str:
    counts = Counter(verdict_of(r) for r in rows)
    parts = ", ".join(f'<span class="count-{v}" data-count="{counts[v]}" style="color:{COLORS[v]}">{counts[v]:,} {v}'
                      "</span>" for v in ("failed", "incomplete", "healthy", "unreadable"))
    return f'<h1 id="headline" data-logs="{len(rows)}">{len(rows):,} logs: {parts}</h1>'


def fleet_html_page(rows: list[BatchRow], runs: list[dict[str, Any]], details: dict[str, Detail] | None = None,
                    redact: Any = None) -> str:
    """The page for `rows` (batch rows, unreadable ones included) and `runs` (their `flatten_run` dicts);
    `details` from `run_details`; `redact`: a `report.redact.Redactor` (or None)."""
    t, details = escaper(redact), details or {}
    rows = ordered(rows)
    shown = rows[:TABLE_ROWS]
    by_path = {run["path"]: run for run in runs}
    detailed: dict[str, int] = {}
    for r in shown:
        d = details.get(r.path)
        if d is not None and d.diagnosed and len(detailed) < DETAILED_RUNS:
            detailed[r.path] = len(detailed) + 1
    row_of = {r.path: i for i, r in enumerate(shown, 1)}
    sections = [_section(n, row_of[p], shown[row_of[p] - 1], details[p], t) for p, n in detailed.items()]
    diagnosed = sum(1 for r in rows if r.rule)
    left = diagnosed - len(detailed)
    body = [_headline(rows, t), *_categories(rows, t), *_flags(runs, t),
            *_table(shown, len(rows), by_path, details, detailed, t),
            "<h2>Runs in detail</h2>" if sections else "",
            (f"<p>{len(detailed)} diagnosed runs are detailed here (failures first); {left:,} are not "
             f"(at most {DETAILED_RUNS}): <code>logdoctor explain LOG</code> tells any one.</p>" if left > 0 else ""),
            *sections]
    title = f"logdoctor: {len(rows)} logs"
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{t(title)}</title><style>{FLEET_CSS}</style></head><body>\n"
            + "\n".join(b for b in body if b) + "\n</body></html>")


__all__ = ["Detail", "fleet_html_page", "run_details", "ordered", "verdict_of", "category_of", "cited_line"]
