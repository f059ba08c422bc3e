"""logdoctor: read SGLang server logs and say why a launch failed.

The Python API (logdoctor/api.py; the README's "Python API" section shows it):

    report = logdoctor.diagnose("server.log")     # a path, bytes, the log as a str, or a file object
    report.verdict, report.primary, report.to_markdown()
    logdoctor.events("server.log")                # polars.DataFrame, one row per event
    logdoctor.runs(["logs/"])                     # polars.DataFrame, one row per log

The names are resolved on first use, so `import logdoctor` (which every command does) loads neither the
stages nor polars. `logdoctor.events` is the function; the event model every stage imports is the
submodule `logdoctor.events` (`from logdoctor.events import Event`). Python binds a submodule to its
package's attribute when the submodule is first imported, so it is imported here, first, and its
attribute dropped: nothing imported later can rebind `logdoctor.events` to the module.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import logdoctor.events as _event_model  # noqa: F401  (imported first: see the docstring)

if TYPE_CHECKING:
    from logdoctor.api import InputError, Report, RuleError, diagnose, events, runs

globals().pop("events", None)  # the submodule's attribute: the public `events` is the function

__version__ = "0.1.0"
__all__ = ["InputError", "Report", "RuleError", "__version__", "diagnose", "events", "runs"]
_PUBLIC = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module("logdoctor.api"), name)
        globals()[name] = value  # once: later lookups do not come here
        return value
    raise AttributeError(f"module 'logdoctor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _PUBLIC)
