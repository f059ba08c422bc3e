"""Every catalog template of the startup / memory / cuda_graph / comm / watchdog / exit / steady phases
parses to its event kind (fixtures/catalog/lines.tsv: one exact line per template and variant)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from logdoctor.events import KINDS
from logdoctor.parse.parse import parse_text

ROOT = Path(__file__).resolve().parent.parent
ROWS = list(csv.DictReader(open(ROOT / "fixtures" / "catalog" / "lines.tsv", newline="", encoding="utf-8"),
                           delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['id']}-{i}" for i, r in enumerate(ROWS)])
def test_template_line_parses_to_its_kind(row: dict[str, str]) -> None:
    events = parse_text(row["line"] + "\n")
    kinds = [e.kind for e in events]
    assert row["kind"] in kinds, f"{row['id']}: {row['line']!r} gave {kinds}"


def test_every_template_id_of_the_covered_phases_has_a_line() -> None:
    covered = {r["id"] for r in ROWS}
    documented = {t for info in KINDS.values() for t in info.templates if t[0] in "SBMGCNXE" and t != "PFX06"}
    assert documented - covered == set()


def test_kinds_table_names_the_templates_of_each_row() -> None:
    for r in ROWS:
        assert r["kind"] in KINDS
        assert r["id"] in KINDS[r["kind"]].templates, r["id"]
