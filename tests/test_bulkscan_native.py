"""The compiled bulk scanner (logdoctor/read/_bulkscan.c) gives exactly what the Python path gives.

The C file is compiled here, into a temporary directory, by the same function the wheel's build hook uses
(hatch_build.compile_accelerator): a machine that runs the tests has a C compiler, and a compile that fails
is a failure of this test, never a skip. Results are compared bit for bit (doubles by their bytes) on
generated and hostile inputs; then the Python API is checked to pick the accelerator when it imports and
the Python path when it does not, with the same Run either way.
"""
from __future__ import annotations

import importlib.util
import math
import random
import struct
import sys
from array import array
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logdoctor.read import bulkscan
from logdoctor.run import batches
from logdoctor.run.batches import BatchStats, Quantiles

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_envelope import WRAPPERS, wrap_file  # noqa: E402
from bench_parse import steady_pool, write_serving_log  # noqa: E402
from hatch_build import compile_accelerator  # noqa: E402

NEEDLES = (b"\n", b"\x1b", b"\r", b"\x00", b"Decode batch", b"Prefill batch", b'HTTP/1.1" 200', b'HTTP/1.1\\" 200',
           b" stdout P ", b" stderr P ", b'"logtag":"', b'"_p":"', b'"log":"', b'\\n","', b"aa", b"aba")


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    built = compile_accelerator(tmp_path_factory.mktemp("accel"))
    spec = importlib.util.spec_from_file_location("_bulkscan", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bits(x: float | None) -> bytes | None:
    return None if x is None else struct.pack("<d", x)


def _python(blob: bytes, needles: tuple[bytes, ...]) -> tuple[Any, ...]:
    f = bulkscan.python_figures(blob)
    return (tuple(blob.count(n) for n in needles), array("d", map(float, f.tput_strings or ())).tobytes(),
            _bits(f.peak_usage), f.peak_queue, f.peak_running)


def _compiled(native: ModuleType, blob: bytes, needles: tuple[bytes, ...]) -> tuple[Any, ...]:
    counts, packed, usage, queue, running = native.scan(blob, needles)
    assert usage is None or type(usage) is float
    assert all(type(x) is int for x in (queue, running) if x is not None)
    return counts, packed, _bits(usage), queue, running


def assert_same(native: ModuleType, blob: bytes, needles: tuple[bytes, ...] = NEEDLES) -> None:
    assert _compiled(native, blob, needles) == _python(blob, needles), blob[:300]


HOSTILE = [
    b"",
    b"\n",
    b"\n\n\n",
    b"no figures at all",
    b"Decode batch, #running-req: 3, #token: 10, token usage: 0.05, gen throughput (token/s): 12.34, #queue-req: 0, ",
    b"gen throughput (token/s): " + b"9" * 400,
    b"token usage: " + b"9" * 400 + b".5",
    b"#queue-req: " + b"9" * 400,
    b"#running-req: " + b"1" * 15 + b"\n#running-req: " + b"1" * 16,
    b"gen throughput (token/s): 1.2345678901234",        # 13 decimals: no match
    b"gen throughput (token/s): 1.234567890123",         # 12 decimals
    b"gen throughput (token/s): 123456789012345.123456789012",
    b"gen throughput (token/s): 999999999999999.999999999999",
    b"gen throughput (token/s): 9007199254740993",       # 16 digits: no match
    b"gen throughput (token/s): 900719925474099.3",      # past 2**53 as a mantissa
    b"gen throughput (token/s): 12.",
    b"gen throughput (token/s): 12.x",
    b"gen throughput (token/s): 12.\ngen throughput (token/s): 7",
    b"gen throughput (token/s): .5",
    b"gen throughput (token/s): nan, token usage: inf, #queue-req: -1, #running-req: 1e5",
    b"gen throughput (token\\/s): 45.6",
    b"gen throughput (token\\\\/s): 45.6",
    b"gen throughput (token//s): 45.6",
    b"gen throughput (token/s):  45.6",
    b"full token usage: 0.97, mytoken usage: 0.99token usage: 0.5",
    b"x#queue-req: 12#queue-req: 13",
    b"#queue-req: 007, #running-req: 0000",
    b"token usage: 0.10, token usage: 0.1, token usage: 0.100000000000",
    b"token usage: 00000000000001.5",
    b"gen throughput (token/s): 0.00, gen throughput (token/s): 0",
    b"gen throughput (token/s): 5e-324",
    b"aaaa aba abababa aaaaa",
    b'{"log":"log":"log":"x\\n","stream":"stderr"}',
    b"Decode batchDecode batch Prefill batchPrefill batch",
    b"\x1b[31mDecode batch\x1b[0m\r\n\x00",
    "gen throughput (token/s): ١٢٣ token usage: ０.５".encode(),
    b"gen throughput (token/s): 1" + b"\xff" * 10 + b"token usage: 0.5\xff",
    b"token usage: 1.000000000000\n" * 3,
    b"gen throughput (token/s)" + b": 1.5" * 50,
]


@pytest.mark.parametrize("blob", HOSTILE)
def test_hostile_blobs(native: ModuleType, blob: bytes) -> None:
    assert_same(native, blob)


def test_a_serving_blob(native: ModuleType) -> None:
    pool = steady_pool(random.Random(3), 64)
    blob = "".join(c[0] for c in pool).format(*["2025-12-02 10:00:0%d" % i for i in range(8)]).encode()
    assert_same(native, blob)
    assert_same(native, blob.replace(b"token/s", b"token\\/s"))
    assert_same(native, blob, ())


_KEYS = [b"gen throughput (token/s): ", b"gen throughput (token\\/s): ", b"token usage: ", b"#queue-req: ",
         b"#running-req: ", b"full token usage: ", b"gen throughput (token/s):", b"Decode batch", b"Prefill batch",
         b'HTTP/1.1" 200', b'HTTP/1.1\\" 200', b'"log":"', b'\\n","', b" stdout P ", b"a", b"ab", b"\n", b"\r"]
_numbers = st.builds(
    lambda i, dot, f, tail: i + (b"." if dot else b"") + f + tail,
    st.text("0123456789", max_size=20).map(str.encode),
    st.booleans(),
    st.text("0123456789", max_size=16).map(str.encode),
    st.sampled_from([b"", b", ", b"\n", b".", b".5", b"x", b"e5", b"9", b" "]),
)
_pieces = st.one_of(st.sampled_from(_KEYS), _numbers, st.binary(max_size=12),
                    st.text(alphabet="ab .,:#()/\\\"\n", max_size=12).map(str.encode))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_pieces, max_size=40))
