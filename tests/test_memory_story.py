"""`explain` tells the budget story (issue 13, item 4): the founding launch (TP8, --mem-fraction-static 0.55 in the
server_args line, a KV cache only m ≈ 0.88 can give) reads right from `explain` alone, a thin reserve after capture
and ranks that start unequal are named, and none of it ever fails a log or leads over a failure."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor.diagnosis.ranking import diagnose_source
from logdoctor.diagnosis.engine import rule_run_dict
from logdoctor.diagnosis.net_data import load_net
from logdoctor.diagnosis.ranking import diagnose
from logdoctor.diagnosis.rules import load_rule, load_ruleset
from logdoctor.diagnosis.ruletest import fires_on, run_examples
from logdoctor.read.sniff import InputError
from logdoctor.run.fold import fold_source, summarize_source

ROOT = Path(__file__).resolve().parent.parent
F = ROOT / "fixtures"
FOUNDING = F / "memory" / "story" / "founding-mfs-0.55-tp8.log"
THIN = F / "rules" / "MEM102" / "fires-thin-reserve-tp8.log"
UNBALANCED = F / "rules" / "MEM103" / "fires-one-rank-6gib-short-tp8.log"
BUDGET_RULES = ("MEM101", "MEM102", "MEM103")
RULES = load_ruleset()

# every fixture that `explain` called healthy before the budget rules existed (recorded before the change)
HEALTHY_BEFORE = [
    "fuzz/explain-eb7bc87f6c31bebd.bin", "fuzz/explain-slow-22281cf344d394eb.bin", "fuzz/parse-407f14e2dd4c56ea.bin",
    "fuzz/parse-714746f73929b03d.bin", "logs/v0.1-router-tp1.log", "logs/v0.2-tp2.log", "logs/v0.3-tp2.log",
    "logs/v0.4-tp8.log", "logs/v0.4.7-mla-tp8-healthy-serving.log", "logs/v0.4.7-serving-request-error.log",
    "logs/v0.5-custom-ar-ipc-failed-tp2.log", "logs/v0.5early-tp2.log", "logs/v0.5new-dp2-tp4-ep4.log",
    "memory/story-mfs-0.55-tp8.log", "rules/CFG001/quiet-healthy.log", "rules/CFG002/quiet-healthy.log",
    "rules/CFG003/quiet-healthy.log", "rules/CFG004/quiet-healthy.log", "rules/CFG005/quiet-healthy-tp2.log",
    "rules/CFG006/quiet-healthy.log", "rules/CFG007/quiet-allowed-override.log", "rules/CFG008/quiet-healthy.log",
    "rules/CFG009/quiet-healthy.log", "rules/CFG010/quiet-valid-quant.log", "rules/CFG011/quiet-healthy-tp8.log",
    "rules/COM008/quiet-ofi-efa-ok.log", "rules/COM011/quiet-soft-watchdog.log", "rules/ENV001/quiet-healthy.log",
    "rules/ENV002/quiet-healthy.log", "rules/ENV003/quiet-ignored-model-imports.log",
    "rules/ENV004/quiet-ignored-model-imports.log", "rules/ENV005/quiet-healthy.log",
    "rules/ENV006/quiet-ignored-import-healthy.log", "rules/GRF003/quiet-dynamo-warning-healthy.log",
    "rules/GRF006/fires-piecewise-auto-disabled.log", "rules/IPC003/fires-pcie-tp4-healthy.log",
    "rules/IPC004/quiet-deepep-healthy.log", "rules/IPC006/quiet-healthy-dmesg-nvrm.log",
    "rules/MEM012/quiet-unbalanced-warning-healthy.log", "rules/MEM014/fires-retraction-healthy.log",
    "rules/UNK002/quiet-healthy.log", "rules/UNK003/quiet-healthy.log", "rules/UNK004/quiet-healthy.log",
    "rules/UNK005/quiet-healthy.log", "rules/UNS001/quiet-healthy.log", "rules/UNS002/quiet-healthy-fp8.log",
    "rules/UNS004/quiet-healthy.log", "runs/llama8b-mfs0.80-0.log", "runs/llama8b-mfs0.85-1.log",
    "runs/llama8b-mfs0.88-2.log", "runs/llama8b-mfs0.88-3.log", "runs/llama8b-mfs0.90-4.log",
]


def explain(path: Path, fmt: str = "json") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "--format", fmt, str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def by_rule(d: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {x["rule"]: x for x in d["diagnoses"]}


# ------------------------------------------------------------------------------------------------
# the founding scenario


def test_founding_launch_is_healthy_and_says_the_fraction_was_not_in_force() -> None:
    p = explain(FOUNDING)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "healthy" and d["primary"] is None
    mem101 = by_rule(d)["MEM101"]
    assert mem101["severity"] == "warning" and mem101["fatal"] is False
    text = mem101["explanation"]
    assert "mem_fraction_static=0.55" in text and "m ≈ 0.88" in text and "≈ 0.880" in text
    assert "P = 94.02 GiB" in text and "A = 21.71 GiB" in text and "10.42 GiB KV cache of 159,215 tokens" in text
    assert "-20.60 GiB" in text  # what 0.55 would have left for the KV cache: A − P·(1 − m)
    assert "reached the server" in mem101["remedies"][0] and "0.88 was in force, not 0.55" in mem101["remedies"][0]
    assert mem101["evidence"][0]["text"].startswith("server_args=ServerArgs(")
    assert any("KV Cache is allocated. #tokens: 159215, KV size: 10.42 GB" == e["text"] for e in mem101["evidence"])
    # 2.02 GiB free after capture is more than the 1 GiB floor, and all ranks started alike
    assert not {"MEM102", "MEM103"} & set(by_rule(d))
    assert mem101["memory"]["budget_line"] == ("weights 72.3 | KV 10.4 (159K tok) | graphs 8.0 | free 2.0 GiB per rank, "
                                               "m configured 0.55, in force 0.88")


def test_founding_text_leads_with_the_budget_line_and_explains_the_warning() -> None:
    p = explain(FOUNDING, "text")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("HEALTHY") and lines[1].endswith("founding-mfs-0.55-tp8.log")
    assert lines[2] == ("budget   weights 72.3 | KV 10.4 (159K tok) | graphs 8.0 | free 2.0 GiB per rank, "
                        "m configured 0.55, in force 0.88")
    body = p.stdout.split("Worth knowing", 1)[1]
    assert "MEM101" in body and "mem_fraction_static=0.55" in body and "m ≈ 0.88" in body
    assert "→ Check that --mem-fraction-static reached the server" in body


def test_founding_markdown_carries_the_budget_and_the_warning() -> None:
    p = explain(FOUNDING, "markdown")
    assert p.returncode == 0, p.stderr
    assert "Memory per rank: `weights 72.3 | KV 10.4 (159K tok) | graphs 8.0 | free 2.0 GiB per rank, m configured 0.55, " \
           "in force 0.88`" in p.stdout
    assert "(`MEM101`, warning" in p.stdout and "m ≈ 0.88" in p.stdout


def test_a_fraction_that_could_start_is_still_named_when_the_numbers_say_another_was_in_force() -> None:
    d = json.loads(explain(F / "rules" / "MEM101" / "fires-mfs-0.80-in-force-0.88.log").stdout)
    assert d["verdict"] == "healthy"
    text = by_rule(d)["MEM101"]["explanation"]
    assert "mem_fraction_static=0.8 " in text and "that budget is 2.91 GiB" in text and "≈ 0.880" in text


def test_a_pool_capped_by_max_total_tokens_is_not_a_fraction_out_of_force() -> None:
    d = json.loads(explain(F / "rules" / "MEM101" / "quiet-kv-capped-by-max-total-tokens.log").stdout)
    assert d["verdict"] == "healthy" and "MEM101" not in by_rule(d)


# ------------------------------------------------------------------------------------------------
# a thin reserve, unbalanced ranks


def test_thin_reserve_after_capture_is_a_warning_on_a_healthy_launch() -> None:
    p = explain(THIN)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "healthy" and d["primary"] is None
    mem102 = by_rule(d)["MEM102"]
    assert mem102["severity"] == "warning" and mem102["fatal"] is False
    assert "0.36 GiB was left free for activations" in mem102["explanation"]
    assert "a general margin of 1 GiB for prefill and decode activations" in mem102["explanation"]
    assert "not measured" in mem102["explanation"]  # an allowance, said to be one
    assert "(from 0.92)" in mem102["remedies"][0] and "(currently 256)" in mem102["remedies"][1]
    evidence = [e["text"] for e in mem102["evidence"]]
    assert any(t.startswith("max_total_num_tokens=216795") and t.endswith("available_gpu_mem=0.36 GB") for t in evidence)
    assert any(t.endswith("mem usage=5.87 GB. avail mem=0.36 GB.") for t in evidence)
    assert "MEM101" not in by_rule(d)  # 0.92 configured and in force
    text = explain(THIN, "text").stdout.splitlines()
    assert text[2].startswith("budget   weights 72.3 | KV 14.2 (217K tok) | graphs 5.9 | free 0.4 GiB per rank")


def test_ranks_that_start_unequal_without_sglangs_warning_are_named() -> None:
    d = json.loads(explain(UNBALANCED).stdout)
    assert d["verdict"] == "healthy"
    mem103 = by_rule(d)["MEM103"]
    assert mem103["fatal"] is False and "TP5 had 88.02 GiB" in mem103["explanation"]
    assert "6.02 GiB less than the fullest rank (94.04 GiB)" in mem103["explanation"]
    assert mem103["evidence"] and all(e["text"].startswith("Load weight begin. avail mem=") for e in mem103["evidence"])


def test_sglangs_own_unbalanced_warning_is_left_to_mem013() -> None:
    d = json.loads(explain(F / "rules" / "MEM012" / "quiet-unbalanced-warning-healthy.log").stdout)
    assert "MEM013" in by_rule(d) and "MEM103" not in by_rule(d)


# ------------------------------------------------------------------------------------------------
# context, never the cause


@pytest.mark.parametrize("rel, primary, context", [
    ("memory/one-rank-short-tp8.log", "MEM001", "MEM103"),       # TP3 short by 14 GiB, the KV cache cannot fit
    ("memory/runtime-oom-tp2.log", "MEM005", "MEM101"),
])
def test_on_a_failed_log_the_budget_warnings_are_context(rel: str, primary: str, context: str) -> None:
    p = explain(F / rel)
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert d["verdict"] == "failed" and d["primary"]["rule"] == primary
    rules = [x["rule"] for x in d["diagnoses"]]
    assert context in rules and by_rule(d)[context]["fatal"] is False
    fatal = [i for i, x in enumerate(d["diagnoses"]) if x["fatal"]]
    assert rules.index(context) > max(fatal)  # listed after every failure


def test_a_launch_that_stopped_leads_with_the_stall_and_keeps_the_budget_as_context(tmp_path: Path) -> None:
    cut = _cut_after_capture(tmp_path)
    d = json.loads(explain(cut).stdout)
    assert d["verdict"] == "incomplete" and d["primary"]["rule"] != "MEM102"
    assert "MEM102" in by_rule(d)


def test_when_nothing_else_names_why_a_launch_stopped_the_budget_warning_leads(tmp_path: Path) -> None:
    """No stall rule fires and the net has no word for the stage: the thin reserve is the only lead there is."""
    cut = _cut_after_capture(tmp_path)
    rules = [r for r in RULES if not r.stall]
    silent_net = dataclasses.replace(load_net(), terms=[], subsystems=[], stalls={})
    report = diagnose(fold_source(str(cut)), rules, str(cut), net=silent_net)
    assert report.verdict == "incomplete"
    assert report.primary is not None and report.primary.rule.id == "MEM102"
    assert report.diagnoses[0] is report.primary and not report.primary.counted


def _cut_after_capture(tmp_path: Path) -> Path:
    """The thin-reserve launch, ending at the scheduler line after capture (no HTTP server, no ready line)."""
    lines = THIN.read_text(encoding="utf-8").splitlines(keepends=True)
    end = next(i for i, ln in enumerate(lines) if "max_total_num_tokens=" in ln)
    cut = tmp_path / "cut-after-capture.log"
    cut.write_text("".join(lines[:end + 1]), encoding="utf-8")
    return cut


def _fixture_paths() -> list[Path]:
    return sorted(p for p in F.rglob("*") if p.is_file() and p.suffix != ".md")


def test_every_healthy_fixture_stays_healthy() -> None:
    for rel in HEALTHY_BEFORE:
        report = diagnose_source(str(F / rel), RULES)
        d = report.to_dict()
        assert d["verdict"] == "healthy", rel
        assert d["primary"] is None, rel


def test_the_budget_rules_never_change_a_verdict_or_a_primary() -> None:
    """Over every fixture: the same verdict and root cause with and without MEM101–MEM103."""
    without = [r for r in RULES if r.id not in BUDGET_RULES]
    seen: set[str] = set()
    for path in _fixture_paths():
        try:
            full = diagnose_source(str(path), RULES)
        except InputError:
            continue
        bare = diagnose_source(str(path), without)
        got = (full.verdict, full.primary.rule.id if full.primary else None)
        assert got == (bare.verdict, bare.primary.rule.id if bare.primary else None), path
        seen |= {d.rule.id for d in full.diagnoses} & set(BUDGET_RULES)
    assert seen == set(BUDGET_RULES)


# ------------------------------------------------------------------------------------------------
# the plumbing: rules select on the budget's values


def test_rules_read_the_budget_as_run_field_memory() -> None:
    run = summarize_source(str(FOUNDING))
    d = rule_run_dict(run)
    assert d["memory"]["fraction_not_in_force"] is True and d["memory"]["configured_mem_fraction_static"] == 0.55
    # the per-rank figures stay where rules written before found them
    assert d["memory"]["ranks"][0]["rank"] == "TP0" and d["memory"]["0"]["free_before_weights_gib"] == 94.03
    assert d["memory"]["3"]["free_before_weights_gib"] == 94.04


def test_a_user_rule_can_select_on_a_budget_value_in_explain_and_in_rules_test(tmp_path: Path) -> None:
    rule_file = tmp_path / "thin.yaml"
    rule_file.write_text("""id: MEM901
