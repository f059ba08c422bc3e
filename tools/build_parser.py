"""Build the grammar's parse table and write it beside the grammar as JSON.

    python tools/build_parser.py          # after editing grammars/sglang.lark
    python tools/build_parser.py --check  # exit 1 if the shipped table is stale (tests run this too)

logdoctor loads `grammars/sglang.parser.json` instead of building the LALR parser on every run, and
instead of lark's pickle cache (see logdoctor/parse/grammar.py for why).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logdoctor.parse.grammar import build_parser, serialize_table, table_identity

GRAMMAR = ROOT / "grammars" / "sglang.lark"
TABLE = ROOT / "grammars" / "sglang.parser.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the shipped table is current")
    args = ap.parse_args()
    grammar = GRAMMAR.read_bytes()
    if args.check:
        # lark's table is not byte-stable across hash seeds, so the check is by identity: the table names
        # the grammar digest and lark version it was built from (tests also compare it with a fresh build)
        try:
            shipped = json.loads(TABLE.read_bytes())
        except (OSError, ValueError):
            shipped = {}
        if any(shipped.get(k) != v for k, v in table_identity(grammar).items()):
            print(f"{TABLE.relative_to(ROOT)} is stale: run python tools/build_parser.py", file=sys.stderr)
            return 1
        return 0
    table = serialize_table(build_parser(grammar), grammar) + "\n"
    TABLE.write_text(table, encoding="utf-8")
    print(f"wrote {TABLE.relative_to(ROOT)} ({len(table)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
