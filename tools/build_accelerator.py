#!/usr/bin/env python3
"""Build the bulk-path accelerator in place, for a checkout installed editable (`pip install -e .`).

    python tools/build_accelerator.py [--remove]

`pip install .` builds it into the wheel by itself (hatch_build.py); an editable install imports the
package from the checkout, so the module is compiled beside its source, `logdoctor/read/_bulkscan.*.so`
(git-ignored). `--remove` deletes it again, so the pure-Python path runs (same results, slower).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hatch_build import SOURCE, compile_accelerator, extension_name  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--remove", action="store_true", help="delete the built module")
    a = ap.parse_args()
    target = SOURCE.parent / extension_name()
    if a.remove:
        target.unlink(missing_ok=True)
        print(f"removed {target.relative_to(ROOT)}")
        return 0
    try:
        built = compile_accelerator(SOURCE.parent)
    except subprocess.CalledProcessError as e:
        print(f"build_accelerator: the compiler failed:\n{e.stderr or e.stdout}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as e:
        print(f"build_accelerator: cannot build ({e})", file=sys.stderr)
        return 1
    print(f"built {built.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
