#!/usr/bin/env python3
"""Throughput / memory benchmark for logdoctor on synthetic SGLang v0.5.x logs.

    python bench/bench_parse.py [--size-mb N] [--sizes 100,1000] [--keep] [--workdir DIR] [--json]

Not a test: run it, quote the figures. See bench/README.md for what each number means.
"""
from __future__ import annotations

import argparse
import calendar
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

MB = 1 << 20
KV_TOKENS = 1_000_000
T0 = calendar.timegm((2025, 12, 2, 10, 0, 0))
SS = [f"{i:02d}" for i in range(60)]
CAPTURE_BS = [1, 2, 4, 8] + list(range(16, 257, 8))
# Runs one command, stdout to a file, and prints the command's OWN peak RSS (os.wait4 on that pid):
# the wrapper imports nothing, so the pre-exec high-water mark a child inherits is just a bare interpreter's.
WRAPPER = r"""import os, sys, time
t = time.perf_counter()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)])
_, status, ru = os.wait4(pid, 0)
print(time.perf_counter() - t, ru.ru_maxrss, os.waitstatus_to_exitcode(status))
"""



@contextmanager
def scratch_dir(prefix: str, parent: Path | None, keep: bool) -> Iterator[Path]:
    """A temporary directory for one benchmark run, removed afterwards unless `keep` (then its path is said)."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield work
    finally:
        if keep:
            print(f"bench: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

def ts(t: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


# ---------------------------------------------------------------------------------- serving log
def preamble(tp: int = 2) -> tuple[list[str], int]:
    """Launch of a TP2 Llama-3.1-8B server in the v0.5.6 shape (catalog section b); returns lines, end time."""
    L: list[str] = []
    def r(t: int, msg: str) -> None:  # one line per rank
        L.extend(f"[{ts(T0 + t)} TP{k}] {msg}" for k in range(tp))
    L.append(f"[{ts(T0)}] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto', "
             "load_format='auto', dtype='auto', kv_cache_dtype='auto', quantization=None, device='cuda', host='127.0.0.1', "
             "port=30000, mem_fraction_static=0.871, max_running_requests=None, max_total_tokens=None, chunked_prefill_size=8192, "
             f"max_prefill_tokens=16384, schedule_policy='fcfs', tp_size={tp}, pp_size=1, random_seed=394162441, log_level='info', "
             "decode_log_interval=40, dp_size=1, attention_backend=None, disable_cuda_graph=False, cuda_graph_max_bs=256)")
    r(5, "Init torch distributed begin.")
    r(6, "sglang is using nccl==2.27.3")
    r(7, "Init torch distributed ends. mem usage=0.45 GB")
    r(7, "Load weight begin. avail mem=78.61 GB")
    L.append("Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\rLoading safetensors checkpoint "
             "shards:  50% Completed | 2/4 [00:09<00:09,  4.61s/it]\rLoading safetensors checkpoint shards: 100% Completed"
             " | 4/4 [00:21<00:00,  5.29s/it]")
    r(30, "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.98 GB, mem usage=7.63 GB.")
    r(30, f"KV Cache is allocated. #tokens: {KV_TOKENS}, K size: 30.52 GB, V size: 30.52 GB")
    r(30, "Memory pool end. avail mem=9.85 GB")
    r(31, "Capture cuda graph begin. This can take up to several minutes. avail mem=9.70 GB")
    L.append(f"[{ts(T0 + 31)} TP0] Capture cuda graph bs {CAPTURE_BS}")
    n = len(CAPTURE_BS)
    L.append("\r".join(f"Capturing batches (bs={b} avail_mem={9.60 - i * 0.015:.2f} GB): {100 * i // n:3d}%|"
                       f"{'█' * (10 * i // n):<10}| {i}/{n} [00:{i // 3:02d}<00:{(n - i) // 3:02d},  2.94it/s]"
                       for i, b in enumerate(reversed(CAPTURE_BS))))
    r(45, "Capture cuda graph end. Time elapsed: 14.10 s. mem usage=0.65 GB. avail mem=9.05 GB.")
    L.append(f"[{ts(T0 + 46)} TP0] max_total_num_tokens={KV_TOKENS}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
             "max_running_requests=4096, context_len=131072, available_gpu_mem=9.05 GB")
    for msg in ("Started server process [12345]", "Waiting for application startup.", "Application startup complete.",
                "Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
                '127.0.0.1:40000 - "GET /get_model_info HTTP/1.1" 200 OK'):
        L.append(f"[{ts(T0 + 47)}] INFO:     {msg}")
    L.append(f"[{ts(T0 + 48)} TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
             "#running-req: 0, #queue-req: 0, ")
    L.append(f'[{ts(T0 + 49)}] INFO:     127.0.0.1:40002 - "POST /generate HTTP/1.1" 200 OK')
    L.append(f"[{ts(T0 + 49)}] The server is fired up and ready to roll!")
    return L, T0 + 60


Chunk = tuple[str, int, int, float, int]  # template ({0}..{7} = timestamps), #decode, #prefill, max usage, max queue


def steady_pool(rng: random.Random, n: int = 1024) -> list[Chunk]:
    """n chunks of 8 seconds each: one decode line a second, ~1 prefill per 8 decodes, some access lines.

    Load follows one random walk through the pool, so consecutive chunks are continuous."""
    pool: list[Chunk] = []
    running, per_req, queue = 20, 600.0, 0
    for c in range(n):
        lines: list[str] = []
        max_u, max_q, n_pre = 0.0, 0, 0
        target = 210 - 190 * math.cos(2 * math.pi * c / n)  # one load cycle; the pool wraps around smoothly
        for s in range(8):
            running = min(420, max(1, running + round((target - running) * 0.05 + rng.gauss(0, 4))))
            per_req = min(2400.0, max(150.0, per_req + (900 - per_req) * 0.02 + rng.gauss(0, 60)))
            tok = min(int(running * per_req * rng.uniform(0.97, 1.03)), int(KV_TOKENS * 0.97))
            usage = f"{tok / KV_TOKENS:.2f}"
            queue = max(0, round(queue * 0.8 + max(0, running - 340) * 0.8 + rng.gauss(0, 2)))
            max_u, max_q = max(max_u, float(usage)), max(max_q, queue)
            if rng.random() < 1 / 8:
                n_pre += 1
                nseq = rng.randint(1, 6)
                lines.append(f"[{{{s}}} TP0] Prefill batch, #new-seq: {nseq}, #new-token: {min(8192, nseq * rng.randint(7, 3000))}, "
                             f"#cached-token: {rng.choice((0, 0, rng.randint(1, 4096)))}, token usage: {usage}, "
                             f"#running-req: {running}, #queue-req: {queue}, ")
            tput = running * 48.0 / (1 + running / 180) * rng.uniform(0.85, 1.15)
            lines.append(f"[{{{s}}} TP0] Decode batch, #running-req: {running}, #token: {tok}, token usage: {usage}, "
                         f"cuda graph: {running <= CAPTURE_BS[-1]}, gen throughput (token/s): {tput:.2f}, #queue-req: {queue}, ")
            if rng.random() < 0.3:
                path = rng.choice(("/generate", "/generate", "/v1/chat/completions", "/health"))
                verb = "GET" if path == "/health" else "POST"
                lines.append(f'[{{{s}}}] INFO:     127.0.0.1:{rng.randint(32768, 60999)} - "{verb} {path} HTTP/1.1" 200 OK')
        pool.append(("\n".join(lines) + "\n", 8, n_pre, max_u, max_q))
    return pool


def write_serving_log(path: Path, size_mb: float, seed: int = 0) -> dict[str, Any]:
    """Streams >= size_mb MiB to path in ~4 MiB writes; returns the ground truth it wrote."""
    rng = random.Random(seed)
    head, t = preamble()
    pool = steady_pool(rng)
    target, buf, buf_len = int(size_mb * MB), ["\n".join(head) + "\n"], 0
    written = len(buf[0].encode())
    truth = {"decode": 0, "prefill": 1, "peak_token_usage": 0.0, "peak_queue_req": 0}
    i = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        while written < target:
            tmpl, n_dec, n_pre, max_u, max_q = pool[i]
            i = (i + 1) % len(pool)
            sec = t % 60
            if sec <= 52:  # cheap: same minute for all 8 seconds
                stem = ts(t)[:-2]
                chunk = tmpl.format(*[stem + SS[sec + k] for k in range(8)])
            else:
                chunk = tmpl.format(*[ts(t + k) for k in range(8)])
            t += 8 + (rng.randrange(600) if rng.random() < 0.001 else 0)  # rare idle gaps
            buf.append(chunk)
            buf_len += len(chunk)
            written += len(chunk)
            truth["decode"] += n_dec
            truth["prefill"] += n_pre
            truth["peak_token_usage"] = max(truth["peak_token_usage"], max_u)
            truth["peak_queue_req"] = max(truth["peak_queue_req"], max_q)
            if buf_len >= 4 * MB:
                f.write("".join(buf))
                buf, buf_len = [], 0
        f.write("".join(buf))
    truth["bytes"] = path.stat().st_size
    return truth


# ----------------------------------------------------------------------------------- launch log
def write_launch_log(path: Path, n_lines: int = 5000, tp: int = 8) -> None:
    """A failed TP8 launch with NCCL_DEBUG=INFO: per-rank lines x8, tqdm, NCCL chatter, OOM traceback at the end."""
    rng = random.Random(1)
    host, pids = "gpu-node-07", [2214 + 37 * k for k in range(tp)]
    def r(t: int, msg: str) -> list[str]:
        return [f"[{ts(T0 + t)} TP{k}] {msg}" for k in range(tp)]
    def nccl(k: int, msg: str) -> str:
        return f"{host}:{pids[k]}:{pids[k]} [{k}] NCCL INFO {msg}"
    head = [f"[{ts(T0)}] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', tp_size={tp}, "
            "mem_fraction_static=0.9, cuda_graph_max_bs=512, chunked_prefill_size=8192, log_level='info')"]
    head += r(5, "Init torch distributed begin.")
    head += [nccl(0, "NCCL version 2.27.3+cuda12.9")] + [nccl(k, "cudaDriverVersion 12080") for k in range(tp)]
    head += [nccl(k, "Bootstrap: Using eth0:10.0.0.7<0>") for k in range(tp)]
    fill_at = len(head)
    comm = [f"0x{rng.getrandbits(40):x}" for _ in range(tp)]
    tail = [nccl(k, f"ncclCommInitRank comm {comm[k]} rank {k} nranks {tp} cudaDev {k} nvmlDev {k} busId {k + 1}b000 "
                    "commId 0x9b1c4e2f8a7d6c5b - Init COMPLETE") for k in range(tp)]
    tail += r(6, "sglang is using nccl==2.27.3") + r(9, "Init torch distributed ends. mem usage=1.12 GB")
    tail += r(9, "Load weight begin. avail mem=77.86 GB")
    tail += ["\r".join(f"Loading safetensors checkpoint shards: {100 * i // 30:3d}% Completed | {i}/30 [00:{i:02d}<00:{30 - i:02d}, "
                       " 1.02it/s]" for i in range(31))]
    tail += r(41, "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=61.37 GB, mem usage=16.49 GB.")
    tail += r(42, "KV Cache is allocated. #tokens: 1572864, K size: 30.00 GB, V size: 30.00 GB")
    tail += r(42, "Memory pool end. avail mem=0.91 GB")
    tail += r(43, "Capture cuda graph begin. This can take up to several minutes. avail mem=0.88 GB")
    tail += [f"[{ts(T0 + 43)} TP0] Capture cuda graph bs {CAPTURE_BS}"]
    tail += [f"Capturing batches (bs={b} avail_mem={0.85 - 0.01 * i:.2f} GB): {100 * i // len(CAPTURE_BS):3d}%|          | "
             f"{i}/{len(CAPTURE_BS)} [00:0{i}<00:40,  1.12it/s]" for i, b in enumerate(reversed(CAPTURE_BS[-6:]))]
    cg = "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py"
    oom = ("CUDA out of memory. Tried to allocate 1.02 GiB. GPU 3 has a total capacity of 79.19 GiB of which 312.00 MiB is "
           "free. Process 99871 has 78.87 GiB memory in use. Of the allocated memory 74.90 GiB is allocated by PyTorch, "
           "and 417.28 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    tail += [f"[{ts(T0 + 47)} TP3] Scheduler hit an exception: Traceback (most recent call last):",
             f'  File "{cg}", line 391, in __init__', "    self.capture()",
             f'  File "{cg}", line 498, in capture', "    ) = self.capture_one_batch_size(bs, forward)",
             f'  File "{cg}", line 659, in run_once', "    logits_output_or_pp_proxy_tensors = forward(",
             f"torch.OutOfMemoryError: {oom}", "", "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):",
             '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2719, in run_scheduler_process',
             "    scheduler = Scheduler(", f'  File "{cg}", line 393, in __init__', "    raise Exception(",
             f"Exception: Capture cuda graph failed: {oom}", "Possible solutions:",
             "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
             "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
             "3. disable torch compile by not using --enable-torch-compile",
             "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
             "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ", "",
             f"[{ts(T0 + 47)}] Received sigquit from a child process. It usually means the child failed."]
    filler: list[str] = []
    j = 0
    while len(head) + len(filler) + len(tail) < n_lines:  # ring / tree channel setup of several communicators
        k, ch = j % tp, (j // tp) % 24
        filler.append(nccl(k, f"Channel {ch:02d}/0 : {k}[{k}] -> {(k + 1) % tp}[{(k + 1) % tp}] via P2P/CUMEM/read")
                      if (j // (tp * 24)) % 2 == 0 else
                      nccl(k, f"Channel {ch:02d}/24 :    " + "   ".join(str(x) for x in range(tp))))
        j += 1
    path.write_text("\n".join(head[:fill_at] + filler + tail) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------- measurement
def run(cmd: list[str], out: Path) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *cmd], capture_output=True, text=True, check=True)
    wall, rss_kb, rc = p.stdout.split()
    res: dict[str, Any] = {"wall": float(wall), "rss_kb": int(rss_kb), "rc": int(rc)}
    if res["rc"] not in (0, 1) and cmd[0] != "grep":  # 1 = a failure was diagnosed
        sys.exit(f"bench: command failed (exit {res['rc']}): {' '.join(cmd)}")
    return res


def best_of(fn: Callable[[], None], n: int = 5) -> float:
    fn()  # warm-up
    return min(timeit.repeat(fn, number=1, repeat=n))


def locate_logdoctor() -> str:
    exe = Path(sys.executable).parent / "logdoctor"
    found = str(exe) if exe.is_file() and os.access(exe, os.X_OK) else shutil.which("logdoctor")
    try:
        import logdoctor.parse.parse  # noqa: F401
        import logdoctor.run.fold  # noqa: F401
    except Exception as e:  # noqa: BLE001
        sys.exit(f"bench: cannot import logdoctor.parse/logdoctor.run.fold ({type(e).__name__}: {e}); "
                 "install the package (pip install -e .) in this interpreter")
    if not found:
        sys.exit(f"bench: no `logdoctor` executable next to {sys.executable} or on PATH; install the package (pip install -e .)")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=None,
                    help="MiB size for the logdoctor/grep ratio (default: smallest of --sizes; added to --sizes)")
    ap.add_argument("--sizes", default="100,300", help="comma-separated MiB sizes for the RSS-vs-size check")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    ap.add_argument("--workdir", type=Path, default=None, help="parent dir for the temp dir (default: system temp)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args()
    exe = locate_logdoctor()
    from logdoctor.parse.parse import parse_source
    from logdoctor.run.fold import summarize

    sizes = {float(s) for s in a.sizes.split(",") if s.strip()}
    a.size_mb = min(sizes) if a.size_mb is None else a.size_mb
    sizes = sorted(sizes | {a.size_mb})
    rows: list[tuple[str, str, str, str]] = []  # metric, value, goal, met
    raw: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "logdoctor": exe, "sizes": {}}
    def row(metric: str, value: str, goal: str = "", met: bool | None = None) -> None:
        rows.append((metric, value, goal, "" if met is None else ("yes" if met else "NO")))
    with scratch_dir("logdoctor-bench-", a.workdir, a.keep) as work:
        out = work / "stdout"
        base = [run([sys.executable, "-c", "pass"], out) for _ in range(3)]
        raw["python_c_pass"] = {"wall": min(b["wall"] for b in base), "rss_kb": min(b["rss_kb"] for b in base)}
        row("python -c pass", f"{raw['python_c_pass']['wall'] * 1e3:.0f} ms, {raw['python_c_pass']['rss_kb'] / 1024:.0f} MB RSS")
        for size in sizes:
            log = work / f"serving-{size:g}MB.log"
            t = time.perf_counter()
            truth = write_serving_log(log, size)
            gen_s = time.perf_counter() - t
            mb = truth["bytes"] / MB
            with open(log, "rb") as f:  # page cache warm for both tools
                while f.read(16 * MB):
                    pass
            g = min((run(["grep", "-c", "Decode batch", str(log)], out) for _ in range(3)), key=lambda r: r["wall"])
            grep_count = int(out.read_text().strip() or 0)
            s = run([exe, "summary", str(log), "--format", "json"], out)
            try:
                batches = json.loads(out.read_text())["batches"]
            except (ValueError, KeyError) as e:
                sys.exit(f"bench: `logdoctor summary --format json` gave no JSON `batches` object ({e!r})")
            raw["sizes"][f"{size:g}"] = {"mb": mb, "gen_s": gen_s, "grep": g, "summary": s, "truth": truth,
                                          "grep_count": grep_count, "batches": batches}
            ratio = (mb / s["wall"]) / (mb / g["wall"])
            row(f"generate {mb:.0f} MB", f"{gen_s:.1f} s ({mb / gen_s:.0f} MB/s)")
            row(f"grep -c @ {mb:.0f} MB", f"{g['wall']:.2f} s ({mb / g['wall']:.0f} MB/s)")
            row(f"logdoctor summary @ {mb:.0f} MB", f"{s['wall']:.2f} s ({mb / s['wall']:.1f} MB/s)")
            if size == a.size_mb:
                row(f"logdoctor/grep throughput @ {mb:.0f} MB", f"1/{1 / ratio:.1f}", ">= 1/10", ratio >= 0.1)
            row(f"peak RSS @ {mb:.0f} MB", f"{s['rss_kb'] / 1024:.1f} MB", "< 200 MB", s["rss_kb"] < 200 * 1024)
            dec = batches.get("decode_count", batches.get("count"))  # `count` may include prefill batches
            ok = (grep_count == truth["decode"] == dec and batches.get("peak_token_usage") == truth["peak_token_usage"]
                  and batches.get("peak_queue_req") == truth["peak_queue_req"])
            row(f"summary matches truth @ {mb:.0f} MB", f"decodes {dec}/{truth['decode']}, usage {batches.get('peak_token_usage')}/"
                f"{truth['peak_token_usage']}, queue {batches.get('peak_queue_req')}/{truth['peak_queue_req']}", "equal", ok)
            if not a.keep:
                log.unlink()
        rss = [raw["sizes"][f"{z:g}"]["summary"]["rss_kb"] for z in sizes]
        if len(sizes) > 1:
            row(f"RSS growth {sizes[0]:g}->{sizes[-1]:g} MB", f"x{rss[-1] / rss[0]:.2f}", "<= x1.25 (flat)", rss[-1] <= 1.25 * rss[0])
        launch = work / "launch-tp8.log"
        write_launch_log(launch)
        best = best_of(lambda: summarize(parse_source(str(launch))).to_dict())
        raw["launch_5000_lines_s"] = best
        row("parse+summarize 5000-line launch (in-process, best of 5)", f"{best * 1e3:.1f} ms", "< 100 ms", best < 0.1)
    if a.json:
        print(json.dumps({"rows": [dict(zip(("metric", "value", "goal", "met"), r)) for r in rows], "raw": raw}, indent=2))
        return
    w = [max(len(r[i]) for r in rows + [("metric", "value", "goal", "met")]) for i in range(4)]
    print(f"logdoctor bench - python {raw['python']}, {raw['cpus']} CPUs")
    for r in [("metric", "value", "goal", "met"), tuple("-" * x for x in w)] + rows:
        print("  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip())


if __name__ == "__main__":
    main()
