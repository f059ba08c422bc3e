"""Output for people: text wraps to the terminal (COLUMNS), `-o FILE` picks the format from its suffix,
output files respect the umask, `runs --columns` and its default table, numbers for people in human formats
only, a guessed tp marked as inferred, and each remedy printed once."""
from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cliserver import run_cli

from logdoctor.report import human

ROOT = Path(__file__).resolve().parent.parent
CAPTURE_OOM = ROOT / "fixtures" / "logs" / "v0.5-capture-oom-tp4.log"   # a failed launch with memory remedies
KV_SHORT = ROOT / "fixtures" / "logs" / "v0.4-kv-not-enough-tp8.log"
RUNS = ROOT / "fixtures" / "runs"
TP8_BY_RANKS = ("[2025-01-01 10:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
                "[2025-01-01 10:00:00 TP7] Load weight begin. avail mem=70.00 GB\n"
                "[2025-01-01 10:00:05 TP7] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                "avail mem=60.00 GB, mem usage=10.00 GB.\n")


def cli(*args: str, columns: str | None = None, umask: int | None = None, cwd: Path = ROOT
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return run_cli(args, text=True, cwd=cwd, env=env, umask=umask, timeout=120)


def section(text: str, title: str) -> list[str]:
    """The lines of one titled section of `explain` text (up to the next blank line)."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


# ------------------------------------------------------------------------------------------------
# width


@pytest.mark.parametrize("columns, limit", [("60", 60), ("80", 80), ("10", human.MIN_WIDTH)])
def test_explain_prose_wraps_to_columns(columns: str, limit: int) -> None:
    out = cli("explain", str(CAPTURE_OOM), columns=columns).stdout
    prose = section(out, "Why") + section(out, "What to do")
    assert len(prose) > 4
    assert max(len(ln) for ln in prose) <= limit, max(prose, key=len)


def test_wide_terminal_is_used_up_to_the_maximum_and_piped_output_is_stable() -> None:
    wide = cli("explain", str(CAPTURE_OOM), columns="400").stdout
    piped = cli("explain", str(CAPTURE_OOM)).stdout  # not a terminal, no COLUMNS
    wide_prose = section(wide, "Why") + section(wide, "What to do")
    piped_prose = section(piped, "Why") + section(piped, "What to do")
    assert human.PIPED_WIDTH < max(len(ln) for ln in wide_prose) <= human.MAX_WIDTH
    assert max(len(ln) for ln in piped_prose) <= human.PIPED_WIDTH
    assert piped == cli("explain", str(CAPTURE_OOM), columns=str(human.PIPED_WIDTH)).stdout


def test_memory_findings_and_advice_wrap_too() -> None:
    out = cli("memory", str(CAPTURE_OOM), columns="70").stdout
    lines = out.splitlines()
    advice = lines[lines.index("What to change (ranked: fixes what failed first, then fewest KV tokens lost)") + 1:]
    advice = advice[:next(i for i, ln in enumerate(advice) if not ln.strip())] if "" in advice else advice
    assert len(advice) > 3 and max(len(ln) for ln in advice) <= 70


def test_text_width_reads_columns_and_clamps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "75")
    assert human.text_width() == 75
    monkeypatch.setenv("COLUMNS", "5000")
    assert human.text_width() == human.MAX_WIDTH
    monkeypatch.setenv("COLUMNS", "not a number")
    assert human.text_width() == human.PIPED_WIDTH  # pytest's stdout is not a terminal
    # a flag is never split at its hyphens
    assert human.wrap("x " * 20 + "--disable-custom-all-reduce", "  ", 30)[-1].strip() == "--disable-custom-all-reduce"


# ------------------------------------------------------------------------------------------------
# -o FILE: the suffix names the format; files respect the umask


@pytest.mark.parametrize("command", ["batch", "runs"])
def test_output_suffix_names_the_format(command: str, tmp_path: Path) -> None:
    base = (command, str(RUNS), "--no-progress", "--jobs", "1")
    cli(*base, "-o", str(tmp_path / "x.parquet"))
    assert (tmp_path / "x.parquet").read_bytes()[:4] == b"PAR1"
    cli(*base, "-o", str(tmp_path / "x.csv"))
    rows = list(csv.DictReader(io.StringIO((tmp_path / "x.csv").read_text())))
    assert len(rows) == 6 and "path" in rows[0]
    cli(*base, "-o", str(tmp_path / "x.ndjson"))
    assert len([json.loads(ln) for ln in (tmp_path / "x.ndjson").read_text().splitlines()]) == 6
    cli(*base, "-o", str(tmp_path / "x.json"))
    assert len(json.loads((tmp_path / "x.json").read_text())) == 6
    # an explicit --format wins over the suffix; a suffix with no format of its own keeps the default
    cli(*base, "--format", "csv", "-o", str(tmp_path / "y.json"))
    assert (tmp_path / "y.json").read_text().startswith("path,")
    cli(*base, "-o", str(tmp_path / "y.txt"))
    assert (tmp_path / "y.txt").read_text().startswith("path ")


def test_a_suffix_wins_over_a_configured_default_but_not_over_the_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from logdoctor.cli.main import cli as group
    runner = CliRunner()
    args = ["batch", str(RUNS / "llama8b-mfs0.80-0.log"), "--no-progress", "--timeout", "0", "--jobs", "1"]
    out = tmp_path / "a.parquet"
    r = runner.invoke(group, [*args, "-o", str(out)], default_map={"batch": {"fmt": "csv"}})
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"PAR1"
    plain = tmp_path / "b.out"
    runner.invoke(group, [*args, "-o", str(plain)], default_map={"batch": {"fmt": "csv"}})
    assert plain.read_text().startswith("path,")  # no suffix: the configured default
    explicit = tmp_path / "c.parquet"
    runner.invoke(group, [*args, "--format", "jsonl", "-o", str(explicit)], default_map={"batch": {"fmt": "csv"}})
    assert json.loads(explicit.read_text().splitlines()[0])["path"].endswith("llama8b-mfs0.80-0.log")


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077, 0o002])
def test_a_new_output_file_gets_0666_minus_the_umask(umask: int, tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    cli("batch", str(RUNS / "llama8b-mfs0.80-0.log"), "--no-progress", "-o", str(out), umask=umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


# ------------------------------------------------------------------------------------------------
# runs: columns, numbers


def test_runs_table_shows_a_readable_default_and_says_so() -> None:
    from logdoctor.many.batch import RUN_COLUMNS
    from logdoctor.many.tables import RUN_TABLE_COLUMNS
    out = cli("runs", str(RUNS), "--no-progress").stdout
    header = out.splitlines()[0].split()
    assert header == [c for c in RUN_TABLE_COLUMNS if c in RUN_COLUMNS] and len(header) <= 14
    assert f"{len(header)} of {len(RUN_COLUMNS)} columns" in out
    everything = json.loads(cli("runs", str(RUNS), "--no-progress", "--format", "json").stdout)
    assert list(everything[0]) == RUN_COLUMNS  # machine formats keep every column


def test_runs_columns_chooses_and_orders_in_any_case() -> None:
    rows = json.loads(cli("runs", str(RUNS), "--no-progress", "--format", "json", "--columns", "KV_tokens,path").stdout)
    assert [list(r) for r in rows] == [["kv_tokens", "path"]] * 6
    table = cli("runs", str(RUNS), "--no-progress", "--columns", "path,verdict").stdout
    assert table.splitlines()[0].split() == ["path", "verdict"] and "columns:" not in table
    bad = cli("runs", str(RUNS), "--no-progress", "--columns", "path,kv_token")
    assert bad.returncode == 2 and bad.stderr == ("logdoctor: --columns path,kv_token: no column 'kv_token' "
                                                  "(did you mean 'kv_tokens'?)\n")


def test_numbers_are_for_people_in_tables_and_exact_in_machine_formats() -> None:
    table = cli("runs", str(RUNS), "--no-progress", "--columns", "path,kv_tokens,weights_gib,gen_throughput_median")
    assert "e+0" not in table.stdout and "392,445" in table.stdout and "14.99" in table.stdout
    grouped = cli("runs", str(RUNS), "--no-progress", "--group-by", "mem_fraction_static").stdout
    assert "e+0" not in grouped and "443,970" in grouped
    rows = json.loads(cli("runs", str(RUNS), "--no-progress", "--format", "json").stdout)
    assert 392445 in [r["kv_tokens"] for r in rows]
    assert "392445" in cli("runs", str(RUNS), "--no-progress", "--format", "csv").stdout


@pytest.mark.parametrize("value, column, shown", [
    (1.06848e6, "median_kv_tokens", "1,068,480"), (1068480, "kv_tokens", "1,068,480"), (14.987, "weights_gib", "14.99"),
    (0.8734, "effective_mem_fraction_static", "0.8734"), (2944.6, "gen_throughput_median", "2,945"),
    (12345, "evidence_line", "12345"), (8, "tp", "8"), (float("nan"), "x", "not a number"),
])
def test_number(value: float, column: str, shown: str) -> None:
    assert human.number(value, column) == shown


# ------------------------------------------------------------------------------------------------
# inferred values, remedies once


def test_a_tp_guessed_from_ranks_is_marked_inferred(tmp_path: Path) -> None:
    log = tmp_path / "tp8.log"
    log.write_text(TP8_BY_RANKS)
    assert "tp=8 (inferred from ranks)" in cli("summary", str(log)).stdout
    assert "tp=8 (inferred from ranks)" in cli("explain", str(log)).stdout
    d = json.loads(cli("summary", "--format", "json", str(log)).stdout)
    assert d["parallel"]["tp"] == 8 and d["parallel_source"] == {"tp": "ranks"}
    printed = json.loads(cli("summary", "--format", "json", str(KV_SHORT)).stdout)
    assert printed["parallel"]["tp"] == 8 and printed["parallel_source"]["tp"] == "server_args"
    assert "inferred" not in cli("summary", str(KV_SHORT)).stdout
    assert "inferred" not in cli("explain", str(KV_SHORT)).stdout


def test_the_runs_table_marks_an_inferred_tp() -> None:
    import polars as pl

    from logdoctor.many.tables import render_table
    df = pl.DataFrame({"path": ["a", "b"], "tp": [8, 4], "tp_source": ["ranks", "server_args"]})
    lines = render_table(df).splitlines()
    assert lines[0].split() == ["path", "tp"]
    assert lines[2].split(None, 1)[1] == "8 (inferred from ranks)" and lines[3].split() == ["b", "4"]


@pytest.mark.parametrize("log", [CAPTURE_OOM, KV_SHORT])
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_each_remedy_is_printed_once(log: Path, fmt: str) -> None:
    report = json.loads(cli("explain", "--format", "json", str(log)).stdout)
    remedies = report["primary"]["remedies"]
    out = cli("explain", "--format", fmt, str(log), columns="1000").stdout
    flat = " ".join(out.split())
    for r in remedies:
        assert flat.count(" ".join(r.split())) == 1, r


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_control_bytes_of_a_log_line_reach_the_terminal_escaped(fmt: str, tmp_path: Path) -> None:
    # BEL and backspace would ring / rewrite the user's terminal; shown as \xNN they are still readable
    log = tmp_path / "ctl.log"
    log.write_bytes(b"[2026-01-05 10:00:00] Load weight begin.\n"
                    b"RuntimeError: CUDA error: an illegal memory access\x07 was\x08 encountered\n")
    p = cli("explain", "--exit-zero", "--format", fmt, str(log))
    assert "\x07" not in p.stdout and "\x08" not in p.stdout
    assert "\\x07 was\\x08 encountered" in p.stdout


def test_summary_text_escapes_control_bytes_too(tmp_path: Path) -> None:
    log = tmp_path / "ctl.log"
    log.write_bytes(b"[2026-01-05 10:00:00] server_args=ServerArgs(model_path='/m/\x07x', tp_size=2)\n")
    p = cli("summary", str(log))
    assert "\x07" not in p.stdout and "\\x07" in p.stdout


@pytest.mark.parametrize("suffix,starts", [(".json", '{"schema": "logdoctor.diagnosis/1"'), (".md", "### logdoctor:"),
                                           (".sarif", "{"), (".txt", "FAILED  memory_pressure")])
def test_explain_writes_to_o_in_the_format_its_suffix_names(suffix: str, starts: str, tmp_path: Path) -> None:
    out = tmp_path / f"report{suffix}"
    p = cli("explain", str(CAPTURE_OOM), "-o", str(out))
    assert p.returncode == 1 and p.stdout == ""  # the exit code still says what was found
    text = out.read_text()
    assert text.startswith(starts) and "\x1b[" not in text
    if suffix == ".sarif":
        assert json.loads(text)["version"] == "2.1.0"


def test_explain_o_with_an_explicit_format_and_a_bad_destination(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert cli("explain", str(CAPTURE_OOM), "--format", "text", "-o", str(out)).returncode == 1
    assert out.read_text().startswith("FAILED")
    p = cli("explain", str(CAPTURE_OOM), "-o", str(tmp_path / "missing" / "r.json"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no such directory" in p.stderr
