"""`python -m logdoctor.cli …` for the tests, without paying the interpreter start and imports every time.

A test that checks the command line's contract (exit codes, one-line errors, closed or full descriptors)
needs a real process: its own descriptors 0/1/2, its own exit status, its own signal handlers. Starting a
fresh interpreter for each costs ~0.5 s, almost all of it imports, and the suite starts over a thousand.
So each test process keeps one server (started on first use) that has imported the package once and then,
for each call, forks a child: the child takes the caller's descriptors (sent over a Unix socket with
SCM_RIGHTS), its working directory, environment and umask, and runs `logdoctor.cli` as `python -m` does
(`runpy`, so `sys.argv[0]` and the program name are the same). Its exit status comes back as a
`subprocess.CompletedProcess`, like `subprocess.run`'s.

What a fork does not give, and the tests that need it keep `subprocess`: a cold import (tests that count
modules loaded or time the start), `preexec_fn`, and a stdout pipe whose reader goes away (`| head`).
polars is not imported by the server: its thread pool does not survive a fork, so a child imports it.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what every command imports anyway; polars deliberately absent (see above)
MAX_REQUEST = 1 << 20   # argv, cwd and environment as JSON
PRELOAD = ("click", "lark", "logdoctor.cli.main", "logdoctor.parse.parse", "logdoctor.diagnosis.engine",
           "logdoctor.diagnosis.ranking", "logdoctor.report.report", "s3fs")  # s3fs: ~0.6 s, starts no thread


# ------------------------------------------------------------------------------------------- server side

def _recv_int(sock: socket.socket) -> int:
    data = sock.recv(4)
    if len(data) != 4:
        raise EOFError("the CLI server went away")
    return int(struct.unpack("!i", data)[0])


def _std_stream(fd: int, name: str) -> Any:
    """The stream a fresh interpreter would make of descriptor `fd`, or None when it is closed."""
    try:
        os.fstat(fd)
    except OSError:
        return None
    if name == "stdin":
        return open(fd, "r", encoding="utf-8", errors="strict", closefd=False)
    # stdout is line-buffered on a terminal only; stderr always (Python 3.9+), with backslashreplace
    line_buffered = name == "stderr" or os.isatty(fd)
    return open(fd, "w", encoding="utf-8", errors="backslashreplace" if name == "stderr" else "strict",
                closefd=False, buffering=1 if line_buffered else -1)


def _child(request: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    """In the forked child: become `python -m logdoctor.cli ARGS` and never return."""
    code = 1
    try:
        sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:  # the received copies, now on 0/1/2
            os.close(fd)
        for fd in request["close"]:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request["umask"] is not None:
            os.umask(request["umask"])
        sys.stdin, sys.stdout, sys.stderr = (_std_stream(0, "stdin"), _std_stream(1, "stdout"),
                                             _std_stream(2, "stderr"))
        sys.argv = ["logdoctor", *request["args"]]
        import runpy
        try:
            runpy.run_module("logdoctor.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # what a fresh interpreter would print: a traceback and status 1
            import traceback
            traceback.print_exc()
            code = 1
        for name in ("stdout", "stderr"):  # the interpreter's own final flush, and what it does on failure
            stream = getattr(sys, name)
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError) as e:
                if name == "stdout":
                    try:
                        os.write(2, f"Exception ignored while flushing sys.stdout: {e!r}\n".encode())
                    except OSError:
                        pass
                    code = 120
    finally:
        os._exit(code & 0xFF)


def serve(fd: int) -> None:
    """The server's loop: one request at a time, answered with the child's pid, then its wait status."""
    for name in PRELOAD:
        __import__(name)
    sock = socket.socket(fileno=fd)
    while True:
        try:  # one SOCK_SEQPACKET message: the request and, attached, the child's three descriptors
            body, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 3)
        except OSError:
            return
        if not body:
            return
        request = json.loads(body)
        pid = os.fork()
        if pid == 0:
            _child(request, fds, sock)
        for f in fds:
            os.close(f)
        sock.sendall(struct.pack("!i", pid))
        _, status = os.waitpid(pid, 0)
        sock.sendall(struct.pack("!i", status))


# ------------------------------------------------------------------------------------------- client side

class _Server:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests"),
                                                            os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        self.proc = subprocess.Popen([sys.executable, "-c", "import sys, cliserver; cliserver.serve(int(sys.argv[1]))",
                                      str(theirs.fileno())], pass_fds=[theirs.fileno()], cwd=ROOT, env=env,
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: _Server | None = None
_server_pid = 0


def _get_server() -> _Server:
    global _server, _server_pid
    if _server is None or _server_pid != os.getpid() or _server.proc.poll() is not None:
        _server, _server_pid = _Server(), os.getpid()
        atexit.register(_server.close)
    return _server


def _status_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run_cli(args: Sequence[str], *, input: bytes | str | None = None, stdin: Any = None, stdout: Any = subprocess.PIPE,
            stderr: Any = subprocess.PIPE, cwd: str | os.PathLike[str] = ROOT, env: Mapping[str, str] | None = None,
            timeout: float = 120, text: bool = False, umask: int | None = None, close: Sequence[int] = (),
            ) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], …)` through the fork server.

    `input` feeds stdin through a pipe; else `stdin` is DEVNULL (the default) or a file object. `stdout` /
    `stderr` are PIPE (captured), DEVNULL or a file object. `close`: descriptors (0, 1, 2) the child starts
    without, as a `preexec_fn=lambda: os.close(fd)` would. `umask` as `os.umask` in a preexec_fn."""
    server = _get_server()
    opened: list[int] = []
    captured: dict[int, IO[bytes]] = {}
    feeder: threading.Thread | None = None

    def devnull() -> int:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd

    if input is not None:
        r, w = os.pipe()
        opened.append(r)
        data = input.encode() if isinstance(input, str) else input

        def feed() -> None:
            try:
                os.write(w, data) if len(data) < 65536 else [os.write(w, data[i:i + 65536])
                                                            for i in range(0, len(data), 65536)]
            except OSError:
                pass
            finally:
                os.close(w)
        feeder = threading.Thread(target=feed, daemon=True)
        fd0 = r
    elif stdin is None or stdin == subprocess.DEVNULL:
        fd0 = devnull()
    else:
        fd0 = stdin if isinstance(stdin, int) else stdin.fileno()
    out_fds = []
    for target, where in ((1, stdout), (2, stderr)):
        if where == subprocess.PIPE:
            f = tempfile.TemporaryFile()
            captured[target] = f
            out_fds.append(f.fileno())
        elif where == subprocess.DEVNULL or where is None:
            out_fds.append(devnull())
        else:
            out_fds.append(where if isinstance(where, int) else where.fileno())
    request = json.dumps({"args": list(map(str, args)), "cwd": os.fspath(cwd),
                          "env": dict(os.environ if env is None else env), "umask": umask,
                          "close": list(close)}).encode()
    try:
        with server.lock:
            socket.send_fds(server.sock, [request], [fd0, *out_fds])
            pid = _recv_int(server.sock)
            if feeder is not None:
                feeder.start()
            for fd in opened:
                os.close(fd)
            opened.clear()
            server.sock.settimeout(timeout)
            try:
                status = _recv_int(server.sock)
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                server.sock.settimeout(None)
                _recv_int(server.sock)
                raise subprocess.TimeoutExpired(["logdoctor", *map(str, args)], timeout) from None
            finally:
                server.sock.settimeout(None)
    finally:
        for fd in opened:
            os.close(fd)
    results: dict[int, Any] = {1: None, 2: None}
    for target, capture in captured.items():
        capture.seek(0)
        raw = capture.read()
        capture.close()
        results[target] = raw.decode().replace("\r\n", "\n").replace("\r", "\n") if text else raw
    return subprocess.CompletedProcess([sys.executable, "-m", "logdoctor.cli", *map(str, args)],
                                       _status_code(status), results[1], results[2])


__all__ = ["run_cli", "serve"]
