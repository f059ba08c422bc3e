"""Regexes from recorded programs are the patterns re.compile makes, and are used only where they fit."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor import regex_programs, regexes

ROOT = Path(__file__).resolve().parent.parent


def test_recorded_programs_are_current_and_equal_what_re_compiles() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "build_regexes.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # the project is developed and tested on this engine: its programs are the ones in use here
    assert regex_programs.ENGINE == regexes.engine_identity()
    assert len(regex_programs.PROGRAMS) > 150
    for pattern, flags in regex_programs.PROGRAMS:
        got = regexes.compile(pattern, flags)
        # re.Pattern equality compares the pattern, its flags and the engine's program
        assert got == re.compile(pattern, flags) and got.groupindex == re.compile(pattern, flags).groupindex, pattern


def test_module_patterns_come_from_the_recorded_programs() -> None:
    from logdoctor.read import prefix
    key = (prefix._NCCL.pattern, prefix._NCCL.flags & ~re.UNICODE)
    assert key in regex_programs.PROGRAMS or (prefix._NCCL.pattern, 0) in regex_programs.PROGRAMS


def test_another_engine_or_a_refused_program_compiles_as_usual(monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = r"(?P<a>x+)y"
    monkeypatch.setattr(regexes, "_programs", None)
    monkeypatch.setattr(regex_programs, "ENGINE", "another-engine")
    assert regexes._load() == {}
    assert regexes.compile(pattern) == re.compile(pattern)
    bogus = (32, (1, 2, 3), 1, (("a", 1),), (None, "a"))  # not a program the engine takes
    monkeypatch.setattr(regexes, "_programs", {(pattern, 0): bogus})
    got = regexes.compile(pattern)
    assert got == re.compile(pattern) and got.match("xxy") is not None and got.match("xxy").group("a") == "xx"


def test_lark_lexers_compile_through_the_recorded_programs() -> None:
    from logdoctor.parse import grammar
    grammar._parser.cache_clear()
    parser = grammar._parser()
    assert grammar.parse_message("Load weight begin. avail mem=78.61 GB") == ("weight_load_begin", {"avail_gib": 78.61})
    # each state's lexer is made when the state is first reached: every state, asked for, gets the recorded programs
    lexers = parser.parser.lexer.lexers
    assert 0 < len(lexers) < len(parser.parser.parser.parser.parse_table.states)  # the parse made only what it used
    for state in parser.parser.parser.parser.parse_table.states:
        assert lexers[state].re is regexes.LEXER_RE
