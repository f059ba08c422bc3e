"""What an adversarial attack is made of: its sandbox, the command it runs, what came out, and checks.

Kept apart from the attack table (adversarial_attacks.py) and the runner (adversarial.py) so that an
attack reads as data: set up files in a Sandbox, return a Spec, let the runner judge the Outcome.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import pickle
import shlex
import stat
import subprocess
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "logs"
NOBODY = 65534

Check = Callable[["Outcome"], "str | None"]


@dataclass
class Outcome:
    exit: int
    stdout: bytes
    stderr: bytes
    secs: float
    rss_mb: float
    procs: int
    timed_out: bool
    leftovers: int
    fifo_data: bytes | None = None
    signal_at: float | None = None

    @property
    def text(self) -> str:
        return (self.stdout + b"\n" + self.stderr).decode("utf-8", "replace")

    @property
    def err_line(self) -> str:
        lines = [ln.strip() for ln in self.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[0][:110] if lines else ""


@dataclass
class Spec:
    """One command and what must hold after it."""
    args: list[str]
    exits: frozenset[int] | set[int]
    want: tuple[str, ...] = ()                 # substrings of stdout + stderr that must appear
    forbid: tuple[str, ...] = ()               # ... and that must not (tracebacks are always forbidden)
    checks: list[Check] = field(default_factory=list)
    stdin: bytes | Callable[[], Iterable[bytes]] | None = None
    pipe_data: bytes | None = None             # written into a pipe named by "{PIPE}" in args
    fifo_reader: Path | None = None            # read this FIFO while the command runs
    close_fds: tuple[int, ...] = ()            # e.g. (0,) runs the command with stdin closed
    signal: tuple[int, bool] | None = None     # (signal, to the whole process group?) once workers run
    unprivileged: bool = False                 # root minus the capabilities that bypass file permissions
    umask: int = 0o022
    timeout: float | None = None
    max_s: float | None = None
    max_rss_mb: float | None = None
    max_procs: int | None = None
    mem_gb: float | None = None                # a tighter address-space cap than the table's
    summary: Callable[[Outcome], str] | None = None

    def describe(self, o: Outcome) -> str:
        if self.summary:
            try:
                return self.summary(o)
            except Exception as e:
                return f"(summary failed: {type(e).__name__})"
        return o.err_line or (o.stdout.decode("utf-8", "replace").strip().splitlines() or ["no output"])[0][:110]


@dataclass
class Attack:
    name: str
    item: int
    expected: str
    build: Callable[[Sandbox], Spec]
    needs: str | None = None                   # "root", or a path that must exist

    def applicable(self) -> str | None:
        if self.needs == "root" and os.geteuid() != 0:
            return "needs root"
        if self.needs and self.needs.startswith("/") and not os.path.exists(self.needs):
            return f"needs {self.needs}"
        return None


class Sandbox:
    """A fresh directory tree per attack: work/ (cwd), home/, cache/ (XDG_CACHE_HOME), tmp/ (TMPDIR)."""

    def __init__(self, root: Path, cmd: list[str], source_root: Path = ROOT) -> None:
        self.root, self.cmd, self.source_root = root, cmd, source_root
        os.chmod(root, 0o755)  # attacks that run as another user must be able to enter
        self.work, self.home, self.cache, self.tmp = (root / n for n in ("work", "home", "cache", "tmp"))
        for d in (self.work, self.home, self.cache, self.tmp):
            d.mkdir()
        os.chmod(self.tmp, 0o1777)  # a shared temp dir, like /tmp
        self.marker = root / "PLANTED-CODE-RAN"
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
                    "XDG_CACHE_HOME": str(self.cache), "TMPDIR": str(self.tmp), "LANG": "C.UTF-8",
                    "LC_ALL": "C.UTF-8"}

    def path(self, name: str | bytes) -> Path:
        return self.work / os.fsdecode(name)

    def write(self, name: str | bytes, data: bytes | str, mode: int | None = None) -> Path:
        raw = os.path.join(os.fsencode(self.work), os.fsencode(name))
        os.makedirs(os.path.dirname(raw), exist_ok=True)
        with open(raw, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(raw, mode)
        return Path(os.fsdecode(raw))

    def copy(self, fixture: Path, name: str) -> Path:
        return self.write(name, fixture.read_bytes())

    def rules(self, text: str, name: str = "hostile") -> str:
        self.write(f"rules/unknown/{name}.yaml", text)
        return str(self.work / "rules")

    def unwritable_cache(self) -> None:
        """HOME and XDG_CACHE_HOME under a regular file: no cache dir can be made, even by root."""
        blocker = self.root / "not-a-directory"
        blocker.write_text("x")
        self.env.update(XDG_CACHE_HOME=str(blocker / "cache"), HOME=str(blocker / "home"))

    def cli(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        """A plain run of the command (warm-ups, follow-up runs), not measured."""
        return subprocess.run(self.cmd + args, check=False, cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)

    def files_under(self, *dirs: Path) -> set[Path]:
        out: set[Path] = set()
        for d in dirs:
            if d.is_dir():
                out |= {p for p in d.rglob("*") if p.is_file() or p.is_fifo()}
        return out

    def learn_cache_files(self, args: list[str]) -> list[Path]:
        """Every file a warm run writes under HOME, XDG_CACHE_HOME and TMPDIR (whatever the cache looks like)."""
        dirs = [Path(self.env["HOME"]), Path(self.env["XDG_CACHE_HOME"]), self.tmp]
        before = self.files_under(*dirs)
        self.cli(args)
        return sorted(self.files_under(*dirs) - before)

    def old_grammar_cache_name(self) -> str:
        """The predictable name lark's grammar cache had in the temp dir (before issue 9)."""
        data = (self.source_root / "grammars" / "sglang.lark").read_bytes()
        return f"sglang-{zlib.crc32(data):08x}{len(data):x}.lark.cache"


