from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [ln.strip() for ln in lines[:12] if ln.startswith("    python3.11 ")]


def test_readme_opens_with_two_commands_and_ci_runs_the_test_one_verbatim() -> None:
    cmds = readme_commands()
    assert len(cmds) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert cmds[1] in ci.splitlines()


def test_readme_example_log_exists() -> None:
    cmd = readme_commands()[0]
    example = cmd.split()[-1]
    assert (ROOT / example).is_file()
