"""Run a rule's `examples`: each `fires` log must make it fire, each `quiet` log must not.

The examples of a user rule are paths its author chose: only regular files are read (a FIFO or a
device would block or never end), and a user rule runs under the same time budget as in `explain`.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from logdoctor.diagnosis.engine import EventIndex, UserRuleClock, evaluate_rule, rule_run_dict
from logdoctor.diagnosis.rules import Rule
from logdoctor.parse.parse import parse_source
from logdoctor.read.ingest import InputError
from logdoctor.records import dataclass
from logdoctor.run.fold import Folding


@dataclass
class ExampleOutcome:
    which: str
    path: Path
    ok: bool
    message: str = ""


def fires_on(rule: Rule, path: Path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise InputError(path, "not a regular file")
    # every line parsed (no bulk path for batch lines), as `rules test` always read its examples
    folding = Folding(parse_source(path), source=str(path))
    index = EventIndex(folding)
    return evaluate_rule(rule, index, folding.run, rule_run_dict(folding.run), UserRuleClock()) is not None


def run_examples(rule: Rule) -> list[ExampleOutcome]:
    out: list[ExampleOutcome] = []
    for which, expect in (("fires", True), ("quiet", False)):
        for path in rule.example_paths(which):
            try:
                got = fires_on(rule, path)
            except InputError as e:
                out.append(ExampleOutcome(which, path, False, str(e)))
                continue
            msg = "" if got == expect else ("did not fire" if expect else "fired")
            out.append(ExampleOutcome(which, path, got == expect, msg))
    return out
