"""The envelope stage (envelope.py, envelope_stream.py, ingest.clean_lines): each collector's layer peeled
into Line.attrs, stacks, partial records, newest-first exports, the override, and no false detection."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from logdoctor.diagnosis.ranking import diagnose_source
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.read.envelope import LAYER_NAMES, detect
from logdoctor.read.ingest import (
    MAX_LINE_BYTES,
    TRUNCATION_MARK,
    clean_lines,
    lines_from_text,
    node_of,
    read_lines,
)

ROOT = Path(__file__).resolve().parent.parent
ENV = ROOT / "fixtures" / "envelopes"
LOGS = ROOT / "fixtures" / "logs"
PLAIN = (ENV / "compose.log").read_text().splitlines()
PLAIN = [t.split("| ", 1)[1] for t in PLAIN]   # the launch every envelope fixture wraps
OOM = PLAIN[-1]
POD = "sglang-7d9f8c6b5-x2k4q"
HANG_GUARD = 60


def lines(name: str, envelope: str | None = None) -> list:
    return list(read_lines(ENV / name, envelope=envelope))


def texts(name: str, envelope: str | None = None) -> list[str]:
    return [ln.text for ln in lines(name, envelope)]


# ------------------------------------------------------------------------------------------------
# each layer: the text comes out as SGLang wrote it, and attrs say what the collector said

@pytest.mark.parametrize("name, layers", [
    ("kubectl-timestamps.log", "rfc3339"),
    ("kubectl-prefix-timestamps.log", "kubectl-prefix+rfc3339"),
    ("stern.log", "stern"),
    ("cri-compose.log", "cri+compose"),
    ("json-rfc3339.log", "json+rfc3339"),
    ("vector.jsonl", "json"),
    ("fluentbit.jsonl", "json"),
    ("logcli.jsonl", "json"),
    ("compose.log", "compose"),
    ("journald-short.log", "journald"),
    ("journald-short-iso.log", "journald"),
    ("journald-short-precise.log", "journald"),
    ("syslog-3164.log", "syslog"),
    ("syslog-5424.log", "syslog"),
    ("srun-label.log", "srun"),
])
def test_each_envelope_is_peeled_to_the_plain_text(name: str, layers: str) -> None:
    got = lines(name)
    assert [ln.text for ln in got] == PLAIN
    assert [ln.number for ln in got] == list(range(1, len(PLAIN) + 1))
    assert {(ln.attrs or {}).get("envelope") for ln in got} == {layers}


def test_attrs_of_kubectl_and_cri_lines() -> None:
    first = lines("kubectl-prefix-timestamps.log")[0]
    assert first.attrs == {"pod": POD, "container": "sglang", "time": "2025-04-05T00:01:19.209123456Z",
                           "envelope": "kubectl-prefix+rfc3339"}
    assert node_of(first.attrs) == POD
    cri = lines("cri-compose.log")[0]
    assert cri.attrs == {"time": "2025-04-05T00:01:19.209123456Z", "stream": "stdout", "container": "sglang-1",
                         "envelope": "cri+compose"}


def test_attrs_of_json_collectors() -> None:
    vector = lines("vector.jsonl")[0].attrs
    assert vector == {"pod": POD, "container": "sglang", "namespace": "default", "k8s_node": "gpu-node-1",
                      "ip": "10.42.3.17", "stream": "stderr", "time": "2025-04-05T00:01:19.209123456Z",
                      "envelope": "json"}
    fluent = lines("fluentbit.jsonl")[0].attrs
    assert (fluent["pod"], fluent["namespace"], fluent["k8s_node"], fluent["container"]) == (
        POD, "default", "gpu-node-1", "sglang")
    loki = lines("logcli.jsonl")[0].attrs
    assert (loki["pod"], loki["k8s_node"], loki["stream"], loki["time"]) == (
        POD, "gpu-node-1", "stderr", "2025-04-05T00:01:19.209123456+00:00")


def test_attrs_of_journald_and_syslog() -> None:
    j = lines("journald-short-precise.log")[1].attrs
    assert j == {"time": "Apr 05 00:01:20.001111", "host": "gpu-node-1", "unit": "python3", "pid": "4242",
                 "envelope": "journald"}
    s = lines("syslog-5424.log")[0].attrs
    assert s == {"time": "2025-04-05T00:01:19.000000+00:00", "host": "gpu-node-1", "unit": "sglang", "pid": "4242",
                 "envelope": "syslog"}


def test_ray_driver_log_mixes_actor_and_plain_lines() -> None:
    got = lines("ray-driver.log")
    assert got[0].attrs is None and got[0].text.startswith("2025-04-05 00:01:10,123\tINFO worker.py")
    assert got[1].attrs == {"actor": "SGLangEngine", "pid": "4100", "envelope": "ray"}
    assert got[1].text == PLAIN[0]
    assert got[3].attrs == {"actor": "SGLangEngine", "pid": "4101", "ip": "10.0.0.2", "envelope": "ray"}
    assert node_of(got[3].attrs) == "10.0.0.2"
    assert got[4].attrs["actor"] == "raylet"
    assert got[4].text.startswith("[2025-04-05 00:01:30,000 I 77 77] (raylet) node_manager.cc")
    # Ray's dedup suffix and its one-time explanation are Ray's words, not the actor's
    assert got[10].text == "warnings.warn(" and got[10].attrs["actor"] == "WorkerDict"
    assert got[11].attrs is None and got[11].text == "Traceback (most recent call last):"


def test_an_envelope_keeps_the_diagnosis() -> None:
    rules = load_ruleset()
    plain = diagnose_source(str(ENV / "compose.log"), rules)
    assert plain.verdict == "failed" and plain.primary is not None
    for name in ("kubectl-prefix-timestamps.log", "cri.log", "docker-json.log", "vector.jsonl", "ray-driver.log",
                 "gcp-newest-first.log", "journald-short.log", "stern.log"):
        got = diagnose_source(str(ENV / name), rules)
        assert (got.verdict, got.primary.rule.id if got.primary else None) == (plain.verdict, plain.primary.rule.id), name


# ------------------------------------------------------------------------------------------------
# partial records


def test_cri_partial_records_are_joined_per_stream_and_keep_the_first_number() -> None:
    got = lines("cri.log")
    assert [ln.text for ln in got][:7] == PLAIN[:7]
    joined = got[7]
    assert (joined.number, joined.text, joined.attrs["stream"]) == (8, OOM, "stderr")
    assert joined.attrs["time"] == "2025-04-05T00:01:41.000000304Z"
    health = got[8]  # the stdout record that came between the P and the F follows the joined line
    assert (health.number, health.attrs["stream"]) == (9, "stdout") and "GET /health" in health.text
    assert [ln.number for ln in got] == sorted(ln.number for ln in got)


def test_docker_partial_records_are_joined_and_go_escapes_undone() -> None:
    got = lines("docker-json.log")
    assert [ln.text for ln in got] == PLAIN
    assert got[-1].number == 8


def test_a_partial_that_never_ends_is_bounded() -> None:
    record = "2025-04-05T00:01:41.000000304Z stderr P " + "x" * 16384 + "\n"
    data = (record * (2 * MAX_LINE_BYTES // 16384 + 4)).encode() + b"2025-04-05T00:01:42.0Z stderr F end\n"
    got = list(clean_lines(io.BytesIO(data)))
    assert len(got) == 1 and got[0].truncated and got[0].text.endswith(TRUNCATION_MARK)
    assert len(got[0].text) == MAX_LINE_BYTES + len(TRUNCATION_MARK)


def test_a_cri_record_cut_inside_a_progress_redraw_is_joined_before_the_redraws_collapse() -> None:
    # a bar whose redraws collapse (the capture bar keeps its frames: the next test)
    bar = "\r".join(f"Loading safetensors checkpoint shards (bs={b}): {p:3d}%|#| {i}/4 [00:0{i}<00:00,  4.88it/s]"
                    for i, (b, p) in enumerate([(8, 0), (4, 25), (2, 50), (1, 100)]))
    cut = bar.index("(bs=2") + 2
    data = (f"2025-04-05T00:01:19.1Z stderr P {bar[:cut]}\n2025-04-05T00:01:19.2Z stderr F {bar[cut:]}\n"
            "2025-04-05T00:01:19.3Z stderr F next\n")
    got = [(ln.number, ln.text) for ln in clean_lines(io.BytesIO(data.encode()))]
    assert got == [(1, bar.rsplit("\r", 1)[1]), (3, "next")]


def test_a_cuda_graph_capture_bar_keeps_every_frame_whole_across_a_cri_cut() -> None:
    # each capture frame names a batch size and the free memory after it: graph memory is fitted from them
    bar = "\r".join(f"Capturing batches (bs={b} avail_mem={m:.2f} GB): {p:3d}%|#| {i}/4 [00:0{i}<00:00,  4.88it/s]"
                    for i, (b, m, p) in enumerate([(8, 9.7, 0), (4, 9.5, 25), (2, 9.4, 50), (1, 9.3, 100)]))
    cut = bar.index("(bs=2") + 2
    data = (f"2025-04-05T00:01:19.1Z stderr P {bar[:cut]}\n2025-04-05T00:01:19.2Z stderr F {bar[cut:]}\n"
            "2025-04-05T00:01:19.3Z stderr F next\n")
    got = [(ln.number, ln.text) for ln in clean_lines(io.BytesIO(data.encode()))]
    assert got == [(1, frame) for frame in bar.split("\r")] + [(3, "next")]


# ------------------------------------------------------------------------------------------------
# newest-first exports


def test_a_newest_first_export_is_read_oldest_first_with_origins() -> None:
    got = lines("gcp-newest-first.log")
    n = len(PLAIN)
    assert [ln.text for ln in got] == PLAIN
    assert [ln.number for ln in got] == list(range(1, n + 1))
    assert [ln.origin for ln in got] == list(range(n, 0, -1))
    assert got[-1].attrs == {"severity": "ERROR", "time": "2025-04-05T00:01:41.000000304Z", "envelope": "severity"}
    rep = diagnose_source(str(ENV / "gcp-newest-first.log"), load_ruleset())
    assert rep.verdict == "failed"


def test_newest_first_works_on_stdin_and_spills_to_disk() -> None:
    # 40 MB of lines, past the spool's 32 MiB in memory, so the reversed read comes from a file; made
    # and read in child processes (a pipe between them) so that this process stays small
    n = 400_000
    make = (f"import sys\nn = {n}\nw = sys.stdout.write\n"
            "for i in range(n):\n"
            "    k = n - i\n"
            "    w(f'INFO 2025-04-05T{k // 3600 % 24:02d}:{k // 60 % 60:02d}:{k % 60:02d}.{k:09d}Z line {k:08d} '"
            " + 'x' * (8 + i % 50) + '\\n')\n")
    read = ("from logdoctor.read.ingest import read_lines\n"
            "first = last = None\n"
            "count = 0\n"
            "for ln in read_lines('-'):\n"
            "    count += 1\n"
            "    first = first or (ln.number, ln.origin, ln.text[:13])\n"
            "    last = (ln.number, ln.origin, ln.text[:13])\n"
            "print(count, first, last)\n")
    maker = subprocess.Popen([sys.executable, "-c", make], stdout=subprocess.PIPE)
    try:
        p = subprocess.run([sys.executable, "-c", read], stdin=maker.stdout, capture_output=True, timeout=HANG_GUARD,
                           cwd=ROOT, check=False)
    finally:
        maker.stdout.close()
        maker.wait(timeout=HANG_GUARD)
    assert p.returncode == 0, p.stderr.decode()[-500:]
    out = p.stdout.decode()
    assert out.split()[0] == str(n)
    assert f"(1, {n}, 'line 00000001')" in out
    assert f"({n}, 1, 'line 00400000')" in out


def test_a_log_with_times_going_forward_is_not_reversed() -> None:
    got = lines("kubectl-timestamps.log")
    assert all(ln.origin is None for ln in got)


# ------------------------------------------------------------------------------------------------
# the override, and detection that does not fire


def test_override_none_peels_nothing_and_a_name_peels_only_that_layer() -> None:
    raw = (ENV / "kubectl-prefix-timestamps.log").read_text().splitlines()
    assert texts("kubectl-prefix-timestamps.log", "none") == raw
    only = lines("kubectl-prefix-timestamps.log", "kubectl-prefix")
    assert only[0].text.startswith("2025-04-05T00:01:19.209123456Z [2025-04-05 00:01:19]")
    assert only[0].attrs["envelope"] == "kubectl-prefix"
    # a layer the sample would not detect on its own (one-line stern) is peeled when named
    [ln] = list(lines_from_text("sglang-0 sglang [2025-04-05 00:01:19 TP0] x\n", envelope="stern"))
    assert (ln.text, ln.attrs["pod"]) == ("[2025-04-05 00:01:19 TP0] x", "sglang-0")


def test_unknown_override_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown envelope 'k8s'"):
        list(read_lines(ENV / "compose.log", envelope="k8s"))
    assert "cri" in LAYER_NAMES and "json" in LAYER_NAMES and "none" not in LAYER_NAMES


PLAIN_FIXTURES = sorted(LOGS.iterdir()) + sorted((ROOT / "fixtures" / "example").iterdir()) + sorted(
    (ROOT / "fixtures" / "rules").rglob("*.log"))


@pytest.mark.parametrize("log", PLAIN_FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_nothing_is_detected_on_the_plain_fixture_logs(log: Path) -> None:
    sample = [ln.text for ln in list(read_lines(log, envelope="none"))[:2000]]
    env = detect(sample)
    assert env.detected == () and not env.newest_first
    assert all(ln.attrs is None for ln in read_lines(log))


def test_lookalikes_are_not_peeled() -> None:
    plain = ["Loading safetensors checkpoint shards: 100% Completed | 4/4", "INFO:     Started server process [1]",
             "Jan 01 is not a journald line", "(this is a remark) in parentheses", "12 of 13 ranks ready",
             "{not json}", "> a quote on one line only", "warnings.warn(", "[pod/oops] not kubectl",
             "ERROR something without a time"]
    got = [ln.text for ln in lines_from_text("\n".join(plain) + "\n")]
    assert got == plain


def test_stern_needs_repeated_pod_like_pairs() -> None:
    lowercase = ["warning this is a sentence"] + [f"word{i} another{i} text" for i in range(20)]
    assert detect(lowercase).detected == ()
    stern = [f"sglang-0 sglang line {i}" for i in range(20)]
    assert detect(stern).detected == ("stern",)


def test_stacked_prefixes_are_bounded() -> None:
    line = "(A pid=1) " * 5000 + "x"
    [ln] = list(lines_from_text(line + "\n"))
    assert ln.attrs["envelope"] == "+".join(["ray"] * 6)
    assert ln.text == "(A pid=1) " * 4994 + "x"


def test_wrap_width_is_measured_after_peeling() -> None:
    width = 80
    long = "[2025-01-01 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.98 GB, x."
    pieces = [long[i:i + width] for i in range(0, len(long), width)]
    body = []
    for i in range(4):
        body += [f"2025-01-01T10:00:0{i}.000000000Z {pieces[0]}"] + pieces[1:]
    got = [ln.text for ln in lines_from_text("\n".join(body) + "\n")]
    assert got == [long] * 4


# ------------------------------------------------------------------------------------------------
# hostile lines (the regex audit of every envelope module is in tests/test_linear_time.py)


def test_hostile_envelope_lines_end_in_bounded_time() -> None:
    script = (
        "import io\n"
        "from logdoctor.read.ingest import clean_lines\n"
        "lines = ['{' * 200000, '{\"log\":\"' + '\\\\\\\\' * 200000 + '\"}', '2025-04-05T00:01:19Z stderr P ' + 'a ' * 100000,\n"
        "         '(' + 'pid=1 ' * 40000, 'Apr 05 00:01:19 ' + 'h' * 100000, '<1>1 ' + '- ' * 100000,\n"
        "         'sglang-0 sglang ' * 20000, 'x  ' * 100000 + '| ']\n"
        "data = ('\\n'.join(lines * 3) + '\\n').encode()\n"
        "print(sum(1 for _ in clean_lines(io.BytesIO(data))))\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_GUARD, cwd=ROOT,
                       check=False)
    assert p.returncode == 0, p.stderr[-500:]
    assert int(p.stdout.split()[0]) >= 8


# ------------------------------------------------------------------------------------------------
# the bulk path (item 4): enveloped serving logs keep it, partial records never reach the sink

DECODE = ("[2025-04-05 00:02:{s:02d}] Decode batch, #running-req: {r}, #token: 1000, token usage: 0.{u:02d}, "
          "cuda graph: True, gen throughput (token/s): {t}.5, #queue-req: {q}, ")


def _serving(n: int) -> list[str]:
    return [DECODE.format(s=i % 60, r=i % 7 + 1, u=i % 90, t=100 + i % 50, q=i % 5) for i in range(n)]


@pytest.mark.parametrize("wrap", [
    lambda i, t: f"sglang-1  | {t}",
    lambda i, t: f"2025-04-05T00:02:{i % 60:02d}.{i:09d}Z stderr F {t}",
    lambda i, t: '{"log":"' + t.replace('"', '\\"') + '\\n","stream":"stderr","time":"2025-04-05T00:02:00Z"}',
    lambda i, t: f"2025-04-05T00:02:{i % 60:02d}.{i:09d}Z {t}",
], ids=["compose", "cri", "json", "rfc3339"])
def test_enveloped_serving_lines_go_to_the_sink(wrap) -> None:
    from logdoctor.run.fold import RunBuilder
    n = 20_000
    launch = [f"[2025-04-05 00:01:00] launch line {i} " + "x" * (i % 40) for i in range(3000)]
    body = [wrap(i, t) for i, t in enumerate(launch + _serving(n))]
    b = RunBuilder("x")
    seen = list(clean_lines(io.BytesIO(("\n".join(body) + "\n").encode()), b.add_batch_lines))
    assert len(seen) < 3000 + WRAP_SAMPLE_SLACK  # the sample, and nothing after it one by one
    stats = b.batch_stats
    assert stats.n_decode == n - (len(seen) - 3000)
    assert stats.peak_queue == 4 and stats.peak_running == 7
    assert stats.decode_tput.count == stats.n_decode


WRAP_SAMPLE_SLACK = 10


def test_cri_partial_records_never_reach_the_sink() -> None:
    blobs: list[bytes] = []
    decode = _serving(1)[0]
    lines_ = [f"2025-04-05T00:01:00.1Z stderr F warmup {i}" for i in range(2500)]
    for i in range(10_000):
        if i % 500 == 7:  # a decode line cut in two records by the runtime
            lines_ += [f"2025-04-05T00:02:00.1Z stderr P {decode[:30]}", f"2025-04-05T00:02:00.2Z stderr F {decode[30:]}"]
        else:
            lines_.append(f"2025-04-05T00:02:00.1Z stderr F {decode}")
    got = list(clean_lines(io.BytesIO(("\n".join(lines_) + "\n").encode()), lambda blob, last: blobs.append(blob)))
    assert all(b" stderr P " not in blob for blob in blobs)
    joined = [ln for ln in got if ln.text == decode]
    assert len(joined) == 20  # each P + F pair came through the per-line path, joined
    assert all(ln.attrs["envelope"] == "cri" for ln in joined)


def test_a_pasted_ray_prefix_that_lost_its_escape_is_peeled() -> None:
    text = "[2m[36m(SGLangEngine pid=4104)[0m [2026-03-03 09:41:37 TP4] Init torch distributed begin.\n"
    [ln] = list(lines_from_text(text))
    assert ln.text == "[2026-03-03 09:41:37 TP4] Init torch distributed begin."
    assert ln.attrs == {"actor": "SGLangEngine", "pid": "4104", "envelope": "ray"}


def test_newest_first_with_times_that_tie() -> None:
    # one burst at millisecond resolution: the times never go forward and once go back
    rows = ["ERROR 2025-04-05T00:01:19.210Z c", "ERROR 2025-04-05T00:01:19.210Z b", "ERROR 2025-04-05T00:01:19.209Z a"]
    got = [(ln.number, ln.origin, ln.text) for ln in lines_from_text("\n".join(rows) + "\n")]
    assert got == [(1, 3, "a"), (2, 2, "b"), (3, 1, "c")]


def test_a_newest_first_stream_is_reversed_only_up_to_its_bound(monkeypatch) -> None:
    """An endless newest-first stream must neither fill the disk nor hang: its newest part is read."""
    import itertools

    from logdoctor.read import envelope_stream
    monkeypatch.setattr(envelope_stream, "REVERSE_MAX_LINES", 1000)
    endless = ((f"ERROR 2025-04-05T00:01:{i % 60:02d}.000Z line {i}".encode(), False) for i in itertools.count())
    got = list(envelope_stream.reversed_raws(endless))
    assert len(got) == 1000
    assert got[0][0] == 1000 and got[-1] == (1, b"ERROR 2025-04-05T00:01:00.000Z line 0", False)


@pytest.mark.parametrize("stamp", ["1712275279.209123", "Fri 2025-04-05 00:01:19 UTC", "Fri 2025-04-05 00:01:19.209123 +0200"])
def test_journalctl_short_unix_and_short_full_are_peeled(stamp: str) -> None:
    body = "[2025-04-05 00:01:19 TP0] Load weight begin. avail mem=78.50 GB"
    text = "".join(f"{stamp} gpu-node-3 python3[1234]: {body}\n" for _ in range(3))
    got = list(lines_from_text(text))
    assert [ln.text for ln in got] == [body] * 3
    assert got[0].attrs is not None
    assert got[0].attrs["host"] == "gpu-node-3" and got[0].attrs["unit"] == "python3" and got[0].attrs["pid"] == "1234"
    assert got[0].attrs["time"] == stamp