def test_generated_blobs(native: ModuleType, parts: list[bytes]) -> None:
    assert_same(native, b"".join(parts))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=6).filter(lambda n: n != b""), max_size=10, unique=True),
       st.lists(st.sampled_from([b"a", b"b", b"ab", b"aab", b"\n", b"\x00"]) | st.binary(max_size=4), max_size=60))
def test_any_needles_count_as_bytes_count(native: ModuleType, needles: list[bytes], parts: list[bytes]) -> None:
    blob = b"".join(parts)
    assert native.scan(blob, tuple(needles))[0] == tuple(blob.count(n) for n in needles)


def test_bad_needles_raise_not_crash(native: ModuleType) -> None:
    with pytest.raises(ValueError):
        native.scan(b"abc", (b"",))
    with pytest.raises(ValueError):
        native.scan(b"abc", tuple(bytes([i]) for i in range(60)))
    with pytest.raises(TypeError):
        native.scan(b"abc", [b"a"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 5e-324, 1e308, 1.01,
                                                                                   1.0, 0.99, 1e-12, 1e15]),
                max_size=50))
def test_binning_is_math_log(native: ModuleType, values: list[float]) -> None:
    q = Quantiles()
    want: dict[int, int] = {}
    for v in values:
        k = q._key(v)
        want[k] = want.get(k, 0) + 1
    got: dict[int, int] = {}
    native.bin_values(array("d", values).tobytes(), Quantiles.LOG_RATIO, got)
    assert got == want
    assert Quantiles.LOG_RATIO == math.log(Quantiles.RATIO)


