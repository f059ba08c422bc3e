"""`batch --format junit`: one JUnit XML test case per log, for CI test-report views (GitLab, Jenkins,
GitHub test-reporter actions).

A failed launch is a `<failure>` (message: the rule's title, type: its category); a log that could not be
read is an `<error>`; a row at or past `--fail-on` for another reason (incomplete, a warning) is a
`<failure>` too, of type `incomplete` / `warning`; every other row passes, its verdict in `<system-out>`.
The body cites the evidence line as given (`path:line: text`), read back from the log.

Built with xml.etree.ElementTree, which escapes markup; characters XML 1.0 forbids (a log line may hold
\\x00-\\x1f, a path lone surrogates) are stripped first, since no escape can carry them.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable

from logdoctor import regexes
from logdoctor.many.batch import BatchRow
from logdoctor.paths import display_path

# everything outside XML 1.0's Char production: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-]
_NOT_XML = regexes.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
EVIDENCE_MAX_CHARS = 2000  # an evidence line is one log line; a line of megabytes is cut, not copied whole


def xml_text(s: object) -> str:
    """`s` as text XML 1.0 can hold (markup is escaped by ElementTree when written)."""
    return _NOT_XML.sub("", str(s))


def evidence_text(path: str, line: int | None) -> str | None:
    """Line `line` of the log as given (decompressed), or None when it cannot be read back."""
    if line is None or line < 1:
        return None
    import zlib

    from logdoctor.read.sniff import InputError, open_source
    try:
        with open_source(path) as f:
            n, first = 1, b""
            while True:
                chunk = f.readline(1 << 16)  # bounded: a line of gigabytes is read in pieces, kept in none
                if not chunk:
                    break
                if n == line and not first:
                    first = chunk[:EVIDENCE_MAX_CHARS * 4]
                if chunk.endswith(b"\n"):
                    if n == line:
                        break
                    n += 1
            if first:
                return first.decode("utf-8", "replace").rstrip("\r\n")[:EVIDENCE_MAX_CHARS]
    except (InputError, OSError, EOFError, ValueError, zlib.error):
        # the row's verdict stands without its line: a vanished or changed file is not an error here
        return None
    return None


def _case(suite: ET.Element, row: BatchRow, fails: Callable[[BatchRow], bool],
          read_line: Callable[[str, int | None], str | None]) -> str:
    """Add the test case of one row; returns what it counted as: pass, failure or error."""
    name = xml_text(display_path(row.path))
    case = ET.SubElement(suite, "testcase", {"classname": "logdoctor.batch", "name": name, "file": name})
    if row.error:
        err = ET.SubElement(case, "error", {"message": xml_text(row.error), "type": "unreadable"})
        err.text = xml_text(f"{name}: {row.error}")
        return "error"
    verdict = row.verdict or "incomplete"
    body = [f"verdict: {verdict}", f"last stage reached: {row.last_stage or 'none'}"]
    if row.rule:
        body.insert(1, f"rule: {row.rule} {row.title or ''} ({row.category}, confidence {row.confidence})")
    if row.evidence_line is not None:
        text = read_line(row.path, row.evidence_line)
        body.append(f"{name}:{row.evidence_line}: {text if text is not None else '(line not readable)'}")
    if row.warnings:
        body.append(f"warning-severity diagnoses: {row.warnings}")
    if verdict == "failed" or fails(row):
        kind = "failed" if verdict == "failed" else verdict if verdict == "incomplete" else "warning"
        message = row.title or ("no failure and no ready line: a fragment, or a launch that stopped"
                                if verdict == "incomplete" else f"{row.warnings} warning(s)")
        failure = ET.SubElement(case, "failure", {"message": xml_text(f"{verdict.upper()}: {message}"),
                                                  "type": xml_text(row.category if kind == "failed" and row.category
                                                                   else kind)})
        failure.text = xml_text("\n".join(body))
        return "failure"
    ET.SubElement(case, "system-out").text = xml_text("\n".join(body))
    return "pass"


def junit_xml(rows: Iterable[BatchRow], fails: Callable[[BatchRow], bool],
              read_line: Callable[[str, int | None], str | None] = evidence_text) -> str:
    """The JUnit XML document for `batch` rows. `fails(row)`: whether a row is at or past `--fail-on`
    (a failed launch always is)."""
    root = ET.Element("testsuites", {"name": "logdoctor"})
    suite = ET.SubElement(root, "testsuite", {"name": "logdoctor batch"})
    counts = {"pass": 0, "failure": 0, "error": 0}
    for row in rows:
        counts[_case(suite, row, fails, read_line)] += 1
    total = str(sum(counts.values()))
    for el in (root, suite):
        el.set("tests", total)
        el.set("failures", str(counts["failure"]))
        el.set("errors", str(counts["error"]))
        el.set("skipped", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = ["evidence_text", "junit_xml", "xml_text"]
