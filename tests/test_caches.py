"""Caches can neither run code, hang, nor break the tool: the parser and the built-in rules ship prebuilt as
JSON (used only while current), the rule cache lives only in a private directory the user owns, and anything
else found there is a miss."""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from logdoctor import cachedir
from logdoctor.diagnosis import net_data, rules, rules_built
from logdoctor.parse import grammar
from logdoctor.resources import builtin_rules_dir, grammar_path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "fixtures" / "example" / "tp8-mem-fraction.log"


class _Planted:
    """Unpickling this creates the marker file: proof that a planted cache ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _explain(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "--format", "json", *args, str(EXAMPLE)],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)


def test_generated_parser_is_current_and_parses_as_a_fresh_lark_build() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "build_parser.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    grammar._parser.cache_clear()
    loaded = grammar._parser()
    assert type(loaded).__module__ == "logdoctor.parse.sglang_parser"  # the generated one, not lark's build
    built = grammar.build_parser(grammar_path("sglang.lark").read_bytes())
    lines = 0
    for path in sorted((ROOT / "fixtures").rglob("*.log"))[:400]:
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines()[:200]:
            for body in (raw, raw.split("] ", 1)[-1]):
                def result(p: object) -> object:
                    try:
                        return p.parse(body)  # type: ignore[attr-defined]
                    except Exception as e:  # noqa: BLE001 - the same failure is part of "the same parser"
                        return type(e).__name__
                assert result(loaded) == result(built), body
                lines += 1
    assert lines > 5000


def test_the_generated_parser_folds_the_terminals_lark_would() -> None:
    # the scanners' string-in-regex folding is read from a table built with the parser, not worked out per state
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import build_parser
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from logdoctor.parse import sglang_parser
    expected = build_parser.unless_matches(sglang_parser.Lark_StandAlone())
    assert (sglang_parser.UNLESS_FLAGS, sorted(sglang_parser.UNLESS_MATCHES)) == expected
    assert expected == build_parser.unless_matches(grammar.build_parser(grammar_path("sglang.lark").read_bytes(), False))


def test_explain_never_imports_lark() -> None:
    # `_run`, the command without `main`'s process exit, so the check after it runs
    code = ("import sys; from logdoctor.cli.main import _run; sys.argv = ['logdoctor', 'explain', '--exit-zero', %r]\n"
            "assert _run() == 0\n"
            "assert 'lark' not in sys.modules, 'lark imported'" % str(EXAMPLE))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_failure_a_rule_names_loads_neither_the_net_nor_the_selectors() -> None:
    # the broad net's modules only where the rules left the cause open, the selection's only with a selector
    code = ("import sys; from logdoctor.cli.main import _run; sys.argv = ['logdoctor', 'explain', %r]\n"
            "assert _run() == 1\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('logdoctor.diagnosis.'))\n"
            "assert not {'logdoctor.diagnosis.net', 'logdoctor.diagnosis.net_data', 'logdoctor.diagnosis.selection'}"
            " & set(loaded), loaded\n"
            "sys.argv = ['logdoctor', 'explain', '--ignore', 'NET', %r]\n"
            "assert _run() == 1 and 'logdoctor.diagnosis.selection' in sys.modules" % (str(EXAMPLE), str(EXAMPLE)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_stale_generated_parser_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from logdoctor.parse import sglang_parser
    monkeypatch.setattr(sglang_parser, "GRAMMAR_DIGEST", "0-0")
    grammar._parser.cache_clear()
    try:
        parser = grammar._parser()
        assert type(parser).__module__.startswith("lark")  # built by lark from the grammar as it is
        assert grammar.parse_message("Load weight begin. avail mem=78.61 GB") == ("weight_load_begin", {"avail_gib": 78.61})
    finally:
        grammar._parser.cache_clear()
        grammar._prefilter.cache_clear()


def test_nothing_is_read_from_the_temp_dir_even_when_home_is_read_only(tmp_path: Path) -> None:
    """The old lark cache fell back to a predictable name in the temp dir; a pickle planted there ran."""
    marker = tmp_path / "pwned"
    home = tmp_path / "home"
    home.mkdir()
    (home / "cache").write_text("a file where the cache directory should be: unusable even for root")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    source = grammar_path("sglang.lark").read_bytes()
    for name in (f"sglang-{zlib.crc32(source):08x}{len(source):x}.lark.cache", "sglang.parser.json"):
        with open(tmp / name, "wb") as f:
            f.write(b"0" * 64 + b"\n")
            pickle.dump(_Planted(str(marker)), f)
    os.mkfifo(tmp / "logdoctor-fifo")
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), "TMPDIR": str(tmp)}
    proc = _explain(env)  # the FIFO would hang a run that opened it
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "failed"
    assert not marker.exists()
    assert sorted(p.name for p in tmp.iterdir()) == sorted(
        ["logdoctor-fifo", "sglang.parser.json", f"sglang-{zlib.crc32(source):08x}{len(source):x}.lark.cache"])


def test_runs_write_nothing_outside_the_private_cache(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = tmp_path / "cache"
    proc = _explain({"XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmp)})
    assert proc.returncode == 1, proc.stderr
    assert list(tmp.iterdir()) == []
    # the built-in rules and net ship built (rules/built-*.json): a first run has nothing to cache
    assert not (cache / "logdoctor").exists() or list((cache / "logdoctor").iterdir()) == []
    user_rules = tmp_path / "mine"
    shutil.copytree(ROOT / "rules" / "memory_pressure", user_rules)
    proc = _explain({"XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmp)}, "--rules", str(user_rules))
    assert proc.returncode == 1, proc.stderr
    assert list(tmp.iterdir()) == []
    d = cache / "logdoctor"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert sorted(p.name.split("-")[0] + p.suffix for p in d.iterdir()) == ["rules.json"]  # JSON only
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in d.iterdir())


def _without_compiled_regexes(value: object) -> object:
    """A rule's data with every `_rx` (an RE2 object, or None until first used) and `_mem` (its RE2 budget, kept
    when the rule was compiled or built) left out."""
    if isinstance(value, dict):
        return {k: _without_compiled_regexes(v) for k, v in value.items() if k not in ("_rx", "_mem")}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_compiled_regexes(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: _without_compiled_regexes(getattr(value, f.name))
                                       for f in dataclasses.fields(value)})
    return value


def _regex_budgets(value: object) -> Iterator[tuple[str, int]]:
    if isinstance(value, dict):
        if "regex" in value:
            yield value["regex"], value["_mem"]
        for v in value.values():
            yield from _regex_budgets(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _regex_budgets(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _regex_budgets(getattr(value, f.name))


def test_shipped_rule_build_is_current_and_equals_the_rule_files() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "build_rules.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rules_built._shipped_rules.cache_clear()
    rules_built._shipped_net.cache_clear()
    shipped, net = rules_built.shipped_rules(), rules_built.shipped_net()
    assert shipped is not None and net is not None
    from_files, problems = rules.check_dir(builtin_rules_dir())
    from_files_net, net_problems = net_data.check_net_dir(builtin_rules_dir() / "net")
    assert problems == [] and net_problems == []
    assert len(shipped) == len(from_files) > 90
    for a, b in zip(shipped, from_files):
        assert _without_compiled_regexes(a) == _without_compiled_regexes(b), a.id
    budgets = list(_regex_budgets(shipped))
    assert len(budgets) > 100
    for pattern, mem in budgets:  # each regex is compiled once, with the budget its program needs
        assert mem == rules.regex_budget(pattern)[1], pattern
    assert len(net.terms) > 300
    assert _without_compiled_regexes(net) == _without_compiled_regexes(from_files_net)


def test_a_stale_or_damaged_rule_build_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "rules"
    shutil.copytree(builtin_rules_dir(), copy)
    monkeypatch.setattr(rules_built, "builtin_rules_dir", lambda: copy)
    for cached in (rules_built._shipped_rules, rules_built._shipped_net, rules_built._digest_of):
        cached.cache_clear()
    assert rules_built.shipped_rules() is not None
    rule = next((copy / "memory_pressure").glob("*.yaml"))
    rule.write_text(rule.read_text().replace("title:", "title: (edited)", 1))  # an edit of one rule
    for cached in (rules_built._shipped_rules, rules_built._shipped_net, rules_built._digest_of):
        cached.cache_clear()
    # each build is checked against its own files: the rules' is stale, the net's is not
    assert rules_built.shipped_rules() is None and rules_built.shipped_net() is not None
    term = next((copy / "net").rglob("*.yaml"))
    term.write_bytes(term.read_bytes() + b"\n# edited\n")  # an edit of one net file
    for cached in (rules_built._shipped_rules, rules_built._shipped_net, rules_built._digest_of):
        cached.cache_clear()
    assert rules_built.shipped_net() is None
    for cached in (rules_built._shipped_rules, rules_built._shipped_net, rules_built._digest_of):
        cached.cache_clear()


def test_a_damaged_rule_build_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Current by digest but not what the build writes: the rule files are read instead."""
    from logdoctor.diagnosis import rules_shipped
    copy = tmp_path / "rules"
    shutil.copytree(builtin_rules_dir(), copy)
    monkeypatch.setattr(rules_built, "builtin_rules_dir", lambda: copy)
    try:
        for damaged in ([{"id": "X"}], "not a list", None):
            monkeypatch.setattr(rules_shipped, "RULES", damaged)
            rules_built._shipped_rules.cache_clear()
            assert rules_built.shipped_rules() is None
        (copy / rules_built.BUILT_NET).write_text("{not json")
        rules_built._shipped_net.cache_clear()
        assert rules_built.shipped_net() is None
    finally:
        for cached in (rules_built._shipped_rules, rules_built._shipped_net, rules_built._digest_of):
            cached.cache_clear()


