"""Build the built-in rules and broad net: the rules as a module of data, the net as JSON beside its files.

    python tools/build_rules.py          # after editing anything under rules/
    python tools/build_rules.py --check  # exit 1 if the shipped build is stale (tests run this too)

logdoctor loads `logdoctor/diagnosis/rules_shipped.py` and `rules/built-net.json` instead of reading and building
~140 YAML files on every run (see logdoctor/diagnosis/rules_built.py); when they are stale, runs fall back to the
files, only slower.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logdoctor.diagnosis.rules_built import build  # noqa: E402
from generated import write_or_check  # noqa: E402  (a sibling: this folder is on the path)

RULES = ROOT / "rules"
MODULES = ROOT / "logdoctor" / "diagnosis"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the shipped build is current")
    args = ap.parse_args()
    texts = build(RULES)
    return write_or_check({(MODULES if name.endswith(".py") else RULES) / name: text for name, text in texts.items()},
                          args.check, "build_rules.py")

if __name__ == "__main__":
    sys.exit(main())
