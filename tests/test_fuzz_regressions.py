"""Every input the fuzzer (tools/fuzz.py) ever found is replayed here, and must now pass.

Crash inputs (`<target>-<sha>.bin`) run in this process and must not raise. Slow and memory findings
(`<target>-slow-<sha>.bin`, `<target>-memory-<sha>.bin`) run in a child process under an address-space
cap and a 20 s hang guard: that guard is not a speed goal (the inputs took minutes or forever when they
were found; fixed, they take well under a second), it only keeps a regression from hanging the suite.
"""
from __future__ import annotations

import random
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_shapes  # noqa: E402
from fuzz import TARGETS  # noqa: E402

CASES = sorted((ROOT / "fixtures" / "fuzz").glob("*.bin"))
HANG_GUARD_S = 20
REPLAY_CAP = 2 << 30


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_found_input_is_handled(path: Path) -> None:
    target, kind = path.name.split("-")[:2]
    if kind in ("slow", "memory"):
        done = _replay_in_child(path)
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        TARGETS[target](path.read_bytes())


def _replay_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.path.insert(0, {str(TOOLS)!r}); from fuzz import TARGETS; "
            f"TARGETS[{path.name.split('-', 1)[0]!r}](open({str(path)!r}, 'rb').read())")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (REPLAY_CAP, REPLAY_CAP))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          preexec_fn=cap, check=False)


def test_the_regression_corpus_is_not_empty() -> None:
    assert CASES, "fixtures/fuzz/ should keep the inputs that once crashed"


# ------------------------------------------------------------------------------------------------
# the shapes make what they say


def test_shapes_make_long_runs_repeats_and_blocks() -> None:
    rng = random.Random(7)
    seed = (ROOT / "fixtures" / "logs" / "v0.5early-tp2.log").read_bytes()
    assert b"\n" not in fuzz_shapes.lone_cr(rng, seed) and b"\r" in fuzz_shapes.lone_cr(rng, seed)
    child = fuzz_shapes.child_failed(rng, b"")
    assert child.count(b"ChildFailedError") == 1 and child.count(b"rank") >= 8
    outs = [fuzz_shapes.huge_number(random.Random(i), seed) for i in range(40)]
    assert any(v in o for o in outs for v in (b"9" * 400, b"1e999", b"nan", b"-inf"))
    runs = [fuzz_shapes.char_run(random.Random(i), b"") for i in range(200)]
    assert max(map(len, runs)) > 20_000 and all(len(r) <= fuzz_shapes.MAX_SHAPED for r in runs)
    assert any(len(set(r)) == 1 for r in runs if len(r) > 1000)


def test_rule_hazards_land_in_value_positions() -> None:
    rule = b"id: UNK950\nname: hostile\ntitle: a rule\n"
    out = fuzz_shapes.rule_hazard(random.Random(3), rule)
    assert out != rule and out.startswith(b"id: ")


# ------------------------------------------------------------------------------------------------
# the oracles: run in a child, because a worker sets SIGALRM and RLIMIT_AS on its own process


def _worker_with(target_body: str, out: Path, slow: float = 0.05, hang: float = 5.0) -> str:
    script = textwrap.dedent(f"""
        import sys, time, json
        sys.path.insert(0, {str(TOOLS)!r})
        import fuzz
        def fake(data):
        {textwrap.indent(target_body, "    ")}
        fuzz.TARGETS["parse"] = fake
        opt = fuzz.Options(seed=1, targets=["parse"], deadline=time.time() + 60, limit=2, slow={slow},
                           hang={hang}, mem_gb=8, mem_growth_mb=64, out={str(out)!r})
        st = fuzz.worker(opt)
        print(json.dumps([st.counts, st.findings]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_slow_input_is_saved_with_slow_in_its_name(tmp_path: Path) -> None:
    _worker_with("time.sleep(0.2)", tmp_path)
    names = [p.name for p in tmp_path.iterdir()]
    assert names and all(n.startswith("parse-slow-") for n in names)


def test_a_hanging_input_is_interrupted_and_saved(tmp_path: Path) -> None:
    out = _worker_with("while True: pass", tmp_path, slow=60, hang=0.3)
    assert "hang: interrupted" in out
    assert all(p.name.startswith("parse-slow-") for p in tmp_path.iterdir())


def test_memory_growth_is_a_finding(tmp_path: Path) -> None:
    # the oracle reads the PEAK RSS: the growth must exceed whatever peak mutating an input reached before it
    # (100 MB did not always, in a full CI run), so each call keeps 300 MB
    _worker_with("globals().setdefault('keep', []).append(b'x' * (300 << 20))", tmp_path, slow=60)
    names = [p.name for p in tmp_path.iterdir()]
    assert names and all(n.startswith("parse-memory-") for n in names)


def test_a_crash_is_saved_under_its_target_name(tmp_path: Path) -> None:
    out = _worker_with("raise ValueError('boom')", tmp_path, slow=60)
    assert "ValueError: boom" in out
    assert all(p.name.startswith("parse-") and p.name.count("-") == 1 for p in tmp_path.iterdir())
