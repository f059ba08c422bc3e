"""CI output: GitHub Actions workflow commands from a Report.

Reads only the Report / Diagnosis model (never events), like every formatter in `report/`. The escaping is
that of GitHub's toolkit (`@actions/core` command.ts): data escapes `%`, CR and LF; properties also `:` and
`,`, which would otherwise end a property value.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from logdoctor.diagnosis.engine import Diagnosis
    from logdoctor.diagnosis.ranking import Report

STDIN_LABEL = "<stdin>"  # cli.common.label's name for stdin: no file an annotation could point at


def escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, properties: dict[str, str | int | None], message: str) -> str:
    """`::command k=v,k=v::message`, properties without a value left out."""
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in properties.items() if v is not None)
    return f"::{command}{' ' + props if props else ''}::{escape_data(message)}"


def _file_of(report: Report, d: Diagnosis) -> str | None:
    """The file a diagnosis cites: its node's file on a multi-node launch, else the log as given."""
    if report.nodes:
        return next((str(n["file"]) for n in report.nodes if n.get("node") == d.node and n.get("file")), None)
    return None if report.source == STDIN_LABEL else report.source


def _message(d: Diagnosis) -> str:
    text = d.explanation or d.rule.title
    return f"{text}\n→ {d.remedies[0]}" if d.remedies else text


def _annotation(report: Report, d: Diagnosis, command: str) -> str:
    file = _file_of(report, d)
    props: dict[str, str | int | None] = {"file": file, "line": d.position if file else None,
                                          "title": f"{report.verdict.upper()} {d.rule.id} {d.rule.title}"}
    return workflow_command(command, props, _message(d))


def _worth_reading(d: Diagnosis) -> bool:
    # cascades follow from the counted failure; the net's inferred clues are guesses a reviewer would not act on
    return not d.rule.cascade and not d.rule.inferred


def github_annotations(report: Report) -> list[str]:
    """One workflow command per diagnosis worth a reader's eye: `::error` for the counted failures (the
    failed verdict's primary first), `::warning` for warnings and for an incomplete verdict's primary."""
    out: list[str] = []
    p = report.primary
    if p is not None:
        out.append(_annotation(report, p, "error" if report.verdict == "failed" else "warning"))
    elif report.verdict == "incomplete":  # a hang must show in the checks even with nothing to cite
        file = None if report.source == STDIN_LABEL or report.nodes else report.source
        out.append(workflow_command("warning", {"file": file, "title": "INCOMPLETE"},
                                    "no failure and no ready line: a fragment, or a launch that stopped"))
    for d in report.diagnoses:
        if d is p or not _worth_reading(d):
            continue
        if d.counted:
            out.append(_annotation(report, d, "error"))
        elif d.rule.severity == "warning":
            out.append(_annotation(report, d, "warning"))
    return out


def github_text(report: Report) -> str:
    return "\n".join(github_annotations(report))


__all__ = ["escape_data", "escape_property", "github_annotations", "github_text", "workflow_command"]
