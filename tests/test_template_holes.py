"""No rule's title, explanation or remedy shows a template hole, on any fixture that fires it, and not
when the optional fields of its events, the rank, or the server-args line are missing from the log."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from logdoctor.diagnosis.ranking import diagnose_source
from logdoctor.diagnosis.engine import EventIndex, evaluate_rule, rule_run_dict
from logdoctor.diagnosis.holes import holes
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.diagnosis.templates import render
from logdoctor.events import KINDS
from logdoctor.run.fold import fold_source
from logdoctor.run.memory import analyse, template_values

ROOT = Path(__file__).resolve().parent.parent
RULES = load_ruleset()
OPTIONAL_FIELDS = sorted({f.strip().split(":")[0].rstrip("?").strip() for info in KINDS.values()
                          for f in info.fields.split(",") if f.strip().split(":")[0].strip().endswith("?")})
FIRES = [(r, ROOT / p) for r in sorted(RULES, key=lambda r: r.id) for p in r.examples.get("fires", [])]


def _texts(title: str, explanation: str, remedies: list[str]) -> dict[str, str]:
    return {"title": title, "explanation": explanation, **{f"remedy {i + 1}": r for i, r in enumerate(remedies)}}


def _variants(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The values as rendered, and as they would be on logs without the optional parts."""
    out: dict[str, dict[str, Any]] = {}
    for name in OPTIONAL_FIELDS:
        v = copy.deepcopy(values)
        hit = False
        for key, fields in list(v.items()):
            if isinstance(fields, dict) and key not in ("run", "mem") and name in fields:
                del fields[name]
                hit = True
        if hit:
            out[f"without {name}"] = v
    bare = copy.deepcopy(values)
    for key, fields in bare.items():
        if isinstance(fields, dict) and key not in ("run", "mem"):
            for name in OPTIONAL_FIELDS:
                fields.pop(name, None)
    out["without every optional field"] = bare
    out["without a rank"] = {**copy.deepcopy(values), "rank": None}
    run = copy.deepcopy(values.get("run") or {})
    run.update({"server_args": {}, "parallel": {"tp": None, "dp": None, "pp": None, "ep": None}, "version": None,
                "era": None})
    out["without server args"] = {**copy.deepcopy(values), "run": run}
    out["without memory figures"] = {**copy.deepcopy(values), "mem": {}}
    return out


def _diagnosis(rule: Any, path: Path) -> Any:
    """The rule's diagnosis on the log, rendered as explain renders it (catch-alls included, which the
    report leaves out when a specific rule fires)."""
    report = diagnose_source(str(path), RULES)
    mine = [d for d in report.diagnoses if d.rule.id == rule.id]
    if mine:
        return mine[0]
    folding = fold_source(str(path))
    index = EventIndex(folding)
    d = evaluate_rule(rule, index, folding.run, rule_run_dict(folding.run))
    assert d is not None, f"{rule.id} does not fire on {path.name}"
    d.values["mem"] = template_values(analyse(folding.run))
    d.explanation = render(rule.explanation, d.values)
    d.remedies = [t for r in rule.remedy if (t := render(r, d.values))]
    return d


@pytest.mark.parametrize("rule,path", FIRES, ids=[f"{r.id}-{p.name}" for r, p in FIRES])
def test_rule_renders_without_holes(rule: Any, path: Path) -> None:
    d = _diagnosis(rule, path)
    for part, text in _texts(d.rule.title, d.explanation, d.remedies).items():
        assert not holes(text), f"{rule.id} {part} on {path.name}: {holes(text)}: {text}"
    for variant, values in _variants(d.values).items():
        explanation = render(rule.explanation, values)
        remedies = [t for r in rule.remedy if (t := render(r, values))]
        for part, text in _texts(rule.title, explanation, remedies).items():
            assert not holes(text), f"{rule.id} {part} on {path.name} {variant}: {holes(text)}: {text}"


def test_every_rule_with_fires_examples_is_covered() -> None:
    assert {r.id for r, _ in FIRES} == {r.id for r in RULES if r.examples.get("fires")}
    assert len({r.id for r, _ in FIRES}) >= 90


@pytest.mark.parametrize("text,hole", [
    ("on rank a rank", "'a rank'"), ("SGLang raised RuntimeError): .", "dangling punctuation"),
    ("by default port+?", "a lone '?'"), ("SeqNum=? (?): it ran for ? ms", "a lone '?'"),
    ('carries the real error: ""', "empty quotes"), ("The KV cache pool (? tokens)", "a lone '?'"),
    ("host memory, . With no", "dangling punctuation"), ("the pool grows .", "dangling punctuation"),
    ("The KV cache of .", "dangling punctuation"), ("limits () apply", "empty brackets"),
    ("value None here", "None/null/nan"),
])
def test_hole_detector_sees_the_holes_seen_on_real_logs(text: str, hole: str) -> None:
    assert hole in holes(text)


@pytest.mark.parametrize("text", ["Is P2P available? Check with nvidia-smi.", "0.9 of 80 GiB (TP=8).",
                                  "e.g. set --tp 2.", "a rank that fails first", "the error reads \"signum=None\".",
                                  "run `python -c \"print(f())\"`.", "the one to look at.",
                                  "undefined symbol in libfoo"])
def test_hole_detector_passes_whole_sentences(text: str) -> None:
    assert holes(text) == []


def test_render_leaves_out_a_sentence_whose_value_is_missing() -> None:
    t = "The pool has {ev.tokens} tokens. It failed on {rank}. [[Free: {ev.free_gib} GiB.]] Done."
    assert render(t, {"ev": {"tokens": 5}, "rank": "TP0"}) == "The pool has 5 tokens. It failed on TP0. Done."
    assert render(t, {"ev": {"tokens": ""}, "rank": None}) == "Done."
    assert render(t, {"ev": {"tokens": "None", "free_gib": 1.5}}) == "Free: 1.5 GiB. Done."
