"""The broad net's data (rules/net/): valid, every term's example matches it, and every fixture under
fixtures/net/ gets the verdict, category and evidence its expected.tsv names, with no template hole."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from logdoctor.diagnosis.ranking import diagnose_source
from logdoctor.diagnosis.holes import holes
from logdoctor.diagnosis.net import example_problems
from logdoctor.diagnosis.net_data import CATEGORIES, builtin_net_dir, check_net_dir
from logdoctor.diagnosis.rules import load_ruleset

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


def test_net_readme_is_up_to_date() -> None:
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "net_readme.py"), "--check"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_user_net_dir_extends_and_overrides(tmp_path: Path) -> None:
    from logdoctor.diagnosis.net_data import load_net
    vocab = tmp_path / "net" / "vocabulary"
    vocab.mkdir(parents=True)
    (vocab / "mine.yaml").write_text(
        "library: mylib\nread: [\"my own launcher\"]\nterms:\n"
        "  - id: mylib-quota\n    text: \"GPU quota exceeded for project\"\n    category: configuration\n"
        "    weight: 90\n    severity: error\n    means: \"the cluster refused the GPUs\"\n"
        "    source: \"launcher.py (all)\"\n    example: \"ERROR: GPU quota exceeded for project alpha\"\n",
        encoding="utf-8")
    log = tmp_path / "quota.log"
    log.write_text("[2025-05-01 10:00:00] Launching...\nERROR: GPU quota exceeded for project alpha\n", encoding="utf-8")
    rules = load_ruleset([str(tmp_path)])
    assert any(t.id == "mylib-quota" for t in load_net((str(tmp_path),)).terms)
    report = diagnose_source(str(log), rules)
    assert report.verdict == "failed" and report.primary is not None
    assert report.primary.category == "configuration" and report.primary.inferred["term"] == "mylib-quota"
    assert "the cluster refused the GPUs" in report.primary.explanation


def test_a_bad_user_net_file_is_one_clear_error(tmp_path: Path) -> None:
    from logdoctor.diagnosis.rule_files import RuleError
    vocab = tmp_path / "net" / "vocabulary"
    vocab.mkdir(parents=True)
    (vocab / "bad.yaml").write_text("library: bad\nread: [x]\nterms:\n  - id: bad-one\n    regex: \"a(b\"\n"
                                    "    category: unknown\n    weight: 5\n    severity: error\n    means: m\n"
                                    "    source: s\n    example: abc\n", encoding="utf-8")
    with pytest.raises(RuleError) as e:
        load_ruleset([str(tmp_path)])
    assert "bad.yaml" in str(e.value) and "regex" in str(e.value)
