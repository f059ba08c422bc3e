"""The install is whole: `python -m logdoctor`, a typed package, Python 3.10, bounded dependencies, data in the wheel.

The wheel itself is not built here: the build backend (hatchling) is not in the test environment and a test
must not download it, so the wheel's contents are checked through the hatch configuration that decides them.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import logdoctor

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef,import-not-found]

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "logdoctor"
EXAMPLE = ROOT / "fixtures" / "example" / "tp8-mem-fraction.log"

# stdlib names that exist only from Python 3.11 on; importing any of them breaks `requires-python >= 3.10`
PY311_MODULES = {"tomllib", "wsgiref.types"}
PY311_NAMES = {
    "typing": {"Self", "LiteralString", "Never", "assert_never", "assert_type", "reveal_type", "Required",
               "NotRequired", "TypeVarTuple", "Unpack", "dataclass_transform", "get_overloads", "clear_overloads"},
    "datetime": {"UTC"},
    "enum": {"StrEnum", "ReprEnum", "verify", "member", "nonmember", "global_enum", "EnumCheck"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "asyncio": {"TaskGroup", "timeout", "Runner"},
    "operator": {"call"},
    "builtins": {"ExceptionGroup", "BaseExceptionGroup"},
}


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # a hang guard, not a speed goal
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


def test_python_m_logdoctor_prints_the_version(tmp_path: Path) -> None:
    # run outside the checkout, so the installed package answers (in CI that is the built wheel)
    done = _run("logdoctor", "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert logdoctor.__version__ in done.stdout
    assert done.stdout.strip() == f"logdoctor, version {logdoctor.__version__}"


def test_python_m_logdoctor_is_the_same_cli_as_python_m_logdoctor_cli(tmp_path: Path) -> None:
    top, cli = _run("logdoctor", "--help", cwd=tmp_path), _run("logdoctor.cli", "--help", cwd=tmp_path)
    assert top.returncode == cli.returncode == 0, top.stderr + cli.stderr
    assert "explain" in top.stdout
    # click names the program after the module run, so only the usage line may differ
    assert top.stdout == cli.stdout.replace("python -m logdoctor.cli ", "python -m logdoctor ")


def test_python_m_logdoctor_explains_the_example(tmp_path: Path) -> None:
    done = _run("logdoctor", "explain", "--exit-zero", str(EXAMPLE), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "FAILED" in done.stdout
    assert "MEM003" in done.stdout


def test_requires_python_admits_3_10_and_the_classifiers_agree() -> None:
    project = _pyproject()["project"]
    assert project["requires-python"] == ">=3.10"
    versions = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
                if c.startswith("Programming Language :: Python :: 3.")}
    assert {"3.10", "3.11"} <= versions
    assert min(versions, key=Version) == "3.10"
    for wanted in ("Typing :: Typed", "Topic :: System :: Logging", "Environment :: Console"):
        assert wanted in project["classifiers"]


def test_every_dependency_has_an_upper_bound_that_admits_the_installed_version() -> None:
    project = _pyproject()["project"]
    declared = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    assert declared
    for line in declared:
        req = Requirement(line)
        uppers = [s for s in req.specifier if s.operator == "<"]
        lowers = [s for s in req.specifier if s.operator == ">="]
        assert uppers and lowers, f"{line}: needs a lower bound and an upper bound on the next major version"
        if req.marker is not None and not req.marker.evaluate({"extra": "test"}):
            continue  # e.g. tomli, needed only below Python 3.11
        installed = metadata.version(req.name)
        assert req.specifier.contains(installed, prereleases=True), f"{line} refuses installed {req.name} {installed}"


def test_the_package_is_typed_and_the_wheel_carries_its_data() -> None:
    assert (PKG / "py.typed").is_file()
    assert (PKG / "py.typed").read_bytes() == b""
    assert (PKG / "__main__.py").is_file()
    wheel = _pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]
    # hatch puts every non-ignored file under a listed package into the wheel: py.typed and the schemas
    assert wheel["packages"] == ["logdoctor"]
    assert "exclude" not in wheel and "only-include" not in wheel
    assert not any("py.typed" in line for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines())
    # the grammar and the built-in rules live at the repository root and are mapped into the package,
    # where logdoctor.resources looks for them first
    assert wheel["force-include"]["grammars"] == "logdoctor/_data/grammars"
    assert wheel["force-include"]["rules"] == "logdoctor/_data/rules"
    assert any((ROOT / "grammars").glob("*.lark"))
    assert any((ROOT / "rules").rglob("*.yaml"))
    resources = (PKG / "resources.py").read_text(encoding="utf-8")
    assert '_PKG / "_data" / name' in resources


def _py311_only_uses(source: str) -> list[str]:
    tree = ast.parse(source, feature_version=(3, 10))  # 3.11 syntax (except*, a[*b]) raises SyntaxError here
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in PY311_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in PY311_MODULES:
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if a.name in PY311_NAMES.get(node.module, ())]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in PY311_NAMES.get(node.value.id, ()):
                found.append(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in PY311_NAMES["builtins"]:
            found.append(node.id)
    return found


def test_the_package_uses_nothing_newer_than_python_3_10() -> None:
    modules = sorted(PKG.rglob("*.py"))
    assert len(modules) > 20
    problems = [f"{path.relative_to(ROOT)}: {name}"
                for path in modules for name in _py311_only_uses(path.read_text(encoding="utf-8"))]
    assert problems == []


def test_the_python_3_10_guard_catches_what_it_looks_for() -> None:
    source = "import tomllib\nfrom typing import Self\nimport datetime\nx = datetime.UTC\n"
    assert _py311_only_uses(source) == ["tomllib", "typing.Self", "datetime.UTC"]
    with pytest.raises(SyntaxError):
        _py311_only_uses("try:\n    pass\nexcept* ValueError:\n    pass\n")


def test_the_built_in_rules_examples_ship_with_the_package(tmp_path: Path) -> None:
    # run outside the checkout: in CI (a non-editable install) this is the installed wheel, whose rules name
    # their example logs beside them (pyproject force-include of fixtures/rules, logs, memory)
    p = subprocess.run([sys.executable, "-m", "logdoctor", "rules", "test"], cwd=tmp_path, capture_output=True,
                       text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    passed, failed = re.fullmatch(r"(\d+) passed, (\d+) failed", p.stdout.strip().splitlines()[-1]).groups()
    assert int(passed) > 250 and int(failed) == 0
