"""Schema problems of a rule file as short `line: message` pairs that do not leak the file's content.

jsonschema's own messages repr the offending value (up to the whole sub-document). A rule path can be a
symlink to a secret that happens to be YAML, so a file's values are quoted only once it is recognisably
a rule (a mapping whose `id` is a rule id); anything else gets one content-free "not a rule file".
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from logdoctor import regexes
from logdoctor.resources import builtin_rules_dir

RULE_ID = regexes.compile(r"(MEM|IPC|GRF|COM|UNS|ENV|CFG|UNK)[0-9]{3}")
_TYPE_WORDS = {"string": "text", "number": "a number", "integer": "a whole number", "boolean": "true or false",
               "null": "null", "array": "a list", "object": "a mapping"}


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema
    schema = json.loads((builtin_rules_dir() / "schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def looks_like_rule(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("id"), str) and RULE_ID.fullmatch(data["id"]) is not None


def line_for(lines: dict[str, int], path_parts: list[Any]) -> int:
    parts = [str(p) for p in path_parts]
    while parts:
        key = "/".join(parts)
        if key in lines:
            return lines[key]
        parts.pop()
    return 1


def schema_problem(data: Any, lines: dict[str, int]) -> tuple[int, str] | None:
    """The first problem (in document order) of parsed rule data, or None when it is schema-valid."""
    if not isinstance(data, dict):
        return 1, "not a rule file: a rule file is a YAML mapping"
    if not looks_like_rule(data):
        return lines.get("id", 1), "not a rule file: it has no id such as UNK001"
    errors = list(_validator().iter_errors(data))
    if not errors:
        return None
    e = min(errors, key=lambda err: (line_for(lines, list(err.absolute_path)), len(err.absolute_path)))
    e = _specific(e)
    where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
    return line_for(lines, list(e.absolute_path)), f"{_clip(where, 80)}: {_message(e)}"


def _specific(e: Any) -> Any:
    """Inside a oneOf, the alternative's own complaint (`regex` too long) beats "matches no form"."""
    while e.validator in ("oneOf", "anyOf") and e.context:
        inner = [c for c in e.context if c.validator not in ("type", "additionalProperties")]
        if len(inner) != 1:
            break
        e = inner[0]
    return e


def _message(e: Any) -> str:
    v, vv, inst = e.validator, e.validator_value, e.instance
    if "propertyNames" in e.schema_path:
        return f"key {_quote(inst)} is not a valid name ({_pattern_words(e)})"
    if v == "required":
        missing = [k for k in vv if isinstance(inst, dict) and k not in inst]
        return f"missing required key {missing[0] if missing else vv[0]!r}"
    if v == "additionalProperties":
        known = set(e.schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in known) if isinstance(inst, dict) else []
        allowed = ", ".join(sorted(known))
        return f"Additional properties are not allowed: {_quote(extra[0]) if extra else '?'} (allowed: {_clip(allowed, 160)})"
    if v == "type":
        kinds = [vv] if isinstance(vv, str) else vv
        return "must be " + " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)
    if v == "enum":
        return "must be one of " + ", ".join(str(x) for x in vv)
    if v == "pattern":
        return f"{_quote(inst)} {_pattern_words(e)}"
    if v in ("oneOf", "anyOf"):
        return "must be " + str(e.schema.get("description", "one of the allowed forms"))
    bounds = {"maxLength": "is longer than {} characters", "minLength": "is shorter than {} characters",
              "maxItems": "has more than {} items", "minItems": "has fewer than {} items",
              "maxProperties": "has more than {} keys", "minProperties": "has fewer than {} keys",
              "maximum": "must be at most {}", "minimum": "must be at least {}"}
    if v in bounds:
        return bounds[v].format(vv)
    return f"is not valid ({v})"


def _pattern_words(e: Any) -> str:
    return str(e.schema.get("description") or f"does not match {e.validator_value}")


def _quote(value: Any) -> str:
    """A value from a recognised rule file, short enough to read in one line."""
    return _clip(repr(value), 60)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
