"""Rule selection (`--select` / `--ignore` / `--extend-select`) and settings from a config file and the
environment (`[tool.logdoctor]`, `logdoctor.toml`, `LOGDOCTOR_*`), and `logdoctor config`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor.cli.main import _run
from logdoctor.cli.settings import read_config
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.diagnosis.selection import (
    SelectedNet,
    SelectionError,
    Selectors,
    active_ids,
    select_rules,
    selectables,
)

ROOT = Path(__file__).resolve().parent.parent
MEM001_LOG = ROOT / "fixtures" / "rules" / "MEM001" / "fires-negative-profile-fragment.log"
PORT_LOG = ROOT / "fixtures" / "logs" / "v0.5-port-in-use.log"
USER_RULE = """\
id: CFG900
name: busy-port
title: My own port rule
category: configuration
severity: error
priority: 99
match:
  port: {event: port_unavailable}
condition: port
explanation: Port {ev.port} was busy.
remedy: [Pick another --port.]
examples:
  fires: [fixtures/logs/v0.5-port-in-use.log]
  quiet: [fixtures/logs/v0.4-tp8.log]
"""


@pytest.fixture(autouse=True)
def _no_settings_from_the_developer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A LOGDOCTOR_* variable in the environment running the tests must not decide them."""
    for name in [n for n in os.environ if n.startswith("LOGDOCTOR_")]:
        monkeypatch.delenv(name)


