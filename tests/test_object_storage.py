"""Logs in object storage: URLs through fsspec against a real S3 API on the loopback (moto's server mode).

The same logs are put in a bucket and copied to a local directory; every command must say the same about
both, apart from the name of the log. Broken storage (a missing bucket, a denied key, a missing object,
an unknown scheme, a backend that is not installed, an endpoint that does not answer) is one line on
stderr and exit 2, and in batch one error row beside the complete others.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cliserver import run_cli
from s3server import S3Server, s3  # noqa: F401  (the module-scoped fixture, found by its name)

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
# key under logs/ → fixture; a gzipped object and a nested prefix among them
LAYOUT = {
    "v0.5-capture-oom-tp4.log": "v0.5-capture-oom-tp4.log",
    "v0.2-tp2.log.gz": "v0.2-tp2.log",
    "nested/day1/host-oom-killed.log": "host-oom-killed.log",
    "nested/v0.5-port-in-use.log": "v0.5-port-in-use.log",
    "nested/torchrun-child-failed.txt": "torchrun-child-failed.txt",
    "nested/core.log": "",  # binary content: an error row, found when the object is read
}
ONE = "nested/v0.5-port-in-use.log"


def _content(key: str) -> bytes:
    if not LAYOUT[key]:
        return bytes(range(256)) * 64
    data = (LOGS / LAYOUT[key]).read_bytes()
    return gzip.compress(data, mtime=0) if key.endswith(".gz") else data


@pytest.fixture(scope="module")
def bucket(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """Bucket `fleet` holding LAYOUT under logs/ (plus a file batch does not pick up), and the same local tree."""
    local = tmp_path_factory.mktemp("copies") / "logs"
    s3.make_bucket("fleet")
    for key in LAYOUT:
        s3.put("fleet", f"logs/{key}", _content(key))
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(_content(key))
    s3.put("fleet", "logs/nested/notes.md", b"not a log\n")
    (local / "nested" / "notes.md").write_bytes(b"not a log\n")
    return local


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=env, text=True, timeout=60)  # a hang guard, not a speed goal


def _rows(out: str, prefix: str) -> dict[str, dict[str, Any]]:
    rows = json.loads(out)
    assert all(r["path"].startswith(prefix) for r in rows), (prefix, [r["path"] for r in rows])
    return {r["path"][len(prefix):]: {k: v for k, v in r.items() if k != "path"} for r in rows}


def test_batch_over_a_prefix_gives_the_rows_of_the_local_copies(s3: S3Server, bucket: Path) -> None:  # noqa: F811
    remote = _cli(["batch", "s3://fleet/logs/", "--format", "json"], s3.env)
    local = _cli(["batch", str(bucket), "--format", "json"], s3.env)
    assert remote.returncode == local.returncode == 2, remote.stderr + local.stderr  # the binary object
    assert remote.stderr == local.stderr.replace(f"{bucket}/", "s3://fleet/logs/")
    remote_rows, local_rows = _rows(remote.stdout, "s3://fleet/logs/"), _rows(local.stdout, f"{bucket}/")
    assert set(remote_rows) == set(LAYOUT)  # recursive, the .gz object included, notes.md filtered out
    assert remote_rows == local_rows
    assert {r["verdict"] for r in remote_rows.values()} == {"failed", "healthy", None}
    assert [k for k, r in remote_rows.items() if r["error"] is not None] == ["nested/core.log"]
    assert remote_rows["nested/core.log"]["error"] == "binary file (not a text log)"
    assert remote_rows["v0.2-tp2.log.gz"]["last_stage"] == "ready"  # the gzipped object was streamed and read


def test_a_glob_url_picks_the_matching_objects(s3: S3Server, bucket: Path) -> None:  # noqa: F811
    done = _cli(["batch", "s3://fleet/logs/**/*.log", "--format", "json", "-j", "1"], s3.env)
    assert set(_rows(done.stdout, "s3://fleet/logs/")) == {k for k in LAYOUT if k.endswith(".log")}
    assert done.returncode == 2  # core.log is binary
    # `*` stays in its level; a glob over a missing bucket is one error row
    done = _cli(["batch", "s3://fleet/logs/nested/*.log", "s3://fleet/logs/*.gz", "s3://no-such-bucket/*/*.log",
                 "--format", "json", "-j", "1"], s3.env)
    rows = {r["path"]: r["error"] for r in json.loads(done.stdout)}
    assert rows == {"s3://fleet/logs/nested/v0.5-port-in-use.log": None, "s3://fleet/logs/v0.2-tp2.log.gz": None,
                    "s3://fleet/logs/nested/core.log": "binary file (not a text log)",
                    "s3://no-such-bucket": "cannot list (no such bucket)"}


def test_explain_of_an_object_equals_explain_of_the_local_file(s3: S3Server, bucket: Path) -> None:  # noqa: F811
    url, path = f"s3://fleet/logs/{ONE}", str(bucket / ONE)
    remote = _cli(["explain", url, "--format", "json"], s3.env)
    local = _cli(["explain", path, "--format", "json"], s3.env)
    assert remote.returncode == local.returncode == 1, remote.stderr + local.stderr
    assert json.loads(remote.stdout.replace(url, "SOURCE")) == json.loads(local.stdout.replace(path, "SOURCE"))
    as_file = _cli(["explain", (bucket / ONE).as_uri(), "--format", "json"], s3.env)  # file:// reads like the path
    assert as_file.returncode == 1, as_file.stderr
    assert json.loads(as_file.stdout.replace((bucket / ONE).as_uri(), "SOURCE")) == json.loads(
        local.stdout.replace(path, "SOURCE"))
    text = _cli(["explain", url], s3.env)
    assert text.returncode == 1 and url in text.stdout  # the log is named by its URL
    assert "line " in text.stdout  # evidence cites its lines


def test_other_commands_read_urls(s3: S3Server, bucket: Path) -> None:  # noqa: F811
    url = f"s3://fleet/logs/{ONE}"
    parsed = _cli(["parse", url], s3.env)
    assert parsed.returncode == 0 and parsed.stderr == "", parsed.stderr
    assert len(parsed.stdout.splitlines()) > 5
    compared = _cli(["compare", url, str(bucket / ONE)], s3.env)
    assert compared.returncode in (0, 1) and compared.stderr == "" and compared.stdout.strip(), compared.stderr
    runs = _cli(["runs", "s3://fleet/logs/nested/", "--format", "json", "-j", "1"], s3.env)
    assert runs.returncode == 2, runs.stderr  # core.log is binary
    assert {r["path"] for r in json.loads(runs.stdout)} == {
        f"s3://fleet/logs/{k}" for k in LAYOUT if k.startswith("nested/") and LAYOUT[k]}
    # a prefix as the logs of one launch, as a directory is with --one-launch
    launch = _cli(["explain", "--one-launch", "--format", "json", "s3://fleet/logs/nested/day1/"], s3.env)
    local = _cli(["explain", "--one-launch", "--format", "json", str(bucket / "nested" / "day1")], s3.env)
    assert launch.returncode == local.returncode == 1, (launch.returncode, launch.stderr, local.returncode, local.stderr)
    assert json.loads(launch.stdout)["primary"]["rule"] == json.loads(local.stdout)["primary"]["rule"]


def test_missing_bucket_denied_and_missing_keys_are_error_rows_beside_complete_ones(s3: S3Server) -> None:  # noqa: F811
    s3.make_bucket("guarded")
    s3.put("guarded", "ok.log", (LOGS / LAYOUT[ONE]).read_bytes())
    s3.put("guarded", "secret.log", (LOGS / "v0.2-tp2.log").read_bytes())
    s3.deny_get("guarded", "secret.log")
    done = _cli(["batch", "s3://guarded/", "s3://no-such-bucket/logs/", "s3://guarded/missing.log",
                 "--format", "json", "-j", "1"], s3.env)
    assert done.returncode == 2, done.stderr
    rows = {r["path"]: r for r in json.loads(done.stdout)}
    assert rows["s3://guarded/ok.log"]["verdict"] == "failed" and rows["s3://guarded/ok.log"]["error"] is None
    assert rows["s3://guarded/secret.log"]["error"] == "access denied"
    assert rows["s3://no-such-bucket/logs/"]["error"] == "no such bucket"
    assert rows["s3://guarded/missing.log"]["error"] == "no such object"
    assert sorted(done.stderr.splitlines()) == [
        "logdoctor: s3://guarded/missing.log: no such object",
        "logdoctor: s3://guarded/secret.log: access denied",
        "logdoctor: s3://no-such-bucket/logs/: no such bucket"]
    one = _cli(["explain", "s3://guarded/secret.log"], s3.env)
    assert (one.returncode, one.stdout, one.stderr) == (2, "", "logdoctor: s3://guarded/secret.log: access denied\n")


def test_unknown_schemes_missing_backends_and_dead_endpoints_are_one_line_errors(s3: S3Server) -> None:  # noqa: F811
    assert importlib.util.find_spec("ocifs") is None  # the backend oci:// needs is not installed here
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        # one attempt (fsspec's own configuration variable overrides logdoctor's default of a few retries)
        dead = {**s3.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{sock.getsockname()[1]}",
                "FSSPEC_S3_CONFIG_KWARGS": json.dumps({"retries": {"max_attempts": 1}})}
        cases = [(["explain", "xyz://bucket/a.log"], s3.env, "xyz://bucket/a.log: unknown URL scheme 'xyz'"),
                 (["explain", "oci://bucket/a.log"], s3.env, "oci://bucket/a.log: oci:// needs a package"),
                 (["batch", "xyz://bucket/logs/"], s3.env, "xyz://bucket/logs/: unknown URL scheme 'xyz'"),
                 (["explain", "s3://fleet/a.log"], dead, "s3://fleet/a.log: network error")]
        for args, env, start in cases:
            done = _cli(args, env)
            assert done.returncode == 2, (args, done.stdout, done.stderr)
            assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(f"logdoctor: {start}"), done.stderr
            assert "Traceback" not in done.stderr


def test_file_urls_read_like_paths(bucket: Path) -> None:
    env = dict(os.environ)
    rows = _cli(["batch", bucket.as_uri() + "/", "--format", "json", "-j", "1"], env)
    assert rows.returncode == 2, rows.stderr  # core.log is binary
    assert set(_rows(rows.stdout, bucket.as_uri() + "/")) == set(LAYOUT)
    gone = _cli(["explain", (bucket / "nope.log").as_uri()], env)
    assert (gone.returncode, gone.stderr) == (2, f"logdoctor: {(bucket / 'nope.log').as_uri()}: no such file\n")


def test_is_url_tells_urls_from_paths(tmp_path: Path) -> None:
    from logdoctor.read.remote import is_url
    assert is_url("s3://b/k.log") and is_url("gs://b/") and is_url("https://h/x.log") and is_url("file:///x")
    assert is_url("simplecache::s3://b/k.log")
    assert not any(is_url(p) for p in ("C:\\logs\\a.log", "C://logs/a.log", "/tmp/a.log", "a.log", "-", "s3:/b"))
    (tmp_path / "s3:").mkdir()  # a local directory named `s3:` makes `s3://x.log` an existing path
    (tmp_path / "s3:" / "x.log").write_text("x\n")
    assert is_url("s3://x.log")
    os.chdir(tmp_path)
    try:
        assert not is_url("s3://x.log")
    finally:
        os.chdir(ROOT)


def test_a_plain_path_does_not_import_fsspec() -> None:
    # a cold interpreter: the fork server has imported things already
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: sys.stderr.write('IMPORTED: ' + ' '.join(sorted(m for m in ('fsspec', 's3fs', "
             "'logdoctor.read.remote') if m in sys.modules)) + '\\n'))\n"
             "sys.argv = ['logdoctor', 'explain', sys.argv[1]]\n"
             "runpy.run_module('logdoctor.cli', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", probe, str(LOGS / LAYOUT[ONE])], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "IMPORTED:"
