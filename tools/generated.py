"""Writing a generated file, or checking that the one in the tree is what the generator makes now.

The tools that build files shipped in the repository (tools/build_rules.py, build_regexes.py,
net_readme.py) share this; their `--check` is what the tests run.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(texts: dict[Path, str], check: bool, tool: str, stale: str = "is stale") -> int:
    """Write each file, or (`check`) say which differ from what was generated: exit 1 then, else 0."""
    if check:
        differing = [path for path, text in texts.items() if _read(path) != text]
        for path in differing:
            print(f"{_shown(path)} {stale}: run python tools/{tool}", file=sys.stderr)
        return 1 if differing else 0
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {_shown(path)} ({len(text)} bytes)")
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
