"""Build the built-in rules and broad net and write them beside the rule files as JSON.

    python tools/build_rules.py          # after editing anything under rules/
    python tools/build_rules.py --check  # exit 1 if the shipped build is stale (tests run this too)

logdoctor loads `rules/built-rules.json` and `rules/built-net.json` instead of reading and building ~140 YAML files on every run (see
logdoctor/diagnosis/rules_built.py); when it is stale, runs fall back to the files, only slower.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logdoctor.diagnosis.rules_built import build  # noqa: E402

RULES = ROOT / "rules"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the shipped build is current")
    args = ap.parse_args()
    texts = build(RULES)
    if args.check:
        stale = [name for name, text in texts.items() if _read(RULES / name) != text]
        for name in stale:
            print(f"rules/{name} is stale: run python tools/build_rules.py", file=sys.stderr)
        return 1 if stale else 0
    for name, text in texts.items():
        (RULES / name).write_text(text, encoding="utf-8")
        print(f"wrote rules/{name} ({len(text)} bytes)")
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""

if __name__ == "__main__":
    sys.exit(main())
