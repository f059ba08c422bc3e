"""Mutation fuzzer for ingest → parse → summary → explain, and for rule loading.

    python tools/fuzz.py --seconds 600 --jobs 2            # run for ten minutes on both cores
    python tools/fuzz.py --inputs 200000 --target parse     # a fixed number of inputs, one target
    python tools/fuzz.py --seconds 120 --out /tmp/fuzz-findings   # findings somewhere else

Inputs are mutated from the project's own fixtures (truncation, byte flips, splices, interleaved ranks,
ANSI / CR / NUL / CRLF / invalid UTF-8 insertions, deep exception chains, over-long lines), reshaped
(fuzz_shapes: long runs of one character class, repeated sub-patterns, huge and non-finite numbers in
real field positions, long continuation blocks, stacked envelope prefixes, lone-CR line ends), or
random bytes. Three oracles, each finding saved to --out (default fixtures/fuzz/, which
tests/test_fuzz_regressions.py replays forever):
- crash: an exception escaping the target (a rule file may only raise RuleError), `<target>-<sha>.bin`;
- slow: an input under 1 MB taking over --slow seconds (2 s) twice in a row, or any input reaching
  --hang seconds (then interrupted), `<target>-slow-<sha>.bin`;
- memory: an input under 1 MB raising the worker's peak RSS by over --mem-growth-mb, or hitting the
  worker's address-space cap (--mem-gb, RLIMIT_AS) as MemoryError, `<target>-memory-<sha>.bin`.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing as mp
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_shapes import rule_hazard, shape  # noqa: E402

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


def mutate(rng: random.Random, seeds: list[bytes], whole: bool = False, shape_rate: float = 0.25) -> bytes:
    data = bytearray(rng.choice(seeds) if whole else window(rng, rng.choice(seeds)))
    if rng.random() < shape_rate:  # a shape that byte mutations never make, then maybe a few of those
        data = bytearray(rule_hazard(rng, bytes(data)) if whole else shape(rng, bytes(data)))
        if rng.random() < 0.5:
            return bytes(data)
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
    from logdoctor.parse.parse import parse_lines
    from logdoctor.read.ingest import clean_lines
    from logdoctor.run.fold import RunBuilder
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
    from logdoctor.diagnosis.ranking import diagnose
    from logdoctor.diagnosis.rules import builtin_rules
    from logdoctor.parse.parse import parse_lines
    from logdoctor.read.ingest import clean_lines
    from logdoctor.report.report import explain_markdown, explain_text
    from logdoctor.run.fold import RunBuilder
    if _RULES is None:
        _RULES = list(builtin_rules())
    b = RunBuilder("fuzz")
    report = diagnose(parse_lines(clean_lines(io.BytesIO(data), b.add_batch_lines), "fuzz"), _RULES, "fuzz", b)
    report.to_dict()
    explain_text(report, color=True)
    explain_markdown(report)


def target_rule(data: bytes) -> None:
    from logdoctor.diagnosis.rules import RuleError, load_rule
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "rules" / "unknown" / "fuzzed.yaml"
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
        try:
            load_rule(p)
        except RuleError:
            pass


TARGETS = {"parse": target_parse, "explain": target_explain, "rule": target_rule}
SLOW_LIMIT_BYTES = 1 << 20     # the slow and memory oracles judge inputs under 1 MB


class Hang(BaseException):
    """Raised by SIGALRM inside a target that ran past --hang; BaseException so no `except Exception` eats it."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang()


@dataclass
class Stats:
    counts: dict[str, int] = field(default_factory=dict)
    findings: list[tuple[str, str]] = field(default_factory=list)     # (kind, "file: what")
    max_time: tuple[float, str, int] = (0.0, "", 0)                   # seconds, target, input size
    bytes_run: int = 0


@dataclass
class Options:
    seed: int
    targets: list[str]
    deadline: float
    limit: int
    slow: float
    hang: float
    mem_gb: float
    mem_growth_mb: float
    out: str
    shape_rate: float = 0.25


def _run_once(name: str, data: bytes, hang: float) -> tuple[float, str | None]:
    """(seconds, problem) for one input; `problem` is a traceback line, 'hang' or None."""
    signal.setitimer(signal.ITIMER_REAL, hang)
    t0 = time.perf_counter()
    try:
        TARGETS[name](data)
        problem = None
    except Hang:
        problem = "hang"
    except MemoryError:
        problem = "MemoryError"
    except Exception:
        problem = traceback.format_exc(limit=6).strip().splitlines()[-1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return time.perf_counter() - t0, problem


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _save(out: str, name: str, kind: str, data: bytes) -> str:
    digest = hashlib.sha1(data).hexdigest()[:16]
    fname = f"{name}-{digest}.bin" if kind == "crash" else f"{name}-{kind}-{digest}.bin"
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / fname).write_bytes(data)
    return fname