# ------------------------------------------------------------------------------------------------
# planted content


class _Bomb:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {shlex.quote(self.marker)}",)


def pickle_bomb(marker: Path) -> bytes:
    """What lark's cache looks like (a 64-hex hash line, then pickles), whose first pickle runs a command."""
    return b"0" * 64 + b"\n" + pickle.dumps(_Bomb(str(marker)), protocol=2)


def wrong_shape(data: bytes) -> bytes:
    """Valid JSON of the wrong shape for whatever JSON a cache held."""
    try:
        obj = json.loads(data)
    except ValueError:
        return b'{"x": [1, 2]}'
    if isinstance(obj, dict) and obj:
        return json.dumps({k: [] for k in obj}).encode()
    return json.dumps({"x": [1, 2]} if isinstance(obj, list) else [obj]).encode()


def make_fifo(path: Path) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)


def chown_tree(top: Path, uid: int, stop: Path) -> None:
    """chown `top` and its parents up to (not including) `stop`."""
    p = top
    while p != stop and stop in p.parents:
        os.chown(p, uid, uid)
        p = p.parent


def corrupt_gzip(data: bytes) -> bytes:
    gz = bytearray(gzip.compress(data))
    for i in range(20, min(len(gz) - 8, 2000), 7):
        gz[i] ^= 0x5A
    return bytes(gz)


def link_many(sb: Sandbox, fixture: Path, n: int, subdir: str = "many") -> str:
    first = sb.copy(fixture, f"{subdir}/log-0000.log")
    for i in range(1, n):
        os.link(first, first.with_name(f"log-{i:04d}.log"))
    return str(first.parent)


# ------------------------------------------------------------------------------------------------
# checks


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_json(raw: bytes) -> Any:
    return json.loads(raw, parse_constant=_reject_constant)


def report_is(rule: str | None = None, verdict: str | None = None, not_verdict: str | None = None) -> Check:
    """stdout is one strict JSON explain report with this primary rule / verdict."""
    def check(o: Outcome) -> str | None:
        try:
            d = strict_json(o.stdout)
        except ValueError as e:
            return f"stdout is not strict JSON ({str(e)[:60]})"
        got = (d.get("primary") or {}).get("rule")
        if rule is not None and got != rule:
            return f"primary rule {got}, expected {rule}"
        if verdict is not None and d.get("verdict") != verdict:
            return f"verdict {d.get('verdict')}, expected {verdict}"
        if not_verdict is not None and d.get("verdict") == not_verdict:
            return f"verdict {not_verdict} ({got})"
        return None
    return check


def verdict_summary(o: Outcome) -> str:
    try:
        d = strict_json(o.stdout)
    except ValueError:
        return o.err_line or "no JSON"
    return f"{d.get('verdict')}, {(d.get('primary') or {}).get('rule')}"


def json_rows(raw: bytes) -> list[dict[str, Any]]:
    rows = strict_json(raw)
    if not isinstance(rows, list):
        raise ValueError("not a list of rows")
    return rows


def rows_are(n: int, source: Callable[[Outcome], bytes] | None = None, fmt: str = "json",
             contains: tuple[str, ...] = ()) -> Check:
    """The batch/runs output has `n` rows, and the listed substrings appear among their paths."""
    def check(o: Outcome) -> str | None:
        raw = source(o) if source else o.stdout
        try:
            rows = json_rows(raw) if fmt == "json" else list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
        except (ValueError, UnicodeDecodeError, csv.Error) as e:
            return f"output not readable as {fmt} ({str(e)[:60]})"
        if len(rows) != n:
            return f"{len(rows)} rows, expected {n}"
        internal = [r for r in rows if "internal error" in str(r.get("error") or "")]
        if internal:
            return f"row error: {internal[0]['error'][:80]}"
        paths = " ".join(str(r.get("path")) for r in rows)
        missing = [c for c in contains if c not in paths]
        return f"no row for {missing}" if missing else None
    return check


