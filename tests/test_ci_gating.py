"""CI use: `--fail-on` on explain and batch, `explain --format github` annotations and the job summary."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cliserver import run_cli

ROOT = Path(__file__).resolve().parent.parent
FAILED = "fixtures/logs/v0.4-kv-not-enough-tp8.log"              # MEM001
INCOMPLETE = "fixtures/logs/v0.5-incomplete-after-nccl.log"      # IPC008, a warning
WARNED = "fixtures/memory/story/founding-mfs-0.55-tp8.log"       # healthy, MEM101 (warning)
HEALTHY = "fixtures/logs/v0.4-tp8.log"                           # healthy, no diagnosis at all
MEM001_RULE = ROOT / "rules/memory_pressure/kv-pool-does-not-fit.yaml"

# (fixture, --fail-on) -> exit code
EXPECTED = {
    (FAILED, "failed"): 1, (FAILED, "incomplete"): 1, (FAILED, "warning"): 1,
    (INCOMPLETE, "failed"): 0, (INCOMPLETE, "incomplete"): 1, (INCOMPLETE, "warning"): 1,
    (WARNED, "failed"): 0, (WARNED, "incomplete"): 0, (WARNED, "warning"): 1,
    (HEALTHY, "failed"): 0, (HEALTHY, "incomplete"): 0, (HEALTHY, "warning"): 0,
}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    full_env.update(env or {})
    return run_cli(args, cwd=ROOT, env=full_env, text=True, timeout=120)


def unescape(s: str) -> str:
    # the inverse of the toolkit's escaping; %25 last so an escaped "%0A" text stays literal
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


COMMAND = re.compile(r"::(?P<cmd>[a-z]+)(?: (?P<props>[^:]*))?::(?P<msg>.*)")


def parse_commands(out: str) -> list[tuple[str, dict[str, str], str]]:
    parsed = []
    for line in out.splitlines():
        m = COMMAND.fullmatch(line)
        assert m, f"not a workflow command: {line!r}"
        props = dict(p.split("=", 1) for p in m["props"].split(",")) if m["props"] else {}
        parsed.append((m["cmd"], {k: unescape(v) for k, v in props.items()}, unescape(m["msg"])))
    return parsed


@pytest.mark.parametrize("log,fail_on", sorted(EXPECTED))
def test_explain_fail_on(log: str, fail_on: str) -> None:
    r = run("explain", "--format", "json", "--fail-on", fail_on, log)
    assert r.returncode == EXPECTED[(log, fail_on)], r.stderr


def test_fixtures_are_what_the_table_assumes() -> None:
    import json
    verdicts = {}
    for log in (FAILED, INCOMPLETE, WARNED, HEALTHY):
        d = json.loads(run("explain", "--format", "json", log).stdout)
        verdicts[log] = (d["verdict"], sorted({x["severity"] for x in d["diagnoses"]}))
    assert verdicts[FAILED][0] == "failed"
    assert verdicts[INCOMPLETE][0] == "incomplete"
    assert verdicts[WARNED] == ("healthy", ["warning"])
    assert verdicts[HEALTHY] == ("healthy", [])


def test_default_is_failed_and_exit_zero_wins() -> None:
    assert run("explain", "--format", "json", FAILED).returncode == 1
    assert run("explain", "--format", "json", INCOMPLETE).returncode == 0
    for fail_on in ("failed", "incomplete", "warning"):
        for log in (FAILED, INCOMPLETE, WARNED):
            assert run("explain", "--format", "json", "--fail-on", fail_on, "--exit-zero", log).returncode == 0


def test_fail_on_rejects_other_values() -> None:
    r = run("explain", "--fail-on", "healthy", HEALTHY)
    assert r.returncode == 2 and "--fail-on" in r.stderr


def test_help_documents_exit_codes() -> None:
    for cmd in ("explain", "batch"):
        out = " ".join(run(cmd, "--help").stdout.split())
        assert "--fail-on" in out and "Exit codes" in out and "1 a" in out


def _batch_dir(tmp_path: Path, logs: list[str]) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    for log in logs:
        shutil.copy(ROOT / log, d / Path(log).name)
    return d


@pytest.mark.parametrize("logs,codes", [
    ([FAILED, INCOMPLETE, WARNED, HEALTHY], (1, 1, 1)),
    ([INCOMPLETE, WARNED, HEALTHY], (0, 1, 1)),
    ([WARNED, HEALTHY], (0, 0, 1)),
    ([HEALTHY], (0, 0, 0)),
])
def test_batch_fail_on(tmp_path: Path, logs: list[str], codes: tuple[int, int, int]) -> None:
    d = _batch_dir(tmp_path, logs)
    got = tuple(run("batch", "--no-progress", "--format", "csv", "--fail-on", f, str(d)).returncode
                for f in ("failed", "incomplete", "warning"))
    assert got == codes
    assert run("batch", "--no-progress", "--format", "csv", str(d)).returncode == codes[0]  # default: failed


def test_batch_errors_stay_exit_2(tmp_path: Path) -> None:
    d = _batch_dir(tmp_path, [WARNED])
    (d / "binary.log").write_bytes(bytes(range(256)) * 64)
    for f in ("failed", "warning"):
        assert run("batch", "--no-progress", "--format", "csv", "--fail-on", f, str(d)).returncode == 2


def test_github_failed_annotations() -> None:
    r = run("explain", "--format", "github", FAILED)
    assert r.returncode == 1
    cmds = parse_commands(r.stdout)
    cmd, props, msg = cmds[0]
    assert cmd == "error" and props["file"] == FAILED and props["line"] == "89"
    assert props["title"].startswith("FAILED MEM001 ")
    assert "KV cache" in msg and "\n→ " in msg  # explanation, then the first remedy on its own line
    assert all(c == "error" for c, _, _ in cmds)


def test_github_incomplete_is_a_warning_and_fails_on_incomplete() -> None:
    r = run("explain", "--format", "github", "--fail-on", "incomplete", INCOMPLETE)
    assert r.returncode == 1
    [(cmd, props, _msg)] = parse_commands(r.stdout)
    assert cmd == "warning" and props["file"] == INCOMPLETE and props["line"] == "8"
    assert props["title"].startswith("INCOMPLETE IPC008 ")


def test_github_healthy_warning_and_clean() -> None:
    [(cmd, props, _)] = parse_commands(run("explain", "--format", "github", WARNED).stdout)
    assert cmd == "warning" and props["file"] == WARNED and props["line"] == "44"
    assert "MEM101" in props["title"]
    r = run("explain", "--format", "github", HEALTHY)
    assert r.returncode == 0 and r.stdout == ""


def test_github_multi_node_cites_the_nodes_file() -> None:
    r = run("explain", "--format", "github", "fixtures/launch/node0.log", "fixtures/launch/node1.log")
    cmds = parse_commands(r.stdout)
    files = {p["file"] for _, p, _ in cmds}
    assert files <= {"fixtures/launch/node0.log", "fixtures/launch/node1.log"}
    assert cmds[0][1]["file"] == "fixtures/launch/node1.log" and cmds[0][1]["line"] == "125"
    assert all(p["line"].isdigit() for _, p, _ in cmds)


def test_github_escaping(tmp_path: Path) -> None:
    # MEM001 overridden by a rule whose title and explanation hold every character that must be escaped
    rules = tmp_path / "rules"
    rules.mkdir()
    text = MEM001_RULE.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^title: .*$", 'title: "100% full, see: here"', text)
    text = re.sub(r"(?ms)^explanation: >\n.*?(?=^why:)",
                  'explanation: "a 50% cut, then: more, line %0A"\n', text)
    (rules / MEM001_RULE.name).write_text(text, encoding="utf-8")
    r = run("explain", "--format", "github", "--rules", str(rules), FAILED)
    assert r.returncode == 1, r.stderr
    raw = r.stdout.splitlines()[0]
    assert "title=FAILED MEM001 100%25 full%2C see%3A here::" in raw
    # the data keeps `:` and `,`; the newline before the remedy is escaped, as is a literal "%0A"
    assert "::a 50%25 cut, then: more, line %250A%0A→ RAISE" in raw
    cmd, props, msg = parse_commands(r.stdout)[0]
    assert cmd == "error"
    assert props["title"] == "FAILED MEM001 100% full, see: here"
    assert msg.startswith("a 50% cut, then: more, line %0A\n→ RAISE")


def test_workflow_command_escaping() -> None:
    from logdoctor.report.github import escape_data, escape_property, workflow_command
    assert escape_data("a%b\r\nc:d,e") == "a%25b%0D%0Ac:d,e"
    assert escape_property("a%b\r\nc:d,e") == "a%25b%0D%0Ac%3Ad%2Ce"
    assert workflow_command("error", {"file": "x,y:z.log", "line": 3, "title": None}, "m") == \
        "::error file=x%2Cy%3Az.log,line=3::m"
    assert workflow_command("warning", {}, "m") == "::warning::m"


def test_step_summary_is_appended(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    run("explain", "--format", "github", FAILED, env=env)
    run("explain", "--format", "github", WARNED, env=env)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# earlier step\n")
    markdown = run("explain", "--format", "markdown", FAILED).stdout
    assert markdown.strip() in text and text.index("MEM001") < text.index("MEM101")


def test_step_summary_only_with_github_format(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    run("explain", "--format", "json", FAILED, env=env)
    assert not summary.exists()
    r = run("explain", "--format", "github", FAILED, env={"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "x.md")})
    assert r.returncode == 2 and "GITHUB_STEP_SUMMARY" in r.stderr and "Traceback" not in r.stderr
