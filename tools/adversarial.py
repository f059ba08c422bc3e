"""The adversarial table: every attack of issue 9, rerunnable, one row each.

    python tools/adversarial.py                      # all attacks, Markdown table on stdout
    python tools/adversarial.py --only cache --json results.json
    python tools/adversarial.py --list
    python tools/adversarial.py --src /tmp/old-checkout   # the same table against another source tree

Each attack runs the real command line in a subprocess, in a fresh temp dir with its own HOME,
XDG_CACHE_HOME and TMPDIR, bounded by a timeout and an address-space cap (RLIMIT_AS). A row passes when
the exit code is allowed, stderr has no traceback / internal error, no process is left behind, and the
attack's own checks hold (the right diagnosis, the planted pickle did not run, the file -o pointed at is
still what it was, time and peak RSS within the attack's bound). Peak RSS is the largest resident set of
the command or any worker it reaped (wait4), so it is measured, not estimated. The attacks themselves
are in adversarial_attacks.py (items 1-4) and adversarial_io.py (5-8). Exit status: 1 if any row FAILs.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import adversarial_attacks  # noqa: F401  (items 1-4 register their rows)
import adversarial_io  # noqa: F401  (items 5-8)
from adversarial_kit import ATTACKS, ROOT, Attack, Outcome, Sandbox, Spec

OUTPUT_CAP = 32 << 20          # bytes of stdout / stderr kept per attack; the rest is counted only
POLL_S = 0.05                  # how often the process group is sampled for its size
DEFAULT_FORBIDDEN = ("Traceback (most recent call last)", "internal error")


def cli_command(src: str | None) -> list[str]:
    """How to start logdoctor: the installed entry point, or the package found in --src."""
    if src:
        boot = f"import sys; sys.path.insert(0, {str(Path(src).resolve())!r}); from logdoctor.cli import main; main()"
        return [sys.executable, "-c", boot]
    installed = ROOT / ".venv" / "bin" / "logdoctor"
    if installed.exists():
        return [str(installed)]
    return [sys.executable, "-m", "logdoctor.cli"]


# ------------------------------------------------------------------------------------------------
# running one command


def _group_members(pgid: int) -> list[tuple[int, int]]:
    """(pid, rss bytes) of every live process in process group `pgid`."""
    out = []
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) != pgid or fields[0] == b"Z":
                continue
            with open(f"/proc/{name}/statm", "rb") as f:
                rss = int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        out.append((int(name), rss))
    return out


class _Monitor(threading.Thread):
    """Samples the command's process group: peak process count, peak summed RSS; can deliver a signal."""

    def __init__(self, pgid: int, send: tuple[int, bool] | None) -> None:
        super().__init__(daemon=True)
        self.pgid, self.send = pgid, send
        self.peak_procs, self.peak_tree_rss = 0, 0
        self.sent_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.is_set():
            members = _group_members(self.pgid)
            self.peak_procs = max(self.peak_procs, len(members))
            self.peak_tree_rss = max(self.peak_tree_rss, sum(r for _, r in members))
            if self.send and self.sent_at is None:
                # Ctrl-C arrives while workers are busy: wait until the pool is up (or 10 s passed)
                waited = time.monotonic() - t0
                if (len(members) >= 3 and waited > 1.0) or waited > 10.0:
                    sig, whole_group = self.send
                    try:
                        os.killpg(self.pgid, sig) if whole_group else os.kill(self.pgid, sig)
                    except ProcessLookupError:
                        pass
                    self.sent_at = waited
            self.stop.wait(POLL_S)


def _drain(stream: Any, sink: bytearray) -> None:
    while True:
        chunk = stream.read(1 << 16)
        if not chunk:
            return
        if len(sink) < OUTPUT_CAP:
            sink += chunk[: OUTPUT_CAP - len(sink)]


def _feed(stream: Any, data: bytes | Callable[[], Iterable[bytes]]) -> None:
    try:
        for chunk in ([data] if isinstance(data, bytes) else data()):
            stream.write(chunk)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the command stopped reading: that is its answer, not ours to report


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP = 24


def _drop_capabilities() -> None:
    """Root without capabilities: file permissions apply to it as to any user, across exec."""
    for cap in range(64):
        if _LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows


def _preexec(mem_bytes: int, spec: Spec) -> Callable[[], None]:
    def setup() -> None:
        if spec.unprivileged:
            _drop_capabilities()
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.umask(spec.umask)
        for fd in spec.close_fds:
            os.close(fd)
    return setup


def execute(cmd: list[str], sb: Sandbox, spec: Spec, timeout: float, mem_bytes: int) -> Outcome:
    """Run one command under the limits; measure time, peak RSS, process count; never raises on its result."""
    pass_fds: tuple[int, ...] = ()
    pipe_writer = None
    args = list(spec.args)
    if spec.pipe_data is not None:  # `<(cat x.gz)`: the command reads a pipe by its /dev/fd name
        r, w = os.pipe()
        pass_fds = (r,)
        args = [a.replace("{PIPE}", f"/dev/fd/{r}") for a in args]
        pipe_writer = threading.Thread(target=_feed, args=(os.fdopen(w, "wb"), spec.pipe_data), daemon=True)
    fifo_reader = _FifoReader(spec.fifo_reader) if spec.fifo_reader else None
    t0 = time.monotonic()
    p = subprocess.Popen(cmd + args, cwd=sb.work, env=sb.env, start_new_session=True,
                         stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds,
                         preexec_fn=_preexec(mem_bytes, spec))
    if pass_fds:
        os.close(pass_fds[0])
    out, err = bytearray(), bytearray()
    readers = [threading.Thread(target=_drain, args=(p.stdout, out), daemon=True),
               threading.Thread(target=_drain, args=(p.stderr, err), daemon=True)]
    if spec.stdin is not None:
        readers.append(threading.Thread(target=_feed, args=(p.stdin, spec.stdin), daemon=True))
    if pipe_writer:
        readers.append(pipe_writer)
    for t in readers:
        t.start()
    monitor = _Monitor(p.pid, spec.signal)
    monitor.start()
    timed_out = threading.Event()

    def on_timeout() -> None:
        timed_out.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    timer = threading.Timer(spec.timeout or timeout, on_timeout)
    timer.start()
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.monotonic() - t0
    timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    time.sleep(0.2)  # workers of a killed parent need a moment to notice
    monitor.stop.set()
    monitor.join()
    leftovers = [pid for pid, _ in _group_members(p.pid)]
    if leftovers:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # our own process group: nothing else is in it
        except ProcessLookupError:
            pass
    for t in readers[:2]:
        t.join(timeout=5)
    return Outcome(exit=p.returncode, stdout=bytes(out), stderr=bytes(err), secs=secs,
                   rss_mb=usage.ru_maxrss / 1024, procs=monitor.peak_procs, timed_out=timed_out.is_set(),
                   leftovers=len(leftovers), fifo_data=fifo_reader.finish() if fifo_reader else None,
                   signal_at=monitor.sent_at)