def ld(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cwd: Path, *args: str,
       env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The command line in this process, from `cwd`, with `env` added: (exit code, stdout, stderr)."""
    with monkeypatch.context() as m:
        m.chdir(cwd)
        for k, v in (env or {}).items():
            m.setenv(k, v)
        m.setattr(sys, "argv", ["logdoctor", *args])
        code = _run()
    out, err = capsys.readouterr()
    return code, out, err


def project(tmp_path: Path, pyproject: str | None = None, logdoctor_toml: str | None = None) -> Path:
    """A repository root (its .git ends the search) with a nested directory to run from."""
    (tmp_path / ".git").mkdir(parents=True, exist_ok=True)
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    if logdoctor_toml is not None:
        (tmp_path / "logdoctor.toml").write_text(logdoctor_toml)
    nested = tmp_path / "logs" / "today"
    nested.mkdir(parents=True, exist_ok=True)
    return nested


def settings_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cwd: Path, *args: str,
                  env: dict[str, str] | None = None) -> dict:
    code, out, err = ld(monkeypatch, capsys, cwd, "config", "--format", "json", *args, env=env)
    assert code == 0, err
    return json.loads(out)


def row(doc: dict, name: str) -> dict:
    return next(r for r in doc["settings"] if r["name"] == name)


# ------------------------------------------------------------------------------------------------
# selection semantics


@pytest.fixture(scope="module")
def items() -> list:
    return selectables(load_ruleset())


def chosen(items: list, **kw: tuple[str, ...]) -> set[str]:
    return active_ids(items, Selectors(**kw))


def test_default_is_every_rule_and_the_whole_net(items: list) -> None:
    ids = chosen(items)
    assert {i.id for i in items} == ids and {"MEM001", "NET001", "NET008"} <= ids
    rules = load_ruleset()
    assert select_rules(rules, Selectors()) is rules  # unchanged: today's output, byte for byte


def test_prefix_category_name_and_case(items: list) -> None:
    assert chosen(items, select=("MEM1",)) == {"MEM101", "MEM102", "MEM103"}
    assert chosen(items, select=("mem1",)) == chosen(items, select=("MEM1",))
    mem = chosen(items, select=("MEM",))
    assert mem and all(i.startswith("MEM") for i in mem)
    assert chosen(items, select=("memory_pressure",)) == mem | {"NET001"}  # the category includes the net's
    assert chosen(items, select=("memory-pressure",)) == mem | {"NET001"}
    assert chosen(items, select=("kv-pool-does-not-fit",)) == {"MEM001"}
    assert chosen(items, select=("Mem001",)) == {"MEM001"}
    assert chosen(items, select=("all",)) == chosen(items)


def test_the_more_specific_selector_wins(items: list) -> None:
    assert chosen(items, select=("MEM101",), ignore=("MEM",)) == {"MEM101"}
    assert "MEM101" not in chosen(items, select=("MEM",), ignore=("MEM1",))
    assert "MEM001" in chosen(items, select=("MEM",), ignore=("MEM1",))
    assert chosen(items, select=("memory_pressure",), ignore=("MEM",)) == {"NET001"}
    assert chosen(items, select=("MEM",), ignore=("memory_pressure",)) == chosen(items, select=("MEM",))
    # equally specific: the ignore wins (an id and the same rule's name are equally specific)
    assert chosen(items, select=("MEM001",), ignore=("MEM001",)) == set()
    assert chosen(items, select=("kv-pool-does-not-fit",), ignore=("MEM001",)) == set()


def test_extend_select_adds_and_empty_select_selects_nothing(items: list) -> None:
    assert chosen(items, select=("MEM001",), extend_select=("CFG003",)) == {"MEM001", "CFG003"}
    assert chosen(items, extend_select=("MEM001",)) == chosen(items)
    assert chosen(items, select=(), extend_select=("COM001",)) == {"COM001"}


@pytest.mark.parametrize("selector, suggestion", [
    ("MEM9", "'MEM'"), ("CFG03", "'CFG003'"), ("memory", "'memory_pressure'"),
    ("kv-pool-does-not-fits", "'kv-pool-does-not-fit'"), ("ALLL", "'ALL'"),
])
def test_an_unknown_selector_is_an_error_with_a_suggestion(items: list, selector: str, suggestion: str) -> None:
    with pytest.raises(SelectionError) as e:
        chosen(items, ignore=(selector,))
    assert f"unknown rule selector {selector!r}" in str(e.value) and f"did you mean {suggestion}" in str(e.value)
    assert e.value.option == "ignore"


def test_the_net_is_narrowed_to_the_selected_categories() -> None:
    rules = select_rules(load_ruleset(), Selectors(ignore=("NET001", "MEM")))
    assert not any(r.id.startswith("MEM") for r in rules)
    net = rules.net
    assert isinstance(net, SelectedNet) and "memory_pressure" not in net.categories
    assert net.terms and all(t.category != "memory_pressure" for t in net.terms)
    assert all(s.category != "memory_pressure" for s in net.subsystems)
    assert all(info["category"] != "memory_pressure" for info in net.stalls.values())


# ------------------------------------------------------------------------------------------------
# the options on the commands


def test_explain_ignore_of_the_firing_rule_changes_the_diagnosis(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", str(MEM001_LOG))
    assert code == 1 and json.loads(out)["primary"]["rule"] == "MEM001"
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", "--ignore", "MEM001", str(MEM001_LOG))
    d = json.loads(out)
    assert d["primary"]["rule"] != "MEM001" and all(x["rule"] != "MEM001" for x in d["diagnoses"])
    # the broad net places it instead; muted too, a catch-all rule is what is left
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", "--ignore", "MEM001,NET001",
                      str(MEM001_LOG))
    assert json.loads(out)["primary"]["rule"] not in ("MEM001", "NET001")


def test_a_narrow_selection_mutes_the_nets_last_line_fallback_too(monkeypatch, capsys, tmp_path: Path) -> None:
    # only MEM101 selected: neither MEM001 nor any NET guess (the last-line fallback included) may speak
    cwd = project(tmp_path)
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", "--select", "MEM101", str(MEM001_LOG))
    d = json.loads(out)
    assert d["verdict"] == "incomplete"
    assert all(not x["rule"].startswith(("NET", "MEM0")) for x in d["diagnoses"])


def test_unknown_selector_on_the_command_line_exits_2_with_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    code, out, err = ld(monkeypatch, capsys, project(tmp_path), "explain", "--select", "MEM9", str(MEM001_LOG))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["logdoctor: --select: unknown rule selector 'MEM9' (did you mean 'MEM'?)"]


def test_rules_list_honours_the_selection(monkeypatch, capsys, tmp_path: Path) -> None:
    code, out, _ = ld(monkeypatch, capsys, project(tmp_path), "rules", "list", "--format", "json",
                      "--select", "MEM1", "--select", "CFG001,CFG002", "--ignore", "MEM103")
    assert code == 0 and [r["id"] for r in json.loads(out)] == ["CFG001", "CFG002", "MEM101", "MEM102"]


# ------------------------------------------------------------------------------------------------
# the config file


def test_repository_root_has_no_logdoctor_table() -> None:
    """The suite runs from the repository root: its pyproject.toml must set nothing."""
    assert read_config(ROOT / "pyproject.toml") is None


def test_config_is_found_upward_from_a_nested_directory(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, pyproject='[project]\nname = "x"\n\n[tool.logdoctor]\nignore = ["MEM001"]\njobs = 3\n')
    doc = settings_json(monkeypatch, capsys, cwd)
    assert doc["file"] == str(tmp_path / "pyproject.toml")
    assert row(doc, "ignore") == {**row(doc, "ignore"), "value": ["MEM001"],
                                  "source": f"{tmp_path / 'pyproject.toml'} [tool.logdoctor]"}
    assert row(doc, "jobs")["value"] == 3 and row(doc, "select")["source"] == "default"
    assert "MEM001" not in doc["active"]["rules"] and doc["active"]["count"] == doc["active"]["total"] - 1
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", str(MEM001_LOG))
    assert code == 1 and json.loads(out)["primary"]["rule"] != "MEM001"


def test_logdoctor_toml_wins_over_pyproject_and_the_nearest_file_wins(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, pyproject="[tool.logdoctor]\njobs = 3\n", logdoctor_toml="jobs = 4\n")
    assert row(settings_json(monkeypatch, capsys, cwd), "jobs")["value"] == 4
    (cwd.parent / "pyproject.toml").write_text("[tool.logdoctor]\njobs = 5\n")
    assert row(settings_json(monkeypatch, capsys, cwd), "jobs")["value"] == 5
    # a pyproject.toml without the table is passed by
    (cwd.parent / "pyproject.toml").write_text('[project]\nname = "logdoctor-user"\n')
    assert row(settings_json(monkeypatch, capsys, cwd), "jobs")["value"] == 4


def test_the_search_stops_at_the_repository_root(monkeypatch, capsys, tmp_path: Path) -> None:
    (tmp_path / "logdoctor.toml").write_text("jobs = 7\n")
    repo = tmp_path / "repo"
    cwd = project(repo)
    doc = settings_json(monkeypatch, capsys, cwd)
    assert doc["file"] is None and row(doc, "jobs")["source"] == "default"
    code, out, _ = ld(monkeypatch, capsys, cwd, "config")
    assert code == 0 and f"up to {repo}" in out


def test_format_and_command_tables(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, logdoctor_toml='format = "json"\n\n[batch]\nformat = "csv"\n')
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", str(MEM001_LOG))
    assert json.loads(out)["primary"]["rule"] == "MEM001"  # format = json applies to explain
    code, out, _ = ld(monkeypatch, capsys, cwd, "batch", "--no-progress", "--jobs", "1", str(MEM001_LOG))
    assert out.splitlines()[0].startswith("path,")  # [batch] format = csv
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "text", str(MEM001_LOG))
    assert code == 1 and out.startswith("FAILED")  # the command line wins
    doc = settings_json(monkeypatch, capsys, cwd)
    assert row(doc, "batch.format") == {**row(doc, "batch.format"), "value": "csv",
                                        "source": f"{tmp_path / 'logdoctor.toml'} [batch]"}


def test_rule_directories_are_relative_to_the_config_file(monkeypatch, capsys, tmp_path: Path) -> None:
    rule_dir = tmp_path / "my-rules" / "configuration"
    rule_dir.mkdir(parents=True)
    (rule_dir / "busy-port.yaml").write_text(USER_RULE)
    cwd = project(tmp_path, logdoctor_toml='rules = ["my-rules"]\nselect = ["CFG9"]\n')
    doc = settings_json(monkeypatch, capsys, cwd)
    assert row(doc, "rules")["value"] == [str(tmp_path / "my-rules")]
    assert doc["active"]["rules"] == ["CFG900"] and doc["active"]["net"] == []
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", str(PORT_LOG))
    assert code == 1 and json.loads(out)["primary"]["title"] == "My own port rule"


def test_env_beats_the_file_and_the_command_line_beats_env(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, logdoctor_toml='jobs = 3\nfail-on = "warning"\n')
    env = {"LOGDOCTOR_JOBS": "5", "LOGDOCTOR_IGNORE": "MEM1,COM", "LOGDOCTOR_BATCH_TIMEOUT": "9"}
    doc = settings_json(monkeypatch, capsys, cwd, env=env)
    assert (row(doc, "jobs")["value"], row(doc, "jobs")["source"]) == (5, "env LOGDOCTOR_JOBS")
    assert row(doc, "fail-on")["source"] == f"{tmp_path / 'logdoctor.toml'}"
    assert row(doc, "ignore")["source"] == "env LOGDOCTOR_IGNORE"
    assert row(doc, "batch.timeout") == {**row(doc, "batch.timeout"), "value": 9.0, "source": "env LOGDOCTOR_BATCH_TIMEOUT"}
    assert not any(i.startswith(("MEM1", "COM")) for i in doc["active"]["rules"])
    doc = settings_json(monkeypatch, capsys, cwd, "--ignore", "MEM001", env=env)
    assert (row(doc, "ignore")["value"], row(doc, "ignore")["source"]) == (["MEM001"], "command line --ignore")
    assert "COM001" in doc["active"]["rules"] and "MEM001" not in doc["active"]["rules"]


def test_config_text_names_every_source(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, pyproject="[tool.logdoctor]\nignore = ['NET']\n")
    code, out, _ = ld(monkeypatch, capsys, cwd, "config", "--select", "MEM", env={"LOGDOCTOR_JOBS": "2"})
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["config"].endswith(str(tmp_path / "pyproject.toml"))
    assert lines["ignore"].endswith(f"{tmp_path / 'pyproject.toml'} [tool.logdoctor]")
    assert lines["jobs"].endswith("env LOGDOCTOR_JOBS") and lines["select"].endswith("command line --select")
    assert lines["timeout"].endswith("default")
    assert "broad net: off" in lines["active"]


def test_logdoctor_config_variable(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, logdoctor_toml="jobs = 3\n")
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("jobs = 8\n")
    assert row(settings_json(monkeypatch, capsys, cwd, env={"LOGDOCTOR_CONFIG": str(elsewhere)}), "jobs")["value"] == 8
    assert settings_json(monkeypatch, capsys, cwd, env={"LOGDOCTOR_CONFIG": "none"})["file"] is None


@pytest.mark.parametrize("text, message", [
    ("jobs = [\n", "logdoctor.toml: invalid TOML"),
    ("x = 1\njobs = 3 3\n", "logdoctor.toml:2: invalid TOML"),
    ("# settings\njbos = 3\n", "logdoctor.toml:2: unknown key 'jbos' (did you mean 'jobs'?)"),
    ("jobs = 0\n", "logdoctor.toml:1: jobs: 0 is not in the range 1<=x<=256"),
    ("jobs = true\n", "logdoctor.toml:1: jobs: expected an integer, not True"),
    ("timeout = 'soon'\n", "logdoctor.toml:1: timeout: 'soon' is not a valid float"),
    ("fail-on = 'never'\n", "logdoctor.toml:1: fail-on: 'never' is not one of"),
    ("select = 3\n", "logdoctor.toml:1: select: expected a string or a list of strings"),
    ("select = ['MEM9']\n", "logdoctor.toml:1: select: unknown rule selector 'MEM9' (did you mean 'MEM'?)"),
    ("[batch]\nformat = 'xml'\n", "logdoctor.toml:2: [batch] format: 'xml' is not one of"),
    ("[compare]\njobs = 2\n", "logdoctor.toml:2: [compare] compare has no setting 'jobs'"),
    ("[explian]\nformat = 'json'\n", "logdoctor.toml:1: unknown key 'explian' (did you mean 'explain'?)"),
])
def test_a_bad_config_is_one_line_naming_the_file(monkeypatch, capsys, tmp_path: Path, text: str, message: str) -> None:
    cwd = project(tmp_path, logdoctor_toml=text)
    code, out, err = ld(monkeypatch, capsys, cwd, "explain", str(MEM001_LOG))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"logdoctor: {tmp_path / message.split(':')[0]}")
    assert message in err


def test_a_bad_pyproject_table_names_the_table(monkeypatch, capsys, tmp_path: Path) -> None:
    cwd = project(tmp_path, pyproject='[project]\nname = "x"\n\n[tool.logdoctor]\nenvelope = "tarball"\n')
    code, _, err = ld(monkeypatch, capsys, cwd, "explain", str(MEM001_LOG))
    assert code == 2
    assert err.startswith(f"logdoctor: {tmp_path / 'pyproject.toml'}:5: [tool.logdoctor] envelope: 'tarball'")


@pytest.mark.parametrize("text", ["[project\nname = \n",
                                  '[project.scripts]\nlogdoctor = "logdoctor.cli:main"\n[broken\n'])
def test_another_projects_broken_pyproject_is_not_ours(monkeypatch, capsys, tmp_path: Path, text: str) -> None:
    cwd = project(tmp_path, pyproject=text)
    code, out, _ = ld(monkeypatch, capsys, cwd, "explain", "--format", "json", str(MEM001_LOG))
    assert code == 1 and json.loads(out)["primary"]["rule"] == "MEM001"
    # with our table in it, a broken file is ours to report
    (tmp_path / "pyproject.toml").write_text(text + "[tool.logdoctor]\njobs = 2\n")
    code, out, err = ld(monkeypatch, capsys, cwd, "explain", str(MEM001_LOG))
    assert code == 2 and err.startswith(f"logdoctor: {tmp_path / 'pyproject.toml'}:") and "invalid TOML" in err


def test_config_names_variables_that_are_no_setting(monkeypatch, capsys, tmp_path: Path) -> None:
    env = {"LOGDOCTOR_JOB": "2", "LOGDOCTOR_COMPARE_JOBS": "2", "LOGDOCTOR_BATCH_JOBS": "3"}
    doc = settings_json(monkeypatch, capsys, project(tmp_path), env=env)
    assert doc["unused_env"] == ["LOGDOCTOR_COMPARE_JOBS", "LOGDOCTOR_JOB"]
    assert row(doc, "batch.jobs")["value"] == 3 and row(doc, "jobs")["source"] == "default"


@pytest.mark.parametrize("var, value, message", [
    ("LOGDOCTOR_JOBS", "many", "LOGDOCTOR_JOBS: 'many' is not a valid integer"),
    ("LOGDOCTOR_FORMAT", "yaml", "LOGDOCTOR_FORMAT: 'yaml' is not one of"),
    ("LOGDOCTOR_IGNORE", "MEM9", "LOGDOCTOR_IGNORE: unknown rule selector 'MEM9'"),
    ("LOGDOCTOR_CONFIG", "/no/such/file.toml", "LOGDOCTOR_CONFIG: /no/such/file.toml: no such file"),
])
def test_a_bad_variable_is_named(monkeypatch, capsys, tmp_path: Path, var: str, value: str, message: str) -> None:
    code, out, err = ld(monkeypatch, capsys, project(tmp_path), "explain", str(MEM001_LOG), env={var: value})
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"logdoctor: {message}")


def test_the_selection_reaches_batch_workers(tmp_path: Path) -> None:
    """Workers are separate processes: the selection from the file must be in the rules they run."""
    cwd = project(tmp_path, logdoctor_toml='ignore = ["MEM001"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGDOCTOR_")}
    logs = [str(MEM001_LOG), str(PORT_LOG), str(ROOT / "fixtures" / "logs" / "v0.4-tp8.log")]
    p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "batch", "--format", "json", "--jobs", "2",
                        "--no-progress", *logs], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    rows = {Path(r["path"]).name: r for r in json.loads(p.stdout)}
    assert p.returncode == 1, p.stderr
    assert rows[MEM001_LOG.name]["verdict"] == "failed" and rows[MEM001_LOG.name]["rule"] != "MEM001"
    assert rows[PORT_LOG.name]["rule"] == "CFG003"


def test_a_logdoctor_key_under_the_tool_table_is_read(monkeypatch, capsys, tmp_path: Path) -> None:
    # `logdoctor = {...}` sets tool.logdoctor only under `[tool]`; under `[project.scripts]` it is a script
    cwd = project(tmp_path, pyproject='[project.scripts]\nlogdoctor = "x"\n\n[tool]\nlogdoctor = { envelope = "tarball" }\n')
    code, _, err = ld(monkeypatch, capsys, cwd, "explain", str(MEM001_LOG))
    assert code == 2 and "envelope" in err and "tarball" in err
