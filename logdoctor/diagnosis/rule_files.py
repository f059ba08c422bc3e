"""Reading rule files someone else wrote: the directory walk, bounded bytes, plain YAML data only.

A rule file is untrusted input. Everything here is bounded by the file, not by what it claims:
- the walk: an unreadable sub-directory is a problem, never a silent gap; links are followed once
  (no loops); entries, depth and files are capped (`--rules /` must not walk the file system);
- bytes: only regular files are opened (a FIFO, device or socket is refused from `stat`, and the opened
  descriptor is checked again), and at most `MAX_RULE_BYTES + 1` bytes are read, whatever `stat` says
  (a `/proc` file reports size 0 and can be endless);
- structure: aliases are refused (no "billion laughs"), and node count and nesting depth are capped
  before anything is constructed;
- values: only strings, finite numbers of bounded length, booleans, null, lists and mappings with
  string keys. YAML 1.1 timestamps stay strings (`2024-01-01` is text, as a rule author means it);
  explicit tags (`!!binary`, `!!set`, `!!python/...`, `!!timestamp`) and merge keys are refused.
Error messages name the file, the line and the problem and never quote the file's text: a rule path can
be a symlink to a secret, and `rules check` must not print it.
"""
from __future__ import annotations

import math
import os
import re
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from logdoctor import regexes

MAX_RULE_BYTES = 256 * 1024
MAX_RULE_FILES = 1_000      # per directory; 92 are built in
MAX_WALK_ENTRIES = 20_000
MAX_WALK_DEPTH = 12
MAX_NODES = 20_000          # the largest built-in rule has ~400 nodes
MAX_DEPTH = 32              # a rule is 6 levels deep at most (match/sel/where/field/in/item)
MAX_NUMBER_CHARS = 32       # `int("9" * 5000)` raises; `1e999` is inf: neither is a threshold anyone means

_TAG = "tag:yaml.org,2002:"


