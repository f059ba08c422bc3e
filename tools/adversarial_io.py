"""Attacks of issue 9, items 5-8: memory, where -o writes, odd inputs, signals / numbers / stdio / jobs.

Same shape as adversarial_attacks.py (items 1-4): each function builds its files in a Sandbox and returns
the Spec to run; `@attack` adds it to the table.
"""
from __future__ import annotations

import gzip
import os
import re
import signal
import stat
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from adversarial_kit import (
    ARCH,
    CAPTURE_OOM,
    HEALTHY,
    MEM_BOUND_MB,
    SERVING,
    SLOW_BOUND_S,
    Outcome,
    Sandbox,
    Spec,
    attack,
    contains_text,
    corrupt_gzip,
    explain,
    file_state,
    is_parquet,
    link_many,
    mode_is,
    no_glob,
    report_is,
    rows_are,
    rows_summary,
    simple_rule,
    still_kind,
    verdict_summary,
)

# ------------------------------------------------------------------------------------------------
# 5. memory must not grow with the input

def _lines_stream(count: int, line: bytes) -> Callable[[], Iterator[bytes]]:
    def gen() -> Iterator[bytes]:
        for _ in range(count):
            yield line
    return gen


def _dates_stream(count: int) -> Callable[[], Iterator[bytes]]:
    def gen() -> Iterator[bytes]:
        batch = []
        for i in range(count):
            y, rest = divmod(i, 12 * 28)
            batch.append(b"[%04d-%02d-%02d 10:00:00 TP0] Decode batch. #running-req: 1, #token: 9\n"
                         % (1000 + y, rest // 28 + 1, rest % 28 + 1))
            if len(batch) == 10_000:
                yield b"".join(batch)
                batch = []
        yield b"".join(batch)
    return gen


# sizes: enough that memory kept per line or per event shows far above the bound (the issue measured 2,000
# lines of 1 MiB at 5.0 GB, 1,000 invalid-UTF-8 lines at 5.9 GB), small enough to run in a minute or two
_MEM_CASES = {
    "500 lines of 1 MiB": _lines_stream(500, b"[2025-01-01 10:00:00 TP0] " + b"a" * ((1 << 20) - 100) + b"\n"),
    # one invalid byte in 19 (text, not binary, to a sniffer); the emoji makes every decoded line 4 bytes/char
    "250 lines of 1 MiB text with invalid UTF-8 + emoji": _lines_stream(
        250, b"[2025-01-01 10:00:00 TP0] " + ("caf\u00e9 \U0001f600 text, ".encode() + b"\xff") * ((1 << 20) // 20)
        + b"\n"),
    "2M lines with distinct dates": _dates_stream(2_000_000),
    # NCCL WARN lines are telling events (not chatty ones, whose text is cut): each kept with its text
    "60k NCCL WARN lines of 8 KB": _lines_stream(
        60_000, b"host:1:2 [0] NCCL WARN something odd happened " + b"w" * 8192 + b"\n"),
}



def _memory(sb: Sandbox, stream: Callable[[], Iterator[bytes]]) -> Spec:
    return Spec(["explain", "--format", "json", "-"], {0, 1}, stdin=stream, timeout=600, max_rss_mb=MEM_BOUND_MB,
                checks=[report_is()], summary=verdict_summary)


for _label, _gen in _MEM_CASES.items():
    attack(f"memory: {_label} on stdin", 5, f"a report; peak RSS <= {MEM_BOUND_MB} MB")(
        partial(_memory, stream=_gen))


# ------------------------------------------------------------------------------------------------
# 6. -o writes where it points, with the right mode, and is checked before the batch

def _batch_to(sb: Sandbox, target: Path, *more: str, **kw: object) -> Spec:
    return Spec(["batch", str(CAPTURE_OOM), "--format", "csv", "-o", str(target), *more], {1},
                summary=file_state(target), **kw)  # type: ignore[arg-type]


@attack("-o: a symlink to a file", 6, "the target gets the rows; the link stays")
def _(sb: Sandbox) -> Spec:
    target = sb.write("real/rows.csv", "old\n")
    link = sb.path("link.csv")
    link.symlink_to(target)
    return _batch_to(sb, link, checks=[still_kind(link, stat.S_ISLNK, "symlink"), contains_text(target, "MEM003")])


@attack("-o: an existing 0644 file, umask 077", 6, "rows written, mode stays 0644")
def _(sb: Sandbox) -> Spec:
    target = sb.write("rows.csv", "old\n", mode=0o644)
    return _batch_to(sb, target, umask=0o077, checks=[mode_is(target, 0o644), contains_text(target, "MEM003")])


@attack("-o: a new file, umask 027", 6, "mode 0640")
def _(sb: Sandbox) -> Spec:
    target = sb.path("rows.csv")
    return _batch_to(sb, target, umask=0o027, checks=[mode_is(target, 0o640)])


@attack("-o: a FIFO with a reader", 6, "the reader gets the rows; still a FIFO")
def _(sb: Sandbox) -> Spec:
    fifo = sb.path("rows.fifo")
    os.mkfifo(fifo)
    got = lambda o: None if o.fifo_data and b"MEM003" in o.fifo_data else "the reader got nothing"
    return _batch_to(sb, fifo, fifo_reader=fifo, checks=[still_kind(fifo, stat.S_ISFIFO, "FIFO"), got])


@attack("-o: a /dev/null clone (mknod c 1 3)", 6, "still a character device", needs="root")
def _(sb: Sandbox) -> Spec:
    node = sb.path("null")
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return _batch_to(sb, node, checks=[still_kind(node, stat.S_ISCHR, "character device")])


def _refused_before_batch(sb: Sandbox, flag: str, target: str, want: str, **kw: object) -> Spec:
    files = link_many(sb, SERVING, 200)
    return Spec(["batch", files, "--jobs", "1", "--format", "csv", flag, target], {2}, want=(want,),
                forbid=(".part",), max_s=5.0, checks=[no_glob(sb.work, "**/.logdoctor-*")], **kw)  # type: ignore[arg-type]


@attack("-o: into a missing directory (200-file batch)", 6, "exit 2 naming it, before the batch (<= 5 s)")
def _(sb: Sandbox) -> Spec:
    return _refused_before_batch(sb, "-o", str(sb.path("missing/rows.csv")), "missing")


@attack("-o: onto a directory (200-file batch)", 6, "exit 2 naming it, before the batch (<= 5 s)")
def _(sb: Sandbox) -> Spec:
    (sb.work / "outdir").mkdir()
    return _refused_before_batch(sb, "-o", str(sb.path("outdir")), "outdir")


@attack("-o: a directory without write permission, unprivileged", 6, "exit 2 (permission), before the batch",
        needs="root")
def _(sb: Sandbox) -> Spec:
    (sb.work / "locked").mkdir()
    os.chmod(sb.work / "locked", 0o555)
    return _refused_before_batch(sb, "-o", str(sb.path("locked/rows.csv")), "locked", unprivileged=True)


@attack("--events: into a missing directory (200-file batch)", 6, "exit 2 naming it, before the batch")
def _(sb: Sandbox) -> Spec:
    return _refused_before_batch(sb, "--events", str(sb.path("missing/ev.parquet")), "missing")


# ------------------------------------------------------------------------------------------------
# 7. inputs that gave a wrong "nothing failed" (exit 0) or hung

@attack("input: lone-CR line ends", 7, "MEM003, like the LF original")
def _(sb: Sandbox) -> Spec:
    return explain(sb.write("cr.log", CAPTURE_OOM.read_bytes().replace(b"\n", b"\r")), "MEM003", {1})


@attack("input: unreadable sub-directory, unprivileged", 7, "exit 2 naming it; other rows kept", needs="root")
def _(sb: Sandbox) -> Spec:
    sb.copy(CAPTURE_OOM, "logs/good.log")
    sb.copy(ARCH, "logs/locked/hidden.log")
    os.chmod(sb.work / "logs" / "locked", 0o000)
    return Spec(["batch", "logs", "--format", "json"], {2}, unprivileged=True, want=("locked",),
                checks=[lambda o: None if b"good.log" in o.stdout else "the readable file's row is missing"],
                summary=rows_summary())


@attack("input: unreadable rules sub-directory, unprivileged", 7, "exit 2 naming it", needs="root")
def _(sb: Sandbox) -> Spec:
    rules = sb.rules(simple_rule())
    sb.write("rules/locked/other.yaml", simple_rule().replace("UNK950", "UNK951").replace("hostile", "other"))
    os.chmod(sb.work / "rules" / "locked", 0o000)
    return Spec(["explain", str(CAPTURE_OOM), "--rules", rules], {2}, unprivileged=True, want=("locked",))


def _device(sb: Sandbox, device: str) -> Spec:
    return Spec(["explain", device], {2}, max_s=SLOW_BOUND_S, timeout=20, max_rss_mb=MEM_BOUND_MB)


for _dev in ("/dev/zero", "/dev/urandom"):
    attack(f"input: explain {_dev}", 7, "exit 2 at once (not a log)", needs=_dev)(
        partial(_device, device=_dev))


@attack("input: explain a FIFO with no writer", 7, "exit 2 at once (no hang)")
def _(sb: Sandbox) -> Spec:
    fifo = sb.path("quiet.fifo")
    os.mkfifo(fifo)
    return Spec(["explain", str(fifo)], {2}, max_s=SLOW_BOUND_S, timeout=20)


@attack("input: explain a /dev/null clone (mknod c 1 3)", 7, "exit 2 (empty / not a log)", needs="root")
def _(sb: Sandbox) -> Spec:
    node = sb.path("null")
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return Spec(["explain", str(node)], {2}, max_s=SLOW_BOUND_S, timeout=20)


@attack("input: rotated server.log.1 and server.log.2.gz in a directory", 7, "3 rows, the rotated ones included")
def _(sb: Sandbox) -> Spec:
    sb.copy(HEALTHY, "logs/server.log")
    sb.copy(CAPTURE_OOM, "logs/server.log.1")
    sb.write("logs/server.log.2.gz", gzip.compress(ARCH.read_bytes()))
    return Spec(["batch", "logs", "--format", "json"], {1},
                checks=[rows_are(3, contains=("server.log.1", "server.log.2.gz"))], summary=rows_summary())


# ------------------------------------------------------------------------------------------------
# 8. signals, numbers, compression, closed stdio, many jobs

@attack("signals: SIGINT to the group, batch --jobs 2", 8, "exit 130, one quiet line, no worker left")
def _(sb: Sandbox) -> Spec:
    return Spec(["batch", link_many(sb, SERVING, 300), "--jobs", "2"], {130}, signal=(signal.SIGINT, True),
                forbid=("KeyboardInterrupt",), timeout=120)


@attack("signals: SIGTERM to the parent, batch --jobs 2", 8, "exit 143, no traceback, no worker left")
def _(sb: Sandbox) -> Spec:
    return Spec(["batch", link_many(sb, SERVING, 300), "--jobs", "2"], {143, -15}, signal=(signal.SIGTERM, False),
                forbid=("BrokenPipeError",), timeout=120)


@attack("signals: SIGTERM with --events", 8, "exit 143; no logdoctor-events-* or .part left")
def _(sb: Sandbox) -> Spec:
    files = link_many(sb, SERVING, 300)
    return Spec(["batch", files, "--jobs", "2", "--events", str(sb.path("ev.parquet")), "-o", str(sb.path("rows.csv"))],
                {143, -15}, signal=(signal.SIGTERM, False), timeout=120,
                checks=[no_glob(sb.tmp, "logdoctor-events-*"), no_glob(sb.work, ".logdoctor-*")])


@attack("signals: SIGKILL with --events, then a rerun", 8, "after the rerun no logdoctor-events-* is left")
def _(sb: Sandbox) -> Spec:
    files = link_many(sb, SERVING, 300)
    args = ["batch", files, "--jobs", "2", "--events", str(sb.path("ev.parquet"))]

    def rerun_cleans(o: Outcome) -> str | None:
        sb.cli(["batch", str(HEALTHY), "--events", str(sb.path("ev2.parquet"))])
        return no_glob(sb.tmp, "logdoctor-events-*")(o) or no_glob(sb.work, ".logdoctor-*")(o)
    return Spec(args, {-9}, signal=(signal.SIGKILL, True), timeout=120, checks=[rerun_cleans])


def _numbers(sb: Sandbox, subs: list[tuple[bytes, bytes]]) -> Path:
    data = HEALTHY.read_bytes()
    for pattern, value in subs:
        data = re.sub(pattern, rb"\g<1>" + value.replace(b"\\", b"\\\\"), data)
    return sb.write("numbers.log", data)


def _numbers_explained(sb: Sandbox, subs: list[tuple[bytes, bytes]]) -> Spec:
    return explain(_numbers(sb, subs), None, {0}, checks=[report_is(verdict="healthy")])


_HUGE = {
    "400-digit #tokens:": [(rb"(#tokens: )\d+", b"9" * 400)],
    "1e999 in mem_fraction_static= and avail mem=": [(rb"(mem_fraction_static=)[\d.]+", b"1e999"),
                                                      (rb"(avail mem=)[\d.]+", b"1e999")],
    "nan / -inf in field positions": [(rb"(mem_fraction_static=)[\d.]+", b"nan"), (rb"(avail mem=)[\d.]+", b"-inf"),
                                      (rb"(token usage: )[\d.]+", b"nan")],
    "5000-digit batch line fields": [(rb"(#token: )\d+", b"7" * 5000), (rb"(gen throughput \(token/s\): )[\d.]+",
                                                                       b"8" * 5000 + b".5")],
}
for _label, _subs in _HUGE.items():
    attack(f"numbers: {_label}, explain", 8, "a strict-JSON report (healthy)")(
        partial(_numbers_explained, subs=_subs))


@attack("numbers: huge and non-finite numbers, runs --format parquet", 8, "a parquet file, exit 0")
def _(sb: Sandbox) -> Spec:
    path = _numbers(sb, [s for subs in _HUGE.values() for s in subs[:1]])
    out = sb.path("runs.parquet")
    return Spec(["runs", str(path), "--format", "parquet", "-o", str(out)], {0},
                checks=[is_parquet(out)], summary=file_state(out))


@attack("numbers: huge and non-finite numbers, memory --format json", 8, "strict JSON, exit 0")
def _(sb: Sandbox) -> Spec:
    path = _numbers(sb, [s for subs in _HUGE.values() for s in subs[:1]])
    return Spec(["memory", str(path), "--format", "json"], {0}, checks=[report_is()])


@attack("gz: corrupt body, explain", 8, "exit 2 naming the file")
def _(sb: Sandbox) -> Spec:
    return Spec(["explain", str(sb.write("broken.log.gz", corrupt_gzip(CAPTURE_OOM.read_bytes())))], {2},
                want=("broken.log.gz",))


@attack("gz: corrupt body, batch", 8, "an error row naming what is wrong, exit 2")
def _(sb: Sandbox) -> Spec:
    sb.write("logs/broken.log.gz", corrupt_gzip(CAPTURE_OOM.read_bytes()))
    sb.copy(HEALTHY, "logs/good.log")
    return Spec(["batch", "logs", "--format", "json"], {2}, checks=[rows_are(2, contains=("broken.log.gz",))],
                summary=rows_summary())


@attack("gz: through a pipe (<(cat x.gz))", 8, "MEM003, as from the file")
def _(sb: Sandbox) -> Spec:
    return explain("{PIPE}", "MEM003", {1}, pipe_data=gzip.compress(CAPTURE_OOM.read_bytes()))


@attack("stdio: stdin closed, explain with no file", 8, "exit 2, a clear message")
def _(sb: Sandbox) -> Spec:
    return Spec(["explain"], {2}, close_fds=(0,), forbid=("AttributeError",))


@attack("stdio: stdout closed, explain FILE", 8, "exit 1 or 2, no AttributeError")
def _(sb: Sandbox) -> Spec:
    return Spec(["explain", str(CAPTURE_OOM)], {1, 2}, close_fds=(1,), forbid=("AttributeError",))


@attack("stdio: stdout closed, batch FILE", 8, "exit 1 or 2, no AttributeError")
def _(sb: Sandbox) -> Spec:
    return Spec(["batch", str(CAPTURE_OOM)], {1, 2}, close_fds=(1,), forbid=("AttributeError",))


@attack("jobs: --jobs 256 on 3 files", 8, "at most 3 workers (<= 5 processes)")
def _(sb: Sandbox) -> Spec:
    files = [str(sb.copy(f, f"logs/{f.name}")) for f in (CAPTURE_OOM, HEALTHY, ARCH)]
    return Spec(["batch", *files, "--jobs", "256", "--format", "json"], {1}, max_procs=5,
                checks=[rows_are(3)], summary=lambda o: f"{o.procs} processes at peak")
