"""Issue 13, memory side: both limits in every what-if, remedies computed and ranked, values read from the
error text, one number per quantity, and the memory JSON documented by logdoctor/memory.schema.json."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from logdoctor.cli.one import memory_cmd
from logdoctor.report.memory_text import memory_text, what_if_text
from logdoctor.run.fold import summarize_source
from logdoctor.run.memory import MemoryAnalysis, analyse
from logdoctor.run.memory_advice import MFS_MAX

ROOT = Path(__file__).resolve().parent.parent
ADVICE = ROOT / "fixtures" / "memory" / "advice"
FOUNDING = ADVICE / "founding-mfs-0.55-tp8.log"
M05 = ADVICE / "m05-minimum-viable-tail-tp8.log"
M04 = ADVICE / "m04-fraction-in-error-tp2.log"
CAPTURE_OOM = ROOT / "fixtures" / "memory" / "graphs" / "v0.5-capture-oom-tp4-graph11.log"
SCHEMA = json.loads((ROOT / "logdoctor" / "memory.schema.json").read_text(encoding="utf-8"))


def _analyse(log: Path, **what_if: Any) -> MemoryAnalysis:
    return analyse(summarize_source(str(log)), what_if.pop("m", None), what_if.pop("bs", None), **what_if)


def test_founding_numbers_and_one_token_count() -> None:
    a = _analyse(FOUNDING)
    assert len(a.ranks) == 8 and a.shortage is None
    assert (a.pre_load_free_gib, a.post_load_free_gib, a.kv_cache_gib) == (94.02, 21.71, 10.42)
    assert a.configured_mem_fraction_static == 0.55 and a.mem_fraction_static_source == "server_args"
    assert a.effective_mem_fraction_static == pytest.approx(0.88, abs=0.005)
    assert a.fraction_not_in_force and not a.ranks_unbalanced
    # two sources, one number: the KV line's count everywhere, the scheduler's recorded
    assert (a.kv_tokens, a.kv_tokens_source) == (159190, "KV Cache is allocated. #tokens")
    assert (a.kv_tokens_other, a.kv_tokens_other_source) == (159153, "max_total_num_tokens=")
    assert a.bytes_per_token == pytest.approx(10.42 * 2**30 / 159190, abs=0.1)
    text = " ".join(memory_text(a).split())  # findings wrap to the terminal's width
    assert "159,153" in text and "159,190" in text and "every figure here uses 159,190" in text
    # 1.98 GiB free after capture: more than one more graph (0.18 GiB) and than the stated 1 GiB margin
    assert a.graph_gib == 9.28 and a.headroom_gib == 1.98 and not a.reserve_thin
    assert a.headroom_needed_gib == 1.0 and "general margin" in (a.headroom_needed_for or "")
    assert a.budget_line == ("weights 72.3 | KV 10.4 (159K tok) | graphs 9.3 | free 2.0 GiB per rank, "
                             "m configured 0.55, in force 0.88")
    assert a.graphs is not None and len(a.graphs["captured_bs"]) == 52


def test_founding_first_remedy_is_to_set_the_fraction_that_ran() -> None:
    a = _analyse(FOUNDING)
    first = a.remedies[0]
    assert (first["flag"], first["value"], first["fixes"]) == ("--mem-fraction-static", 0.88, "config")
    assert "could not start (minimum 0.769)" in first["text"]
    assert a.advice == [r["text"] for r in a.remedies]


@pytest.mark.parametrize("what_if, fails_first", [
    ({"m": 0.55}, "kv"),                       # the configured value: the KV check fails at init
    ({"m": 0.88}, None),                       # what ran: both limits hold
    ({"m": 0.95}, "reserve"),                  # KV passes, the 9.3 GiB of graphs no longer fit
    ({"m": 0.95, "bs": 64}, None),             # ... unless the graphs get smaller
    ({"m": 0.92, "what_if_max_running": 32}, None),   # 32 slots: no graph above bs 32 is captured
])
def test_every_what_if_names_the_limit_that_fails_first(what_if: dict[str, Any], fails_first: str | None) -> None:
    a = _analyse(FOUNDING, **what_if)
    w = a.what_if
    assert w is not None and w.fails_first == fails_first
    assert w.kv_ok is not None and w.reserve_ok is not None
    if fails_first == "kv":
        assert w.verdict.startswith("fails first at the KV check") and w.kv_budget_gib < 0
    elif fails_first == "reserve":
        assert "fails first on the reserve" in w.verdict and w.headroom_gib < 0
    else:
        assert "and the reserve" in w.verdict and w.headroom_gib > 0
    assert "?" not in "\n".join(what_if_text(w))   # unknown terms are named, never `?`


def test_graph_size_changes_the_prediction() -> None:
    full = _analyse(FOUNDING, m=0.9).what_if
    small = _analyse(FOUNDING, m=0.9, bs=128).what_if
    assert full is not None and small is not None
    assert small.graph_gib_estimate < full.graph_gib_estimate
    assert small.headroom_gib - full.headroom_gib == pytest.approx(full.graph_gib_estimate - small.graph_gib_estimate,
                                                                   abs=0.02)
    assert small.kv_tokens == full.kv_tokens  # the graphs do not touch the KV cache


def test_unknown_terms_are_named() -> None:
    w = _analyse(FOUNDING, m=0.88, what_if_tp=16).what_if
    assert w is not None and w.tp == 16 and w.kv_tokens is None
    assert any("KV bytes per token at --tp 16" in u for u in w.unknown)
    assert w.kv_budget_gib is not None and w.kv_budget_gib > _analyse(FOUNDING, m=0.88).what_if.kv_budget_gib
    chunk = _analyse(FOUNDING, m=0.88, what_if_chunk=4096).what_if
    assert chunk is not None and chunk.activations_gib == 6.0 and chunk.chunked_prefill_size == 4096


def test_m05_values_in_the_error_are_read_and_used() -> None:
    a = _analyse(M05)
    assert a.shortage == "init" and a.era == "v0.5.14+"
    assert (a.configured_mem_fraction_static, a.mem_fraction_static_source) == (0.55, "error text")
    assert a.minimum_viable_from_error == 0.769
    assert a.pre_load_free_gib == pytest.approx(21.71 / 0.231, abs=0.01)   # P = A / (1 − minimum viable)
    first = a.remedies[0]
    assert first["flag"] == "--mem-fraction-static" and first["fixes"] == "kv"
    assert 0.77 < first["value"] <= MFS_MAX and first["value"] == 0.85
    assert "minimum viable 0.7690" in first["text"]
    assert not any("mem_fraction_static" in m for m in a.missing)


def test_m04_fraction_printed_without_server_args() -> None:
    a = _analyse(M04, m=0.9)
    assert (a.configured_mem_fraction_static, a.mem_fraction_static_source) == (0.88, "error text")
    assert a.minimum_mem_fraction_static == pytest.approx(1 - 8.75 / 78.21, abs=1e-4)
    first = a.remedies[0]
    assert first["flag"] == "--mem-fraction-static" and first["value"] == 0.92
    assert first["value"] > a.minimum_mem_fraction_static
    assert [r["flag"] for r in a.remedies] == ["--mem-fraction-static", "--tp"] and a.remedies[1]["value"] == 4
    assert a.what_if is not None and a.what_if.kv_ok and a.what_if.fails_first is None
    assert any("CUDA-graph memory" in u for u in a.what_if.unknown)   # no capture: named, not guessed


def test_capture_oom_ranks_the_graph_size_first() -> None:
    a = _analyse(CAPTURE_OOM, m=0.95)
    assert a.shortage == "graph_capture" and a.graphs is not None and a.graphs["failed_at_bs"] is not None
    bs, mfs = a.remedies[0], a.remedies[1]
    assert bs["flag"] == "--cuda-graph-max-bs" and bs["fixes"] == "reserve" and bs["kv_tokens_lost"] == 0
    assert bs["value"] in a.graphs["captured_bs"] and 1 <= bs["value"] < 512
    assert re.search(r"keeps \d+\.\d GiB of headroom", bs["text"])
    assert mfs["flag"] == "--mem-fraction-static" and mfs["kv_tokens_lost"] > 0
    assert "graphs at 0.53 GiB each" in mfs["text"]  # the least-squares fit over every capture frame
    assert a.remedies[-1]["text"].startswith("never raise")
    assert a.what_if is not None and a.what_if.fails_first == "reserve" and a.what_if.kv_ok
    # the advised batch size passes the same prediction at the run's fraction
    check = _analyse(CAPTURE_OOM, m=a.configured_mem_fraction_static, bs=bs["value"]).what_if
    assert check is not None and check.reserve_ok and check.fails_first is None


def _logs() -> list[Path]:
    return sorted(p for p in (ROOT / "fixtures").rglob("*.log") if p.is_file())


def _memory_json(runner: CliRunner, log: Path, *opts: str) -> dict[str, Any] | None:
    res = runner.invoke(memory_cmd, ["--format", "json", *opts, str(log)])
    return json.loads(res.output) if res.exit_code == 0 else None


def test_remedy_values_stay_inside_what_sglang_accepts() -> None:
    runner = CliRunner()
    checked = 0
    for log in _logs():
        d = _memory_json(runner, log)
        if d is None:
            continue
        lo = d["minimum_mem_fraction_static"]
        for r in d["remedies"]:
            v = r["value"]
            assert not re.search(r"mem_fraction_static ≥ (1\.|[2-9])", r["text"]), (log, r["text"])
            if v is None:
                continue
            checked += 1
            if r["flag"] == "--mem-fraction-static":
                assert 0 < v <= MFS_MAX, (log, r)
                if r["fixes"] in ("kv", "reserve", "context") and lo is not None:
                    assert v > lo, (log, r)
            else:
                assert isinstance(v, int) and v >= 1, (log, r)
    assert checked > 20


def _walk(schema: dict[str, Any], where: str, out: list[str]) -> None:
    for name, sub in schema.get("properties", {}).items():
        if "description" not in sub:
            out.append(f"{where}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(sub.get(key), dict):
                _walk(sub[key], f"{where}.{name}[]", out)
        _walk(sub, f"{where}.{name}", out)


def test_schema_documents_every_property() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    undocumented: list[str] = []
    _walk(SCHEMA, "$", undocumented)
    assert undocumented == []

    def closed(s: dict[str, Any], where: str) -> None:
        if "properties" in s:
            assert s.get("additionalProperties") is False, where
        for name, sub in s.get("properties", {}).items():
            closed(sub, f"{where}.{name}")
            if isinstance(sub.get("items"), dict):
                closed(sub["items"], f"{where}.{name}[]")
    closed(SCHEMA, "$")


def test_memory_json_of_every_fixture_log_matches_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    runner = CliRunner()
    validated = 0
    for log in _logs():
        d = _memory_json(runner, log, "--mem-fraction-static", "0.9", "--cuda-graph-max-bs", "64")
        if d is None:
            continue
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(d)]
        assert errors == [], (log, errors[:3])
        validated += 1
    assert validated > 200


def test_a_what_if_starts_from_the_fraction_in_force_and_never_advises_an_impossible_fraction() -> None:
    # only --tp asked: the fraction is the one the run had (0.88 in force), not the configured 0.55 that never ran
    a = _analyse(FOUNDING, what_if_tp=4)
    w = a.what_if
    assert w is not None and w.mem_fraction_static == 0.88 and w.fails_first == "kv"
    # half the ranks: 72.3 GiB of weights per rank becomes 144.6, more than the 94.02 GiB free before loading
    assert "no --mem-fraction-static can start it" in w.verdict and "50.62 GiB more" in w.verdict
    assert not re.search(r"mem_fraction_static (?:is|≥) 1\.\d", w.verdict)
    # a healthy reserve under the general 1 GiB margin is called thin, and the margin is said to be an allowance
    b = _analyse(FOUNDING, m=0.95, bs=128).what_if
    assert b is not None and b.fails_first is None and "general margin" in b.verdict and "not measured" in b.verdict
