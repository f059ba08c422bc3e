"""Settings from a config file and the environment, and `logdoctor config`, which shows them.

Where a value comes from, strongest first: the command line, a `LOGDOCTOR_*` environment variable, the
config file, the built-in default. The config file is `[tool.logdoctor]` in a `pyproject.toml` or the top
level of a `logdoctor.toml`, the nearest one found from the current directory upward (in one directory
`logdoctor.toml` wins; a `pyproject.toml` without the table is passed by). The search stops after the
directory that holds `.git` (a repository's settings are its own, not its parent's) or at the file system
root. `LOGDOCTOR_CONFIG=FILE` names the file instead; `LOGDOCTOR_CONFIG=none` reads none.

A top-level key applies to every command that has the option (`format` only to `explain`); a table named
after a command (`[tool.logdoctor.batch]`, `[batch]` in logdoctor.toml) applies to that command and beats
the top level, as `LOGDOCTOR_BATCH_FORMAT` beats `LOGDOCTOR_FORMAT`. Values reach the commands as click's
`default_map`, so an option given on the command line always wins and `ctx.get_parameter_source` tells it.
A bad file, key or value is one line naming the file (and line) or the variable, exit 2.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from logdoctor import regexes
from logdoctor.cli.common import (
    EXIT_OK,
    UsageError,
    dump,
    load_rules,
    selection_options,
)
from logdoctor.paths import display_path
from logdoctor.records import dataclass, field

CONFIG_FILES = ("logdoctor.toml", "pyproject.toml")  # searched in this order in each directory
ENV_PREFIX = "LOGDOCTOR_"
ENV_CONFIG = "LOGDOCTOR_CONFIG"
MAX_CONFIG_BYTES = 1 << 20
META = "logdoctor.config"
# A pyproject.toml is ours to read when it may hold the table: `[tool.logdoctor]` / `[tool.logdoctor.batch]`
# (then a broken file is an error), or `tool.logdoctor.jobs = 2` / `logdoctor = {...}` under `[tool]` (a
# broken file that only may hold it, such as `logdoctor = "logdoctor.cli:main"` in scripts, is passed by)
_OUR_TABLE = regexes.compile(r"^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*[\"']?logdoctor", re.MULTILINE)
_MAY_HOLD_TABLE = regexes.compile(r"^[ \t]*(?:tool[ \t]*\.[ \t]*[\"']?logdoctor|(?P<key>[\"']?logdoctor[\"']?[ \t]*=))", re.MULTILINE)
_TABLE_HEADER = regexes.compile(r"^[ \t]*\[[^\n]{0,256}", re.MULTILINE)
_TOOL_HEADER = regexes.compile(r"[ \t]*\[[ \t]*[\"']?tool[\"']?[ \t]*\][ \t]*(?:#.*)?")


def _may_hold_table(text: str) -> bool:
    """Whether a pyproject.toml may set tool.logdoctor: a dotted `tool.logdoctor...` key, or a `logdoctor = `
    key in the `[tool]` table (one under `[project.scripts]`, the usual, cannot)."""
    from bisect import bisect_left
    headers = list(_TABLE_HEADER.finditer(text))
    starts = [h.start() for h in headers]
    for m in _MAY_HOLD_TABLE.finditer(text):
        if m.group("key") is None:
            return True
        above = bisect_left(starts, m.start()) - 1   # the table the key is in: the last header before it
        if above >= 0 and _TOOL_HEADER.fullmatch(headers[above].group()):
            return True
    return False


@dataclass(frozen=True)
class Setting:
    key: str                              # as written in the file (kebab-case; snake_case is accepted)
    param: str                            # the click option it fills
    kind: str                             # value | list | paths
    only: tuple[str, ...] | None = None   # a top-level key applies only to these commands (None: all that have it)

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.upper().replace("-", "_")


SETTINGS: dict[str, Setting] = {s.key: s for s in (
    Setting("rules", "rule_dirs", "paths"),
    Setting("select", "select", "list"),
    Setting("extend-select", "extend_select", "list"),
    Setting("ignore", "ignore", "list"),
    Setting("format", "fmt", "value", only=("explain",)),
    Setting("fail-on", "fail_on", "value"),
    Setting("jobs", "jobs", "value"),
    Setting("envelope", "envelope", "value"),
    Setting("timeout", "timeout", "value"),
)}
NO_TABLE = ("config",)  # commands that take no table of their own
_SHOWN_FOR = {"jobs": ("batch",), "timeout": ("batch",)}  # the command whose option a top-level row reads


def shown_for(s: Setting) -> tuple[str, ...]:
    return _SHOWN_FOR.get(s.key, ("explain",))


class ConfigError(Exception):
    """A config file or variable that cannot be used; the message names it."""


@dataclass
class Source:
    """One layer of settings: a config file or the environment."""
    label: str                                       # `PATH [tool.logdoctor]` / `env`
    base: Path                                       # relative rule directories start here
    top: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    labels: dict[tuple[str | None, str], str] = field(default_factory=dict)  # (command, key) -> where it was set
    shown: str = ""                                  # the file as named in messages
    prefix: tuple[str, ...] = ()                     # ("tool", "logdoctor") in a pyproject.toml
    text: str = ""                                   # the file's text, to find a key's line

    def at(self, command: str | None, key: str) -> str:
        """`FILE:LINE: [table]` for a key of this file (the line when it can be found)."""
        table = (*self.prefix, command) if command else self.prefix
        line = line_of(self.text, table, key) or line_of(self.text, table, key.replace("-", "_"))
        name = "[" + ".".join(table) + "]" if table else ""
        return f"{self.shown}{f':{line}' if line else ''}:" + (f" {name}" if name else "")


@dataclass
class Config:
    file: Path | None
    searched: str                                     # how the file was found, or where the search went
    values: dict[tuple[str, ...], dict[str, tuple[Any, str]]] = field(default_factory=dict)
    general: dict[str, tuple[Any, str]] = field(default_factory=dict)  # key -> the top level's value, source
    unused_env: list[str] = field(default_factory=list)  # LOGDOCTOR_* variables that are no setting (a typo?)
    # (command, param) -> where an error in the value is reported (`FILE:LINE: key`, `LOGDOCTOR_SELECT`)
    where: dict[tuple[tuple[str, ...], str], str] = field(default_factory=dict)

    def default_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, params in self.values.items():
            node = out
            for name in path:
                node = node.setdefault(name, {})
            node.update({p: v for p, (v, _) in params.items()})
        return out

    def origin(self, ctx: click.Context, param: str, for_error: bool = False) -> str | None:
        """Where `param` of the command in `ctx` came from: an option, a file, a variable, the default.
        `for_error`: where a bad value is reported (`FILE:LINE: key`, `LOGDOCTOR_SELECT`; None: an option)."""
        from click.core import ParameterSource
        source = ctx.get_parameter_source(param)
        if source is ParameterSource.DEFAULT_MAP:
            key = (command_path(ctx), param)
            return self.where.get(key) if for_error else self.values[key[0]][param][1]
        if for_error:
            return None
        if source is ParameterSource.COMMANDLINE:
            opt = options_of(ctx.command).get(param)
            return "command line " + (opt.opts[0] if opt is not None else param)
        return "default"

    def locate(self, ctx: click.Context, param: str) -> str | None:
        return self.origin(ctx, param, for_error=True)


def command_path(ctx: click.Context) -> tuple[str, ...]:
    names: list[str] = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return tuple(reversed(names))


# ------------------------------------------------------------------------------------------------
# finding and reading the file


def find_config(start: Path | None, environ: Mapping[str, str]) -> tuple[Source | None, str]:
    explicit = environ.get(ENV_CONFIG)
    if explicit:
        if explicit.strip().lower() == "none":
            return None, f"none ({ENV_CONFIG}=none)"
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{ENV_CONFIG}: {display_path(explicit)}: no such file")
        source = read_config(path, required=True)
        return source, f"{ENV_CONFIG}"
    if start is None:
        return None, "none (the current directory is gone)"
    stop = start.anchor
    for d in (start, *start.parents):
        for name in CONFIG_FILES:
            candidate = d / name
            if candidate.is_file():
                source = read_config(candidate)
                if source is not None:
                    return source, f"found from {display_path(str(start))}"
        if (d / ".git").exists():
            stop = str(d)
            break
    return None, f"none (searched from {display_path(str(start))} up to {display_path(stop)})"


def read_config(path: Path, required: bool = False) -> Source | None:
    """The settings in `path`; None for a pyproject.toml with no [tool.logdoctor] (unless `required`)."""
    shown = display_path(str(path))
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read ({(e.strerror or str(e)).lower()})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{shown}: larger than {MAX_CONFIG_BYTES >> 20} MiB, not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{shown}: not UTF-8 (byte {e.start})") from None
    pyproject = path.name == "pyproject.toml"
    ours = not pyproject or required or bool(_OUR_TABLE.search(text))
    if not ours and not _may_hold_table(text):
        return None  # another project's file, read no further (even a broken one is not ours to judge)
    try:
        doc = _parse_toml(text, shown)
    except ConfigError:
        if ours:
            raise
        return None
    if pyproject:
        tool = doc.get("tool")
        table = tool.get("logdoctor") if isinstance(tool, dict) else None
        if table is None:
            if required:
                raise ConfigError(f"{shown}: no [tool.logdoctor] table")
            return None
        if not isinstance(table, dict):
            raise ConfigError(f"{shown}: tool.logdoctor must be a table")
    else:
        table = doc
    source = Source(f"{shown} [tool.logdoctor]" if pyproject else shown, path.parent, shown=shown,
                    prefix=("tool", "logdoctor") if pyproject else (), text=text)
    for key, value in table.items():
        norm = key.replace("_", "-")
        if norm in SETTINGS:
            source.top[norm] = value
            source.labels[(None, norm)] = source.label
        elif isinstance(value, dict):
            source.tables[key] = {}
            for k, v in value.items():
                n = k.replace("_", "-")
                if n not in SETTINGS:
                    raise ConfigError(f"{source.at(key, k)} unknown key {k!r}{_did_you_mean(k, list(SETTINGS))}")
                source.tables[key][n] = v
                source.labels[(key, n)] = f"{shown} [{'.'.join((*source.prefix, key))}]"
        else:
            raise ConfigError(f"{source.at(None, key)} unknown key {key!r}{_did_you_mean(key, list(SETTINGS))}")
    return source


def _did_you_mean(key: str, names: list[str]) -> str:
    from logdoctor.report.human import did_you_mean
    return did_you_mean(key.replace("_", "-"), names, limit=1) or f" (known: {', '.join(names)})"


def _parse_toml(text: str, shown: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)$", msg)
        where = f"{shown}:{m.group(1)}" if m else shown
        what = f"{msg[:m.start()].strip()} (column {m.group(2)})" if m else msg
        raise ConfigError(f"{where}: invalid TOML: {what}") from None


def line_of(text: str, table: tuple[str, ...], key: str) -> int | None:
    """The line where `key` is set in `table` (best effort: a plain `[a.b]` header and `key = ...`; string
    splitting, no pattern, so no line of the file can make it slow)."""
    current: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.split("#", 1)[0].strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = tuple(part.strip().strip("\"'") for part in stripped.strip("[]").split("."))
            if current == (*table, key):  # the key is a table
                return number
        elif current == table and "=" in stripped and stripped.split("=", 1)[0].strip().strip("\"'") == key:
            return number
    return None


# ------------------------------------------------------------------------------------------------
# the environment


def env_names(commands: Mapping[str, click.Command]) -> Iterator[tuple[str | None, Setting, str]]:
    """(command or None, setting, variable): LOGDOCTOR_JOBS, and LOGDOCTOR_BATCH_JOBS for a command that has it."""
    for s in SETTINGS.values():
        yield None, s, s.env
        for name, cmd in commands.items():
            if s.param in options_of(cmd):
                yield name, s, f"{ENV_PREFIX}{name.upper()}_{s.env[len(ENV_PREFIX):]}"


def read_env(environ: Mapping[str, str], commands: Mapping[str, click.Command], cwd: Path) -> Source:
    source = Source("env", cwd)
    for command, s, var in env_names(commands):
        value = environ.get(var)
        if not value:  # unset or empty: as click reads variables
            continue
        if s.kind == "paths":
            parsed: Any = [p for p in value.split(os.pathsep) if p]
        elif s.kind == "list":
            parsed = [value]
        else:
            parsed = value
        (source.top if command is None else source.tables.setdefault(command, {}))[s.key] = parsed
        source.labels[(command, s.key)] = f"env {var}"
    return source


# ------------------------------------------------------------------------------------------------
# resolution


def walk(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from walk(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def resolve(group: click.Group, cwd: Path | None, environ: Mapping[str, str]) -> Config:
    file, searched = find_config(cwd, environ)
    commands = {name: cmd for name, cmd in group.commands.items()
                if not isinstance(cmd, click.Group) and name not in NO_TABLE}
    env = read_env(environ, commands, cwd or Path("."))
    known = {var for _, _, var in env_names(commands)} | {ENV_CONFIG}
    config = Config(file=Path(file.shown) if file else None, searched=searched,
                    unused_env=sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in known))
    if file is not None:
        for table, keys in file.tables.items():
            if table not in commands:
                names = list(SETTINGS) + list(commands)
                raise ConfigError(f"{file.at(None, table)} unknown key {table!r}{_did_you_mean(table, names)}")
            for key in keys:  # a command's table holds only settings that command has
                if SETTINGS[key].param not in options_of(commands[table]):
                    raise ConfigError(f"{file.at(table, key)} {table} has no setting {key!r}")
    by_path = dict(walk(group))
    for path, cmd in by_path.items():
        options = options_of(cmd)
        for layer in (file, env):  # the environment over the file
            if layer is None:
                continue
            for s in SETTINGS.values():
                if s.param not in options:
                    continue
                picked = _pick(layer, s, path)
                if picked is None:
                    continue
                raw, label = picked
                config.values.setdefault(path, {})[s.param] = (_convert(s, raw, options[s.param], label, layer), label)
                config.where[(path, s.param)] = _error_place(layer, label, s)
    for s in SETTINGS.values():  # the top level alone, for `logdoctor config`
        option = options_of(by_path[shown_for(s)])[s.param]
        for layer in (file, env):
            if layer is not None and s.key in layer.top:
                label = layer.labels[(None, s.key)]
                config.general[s.key] = (_convert(s, layer.top[s.key], option, label, layer), label)
    return config


def options_of(cmd: click.Command) -> dict[str, click.Option]:
    return {p.name: p for p in cmd.params if isinstance(p, click.Option) and p.name}


def _pick(layer: Source, s: Setting, path: tuple[str, ...]) -> tuple[Any, str] | None:
    """The value a layer gives command `path` for `s`: its own table first, then the top level."""
    if len(path) == 1 and s.key in layer.tables.get(path[0], {}):
        return layer.tables[path[0]][s.key], layer.labels[(path[0], s.key)]
    if s.key in layer.top and (s.only is None or (len(path) == 1 and path[0] in s.only)):
        return layer.top[s.key], layer.labels[(None, s.key)]
    return None


def _error_place(layer: Source, label: str, s: Setting) -> str:
    if label.startswith("env "):
        return label[4:]
    command = next((c for (c, k), where in layer.labels.items() if k == s.key and where == label), None)
    return f"{layer.at(command, s.key)} {s.key}"


def _convert(s: Setting, raw: Any, param: click.Option, label: str, layer: Source) -> Any:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{_error_place(layer, label, s)}: {why}")

    if s.kind in ("list", "paths"):
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise bad("expected a string or a list of strings")
        if s.kind == "paths":
            return [str(layer.base / p) if not label.startswith("env ") else p for p in items]
        return list(items)
    if isinstance(raw, (bool, list, dict)) or (isinstance(param.type, click.types.IntParamType)
                                                and isinstance(raw, float)):
        raise bad(f"expected {_expected(param)}, not {raw!r}")
    try:
        return param.type.convert(raw, None, None)  # no param: the message names the key, not an option
    except click.BadParameter as e:
        raise bad(e.message) from None


def _expected(param: click.Option) -> str:
    if isinstance(param.type, click.Choice):
        return "one of " + ", ".join(map(str, param.type.choices))
    return {"integer": "an integer", "float": "a number"}.get(param.type.name.split()[0], "a string")


def configure(ctx: click.Context) -> None:
    """Read the config file and the environment into `ctx.default_map` (the `cli` group's callback)."""
    try:
        cwd: Path | None = Path.cwd()
    except OSError:
        cwd = None
    assert isinstance(ctx.command, click.Group)
    try:
        config = resolve(ctx.command, cwd, os.environ)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    mapping = config.default_map()
    if ctx.default_map:  # a caller's own default_map (click's testing) keeps its say
        mapping.update(ctx.default_map)
    ctx.default_map = mapping
    ctx.meta[META] = config
    ctx.meta["logdoctor.origin"] = config.locate


# ------------------------------------------------------------------------------------------------
# `logdoctor config`

_SHOWN_AS = {"jobs": "(usable cores)", "envelope": "(recognised by shape)", "select": "ALL", "rules": "(built-in only)"}


@click.command("config")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, metavar="DIR", help="Add rules from DIR (as explain does).")
@selection_options
@click.pass_context
def config_cmd(ctx: click.Context, fmt: str, rule_dirs: tuple[str, ...]) -> int:
    """Print every setting in force, its value and where it came from, and the rules the selection runs.

    Strongest first: the command line, LOGDOCTOR_* variables (LOGDOCTOR_JOBS, LOGDOCTOR_BATCH_FORMAT), the
    nearest pyproject.toml [tool.logdoctor] or logdoctor.toml from here upward (to the repository root), the
    defaults. LOGDOCTOR_CONFIG=FILE names the file, LOGDOCTOR_CONFIG=none reads none.
    """
    from logdoctor.diagnosis.net import NET_RULE_IDS
    from logdoctor.diagnosis.rules import load_ruleset
    from logdoctor.diagnosis.selection import summary
    config: Config = ctx.meta[META]  # the `cli` group read it before any command runs
    rows = _rows(ctx, ctx.find_root().command, config)  # type: ignore[arg-type]
    active = summary(load_rules(rule_dirs))
    total = len(load_ruleset(list(rule_dirs)))
    if fmt == "json":
        click.echo(dump({"schema": "logdoctor.config/1", "file": str(config.file) if config.file else None,
                         "settings": rows, "active": {**active, "count": len(active["rules"]), "total": total},
                         "unused_env": config.unused_env}))
        return EXIT_OK
    width = max(len(r["name"]) for r in rows) + 1
    vwidth = min(40, max(len(_shown(r)) for r in rows)) + 1
    click.echo(f"{'config file':<{width}} {display_path(str(config.file)) if config.file else config.searched}")
    for r in rows:
        click.echo(f"{r['name']:<{width}} {_shown(r):<{vwidth}} {r['source']}")
    net = f"{len(active['net'])} of {len(NET_RULE_IDS)} categories ({', '.join(active['net'])})" if active["net"] else "off"
    click.echo(f"{'active rules':<{width}} {len(active['rules'])} of {total} rules; broad net: {net}")
    for name in config.unused_env:
        click.echo(f"{'not a setting':<{width}} env {name} (ignored)")
    return EXIT_OK


