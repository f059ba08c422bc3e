"""Worker processes for batch: one file per task, a time budget per file, quiet on signals.

Not `multiprocessing.Pool` / `ProcessPoolExecutor`: neither can end one stuck task (a file that takes
forever stalls the whole batch), and their helper threads print tracebacks when the parent is interrupted.
Here each worker is a forked process with its own pipe; the parent hands it one item at a time, and a
worker that overruns its budget (or dies) is killed and replaced while the item gets a failure result.

Signals: workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group; the parent decides)
and die with their parent (PR_SET_PDEATHSIG on Linux; elsewhere they see their pipe close once idle).
The parent kills every worker on its way out, whatever the reason.

Scratch files: each worker may get an unlinked temp file to append to (batch `--events`). An unlinked
file disappears with the last process holding it, so nothing is left behind even after SIGKILL. When a
worker is killed mid-item its file is cut back to the end of its last finished item.
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from multiprocessing import connection
from typing import IO, Any, Generic, TypeVar

from logdoctor.records import dataclass, field

Item = TypeVar("Item")
Result = TypeVar("Result")

OVERSUBSCRIBE = 2  # workers per usable CPU: some time goes to reading files, not all to the CPU
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


CGROUP_ROOT = "/sys/fs/cgroup"


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota (a pod's
    `resources.limits.cpu`), rounded up: a 1.5-CPU quota keeps two workers busy part of the time."""
    try:
        cpus = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        import math
        cpus = min(cpus, max(1, math.ceil(quota)))
    return cpus


def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 `cpu.max` ("QUOTA PERIOD" in µs, "max PERIOD" for no limit)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    try:
        quota = int(parts[0])
        period = int(parts[1]) if len(parts) > 1 else 100_000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1: no limit)."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_quota(root: str = CGROUP_ROOT, self_cgroup: str | None = None) -> float | None:
    """The tightest CPU quota on this process's cgroup or any ancestor (v2 and v1), None when unlimited.

    `self_cgroup`: the text of /proc/self/cgroup (read when None). Never raises."""
    if self_cgroup is None:
        try:
            with open("/proc/self/cgroup", encoding="utf-8") as f:
                self_cgroup = f.read()
        except OSError:
            self_cgroup = ""
    limits: list[float] = []
    for line in self_cgroup.splitlines():
        hid, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":
            for d in _up_from(os.path.join(root, rel.lstrip("/")), root):
                limits += [q for q in [parse_cpu_max(_read(os.path.join(d, "cpu.max")) or "max")] if q]
        elif "cpu" in controllers.split(","):
            for base in (os.path.join(root, controllers), os.path.join(root, "cpu")):
                for d in _up_from(os.path.join(base, rel.lstrip("/")), base):
                    q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
                    if q is not None and p is not None:
                        limits += [x for x in [parse_cfs(q, p)] if x]
    return min(limits) if limits else None


def _up_from(d: str, top: str) -> list[str]:
    """d and its parents up to top (inside a container the cgroup path may not exist below the root)."""
    out = []
    d, top = os.path.normpath(d), os.path.normpath(top)
    while True:
        out.append(d)
        if d == top or not d.startswith(top):
            return out
        d = os.path.dirname(d)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(256)
    except (OSError, UnicodeDecodeError):
        return None


def worker_count(jobs: int, items: int) -> int:
    """Never more workers than items, nor than OVERSUBSCRIBE × the CPUs this process may use."""
    return max(1, min(jobs, items, usable_cpus() * OVERSUBSCRIBE))


