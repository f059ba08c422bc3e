"""CI output: SARIF 2.1.0 (GitHub code scanning, Azure DevOps, any SARIF viewer) from a Report or batch rows.

Reads only the Report / Diagnosis model (never events), like every formatter in `report/`. The schema this
output is validated against ships beside the package: `logdoctor/sarif-2.1.0.schema.json`, the OASIS
errata-01 schema, from github.com/oasis-tcs/sarif-spec `sarif-2.1/schema/sarif-schema-2.1.0.json` (last
changed in a560296, identical to `Schemata/sarif-schema-2.1.0.json` of ffa72eb "match the Approved Errata").

Levels: a counted failure is `error`; a warning, and an error-severity rule that did not stop the server, is
`warning`; an info rule is `note`. An incomplete verdict (a hang, a fragment) is a `warning`, not a `note`:
a launch that never became ready is what a smoke test is for, and code-scanning UIs hide notes by default.
Whether it fails the job is `--fail-on`'s decision (the exit code), not the level's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from logdoctor import __version__

if TYPE_CHECKING:
    from logdoctor.diagnosis.engine import Diagnosis
    from logdoctor.diagnosis.ranking import Report

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
STDIN_LABEL = "<stdin>"  # cli.common.label's name for stdin: no artifact a location could point at
LEVEL_OF_SEVERITY = {"error": "error", "warning": "warning", "info": "note"}
# a result for a launch that stopped without a rule saying where: the one result no rule file owns
INCOMPLETE_RULE: dict[str, Any] = {
    "id": "INCOMPLETE", "name": "launch-incomplete",
    "shortDescription": {"text": "No failure and no ready line: a fragment, or a launch that stopped"},
    "fullDescription": {"text": "The log ends before the server printed its ready line, and no rule found a "
                                "failure: the launch hung, was killed without a message, or the log is cut."},
    "help": {"text": "Look at the last stage reached (logdoctor summary LOG); rerun with a longer timeout or "
                     "with NCCL_DEBUG=INFO to see where it stops."},
    "defaultConfiguration": {"level": "warning"}, "properties": {"category": "incomplete"},
}


def artifact_uri(path: str) -> str:
    """The log path as given, as a URI reference: relative stays relative; spaces, `%`, `#` escaped."""
    return quote(path, safe="/:@!$&'()*+,;=-._~")


def _level(d: Diagnosis, report_verdict: str, is_primary: bool) -> str:
    if d.counted or (is_primary and report_verdict == "failed"):
        return "error"
    if d.rule.severity == "info":
        return "note"
    return "warning"


def _rule_descriptor(rule: Any, remedies: list[str] | None = None) -> dict[str, Any]:
    """A rule's descriptor; `help` is the remedies filled with this log's numbers when there is one log, the
    rule file's templates otherwise (batch)."""
    full = " ".join((rule.why or rule.explanation or rule.title).split())
    help_text = "\n".join(f"{i}. {x}" for i, x in enumerate(remedies or rule.remedy, 1)) or rule.title
    desc: dict[str, Any] = {
        "id": rule.id, "name": rule.name, "shortDescription": {"text": rule.title}, "fullDescription": {"text": full},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": LEVEL_OF_SEVERITY.get(rule.severity, "warning")},
        "properties": {"category": rule.category, "severity": rule.severity, "fatal": rule.fatal},
    }
    if rule.references:
        desc["helpUri"] = rule.references[0]
    return desc


def _file_of(report: Report, node: str | None) -> str | None:
    """The file a node's lines are in (a multi-node report), else the log as given; None for stdin."""
    if report.nodes:
        return next((str(n["file"]) for n in report.nodes if n.get("node") == node and n.get("file")), None)
    return None if report.source == STDIN_LABEL else report.source


def _region(line: int, end_line: int | None) -> dict[str, Any]:
    # no `snippet`: evidence text is the message without its prefix, not the artifact's bytes at the region
    return {"startLine": max(1, line), "endLine": max(1, line, end_line or line)}


def _location(uri: str, region: dict[str, Any], message: str | None = None, loc_id: int | None = None
              ) -> dict[str, Any]:
    loc: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(uri)}, "region": region}}
    if loc_id is not None:
        loc["id"] = loc_id
    if message:
        loc["message"] = {"text": message}
    return loc


def _result(report: Report, d: Diagnosis, rule_index: int) -> dict[str, Any]:
    text = d.explanation or d.rule.title
    res: dict[str, Any] = {
        "ruleId": d.rule.id, "ruleIndex": rule_index, "level": _level(d, report.verdict, d is report.primary),
        "message": {"text": f"{report.verdict.upper()}: {d.rule.title}. {text}" if text != d.rule.title
                    else f"{report.verdict.upper()}: {text}"},
        "properties": {"verdict": report.verdict, "category": d.category, "confidence": round(d.confidence, 3),
                       "primary": d is report.primary},
    }
    file = _file_of(report, d.node)
    if file is not None:
        at = next((e for e in d.evidence if e.line == d.position), None)
        res["locations"] = [_location(file, _region(d.position, at.end_line if at else None))]
        related = []
        for i, e in enumerate(d.evidence, 1):
            e_file = _file_of(report, e.node)
            if e_file is None:
                continue
            rank = e.ranks or ("" if e.rank is None else f"rank{e.rank}")
            related.append(_location(e_file, _region(e.line, e.end_line),
                                     f"{rank}: {e.text}" if rank else e.text, i))
        if related:
            res["relatedLocations"] = related
    return res


