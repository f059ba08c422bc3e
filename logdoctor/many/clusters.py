"""Group the failures no rule explains, and turn one into a rule skeleton.

A signature is the decisive line with the noise masked (numbers, hex, paths, addresses, ranks, quoted
identifiers), so the same failure on other hosts and runs lands in one cluster. Clusters are built
greedily with rapidfuzz (token-set similarity against each cluster's first signature).
"""
from __future__ import annotations

import re
import shlex
from typing import Any

from rapidfuzz import fuzz, process

from logdoctor import regexes
from logdoctor.paths import display_text
from logdoctor.records import dataclass, field

_MASKS = [
    (regexes.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (regexes.compile(r"\b[0-9a-f]{12,}\b"), "<hex>"),
    (regexes.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<addr>"),
    (regexes.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (regexes.compile(r"\b(?:TP|DP|PP|EP|rank|Rank|GPU|gpu|cuda:)\s?\d+\b"), "<rank>"),
    (regexes.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"), "<n>"),
]
SIMILARITY = 85.0


def signature(text: str) -> str:
    s = text.strip()
    for rx, repl in _MASKS:
        s = rx.sub(repl, s)
    return re.sub(r"\s+", " ", s)[:300]


@dataclass
class Cluster:
    signature: str
    count: int = 0
    files: list[str] = field(default_factory=list)
    example: str = ""
    example_file: str = ""
    example_line: int | None = None
    kind: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"signature": self.signature, "count": self.count, "files": self.files, "example": self.example,
                "example_file": self.example_file, "example_line": self.example_line, "kind": self.kind}


def cluster(items: list[dict[str, Any]], threshold: float = SIMILARITY) -> list[Cluster]:
    """items: {path, line, text, kind}; returns clusters, largest first."""
    clusters: list[Cluster] = []
    keys: list[str] = []
    for it in sorted(items, key=lambda x: (x["path"], x.get("line") or 0)):
        sig = signature(it["text"])
        hit = process.extractOne(sig, keys, scorer=fuzz.token_set_ratio, score_cutoff=threshold) if keys else None
        if hit is None:
            c = Cluster(sig, example=it["text"][:300], example_file=it["path"], example_line=it.get("line"),
                        kind=it.get("kind"))
            clusters.append(c)
            keys.append(sig)
        else:
            c = clusters[hit[2]]
        c.count += 1
        if it["path"] not in c.files:
            c.files.append(it["path"])
    return sorted(clusters, key=lambda c: (-c.count, c.signature))


def clusters_text(clusters: list[Cluster]) -> str:
    """Paths arrive in their display form; log text is escaped here (a terminal must not act on it)."""
    if not clusters:
        return "no failures to cluster"
    out = []
    for i, c in enumerate(clusters, 1):
        out.append(f"#{i}  {c.count} failure(s) in {len(c.files)} file(s)   [{c.kind}]")
        out.append(f"    signature: {display_text(c.signature)}")
        out.append(f"    example:   {c.example_file}:{c.example_line}: {display_text(c.example)}")
        for f in c.files[:5]:
            out.append(f"      {f}")
        if len(c.files) > 5:
            out.append(f"      … and {len(c.files) - 5} more")
        out.append(f"    next: logdoctor rules new --from {shlex.quote(f'{c.example_file}:{c.example_line}')}")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# rule skeletons


def _regex_for(text: str) -> str:
    """A regex that matches this message with its variable parts generalised."""
    s = text.strip()[:200]
    parts = re.split(r"(0x[0-9a-fA-F]+|-?\d+(?:\.\d+)?)", s)
    out = []
    for i, p in enumerate(parts):
        if i % 2:
            out.append(r"0x[0-9a-fA-F]+" if p.startswith("0x") else r"-?\d+(?:\.\d+)?")
        else:
            out.append(re.escape(p).replace("\\ ", " "))
    return "".join(out)


def _yaml_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def rule_skeleton(rule_id: str, name: str, kind: str, field_name: str, text: str, example: str) -> str:
    title = signature(text)[:100] or "New failure"
    return f"""\
id: {rule_id}
name: {name}
title: {_yaml_str(title if len(title) >= 5 else 'New failure: ' + title)}
category: unknown          # pick: memory_pressure ipc_bar graph_incompatibility communication unsupported environment configuration unknown (and change the id prefix to match)
severity: error
stage: any
priority: 60
match:
  seen:
    event: {kind}
    where:
      {field_name}: {{regex: {_yaml_str(_regex_for(text))}}}
condition: seen
explanation: >
  {text[:200].replace(chr(10), ' ').replace('{', '{{').replace('}', '}}')}
  (describe the cause here; {{ev.FIELD}} inserts a field of the matched event)
remedy:
  - Describe the fix (which flag, which direction, which value).
examples:
  fires: [{_yaml_str(example)}]
  quiet: ['fixtures/logs/healthy.log']   # a log where this must NOT fire
"""
