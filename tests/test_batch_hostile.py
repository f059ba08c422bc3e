"""batch / runs under hostile file names, destinations, stuck files and signals (issue 9)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest
from cliserver import run_cli

from logdoctor.many import batch as batch_mod
from logdoctor.many.batch import discover, discover_inputs, is_log_name, run_batch
from logdoctor.many.workers import (
    OVERSUBSCRIBE,
    scratch_path,
    usable_cpus,
    worker_count,
)

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
HEALTHY, FAILED = LOGS / "v0.4-tp8.log", LOGS / "v0.4-kv-not-enough-tp8.log"
HANG_GUARD_S = 120  # not a speed goal: only keeps a broken build from hanging the suite

# Runs the real CLI with one change: a file whose name contains "stuck" never finishes (as a log that
# sends a regex into a loop would), and the worker says which process took it (a marker file).
WRAPPER = """
import os, sys, time
import logdoctor.many.batch as b
real = b.precheck
def precheck(path):
    name = os.path.basename(path)
    if "pid" in name or "stuck" in name:
        with open(os.environ["LD_TEST_MARKS"], "a") as f:
            f.write(f"{os.getpid()} {name}\\n")
    if "stuck" in name:
        while True:
            time.sleep(0.05)
    return real(path)
b.precheck = precheck
from logdoctor.cli import main
sys.argv = ["logdoctor", *sys.argv[1:]]
main()
"""


def cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return run_cli(args, cwd=cwd, env={**os.environ, **(env or {})}, timeout=HANG_GUARD_S)


@pytest.fixture
def wrapped(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    script = tmp_path / "wrapped_cli.py"
    script.write_text(WRAPPER)
    marks = tmp_path / "marks.txt"
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = {**os.environ, "LD_TEST_MARKS": str(marks), "TMPDIR": str(tmp)}
    return [sys.executable, str(script)], env, marks


def _wait_for(pred, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not pred():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------------
# file names


def test_a_name_that_is_not_utf8_costs_no_row_in_any_format(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(HEALTHY, d / "ok.log")
    bad = os.path.join(os.fsencode(d), b"bad\xff\xfe.log")
    with open(bad, "wb") as f:
        f.write(FAILED.read_bytes())
    for fmt in ("table", "csv", "json", "jsonl"):
        p = cli("batch", ".", "--format", fmt, "--no-progress", cwd=d)  # short paths: a table cuts long cells
        assert p.returncode == 1, p.stderr  # the failed launch in the oddly named file is diagnosed
        out = p.stdout.decode("utf-8")  # always valid UTF-8
        if fmt.startswith("json"):  # JSON doubles the backslash of the escape
            out = "\n".join(r["path"] for r in (json.loads(out) if fmt == "json" else map(json.loads, out.splitlines())))
        assert "bad\\xff\\xfe.log" in out and "ok.log" in out and "internal error" not in out
    rows = json.loads(cli("batch", str(d), "--format", "json", "--no-progress").stdout)
    by = {Path(r["path"]).name: r for r in rows}
    assert by["bad\\xff\\xfe.log"]["category"] == "memory_pressure" and by["ok.log"]["verdict"] == "healthy"
    out, events = tmp_path / "rows.parquet", tmp_path / "events.parquet"
    p = cli("batch", str(d), "--format", "parquet", "-o", str(out), "--events", str(events), "--no-progress")
    assert p.returncode == 1, p.stderr
    assert sorted(Path(x).name for x in pl.read_parquet(out)["path"]) == ["bad\\xff\\xfe.log", "ok.log"]
    assert {Path(x).name for x in pl.read_parquet(events)["path"]} == {"bad\\xff\\xfe.log", "ok.log"}
    runs = cli("runs", str(d), "--format", "json", "--no-progress")
    assert runs.returncode == 1, runs.stderr
    assert sorted(Path(r["path"]).name for r in json.loads(runs.stdout)) == ["bad\\xff\\xfe.log", "ok.log"]


def test_control_characters_in_names_are_escaped_in_tables(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(HEALTHY, d / "esc\x1b[31mred\nsecond line.log")
    shutil.copy(HEALTHY, d / "plain.log")
    table = cli("batch", ".", "--no-progress", cwd=d).stdout.decode()
    assert "\x1b" not in table
    assert "esc\\x1b[31mred\\x0asecond line.log" in table
    body = [ln for ln in table.splitlines() if ".log" in ln]
    assert len(body) == 2  # one line per file: the newline in the name did not split a row
    runs = cli("runs", ".", "--no-progress", cwd=d).stdout.decode()
    assert "\x1b" not in runs and "esc\\x1b[31mred\\x0asecond line.log" in runs


def test_rotated_logs_are_found_and_other_files_are_not(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    names = ["server.log", "server.log.1", "server.log.2.gz", "server.log-20240101", "server.log.2024-01-01",
             "worker.out.3", "run.txt", "trace.err", "old.gz"]
    for n in names:
        shutil.copy(HEALTHY, d / n)
    for n in ("notes.md", "data.json", "server.log.bak", "server.logger", "config.yaml"):
        (d / n).write_text("not a log\n")
    assert sorted(Path(p).name for p in discover([str(d)])) == sorted(names)
    assert is_log_name("a.log.12") and is_log_name("a.log-20240101-1700.gz") and not is_log_name("a.log.x")


def test_an_unlistable_directory_is_a_row_with_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "logs"
    (d / "locked").mkdir(parents=True)
    shutil.copy(HEALTHY, d / "ok.log")
    shutil.copy(HEALTHY, d / "locked" / "hidden.log")
    real_scandir = os.scandir

    def scandir(path):
        if os.fspath(path) == str(d / "locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found = dict(discover_inputs([str(d)]))
    assert found == {str(d / "ok.log"): None, str(d / "locked"): "cannot list directory (permission denied)"}


def test_an_unlistable_directory_makes_batch_exit_2(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "locked").mkdir(parents=True)
    shutil.copy(HEALTHY, d / "ok.log")
    script = tmp_path / "deny.py"
    script.write_text(
        "import os, sys\n"
        "real = os.scandir\n"
        "def scandir(p='.'):\n"
        f"    if os.fspath(p) == {str(d / 'locked')!r}:\n"
        "        raise PermissionError(13, 'Permission denied', os.fspath(p))\n"
        "    return real(p)\n"
        "os.scandir = scandir\n"
        "from logdoctor.cli import main\n"
        "sys.argv = ['logdoctor', *sys.argv[1:]]\n"
        "main()\n")
    for cmd in ("batch", "runs"):
        p = subprocess.run([sys.executable, str(script), cmd, str(d), "--format", "json", "--no-progress"],
                           capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S)
        assert p.returncode == 2, p.stderr
        assert "locked: cannot list directory (permission denied)" in p.stderr or cmd == "batch"
    rows = {Path(r["path"]).name: r for r in json.loads(
        subprocess.run([sys.executable, str(script), "batch", str(d), "--format", "json", "--no-progress"],
                       capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S).stdout)}
    assert rows["locked"]["error"] == "cannot list directory (permission denied)"
    assert rows["ok.log"]["verdict"] == "healthy"


# ------------------------------------------------------------------------------------------------
# -o and --events


def test_output_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target.name)
    p = cli("batch", str(HEALTHY), "--format", "csv", "-o", str(link), "--no-progress")
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == "real.csv"
    assert target.read_text().startswith("path,verdict")


def test_an_existing_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    existing = tmp_path / "existing.csv"
    existing.write_text("old\n")
    existing.chmod(0o644)
    new = tmp_path / "new.csv"
    script = ("import os, sys; os.umask(0o027); from logdoctor.cli import main; "
              "sys.argv = ['logdoctor', *sys.argv[1:]]; main()")
    for out in (existing, new):
        p = subprocess.run([sys.executable, "-c", script, "batch", str(HEALTHY), "--format", "csv", "-o", str(out),
                            "--no-progress"], capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S)
        assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(existing.stat().st_mode) == 0o644  # not 0600, whatever the umask
    assert stat.S_IMODE(new.stat().st_mode) == 0o640  # 0666 & ~027
    assert existing.read_text().startswith("path,verdict")
    assert not list(tmp_path.glob(".logdoctor-*"))


def test_a_fifo_is_written_through_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    p = cli("batch", str(HEALTHY), "--format", "csv", "-o", str(fifo), "--no-progress")
    reader.join(HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO
    assert got and got[0].decode().startswith("path,verdict") and "v0.4-tp8.log" in got[0].decode()


@pytest.mark.parametrize("which", ["-o", "--events"])
def test_a_bad_destination_is_refused_before_any_log_is_read(tmp_path: Path, which: str,
                                                              wrapped: tuple[list[str], dict[str, str], Path]) -> None:
    cmd, env, marks = wrapped
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(HEALTHY, d / "stuck.log")  # reading it would never end: refusing first is the only way out
    cases = {str(tmp_path): "is a directory", str(tmp_path / "no" / "such" / "x.parquet"): "no such directory"}
    for dest, why in cases.items():
        args = ["batch", str(d), "--timeout", "0", "--no-progress", which, dest]
        if which == "--events":
            args += ["-o", str(tmp_path / "rows.csv")]
        p = subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=HANG_GUARD_S)
        assert p.returncode == 2
        assert p.stderr.strip() == f"logdoctor: {dest}: {why}" + (f": {tmp_path / 'no' / 'such'}" if "no such" in why
                                                                  else "")
        assert ".part" not in p.stderr and "internal error" not in p.stderr
    assert not marks.exists()  # no worker ever started on a log
    p = cli("batch", str(HEALTHY), "--format", "parquet")
    assert p.returncode == 2 and b"--format parquet needs -o FILE" in p.stderr


# ------------------------------------------------------------------------------------------------
# time budget, dead workers, number of workers


def _stuck_precheck(monkeypatch: pytest.MonkeyPatch) -> None:
    real = batch_mod.precheck

    def precheck(path: str) -> str | None:  # forked workers inherit the patch
        name = os.path.basename(path)  # (the test's own directory name contains "stuck")
        if "stuck" in name:
            while True:
                time.sleep(0.05)
        if "dies" in name:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path)

    monkeypatch.setattr(batch_mod, "precheck", precheck)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_stuck_file_becomes_an_error_row_and_the_rest_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   jobs: int) -> None:
    _stuck_precheck(monkeypatch)
    paths = []
    for name in ("a.log", "stuck.log", "dies.log", "b.log", "c.log"):
        shutil.copy(HEALTHY, tmp_path / name)
        paths.append(str(tmp_path / name))
    rows = {Path(r.path).name: r for r, _ in run_batch(paths, [], jobs=jobs, timeout=5)}
    assert rows["stuck.log"].error == "timed out after 5 s" and rows["stuck.log"].verdict is None
    assert rows["dies.log"].error.startswith("worker process killed by SIGKILL")
    assert all(rows[n].verdict == "healthy" and rows[n].error is None for n in ("a.log", "b.log", "c.log"))


def test_a_stuck_file_leaves_no_half_of_its_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logdoctor.parse.parse as parse_mod
    real = parse_mod.parse_source

    def parse_source(path):
        for i, ev in enumerate(real(path)):
            if "stuck" in os.path.basename(path) and i == 20:
                while True:
                    time.sleep(0.05)
            yield ev

    monkeypatch.setattr(parse_mod, "parse_source", parse_source)
    for name in ("ok.log", "stuck.log"):
        shutil.copy(HEALTHY, tmp_path / name)
    files: list = []
    try:
        rows = {Path(r.path).name: r for r, _ in run_batch([str(tmp_path / "ok.log"), str(tmp_path / "stuck.log")],
                                                           [], jobs=1, events=files, timeout=5)}
        assert rows["stuck.log"].error == "timed out after 5 s"
        parts = [scratch_path(f) for f in files if os.fstat(f.fileno()).st_size]
        paths = set(pl.concat([pl.read_ndjson(p) for p in parts])["path"])
    finally:
        for f in files:
            f.close()
    assert paths == {str(tmp_path / "ok.log")}


def test_workers_never_outnumber_files_or_twice_the_cores(tmp_path: Path,
                                                          wrapped: tuple[list[str], dict[str, str], Path]) -> None:
    assert worker_count(256, 3) == 3
    assert worker_count(256, 10_000) == usable_cpus() * OVERSUBSCRIBE
    assert worker_count(1, 0) == 1
    cmd, env, marks = wrapped
    for i in range(3):
        shutil.copy(HEALTHY, tmp_path / f"pid{i}.log")
    p = subprocess.run([*cmd, "batch", *(str(tmp_path / f"pid{i}.log") for i in range(3)), "--jobs", "256",
                        "--no-progress", "--format", "json"], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    pids = {ln.split()[0] for ln in marks.read_text().splitlines()}
    assert 1 <= len(pids) <= 3


# ------------------------------------------------------------------------------------------------
# signals


def _many(tmp_path: Path, n: int = 40) -> Path:
    d = tmp_path / "many"
    d.mkdir()
    for i in range(n):
        shutil.copy(HEALTHY, d / f"run{i:03d}.log")
    shutil.copy(HEALTHY, d / "run-stuck.log")  # the batch cannot end before the signal
    return d


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("sig, to_group, jobs, timeout, code", [
    (signal.SIGINT, True, "2", "60", 130),     # Ctrl-C in a terminal: the whole process group
    (signal.SIGINT, True, "1", "60", 130),     # one worker process (a time budget is set)
    (signal.SIGINT, False, "1", "0", 130),     # no budget, --jobs 1: the work runs in the parent
    (signal.SIGTERM, False, "2", "60", 143),   # a process manager stops the parent only
    (signal.SIGTERM, False, "1", "0", 143),
])
def test_signals_end_the_batch_quietly_and_leave_nothing(tmp_path: Path, sig: int, to_group: bool, jobs: str,
                                                          timeout: str, code: int,
                                                          wrapped: tuple[list[str], dict[str, str], Path]) -> None:
    cmd, env, marks = wrapped
    d = _many(tmp_path)
    out, events = tmp_path / "out" / "rows.csv", tmp_path / "out" / "events.parquet"
    out.parent.mkdir()
    proc = subprocess.Popen([*cmd, "batch", str(d), "--format", "csv", "-o", str(out), "--events", str(events),
                             "--jobs", jobs, "--timeout", timeout, "--no-progress"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    _wait_for(lambda: marks.exists() and "stuck" in marks.read_text(), "a worker took the stuck file")
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == code, err
    assert b"Traceback" not in err and b"Error" not in err, err
    _wait_for(lambda: _group_gone(proc.pid), "every worker process ended")
    assert list(out.parent.iterdir()) == []  # no output, no .part file
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def test_sigkill_of_the_parent_leaves_no_workers_and_no_temp_files(
        tmp_path: Path, wrapped: tuple[list[str], dict[str, str], Path]) -> None:
    cmd, env, marks = wrapped
    d = _many(tmp_path)
    proc = subprocess.Popen([*cmd, "batch", str(d), "--format", "csv", "-o", str(tmp_path / "rows.csv"),
                             "--events", str(tmp_path / "events.parquet"), "--jobs", "2", "--no-progress"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    _wait_for(lambda: marks.exists() and "stuck" in marks.read_text(), "a worker took the stuck file")
    proc.kill()
    proc.wait(HANG_GUARD_S)
    _wait_for(lambda: _group_gone(proc.pid), "the workers died with their parent")
    assert list(Path(env["TMPDIR"]).iterdir()) == []  # events lived in unlinked files
    assert not (tmp_path / "rows.csv").exists() and not (tmp_path / "events.parquet").exists()


def test_destinations_without_write_permission_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import tempfile

    from logdoctor.paths import Destination, OutputError
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        with pytest.raises(OutputError, match=r"s\.sock: is a socket, not a file$"):
            Destination.check(str(sock_path))
    finally:
        sock.close()
    existing = tmp_path / "taken.csv"
    existing.write_text("x\n")
    # root may write anywhere, so the permission answers are made by hand
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    with pytest.raises(OutputError, match=r"taken\.csv: permission denied$"):
        Destination.check(str(existing))
    monkeypatch.undo()

    def no_create(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", no_create)
    with pytest.raises(OutputError, match=r"new\.csv: cannot create files in .* \(permission denied\)$"):
        Destination.check(str(tmp_path / "new.csv"))
    monkeypatch.undo()
    dest = Destination.check(str(tmp_path / "out.csv"))
    with pytest.raises(KeyboardInterrupt), dest.writing() as part:
        Path(part).write_text("half")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sock", "taken.csv"]  # no out.csv, no .part