def _shown(row: dict[str, Any]) -> str:
    value, key = row["value"], row["key"]
    if isinstance(value, list):
        shown = ",".join(display_path(str(v)) if key == "rules" else str(v) for v in value)
        return shown or ("(nothing)" if key == "select" else _SHOWN_AS.get(key, "-"))
    return _SHOWN_AS.get(key, "-") if value is None else str(value)


def _rows(ctx: click.Context, group: click.Group, config: Config) -> list[dict[str, Any]]:
    """One row per setting as the top level sets it (`config`'s own options as given), then each command's
    own value where a table or a command's variable sets it apart."""
    from logdoctor.cli.common import SELECTION
    from logdoctor.diagnosis.selection import split
    commands = dict(walk(group))
    rows: list[dict[str, Any]] = []
    general: dict[str, str] = {}
    value: Any
    for s in SETTINGS.values():
        beneath = config.general.get(s.key)  # the file's or the environment's top level
        if s.param == "rule_dirs":
            value, source = list(ctx.params["rule_dirs"]), config.origin(ctx, s.param)
        elif s.kind == "list":  # None: not given (select: the default, ALL); []: given empty
            given = ctx.meta.get(SELECTION, {}).get(s.param)
            value, source = (list(split(given)) if given else None), config.origin(ctx, s.param)
        elif beneath is not None:
            value, source = beneath
        else:
            param = options_of(commands[shown_for(s)])[s.param]
            value, source = (None if callable(param.default) else param.default), "default"
        general[s.key] = beneath[1] if beneath else "default"
        rows.append({"name": s.key, "key": s.key, "command": None, "value": value, "source": source})
    for path in commands:
        for s in SETTINGS.values():
            hit = config.values.get(path, {}).get(s.param)
            if path[0] not in NO_TABLE and hit is not None and hit[1] != general[s.key]:
                rows.append({"name": ".".join(path) + "." + s.key, "key": s.key, "command": " ".join(path),
                             "value": hit[0], "source": hit[1]})
    return rows


__all__ = ["SETTINGS", "Config", "ConfigError", "config_cmd", "configure", "find_config", "line_of", "resolve"]
