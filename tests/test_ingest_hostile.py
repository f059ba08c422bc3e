"""Hostile and unlucky inputs at the ingest stage (issue 9): devices, FIFOs, binary data, compression
by magic bytes, corrupt and truncated archives, lone-CR line ends, regex-hostile lines, bounded memory.

Hang guards are subprocess timeouts far above the expected time (not speed goals): a quadratic regex
on these sizes takes minutes, the linear one milliseconds.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
import zstandard
from cliserver import run_cli

from logdoctor.many.batch import precheck
from logdoctor.read.ingest import (
    MAX_LINE_BYTES,
    TRUNCATION_MARK,
    InputError,
    clean_lines,
    read_lines,
)
from logdoctor.read.sniff import check_path, compression_of, open_source

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
FAILED = LOGS / "v0.4-kv-not-enough-tp8.log"
HANG_GUARD = 60


def cli(*args: str, stdin: bytes | None = None, timeout: float = HANG_GUARD) -> subprocess.CompletedProcess[bytes]:
    return run_cli(args, input=stdin, timeout=timeout, cwd=ROOT)


def lines_of(data: bytes) -> list[tuple[int, str]]:
    return [(ln.number, ln.text) for ln in clean_lines(io.BytesIO(data))]


def one_line_error(p: subprocess.CompletedProcess[bytes], *words: str) -> str:
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


# ------------------------------------------------------------------------------------------------
# devices, FIFOs, terminals: refused by every command, never a hang


@pytest.mark.parametrize("command", ["explain", "summary", "parse", "memory"])
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_are_refused_by_every_command(command: str, device: str) -> None:
    one_line_error(cli(command, device), device, "not a regular file (device)")


def test_device_on_stdin_is_refused_and_null_device_is_empty() -> None:
    with open("/dev/zero", "rb") as zero:
        p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "-"], stdin=zero,
                           check=False, capture_output=True, timeout=HANG_GUARD, cwd=ROOT)
    one_line_error(p, "<stdin>", "not a regular file (device)")
    one_line_error(cli("explain", "/dev/null"), "empty input")


def test_terminal_on_stdin_does_not_block() -> None:
    import pty
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "-"], stdin=slave,
                           check=False, capture_output=True, timeout=HANG_GUARD, cwd=ROOT)
    finally:
        os.close(slave)
        os.close(master)
    one_line_error(p, "<stdin>", "terminal")


def test_fifo_without_writer_is_an_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    one_line_error(cli("explain", str(fifo)), str(fifo), "FIFO with no writer")
    assert precheck(str(fifo)) == "not a regular file (FIFO)"  # batch never opens one


def test_fifo_whose_writer_comes_late_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "live.log"
    os.mkfifo(fifo)

    def writer() -> None:
        time.sleep(0.3)
        with open(fifo, "wb") as f:
            f.write(FAILED.read_bytes())

    t = threading.Thread(target=writer)
    t.start()
    try:
        texts = [ln.text for ln in read_lines(fifo)]
    finally:
        t.join()
    assert len(texts) == FAILED.read_bytes().count(b"\n")


def test_fifo_whose_writer_leaves_without_writing_is_empty(tmp_path: Path) -> None:
    fifo = tmp_path / "nothing.log"
    os.mkfifo(fifo)

    def writer() -> None:
        time.sleep(0.2)
        with open(fifo, "wb"):
            pass

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert list(read_lines(fifo)) == []
    finally:
        t.join()


def test_stdin_from_a_partly_read_file_starts_where_it_is(tmp_path: Path) -> None:
    log = tmp_path / "pre.log"
    log.write_bytes(b"not part of the log\n" + FAILED.read_bytes())
    with open(log, "rb") as f:
        os.lseek(f.fileno(), len(b"not part of the log\n"), os.SEEK_SET)  # `{ head -1; logdoctor ...; } < f`
        p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "parse", "--format", "jsonl", "-"], stdin=f,
                           check=False, capture_output=True, timeout=HANG_GUARD, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["line"] == 1 and b"not part of" not in p.stdout


def test_gzip_through_a_pipe_keeps_its_magic_bytes() -> None:
    # what `logdoctor explain <(cat x.gz)` hands us: /dev/fd/N, a pipe whose sniffed bytes must be put back
    r, w = os.pipe()
    os.write(w, gzip.compress(FAILED.read_bytes()))
    os.close(w)
    try:
        got = [ln.text for ln in read_lines(f"/dev/fd/{r}")]
    finally:
        os.close(r)
    assert got == [ln.text for ln in read_lines(FAILED)]
    p = cli("explain", "-", stdin=gzip.compress(FAILED.read_bytes()))
    assert p.returncode == 1 and b"memory_pressure" in p.stdout, p.stderr


# ------------------------------------------------------------------------------------------------
# binary content: one answer for every command


def test_random_bytes_are_binary_for_explain_and_batch(tmp_path: Path) -> None:
    blob = tmp_path / "core.log"
    blob.write_bytes(bytes(range(256)) * 64)
    for command in ("explain", "summary", "parse"):
        one_line_error(cli(command, str(blob)), str(blob), "binary file")
    assert precheck(str(blob)).startswith("binary file")
    packed = tmp_path / "core.log.gz"
    packed.write_bytes(gzip.compress(blob.read_bytes()))
    one_line_error(cli("explain", str(packed)), "binary file", "gzip")
    assert check_path(str(packed)).startswith("binary file")


def test_a_log_with_some_invalid_utf8_is_still_a_log(tmp_path: Path) -> None:
    p = tmp_path / "latin1.log"
    p.write_bytes(FAILED.read_bytes().replace(b"GB", b"G\xe9"))
    assert precheck(str(p)) is None
    assert cli("explain", str(p)).returncode == 1




@pytest.mark.parametrize("padding", [100, 5 << 20])
def test_nul_padding_left_by_copytruncate_is_skipped(tmp_path: Path, padding: int) -> None:
    plain = json.loads(cli("explain", "--format", "json", str(FAILED)).stdout)
    p = tmp_path / "rotated.log"
    p.write_bytes(b"\x00" * padding + FAILED.read_bytes())
    assert precheck(str(p)) is None
    got = cli("explain", "--format", "json", str(p))
    assert got.returncode == 1, got.stderr
    d = json.loads(got.stdout)
    assert (d["primary"]["rule"], d["primary"]["line"]) == (plain["primary"]["rule"], plain["primary"]["line"])
    only = tmp_path / "hole.log"
    only.write_bytes(b"\x00" * padding)
    one_line_error(cli("explain", str(only)), "binary file")
# ------------------------------------------------------------------------------------------------
# compression: by magic bytes, streamed, corrupt data named


def _compressors() -> dict[str, bytes]:
    text = FAILED.read_bytes()
    return {"gzip": gzip.compress(text), "bzip2": bz2.compress(text), "xz": lzma.compress(text),
            "lzma": lzma.compress(text, format=lzma.FORMAT_ALONE),
            "zstd": zstandard.ZstdCompressor().compress(text)}


@pytest.mark.parametrize("fmt", ["gzip", "bzip2", "xz", "lzma", "zstd"])
def test_compression_is_recognised_by_magic_not_name(tmp_path: Path, fmt: str) -> None:
    data = _compressors()[fmt]
    assert compression_of(data[:16]) == fmt
    misnamed = tmp_path / "server.log"  # no suffix tells what it is
    misnamed.write_bytes(data)
    assert [ln.text for ln in read_lines(misnamed)] == [ln.text for ln in read_lines(FAILED)]
    p = cli("explain", "--format", "json", "-", stdin=data)
    assert p.returncode == 1 and b'"memory_pressure"' in p.stdout, p.stderr


@pytest.mark.parametrize("fmt", ["gzip", "bzip2", "xz", "zstd"])
def test_corrupt_compressed_body_names_the_file(tmp_path: Path, fmt: str) -> None:
    data = _compressors()[fmt]
    bad = tmp_path / f"bad.{fmt}"
    bad.write_bytes(data[:30] + bytes(b ^ 0x5A for b in data[30:400]) + data[400:])
    with pytest.raises(InputError) as e:
        list(read_lines(bad))
    assert str(bad) in str(e.value) and "corrupt" in str(e.value) and "\n" not in str(e.value)
    one_line_error(cli("explain", str(bad)), str(bad), "corrupt")
    assert "corrupt" in (precheck(str(bad)) or "")


@pytest.mark.parametrize("fmt", ["gzip", "bzip2", "xz"])
def test_compressed_data_still_being_written_keeps_its_lines(tmp_path: Path, fmt: str) -> None:
    text = FAILED.read_bytes() * 200  # several bzip2 blocks, so a cut at the end leaves whole ones
    packed = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}[fmt](text)
    partial = tmp_path / f"growing.{fmt}"
    partial.write_bytes(packed[: len(packed) - 64])
    lines = list(read_lines(partial))
    assert 1000 < len(lines) < text.count(b"\n")
    nothing = tmp_path / f"stub.{fmt}"
    nothing.write_bytes(packed[:24])
    with pytest.raises(InputError, match="truncated"):
        list(read_lines(nothing))


def test_lzma_header_asking_for_a_huge_dictionary_is_refused(tmp_path: Path) -> None:
    import struct
    crafted = bytearray(lzma.compress(FAILED.read_bytes(), format=lzma.FORMAT_ALONE))
    crafted[1:5] = struct.pack("<I", 0x60000000)  # 1.5 GiB the decoder would have to allocate
    bomb = tmp_path / "bomb.lzma"
    bomb.write_bytes(bytes(crafted))
    with pytest.raises(InputError, match="needs more than"):
        list(read_lines(bomb))


def test_one_giant_compressed_line_is_read_in_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.log.gz"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(bomb, "wb") as f:
        f.write(z.compress(b"[2025-01-01 10:00:00 TP0] start\n"))
        block = b"A" * (1 << 20)
        for _ in range(512):  # 512 MiB of one line
            f.write(z.compress(block))
        f.write(z.compress(b"\n[2025-01-01 10:00:01 TP0] after the bomb\n") + z.flush())
    # the child's peak is VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a large
    # pytest worker would report the worker's peak
    code = (
        "import json, resource, sys\n"
        "from logdoctor.read.ingest import read_lines\n"
        "lines = [(ln.number, len(ln.text), ln.truncated, ln.text[-20:]) for ln in read_lines(sys.argv[1])]\n"
        "print(json.dumps(lines))\n"
        "print(int(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM'))))\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(bomb)], check=False, capture_output=True, text=True, timeout=HANG_GUARD * 3)
    assert p.returncode == 0, p.stderr
    lines_repr, rss_kib = p.stdout.strip().splitlines()
    lines = json.loads(lines_repr)
    assert [(n, t) for n, _, t, _ in lines] == [(1, False), (2, True), (3, False)]
    assert lines[1][1] <= MAX_LINE_BYTES + len(TRUNCATION_MARK) and lines[2][3].endswith("after the bomb")
    assert int(rss_kib) < 200 * 1024  # the line is 512 MiB; what we hold is a few MiB


# ------------------------------------------------------------------------------------------------
# lone CR line ends


def test_lone_cr_log_is_read_line_by_line_and_the_failure_found(tmp_path: Path) -> None:
    text = FAILED.read_bytes()
    cr = tmp_path / "exported.log"
    cr.write_bytes(text.replace(b"\n", b"\r"))
    got = [(ln.number, ln.text) for ln in read_lines(cr)]
    want = [(ln.number, ln.text) for ln in read_lines(FAILED)]
    # numbered as `tr '\r' '\n' | grep -n` would; a run of progress states is redraws here: its last stays
    assert set(got) <= set(want)
    assert [x for x in got if "Completed |" not in x[1]] == [x for x in want if "Completed |" not in x[1]]
    assert [t for _, t in got if "Completed |" in t] == [t for _, t in want if "Completed |" in t][-1:]
    p = cli("explain", "--format", "json", str(cr))
    assert p.returncode == 1 and b'"memory_pressure"' in p.stdout, p.stderr
    crlf = tmp_path / "windows.log"
    crlf.write_bytes(text.replace(b"\n", b"\r\n"))
    assert [(ln.number, ln.text) for ln in read_lines(crlf)] == want


def test_bare_cr_inside_an_lf_line_splits_it_but_keeps_the_number() -> None:
    data = b"[2025-01-01 10:00:00 TP0] Load weight begin.\rRuntimeError: CUDA error: out of memory\nnext\n"
    assert lines_of(data) == [(1, "[2025-01-01 10:00:00 TP0] Load weight begin."),
                              (1, "RuntimeError: CUDA error: out of memory"), (2, "next")]


def test_progress_redraws_still_collapse_in_both_kinds_of_file() -> None:
    bar = [f"Loading shards: {p:3d}% Completed | {i}/4 [00:0{i}<00:00, 2.0it/s]" for i, p in enumerate((0, 25, 50, 75, 100))]
    lf = ("\r".join(bar) + "\n[2025-01-01 10:00:00 TP0] done\n").encode()
    assert lines_of(lf) == [(1, bar[-1]), (2, "[2025-01-01 10:00:00 TP0] done")]
    head = "".join(f"[2025-01-01 10:00:{i:02d} TP0] step {i}\r" for i in range(20))
    cr = (head + "\r".join(bar) + "\r[2025-01-01 10:01:00 TP0] done\r").encode()
    got = lines_of(cr)
    assert got[19] == (20, "[2025-01-01 10:00:19 TP0] step 19")
    assert got[20:] == [(25, bar[-1]), (26, "[2025-01-01 10:01:00 TP0] done")]


def test_lone_cr_spanning_the_bulk_path_keeps_numbers(tmp_path: Path) -> None:
    launch = FAILED.read_bytes().split(b"\n")[:100]
    decode = [b"[2025-12-02 11:00:00 TP0] Decode batch, #running-req: 1, #token: %d, token usage: 0.01, "
              b"cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, " % i for i in range(5000)]
    body = launch + decode + [b"[2025-12-02 11:00:00 TP0] Scheduler hit an exception: boom"]
    p = tmp_path / "cr-serving.log"
    p.write_bytes(b"\r".join(body) + b"\r")
    seen: list[int] = []
    last = [(ln.number, ln.text) for ln in read_lines(p, lambda blob, n: seen.append(n))][-1]
    assert last == (len(body), body[-1].decode())
    assert seen  # the periodic lines took the bulk path


# ------------------------------------------------------------------------------------------------
# regex-hostile lines and memory, in a subprocess with a hang guard

HOSTILE = r'''
import io, resource, sys
from logdoctor.read.ingest import clean_lines
N = 200_000
cases = {
    "digits and CR": b"1" * N + b"\r" + b"2" * N + b"\n",
    "digits slash": (b"1/" * N) + b"\r" + b"9" * N + b"%\n",
    "ansi runs": b"\x1b[" + b"0" * N + b"\x1b]" + b"x" * N + b"\n" + b"\x1b[" * N + b"\n",
    "docker prefix": b"a" * N + b" " * N + b"x\n" + (b"svc-1  | line\n" * 3),
    "quotes": b"> " * N + b"\n" + b">" * N + b"\n",
    "cr storm": b"\r" * N + b"x\r" * N + b"\n",
    "wrapped continuation": (b"x" * 80 + b"\n") * 30 + b"E" * N + b"\n" + (b"y" * 80 + b"\n") * 30 + b"a1-" * N + b"\n",
    "many tiny wrapped parts": (b"w" * 80 + b"\n") * 20000 + b"end\n",
}
for name, data in cases.items():
    out = list(clean_lines(io.BytesIO(data)))
    assert out, name
    assert max(len(ln.text) for ln in out) <= (1 << 20) + 64, name
print("ok", int(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM'))))
'''


def test_regex_hostile_lines_are_linear() -> None:
    p = subprocess.run([sys.executable, "-c", HOSTILE], check=False, capture_output=True, text=True, timeout=HANG_GUARD, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr


MEMORY = r'''
import io, resource
from logdoctor.read.ingest import clean_lines

class Lines(io.RawIOBase):
    """300 lines of 1.25 MiB of invalid UTF-8 and emoji (4-byte characters), generated, never stored."""
    def __init__(self):
        self.left, self.buf = 300, b""
    def readable(self):
        return True
    def readinto(self, b):
        if not self.buf:
            if not self.left:
                return 0
            self.left -= 1
            self.buf = ("\U0001F600".encode() + b"\xff") * (1 << 18) + b"\n"
        n = min(len(b), len(self.buf))
        b[:n], self.buf = self.buf[:n], self.buf[n:]
        return n

count = sum(1 for _ in clean_lines(io.BufferedReader(Lines(), 1 << 20)))
print(count, int(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM'))))
'''


def test_memory_does_not_grow_with_long_lines() -> None:
    p = subprocess.run([sys.executable, "-c", MEMORY], check=False, capture_output=True, text=True, timeout=HANG_GUARD * 3, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    count, rss_kib = map(int, p.stdout.split())
    assert count == 300
    assert rss_kib < 200 * 1024  # all 300 lines kept as the wrap sample would be over 500 MiB


# ------------------------------------------------------------------------------------------------
# one-line messages


def test_input_errors_name_the_file_on_one_line(tmp_path: Path) -> None:
    odd = tmp_path / "bad\nname\x1b[31m.log"
    odd.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(InputError) as e:
        open_source(str(odd))
    msg = str(e.value)
    assert msg.isprintable() and str(tmp_path) in msg and "name" in msg and e.value.reason.startswith("binary file")
    with pytest.raises(InputError, match="is a directory"):
        open_source(str(tmp_path))
    with pytest.raises(InputError, match="symlink loop"):
        os.symlink(tmp_path / "b", tmp_path / "a")
        os.symlink(tmp_path / "a", tmp_path / "b")
        open_source(str(tmp_path / "a"))
