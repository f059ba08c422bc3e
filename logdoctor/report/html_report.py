"""A Report as one self-contained HTML page (`explain --format html`, `-o report.html`).

The page holds the diagnosis as the text output tells it (verdict, root cause, evidence, why, what to do),
each evidence line linked to an excerpt of the log around it, a per-rank stacked bar of GPU memory
(weights, KV cache, CUDA graphs, reserve, free) with the KV formula and the configured and in-force
`mem_fraction_static` marked (a CUDA-graph segment the log prints no figure for, but the capture's fit gives,
is drawn dashed and lighter and titled as an estimate), and a per-rank stage timeline on one time axis showing
where each rank stopped (html_timeline.py).

Charts are inline SVG written here, not a plotting library's output: a page that must open offline,
survive `--redact` and be counted bar by bar in a browser test is served best by a few dozen `<rect>`s
whose every label we escape ourselves (matplotlib's SVG carries `http://www.w3.org` / matplotlib.org URLs
and ids we do not control; Vega-Lite needs its ~800 KB runtime inlined or a 100 MB renderer wheel).
The page has no script, no external font, no URL in any `src` / `href`: links are `#` anchors.

Every piece of text that comes from the log passes through `_t`: redacted first (when `--redact` was
given: the redactor's placeholders look like tags, `<ip-1>`), then HTML-escaped.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any

from logdoctor.read.citations import where
from logdoctor.read.ingest import ANSI_ESCAPE
from logdoctor.records import dataclass
from logdoctor.report.html import ALSO_SEEN, VERDICT_COLORS
from logdoctor.report.report import budget_line

if TYPE_CHECKING:
    from logdoctor.diagnosis.engine import Diagnosis
    from logdoctor.diagnosis.ranking import Report
    from logdoctor.run.model import Run

EXCERPT_CONTEXT = 5        # log lines shown before and after each evidence line
EXCERPT_LINES = 40         # evidence lines given an excerpt (the rest are listed without one)
EXCERPT_WIDTH = 400        # characters of a log line shown in an excerpt
SEGMENTS = (("weights", "#5c6bc0"), ("kv_cache", "#26a69a"), ("cuda_graphs", "#ffa726"),
            ("reserve", "#bdbdbd"), ("free", "#eceff1"))
CHART_W, LABEL_W, ROW_H = 760, 110, 22

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:64em;
color:#212121;line-height:1.45;padding:0 1em}
h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.4em 0 .4em;border-bottom:1px solid #e0e0e0}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.88em}
.src{color:#757575} .ev a{color:#00838f;text-decoration:none} .ev code.t{white-space:pre-wrap}
pre.formula{background:#fafafa;border:1px solid #eee;padding:.5em;overflow-x:auto}
.excerpt{border:1px solid #e0e0e0;margin:.6em 0;scroll-margin-top:1em}
.excerpt:target{outline:2px solid #00838f}
.excerpt .h{background:#f5f5f5;padding:.2em .5em;font-size:.85em}
.excerpt pre{margin:0;padding:.3em .5em;overflow-x:auto;white-space:pre}
.excerpt .hit{background:#fff3e0;font-weight:bold;display:block}
.legend span{display:inline-block;margin-right:1em;font-size:.85em}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em;border:1px solid #9e9e9e}
svg text{font-family:system-ui,sans-serif;font-size:11px}
"""


@dataclass
class _Page:
    """What the renderer needs besides the report: how to redact, how to find the log's lines."""
    t: Callable[[object], str]                 # redact, then escape
    read_lines: Callable[[str | None, set[int]], dict[int, str]]



def axis(rows: int, plot_w: float, span: float, unit: str) -> list[str]:
    """Five ticks under a chart of `rows` rows, 0 to `span` (GiB or seconds), then the end of the SVG."""
    y = 8 + rows * ROW_H + 14
    ticks = [f'<text x="{LABEL_W + plot_w * k / 4:.1f}" y="{y}" text-anchor="middle" fill="#757575">'
             f'{span * k / 4:.0f}{unit}</text>' for k in range(5)]
    return [*ticks, "</svg>"]

def escaper(redact: Any) -> Callable[[object], str]:
    if redact is None:
        return lambda text: escape(str(text), quote=True)
    return lambda text: escape(redact.text(str(text)), quote=True)


def _gib(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.2f} GiB"


# ---------------------------------------------------------------------------------------------- diagnosis

