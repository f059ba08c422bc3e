from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logdoctor.read.ingest import (
    MAX_LINE_BYTES,
    TRUNCATION_MARK,
    InputError,
    clean_lines,
    read_lines,
)


def lines_of(data: bytes) -> list[tuple[int, str]]:
    return [(ln.number, ln.text) for ln in clean_lines(io.BytesIO(data))]


def test_crlf_ansi_nul_and_invalid_utf8() -> None:
    data = b"\x1b[32m[2025-01-01 10:00:00 TP0] Load weight begin.\x1b[0m\r\nbad \xff\xfe byte\x00s\r\n"
    assert lines_of(data) == [(1, "[2025-01-01 10:00:00 TP0] Load weight begin."), (2, "bad \ufffd\ufffd bytes")]


def test_progress_redraws_keep_final_state() -> None:
    data = b"Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\rLoading safetensors checkpoint shards: 100% Completed | 4/4 [00:10<00:00,  2.50s/it]\nnext\n"
    got = lines_of(data)
    assert got[0] == (1, "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:10<00:00,  2.50s/it]")
    assert got[1] == (2, "next")


def test_docker_compose_prefix_is_removed() -> None:
    data = b"".join(f"sglang-1  | [2025-01-01 10:00:0{i} TP0] line {i}\n".encode() for i in range(5))
    assert [t for _, t in lines_of(data)][0] == "[2025-01-01 10:00:00 TP0] line 0"


def test_quoted_paste_is_unquoted() -> None:
    data = b"> [2025-01-01 10:00:00 TP0] a\n> Traceback (most recent call last):\n>   File \"x.py\", line 1, in f\n> ValueError: boom\n"
    texts = [t for _, t in lines_of(data)]
    assert texts == ["[2025-01-01 10:00:00 TP0] a", "Traceback (most recent call last):",
                     '  File "x.py", line 1, in f', "ValueError: boom"]


def test_hard_wrapped_lines_are_joined_and_keep_first_line_number() -> None:
    width = 80
    long = "[2025-01-01 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.98 GB, mem usage=7.63 GB."
    wrapped = [long[i:i + width] for i in range(0, len(long), width)]
    body = []
    for _ in range(4):
        body += wrapped
    body.append("[2025-01-01 10:00:01 TP0] short line")
    got = lines_of(("\n".join(body) + "\n").encode())
    assert got[0] == (1, long)
    assert got[1] == (3, long)
    assert got[-1][1] == "[2025-01-01 10:00:01 TP0] short line"


def test_overlong_line_is_cut_and_marked() -> None:
    data = b"x" * (MAX_LINE_BYTES * 2 + 10) + b"\nafter\n"
    got = list(clean_lines(io.BytesIO(data)))
    assert got[0].truncated and got[0].text.endswith(TRUNCATION_MARK)
    assert len(got[0].text) <= MAX_LINE_BYTES + len(TRUNCATION_MARK)
    assert (got[1].number, got[1].text) == (2, "after")


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    p = tmp_path / "server.log.gz"
    p.write_bytes(gzip.compress(b"one\ntwo\n"))
    assert [ln.text for ln in read_lines(p)] == ["one", "two"]


def test_unreadable_inputs_raise_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        list(read_lines(tmp_path / "missing.log"))
    with pytest.raises(InputError, match="is a directory"):
        list(read_lines(tmp_path))
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(InputError, match="read failed"):
        list(read_lines(bad))


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from([b"plain line", b"", b"a\rb", b"\x1b[31mred\x1b[0m", b"nul\x00x", b"\xff\xfe bad",
                                 "é✓ ünïcode".encode(), b"x" * 300, b"\xe2\x82", b"  indented"]), max_size=60),
       st.booleans(), st.sampled_from([16, 64, 1024, 8192]), st.integers(1, 40), st.sampled_from([50, 400, 10_000]))
def test_a_regular_files_sample_read_a_buffer_at_a_time_is_the_line_by_line_sample(
        lines: list[bytes], newline_at_end: bool, buffering: int, max_lines: int, max_bytes: int) -> None:
    """_take_sample reads a regular file's complete buffered lines together: the same lines, kept bytes and
    `more` as reading it line by line, and the stream left at the same place (small buffers split lines)."""
    import tempfile

    from logdoctor.read import ingest
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    with tempfile.NamedTemporaryFile() as tmp, pytest.MonkeyPatch.context() as mp:
        tmp.write(data)
        tmp.flush()
        mp.setattr(ingest, "WRAP_SAMPLE_LINES", max_lines)
        mp.setattr(ingest, "WRAP_SAMPLE_BYTES", max_bytes)
        with open(tmp.name, "rb", buffering=buffering) as a, open(tmp.name, "rb") as b:
            assert ingest._peekable(a) and ingest._peekable(b)
            by_buffer = ingest._take_sample(ingest._raw_lines(a), a)
            by_line = ingest._take_sample(ingest._raw_lines(b))  # no stream: one line at a time
            assert [(ln.number, ln.text, ln.truncated) for ln in by_buffer[0]] == \
                [(ln.number, ln.text, ln.truncated) for ln in by_line[0]]
            assert by_buffer[1:] == by_line[1:]
            assert a.read() == b.read()
