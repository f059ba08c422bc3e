"""The benchmark table: every speed and memory goal of logdoctor, measured in one run, relative to a
baseline measured in the same run (machines are noisy; ratios travel).

    python bench/table.py                 # ~3-5 minutes on 2 cores: 100 MB logs, 2,000 small logs
    python bench/table.py --big           # adds the 1 GB and 2 GB logs (and 10,000 small logs)

Rows: explain latency on a 5k-line launch log vs `python -c pass`, and on a first run (empty caches) vs a
warm one; summary throughput vs `grep -c`, and on the same log with a docker-compose prefix vs plain;
peak RSS of summary / explain as the log grows (and for .gz); batch throughput with 1 vs all cores and
parent RSS as the number of files grows. Prints a Markdown table (pasted into the README).
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_envelope import WRAPPERS, wrap_file  # noqa: E402
from bench_parse import (  # noqa: E402
    best_of,
    locate_logdoctor,
    run,
    write_launch_log,
    write_serving_log,
)

ROWS: list[tuple[str, str, str, str]] = []


def row(metric: str, value: str, goal: str, met: bool | None) -> None:
    ROWS.append((metric, value, goal, "—" if met is None else ("met" if met else "NOT met")))
    print(f"  {metric}: {value}  [{goal}]", file=sys.stderr)


def timed(cmd: list[str], n: int = 5) -> float:
    # stdout to a pipe, not /dev/null: GNU grep stops at the first match when its output is /dev/null
    return best_of(lambda: subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL), n)


def _new_dir(parent: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=parent))


def small_logs(d: Path, n: int, seeds: list[Path]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        shutil.copy(seeds[i % len(seeds)], d / f"run{i:05d}.log")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", action="store_true", help="also 1 GB and 2 GB logs and 10,000 small logs")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    exe = locate_logdoctor()
    root = Path(__file__).resolve().parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="logdoctor-table-", dir=a.workdir))
    cores = os.cpu_count() or 1
    try:
        # --- latency: explain on a 5k-line launch log vs the interpreter's own start --------------------
        launch = tmp / "launch5k.log"
        write_launch_log(launch, 5000)
        subprocess.run([exe, "explain", str(launch)], stdout=subprocess.DEVNULL)  # warm the caches once
        t_pass = timed([sys.executable, "-c", "pass"])
        t_explain = timed([exe, "explain", str(launch)])
        row("python -c pass", f"{t_pass * 1000:.0f} ms", "baseline", None)
        row("explain, 5k-line launch log (process)", f"{t_explain * 1000:.0f} ms = {t_explain / t_pass:.1f}× python -c pass",
            "≤ 10×", t_explain / t_pass <= 10)
        # the first run after install: logdoctor's private cache empty (a new XDG_CACHE_HOME each run), the
        # same command otherwise; paired with warm runs in the same loop so drift cancels
        firsts, warms = [], []
        warm_cache = _new_dir(tmp)  # filled by the first warm run, then reused
        for i in range(10):
            # best_of runs it twice (a warm-up, then the timed run): each first run with a cache directory of its own
            def first() -> None:
                firsts.append(best_of(lambda: subprocess.run([exe, "explain", str(launch)], stdout=subprocess.PIPE,
                                                             env={**os.environ, "XDG_CACHE_HOME": str(_new_dir(tmp))}), 1))

            def warm() -> None:
                warms.append(best_of(lambda: subprocess.run([exe, "explain", str(launch)], stdout=subprocess.PIPE,
                                                            env={**os.environ, "XDG_CACHE_HOME": str(warm_cache)}), 1))
            for measure in ((first, warm) if i % 2 else (warm, first)):  # whichever runs first in a pair is slower
                measure()
        first, warm = min(firsts), min(warms)  # the best of each, as every other latency here
        row("explain, first run after install (empty caches)",
            f"{first * 1000:.0f} ms vs {warm * 1000:.0f} ms warm = +{max(0.0, first - warm) * 1000:.0f} ms",
            "no extra cost (≤ 1.1× warm)", first <= 1.1 * warm)
        from logdoctor.run.fold import summarize_source
        t_inproc = best_of(lambda: summarize_source(str(launch)))
        row("parse + summary, 5k-line launch log (in-process)", f"{t_inproc * 1000:.0f} ms", "< 100 ms", t_inproc < 0.1)
        code = "import sys, logdoctor.cli; sys.exit(0 if 'polars' not in sys.modules else 1)"
        no_polars = subprocess.run([sys.executable, "-c", code]).returncode == 0
        row("explain path imports polars", "no" if no_polars else "yes", "no", no_polars)

        # --- throughput and memory on serving logs ------------------------------------------------------------
        sizes = [100, 1000, 2000] if a.big else [100, 300]
        rss: dict[int, float] = {}
        for mb in sizes:
            log = tmp / f"serve{mb}.log"
            write_serving_log(log, mb)
            subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)  # page cache for both tools
            if mb == sizes[0]:
                t_grep = timed(["grep", "-c", "Decode batch", str(log)], 3)
                s = min((run([exe, "summary", str(log), "--format", "json"], tmp / "out.json") for _ in range(3)),
                        key=lambda r: r["wall"])  # best of 3, as grep's figure is
                ratio = (s["wall"]) / t_grep
                row(f"grep -c, {mb} MB", f"{mb / t_grep:.0f} MB/s", "baseline", None)
                row(f"summary, {mb} MB", f"{mb / s['wall']:.0f} MB/s = 1/{ratio:.0f} of grep -c", "≥ 1/10 of grep -c",
                    ratio <= 10)
                e = run([exe, "explain", str(log), "--format", "json"], tmp / "out.json")
                row(f"explain, {mb} MB", f"{mb / e['wall']:.0f} MB/s, peak RSS {e['rss_kb'] / 1024:.0f} MB", "streaming", None)
                # the same log as `docker compose logs` gives it: `sglang-1  | ` before every line
                composed = tmp / f"serve{mb}.compose.log"
                wrap_file(log, composed, WRAPPERS["compose"])
                subprocess.run(["cat", str(composed)], stdout=subprocess.DEVNULL)
                plain_s, wrapped_s = [], []
                for _ in range(3):  # paired, alternating: drift cancels
                    plain_s.append(run([exe, "summary", str(log), "--format", "json"], tmp / "out.json")["wall"])
                    wrapped_s.append(run([exe, "summary", str(composed), "--format", "json"], tmp / "out.json")["wall"])
                slower = min(wrapped_s) / min(plain_s)
                row(f"summary, {mb} MB with a docker-compose prefix on each line",
                    f"{mb / min(wrapped_s):.0f} MB/s = {slower:.2f}× the plain log's time", "same as plain (≤ 1.1×)",
                    slower <= 1.1)
                composed.unlink()
                gz = tmp / f"serve{mb}.log.gz"
                with open(log, "rb") as fi, gzip.open(gz, "wb", compresslevel=1) as fo:
                    shutil.copyfileobj(fi, fo, 4 << 20)
                g = run([exe, "summary", str(gz), "--format", "json"], tmp / "out.json")
                row(f"summary, {mb} MB as .gz", f"{mb / g['wall']:.0f} MB/s, peak RSS {g['rss_kb'] / 1024:.0f} MB",
                    "flat RSS", None)
                gz.unlink()
            r = run([exe, "summary", str(log), "--format", "json"], tmp / "out.json")
            rss[mb] = r["rss_kb"] / 1024
            row(f"summary peak RSS, {mb} MB log", f"{rss[mb]:.0f} MB", "< 200 MB, flat in size", rss[mb] < 200)
            if mb >= 2000:
                e = run([exe, "explain", str(log), "--format", "json"], tmp / "out.json")
                row(f"explain peak RSS, {mb} MB log", f"{e['rss_kb'] / 1024:.0f} MB ({mb / e['wall']:.0f} MB/s)",
                    "constant memory", e["rss_kb"] / 1024 < 200)
            log.unlink()
        growth = rss[sizes[-1]] / rss[sizes[0]]
        row(f"RSS growth {sizes[0]} → {sizes[-1]} MB", f"×{growth:.2f}", "flat (≤ ×1.25)", growth <= 1.25)

        # --- batch: many small launch logs -----------------------------------------------------------------
        seeds = sorted((root / "fixtures" / "logs").glob("*.log"))
        counts = [2000, 10000] if a.big else [500, 2000]
        parent_rss = {}
        for n in counts:
            d = tmp / f"many{n}"
            small_logs(d, n, seeds)
            one = run([exe, "batch", str(d), "--format", "csv", "-o", str(tmp / "b.csv"), "--jobs", "1", "--no-progress"],
                      tmp / "out")
            parent_rss[n] = one["rss_kb"] / 1024
            if n == counts[-1]:
                alln = run([exe, "batch", str(d), "--format", "csv", "-o", str(tmp / "b.csv"), "--jobs", str(cores),
                            "--no-progress"], tmp / "out")
                row(f"batch {n} launch logs, --jobs 1", f"{n / one['wall']:.0f} logs/s", "baseline", None)
                row(f"batch {n} launch logs, --jobs {cores}", f"{n / alln['wall']:.0f} logs/s = ×{one['wall'] / alln['wall']:.2f}",
                    "grows with --jobs", one["wall"] / alln["wall"] > 1.2)
            shutil.rmtree(d)
        g = parent_rss[counts[-1]] / parent_rss[counts[0]]
        row(f"batch peak RSS, {counts[0]} → {counts[-1]} files", f"{parent_rss[counts[0]]:.0f} → {parent_rss[counts[-1]]:.0f} MB",
            "does not grow with files (≤ ×1.25)", g <= 1.25)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nMeasured {time.strftime('%Y-%m-%d')} on {cores} cores, Python {sys.version.split()[0]}"
          f"{' (--big)' if a.big else ''}.\n")
    print("| metric | value | goal | |")
    print("|---|---|---|---|")
    for r in ROWS:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")


if __name__ == "__main__":
    main()
