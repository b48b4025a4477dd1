"""S3 for lifecycle scripts: `aws s3 mb / sync / cp / ls --endpoint-url URL` against `slurmlab serve`.

moto's S3 (in this process: its Flask app, driven through werkzeug's test client) speaks the protocol;
this module sends it the requests signed for the service `s3`, refuses object keys that could not be
files under their bucket's folder, and mirrors every bucket a request changed to
`$SLURMLAB_HOME/s3/<bucket>/<key>`, the folder a CreateCluster's `s3://bucket/prefix` LifeCycleConfig
reads (lab/spec/rules/lifecycle.py). The mirror is loaded back into moto on the first S3 request
after a start, so the buckets outlive the server. ADR 0005 says why moto.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

from lab.osutil import atomic_write

log = logging.getLogger(__name__)

CHANGES = ("PUT", "POST", "DELETE")
HOP_BY_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive", "server", "date"}


def bad_key(bucket: str, key: str) -> str | None:
    """Why `bucket`/`key` cannot be a file under the mirror (None: it can)."""
    if bucket in ("", ".", "..") or "/" in bucket or "\\" in bucket:
        return f"bucket name {bucket!r}"
    parts = key.split("/")
    if key.startswith("/") or "\x00" in key or any(p in (".", "..") for p in parts) or (key and not parts[-1]):
        return f"key {key!r}: the lab keeps objects as files, so '.', '..', an empty name or a leading '/' cannot be one"
    return None


def error_xml(code: str, message: str) -> bytes:
    from xml.sax.saxutils import escape

    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{escape(message)}</Message>'
            "</Error>").encode()


class S3:
    """One moto S3 backend for the server's lifetime, mirrored to `root`."""

    def __init__(self, root: Path):
        self.root = root
        self.lock = threading.Lock()
        self._client = None

    def _start(self):
        from moto.moto_server.werkzeug_app import create_backend_app
        from werkzeug.test import Client

        self._client = Client(create_backend_app("s3"))
        self._reset()  # moto's backend is global to the process: this server's S3 is its mirror, nothing else
        for bucket in sorted(p for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []:
            self._client.put(f"/{bucket.name}")
            for f in sorted(p for p in bucket.rglob("*") if p.is_file()):
                self._client.put(f"/{bucket.name}/{f.relative_to(bucket).as_posix()}", data=f.read_bytes())
        return self._client

    @staticmethod
    def _reset() -> None:
        from moto.s3.models import s3_backends

        s3_backends.reset()

    def _backend(self):
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        """One S3 request: (status, headers, body)."""
        parts = urlsplit(target)
        path = unquote(parts.path)
        bucket, _, key = path.lstrip("/").partition("/")
        if bucket and method in CHANGES:
            why = bad_key(bucket, key)
            if why:
                return 400, [("Content-Type", "application/xml")], error_xml("InvalidArgument", f"{why}; nothing was changed")
        with self.lock:
            client = self._client or self._start()
            r = client.open(parts.path, method=method, query_string=parts.query, headers=headers, data=body)
            out = [(k, v) for k, v in r.headers.items() if k.lower() not in HOP_BY_HOP]
            data = r.get_data()
            if method in CHANGES and bucket and r.status_code < 300:
                self._mirror(bucket)
        return r.status_code, out, data

    def _mirror(self, bucket: str) -> None:
        """The folder of `bucket` made equal to moto's bucket (gone when the bucket is)."""
        folder = self.root / bucket
        b = self._backend().buckets.get(bucket)
        if b is None:
            shutil.rmtree(folder, ignore_errors=True)
            return
        keep = set()
        for key in b.keys.keys():
            obj = b.keys.get(key)
            if obj is None or bad_key(bucket, key):
                continue
            f = folder / key
            keep.add(f)
            data = obj.value
            if not f.is_file() or f.read_bytes() != data:
                f.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(f, data)
        folder.mkdir(parents=True, exist_ok=True)
        for f in sorted(folder.rglob("*"), reverse=True):  # deleted objects, then empty folders
            if f.is_file() and f not in keep:
                f.unlink()
            elif f.is_dir() and not any(f.iterdir()):
                f.rmdir()