class _FifoReader:
    """Reads whatever is written to a FIFO while the command runs, without ever blocking on open."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.keep_open = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # so an idle FIFO never reads as EOF
        self.data = bytearray()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                if self.done.is_set():
                    return
                time.sleep(0.02)
                continue
            if not chunk:
                return
            self.data += chunk

    def finish(self) -> bytes:
        self.done.set()
        self.thread.join(timeout=5)
        os.close(self.keep_open)
        os.close(self.fd)
        return bytes(self.data)


# ------------------------------------------------------------------------------------------------
# judging one row


def judge(spec: Spec, o: Outcome) -> list[str]:
    """Why the outcome is wrong (empty when the row passes)."""
    if o.timed_out:
        return [f"timeout after {o.secs:.0f} s"]
    problems = []
    if o.exit not in spec.exits:
        problems.append(f"exit {o.exit}, expected {'/'.join(map(str, sorted(spec.exits)))}")
    err, text = o.stderr.decode("utf-8", "replace"), o.text
    # stdout may quote a traceback from the log as evidence; only stderr speaks for the tool itself
    for bad, where in [(b, err) for b in DEFAULT_FORBIDDEN] + [(b, text) for b in spec.forbid]:
        if bad in where:
            line = next((ln for ln in where.splitlines() if bad in ln), bad)
            problems.append(f"printed {line.strip()[:100]!r}")
    for want in spec.want:
        if want not in text:
            problems.append(f"no {want!r} in the output")
    if o.leftovers:
        problems.append(f"{o.leftovers} process(es) left running")
    if spec.max_s is not None and o.secs > spec.max_s:
        problems.append(f"took {o.secs:.1f} s (bound {spec.max_s:g} s)")
    if spec.max_rss_mb is not None and o.rss_mb > spec.max_rss_mb:
        problems.append(f"peak RSS {o.rss_mb:.0f} MB (bound {spec.max_rss_mb:g} MB)")
    if spec.max_procs is not None and o.procs > spec.max_procs:
        problems.append(f"{o.procs} processes (bound {spec.max_procs})")
    for check in spec.checks:
        try:
            why = check(o)
        except Exception as e:  # a check that cannot even look is a failed row, not a crashed table
            why = f"check failed: {type(e).__name__}: {e}"
        if why:
            problems.append(why)
    return problems


def run_attack(attack: Attack, cmd: list[str], source_root: Path, timeout: float, mem_bytes: int,
               keep: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"attack": attack.name, "item": attack.item, "expected": attack.expected,
                           "result": "", "exit": None, "time_s": None, "peak_rss_mb": None, "procs": None,
                           "status": "n/a", "problems": []}
    why_not = attack.applicable()
    if why_not:
        row["result"] = f"n/a ({why_not})"
        return row
    sb = Sandbox(Path(tempfile.mkdtemp(prefix="logdoctor-adv-")), cmd, source_root)
    try:
        try:
            spec = attack.build(sb)
        except Exception as e:
            row.update(status="FAIL", result=f"setup failed: {type(e).__name__}: {e}")
            return row
        o = execute(cmd, sb, spec, timeout, int(spec.mem_gb * (1 << 30)) if spec.mem_gb else mem_bytes)
        problems = judge(spec, o)
        if sb.marker.exists():
            problems.insert(0, "PLANTED CODE RAN (its marker file exists)")
        row.update(exit=o.exit, time_s=round(o.secs, 2), peak_rss_mb=round(o.rss_mb), procs=o.procs,
                   problems=problems, status="FAIL" if problems else "pass",
                   result=("; ".join(problems) if problems else spec.describe(o)).replace(str(sb.root), "…"))
    finally:
        if keep:
            print(f"kept {sb.root}", file=sys.stderr)
        else:
            shutil.rmtree(sb.root, ignore_errors=True)
    return row


# ------------------------------------------------------------------------------------------------
# the table


def _cell(v: Any) -> str:
    s = "" if v is None else str(v)
    return s.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| # | attack | expected | result | exit | time s | peak RSS MB | pass/FAIL |\n|---|---|---|---|---|---|---|---|\n"
    body = "".join(f"| {r['item']} | {_cell(r['attack'])} | {_cell(r['expected'])} | {_cell(r['result'])} | "
                   f"{_cell(r['exit'])} | {_cell(r['time_s'])} | {_cell(r['peak_rss_mb'])} | {r['status']} |\n"
                   for r in rows)
    passed = sum(r["status"] == "pass" for r in rows)
    failed = sum(r["status"] == "FAIL" for r in rows)
    return head + body + f"\n{passed} pass, {failed} FAIL, {len(rows) - passed - failed} n/a\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", metavar="SUBSTR",
                    help="run the attacks whose name contains SUBSTR (repeatable: any of them)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per attack (some attacks set their own)")
    ap.add_argument("--mem-gb", type=float, default=8.0, help="address-space cap of every command (RLIMIT_AS)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--list", action="store_true", help="list the attacks and what each expects")
    ap.add_argument("--src", metavar="DIR", help="run the logdoctor package in DIR (e.g. an older checkout)")
    ap.add_argument("--keep", action="store_true", help="keep each attack's temp dir (printed on stderr)")
    a = ap.parse_args(argv)
    chosen = [x for x in ATTACKS if not a.only or any(s in x.name for s in a.only)]
    if a.list:
        for x in chosen:
            print(f"{x.item}  {x.name:<44} {x.expected}")
        return 0
    if not chosen:
        print(f"no attack matches {a.only}", file=sys.stderr)
        return 2
    cmd = cli_command(a.src)
    mem_bytes = int(a.mem_gb * (1 << 30))
    rows = []
    for x in chosen:
        row = run_attack(x, cmd, Path(a.src).resolve() if a.src else ROOT, a.timeout, mem_bytes, a.keep)
        rows.append(row)
        print(f"{row['status']:>4}  {x.name}  ({row['time_s']} s)  {row['result'][:120]}", file=sys.stderr)
    print(markdown(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
