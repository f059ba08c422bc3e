"""Mutation fuzzer for ingest → parse → summary → explain, and for rule loading.

    python tools/fuzz.py --seconds 600 --jobs 2            # run for ten minutes on both cores
    python tools/fuzz.py --inputs 200000 --target parse     # a fixed number of inputs, one target

Inputs are mutated from the project's own fixtures (truncation, byte flips, splices, interleaved ranks,
ANSI / CR / NUL / CRLF / invalid UTF-8 insertions, deep exception chains, over-long lines) plus random
bytes. A crash is any exception escaping the target (a rule file may only raise RuleError), or a single
input taking longer than --slow seconds. Every crashing input is written to fixtures/fuzz/ so that
tests/test_fuzz_regressions.py replays it forever.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CRASH_DIR = ROOT / "fixtures" / "fuzz"
FRAGMENTS = [b"\r", b"\r\n", b"\x00", b"\x1b[31m", b"\x1b[0m", b"\xff\xfe", b"\xc3", b"\n\n", b"  File \"x.py\", line 1, in f\n",
             b"Traceback (most recent call last):\n", b"During handling of the above exception, another exception occurred:\n",
             b"RuntimeError: CUDA error: out of memory\n", b"[2025-01-01 10:00:00 TP0] ", b"[rank0]:[E1130 01:45:25.1 P.cpp:1] ",
             b"sglang-1  | ", b"> ", b"Capture cuda graph failed: ", b"Possible solutions:\n1. a\n", b"\t", b"=" * 60,
             b"Not enough memory. Please try to increase --mem-fraction-static.", b"avail mem=", b"#tokens: ", b"KV size: ",
             b"host:1:2 [0] NCCL WARN x\n", b"Fatal Python error: Segmentation fault\n", b"server_args=ServerArgs(a=[1, (2", b"{", b"}"]


def corpus() -> list[bytes]:
    files = [p for d in ("fixtures/logs", "fixtures/blocks", "fixtures/rules", "fixtures/memory", "fixtures/example")
             for p in (ROOT / d).rglob("*") if p.is_file() and p.stat().st_size < 2_000_000]
    return [p.read_bytes() for p in sorted(files)]


def rule_corpus() -> list[bytes]:
    return [p.read_bytes() for p in sorted((ROOT / "rules").rglob("*.yaml"))]


def window(rng: random.Random, seed: bytes) -> bytes:
    """Mostly a few dozen consecutive lines of a seed (fast to run), sometimes all of it."""
    if rng.random() < 0.05:
        return seed
    lines = seed.split(b"\n")
    start = rng.randrange(len(lines))
    return b"\n".join(lines[start:start + rng.randint(1, 40)])


def mutate(rng: random.Random, seeds: list[bytes], whole: bool = False) -> bytes:
    data = bytearray(rng.choice(seeds) if whole else window(rng, rng.choice(seeds)))
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(11)
        if op == 0 and data:
            del data[rng.randrange(len(data)):]                                   # truncate
        elif op == 1 and data:
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)                # flip bytes
        elif op == 2:
            pos = rng.randrange(len(data) + 1)
            data[pos:pos] = rng.choice(FRAGMENTS) * rng.randint(1, 3)             # insert a hazard
        elif op == 3:
            other = window(rng, rng.choice(seeds))
            a, b = sorted(rng.randrange(len(other) + 1) for _ in range(2))
            pos = rng.randrange(len(data) + 1)
            data[pos:pos] = other[a:b]                                            # splice
        elif op == 4:
            la, lb = bytes(data).split(b"\n"), window(rng, rng.choice(seeds)).split(b"\n")  # interleave two logs
            out = []
            for i in range(max(len(la), len(lb))):
                if i < len(la):
                    out.append(la[i])
                if i < len(lb) and rng.random() < 0.5:
                    out.append(lb[i])
            data = bytearray(b"\n".join(out))
        elif op == 5:
            chain = b"Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nValueError: x\n\n" \
                    b"During handling of the above exception, another exception occurred:\n\n"
            data += chain * rng.randint(5, 300 if rng.random() < 0.05 else 40)   # deep chains
        elif op == 6:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))  # random tail
        elif op == 7 and rng.random() < 0.005:
            data += b"x" * rng.randint(1 << 20, 3 << 20) + b"\n"                   # an over-long line
        elif op == 8:
            data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
        elif op == 9:
            lines = bytes(data).split(b"\n")
            rng.shuffle(lines)
            data = bytearray(b"\n".join(lines[: rng.randint(1, max(1, len(lines)))]))
        elif op == 10 and data:
            cut = rng.randrange(len(data))
            data = data[:cut] + bytes(data[cut:]).upper()
    return bytes(data[: 4 << 20])


def target_parse(data: bytes) -> None:
    from logdoctor.ingest import clean_lines
    from logdoctor.parse import parse_lines
    from logdoctor.summary import RunBuilder
    b = RunBuilder("fuzz")
    last = 0
    for ev in parse_lines(clean_lines(io.BytesIO(data), b.add_batch_lines), "fuzz"):
        b.add(ev)
        ev.to_dict()
        last = max(last, ev.end_line or ev.line)
    b.finish(last).to_dict()


_RULES = None


def target_explain(data: bytes) -> None:
    global _RULES
    from logdoctor.diagnose import diagnose
    from logdoctor.ingest import clean_lines
    from logdoctor.parse import parse_lines
    from logdoctor.report import explain_markdown, explain_text
    from logdoctor.rules import builtin_rules
    from logdoctor.summary import RunBuilder
    if _RULES is None:
        _RULES = list(builtin_rules())
    b = RunBuilder("fuzz")
    report = diagnose(parse_lines(clean_lines(io.BytesIO(data), b.add_batch_lines), "fuzz"), _RULES, "fuzz", b)
    report.to_dict()
    explain_text(report, color=True)
    explain_markdown(report)


def target_rule(data: bytes) -> None:
    from logdoctor.rules import RuleError, load_rule
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "rules" / "unknown" / "fuzzed.yaml"
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
        try:
            load_rule(p)
        except RuleError:
            pass


TARGETS = {"parse": target_parse, "explain": target_explain, "rule": target_rule}


def worker(args: tuple[int, str, float, int, float]) -> tuple[dict[str, int], list[str]]:
    seed, targets, deadline, limit, slow = args
    rng = random.Random(seed)
    seeds, rule_seeds = corpus(), rule_corpus()
    counts = {t: 0 for t in targets.split(",")}
    names = list(counts)
    weights = [{"parse": 6, "explain": 3, "rule": 1}.get(t, 1) for t in names]
    crashes: list[str] = []
    n = 0
    while time.time() < deadline and n < limit:
        name = rng.choices(names, weights)[0]
        base = rule_seeds if name == "rule" else seeds
        data = mutate(rng, base, whole=name == "rule") if rng.random() < 0.95 else \
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000)))
        t0 = time.perf_counter()
        try:
            TARGETS[name](data)
            problem = None
        except Exception:
            problem = traceback.format_exc(limit=6)
        elapsed = time.perf_counter() - t0
        if problem is None and elapsed > slow:
            problem = f"slow: {elapsed:.1f} s"
        if problem is not None:
            digest = hashlib.sha1(data).hexdigest()[:16]
            CRASH_DIR.mkdir(parents=True, exist_ok=True)
            (CRASH_DIR / f"{name}-{digest}.bin").write_bytes(data)
            crashes.append(f"{name}-{digest}: {problem.strip().splitlines()[-1]}")
        counts[name] += 1
        n += 1
    return counts, crashes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--inputs", type=int, default=10**12, help="stop after this many inputs per worker")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--target", default="parse,explain,rule", help="comma-separated: parse, explain, rule")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--slow", type=float, default=10.0, help="seconds after which one input counts as a hang")
    a = ap.parse_args()
    t0 = time.time()
    deadline = t0 + a.seconds
    args = [(a.seed + i, a.target, deadline, a.inputs, a.slow) for i in range(a.jobs)]
    if a.jobs == 1:
        results = [worker(args[0])]
    else:
        with mp.get_context("fork").Pool(a.jobs) as pool:
            results = pool.map(worker, args)
    total: dict[str, int] = {}
    crashes: list[str] = []
    for counts, cr in results:
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        crashes += cr
    elapsed = time.time() - t0
    n = sum(total.values())
    print(f"{n} inputs in {elapsed:.0f} s ({n / elapsed:.0f}/s): " + ", ".join(f"{k} {v}" for k, v in total.items()))
    print(f"crashes: {len(crashes)}")
    for c in crashes[:50]:
        print("  " + c)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
