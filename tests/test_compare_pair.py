"""`compare` on the founding pair: the same TP8 launch with custom all-reduce off (healthy) and on (capture
OOM at graph 11 of 52), and a fragment of the failed log against the full healthy one (fixtures/compare/).

What is asserted: the point where the runs part leads, the custom all-reduce flag is the first differing
flag, memory per stage uses the fraction in force (not the configured 0.55), args present on one side are
one line, and no `None` / `nan` / `?` reaches the text.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor.diagnosis.ranking import Report, diagnose_source
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.many import compare as compare_mod
from logdoctor.many.compare import compare, comparison_markdown, comparison_text
from logdoctor.many.compare_flags import diff_args
from logdoctor.many.compare_text import value_text

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "fixtures" / "compare"
OFF = PAIR / "tp8-custom-ar-off.log"          # disable_custom_all_reduce=True: healthy
ON = PAIR / "tp8-custom-ar-on.log"            # custom all-reduce on: capture OOM at graph 11 of 52
FRAGMENT = PAIR / "tp8-custom-ar-on-fragment.log"   # ON from its first "KV Cache is allocated" line
UNKNOWN_SHOWN = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|\?")


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    rules = load_ruleset([])
    return {p.name: diagnose_source(str(p), rules, p.name) for p in (OFF, ON, FRAGMENT)}


def _row(d: dict, key: str) -> dict:
    return next(r for r in d["memory"] if r["key"] == key)


def test_the_point_where_they_part_leads(reports: dict[str, Report]) -> None:
    c = compare(reports[OFF.name], reports[ON.name])
    text = comparison_text(c)
    lines = text.splitlines()
    assert lines[:5] == [f"A: {OFF.name}", f"B: {ON.name}", "", "Where they part",
                         "  B ran out of memory at graph 11 of 52 (bs=352), while A captured all 52 graphs and reached ready."]
    # both sides' evidence: B's OOM line, B's last capture progress, the line that shows A went on
    assert re.match(r"    B line \d+: CUDA out of memory\. Tried to allocate 1\.53 GiB\. GPU 0 ", lines[5])
    assert lines[6] == "    B last capture progress: bs=352, 1.24 GiB free after 10 graphs"
    assert lines[7] == "    A line 84: captured 52 graphs using 9.05 GiB, 2.00 GiB free after; reached ready"
    assert lines[8] == ("  B had 20 MiB less free after distributed init than A (94.00 vs 94.02 GiB) and ran out at "
                        "graph 11 of 52.")
    order = [text.index(h) for h in ("Where they part", "Flags that differ", "Memory per stage", "What decided it")]
    assert order == sorted(order)
    d = c.to_dict()
    assert d["parting"]["stage"] == "graph_capture" and d["parting"]["stops"] == "B"
    assert d["parting"]["graph"] == {"side": "B", "graphs_done": 10, "graphs_total": 52, "failed_at_bs": 352}
    assert d["parting"]["a"]["line"] == 84
    assert d["divergence"][0] == lines[4].strip()


def test_custom_all_reduce_is_the_first_differing_flag(reports: dict[str, Report]) -> None:
    c = compare(reports[OFF.name], reports[ON.name])
    d = c.to_dict()
    assert [(f["arg"], f["a"], f["b"], f["matters"]) for f in d["server_args"]] == [
        ("disable_custom_all_reduce", True, False, True), ("decode_log_interval", 40, 10, False)]
    assert d["server_args_not_compared"] == ["random_seed"]
    text = comparison_text(c)
    flags = text.split("Flags that differ")[1].splitlines()
    assert flags[1].startswith("  * disable_custom_all_reduce") and "A True" in flags[1] and "B False" in flags[1]
    assert flags[2].split() == ["decode_log_interval", "A", "40", "B", "10"]


def test_memory_per_stage_uses_the_fraction_in_force(reports: dict[str, Report]) -> None:
    d = compare(reports[OFF.name], reports[ON.name]).to_dict()
    basis = d["memory_basis"]
    assert basis["a"]["configured_mem_fraction_static"] == 0.55 == basis["b"]["configured_mem_fraction_static"]
    assert basis["a"]["effective_mem_fraction_static"] == pytest.approx(0.8800, abs=5e-4)
    assert basis["b"]["effective_mem_fraction_static"] == pytest.approx(0.8800, abs=5e-4)
    p = _row(d, "free_after_dist_init")
    assert (p["a"], p["b"], p["delta"]) == (94.02, 94.0, -0.02)
    assert (_row(d, "dist_init_used")["a"], _row(d, "dist_init_used")["b"]) == (1.21, 1.23)
    assert (_row(d, "free_after_weights")["a"], _row(d, "free_after_weights")["b"]) == (21.71, 21.69)
    assert (_row(d, "kv_cache")["a"], _row(d, "kv_cache")["b"]) == (10.43, 10.41)
    assert (_row(d, "kv_tokens")["a"], _row(d, "kv_tokens")["b"]) == (159331, 159062)
    reserve = _row(d, "reserve")
    # P·(1 − m in force) = free after weights − KV: 11.28 GiB, never P·(1 − 0.55) = 42.31 GiB
    assert reserve["a"] == pytest.approx(21.71 - 10.43, abs=0.011) and reserve["b"] == pytest.approx(21.69 - 10.41, abs=0.011)
    assert reserve["a"] != pytest.approx(94.02 * 0.45, abs=1)
    assert (_row(d, "free_after_kv_pool")["a"], _row(d, "free_at_capture_begin")["b"]) == (11.23, 11.05)
    graphs = _row(d, "graphs")
    assert (graphs["a"], graphs["b"], graphs["delta"]) == (9.05, 9.81, None)   # 10 graphs against 52: no delta
    assert graphs["b_note"] == "first 10 of 52 graphs, 1.24 free after them"
    after = _row(d, "free_after_graphs")
    assert (after["a"], after["b"]) == (2.0, None)          # JSON keeps null for what B never reached
    assert after["b_note"] == "not reached: B ran out at graph 11 of 52 (bs=352)"
    decided = d["decided"]
    # the first graphs are the largest: A's average over all 52 is no measure of B's first 10, so it is not compared
    assert decided[1] == ("The capture decided it: B's graphs took 0.96 GiB each (9.81 GiB for the first 10, leaving "
                          "1.24 GiB); A's log shows only its whole capture (9.05 GiB for all 52), not its first 10 graphs.")
    assert decided[2].startswith("With the same fraction in force (m ≈ 0.880 in both), the reserve for graphs and "
                                 "activations was the same (11.28 vs 11.28 GiB)")
    # the cause is worded as what the flag and the numbers show together, not as a fact
    assert "consistent with those buffers" in decided[3] and decided[3].endswith("The log does not say what used the memory.")
    text = comparison_text(compare(reports[OFF.name], reports[ON.name]))
    assert "  A configured 0.55, in force 0.880; B configured 0.55, in force 0.880" in text
    assert re.search(r"free after distributed init \(P\) +94\.02 +94\.00 +−20 MiB", text)
    assert re.search(r"reserve for graphs \+ activations +11\.28 +11\.28 +same", text)
    assert "42.31" not in text


def test_no_none_nan_or_question_mark_in_text(reports: dict[str, Report]) -> None:
    for a, b in ((OFF, ON), (ON, OFF), (OFF, FRAGMENT), (FRAGMENT, OFF), (OFF, OFF)):
        c = compare(reports[a.name], reports[b.name])
        for out in (comparison_text(c), comparison_markdown(c)):
            assert not UNKNOWN_SHOWN.search(out), (a.name, b.name, UNKNOWN_SHOWN.search(out))
        json.dumps(c.to_dict(), allow_nan=False)


def test_fragment_args_are_one_line(reports: dict[str, Report]) -> None:
    full = reports[OFF.name]
    c = compare(full, reports[FRAGMENT.name])
    n = len(full.run.server_args)
    assert n > 200
    summary = f"{n} args only in A's server_args (B is a fragment without a server_args line)"
    assert c.one_sided["summary"] == summary and len(c.one_sided["only_a"]) == n and c.one_sided["only_b"] == []
    text = comparison_text(c)
    assert text.count(summary) == 1 and "(absent)" not in text
    assert len(text.splitlines()) < 90                     # not one row per missing arg
    assert c.parting["note"] == "B's log starts at the KV pool (line 1): it is a fragment of a launch"
    assert c.parting["summary"].startswith("B ran out of memory at graph 11 of 52 (bs=352)")
    d = c.to_dict()
    p = _row(d, "free_after_dist_init")
    assert (p["a"], p["b"], p["b_note"]) == (94.02, None, "not in B's log")
    assert "; B configured: not in B's log, in force: not computable from B's log" in text
    # with the early figures missing, the first difference is only the first one both logs print
    assert d["decided"][0].startswith("Of the figures both logs print, the first that differs: B had 20 MiB less KV cache")
    assert d["decided"][-1] == ("No flag that matters for memory or the launch differs among the args both logs print: "
                                "B's log has no server_args line to compare.")


def test_the_other_way_round(reports: dict[str, Report]) -> None:
    c = compare(reports[ON.name], reports[OFF.name])
    assert c.parting["summary"] == "A ran out of memory at graph 11 of 52 (bs=352), while B captured all 52 graphs and reached ready."
    assert c.decided[0] == ("A had 20 MiB less free after distributed init than B (94.00 vs 94.02 GiB) and ran out at "
                            "graph 11 of 52.")
    assert c.flags[0].arg == "disable_custom_all_reduce" and (c.flags[0].a, c.flags[0].b) == (False, True)


def test_without_graph_progress_the_capture_is_named_from_the_stages(reports: dict[str, Report],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_mod, "graph_progress", lambda run: None)
    c = compare(reports[OFF.name], reports[ON.name])
    assert c.parting["summary"] == "B ran out of memory in graph capture, while A went on to ready."
    assert c.parting["graph"] is None
    assert c.decided[0] == ("B had 20 MiB less free after distributed init than A (94.00 vs 94.02 GiB) and stopped in "
                            "graph capture.")
    text = comparison_text(c)
    assert "graph 11" not in text and "not reached: B stopped in graph capture" in text
    assert not UNKNOWN_SHOWN.search(text)


def test_flags_ordered_by_the_stage_where_runs_part() -> None:
    sa = {"tp_size": 8, "cuda_graph_max_bs": 512, "mem_fraction_static": 0.88, "disable_custom_all_reduce": True,
          "chunked_prefill_size": 8192, "zz_other": 1, "port": 30000, "cuda_graph_bs": None}
    sb = {"tp_size": 4, "cuda_graph_max_bs": 256, "mem_fraction_static": 0.8, "disable_custom_all_reduce": False,
          "chunked_prefill_size": 4096, "zz_other": 2, "port": 30001, "cuda_graph_bs": [1, 2, 4]}
    flags, others, one_sided, not_compared = diff_args(sa, sb, "graph_capture")
    assert [f.arg for f in flags] == ["disable_custom_all_reduce", "cuda_graph_max_bs", "cuda_graph_bs",
                                      "mem_fraction_static", "chunked_prefill_size", "tp_size"]
    assert [f.arg for f in others] == ["zz_other"] and not_compared == ["port"] and one_sided["summary"] is None
    flags, _, _, _ = diff_args(sa, sb, "weights")     # only the parallel sizes act on the weights
    assert [f.arg for f in flags][:2] == ["tp_size", "disable_custom_all_reduce"]
    assert value_text(None) == "not set" and value_text(0.88) == "0.88" and value_text("fa3") == "'fa3'"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], check=False, capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_cli_formats() -> None:
    p = _cli("compare", str(OFF), str(ON), "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout, parse_constant=lambda s: pytest.fail(f"non-finite number {s} in JSON"))
    assert d["schema"] == "logdoctor.compare/1" and d["server_args"][0]["arg"] == "disable_custom_all_reduce"
    md = _cli("compare", str(OFF), str(ON), "--format", "markdown")
    assert md.returncode == 0, md.stderr
    assert "## Where they part\n\nB ran out of memory at graph 11 of 52 (bs=352)" in md.stdout
    assert "| **disable_custom_all_reduce** | True | False |" in md.stdout
    text = _cli("compare", str(OFF), str(FRAGMENT))
    assert text.returncode == 0 and "args only in A's server_args (B is a fragment without a server_args line)" in text.stdout