class RuleError(Exception):
    """A problem with a rule file or directory, shown as `file:line: message` (rules.py re-exports it)."""

    def __init__(self, path: Path | str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = str(path), line, message


class RuleFileError(Exception):
    """A problem at a line of a rule file; the message never contains the file's text."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


# ------------------------------------------------------------------------------------------------
# the walk


NET_DIR_NAME = "net"


def find_rule_files(directory: Path, skip_net: bool = True) -> tuple[list[Path], list[RuleError]]:
    """Rule files under `directory` (sorted) and the problems met walking it.

    A sub-directory that cannot be read is a problem, not a silent gap in the rule set. Symlinks are
    followed (a linked rule or folder is ordinary), each directory once (no loops); names starting
    with `.` are skipped (editor and VCS files), and so is a top-level `net/` (the broad net's data, see
    net_data.py) unless `skip_net` is False; the walk is bounded in entries, depth and files.
    A `*.yaml` entry that is not a regular file is kept: reading it reports what it is.
    """
    try:
        st = os.stat(directory)
    except OSError as e:
        raise RuleError(directory, 1, f"not a directory ({e.strerror or e})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuleError(directory, 1, "not a directory")
    files: list[Path] = []
    problems: list[RuleError] = []
    visited = {(st.st_dev, st.st_ino)}
    stack: list[tuple[Path, int]] = [(directory, 0)]
    entries = 0
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                listing = sorted(it, key=lambda e: e.name)
        except OSError as e:
            problems.append(RuleError(folder, 1, f"cannot read directory: {e.strerror or e}"))
            continue
        entries += len(listing)
        if entries > MAX_WALK_ENTRIES:
            raise RuleError(directory, 1, f"more than {MAX_WALK_ENTRIES} entries under it: point --rules "
                            "at a directory of rule files")
        for entry in listing:
            if entry.name.startswith(".") or (depth == 0 and entry.name == NET_DIR_NAME and skip_net):
                continue
            path = folder / entry.name
            try:
                is_dir = entry.is_dir()  # follows symlinks
                sub = entry.stat() if is_dir else None
            except OSError as e:
                if entry.name.endswith((".yaml", ".yml")):
                    files.append(path)  # a dangling link: reading it reports the problem
                elif not entry.is_symlink():
                    problems.append(RuleError(path, 1, f"cannot read: {e.strerror or e}"))
                continue
            if sub is not None:
                if (sub.st_dev, sub.st_ino) in visited:
                    continue
                visited.add((sub.st_dev, sub.st_ino))
                if depth + 1 > MAX_WALK_DEPTH:
                    problems.append(RuleError(path, 1, f"nested more than {MAX_WALK_DEPTH} directories deep"))
                else:
                    stack.append((path, depth + 1))
            elif entry.name.endswith((".yaml", ".yml")):
                files.append(path)
    if len(files) > MAX_RULE_FILES:
        raise RuleError(directory, 1, f"{len(files)} rule files; a rules directory may hold {MAX_RULE_FILES}")
    return sorted(files), problems



# ------------------------------------------------------------------------------------------------
# bytes


def read_rule_text(path: Path) -> str:
    """The file's text, if it is a regular file of at most MAX_RULE_BYTES bytes of UTF-8."""
    try:
        st = os.stat(path)  # follows symlinks: a linked rule file is fine, its target must be regular
    except OSError as e:
        raise RuleFileError(1, f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RuleFileError(1, f"not a regular file ({_file_kind(st.st_mode)})")
    if st.st_size > MAX_RULE_BYTES:
        raise RuleFileError(1, f"file is {st.st_size} bytes; rule files are limited to {MAX_RULE_BYTES}")
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after the stat, open must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise RuleFileError(1, f"cannot read: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RuleFileError(1, f"not a regular file ({_file_kind(mode)})")
        chunks: list[bytes] = []
        got = 0
        while got <= MAX_RULE_BYTES:  # `stat` may say 0 (procfs): the read itself is the bound
            chunk = os.read(fd, MAX_RULE_BYTES + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as e:
        raise RuleFileError(1, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if got > MAX_RULE_BYTES:
        raise RuleFileError(1, f"file is over {MAX_RULE_BYTES} bytes; rule files are limited to {MAX_RULE_BYTES}")
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise RuleFileError(line, "not UTF-8 text") from None


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


# ------------------------------------------------------------------------------------------------
# plain-data YAML (PyYAML costs ~50 ms to import: only files not found in the rules cache pay for it)


@lru_cache(maxsize=1)
def _loader_class() -> Any:
    import yaml
    from yaml.constructor import ConstructorError, SafeConstructor
    from yaml.resolver import Resolver

    class PlainResolver(Resolver):
        """YAML 1.1 implicit types minus timestamps (they stay text), merge keys `<<` and value keys `=`."""

    PlainResolver.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in rs if tag not in (_TAG + "timestamp", _TAG + "merge", _TAG + "value")]
        for first, rs in Resolver.yaml_implicit_resolvers.items()
    }

    def check_number(node: Any) -> None:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise ConstructorError(None, None, f"number longer than {MAX_NUMBER_CHARS} characters",
                                   node.start_mark)

    class PlainConstructor(SafeConstructor):
        """str, int, float, bool, null, seq and map only; numbers bounded; keys unique strings."""

        yaml_constructors: ClassVar[dict[Any, Any]] = {}

        def construct_bounded_int(self, node: Any) -> int:
            check_number(node)
            return SafeConstructor.construct_yaml_int(self, node)

        def construct_bounded_float(self, node: Any) -> float:
            check_number(node)
            value = SafeConstructor.construct_yaml_float(self, node)
            if not math.isfinite(value):
                raise ConstructorError(None, None, "numbers must be finite (no .inf or .nan)", node.start_mark)
            return value

        def flatten_mapping(self, node: Any) -> None:
            for key, _ in node.value:
                if key.tag in (_TAG + "merge", _TAG + "value"):
                    raise ConstructorError(None, None, "merge keys (<<) are not allowed", key.start_mark)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[str] = set()
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag != _TAG + "str":
                    raise ConstructorError(None, None, "mapping keys must be text (quote keys such as yes, "
                                           "no, on, off, null or numbers)", key.start_mark)
                if key.value in seen:
                    raise ConstructorError(None, None, "duplicate key", key.start_mark)
                seen.add(key.value)
            return super().construct_mapping(node, deep)

        def construct_refused(self, node: Any) -> None:
            tag = str(node.tag)
            family = tag[len(_TAG):].split("/")[0].split(":")[0] if tag.startswith(_TAG) else ""
            what = f"the YAML tag !!{family}" if family.isalnum() and len(family) <= 12 else "this YAML tag"
            raise ConstructorError(None, None, f"could not determine a constructor for {what}: rule files hold "
                                   "only plain text, numbers, lists and mappings", node.start_mark)

    for tag, fn in (("null", SafeConstructor.construct_yaml_null), ("bool", SafeConstructor.construct_yaml_bool),
                    ("int", PlainConstructor.construct_bounded_int),
                    ("float", PlainConstructor.construct_bounded_float),
                    ("str", SafeConstructor.construct_yaml_str), ("seq", SafeConstructor.construct_yaml_seq),
                    ("map", SafeConstructor.construct_yaml_map)):
        # types-PyYAML binds a constructor's `self` to PyYAML's own Loader classes; a loader composed from the
        # mixins (RuleLoader, below: PyYAML's documented way) is none of them, so its constructors are refused
        PlainConstructor.add_constructor(_TAG + tag, fn)  # type: ignore[type-var]
    PlainConstructor.add_constructor(None, PlainConstructor.construct_refused)  # type: ignore[type-var]

    try:  # libyaml when present: 10x faster, and its composer caps nesting itself
        # PyYAML's yaml.cyaml imports CParser from yaml._yaml; the stub leaves it out of the module's exports
        from yaml.cyaml import CParser as Parser  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - pure-Python PyYAML
        from yaml.composer import Composer
        from yaml.parser import Parser as PyParser
        from yaml.reader import Reader
        from yaml.scanner import Scanner

        class Parser(Reader, Scanner, PyParser, Composer):  # type: ignore[no-redef]
            def __init__(self, stream: str) -> None:
                Reader.__init__(self, stream)
                Scanner.__init__(self)
                PyParser.__init__(self)
                Composer.__init__(self)

    class RuleLoader(Parser, PlainConstructor, PlainResolver):
        def __init__(self, stream: str) -> None:
            Parser.__init__(self, stream)
            PlainConstructor.__init__(self)
            PlainResolver.__init__(self)

    return RuleLoader


def parse_rule_yaml(text: str) -> tuple[Any, dict[str, int]]:
    """Plain data and the line of every key path (`match/x/where`), or RuleFileError."""
    import yaml

    loader = _loader_class()(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                raise RuleFileError(1, "empty rule file")
            lines = _check_and_map(node)
            return loader.construct_document(node), lines
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise RuleFileError((mark.line + 1) if mark else 1, _plain_problem(e.problem or e.context)) from None
    except yaml.reader.ReaderError as e:  # a control character: a binary file, or NUL-separated /proc text
        line = text.count("\n", 0, max(0, e.position)) + 1
        raise RuleFileError(line, f"not a YAML text file: control character U+{e.character:04X}") from None
    except yaml.YAMLError:
        raise RuleFileError(1, "invalid YAML") from None
    except RecursionError:  # the pure-Python composer has no depth cap of its own
        raise RuleFileError(1, "structure nested too deeply") from None


def _check_and_map(root: Any) -> dict[str, int]:
    """Refuse aliases, too many nodes and deep nesting (iteratively: no recursion on hostile depth)."""
    from yaml import MappingNode, ScalarNode, SequenceNode

    lines: dict[str, int] = {}
    seen: set[int] = set()
    # (node, key path, depth, line of its parent key or list: an alias node carries its anchor's marks)
    stack: list[tuple[Any, str, int, int]] = [(root, "", 0, 1)]
    while stack:
        node, prefix, depth, used_at = stack.pop()
        if id(node) in seen:  # the composer hands out the anchored node again for every alias
            raise RuleFileError(used_at, "aliases are not allowed in rule files")
        seen.add(id(node))
        line = node.start_mark.line + 1
        if len(seen) > MAX_NODES:
            raise RuleFileError(line, f"more than {MAX_NODES} YAML nodes")
        if depth > MAX_DEPTH:
            raise RuleFileError(line, f"nested deeper than {MAX_DEPTH} levels")
        children: list[tuple[Any, str, int, int]] = []
        if isinstance(node, MappingNode):
            for k, v in node.value:
                name = k.value if isinstance(k, ScalarNode) else "?"
                key = f"{prefix}/{name}" if prefix else str(name)
                key_line = k.start_mark.line + 1
                lines.setdefault(key, key_line)
                children += [(k, key, depth + 1, key_line), (v, key, depth + 1, key_line)]
        elif isinstance(node, SequenceNode):
            for i, v in enumerate(node.value):
                key = f"{prefix}/{i}"
                lines[key] = v.start_mark.line + 1
                children.append((v, key, depth + 1, line))
        stack.extend(reversed(children))  # document order: an alias is reported where it is used
    return lines


_QUOTED = regexes.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


def _plain_problem(problem: str | None) -> str:
    """The parser's message without the file's text: a quoted token longer than a character goes."""
    msg = (problem or "invalid YAML").strip()
    return _QUOTED.sub(lambda m: m.group(0) if len(m.group(0)) <= 4 else "…", msg)