def rows_summary(source: Callable[[Outcome], bytes] | None = None, fmt: str = "json") -> Callable[[Outcome], str]:
    def summary(o: Outcome) -> str:
        raw = source(o) if source else o.stdout
        rows = json_rows(raw) if fmt == "json" else list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
        errors = [r for r in rows if r.get("error")]
        return f"{len(rows)} rows" + (f", {len(errors)} error: {errors[0]['error'][:60]}" if errors else "")
    return summary


def file_state(path: Path) -> Callable[[Outcome], str]:
    """What -o left at `path`: its kind, mode and size."""
    def summary(o: Outcome) -> str:
        try:
            st = path.lstat()
        except FileNotFoundError:
            return f"{path.name}: missing"
        kinds = [(stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "char device"),
                 (stat.S_ISREG, "file"), (stat.S_ISDIR, "directory")]
        kind = next((name for test, name in kinds if test(st.st_mode)), "other")
        return f"{path.name}: {kind} {stat.S_IMODE(st.st_mode):04o}, {st.st_size} bytes"
    return summary


def is_parquet(path: Path) -> Check:
    return lambda o: None if path.is_file() and path.read_bytes()[:4] == b"PAR1" else "no parquet file"


def file_bytes(path: Path) -> Callable[[Outcome], bytes]:
    return lambda o: path.read_bytes()


def no_such(path: Path, what: str) -> Check:
    return lambda o: f"{what} exists" if path.exists() or path.is_symlink() else None


def no_glob(directory: Path, pattern: str) -> Check:
    def check(o: Outcome) -> str | None:
        left = sorted(p.name for p in directory.glob(pattern))
        return f"left behind: {', '.join(left)[:80]}" if left else None
    return check


def mode_is(path: Path, mode: int) -> Check:
    def check(o: Outcome) -> str | None:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode):
            return f"{path.name} is no longer a regular file"
        got = stat.S_IMODE(st.st_mode)
        return None if got == mode else f"mode {got:04o}, expected {mode:04o}"
    return check


def contains_text(path: Path, text: str) -> Check:
    def check(o: Outcome) -> str | None:
        try:
            data = path.read_bytes()
        except OSError as e:
            return f"cannot read {path.name}: {e.strerror}"
        return None if text.encode() in data else f"{path.name} does not hold the output"
    return check


def still_kind(path: Path, kind: Callable[[int], bool], what: str) -> Check:
    def check(o: Outcome) -> str | None:
        try:
            st = path.lstat()
        except FileNotFoundError:
            return f"{path.name} is gone"
        return None if kind(st.st_mode) else f"{path.name} is no longer a {what}"
    return check


# ------------------------------------------------------------------------------------------------
# building the table: the registry, the fixtures the attacks start from, their bounds


ATTACKS: list[Attack] = []                          # in registration order
CAPTURE_OOM = FIX / "v0.5-capture-oom-tp4.log"      # failed, MEM003
HEALTHY = FIX / "v0.5early-tp2.log"                 # healthy, has #tokens / avail mem / batch lines
ARCH = FIX / "v0.5-arch-unsupported.log"            # failed, UNS001
SERVING = FIX / "v0.4.7-serving-request-error.log"  # 880 lines, healthy
MEM_BOUND_MB = 256        # what a bounded reader may hold, whatever the input size (idle: ~35 MB, polars: ~75)
SLOW_BOUND_S = 10.0       # an input under 1 MB, process start included


def attack(name: str, item: int, expected: str, needs: str | None = None) -> Callable[[Callable[[Sandbox], Spec]], None]:
    def register(build: Callable[[Sandbox], Spec]) -> None:
        ATTACKS.append(Attack(name, item, expected, build, needs))
    return register


def explain(path: object, rule: str | None, exits: set[int], *more: str, checks: list[Check] | None = None,
            **kw: object) -> Spec:
    """`explain --format json PATH`; the JSON must be strict and name `rule` (when given)."""
    return Spec(["explain", "--format", "json", str(path), *more], exits, checks=checks or [report_is(rule)],
                summary=verdict_summary, **kw)  # type: ignore[arg-type]


RULE = """\
id: UNK950
name: hostile
title: A rule written by someone else
category: unknown
severity: error
match:
{match}
condition: {condition}
explanation: {explanation}
remedy: [do something]
examples: {{fires: [a.log], quiet: [b.log]}}
"""


def simple_rule(where: str = "", explanation: str = "rank {rank} failed here") -> str:
    sel = f"  x: {{event: traceback{', where: {' + where + '}' if where else ''}}}"
    return RULE.format(match=sel, condition="x", explanation=explanation)