def _headline(report: Report, t: Callable[[object], str]) -> str:
    p = report.primary
    color = VERDICT_COLORS.get(report.verdict, "#555")
    head = f'<span style="color:{color}">{t(report.verdict.upper())}</span>'
    if p is not None:
        head += f" {t(p.category)} · {t(p.rule.title)}"
        sub = f"[{t(p.rule.id)} {t(p.rule.name)}, confidence {p.confidence:.2f}]"
    elif report.verdict == "healthy":
        head += " the server reached ready and nothing fatal followed"
        sub = ""
    else:
        head += " no failure and no ready line: a fragment, or a launch that stopped"
        sub = ""
    return (f'<h1 id="verdict">{head}</h1><div class="src"><code>{t(report.source)}</code> {sub}</div>')


def _anchor(node: str | None, line: int) -> str:
    return f"L{re.sub(r'[^A-Za-z0-9_-]', '_', node)}-{line}" if node else f"L{line}"


def _evidence(d: Diagnosis, t: Callable[[object], str], excerpted: set[tuple[str | None, int]]) -> str:
    rows = []
    for ev in d.evidence:
        rank = ev.ranks or ("" if ev.rank is None else f"rank{ev.rank}")
        cite = t(where(ev.node, ev.line) + (f" {rank}" if rank else ""))
        if (ev.node, ev.line) in excerpted:
            cite = f'<a href="#{_anchor(ev.node, ev.line)}">{cite}</a>'
        rows.append(f'<li class="ev"><code>{cite}</code> <code class="t">{t(ev.text)}</code></li>')
    return "<ul>" + "".join(rows) + "</ul>"


def _diagnosis(report: Report, page: _Page, excerpted: set[tuple[str | None, int]]) -> tuple[list[str], str]:
    """The story (budget, evidence, why, what to do) and, apart, what else was seen (shown after the charts)."""
    t, p = page.t, report.primary
    out = []
    budget = budget_line(report)
    if budget:
        out.append(f"<p><b>budget</b> <code>{t(budget)}</code></p>")
    out.extend(f'<p style="color:#ef6c00">note: {t(n)}</p>' for n in report.notes)
    if p is not None:
        out.append("<h2>Evidence</h2>" + _evidence(p, t, excerpted))
        out.append(f"<h2>Why</h2><p>{t(p.explanation)}</p>")
        if p.remedies:
            out.append("<h2>What to do</h2><ol>" + "".join(f"<li>{t(r)}</li>" for r in p.remedies) + "</ol>")
    others = [d for d in report.diagnoses if d is not p]
    if others:
        items = "".join(f"<li><code>{t(where(d.node, d.position))}</code> <code>{t(d.rule.id)}</code> "
                        f"{t(d.rule.title)} ({t(d.category)}, {t(d.rule.severity)})</li>" for d in others[:ALSO_SEEN])
        more = f"<li>… {len(others) - ALSO_SEEN} more</li>" if len(others) > ALSO_SEEN else ""
        return out, f"<h2>Also seen ({len(others)})</h2><ul>{items}{more}</ul>"
    return out, ""


# ---------------------------------------------------------------------------------------------- memory

def _graph_estimate(r: dict[str, Any], mem: dict[str, Any]) -> tuple[float, str] | None:
    """A rank's CUDA-graph GiB when the log prints none for it but the capture's fit gives one (graph_memory.py),
    with how: on the rank whose capture lines it read, or on every rank once the capture finished (tensor-parallel
    ranks capture the same graphs). None when the numbers give nothing (a capture that died on another rank)."""
    if r.get("graph_gib") is not None:
        return None
    g = mem.get("graphs") or {}
    total = g.get("total_gib")
    if not isinstance(total, (int, float)) or isinstance(total, bool) or not 0 < total < 1e6:
        return None
    died = g.get("failed_at_bs")
    if g.get("rank") == r.get("rank"):
        how = str(g.get("total_source") or "the capture's lines")
        return float(total), how + (f", the capture died at bs {died}" if died is not None else "")
    if g.get("finished") and died is None:
        return float(total), f"as on {g.get('rank')}: every rank captures the same graphs"
    return None


def _segments(r: dict[str, Any], graph_estimate: float | None = None) -> list[tuple[str, float]]:
    """A rank's five segments in GiB, as `memory`'s ASCII bar splits them: the reserve is what the known
    parts and the free memory leave of the free memory before weights; an unknown part counts as 0 (the
    graphs: their estimate, when given)."""
    total = r.get("pre_load_free_gib") or 0.0
    w, kv = (max(0.0, r.get(k) or 0.0) for k in ("weights_gib", "kv_cache_gib"))
    g = max(0.0, r.get("graph_gib") or graph_estimate or 0.0)
    free = max(0.0, r.get("available_gpu_mem_gib") or 0.0)
    reserve = max(0.0, total - w - kv - g - free)
    return [("weights", w), ("kv_cache", kv), ("cuda_graphs", g), ("reserve", reserve), ("free", free)]


