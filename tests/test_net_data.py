"""The broad net's data (rules/net/): valid, every term's example matches it, and every fixture under
fixtures/net/ gets the verdict, category and evidence its expected.tsv names, with no template hole."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from logdoctor.diagnose import diagnose_source
from logdoctor.holes import holes
from logdoctor.net import example_problems
from logdoctor.net_data import CATEGORIES, builtin_net_dir, check_net_dir
from logdoctor.rules import load_ruleset

ROOT = Path(__file__).resolve().parent.parent
NET_FIXTURES = ROOT / "fixtures" / "net"
RULES = load_ruleset()


def _cases() -> list[tuple[Path, dict[str, str]]]:
    out = []
    for tsv in sorted(NET_FIXTURES.glob("*/expected.tsv")):
        with tsv.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                out.append((tsv.parent / row["file"], row))
    return out


CASES = _cases()


def test_builtin_net_is_valid_and_examples_match_their_terms() -> None:
    net, problems = check_net_dir(builtin_net_dir())
    assert [str(p) for p in problems] == []
    assert example_problems(net) == []
    assert set(net.headlines) == set(CATEGORIES) and all(net.remedies[c] for c in CATEGORIES)


def test_net_covers_every_category_and_library() -> None:
    net, _ = check_net_dir(builtin_net_dir())
    cats = {t.category for t in net.terms} | {s.category for s in net.subsystems}
    assert cats == set(CATEGORIES)
    libraries = {t.library for t in net.terms}
    for lib in ("cuda", "hip", "nccl", "torch_distributed", "triton", "flashinfer", "torch_compile",
                "transformers", "vllm", "sglang", "system", "npu", "kv_transfer", "http"):
        assert lib in libraries, lib


def test_every_fixture_directory_has_expectations() -> None:
    logs = {p for p in NET_FIXTURES.rglob("*.log")}
    assert logs and logs == {p for p, _ in CASES}


@pytest.mark.parametrize("path,row", CASES, ids=[f"{p.parent.name}/{p.name}" for p, _ in CASES])
def test_net_fixture(path: Path, row: dict[str, str]) -> None:
    report = diagnose_source(str(path), RULES)
    assert report.verdict == row["verdict"], f"{path.name}: {report.verdict}"
    assert report.primary is not None
    assert report.primary.category == row["category"], f"{path.name}: {report.primary.rule.id} {report.primary.rule.title}"
    assert any(row["evidence"] in e.text for e in report.primary.evidence), [e.text for e in report.primary.evidence]
    for d in report.diagnoses:
        for text in [d.rule.title, d.explanation, *d.remedies]:
            assert not holes(text), f"{d.rule.id} on {path.name}: {holes(text)}: {text}"