def worker(opt: Options) -> Stats:
    rng = random.Random(opt.seed)
    signal.signal(signal.SIGALRM, _on_alarm)
    cap = int(opt.mem_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    seeds, rule_seeds = corpus(), rule_corpus()
    st = Stats(counts={t: 0 for t in opt.targets})
    weights = [{"parse": 6, "explain": 3, "rule": 1}.get(t, 1) for t in opt.targets]
    n = 0
    while time.time() < opt.deadline and n < opt.limit:
        name = rng.choices(opt.targets, weights)[0]
        base = rule_seeds if name == "rule" else seeds
        data = mutate(rng, base, name == "rule", opt.shape_rate) if rng.random() < 0.95 else \
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000)))
        rss_before = _maxrss_mb()
        elapsed, problem = _run_once(name, data, opt.hang)
        small = len(data) < SLOW_LIMIT_BYTES
        kind = None
        if problem == "hang":
            kind = "slow"
            problem = f"hang: interrupted after {elapsed:.1f} s ({len(data)} bytes)"
        elif problem == "MemoryError":
            kind = "memory"
            problem = f"MemoryError under the {opt.mem_gb:g} GB cap ({len(data)} bytes)"
        elif problem is not None:
            kind = "crash"
        elif small and elapsed > opt.slow:
            again, _ = _run_once(name, data, opt.hang)  # a busy machine can stall one run; two make a finding
            if again > opt.slow:
                kind, problem = "slow", f"slow: {elapsed:.1f} s and {again:.1f} s ({len(data)} bytes)"
        elif small and _maxrss_mb() - rss_before > opt.mem_growth_mb:
            kind = "memory"
            problem = f"peak RSS grew {_maxrss_mb() - rss_before:.0f} MB ({len(data)} bytes)"
        if kind is not None:
            st.findings.append((kind, f"{_save(opt.out, name, kind, data)}: {problem}"))
        if elapsed > st.max_time[0]:
            st.max_time = (elapsed, name, len(data))
        st.counts[name] += 1
        st.bytes_run += len(data)
        n += 1
    return st


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--inputs", type=int, default=10**12, help="stop after this many inputs per worker")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--target", default="parse,explain,rule", help="comma-separated: parse, explain, rule")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--slow", type=float, default=2.0, help="seconds after which an input under 1 MB is a finding")
    ap.add_argument("--hang", type=float, default=30.0, help="seconds after which any input is interrupted")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="address-space cap of each worker (RLIMIT_AS)")
    ap.add_argument("--mem-growth-mb", type=float, default=512.0,
                    help="peak-RSS growth from one input under 1 MB that is a finding")
    ap.add_argument("--out", default=str(CRASH_DIR), help="where findings are written (default fixtures/fuzz/)")
    ap.add_argument("--shape-rate", type=float, default=0.25, help="share of inputs reshaped by fuzz_shapes")
    a = ap.parse_args()
    targets = [t for t in a.target.split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {unknown}; choose from {', '.join(TARGETS)}")
    t0 = time.time()
    opts = [Options(a.seed + i, targets, t0 + a.seconds, a.inputs, a.slow, a.hang, a.mem_gb, a.mem_growth_mb, a.out,
                    a.shape_rate) for i in range(a.jobs)]
    if a.jobs == 1:
        results = [worker(opts[0])]
    else:
        with mp.get_context("fork").Pool(a.jobs, maxtasksperchild=1) as pool:
            results = pool.map(worker, opts)
    print(report(results, time.time() - t0, a.seed))
    return 1 if any(r.findings for r in results) else 0


def report(results: list[Stats], elapsed: float, seed: int) -> str:
    total: dict[str, int] = {}
    for r in results:
        for k, v in r.counts.items():
            total[k] = total.get(k, 0) + v
    findings = [f for r in results for f in r.findings]
    n = sum(total.values())
    worst = max((r.max_time for r in results), default=(0.0, "", 0))
    by_kind = {k: [w for kind, w in findings if kind == k] for k in ("crash", "slow", "memory")}
    lines = [f"{n} inputs in {elapsed:.0f} s ({n / max(elapsed, 1e-9):.0f}/s, "
             f"{sum(r.bytes_run for r in results) / 1e6:.0f} MB), seed {seed}",
             "per target: " + ", ".join(f"{k} {v}" for k, v in total.items()),
             f"crashes: {len(by_kind['crash'])}", f"slow findings: {len(by_kind['slow'])}",
             f"memory findings: {len(by_kind['memory'])}",
             f"max time per input: {worst[0]:.2f} s ({worst[1]}, {worst[2]} bytes)"]
    for kind, items in by_kind.items():
        lines += [f"  {kind}: {w}" for w in items[:50]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
