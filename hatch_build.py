"""Hatchling build hook: compiles the bulk-path accelerator (logdoctor/read/_bulkscan.c) into the wheel.

The C file uses the CPython C API only, so the compiler and flags come from `sysconfig` (the ones this
Python was built with) and nothing is downloaded. Compiling is optional by design: when there is no
compiler, or it fails, the hook warns and the wheel stays pure Python (read/bulkscan.py's Python path
gives the same results, slower). `pip install .` never fails because of it.

Also imported outside a build (tools/build_accelerator.py, tests/test_bulkscan_native.py) for
`compile_accelerator`, so only the hook class needs hatchling.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # outside a build: only compile_accelerator is wanted
    BuildHookInterface = object  # type: ignore[assignment,misc]

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "logdoctor" / "read" / "_bulkscan.c"
MODULE = "_bulkscan"
PACKAGE_DIR = "logdoctor/read"
COMPILE_TIMEOUT_S = 300   # a hang guard: the file compiles in about a second


def extension_name() -> str:
    """The file name this interpreter imports the module from (`_bulkscan.cpython-311-x86_64-linux-gnu.so`)."""
    return MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def compile_command(source: Path, target: Path) -> list[str]:
    """The compiler call, from the interpreter's own build configuration."""
    if os.name == "nt":
        raise RuntimeError("no sysconfig compiler on Windows: the pure-Python path is used")
    # LDSHARED compiles and links in one step and carries the platform's flags (macOS: -bundle -undefined
    # dynamic_lookup); CC is the fallback
    ldshared = sysconfig.get_config_var("LDSHARED")
    cc = sysconfig.get_config_var("CC")
    base = shlex.split(ldshared) if ldshared else [*shlex.split(cc or "cc"), "-shared"]
    include = sysconfig.get_paths()["include"]
    # no fast-math and no contraction into FMAs: the results must be the bit-identical doubles Python computes
    flags = ["-O2", "-fPIC", "-ffp-contract=off", "-fno-fast-math", f"-I{include}"]
    libs = ["-lm"] if sys.platform.startswith("linux") else []
    return [*base, *flags, str(source), "-o", str(target), *libs]


def compile_accelerator(out_dir: Path, source: Path = SOURCE) -> Path:
    """Compile the accelerator into `out_dir`; the path of the built module. CalledProcessError (with the
    compiler's output), OSError or RuntimeError when it cannot be built."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / extension_name()
    # built beside, then moved over: an interpreter may have the old one loaded
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + MODULE, suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        subprocess.run(compile_command(source, Path(tmp)), check=True, capture_output=True, text=True,
                       timeout=COMPILE_TIMEOUT_S)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _why(e: BaseException) -> str:
    if isinstance(e, subprocess.CalledProcessError):
        return (e.stderr or e.stdout or str(e)).strip()[-2000:]
    return str(e)


class AcceleratorHook(BuildHookInterface):  # type: ignore[misc]
    """Adds the compiled accelerator to the wheel and marks it platform-specific; warns and adds nothing
    when it cannot be compiled."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if version == "editable":
            # the package is imported from the checkout: build the module beside its source
            try:
                compile_accelerator(SOURCE.parent)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                warnings.warn(f"logdoctor: accelerator not built, the pure-Python path will be used ({_why(e)})",
                              stacklevel=1)
            return
        self._tmp = tempfile.mkdtemp(prefix="logdoctor-accel-")
        try:
            built = compile_accelerator(Path(self._tmp))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            warnings.warn(f"logdoctor: accelerator not built, the wheel is pure Python ({_why(e)})", stacklevel=1)
            return
        build_data.setdefault("force_include", {})[str(built)] = f"{PACKAGE_DIR}/{built.name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