def test_private_dir_refuses_a_directory_owned_by_someone_else(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "logdoctor").mkdir(mode=0o700)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)
    assert cachedir.private_cache_dir() is None


def test_private_dir_refuses_a_symlink_and_closes_an_open_directory(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "logdoctor").symlink_to(elsewhere)
    assert cachedir.private_cache_dir() is None
    (tmp_path / "logdoctor").unlink()
    (tmp_path / "logdoctor").mkdir()
    (tmp_path / "logdoctor").chmod(0o777)
    d = cachedir.private_cache_dir()
    assert d is not None and stat.S_IMODE(d.stat().st_mode) == 0o700


def test_relative_xdg_cache_home_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert cachedir.private_cache_dir() == tmp_path / "h" / ".cache" / "logdoctor"
    assert not (tmp_path / "relative").exists()


def test_read_private_refuses_fifos_symlinks_and_big_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert cachedir.read_private(fifo) is None  # returns at once: opened non-blocking, not a regular file
    target = tmp_path / "target"
    target.write_bytes(b"{}")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert cachedir.read_private(link) is None
    assert cachedir.read_private(target) == b"{}"
    assert cachedir.read_private(target, limit=1) is None


def _rule_cache(tmp_path: Path) -> tuple[Path, list[str]]:
    first, problems = rules.check_dir(ROOT / "rules")
    assert not problems
    caches = list((tmp_path / "logdoctor").glob("rules-*.json"))
    assert len(caches) == 1
    return caches[0], [r.id for r in first]


