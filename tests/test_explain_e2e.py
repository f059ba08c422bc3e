"""End to end: `explain` on complete logs of every era and category says the right thing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
F = ROOT / "fixtures"

CASES = [
    # path, verdict, category, rule, a phrase the remedies must contain
    ("logs/v0.4-kv-not-enough-tp8.log", "failed", "memory_pressure", "MEM001", "Raise --mem-fraction-static"),
    ("logs/v0.5-no-memory-after-weights.log", "failed", "memory_pressure", "MEM001", "Raise --mem-fraction-static"),
    ("logs/v0.5-capture-oom-tp4.log", "failed", "memory_pressure", "MEM003", "Lower --mem-fraction-static"),
    ("example/tp8-mem-fraction.log", "failed", "memory_pressure", "MEM003", "--cuda-graph-max-bs"),
    ("memory/runtime-oom-tp2.log", "failed", "memory_pressure", "MEM005", None),
    ("logs/host-oom-killed.log", "failed", "memory_pressure", "MEM010", None),
    ("logs/v0.5-weight-load-oom-tp2.log", "failed", "memory_pressure", "MEM012", None),
    ("logs/v0.5-capture-not-capturable.log", "failed", "graph_incompatibility", "GRF002", "--disable-cuda-graph"),
    ("logs/v0.4-nccl-watchdog-tp2.log", "failed", "communication", "COM010", None),
    ("logs/v0.5-segfault-nccl.log", "failed", "communication", "COM009", None),
    ("logs/v0.5-incomplete-after-nccl.log", "incomplete", "ipc_bar", "IPC008", "--disable-custom-all-reduce"),
    ("logs/v0.5-arch-unsupported.log", "failed", "unsupported", "UNS001", None),
    ("logs/v0.5-port-in-use.log", "failed", "configuration", "CFG003", None),
    ("logs/v0.1-router-tp1.log", "healthy", None, None, None),
    ("logs/v0.2-tp2.log", "healthy", None, None, None),
    ("logs/v0.3-tp2.log", "healthy", None, None, None),
    ("logs/v0.4-tp8.log", "healthy", None, None, None),
    ("logs/v0.4.7-mla-tp8-healthy-serving.log", "healthy", None, None, None),
    ("logs/v0.5early-tp2.log", "healthy", None, None, None),
    ("logs/v0.5new-dp2-tp4-ep4.log", "healthy", None, None, None),
    ("logs/v0.5-custom-ar-ipc-failed-tp2.log", "healthy", None, None, None),  # a warning never fails a log
    ("memory/story-mfs-0.55-tp8.log", "healthy", None, None, None),
    ("logs/v0.4.7-serving-request-error.log", "healthy", None, None, None),  # serving went on after it
]


def explain(path: Path, fmt: str = "json") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "--format", fmt, str(path)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("rel, verdict, category, rule, remedy", CASES, ids=[c[0] for c in CASES])
def test_explain(rel: str, verdict: str, category: str | None, rule: str | None, remedy: str | None) -> None:
    p = explain(F / rel)
    assert p.returncode == (1 if verdict == "failed" else 0), p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == verdict
    prim = d["primary"]
    if category is None:
        assert prim is None or verdict == "incomplete"
        return
    assert prim["category"] == category and prim["rule"] == rule
    assert prim["evidence"] and all(e["line"] >= 1 for e in prim["evidence"])
    if remedy:
        assert any(remedy.lower() in r.lower() for r in prim["remedies"]), prim["remedies"]
    lines = (F / rel).read_bytes().decode(errors="replace").split("\n")  # \r is not a line end
    first = prim["evidence"][0]
    assert first["text"][:40].strip() in lines[first["line"] - 1]


def test_text_report_has_every_section() -> None:
    out = explain(F / "logs/v0.5-capture-oom-tp4.log", "text").stdout
    for section in ("FAILED", "Evidence", "Why", "What to do", "The memory budget", "Stages"):
        assert section in out
    assert "line 126 TP2:" in out


def test_warning_only_log_lists_the_warning_without_failing() -> None:
    d = json.loads(explain(F / "logs/v0.5-custom-ar-ipc-failed-tp2.log").stdout)
    assert d["verdict"] == "healthy"
    assert any(x["category"] == "ipc_bar" and not x["fatal"] for x in d["diagnoses"])
