"""`--redact`: no IP, host, user, home model directory or secret of the log survives in any output of any
command; placeholders are stable (two runs, every format); the diagnosis reads the same."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from cliserver import run_cli

from logdoctor.report.redact import Redactor, find_values, redactor_for

ROOT = Path(__file__).resolve().parent.parent
LEAKY = "fixtures/redact/leaky-weight-load-oom-tp2.log"   # MEM012, with each kind of value to hide
PLAIN = "fixtures/logs/v0.5-weight-load-oom-tp2.log"      # the same launch without them
LWS = "fixtures/launch/lws-prefix.log"                    # kubectl --prefix: pods sglang-0, sglang-0-1

# what the fixture holds and no output may show (substrings of each value)
ORIGINALS = ("alice", "/Users/bob", "gpu-node-7", "node-3.cluster.internal", "10.0.0.5", "10.0.0.9", "fe80::1ce",
             "hf_AbCdEfGh", "sk-proj-Q3vX", "AKIAIOSFODNN7EXAMPLE", "ghp_R2d2", "eyJhbGci", "Hunter2Hunter2",
             "0f3c9a7e5b1d", "acme-proj")
# what must stay readable
KEPT = ("Qwen/Qwen3-30B-A3B-Instruct-2507", "0.0.0.0")

# L / P: the two logs copied under a home directory and a host-named directory, so every output that names
# its input has something to hide even where the diagnosis quotes nothing of the log
COMMANDS = [
    *[("explain", "--format", f, "L") for f in ("text", "json", "markdown", "github", "sarif")],
    *[("summary", "--format", f, "L") for f in ("text", "json")],
    *[("memory", "--format", f, "L") for f in ("text", "json")],
    *[("parse", "--format", f, "L") for f in ("jsonl", "json", "table")],
    *[("compare", "--format", f, "L", "P") for f in ("text", "json", "markdown")],
    *[("batch", "--format", f, "L", "P") for f in ("table", "csv", "json", "jsonl", "junit", "sarif")],
    *[("runs", "--format", f, "L", "P") for f in ("table", "csv", "json")],
    *[("clusters", "--all", "--format", f, "L") for f in ("text", "json")],
]


@pytest.fixture(scope="module")
def homed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("redact") / "home" / "alice" / "runs" / "gpu-node-7"
    d.mkdir(parents=True)
    out = {}
    for key, src in (("L", LEAKY), ("P", PLAIN)):
        dst = d / Path(src).name
        dst.write_bytes((ROOT / src).read_bytes())
        out[key] = str(dst)
    return out


def run(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    full.update(env or {})
    return run_cli(args, cwd=cwd, env=full, text=True, timeout=180)


def leaks(text: str) -> list[str]:
    return [o for o in ORIGINALS if o in text]


def test_the_fixture_holds_every_kind() -> None:
    text = (ROOT / LEAKY).read_text(encoding="utf-8")
    assert not [o for o in ORIGINALS if o not in text]
    placeholders = redactor_for([str(ROOT / LEAKY)]).placeholders
    kinds = {re.sub(r"-\d+>$", "", p.rsplit("<", 1)[1]) for p in placeholders.values()}
    assert kinds == {"ip", "host", "user", "path", "secret"}


@pytest.mark.parametrize("template", COMMANDS, ids=lambda a: "-".join(x for x in a if x not in "LP"))
def test_no_original_value_in_any_output(template: tuple[str, ...], homed: dict[str, str]) -> None:
    args = tuple(homed.get(a, a) for a in template)
    plain = run(*args)
    names_nothing = template[:3] == ("memory", "--format", "text")  # it shows only numbers of its input
    assert names_nothing or leaks(plain.stdout), "the unredacted output must show what redaction hides"
    red = run(*args, "--redact")
    assert red.returncode == plain.returncode, red.stderr
    assert not leaks(red.stdout), leaks(red.stdout)
    assert names_nothing or "<" in red.stdout
    if "json" in template or "sarif" in template:
        json.loads(red.stdout)  # still valid JSON
    if homed["L"] in plain.stdout:  # the input's own path, where an output names it in full
        assert "/home/<user-1>/runs/<host-" in red.stdout


def test_files_and_the_job_summary_are_redacted(tmp_path: Path, homed: dict[str, str]) -> None:
    for cmd, suffix in (("batch", "parquet"), ("runs", "parquet"), ("batch", "csv"), ("batch", "xml")):
        out = tmp_path / f"{cmd}.{suffix}"
        r = run(cmd, "--redact", "-o", str(out), homed["L"], homed["P"])
        assert r.returncode in (0, 1), r.stderr
        if suffix == "parquet":
            df = pl.read_parquet(out)
            cells = [str(v) for col in df.columns for v in df[col].to_list()]
            assert cells and not leaks("\n".join(cells))
            assert any("<" in c for c in cells)
        else:
            assert not leaks(out.read_text(encoding="utf-8"))
    summary = tmp_path / "summary.md"
    r = run("explain", "--redact", "--format", "github", LEAKY, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode == 1
    assert summary.read_text(encoding="utf-8").strip() and not leaks(summary.read_text(encoding="utf-8"))


def test_events_with_redact_is_refused(tmp_path: Path) -> None:
    r = run("batch", "--redact", "--events", str(tmp_path / "e.parquet"), LEAKY)
    assert r.returncode == 2 and "--events" in r.stderr and not (tmp_path / "e.parquet").exists()


def test_placeholders_are_stable_across_runs_and_formats() -> None:
    first = run("explain", "--redact", "--format", "json", LEAKY).stdout
    assert first == run("explain", "--redact", "--format", "json", LEAKY).stdout
    # numbered by the log: the model directory is <path-1> in every command and format
    outputs = [run(*a, "--redact").stdout for a in (("explain", "--format", "json", LEAKY),
                                                     ("runs", "--format", "csv", LEAKY),
                                                     ("summary", LEAKY), ("summary", "--format", "json", LEAKY))]
    for out in outputs:
        assert "<path-1>/Qwen3-30B-A3B-Instruct-2507" in out
    # every value has one placeholder wherever it shows (parse shows every line of the log)
    mapping = redactor_for([str(ROOT / LEAKY)]).placeholders
    for fmt in ("jsonl", "json"):
        out = run("parse", "--redact", "--format", fmt, LEAKY).stdout
        assert "MASTER_ADDR=<host-2>" in out and "init_method=tcp://<ip-2>:29500" in out
    assert "host=<host-2>" in run("parse", "--redact", "--format", "table", LEAKY).stdout  # the NCCL lines' field
    assert mapping["gpu-node-7"] == "<host-2>" and mapping["10.0.0.5"] == "<ip-2>"
    # the same log under another name redacts the same way (the seed is the content, not the path)
    assert redactor_for([str(ROOT / LEAKY)]).placeholders == mapping


def test_the_diagnosis_is_unchanged() -> None:
    plain = json.loads(run("explain", "--format", "json", LEAKY).stdout)
    red = json.loads(run("explain", "--redact", "--format", "json", LEAKY).stdout)
    assert red["verdict"] == plain["verdict"] == "failed"
    p, q = plain["primary"], red["primary"]
    for key in ("rule", "name", "category", "severity", "confidence", "line", "explanation", "remedies"):
        assert q[key] == p[key], key
    assert [e["line"] for e in q["evidence"]] == [e["line"] for e in p["evidence"]]
    assert [e["rank"] for e in q["evidence"]] == [e["rank"] for e in p["evidence"]]
    assert "24.12 GiB" in q["explanation"]
    assert red["run"]["server_args"]["mem_fraction_static"] == 0.834
    text = run("explain", "--redact", LEAKY).stdout
    for kept in (*KEPT[1:], "MEM012", "TP0", "TP1", "GiB"):
        assert kept in text or kept in json.dumps(red), kept
    assert KEPT[0] in run("summary", "--redact", "--format", "json", LEAKY).stdout


def test_pod_names_of_kubectl_prefix_are_hosts() -> None:
    plain = run("explain", LWS).stdout
    assert "sglang-0-1" in plain
    red = run("explain", "--redact", LWS).stdout
    assert "sglang-0" not in red and "<host-1> (ranks 0-7), <host-2> (ranks 8-15)" in red


@pytest.mark.parametrize(("text", "kinds"), [
    ("gpu-b:1835:1835 [0] NCCL INFO Bootstrap : Using bond0:10.0.3.13<0>", [("host", "gpu-b"), ("ip", "10.0.3.13")]),
    ("[c10d] init_method=tcp://10.0.0.5:29500", [("ip", "10.0.0.5")]),
    ("server_args=ServerArgs(host='0.0.0.0', port=30000, dist_init_addr='sgl-0.sgl.default.svc.cluster.local:5000')",
     [("host", "sgl-0.sgl.default.svc.cluster.local")]),
    ("NET/Socket : Using [1]ib0:fe80::1ce:ff:fe12:3456%ib0<0> and 2001:db8::7", [("ip", "fe80::1ce:ff:fe12:3456"),
                                                                                  ("ip", "2001:db8::7")]),
    ("File \"/home/carol/venv/lib/python3.10/site-packages/sglang/srt/server.py\", line 12",
     [("user", "/home/carol")]),
    ("export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123 OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx",
     [("secret", "hf_abcdefghijklmnopqrstuvwxyz0123"), ("secret", "sk-proj-abcdefghijklmnopqrstuvwx")]),
])
def test_find_values(text: str, kinds: list[tuple[str, str]]) -> None:
    assert [(k, v) for _, k, v in find_values(text)] == kinds


@pytest.mark.parametrize("text", [
    "sglang 0.5.3.post1, torch 2.5.1+cu124, flashinfer 0.2.0.post2, nccl==2.27.5",
    ("[2025-04-05 00:01:27 TP0] Decode batch. #running-req: 233, #token: 125872, token usage: 0.61, gen throughput "
     "(token/s): 8123.45, #queue-req: 0, timestamp: 2025-04-05T00:01:27.123456"),
    "terminate called after throwing an instance of 'c10::Error' at::native::cuda ::1 127.0.0.1:30000 0.0.0.0",
    "model_path='meta-llama/Llama-3.1-8B-Instruct', api_key=None, hf_token=None, max_total_tokens=80000",
    "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=61.46 GB, mem usage=16.43 GB.",
    "see https://github.com/sgl-project/sglang/issues/4330 and https://huggingface.co/meta-llama/Llama-3-8B",
    "threading.local torch.distributed.elastic.multiprocessing.errors.ChildFailedError /root/.cache/x",
    "--mem-fraction-static 0.88 --cuda-graph-max-bs 160 --host 0.0.0.0 --host localhost",
])
def test_nothing_to_hide(text: str) -> None:
    assert find_values(text) == []
    assert Redactor().text(text) == text


def test_cut_values_show_no_prefix() -> None:
    r = Redactor()
    r.seed_text("token=s3cr3tv4lu3longer host gpu-node-17 dist_init_addr='10.1.2.33:5000'")
    assert r.text("value s3cr3tv4l… and 10.1.2… kept 1.5…") == "value <secret-1>… and <ip-1>… kept 1.5…"


HOSTILE = r"""
import sys
from logdoctor.report.redact import Redactor
r = Redactor()
r.seed_text("token=s3cr3tv4lu3longer gpu-node-17:1:1 [0] NCCL INFO x")
for piece in ("a." * 200_000, "1." * 200_000, ":" * 400_000, "/home/" * 80_000, "token=" * 80_000,
              "a-" * 200_000, "gpu-node-1…" * 40_000, "[pod/" * 80_000, "f:" * 200_000, "Bearer " * 60_000):
    r.seed_text(piece)
    r.text(piece)
