"""The install is whole: `python -m logdoctor`, a typed package, Python 3.10, bounded dependencies, data in the wheel.

The wheel is built here (hatchling, the build backend, is in the test extras: no build isolation, nothing
downloaded), installed into a fresh venv outside the checkout, and run from a directory outside it. The fresh
venv gets the wheel's files and nothing else of logdoctor; its third-party dependencies (polars alone is
~200 MB installed, ~20 s to install) are reached through a .pth file naming this interpreter's site-packages,
which sit after the venv's own, so the logdoctor imported there is the wheel's (asserted) and every
requirement the wheel declares must be met by what the venv sees (checked against the wheel's metadata).
"""
from __future__ import annotations

import ast
import json
import os
import re
import site
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
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
    extras = project.get("optional-dependencies", {})
    installed_here = set(project["dependencies"]) | set(extras.get("test", []))  # what CI installs
    declared = list(project["dependencies"])
    for extra in extras.values():
        declared += extra
    assert declared
    for line in declared:
        req = Requirement(line)
        uppers = [s for s in req.specifier if s.operator == "<"]
        lowers = [s for s in req.specifier if s.operator == ">="]
        assert uppers and lowers, f"{line}: needs a lower bound and an upper bound on the next major version"
        if req.marker is not None and not req.marker.evaluate({"extra": "test"}):
            continue  # e.g. tomli, needed only below Python 3.11
        if line not in installed_here:
            continue  # an extra CI does not install (gcsfs, adlfs): its bounds are checked above, not its version
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


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError") for t in types)


def _guarded_statements(node: ast.AST) -> list[ast.stmt]:
    """The code under `try: … except ImportError:` or either branch of `if sys.version_info …:`, where a
    3.10 fallback sits beside a 3.11 import (tomllib → tomli)."""
    if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
        return node.body
    if isinstance(node, ast.If) and "sys.version_info" in ast.unparse(node.test):
        return node.body + node.orelse
    return []


def _guarded_imports(tree: ast.AST) -> set[int]:
    return {id(sub) for node in ast.walk(tree) for stmt in _guarded_statements(node)
            for sub in ast.walk(stmt) if isinstance(sub, (ast.Import, ast.ImportFrom))}


def _py311_only_uses(source: str) -> list[str]:
    tree = ast.parse(source, feature_version=(3, 10))  # 3.11 syntax (except*, a[*b]) raises SyntaxError here
    guarded = _guarded_imports(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
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
    fallback = "try:\n    import tomllib\nexcept ModuleNotFoundError:\n    import tomli as tomllib\n"
    assert _py311_only_uses(fallback) == []
    assert _py311_only_uses(fallback.replace("ModuleNotFoundError", "(ValueError, ImportError)")) == []
    assert _py311_only_uses(fallback.replace("ModuleNotFoundError", "ValueError")) == ["tomllib"]
    by_version = "import sys\nif sys.version_info >= (3, 11):\n    import tomllib\nelse:\n    import tomli as tomllib\n"
    assert _py311_only_uses(by_version) == []
    older_first = "import sys\nif sys.version_info < (3, 11):\n    import tomli as tomllib\nelse:\n    import tomllib\n"
    assert _py311_only_uses(older_first) == []
    assert _py311_only_uses(by_version.replace("sys.version_info", "True")) == ["tomllib"]
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


# ------------------------------------------------------------------------------------------------
# the built wheel, installed in a fresh venv outside the checkout

PACKAGED_EXAMPLE = "_data/fixtures/logs/v0.5-capture-oom-tp4.log"  # a graph-capture OOM: MEM003, memory_pressure


class FreshInstall:
    """The wheel built from the checkout and the venv (outside it) it is installed in."""

    def __init__(self, wheel: Path, env_dir: Path, cwd: Path) -> None:
        self.wheel, self.env_dir, self.cwd = wheel, env_dir, cwd
        self.python = env_dir / "bin" / "python"
        self.script = env_dir / "bin" / "logdoctor"

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        # nothing of the checkout or of the caller's environment may reach the installed package
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
               and not k.startswith("LOGDOCTOR_")}
        env["PYTHONNOUSERSITE"] = "1"
        return subprocess.run([str(a) for a in argv], cwd=self.cwd, env=env, capture_output=True, text=True,
                              check=False, timeout=600)  # a hang guard