def scratch_path(f: IO[bytes]) -> str:
    """A name other code (polars) can open for an unlinked file this process holds."""
    for base in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(base):
            return f"{base}/{f.fileno()}"
    raise OSError("no /proc/self/fd or /dev/fd to reopen an unlinked temp file by name")


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(conn: Any, parent: int, work: Callable[[Any], Any], init: Callable[[IO[bytes] | None], None],
           scratch: IO[bytes] | None, inherited: list[Any]) -> None:
    """A worker's life: take an item, send back its result, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # blocked by the parent around fork()
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(0)
    for other in inherited:  # other workers' pipes and files: holding them would keep those alive
        try:
            other.close()
        except OSError:
            pass
    init(scratch)
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        try:
            result = work(item)
        except Exception as e:  # `work` should never raise; if it does, the item fails, not the worker
            result = _Failure(f"internal error: {type(e).__name__}: {e}")
        try:
            conn.send(result)
        except Exception:  # the parent is gone, or the result cannot be pickled
            os._exit(3)


@dataclass
class _Failure:
    reason: str


@dataclass
class _Worker:
    proc: Any
    conn: Any
    scratch: IO[bytes] | None
    committed: int = 0  # scratch bytes that belong to finished items
    item: Any = None
    busy: bool = False
    deadline: float = float("inf")

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, ValueError):
            pass
        self.proc.join()
        self.conn.close()

    def death(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (out of memory?)" if -code == signal.SIGKILL else ""
            return f"worker process killed by {name}{hint}"
        return f"worker process exited (code {code})"


@dataclass
class Pool(Generic[Item, Result]):
    """Run `work(item)` for every item in `jobs` forked workers; results in completion order.

    `failed(item, reason)` makes the result for an item whose worker timed out or died.
    `init(scratch)` runs once in each new worker (scratch: its unlinked temp file, or None).
    """

    work: Callable[[Item], Result]
    failed: Callable[[Item, str], Result]
    init: Callable[[IO[bytes] | None], None]
    jobs: int
    timeout: float | None = None
    with_scratch: bool = False
    scratches: list[IO[bytes]] = field(default_factory=list)  # every worker's; the caller reads and closes them
    _live: list[_Worker] = field(default_factory=list)

    def _start(self) -> _Worker:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=True)
        scratch = tempfile.TemporaryFile(prefix="logdoctor-") if self.with_scratch else None
        if scratch is not None:
            self.scratches.append(scratch)
        inherited = [w.conn for w in self._live] + [s for s in self.scratches if s is not scratch] + [parent_end]
        if sys.platform.startswith("linux"):
            import ctypes  # noqa: F401  (imported once here, so each child's import is a lookup)
        # signals wait until the child has its own handlers and the parent knows the child
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            proc = ctx.Process(target=_serve, args=(child_end, os.getpid(), self.work, self.init, scratch, inherited),
                               daemon=True)
            proc.start()
            child_end.close()
            w = _Worker(proc, parent_end, scratch)
            self._live.append(w)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return w

    def _replace(self, w: _Worker) -> None:
        w.kill()
        if w.scratch is not None:  # drop what the dead worker wrote for its unfinished item
            w.scratch.truncate(w.committed)
        self._live.remove(w)

    def _give(self, w: _Worker, todo: deque[Item]) -> Result | None:
        """Hand `w` the next item; a failure result if the worker is already gone."""
        if not todo:
            return None
        item = todo.popleft()
        w.item, w.busy = item, True
        w.deadline = time.monotonic() + self.timeout if self.timeout else float("inf")
        try:
            w.conn.send(item)
        except OSError:
            reason = w.death()
            self._replace(w)
            return self.failed(item, reason)
        return None

    def run(self, items: Sequence[Item]) -> Generator[Result, None, None]:
        todo: deque[Item] = deque(items)
        if not todo:
            return
        try:
            for _ in range(worker_count(self.jobs, len(todo))):
                self._start()
            for w in list(self._live):
                lost = self._give(w, todo)
                if lost is not None:
                    yield lost
            while True:
                busy = [w for w in self._live if w.busy]
                if not busy:
                    if not todo:
                        return
                    w = self._start()  # every worker died: start afresh
                    lost = self._give(w, todo)
                    if lost is not None:
                        yield lost
                    continue
                wait = min(w.deadline for w in busy) - time.monotonic()
                ready = connection.wait([w.conn for w in busy], timeout=None if wait == float("inf") else max(0.0, wait))
                now = time.monotonic()
                for w in busy:
                    if w.conn in ready:
                        try:
                            result: Result = w.conn.recv()
                        except (EOFError, OSError):
                            result = self.failed(w.item, w.death())
                            self._replace(w)
                            w = self._start() if todo else w
                        else:
                            if isinstance(result, _Failure):
                                result = self.failed(w.item, result.reason)
                            if w.scratch is not None:
                                w.committed = os.fstat(w.scratch.fileno()).st_size
                            w.busy = False
                        yield result
                    elif now >= w.deadline:
                        item = w.item
                        self._replace(w)
                        yield self.failed(item, f"timed out after {self.timeout:g} s")
                        w = self._start() if todo else w
                    else:
                        continue
                    if w in self._live and not w.busy:
                        lost = self._give(w, todo)
                        if lost is not None:
                            yield lost
        finally:
            for w in self._live:
                w.kill()
            self._live.clear()
