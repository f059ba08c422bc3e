"""Attacks of issue 9, items 1-4: caches, small slow inputs, file names, hostile rule files.

Each function sets up its files in a Sandbox and returns the Spec of the command to run and what must
hold afterwards; `@attack` adds it to the table (adversarial_kit.ATTACKS). Inputs are built here from the
project's own fixtures, so the table needs nothing else. Items 5-8 are in adversarial_io.py.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

from adversarial_kit import (
    CAPTURE_OOM,
    FIX,
    HEALTHY,
    MEM_BOUND_MB,
    NOBODY,
    RULE,
    SLOW_BOUND_S,
    Outcome,
    Sandbox,
    Spec,
    attack,
    chown_tree,
    explain,
    file_bytes,
    file_state,
    is_parquet,
    make_fifo,
    pickle_bomb,
    report_is,
    rows_are,
    rows_summary,
    simple_rule,
    wrong_shape,
)

# ------------------------------------------------------------------------------------------------
# 1. caches: nothing read from a cache may run code, hang, or break later runs

def _plant_old_and_learnt(sb: Sandbox, plant: Callable[[object], None]) -> int:
    """XDG cache unwritable; another user plants at the old temp-dir name and at every path a warm run used."""
    sb.unwritable_cache()
    learnt = [p for p in sb.learn_cache_files(["explain", str(CAPTURE_OOM)]) if sb.tmp in p.parents]
    for p in learnt:
        p.unlink()
    targets = {sb.tmp / sb.old_grammar_cache_name(), *learnt}
    for p in targets:
        p.parent.mkdir(parents=True, exist_ok=True)
        chown_tree(p.parent, NOBODY, sb.tmp)
        plant(p)
        os.lchown(p, NOBODY, NOBODY)
    return len(targets)


@attack("cache: pickle planted in TMPDIR by another user", 1,
        "MEM003; the planted pickle never runs", needs="root")
def _(sb: Sandbox) -> Spec:
    _plant_old_and_learnt(sb, lambda p: p.write_bytes(pickle_bomb(sb.marker)))  # type: ignore[attr-defined]
    return explain(CAPTURE_OOM, "MEM003", {1})


@attack("cache: FIFO planted in TMPDIR by another user", 1, "MEM003 within 20 s (no hang)", needs="root")
def _(sb: Sandbox) -> Spec:
    _plant_old_and_learnt(sb, make_fifo)  # type: ignore[arg-type]
    return explain(CAPTURE_OOM, "MEM003", {1}, timeout=20)


@attack("cache: every file of the private cache becomes a pickle", 1, "MEM003; the pickle never runs")
def _(sb: Sandbox) -> Spec:
    for p in sb.learn_cache_files(["explain", str(CAPTURE_OOM)]):
        p.write_bytes(pickle_bomb(sb.marker))
    return explain(CAPTURE_OOM, "MEM003", {1})


@attack("cache: every file of the private cache becomes a FIFO", 1, "MEM003 within 20 s (no hang)")
def _(sb: Sandbox) -> Spec:
    for p in sb.learn_cache_files(["explain", str(CAPTURE_OOM)]):
        make_fifo(p)
    return explain(CAPTURE_OOM, "MEM003", {1}, timeout=20)


@attack("cache: rules cache is valid JSON of the wrong shape", 1, "MEM003, and again on the next run")
def _(sb: Sandbox) -> Spec:
    for p in sb.learn_cache_files(["explain", str(CAPTURE_OOM)]):
        p.write_bytes(wrong_shape(p.read_bytes()))
    second = lambda o: None if sb.cli(["explain", str(CAPTURE_OOM)]).returncode == 1 else "the next run fails"
    spec = explain(CAPTURE_OOM, "MEM003", {1})
    spec.checks.append(second)
    return spec


@attack("cache: every cache file cut in half", 1, "MEM003")
def _(sb: Sandbox) -> Spec:
    for p in sb.learn_cache_files(["explain", str(CAPTURE_OOM)]):
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
    return explain(CAPTURE_OOM, "MEM003", {1})


@attack("cache: shared XDG cache owned by another user, planted", 1,
        "MEM003; nothing from that cache is read", needs="root")
def _(sb: Sandbox) -> Spec:
    learnt = [p.relative_to(sb.cache) for p in sb.learn_cache_files(["explain", str(CAPTURE_OOM)])
              if sb.cache in p.parents]
    for p in sorted(sb.cache.rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() else p.rmdir()
    for rel in learnt or [Path("logdoctor", sb.old_grammar_cache_name())]:
        p = sb.cache / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(pickle_bomb(sb.marker))
    for p in [sb.cache, *sb.cache.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)
        os.chmod(p, 0o777 if p.is_dir() else 0o666)
    return explain(CAPTURE_OOM, "MEM003", {1})


@attack("cache: read-only home, unprivileged", 1, "MEM003 (no cache, no error)", needs="root")
def _(sb: Sandbox) -> Spec:
    sb.env.pop("XDG_CACHE_HOME")
    os.chmod(sb.home, 0o555)
    return explain(CAPTURE_OOM, "MEM003", {1}, unprivileged=True)


# ------------------------------------------------------------------------------------------------
# 2. small inputs that took minutes (each under 1 MB except the two continuation logs)

_TB = (b'Traceback (most recent call last):\n  File "/sglang/srt/managers/router/model_rpc.py", line 130, '
       b'in exposed_step\n    self.forward_step()\nValueError: bad request\n')
_CHILD_HEAD = (b'Traceback (most recent call last):\n  File "run.py", line 8, in <module>\n    main()\n'
               b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")


def v01_request_traceback_then_serving(lines: int = 60_000) -> bytes:
    v01 = (FIX / "v0.1-router-tp1.log").read_bytes()
    serving = [ln for ln in v01.split(b"\n") if ln.startswith((b"#running-req", b"new fill batch"))]
    return v01 + _TB + b"\n".join(serving[i % len(serving)] for i in range(lines)) + b"\n"


# name: (input, allowed exits, the right answer, time bound in s); the bound includes process start
SLOW_INPUTS: dict[str, tuple[Callable[[], bytes], set[int], str, float]] = {
    "v0.1 request traceback + 60k serving lines (4.9 MB)": (v01_request_traceback_then_serving, {0}, "healthy", 20.0),
    "traceback message continued for 100k lines (1.8 MB)": (
        lambda: b"[2025-01-01 10:00:00 TP0] Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n"
                b"ValueError: start\n" + b"more message text\n" * 100_000, {0, 1}, "a report", 20.0),
    "ChildFailedError + 3,000 Root Cause rank lines": (
        lambda: _CHILD_HEAD + b"Root Cause (first observed failure): rank: 3 (local_rank: 3)\n" * 3000,
        {1}, "failed", SLOW_BOUND_S),
    "watchdog line with a 20 KB SeqNum/OpType run": (
        lambda: b"[rank1]:[E0520 03:21:17.740120642 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
                b"operation timeout: WorkNCCL(" + b"SeqNum=1, OpType=ALLREDUCE, " * 720 + b"\n", {0, 1}, "a report",
        SLOW_BOUND_S),
    "CUDA out of memory + 40k digits": (
        lambda: b"[2025-01-01 10:00:00 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                + b"1" * 40_000 + b"\n", {0, 1}, "a report", SLOW_BOUND_S),
    "NCCL-prefixed line with 40k spaces": (lambda: b"host:1:2 [0] " + b" " * 40_000 + b"NCCL x\n", {0, 1}, "a report",
                                           SLOW_BOUND_S),
    "60k digits around a lone CR": (
        lambda: b"[2025-01-01 10:00:00 TP0] " + b"1" * 30_000 + b"\r" + b"1" * 30_000 + b"\n", {0, 1}, "a report",
        SLOW_BOUND_S),
    "200 KB Ray (pid= prefix run": (lambda: b"(" + b"pid=123 " * 25_000 + b"\n", {0, 1}, "a report", SLOW_BOUND_S),
}


def _slow(name: str, make: Callable[[], bytes], exits: set[int], what: str, bound: float) -> None:
    @attack(f"slow: {name}", 2, f"{what} in <= {bound:g} s")
    def _(sb: Sandbox) -> Spec:
        checks = [report_is(not_verdict="failed")] if exits == {0} else [report_is()]
        return explain(sb.write("slow.log", make()), None, exits, max_s=bound, checks=checks)


for _name, _case in SLOW_INPUTS.items():
    _slow(_name, *_case)


@attack("slow: batch of 3 slow files + 2 good ones, -o", 2, "5 rows written (a stuck file is an error row)")
def _(sb: Sandbox) -> Spec:
    for i, name in enumerate(list(SLOW_INPUTS)[:3]):
        sb.write(f"logs/slow-{i}.log", SLOW_INPUTS[name][0]())
    sb.copy(CAPTURE_OOM, "logs/good-1.log")
    sb.copy(HEALTHY, "logs/good-2.log")
    out = sb.path("rows.json")
    return Spec(["batch", "logs", "--jobs", "2", "--format", "json", "-o", str(out)], {1, 2}, timeout=240,
                checks=[rows_are(5, file_bytes(out), contains=("good-1", "good-2"))],
                summary=rows_summary(file_bytes(out)))


# ------------------------------------------------------------------------------------------------
# 3. one file name that is not UTF-8 must not lose the batch

def _bad_name_dir(sb: Sandbox) -> str:
    sb.write(b"logs/bad-\xff\xfe.log", HEALTHY.read_bytes())
    sb.copy(CAPTURE_OOM, "logs/good.log")
    return "logs"


@attack("names: non-UTF-8 file name, batch --format json", 3, "2 rows")
def _(sb: Sandbox) -> Spec:
    return Spec(["batch", _bad_name_dir(sb), "--format", "json"], {1, 2},
                checks=[rows_are(2, contains=("good.log", "bad-"))], summary=rows_summary())


@attack("names: non-UTF-8 file name, runs --format csv", 3, "2 rows")
def _(sb: Sandbox) -> Spec:
    return Spec(["runs", _bad_name_dir(sb), "--format", "csv"], {1, 2},
                checks=[rows_are(2, fmt="csv", contains=("good.log", "bad-"))], summary=rows_summary(fmt="csv"))


@attack("names: non-UTF-8 file name, batch --format parquet -o", 3, "a parquet file")
def _(sb: Sandbox) -> Spec:
    out = sb.path("rows.parquet")
    return Spec(["batch", _bad_name_dir(sb), "--format", "parquet", "-o", str(out)], {1, 2},
                checks=[is_parquet(out)], summary=file_state(out))


@attack("names: ESC and newline in file names, batch table", 3, "no raw ESC / newline from names on stdout")
def _(sb: Sandbox) -> Spec:
    sb.copy(CAPTURE_OOM, "logs/esc-\x1b[31mred\x1b[0m.log")
    sb.copy(HEALTHY, "logs/nl-\nname.log")

    def clean(o: Outcome) -> str | None:
        if b"\x1b" in o.stdout:
            return "raw ESC on stdout"
        return "raw newline from a name" if re.search(rb"^name\.log", o.stdout, re.MULTILINE) else None
    return Spec(["batch", "logs"], {1, 2}, checks=[clean],
                summary=lambda o: f"{len(o.stdout.splitlines())} lines, no raw ESC or newline from a name")


# ------------------------------------------------------------------------------------------------
# 4. hostile rule files (schema-valid or nearly)

def costly_rule() -> str:
    """20 selections x 20 alternatives = 400 RE2 patterns over every event's text, each linear but ~4 ms a
    line (nested counted repetition, no literal a prefilter could use); about 25 KB."""
    sels = []
    for s in range(20):
        alts = ", ".join(f"{{text: {{regex: '(?s)(((.{{1,5}}){{1,5}}){{1,5}}){{1,{6 + i % 3}}}[#@]'}}}}" for i in range(20))
        sels.append(f"  s{s}: {{any_of: [{alts}]}}")
    return RULE.format(match="\n".join(sels), condition=" or ".join(f"s{s}" for s in range(20)),
                       explanation="a costly rule matched")



def _rule_explain(sb: Sandbox, text: str, **kw: object) -> Spec:
    rules = sb.rules(text)
    spec = Spec(["explain", "--format", "json", str(CAPTURE_OOM), "--rules", rules], {1, 2}, **kw)  # type: ignore[arg-type]
    spec.checks.append(lambda o: None if o.exit != 2 or "hostile.yaml" in o.text else "exit 2 without naming the rule file")
    return spec


@attack("rules: 400 costly RE2 patterns (25 KB rule)", 4, "refused at load, or explain in <= 20 s")
def _(sb: Sandbox) -> Spec:
    return _rule_explain(sb, costly_rule(), max_s=20)


@attack("rules: template {line:999999999}", 4, f"a clear error or a report; RSS <= {MEM_BOUND_MB} MB")
def _(sb: Sandbox) -> Spec:
    return _rule_explain(sb, simple_rule(explanation="'failed at {line:999999999}'"), max_rss_mb=MEM_BOUND_MB)


@attack("rules: template {line:9999999999}", 4, f"a clear error or a report; RSS <= {MEM_BOUND_MB} MB")
def _(sb: Sandbox) -> Spec:
    return _rule_explain(sb, simple_rule(explanation="'failed at {line:9999999999}'"), max_rss_mb=MEM_BOUND_MB)


_NESTED_BAD = "message: {in: [{regex: '(unclosed'}]}"


@attack("rules: bad regex nested in in: [{regex: ...}], rules check", 4, "exit 2 naming the file")
def _(sb: Sandbox) -> Spec:
    return Spec(["rules", "check", sb.rules(simple_rule(_NESTED_BAD))], {2}, want=("hostile.yaml",))


@attack("rules: bad regex nested in in: [...], batch --rules", 4, "exit 2 once, before any row")
def _(sb: Sandbox) -> Spec:
    rules = sb.rules(simple_rule(_NESTED_BAD))
    return Spec(["batch", str(CAPTURE_OOM), str(HEALTHY), "--rules", rules, "--format", "json"], {2},
                want=("hostile.yaml",), checks=[lambda o: "rows written" if o.stdout.strip() else None])


def _check_then_use(sb: Sandbox, where: str) -> Spec:
    """`rules check` gives a clear answer, and explain with the rule agrees with it."""
    rules = sb.rules(simple_rule(where))

    def agrees(o: Outcome) -> str | None:
        used = sb.cli(["explain", str(CAPTURE_OOM), "--rules", rules])
        bad = b"internal error" in used.stderr or b"Traceback" in used.stderr
        if bad or (o.exit == 0) != (used.returncode == 1):
            return f"rules check exit {o.exit}, but explain --rules exit {used.returncode}: {used.stderr[:80]!r}"
        return None
    return Spec(["rules", "check", rules], {0, 2}, checks=[agrees],
                summary=lambda o: (o.stdout.decode("utf-8", "replace").strip().splitlines() or [""])[0][:110])


for _label, _where in {"YAML date": "message: {eq: 2025-01-01}", "!!binary": "message: {eq: !!binary aGVsbG8=}",
                       "!!set": "message: {eq: !!set {a, b}}", "5000-digit integer": "numbers: {gt: " + "9" * 5000 + "}"}.items():
    attack(f"rules: {_label} in a rule", 4, "a clear file:line error or OK; explain agrees")(
        partial(_check_then_use, where=_where))


@attack("rules: rule file symlinked to a secret file", 4, "exit 2; the secret is not printed")
def _(sb: Sandbox) -> Spec:
    secret = sb.write("secret.txt", "TOPSECRET-7f3a9c value: hunter2\n", mode=0o600)
    link = sb.path("rules/unknown/stolen.yaml")
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    return Spec(["rules", "check", "rules"], {2}, forbid=("TOPSECRET", "hunter2"), want=("stolen.yaml",))


@attack("rules: rule file symlinked to /proc/kallsyms (size 0, MBs)", 4,
        "exit 2: over the size limit (not read whole)", needs="/proc/kallsyms")
def _(sb: Sandbox) -> Spec:
    link = sb.path("rules/unknown/big.yaml")
    link.parent.mkdir(parents=True)
    link.symlink_to("/proc/kallsyms")  # stat says 0 bytes; reading gives megabytes

    def said_limit(o: Outcome) -> str | None:
        return None if re.search(r"limit|too (large|big)", o.text) else "no size limit named"
    return Spec(["rules", "check", "rules"], {2}, want=("big.yaml",), max_rss_mb=MEM_BOUND_MB, checks=[said_limit])