print("ok")
"""


def test_hostile_lines_do_not_hang() -> None:
    # a hang guard, not a speed goal: a quadratic pattern would take minutes on these
    r = subprocess.run([sys.executable, "-c", HOSTILE], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_many_distinct_values_from_stdin_stay_linear() -> None:
    # stdin cannot be seeded beforehand: every value is first seen in the output; thousands of them must not
    # make each line's redaction grow with the ones before (a hang guard, not a speed goal)
    log = "".join(f"[2025-01-01 00:00:00 TP0] connecting to 10.{i // 250}.{i % 250}.7 and host-{i}.corp.internal "
                  f"token=tok{i}secretvalue\n" for i in range(4000))
    r = subprocess.run([sys.executable, "-m", "logdoctor.cli", "parse", "--redact", "-"], cwd=ROOT, input=log,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    last = json.loads(r.stdout.splitlines()[-1])
    assert last["text"] == "connecting to <ip-4000> and <host-4000> token=<secret-4000>"
    assert "10." not in r.stdout and "corp.internal" not in r.stdout and "secretvalue" not in r.stdout


def test_split_node_names_are_hosts() -> None:
    r = redactor_for([str(ROOT / LWS)])
    before = dict(r.placeholders)
    r.add_hosts(["sglang-0", "worker-b7", "node"])  # known, new, and a bare word (kept: it reads as prose)
    assert r.placeholders["sglang-0"] == before["sglang-0"]
    assert r.text("worker-b7:12 and the node") == f"{r.placeholders['worker-b7']}:12 and the node"
