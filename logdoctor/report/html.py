"""A Report as an HTML fragment, for notebooks (`logdoctor.Report._repr_html_`).

The same story as `explain_text`, in the same order: the verdict and the root cause, the budget line,
the evidence lines, why, what to do, then what else was seen and the stages reached. Every piece of
text comes from the log or from a rule filled with the log's values, so every piece is escaped: a log
line may hold `<script>` or an attribute-breaking quote. The fragment carries its styles inline
(a notebook's sanitiser keeps `style` attributes, drops `<style>` blocks) and no script.
"""
from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from logdoctor.read.citations import where
from logdoctor.report.report import _stages_line, budget_line

if TYPE_CHECKING:
    from logdoctor.diagnosis.engine import Diagnosis
    from logdoctor.diagnosis.ranking import Report

VERDICT_COLORS = {"failed": "#c62828", "healthy": "#2e7d32", "incomplete": "#ef6c00"}
ALSO_SEEN = 10  # diagnoses listed after the primary one, as explain_markdown lists them


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _section(title: str, body: str) -> str:
    return f'<div style="margin-top:0.6em"><b>{_e(title)}</b>{body}</div>'


def _evidence(d: Diagnosis) -> str:
    rows = []
    for ev in d.evidence:
        rank = ev.ranks or ("" if ev.rank is None else f"rank{ev.rank}")
        where_ = where(ev.node, ev.line) + (f" {rank}" if rank else "")
        rows.append(f'<li><code style="color:#00838f">{_e(where_)}</code> <code>{_e(ev.text)}</code></li>')
    return '<ul style="margin:0.2em 0">' + "".join(rows) + "</ul>"


def _headline(report: Report) -> str:
    p = report.primary
    color = VERDICT_COLORS.get(report.verdict, "#555")
    head = f'<b style="color:{color}">{_e(report.verdict.upper())}</b>'
    if p is not None:
        head += (f" <b>{_e(p.category)}</b> {_e(p.rule.title)} "
                 f'<span style="color:#777">[{_e(p.rule.id)} {_e(p.rule.name)}, confidence {p.confidence:.2f}]</span>')
    elif report.verdict == "healthy":
        head += " the server reached ready and nothing fatal followed"
    else:
        head += " no failure and no ready line: a fragment, or a launch that stopped"
    return f"<div>{head}</div>"


def explain_html(report: Report) -> str:
    """The report as one `<div>`: safe to display whatever the log holds."""
    p = report.primary
    out = [f'<div class="logdoctor-report" style="font-family:sans-serif;line-height:1.4">{_headline(report)}',
           f'<div style="color:#777"><code>{_e(report.source)}</code></div>']
    budget = budget_line(report)
    if budget:
        out.append(f"<div><b>budget</b> <code>{_e(budget)}</code></div>")
    out.extend(f'<div style="color:#ef6c00">note: {_e(n)}</div>' for n in report.notes)
    if p is not None:
        out.append(_section("Evidence", _evidence(p)))
        out.append(_section("Why", f'<p style="margin:0.2em 0">{_e(p.explanation)}</p>'))
        if p.remedies:
            items = "".join(f"<li>{_e(r)}</li>" for r in p.remedies)
            out.append(_section("What to do", f'<ol style="margin:0.2em 0">{items}</ol>'))
    others = [d for d in report.diagnoses if d is not p]
    if others:
        items = "".join(f"<li><code>{_e(where(d.node, d.position))}</code> <code>{_e(d.rule.id)}</code> "
                        f"{_e(d.rule.title)} ({_e(d.category)}, {_e(d.rule.severity)})</li>"
                        for d in others[:ALSO_SEEN])
        more = f"<li>… {len(others) - ALSO_SEEN} more</li>" if len(others) > ALSO_SEEN else ""
        out.append(f'<details style="margin-top:0.6em"><summary>Also seen ({len(others)})</summary>'
                   f'<ul style="margin:0.2em 0">{items}{more}</ul></details>')
    stages = _stages_line(report.run, report.run_nodes.get("stages"))
    out.append(_section("Stages", f" <code>{_e(stages)}</code>"))
    out.append("</div>")
    return "".join(out)


__all__ = ["explain_html"]