# ------------------------------------------------------------------------------------------------
# the API: the accelerator when it imports, the Python path when not, the same figures either way


def _stats(blobs: list[bytes]) -> dict[str, Any]:
    s = BatchStats()
    lines = sum(s.add_batch_lines(b) for b in blobs)
    return {**s.to_dict(), "lines": lines}


def _serving_blobs(n_chunks: int) -> list[bytes]:
    pool = steady_pool(random.Random(5), n_chunks)
    return ["".join(c[0] for c in pool[i:i + 8]).format(*["10:00:0%d" % k for k in range(8)]).encode()
            for i in range(0, n_chunks, 8)]


@pytest.mark.parametrize("limit", [50, 1000, 10**9])
def test_batch_stats_are_the_same_with_and_without_the_accelerator(native: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                                  limit: int) -> None:
    monkeypatch.setattr(batches, "EXACT_LIMIT", limit)  # past it: the histogram, reached from either path
    blobs = _serving_blobs(256) + HOSTILE
    monkeypatch.setattr(bulkscan, "native", None)
    slow = _stats(blobs)
    monkeypatch.setattr(bulkscan, "native", native)
    fast = _stats(blobs)
    assert fast == slow
    assert slow["decode_count"] > 1000 and slow["gen_throughput_median"] is not None


def test_the_accelerator_is_picked_when_present(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = b"Decode batch, token usage: 0.5, gen throughput (token/s): 10.5, #queue-req: 2, "
    monkeypatch.setattr(bulkscan, "native", native)
    f = bulkscan.scan(blob).figures()
    assert f.tput_packed is not None and f.tput_strings is None
    assert list(f.tput_values()) == [10.5]
    monkeypatch.setattr(bulkscan, "native", None)
    f = bulkscan.scan(blob).figures()
    assert f.tput_packed is None and f.tput_strings == [b"10.5"]
    assert list(f.tput_values()) == [10.5]


def test_the_sink_reuses_the_scan_of_the_block_ingest_just_scanned(native: ModuleType,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulkscan, "native", native)
    blob = b"Decode batch, gen throughput (token/s): 1.5\nPrefill batch, token usage: 0.25"
    first = bulkscan.scan(blob, (b"\n", b"Decode batch", b"Prefill batch", b"\x1b"))
    assert bulkscan.scanned(blob) is first
    assert bulkscan.scanned(bytes(blob)) is not first or bytes(blob) is blob
    bulkscan.forget()
    assert bulkscan.scanned(blob) is not first


def test_the_installed_package_says_which_path_it_runs() -> None:
    # either is a valid install (no compiler: pure Python); whichever it is must import cleanly
    assert bulkscan.native is None or hasattr(bulkscan.native, "scan")


def _serving_log(path: Path, wrap: Any = None) -> None:
    write_serving_log(path, 6)
    if wrap is not None:
        plain = path.with_suffix(".plain")
        path.rename(plain)
        wrap_file(plain, path, wrap)


@pytest.mark.parametrize("shape", ["plain", "compose", "cri", "json", "rfc3339"])
def test_a_run_is_the_same_with_and_without_the_accelerator(native: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, shape: str) -> None:
    from logdoctor.run.fold import summarize_source
    log = tmp_path / "serving.log"
    _serving_log(log, None if shape == "plain" else WRAPPERS[shape])
    monkeypatch.setattr(bulkscan, "native", None)
    slow = summarize_source(str(log)).to_dict()
    monkeypatch.setattr(bulkscan, "native", native)
    fast = summarize_source(str(log)).to_dict()
    assert fast == slow
    assert slow["batches"]["count"] > 20_000