@pytest.mark.parametrize("content", [
    '{"broken',
    "[]",
    '{"format": 1, "key": "x", "entries": {}}',
    '{"format": 1, "key": "KEY", "entries": []}',
    '{"format": 1, "key": "KEY", "entries": {"PATH": {"data": [], "lines": {}}}}',
    '{"format": 1, "key": "KEY", "entries": {"PATH": {"data": {"id": 5}, "lines": {"id": 1}}}}',
    '{"format": 1, "key": "KEY", "entries": {"PATH": {"data": {}, "lines": {"a": "b"}}}}',
])
def test_rule_cache_of_any_other_shape_is_a_miss_and_is_rewritten(tmp_path: Path, content: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache, ids = _rule_cache(tmp_path)
    some_rule = str(sorted((ROOT / "rules").rglob("*.yaml"))[0])
    cache.write_text(content.replace("KEY", cache.name).replace("PATH", some_rule))
    again, problems = rules.check_dir(ROOT / "rules")
    assert not problems and [r.id for r in again] == ids
    doc = json.loads(cache.read_text())
    assert doc["format"] == rules.CACHE_FORMAT and len(doc["entries"]) == len(ids)


def test_rule_cache_replaced_by_a_fifo_does_not_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache, ids = _rule_cache(tmp_path)
    cache.unlink()
    os.mkfifo(cache)
    again, problems = rules.check_dir(ROOT / "rules")  # a blocking open would hang here
    assert not problems and [r.id for r in again] == ids


def test_no_cache_when_the_home_cannot_be_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logdoctor").write_text("a file where the cache directory should be: unusable even for root")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None
    try:
        assert cachedir.private_cache_dir() is None
        got, problems = rules.check_dir(ROOT / "rules")
    finally:
        tempfile.tempdir = None
    assert not problems and got
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_rule_cache_keeps_a_bounded_number_of_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every edited rule file (or other set of rule directories) makes a new entry: old ones must go
    from logdoctor.cachedir import MAX_ENTRIES_PER_KIND
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = sorted((ROOT / "rules").rglob("*.yaml"))[0]
    rule_dir = tmp_path / "rules"
    rule_dir.mkdir()
    stranger = tmp_path / "cache" / "logdoctor" / "rules-planted.json"
    for i in range(MAX_ENTRIES_PER_KIND + 6):
        target = rule_dir / source.name
        target.write_bytes(source.read_bytes() + f"\n# edit {i}\n".encode())
        os.utime(target, ns=(i * 10**9, i * 10**9))  # each edit a new (size, mtime): a new cache key
        loaded, problems = rules.check_dir(rule_dir)
        assert not problems and len(loaded) == 1
        if i == 0:  # a symlink is never followed or removed, even under a matching name
            stranger.symlink_to(tmp_path / "elsewhere.json")
    entries = sorted((tmp_path / "cache" / "logdoctor").glob("rules-*.json"))
    regular = [e for e in entries if not e.is_symlink()]
    assert len(regular) == MAX_ENTRIES_PER_KIND
    assert stranger.is_symlink()
    newest = max(regular, key=lambda e: e.stat().st_mtime_ns)
    assert str(target) in json.loads(newest.read_text())["entries"]  # the entry just written is kept


def test_a_rule_is_the_same_whether_the_rule_cache_had_it_or_not(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # a cached built-in rule is not costed again: its cost comes from the entry. Before, a hit gave no cost and
    # a miss the counted one, so the shipped build depended on what the cache held when it was written
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cold, problems = rules.check_dir(builtin_rules_dir())
    warm, again = rules.check_dir(builtin_rules_dir())
    assert not problems and not again and len(cold) == len(warm) > 90
    for a, b in zip(cold, warm):
        assert _without_compiled_regexes(a) == _without_compiled_regexes(b), a.id
    assert any(r.cost.units for r in warm)  # counted, not the empty default
    # an entry of the earlier shape (no cost) is a miss, and the file is rewritten with costs
    cache = next((tmp_path / "logdoctor").glob("rules-*.json"))
    doc = json.loads(cache.read_text())
    for entry in doc["entries"].values():
        del entry["cost"]
    cache.write_text(json.dumps(doc))
    old_shape, problems = rules.check_dir(builtin_rules_dir())
    assert not problems and [_without_compiled_regexes(r) for r in old_shape] == \
        [_without_compiled_regexes(r) for r in cold]
    assert all("cost" in e for e in json.loads(cache.read_text())["entries"].values())


def test_the_generated_memo_objects_are_what_lark_deserializes() -> None:
    """The generated parser makes MEMO's objects with straight-line code (`_built_memo`): the same classes,
    fields and values, and the same sharing (none), as lark's Serialize.deserialize makes of MEMO."""
    from logdoctor.parse import sglang_parser as runtime

    def shape(obj: object, seen: set[int]) -> object:
        if isinstance(obj, (str, int, float, bool, type(None), tuple)):
            return obj
        assert id(obj) not in seen, "an object shared between two places"
        seen.add(id(obj))
        if isinstance(obj, list):
            return [shape(v, seen) for v in obj]
        if isinstance(obj, dict):
            return {k: shape(v, seen) for k, v in obj.items()}
        fields = type(obj).__serialize_fields__  # type: ignore[attr-defined]
        extra = ("_hash",) if isinstance(obj, runtime.Rule) else ()
        return (type(obj).__name__, {f: shape(getattr(obj, f), seen) for f in (*fields, *extra)})

    namespace = {"Rule": runtime.Rule, "TerminalDef": runtime.TerminalDef}
    made = runtime._built_memo()
    lark_made = runtime.SerializeMemoizer.deserialize(runtime.MEMO, namespace, {})
    assert len(made) == len(lark_made) > 300
    assert shape(made, set()) == shape(lark_made, set())
