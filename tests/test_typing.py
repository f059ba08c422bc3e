"""The package type-checks: `mypy logdoctor` is clean under the settings in pyproject's [tool.mypy].

py.typed promises typed code to every user that imports logdoctor; this test keeps the promise. mypy runs in
a subprocess (as a user or CI would run it) from the checkout, with its cache sent to the null device (mypy's
documented way to write none): the tree stays clean, nothing lands on disk, and every run checks from scratch.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", os.devnull, *args], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=600)  # a hang guard


def test_mypy_reports_no_errors_on_the_package() -> None:
    done = _mypy("logdoctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found"), done.stdout + done.stderr


def test_mypy_checks_with_the_project_settings(tmp_path: Path) -> None:
    # a clean run proves little if pyproject's settings were not read: under them, Python 3.11's typing.Self
    # does not exist (python_version 3.10) and a needless ignore is an error (warn_unused_ignores)
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import Self\n\ncount: int = 1  # type: ignore[assignment]\n", encoding="utf-8")
    done = _mypy(str(probe))
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Module "typing" has no attribute "Self"' in done.stdout, done.stdout
    assert 'Unused "type: ignore" comment' in done.stdout, done.stdout
