"""The public API for one log: `diagnose_source(path, rules)` -> `Report` (see logdoctor.diagnosis.ranking).

Notebooks and scripts import from here; the stages live in the sub-packages (read, parse, run, diagnosis,
report, many, cli).
"""
from logdoctor.diagnosis.ranking import (
    SCHEMA,
    Report,
    diagnose,
    diagnose_source,
    rank_diagnoses,
    was_serving,
)

__all__ = ["Report", "diagnose", "diagnose_source", "rank_diagnoses", "was_serving", "SCHEMA"]
