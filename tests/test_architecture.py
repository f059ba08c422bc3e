"""ARCHITECTURE.md agrees with the code, and the package keeps its one-way flow.

The stage order is the data flow: a module may import its own stage, an earlier one, and the shared top
level (the event model and infrastructure); never a later stage. Imports guarded by TYPE_CHECKING count
too: a type hint that names a later stage's model is knowledge flowing backwards.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "logdoctor"
STAGES = ["read", "parse", "run", "diagnosis", "report", "many", "cli"]
SHARED = {"events", "resources", "cachedir", "paths", "records", "regexes", "regex_programs", "records_built"}   # the top level every stage may use
PUBLIC = {"api", "fleet"}                                 # the public facades: for callers outside the package
CLI_FACADES = {"fleet"}   # ... and the one the CLI calls too: `batch --engine ray` runs logdoctor.fleet


def _imports(path: Path) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "logdoctor":
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "logdoctor")
    return out


def _modules(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}


def test_every_stage_imports_only_itself_earlier_stages_and_the_shared_top_level() -> None:
    backwards: list[str] = []
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG).with_suffix("").parts
        own = parts[0] if len(parts) > 1 else None
        for lineno, module in _imports(path):
            target = module.split(".")[1] if "." in module else ""
            where = f"{path.relative_to(ROOT)}:{lineno} imports {module}"
            if target in PUBLIC:
                # the package's __init__ is the API's front door (names it lazily); the CLI may run an engine facade
                if path != PKG / "__init__.py" and not (own == "cli" and target in CLI_FACADES):
                    backwards.append(where + " (the public facade is for callers outside the package)")
            elif own is None:
                # the public facades and `python -m logdoctor` (the CLI's entry point) are the package's callers
                if target not in SHARED | {""} and path.stem not in PUBLIC | {"__main__"}:
                    backwards.append(where + " (shared top-level modules import no stage)")
            elif target in STAGES and STAGES.index(target) > STAGES.index(own):
                backwards.append(where)
    assert backwards == []


def test_command_modules_share_only_common() -> None:
    """main registers the command modules; they import common, never each other or main."""
    cli = PKG / "cli"
    for path in sorted(cli.glob("*.py")):
        if path.stem in ("main", "__init__", "__main__", "common"):
            continue
        others = [m for _, m in _imports(path) if m.startswith("logdoctor.cli") and m != "logdoctor.cli.common"]
        assert others == [], f"{path.name} imports {others}"
    assert [m for _, m in _imports(cli / "common.py") if m.startswith("logdoctor.cli")] == []


def _table() -> dict[str, set[str]]:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"\| `(\w+)/` \|[^|]*\|(.*)\|\s*$", line)
        if m:
            # modules are the backticked names outside parentheses (which say what a module holds)
            names = m.group(2)
            while re.search(r"\([^()]*\)", names):
                names = re.sub(r"\([^()]*\)", "", names)
            rows[m.group(1)] = set(re.findall(r"`(\w+)`", names))
    return rows


def test_architecture_table_names_every_module_of_every_stage_and_no_other() -> None:
    table = _table()
    assert set(table) == set(STAGES), "ARCHITECTURE.md's table has one row per stage folder"
    for stage in STAGES:
        assert table[stage] == _modules(PKG / stage), f"{stage}/: ARCHITECTURE.md vs the folder"


def test_no_stage_code_at_the_top_level() -> None:
    assert _modules(PKG) == SHARED | PUBLIC
    assert {p.name for p in PKG.iterdir() if p.is_dir() and not p.name.startswith("__")} == set(STAGES)


def test_every_stage_says_what_comes_in_and_what_goes_out() -> None:
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((PKG / stage / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 80, f"{stage}/__init__.py has no docstring saying what it takes and gives"
    for path in sorted(PKG.rglob("*.py")):
        if path.stem == "__main__":
            continue
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), f"{path.relative_to(ROOT)}: no docstring"
