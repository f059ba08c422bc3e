#!/usr/bin/env python3
"""What the broad net costs: diagnosis time with the built-in net against an empty one, in one run.

    python bench/bench_net.py [--repeat 3] [--json]

Not a test: run it, quote the figures. For each log set (the repository's fixtures, and one synthetic log of
20k unrecognised error-looking lines that ends in a cut traceback, the net's worst case: every tail event is
searched), it times diagnose_source over the set with the built-in net and with an empty NetData, takes the
best of --repeat runs, and prints seconds and the ratio (with net / without). It also prints what loading the
net costs in a fresh process (cached, as every run after the first sees it).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logdoctor.diagnosis.ranking import diagnose_source
from logdoctor.diagnosis.net_data import NetData, load_net
from logdoctor.diagnosis.rules import RuleSet, load_ruleset
from logdoctor.read.sniff import InputError


def _worst_case(directory: Path) -> Path:
    path = directory / "net-worst.log"
    with path.open("w", encoding="utf-8") as f:
        for i in range(20_000):
            f.write(f"[2025-05-01 10:00:{i % 60:02d} TP{i % 8}] RuntimeError: worker {i} failed to respond: "
                    f"Connection reset by peer while waiting for rank {i % 8}\n")
        f.write("Traceback (most recent call last):\n  File \"/sgl-workspace/sglang/python/sglang/srt/model_executor/"
                "cuda_graph_runner.py\", line 300, in capture\n")
    return path


def _time(logs: list[Path], rules: list, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for log in logs:
            try:
                diagnose_source(str(log), rules)
            except InputError:
                continue  # a refused fixture (binary, empty) costs the same with and without the net
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rules = load_ruleset()
    with_net = RuleSet(rules, net=load_net())
    without = RuleSet(rules, net=NetData(headlines=dict(load_net().headlines), remedies=dict(load_net().remedies)))
    fixtures = sorted((ROOT / "fixtures").rglob("*.log"))
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, logs in (("fixtures", fixtures), ("worst-case 20k error lines", [_worst_case(Path(tmp))])):
            a_s, b_s = _time(logs, with_net, a.repeat), _time(logs, without, a.repeat)
            out[name] = {"logs": len(logs), "with_net_s": round(a_s, 3), "without_net_s": round(b_s, 3),
                         "ratio": round(a_s / b_s, 3)}
    code = "import time; t=time.perf_counter(); from logdoctor.diagnosis.net_data import load_net; n=load_net(); " \
           "from logdoctor.diagnosis.net import compiled; compiled(n); print(time.perf_counter()-t)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=False)  # warm the cache
    load = float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout)
    out["load"] = {"net_load_and_compile_s": round(load, 3), "terms": len(load_net().terms),
                   "subsystems": len(load_net().subsystems)}
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for name, row in out.items():
            print(f"{name:32s} " + "  ".join(f"{k}={v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
