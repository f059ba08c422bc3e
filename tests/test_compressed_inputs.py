"""Compressed logs are read by content, on a path and on stdin, and give the plain log's diagnosis.

Run through the venv's `logdoctor` console script in a subprocess (what a user runs, with a real pipe on
stdin). Fixtures: fixtures/compressed/README.md. The outputs are compared as `explain --format json`
documents without the `source` fields (they name the file as given, or `<stdin>`).
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import zstandard

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import wrap_log

COMPRESSED = ROOT / "fixtures" / "compressed"
EXAMPLE = ROOT / "fixtures" / "example" / "tp8-mem-fraction.log"
LOGDOCTOR = str(Path(sys.executable).parent / "logdoctor")
HANG_GUARD_S = 60   # not a speed goal: a subprocess that never ends must fail the test, not hang it


def run(args: list[str], stdin: Path | None = None) -> subprocess.CompletedProcess[str]:
    with open(stdin, "rb") if stdin else open(Path("/dev/null"), "rb") as f:
        return subprocess.run([LOGDOCTOR, *args], check=False, stdin=f, capture_output=True, text=True, timeout=HANG_GUARD_S)


def without_source(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_source(v) for k, v in value.items() if k != "source"}
    if isinstance(value, list):
        return [without_source(v) for v in value]
    return value


def explain_json(path: Path, on_stdin: bool = False) -> tuple[int, dict[str, Any]]:
    p = run(["explain", "--format", "json", "-"], stdin=path) if on_stdin else run(["explain", "--format", "json", str(path)])
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode in (0, 1), (p.returncode, p.stderr)
    return p.returncode, without_source(json.loads(p.stdout))


@cache
def plain_explained(path: Path) -> tuple[int, str]:
    code, doc = explain_json(path)
    return code, json.dumps(doc, sort_keys=True)


def assert_one_line_error(p: subprocess.CompletedProcess[str], name: str, words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert name in lines[0] and words in lines[0], lines[0]


COMPRESSED_LOGS = ["tp8-mem-fraction.log.gz", "tp8-mem-fraction.log.zst", "tp8-mem-fraction.log.xz",
                   "tp8-mem-fraction.log.bz2", "zstd-named-plain.log"]


def test_the_fixtures_are_what_their_names_say() -> None:
    magic = {".gz": b"\x1f\x8b", ".zst": b"\x28\xb5\x2f\xfd", ".xz": b"\xfd7zXZ\x00", ".bz2": b"BZh"}
    for name in COMPRESSED_LOGS[:4]:
        assert (COMPRESSED / name).read_bytes().startswith(magic[Path(name).suffix]), name
    assert (COMPRESSED / "zstd-named-plain.log").read_bytes().startswith(magic[".zst"])
    assert zstandard.ZstdDecompressor().decompress((COMPRESSED / "tp8-mem-fraction.log.zst").read_bytes()) == \
        EXAMPLE.read_bytes()


@pytest.mark.parametrize("on_stdin", [False, True], ids=["path", "stdin"])
@pytest.mark.parametrize("name", COMPRESSED_LOGS)
def test_a_compressed_log_is_diagnosed_as_the_plain_log(name: str, on_stdin: bool) -> None:
    want_code, want = plain_explained(EXAMPLE)
    code, got = explain_json(COMPRESSED / name, on_stdin)
    assert (code, json.dumps(got, sort_keys=True)) == (want_code, want)
    assert code == 1 and got["primary"]["rule"] == "MEM003"   # the example's diagnosis, not INCOMPLETE


def _decodable_prefix(data: bytes) -> bytes:
    """What zstd itself can decode from a cut frame: every complete block."""
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


@pytest.mark.parametrize("on_stdin", [False, True], ids=["path", "stdin"])
def test_a_truncated_zst_yields_the_log_so_far(tmp_path: Path, on_stdin: bool) -> None:
    truncated = COMPRESSED / "tp8-mem-fraction-truncated.log.zst"
    prefix = _decodable_prefix(truncated.read_bytes())
    whole = EXAMPLE.read_bytes()
    assert 0 < len(prefix) < len(whole) and whole.startswith(prefix) and prefix.endswith(b"\n")
    plain_prefix = tmp_path / "prefix.log"
    plain_prefix.write_bytes(prefix)
    code, got = explain_json(truncated, on_stdin)
    assert (code, got) == explain_json(plain_prefix)
    assert got["run"]["counts"]["lines"] == prefix.count(b"\n") == 120


def test_a_zst_cut_before_its_first_block_ends_has_nothing_to_analyse() -> None:
    """Nothing is decodable: explain says so in one line and exits 2 (it is read as empty input)."""
    cut = COMPRESSED / "tp8-mem-fraction-truncated-first-block.log.zst"
    assert _decodable_prefix(cut.read_bytes()) == b""
    assert_one_line_error(run(["explain", str(cut)]), cut.name, "empty input")


@pytest.mark.parametrize("command", [["explain"], ["explain", "--format", "json"]])
def test_random_bytes_are_an_input_error(command: list[str]) -> None:
    noise = COMPRESSED / "random-bytes.log"
    assert_one_line_error(run([*command, str(noise)]), noise.name, "binary")


def test_random_bytes_are_an_input_error_in_batch_too() -> None:
    """batch reports an unreadable log as an error row (and exit 2), never as an `incomplete` row."""
    noise = COMPRESSED / "random-bytes.log"
    p = run(["batch", "--format", "json", str(noise)])
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    rows = json.loads(p.stdout)
    rows = rows.get("runs", rows) if isinstance(rows, dict) else rows
    assert len(rows) == 1 and "binary" in rows[0]["error"] and not rows[0]["verdict"], rows


def test_random_bytes_on_stdin_are_an_input_error() -> None:
    assert_one_line_error(run(["explain", "-"], stdin=COMPRESSED / "random-bytes.log"), "<stdin>", "binary")


def test_a_gzipped_cri_file_on_stdin_is_peeled_after_decompression(tmp_path: Path) -> None:
    """Compression and envelope together: `zcat`-free `cat 0.log.gz | logdoctor explain -`."""
    lines = wrap_log.split_log(EXAMPLE.read_bytes())
    wrapped = tmp_path / "0.log.gz"
    wrapped.write_bytes(gzip.compress(wrap_log.join_log(wrap_log.wrap_lines(lines, "cri")), mtime=0))
    code, got = explain_json(wrapped, on_stdin=True)
    want_code, want = plain_explained(EXAMPLE)
    assert code == want_code
    assert (got["verdict"], got["primary"]["rule"]) == ("failed", "MEM003")
    assert [e["text"] for e in got["primary"]["evidence"]] == \
        [e["text"] for e in json.loads(want)["primary"]["evidence"]]
