#!/usr/bin/env python3
"""Scan logs for template holes in what `logdoctor explain` says about them.

Usage: tools/hole_scan.py LOG_OR_DIR... [--rules DIR]

Every diagnosis (primary and context) of every log is checked with logdoctor.diagnosis.holes: a title, explanation
or remedy with `?`, `None`, "a rank", empty quotes or dangling punctuation is printed as
`file: RULE part: holes: text`. Exit 1 when any is found, 0 otherwise.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from logdoctor.diagnosis.ranking import diagnose_source
from logdoctor.diagnosis.holes import holes
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.read.sniff import InputError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--rules", action="append", default=[])
    a = ap.parse_args()
    rules = load_ruleset(a.rules)
    logs: list[Path] = []
    for p in map(Path, a.paths):
        logs.extend(sorted(p.rglob("*.log")) if p.is_dir() else [p])
    found = 0
    for log in logs:
        try:
            report = diagnose_source(str(log), rules)
        except InputError as e:  # a log the tool refuses is not a hole: say so and go on
            print(f"{log}: not diagnosed: {e}", file=sys.stderr)
            continue
        for d in report.diagnoses:
            parts = {"title": d.rule.title, "explanation": d.explanation,
                     **{f"remedy {i + 1}": r for i, r in enumerate(d.remedies)}}
            for part, text in parts.items():
                h = holes(text)
                if h:
                    found += 1
                    print(f"{log}: {d.rule.id} {part}: {', '.join(h)}: {text[:300]}")
    print(f"{len(logs)} log(s), {found} hole(s)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
