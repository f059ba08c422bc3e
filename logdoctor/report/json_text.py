"""The one JSON text of every output (`--format json`, `Report.to_json`): UTF-8 kept, sets sorted, a float
JSON has no form for (NaN, infinity) written as null, anything else as its string."""
from __future__ import annotations

import json
from typing import Any


def dump(obj: Any, indent: int | None = None) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default, indent=indent)


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, float):
        return None
    return str(o)