name: thin
title: My thin-reserve alarm
category: memory_pressure
severity: info
match:
  thin: {run: {memory.reserve_thin: true, memory.headroom_gib: {lt: 0.5}}}
  old_style: {run: {memory.0.free_before_weights_gib: {gt: 90}}}
condition: thin and old_style
explanation: Only {mem.headroom_gib:.2f} GiB left.
remedy: [Look at it.]
examples: {fires: [thin.log], quiet: [founding.log]}
""", encoding="utf-8")
    shutil.copy(THIN, tmp_path / "thin.log")
    shutil.copy(FOUNDING, tmp_path / "founding.log")
    rule = load_rule(rule_file)
    assert fires_on(rule, THIN) and not fires_on(rule, FOUNDING)
    assert [(o.which, o.ok) for o in run_examples(rule)] == [("fires", True), ("quiet", True)]
    report = diagnose(fold_source(str(THIN)), [rule], str(THIN))
    assert [d.rule.id for d in report.diagnoses] == ["MEM901"] and report.verdict == "healthy"
    assert report.diagnoses[0].explanation == "Only 0.36 GiB left."


def test_the_explain_path_still_never_imports_polars() -> None:
    code = ("import sys; from logdoctor.diagnosis.ranking import diagnose_source; from logdoctor.diagnosis.rules import "
            "load_ruleset; from logdoctor.report.report import explain_text; "
            f"print(explain_text(diagnose_source({str(FOUNDING)!r}, load_ruleset())).splitlines()[2]); "
            "assert 'polars' not in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("budget   weights 72.3")
