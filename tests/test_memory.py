from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor.run.fold import summarize_source
from logdoctor.report.memory_text import memory_text, rank_bar
from logdoctor.run.memory import analyse

ROOT = Path(__file__).resolve().parent.parent
MEM = ROOT / "fixtures" / "memory"
LOGS = ROOT / "fixtures" / "logs"


def test_the_story_effective_fraction_was_088_not_055() -> None:
    run = summarize_source(str(MEM / "story-mfs-0.55-tp8.log"))
    a = analyse(run, what_if_mfs=0.55)
    assert a.configured_mem_fraction_static == 0.55
    assert a.effective_mem_fraction_static == pytest.approx(0.88, abs=0.005)
    assert a.bytes_per_token == pytest.approx(70272, rel=0.001)
    text = " ".join(a.findings)
    assert "0.55 cannot have been in force" in text and "what to check" in text
    assert a.what_if is not None and a.what_if.passes_kv_check is False
    assert a.what_if.kv_budget_gib == pytest.approx(21.71 - 94.02 * 0.45, abs=0.05)
    assert "minimum mem_fraction_static is 0.769" in a.what_if.verdict
    ok = analyse(run, what_if_mfs=0.90).what_if
    assert ok is not None and ok.passes_kv_check and ok.kv_tokens and ok.kv_tokens > 159215


@pytest.mark.parametrize("log, era_text", [
    (LOGS / "v0.4-kv-not-enough-tp8.log", "v0.2–v0.5.13"),
    (LOGS / "v0.3-tp2.log", "v0.2–v0.5.13"),
    (LOGS / "v0.5new-dp2-tp4-ep4.log", "v0.5.14+"),
    (LOGS / "v0.1-router-tp1.log", "v0.1.x"),
])
def test_every_era_gets_its_formula(log: Path, era_text: str) -> None:
    a = analyse(summarize_source(str(log)))
    assert a.formula[0].startswith(era_text)
    assert memory_text(a)


def test_the_formula_is_written_with_the_runs_numbers() -> None:
    a = analyse(summarize_source(str(LOGS / "v0.4-kv-not-enough-tp8.log")))
    joined = "\n".join(a.formula)
    assert f"{a.pre_load_free_gib:.2f} × (1 − {a.configured_mem_fraction_static:g})" in joined
    assert a.kv_budget_gib is not None and a.kv_budget_gib <= 0


def test_missing_quantities_are_named_and_the_rest_still_used() -> None:
    a = analyse(summarize_source(str(MEM / "fragment-no-args.log")))
    assert any("mem_fraction_static" in m for m in a.missing)
    assert any("before weights" in m for m in a.missing)
    assert a.post_load_free_gib == 47.88 and a.kv_tokens == 335920
    assert a.bytes_per_token == pytest.approx(41.0 * 2**30 / 335920, rel=0.001)
    v01 = analyse(summarize_source(str(LOGS / "v0.1-router-tp1.log")))
    assert v01.effective_mem_fraction_static is None and v01.missing


def test_one_rank_short_of_memory_is_named_first() -> None:
    a = analyse(summarize_source(str(MEM / "one-rank-short-tp8.log")))
    assert a.shortage == "init"
    assert a.advice[0].startswith("FREE the GPU of rank TP3")
    assert any("TP3 had 80.00 GiB free" in f for f in a.findings)
    assert a.pre_load_free_gib == 80.0  # SGLang sizes by the smallest rank


@pytest.mark.parametrize("log, stage, first_word, also", [
    (LOGS / "v0.4-kv-not-enough-tp8.log", "init", "RAISE", "larger --tp"),
    (LOGS / "v0.5-capture-oom-tp4.log", "graph_capture", "LOWER", "--cuda-graph-max-bs"),
    (MEM / "runtime-oom-tp2.log", "runtime", "LOWER", "--chunked-prefill-size from 16384 to 8192"),
])
def test_advice_points_the_right_way(log: Path, stage: str, first_word: str, also: str) -> None:
    a = analyse(summarize_source(str(log)))
    assert a.shortage == stage
    assert a.advice[0].startswith(first_word)
    assert any(also in x for x in a.advice)
    if first_word == "LOWER":
        assert any(x.startswith("never raise") for x in a.advice)


def test_bars_are_readable_without_colour() -> None:
    a = analyse(summarize_source(str(MEM / "story-mfs-0.55-tp8.log")))
    bar = rank_bar(a.ranks[0])
    assert len(bar) == 60 and set(bar) <= set("WKGr.?") and "W" in bar and "K" in bar
    assert "\x1b" not in memory_text(a)


def test_memory_cli_json_and_what_if() -> None:
    p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "memory", "--format", "json",
                        "--mem-fraction-static", "0.55", "--cuda-graph-max-bs", "128",
                        str(MEM / "story-mfs-0.55-tp8.log")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0
    d = json.loads(p.stdout)
    for key in ("configured_mem_fraction_static", "effective_mem_fraction_static", "pre_load_free_gib",
                "post_load_free_gib", "weights_gib", "kv_cache_gib", "kv_tokens", "bytes_per_token", "reserve_gib",
                "advice", "ranks"):
        assert key in d
    assert len(d["ranks"]) == 8
    assert d["what_if"]["passes_kv_check"] is False and d["what_if"]["cuda_graph_max_bs"] == 128


def test_explain_carries_the_memory_analysis_in_memory_diagnoses() -> None:
    p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "--format", "json",
                        str(LOGS / "v0.4-kv-not-enough-tp8.log")], capture_output=True, text=True, cwd=ROOT)
    d = json.loads(p.stdout)
    assert d["primary"]["category"] == "memory_pressure"
    assert d["primary"]["memory"]["minimum_mem_fraction_static"] is not None
    assert d["primary"]["memory"]["advice"][0].startswith("RAISE")