def _worth_reporting(report: Report, d: Diagnosis) -> bool:
    # as for GitHub annotations: cascades follow from the counted failure, the net's guesses are not findings
    return d is report.primary or d.counted or (not d.rule.cascade and not d.rule.inferred)


def _incomplete_result(source: str | None, verdict: str, rule_index: int) -> dict[str, Any]:
    res: dict[str, Any] = {"ruleId": INCOMPLETE_RULE["id"], "ruleIndex": rule_index, "level": "warning",
                           "message": {"text": f"{verdict.upper()}: {INCOMPLETE_RULE['shortDescription']['text']}"},
                           "properties": {"verdict": verdict, "category": "incomplete"}}
    if source is not None:
        res["locations"] = [{"physicalLocation": {"artifactLocation": {"uri": artifact_uri(source)}}}]
    return res


class _Rules:
    """rules[] of a run: each rule once, results point at it by index."""

    def __init__(self) -> None:
        self.descriptors: list[dict[str, Any]] = []
        self.index: dict[str, int] = {}

    def add(self, rule_id: str, make: Any) -> int:
        if rule_id not in self.index:
            self.index[rule_id] = len(self.descriptors)
            self.descriptors.append(make())
        return self.index[rule_id]


def _log(rules: _Rules, results: list[dict[str, Any]], successful: bool,
         notifications: list[dict[str, Any]] | None = None, properties: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    invocation: dict[str, Any] = {"executionSuccessful": successful}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "logdoctor", "version": __version__, "semanticVersion": __version__,
                            "rules": rules.descriptors}},
        "invocations": [invocation], "columnKind": "unicodeCodePoints", "results": results,
    }
    if properties:
        run["properties"] = properties
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def _report_results(report: Report, rules: _Rules) -> list[dict[str, Any]]:
    results = []
    for d in report.diagnoses:
        if _worth_reporting(report, d):
            results.append(_result(report, d, rules.add(d.rule.id, lambda d=d: _rule_descriptor(d.rule, d.remedies))))
    if report.primary is None and report.verdict == "incomplete":
        source = None if report.source == STDIN_LABEL or report.nodes else report.source
        results.insert(0, _incomplete_result(source, report.verdict, rules.add("INCOMPLETE", lambda: INCOMPLETE_RULE)))
    # the root cause first: a viewer that shows one result shows the one that matters
    results.sort(key=lambda r: not r["properties"].get("primary", r["ruleId"] == "INCOMPLETE"))
    return results


def sarif_log(report: Report) -> dict[str, Any]:
    """One SARIF run for one report (one log, or the logs of one launch)."""
    rules = _Rules()
    results = _report_results(report, rules)
    return _log(rules, results, True, properties={"verdict": report.verdict, "source": report.source})


def batch_sarif_log(rows: list[dict[str, Any]], rules_by_id: dict[str, Any]) -> dict[str, Any]:
    """One SARIF run over `batch` rows (`many.batch.row_dict`): a result per failed, incomplete or warned
    launch at its evidence line; an unreadable log is a tool execution notification and makes the
    invocation unsuccessful (batch exits 2 on it). `rules_by_id`: the loaded rule set, for the descriptors."""
    rules = _Rules()
    results: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for row in rows:
        path = str(row["path"])
        if row.get("error"):
            notes.append({"level": "error", "message": {"text": f"{path}: {row['error']}"},
                          "locations": [{"physicalLocation": {"artifactLocation": {"uri": artifact_uri(path)}}}]})
            continue
        verdict = row.get("verdict") or "incomplete"
        rule_id = row.get("rule")
        if rule_id is None:
            if verdict == "incomplete":
                results.append(_incomplete_result(path, verdict, rules.add("INCOMPLETE", lambda: INCOMPLETE_RULE)))
            continue
        rule = rules_by_id.get(rule_id)
        index = rules.add(rule_id, lambda rule=rule, row=row: _row_rule(rule, row))
        level = "error" if verdict == "failed" else LEVEL_OF_SEVERITY.get(getattr(rule, "severity", ""), "warning")
        res: dict[str, Any] = {"ruleId": rule_id, "ruleIndex": index, "level": level,
                               "message": {"text": f"{verdict.upper()}: {row.get('title') or rule_id}"},
                               "properties": {"verdict": verdict, "category": row.get("category"),
                                              "confidence": row.get("confidence")}}
        loc: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(path)}}
        if row.get("evidence_line"):
            loc["region"] = _region(int(row["evidence_line"]), None)
        res["locations"] = [{"physicalLocation": loc}]
        results.append(res)
    return _log(rules, results, not notes, notes)


def _row_rule(rule: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The rule file's descriptor, or one from the row when no rule file has the id (the broad net's
    inferred diagnoses)."""
    if rule is None:
        return {"id": row["rule"], "shortDescription": {"text": row.get("title") or row["rule"]},
                "properties": {"category": row.get("category")}}
    return _rule_descriptor(rule)


def sarif_text(log: dict[str, Any]) -> str:
    import json
    return json.dumps(log, ensure_ascii=False, indent=2)


__all__ = ["SARIF_VERSION", "artifact_uri", "batch_sarif_log", "sarif_log", "sarif_text"]
