"""The two batch engines on one machine: logs/s for `batch --jobs 2` (worker processes) and for the Ray
engine (`logdoctor.fleet` on `ray.init(num_cpus=2)`), on the same generated logs, plus what Ray costs
to start. The figures feed the "10^6 logs in object storage" estimate in bench/README.md.

    python bench/fleet.py                  # 400 full launch logs + 2,000 short ones, ~10 min on 2 busy cores
    python bench/fleet.py --full 200 --short 1000 --json

Rows (one run, same machine, same files):
- `local, N … logs`: wall time of `logdoctor batch DIR --jobs 2 --format csv -o FILE` (one process,
  start-up included), as logs/s.
- `ray start`: `ray.init(num_cpus=2)` in this process (the head node, its raylet and object store).
- `ray first dataset`: the first, tiny pipeline after the start (Ray Data's executor and the worker
  processes, which import logdoctor and receive the rule set): paid once per job.
- `ray, N … logs`: `fleet.records(DIR)` on the warm Ray (listing, reading, diagnosing, rows back to the
  driver), as logs/s; and the same through the CLI (`batch --engine ray`, which starts its own Ray).
Nothing here asserts on timings.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_parse import locate_logdoctor, write_launch_log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def full_logs(d: Path, n: int) -> None:
    """n copies of the 5,000-line failed TP8 launch (bench_parse's generator), distinct names."""
    d.mkdir(parents=True)
    seed = d / "seed.log"
    write_launch_log(seed, 5000)
    data = seed.read_bytes()
    seed.unlink()
    for i in range(n):
        (d / f"launch{i:05d}.log").write_bytes(data)


def short_logs(d: Path, n: int) -> None:
    """n short launch fragments: the fixture logs, round robin (what table.py's batch rows use)."""
    d.mkdir(parents=True)
    seeds = sorted((ROOT / "fixtures" / "logs").glob("*.log"))
    for i in range(n):
        shutil.copy(seeds[i % len(seeds)], d / f"run{i:05d}.log")


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1, 2):
        sys.exit(f"bench: {' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", type=int, default=400, help="full 5,000-line launch logs (default 400)")
    ap.add_argument("--short", type=int, default=2000, help="short launch fragments (default 2,000)")
    ap.add_argument("--cpus", type=int, default=2, help="--jobs for the local engine, num_cpus for Ray (default 2)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    exe = locate_logdoctor()
    tmp = Path(tempfile.mkdtemp(prefix="logdoctor-fleet-", dir=a.workdir))
    out: dict[str, Any] = {"cpus": a.cpus}
    try:
        sets = {"full": (a.full, full_logs), "short": (a.short, short_logs)}
        for name, (n, make) in sets.items():
            make(tmp / name, n)
        for name, (n, _) in sets.items():
            t = wall([exe, "batch", str(tmp / name), "--jobs", str(a.cpus), "--format", "csv",
                      "-o", str(tmp / "local.csv"), "--no-progress"])
            out[f"local_{name}_logs_per_s"] = n / t
            print(f"  local, {n} {name} logs: {n / t:.0f} logs/s ({t:.1f} s)", file=sys.stderr)

        import ray

        import logdoctor.fleet as fleet
        t = time.perf_counter()
        fleet.init(num_cpus=a.cpus)
        out["ray_start_s"] = time.perf_counter() - t
        t = time.perf_counter()
        fleet.records([str(ROOT / "fixtures" / "logs" / "v0.2-tp2.log")])
        out["ray_first_dataset_s"] = time.perf_counter() - t
        print(f"  ray start {out['ray_start_s']:.1f} s, first dataset {out['ray_first_dataset_s']:.1f} s", file=sys.stderr)
        for name, (n, _) in sets.items():
            t = time.perf_counter()
            got = fleet.records([str(tmp / name)])
            t = time.perf_counter() - t
            assert len(got) == n, (name, len(got))
            out[f"ray_{name}_logs_per_s"] = n / t
            print(f"  ray, {n} {name} logs: {n / t:.0f} logs/s ({t:.1f} s)", file=sys.stderr)
        ray.shutdown()
        n = a.short
        t = wall([exe, "batch", str(tmp / "short"), "--engine", "ray", "--jobs", str(a.cpus), "--format", "csv",
                  "-o", str(tmp / "ray.csv"), "--no-progress"])
        out["cli_ray_short_s"] = t
        print(f"  batch --engine ray, {n} short logs, Ray start included: {t:.1f} s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"\nMeasured {time.strftime('%Y-%m-%d')} on {a.cpus} CPUs, Python {sys.version.split()[0]}.\n")
    def rate(v: float) -> str:
        return f"{v:.1f}" if v < 10 else f"{v:.0f}"
    print("| engine | full 5k-line launch logs | short fragments |")
    print("|---|---|---|")
    print(f"| local, `batch --jobs {a.cpus}` | {rate(out['local_full_logs_per_s'])} logs/s | "
          f"{rate(out['local_short_logs_per_s'])} logs/s |")
    print(f"| Ray, `num_cpus={a.cpus}` (warm) | {rate(out['ray_full_logs_per_s'])} logs/s | "
          f"{rate(out['ray_short_logs_per_s'])} logs/s |")
    print(f"\nRay start {out['ray_start_s']:.1f} s + first dataset {out['ray_first_dataset_s']:.1f} s; "
          f"`batch --engine ray` on {a.short} short logs, start included: {out['cli_ray_short_s']:.1f} s.")


if __name__ == "__main__":
    main()