def _memory(mem: dict[str, Any] | None, t: Callable[[object], str]) -> list[str]:
    ranks = [r for r in (mem or {}).get("ranks", []) if r.get("pre_load_free_gib")]
    if not ranks:
        return ["<h2>GPU memory per rank</h2><p>The log shows no memory figures.</p>"]
    assert mem is not None
    scale = max(r["pre_load_free_gib"] for r in ranks)
    plot_w = CHART_W - LABEL_W - 70
    conf = mem.get("configured_mem_fraction_static")
    height = len(ranks) * ROW_H + 34
    svg = [f'<svg id="memory-chart" role="img" width="{CHART_W}" height="{height}" viewBox="0 0 {CHART_W} {height}">']
    estimated: list[str] = []    # ranks whose CUDA-graph segment is an estimate
    for i, r in enumerate(ranks):
        y, x = 8 + i * ROW_H, float(LABEL_W)
        svg.append(f'<g class="rank-bar" data-rank="{t(r["rank"])}">'
                   f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{t(r["rank"])}</text>')
        est = _graph_estimate(r, mem)
        if est is not None:
            estimated.append(str(r["rank"]))
        for name, gib in _segments(r, est[0] if est else None):
            w = plot_w * gib / scale
            color = dict(SEGMENTS)[name]
            guess = est is not None and name == "cuda_graphs"
            # an estimate is drawn lighter and dashed (a pattern fill would need a url() reference)
            look = ' fill-opacity="0.45" stroke-dasharray="3 2"' if guess else ""
            what = f"≈{gib:.2f} GiB, estimated ({est[1]})" if guess and est else f"{gib:.2f} GiB"
            if name == "cuda_graphs" and not guess and r.get("graph_gib") is None:
                what = "unknown (the log prints none for this rank)"
            svg.append(f'<rect class="seg seg-{name}{" estimated" if guess else ""}" x="{x:.1f}" y="{y}" '
                       f'width="{w:.1f}" height="{ROW_H - 6}" fill="{color}" stroke="#9e9e9e" stroke-width="0.5"'
                       f'{look}><title>{t(r["rank"])} {name}: {t(what)}</title></rect>')
            x += w
        svg.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{r["pre_load_free_gib"]:.1f} GiB</text>')
        # the static share m·P (weights + KV cache) ends here: configured m, and the m the numbers say
        # drawn last so that it stays visible when both agree
        for cls, m, dash in (("mfs-effective", r.get("effective_mem_fraction_static"), ""), ("mfs-configured", conf, "3 2")):
            if m is not None:
                mx = LABEL_W + plot_w * m * r["pre_load_free_gib"] / scale
                svg.append(f'<line class="{cls}" x1="{mx:.1f}" x2="{mx:.1f}" y1="{y - 2}" y2="{y + ROW_H - 4}" '
                           f'stroke="{"#c62828" if cls == "mfs-configured" else "#000"}" stroke-width="{2 if dash else 4}"'
                           + (f' stroke-dasharray="{dash}"' if dash else "") + f'><title>{cls[4:]} '
                           f'mem_fraction_static {m:.3f}</title></line>')
        svg.append("</g>")
    svg.extend(axis(len(ranks), plot_w, scale, ""))
    legend = "".join(f'<span><i style="background:{c}"></i>{n.replace("_", " ")}</span>' for n, c in SEGMENTS)
    eff = mem.get("effective_mem_fraction_static")
    legend += ('<span><i style="border:0;border-left:2px dashed #c62828;width:0"></i>configured mem_fraction_static '
               f'{t("unknown" if conf is None else f"{conf:g}")}</span>'
               '<span><i style="border:0;border-left:2px solid #000;width:0"></i>in force (from the numbers) '
               f'{t("unknown" if eff is None else f"{eff:.3f}")}</span>')
    if estimated:
        legend += ('<span><i style="background:#ffa726;opacity:.45;border-style:dashed"></i>CUDA graphs, estimated'
                   '</span>')
    formula = "\n".join(mem.get("formula", []))
    return ["<h2>GPU memory per rank</h2>",
            f"<p>GiB, of the free memory before the weights (P). Reserve = P·(1 − m): activations and CUDA graphs."
            f" KV cache {t(_gib(mem.get('kv_cache_gib')))}"
            + (f" for {mem['kv_tokens']:,} tokens" if mem.get("kv_tokens") else "") + "."
            + (f" The CUDA graphs of {t(_rank_list(estimated))} are an estimate (dashed, lighter): the log prints no graph"
               " memory for them; see each bar's title for how." if estimated else "") + "</p>",
            "".join(svg), f'<div class="legend">{legend}</div>',
            f'<pre class="formula">{t(formula)}</pre>' if formula else ""]


def _rank_list(ranks: list[str]) -> str:
    return ", ".join(ranks) if len(ranks) <= 4 else f"{', '.join(ranks[:3])} and {len(ranks) - 3} more ranks"


# ---------------------------------------------------------------------------------------------- timeline

def _timeline(run: Run, t: Callable[[object], str]) -> list[str]:
    """The per-rank stage timeline (html_timeline.py, which imports this module's chart geometry)."""
    from logdoctor.report.html_timeline import timeline
    return timeline(run, t)


# ---------------------------------------------------------------------------------------------- excerpts

def _excerpts(report: Report, page: _Page) -> tuple[list[str], set[tuple[str | None, int]]]:
    p = report.primary
    wanted: list[tuple[str | None, int]] = []
    for ev in (p.evidence if p is not None else []):
        if (ev.node, ev.line) not in wanted and len(wanted) < EXCERPT_LINES:
            wanted.append((ev.node, ev.line))
    out: list[str] = []
    done: set[tuple[str | None, int]] = set()
    by_node: dict[str | None, set[int]] = {}
    for node, line in wanted:
        by_node.setdefault(node, set()).update(range(max(1, line - EXCERPT_CONTEXT), line + EXCERPT_CONTEXT + 1))
    texts = {node: page.read_lines(node, numbers) for node, numbers in by_node.items()}
    t = page.t
    for node, line in wanted:
        lines = texts.get(node, {})
        if line not in lines:
            continue
        body = []
        for n in range(max(1, line - EXCERPT_CONTEXT), line + EXCERPT_CONTEXT + 1):
            if n in lines:
                text = f"{n:>6}  {t(lines[n])}"
                body.append(f'<span class="hit">{text}</span>' if n == line else text + "\n")
        out.append(f'<div class="excerpt" id="{_anchor(node, line)}"><div class="h">{t(where(node, line))}</div>'
                   f'<pre>{"".join(body)}</pre></div>')
        done.add((node, line))
    return (["<h2>Log excerpts</h2>"] + out if out else []), done


def log_lines(path: str, numbers: set[int], width: int = EXCERPT_WIDTH) -> dict[int, str]:
    """Lines `numbers` of a log as given (decompressed, colour codes dropped, `width` characters each), read
    again from its file and only up to the last one wanted; {} when it cannot be read again."""
    if not path or path == "<stdin>" or not numbers:
        return {}
    from logdoctor.read.sniff import InputError, open_source
    found: dict[int, str] = {}
    last = max(numbers)
    try:
        with open_source(path) as f:
            for n, raw in enumerate(f, 1):
                if n in numbers:
                    text = raw[:width * 4].decode("utf-8", "replace").rstrip("\r\n")
                    found[n] = ANSI_ESCAPE.sub("", text)[:width]
                if n >= last:
                    break
    except (InputError, OSError, EOFError):
        return {}
    return found


def _line_reader(report: Report) -> Callable[[str | None, set[int]], dict[int, str]]:
    """The excerpts' lines of a node's file (the report's source for a single log). Stdin cannot be read again."""
    def read(node: str | None, numbers: set[int]) -> dict[int, str]:
        return log_lines(next((n["file"] for n in report.nodes if n["node"] == node), report.source), numbers)
    return read


# ---------------------------------------------------------------------------------------------- the page

def explain_html_page(report: Report, redact: Any = None,
                      read_lines: Callable[[str | None, set[int]], dict[int, str]] | None = None) -> str:
    """The whole page. `redact`: a `report.redact.Redactor` (its placeholders are escaped like any text)."""
    page = _Page(escaper(redact), read_lines or _line_reader(report))
    excerpts, excerpted = _excerpts(report, page)
    t = page.t
    title = f"logdoctor: {report.verdict} · {report.source}"
    story, also_seen = _diagnosis(report, page, excerpted)
    from logdoctor.report.html_serving import serving_section  # the serving charts (SERVING's module)
    body = [_headline(report, t), *story, *_memory(report.memory, t), *_timeline(report.run, t),
            *serving_section(report.run, t), also_seen, *excerpts]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{t(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(b for b in body if b) + "\n</body></html>")


__all__ = ["CHART_W", "CSS", "LABEL_W", "ROW_H", "axis", "escaper", "explain_html_page", "log_lines"]
