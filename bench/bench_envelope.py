#!/usr/bin/env python3
"""Summary speed on a serving log as collectors hand it over, against the same log plain.

    python bench/bench_envelope.py [--size-mb 64] [--keep] [--workdir DIR] [--json]

Not a test: run it, quote the figures. It writes one synthetic serving log (bench_parse's generator),
wraps every line of it as docker-compose (`sglang-1  | `), a CRI node file (`TIME stderr F `), docker's
json-file and `kubectl logs --timestamps` (rfc3339) write it, and times `logdoctor summary --format json`
on each in one run. The figure is the ratio (plain seconds / wrapped seconds): the goal is >= 1/2. Each
wrapped run must also report the plain run's decode count, peak token usage and peak queue.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_parse import MB, locate_logdoctor, run, scratch_dir, write_serving_log

T0 = 1764669600  # 2025-12-02T10:00:00Z, the generator's start


def _rfc3339(i: int) -> str:
    # a collector time that moves forward with the line; 9-digit nanoseconds and Z, as kubectl prints
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + i // 50)) + f".{(i % 50) * 20_000_000 + 123:09d}Z"


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


WRAPPERS: dict[str, Callable[[int, str], str]] = {
    "compose": lambda i, t: f"sglang-1  | {t}",
    "cri": lambda i, t: f"{_rfc3339(i)} stderr F {t}",
    "json": lambda i, t: '{"log":' + _json_string(t + "\n") + ',"stream":"stderr","time":"' + _rfc3339(i) + '"}',
    "rfc3339": lambda i, t: f"{_rfc3339(i)} {t}",
}


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line.removesuffix("\n")


def wrap_file(src: Path, dst: Path, wrap: Callable[[int, str], str]) -> None:
    """Every physical line wrapped; a line's bare CRs (tqdm redraws) stay inside its record, as on a node."""
    buf: list[str] = []
    with open(dst, "w", encoding="utf-8", newline="\n") as out:
        for i, text in enumerate(_lines(src)):
            buf.append(wrap(i, text))
            if len(buf) >= 20_000:
                out.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            out.write("\n".join(buf) + "\n")


def summary_of(exe: str, log: Path, out: Path) -> tuple[float, dict[str, Any]]:
    with open(log, "rb") as f:  # page cache warm
        while f.read(16 * MB):
            pass
    best: tuple[float, dict[str, Any]] | None = None
    for _ in range(2):
        r = run([exe, "summary", str(log), "--format", "json"], out)
        batches = json.loads(out.read_text())["batches"]
        if best is None or r["wall"] < best[0]:
            best = (r["wall"], batches)
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=64, help="size of the plain serving log, MiB (default 64)")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    ap.add_argument("--workdir", type=Path, default=None, help="parent dir for the temp dir (default: system temp)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args()
    exe = locate_logdoctor()
    rows: list[dict[str, Any]] = []
    with scratch_dir("logdoctor-bench-env-", a.workdir, a.keep) as work:
        out = work / "stdout"
        plain = work / "serving.log"
        truth = write_serving_log(plain, a.size_mb)
        plain_s, plain_b = summary_of(exe, plain, out)
        keys = ("decode_count", "peak_token_usage", "peak_queue_req")
        want = {k: plain_b.get(k) for k in keys}
        rows.append({"log": "plain", "mb": plain.stat().st_size / MB, "seconds": plain_s, "ratio": 1.0,
                     "matches": want["decode_count"] == truth["decode"]})
        for name, wrap in WRAPPERS.items():
            log = work / f"serving.{name}.log"
            wrap_file(plain, log, wrap)
            secs, batches = summary_of(exe, log, out)
            rows.append({"log": name, "mb": log.stat().st_size / MB, "seconds": secs, "ratio": plain_s / secs,
                         "matches": {k: batches.get(k) for k in keys} == want})
            if not a.keep:
                log.unlink()
    if a.json:
        print(json.dumps({"rows": rows, "goal": "ratio >= 0.5"}, indent=2))
        return
    print(f"logdoctor summary, wrapped vs plain serving log (goal: speed ratio >= 1/2), python {sys.version.split()[0]}")
    print(f"{'envelope':<10} {'MB':>7} {'seconds':>8} {'speed vs plain':>15} {'same batches':>13}")
    for r in rows:
        met = "" if r["log"] == "plain" else ("  ok" if r["ratio"] >= 0.5 else "  NO")
        print(f"{r['log']:<10} {r['mb']:>7.1f} {r['seconds']:>8.2f} {r['ratio']:>14.2f}x {r['matches']!s:>13}{met}")


if __name__ == "__main__":
    main()
