"""Where the grammar and built-in rules live, installed or in a checkout."""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    # an installed wheel carries them inside the package (see pyproject force-include);
    # a checkout (editable install, tests) has them at the repository root
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"logdoctor data directory {name!r} not found (broken installation)")


def grammar_path(filename: str) -> Path:
    return _data_dir("grammars") / filename


def builtin_rules_dir() -> Path:
    return _data_dir("rules")
