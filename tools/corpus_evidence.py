"""For a labelled corpus (cases/<id>.log + labels.tsv), check that each evidence line lands inside a
recognised event (not `unparsed`). Usage: python tools/corpus_evidence.py ../shared/corpus/dev [-v]"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from logdoctor.parse.parse import parse_source
from logdoctor.read.ingest import read_lines


def evidence_lines(path: Path, evidence: str) -> list[int]:
    """Original line numbers whose text contains the evidence (or its longest clean fragment)."""
    needle = evidence.strip().strip('"').replace('""', '"')
    for prefix in ("> ", ">"):
        if needle.startswith(prefix):
            needle = needle[len(prefix):]
    candidates = [needle, needle[:120], needle[-80:]]
    lines = list(read_lines(path))
    for c in candidates:
        c = c.strip()
        if len(c) < 8:
            continue
        hits = [ln.number for ln in lines if c in ln.text]
        if hits:
            return hits
    return []


def main() -> int:
    root = Path(sys.argv[1])
    verbose = "-v" in sys.argv
    rows = list(csv.DictReader(open(root / "labels.tsv", newline=""), delimiter="\t"))
    ok = 0
    for r in rows:
        path = root / "cases" / f"{r['id']}.log"
        events = list(parse_source(path))
        hits = evidence_lines(path, r["evidence"])
        covering = []
        for n in hits:
            covering += [e.kind for e in events if e.line <= n <= (e.end_line or e.line)]
        good = any(k != "unparsed" for k in covering)
        ok += good
        if verbose or not good:
            print(f"{r['id']}: {'ok ' if good else 'MISS'} lines={hits[:3]} kinds={sorted(set(covering))} "
                  f"evidence={r['evidence'][:90]!r}")
    print(f"evidence inside a recognised event: {ok}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