def _checked(done: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{what} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> FreshInstall:
    base = tmp_path_factory.mktemp("wheel")
    assert ROOT not in base.parents
    dist = base / "dist"
    _checked(subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                             "-w", str(dist), str(ROOT)], cwd=base, capture_output=True, text=True, check=False,
                            timeout=600), "building the wheel")
    wheels = list(dist.glob("logdoctor-*.whl"))
    assert len(wheels) == 1, wheels
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # pip is run from here against it: no ensurepip
    _checked(subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
                             "--no-deps", "--no-index", str(wheels[0])], cwd=base, capture_output=True, text=True,
                            check=False, timeout=600), "installing the wheel")
    fresh = FreshInstall(wheels[0], env_dir, base)
    # .pth lines are appended after the venv's own site-packages (whose logdoctor therefore wins), and the
    # .pth files inside the directories they name are not processed: the checkout's editable hook stays out
    own = Path(_checked(fresh.run(fresh.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"),
                        "locating the venv's site-packages").stdout.strip())
    assert own.is_relative_to(env_dir) and (own / "logdoctor" / "__init__.py").is_file()
    (own / "_logdoctor_test_dependencies.pth").write_text("".join(f"{d}\n" for d in site.getsitepackages()),
                                                          encoding="utf-8")
    return fresh


def test_the_wheel_carries_the_package_its_data_and_its_markers(fresh_install: FreshInstall) -> None:
    names = set(zipfile.ZipFile(fresh_install.wheel).namelist())
    for wanted in ("logdoctor/__init__.py", "logdoctor/__main__.py", "logdoctor/py.typed",
                   "logdoctor/_data/grammars/sglang.lark", "logdoctor/" + PACKAGED_EXAMPLE):
        assert wanted in names
    rules = ROOT / "rules"
    rule_files = {"logdoctor/_data/rules/" + p.relative_to(rules).as_posix() for p in rules.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
    assert len(rule_files) > 100 and rule_files <= names
    assert {f"logdoctor/{p.relative_to(PKG).as_posix()}" for p in PKG.rglob("*.py")} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_the_fresh_venv_imports_the_wheels_logdoctor_and_meets_its_requirements(fresh_install: FreshInstall) -> None:
    probe = (
        "import json, logdoctor, polars\n"
        "from importlib import metadata\n"
        "from packaging.requirements import Requirement\n"
        "def met(r):\n"
        "    try:\n"
        "        return r.specifier.contains(metadata.version(r.name), prereleases=True)\n"
        "    except metadata.PackageNotFoundError:\n"
        "        return False\n"
        "dist = metadata.distribution('logdoctor')\n"
        "needed = [r for r in map(Requirement, dist.requires or []) if r.marker is None or r.marker.evaluate()]\n"
        "print(json.dumps({'file': logdoctor.__file__, 'dist': str(dist.locate_file('')),\n"
        "                  'requires': dist.requires, 'unmet': [str(r) for r in needed if not met(r)]}))\n"
    )
    seen = json.loads(_checked(fresh_install.run(fresh_install.python, "-c", probe), "the import probe").stdout)
    assert Path(seen["file"]).is_relative_to(fresh_install.env_dir), seen["file"]
    assert Path(seen["dist"]).is_relative_to(fresh_install.env_dir), seen["dist"]
    # the wheel declares exactly pyproject's dependencies (extras aside), and this environment meets them all
    def key(r: Requirement) -> tuple[str, str, str]:
        return canonicalize_name(r.name), str(r.specifier), str(r.marker or "")
    in_wheel = {key(r) for r in map(Requirement, seen["requires"]) if "extra" not in str(r.marker or "")}
    assert in_wheel == {key(Requirement(line)) for line in _pyproject()["project"]["dependencies"]}
    assert seen["unmet"] == []


def test_the_installed_rules_test_passes_every_built_in_rule(fresh_install: FreshInstall) -> None:
    done = _checked(fresh_install.run(fresh_install.script, "rules", "test"), "logdoctor rules test")
    last = done.stdout.strip().splitlines()[-1]
    counts = re.fullmatch(r"(\d+) passed, (\d+) failed", last)
    assert counts is not None, done.stdout[-2000:]
    assert int(counts.group(1)) > 250 and int(counts.group(2)) == 0, last


def test_the_installed_explain_diagnoses_a_packaged_example(fresh_install: FreshInstall) -> None:
    where = _checked(fresh_install.run(fresh_install.python, "-c", "import logdoctor; print(logdoctor.__file__)"),
                     "locating the package").stdout.strip()
    example = Path(where).parent / PACKAGED_EXAMPLE
    assert example.is_file() and example.is_relative_to(fresh_install.env_dir)
    done = _checked(fresh_install.run(fresh_install.script, "explain", "--exit-zero", "--format", "json", example),
                    "logdoctor explain")
    report = json.loads(done.stdout)
    assert report["verdict"] == "failed"
    assert (report["primary"]["rule"], report["primary"]["category"]) == ("MEM003", "memory_pressure")


def test_the_installed_python_m_logdoctor_prints_the_version(fresh_install: FreshInstall) -> None:
    done = _checked(fresh_install.run(fresh_install.python, "-m", "logdoctor", "--version"), "python -m logdoctor")
    assert done.stdout.strip() == f"logdoctor, version {logdoctor.__version__}"
