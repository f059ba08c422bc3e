"""A real S3 API on the loopback for the tests: moto's server mode, started by the test that needs it.

Use it by re-exporting the fixture in a test module (no conftest needed):

    from s3server import s3, S3Server   # noqa: F401  (the fixture is found by its name in the module)

    def test_something(s3: S3Server) -> None:
        s3.make_bucket("logs")
        s3.put("logs", "a/one.log", b"...")
        run_cli(["batch", "s3://logs/a/"], env=s3.env)

The fixture is module-scoped: one server (on 127.0.0.1, an ephemeral port) per test module, with fresh
buckets. While it lives, this process's environment has the fake credentials and `AWS_ENDPOINT_URL`
(so s3fs / boto3 in the test process reach it too); they are restored when the module ends. `.env` is
the full environment to hand to a subprocess or `cliserver.run_cli(env=...)`.

A test that cannot start the server fails: a missing moto is an install error, not a reason to skip.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

REGION = "us-east-1"
# what the server's clients see; anything a developer's own AWS setup could add is pointed away or off
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",   # never wait on 169.254.169.254 for credentials
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
DROPPED = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
           "AWS_ENDPOINT_URL_S3", "FSSPEC_S3_ENDPOINT_URL", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


@dataclass
class S3Server:
    """A running moto server: where it is, the environment that reaches it, and a client to fill it."""

    endpoint: str
    env: dict[str, str]
    client: Any = field(repr=False)

    def make_bucket(self, name: str) -> None:
        self.client.create_bucket(Bucket=name)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def deny_get(self, bucket: str, key: str) -> None:
        """A bucket policy refusing GetObject on one key: moto's server then answers 403 to HEAD and GET of
        that key (listing the bucket still works), as S3 does for a key the caller may not read."""
        import json
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{bucket}/{key}"}]}
        self.client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[Any, int]:
    """A started ThreadedMotoServer on 127.0.0.1 and its port."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not one log line per request
    port = _free_port()  # port=0 would work for the server, but moto does not report the port it got everywhere
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, port


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server, port = start_server()
    endpoint = f"http://127.0.0.1:{port}"
    wanted = {**FAKE_ENV, "AWS_ENDPOINT_URL": endpoint, "NO_PROXY": "127.0.0.1,localhost",
              "no_proxy": "127.0.0.1,localhost"}
    with pytest.MonkeyPatch.context() as mp:
        for name in DROPPED:
            mp.delenv(name, raising=False)
        for name, value in wanted.items():
            mp.setenv(name, value)
        try:
            import boto3
            client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                                  aws_access_key_id="testing", aws_secret_access_key="testing")
            # LOGDOCTOR_* settings of the developer are dropped here as conftest drops them for each test
            env = {k: v for k, v in os.environ.items() if not k.startswith("LOGDOCTOR_")}
            yield S3Server(endpoint, env, client)
        finally:
            server.stop()


__all__ = ["S3Server", "s3", "start_server"]
