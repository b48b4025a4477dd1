"""The HTTP server: SageMaker's AWS JSON 1.1 protocol on `POST /`, the lab's controls under
`/_lab/`, the console on `GET /`.

    POST /   X-Amz-Target: SageMaker.<Operation>   Content-Type: application/x-amz-json-1.1

Replies are JSON; errors are `{"__type": <code>, "message": ...}` with a 4xx/5xx status, as an AWS
SDK expects. The server never trusts its input: bodies are capped, JSON is parsed strictly, every
request is checked against the service model, and any failure inside a handler becomes an error
reply, never a dead server.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lab.api import console, labctl, model, operations, s3, sigv4
from lab.api.model import ApiError
from lab.spec.rules.lifecycle import s3_mirror

log = logging.getLogger("lab.api")

MAX_BODY = 1 << 20  # 1 MiB: a CreateCluster with 100 groups is a few dozen KiB
DRAIN_MAX = 64 << 20  # a larger body is read and dropped (up to this), then refused; beyond it the connection just closes
JSON_TYPES = ("application/x-amz-json-1.1", "application/x-amz-json-1.0", "application/json")
# SigV4: "AWS4-HMAC-SHA256 Credential=AKID/20261202/eu-west-1/sagemaker/aws4_request, SignedHeaders=..."
SIGNED_SCOPE = re.compile(r"Credential=[^/,\s]+/\d{8}/([a-z0-9-]{1,40})/([a-z0-9-]{1,40})/aws4_request")


def signed_scope(authorization: str | None) -> tuple[str | None, str | None]:
    """(region, service) a SigV4-signed request is for (the client's region_name / --region, and
    sagemaker or s3); (None, None) when unsigned. Without --auth the lab does not check signatures: any key
    works; with it, lab/api/sigv4.py checks them."""
    m = SIGNED_SCOPE.search(authorization or "")
    return (m.group(1), m.group(2)) if m else (None, None)


def signed_region(authorization: str | None) -> str | None:
    region, service = signed_scope(authorization)
    return region if service == "sagemaker" else None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


class Handler(BaseHTTPRequestHandler):
    server: "ApiServer"
    protocol_version = "HTTP/1.1"
    server_version = "slurmlab"
    sys_version = ""
    timeout = 30  # seconds a client may take to send its request
    disable_nagle_algorithm = True  # replies go out at once (no 40 ms delayed-ACK stalls)

    def version_string(self) -> str:
        return "slurmlab"

    # ---------------------------------------------------------------- plumbing
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.debug("%s %s", self.address_string(), format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level errors (bad request line, bad headers) in the AWS error shape too."""
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # garbage is not HTTP/0.9: answer with a status line
        try:
            self._reply(code, {"__type": "SerializationException" if code < 500 else "InternalFailure",
                               "message": message or HTTPStatus(code).phrase}, error=True)
        except OSError:
            pass

    def _reply(self, status: int, body: dict | bytes, content_type: str = "application/x-amz-json-1.1",
               error: bool = False, request_id: str | None = None, cache: str = "no-store") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        if status == 401:  # the console under --auth: the browser asks for the instructor's key
            self.send_header("WWW-Authenticate", 'Basic realm="slurmlab console", charset="UTF-8"')
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", request_id or str(uuid.uuid4()))
        if error and isinstance(body, dict):
            self.send_header("x-amzn-ErrorType", str(body.get("__type", "")))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.send_header("Cache-Control", cache)
        if self.command == "HEAD":
            self.end_headers()
        elif hasattr(self, "_headers_buffer"):
            self._headers_buffer.append(b"\r\n" + data)  # headers and body in one write
            self.flush_headers()
        else:  # HTTP/0.9: no headers at all
            self.end_headers()
            self.wfile.write(data)

    def _error(self, e: ApiError, request_id: str | None = None) -> None:
        self._reply(e.status, e.body(), error=True, request_id=request_id)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            raise ApiError("SerializationException", "Transfer-Encoding: chunked is not supported; send Content-Length", 411)
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            n = int(raw)
            if n < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise ApiError("SerializationException", f"Content-Length: {raw[:40]!r} is not a byte count") from None
        if n > MAX_BODY:
            self.close_connection = True
            if n <= DRAIN_MAX:  # read it away, so the client (still sending) gets to read the reply
                left = n
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
            raise ApiError("ValidationException", f"request body: {n} bytes; at most {MAX_BODY} ({MAX_BODY // 1024} KiB) allowed",
                           413)
        data = self.rfile.read(n)
        if len(data) < n:
            self.close_connection = True
            raise ApiError("SerializationException", f"request body: got {len(data)} of {n} bytes (Content-Length)")
        return data

    # ---------------------------------------------------------------- routes
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self._s3_request():  # S3's POSTs (multipart uploads, DeleteObjects)
            return
        t0 = time.perf_counter()
        rid = str(uuid.uuid4())
        path = self.path.split("?", 1)[0]
        op = "-"
        status = 200
        try:
            body = self._read_body()  # first: an unread body would poison the next request on this connection
            if path.startswith("/_lab/"):
                op = path
                self._instructor()
                self._reply(200, self._lab_post(path, body), content_type="application/json", request_id=rid)
                return
            if path != "/":
                self._caller(body, "sagemaker")
                raise ApiError("UnknownOperationException", f"path {path[:100]!r}: SageMaker's API is served at POST /", 404)
            caller = self._caller(body, "sagemaker")  # first, as AWS does: a refused request is not looked at
            op = self._operation()
            request = self._json(body)
            region = self.server.lab.region if caller else signed_region(self.headers.get("Authorization"))
            result = operations.call(self.server.lab, op, request, region=region, caller=caller)
            self._reply(200, result, request_id=rid)
        except ApiError as e:
            status = e.status
            self._error(e, rid)
        except Exception as e:  # noqa: BLE001 - a bug must cost one request, never the server
            log.exception("%s failed", op)
            status = 500
            self._error(ApiError("InternalFailure", f"the lab failed on {op}: {type(e).__name__}: {str(e)[:500]}", 500), rid)
        finally:
            log.info("%s %s %d %.1f ms", "POST", op, status, (time.perf_counter() - t0) * 1000)

    # ---------------------------------------------------------------- S3 (lab/api/s3.py)
    def _s3_request(self) -> bool:
        """Answer the request as S3 if it was signed for s3 (the AWS CLI's `aws s3 ...`): True if so."""
        if signed_scope(self.headers.get("Authorization"))[1] != "s3":
            return False
        t0 = time.perf_counter()
        try:
            body = self._read_body()
            self._caller(body, "s3")
            status, headers, data = self.server.s3.handle(self.command, self.path, dict(self.headers.items()), body)
        except sigv4.Refused as e:
            status, headers, data = e.status, [("Content-Type", "application/xml")], s3.error_xml(e.code, e.message)
        except ApiError as e:
            status, headers, data = e.status, [("Content-Type", "application/xml")], s3.error_xml("InvalidRequest", e.message)
        except Exception as e:  # noqa: BLE001 - moto raises on requests S3 would refuse (a POST with no action)
            log.warning("S3 %s %s: moto could not answer: %s: %s", self.command, self.path[:100], type(e).__name__, e)
            status, headers, data = 400, [("Content-Type", "application/xml")], s3.error_xml(
                "InvalidRequest", f"the lab's S3 (moto) cannot answer this request ({type(e).__name__}: {str(e)[:200]})")
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        log.info("S3 %s %s %d %.1f ms", self.command, self.path[:120], status, (time.perf_counter() - t0) * 1000)
        return True

    def do_PUT(self) -> None:  # noqa: N802
        if not self._s3_request():
            self._not_allowed()

    do_DELETE = do_PUT  # noqa: N815

    def do_GET(self) -> None:  # noqa: N802
        if self._s3_request():
            return
        path = self.path.split("?", 1)[0]
        try:
            if path != "/_lab/health":
                self._instructor()
            if path in ("/", "/index.html"):
                self._reply(200, console.page(), content_type="text/html; charset=utf-8")
            elif path.startswith("/_lab/assets/"):
                data, ctype = console.asset(path[len("/_lab/assets/"):])
                self._reply(200, data, content_type=ctype, cache=console.ASSET_CACHE)
            elif path == "/_lab/health":
                self._reply(200, {"Ok": True, "Provider": self.server.lab.provider, "Pid": os.getpid()},
                            content_type="application/json")
            else:  # the lab's JSON (labctl.get): state, capacity, checkpoints, metrics; 404 for anything else
                query = self.path.split("?", 1)[1] if "?" in self.path else ""
                self._reply(200, labctl.get(self.server.lab, path, query), content_type="application/json")
        except ApiError as e:
            self._error(e)
        except Exception as e:  # noqa: BLE001
            log.exception("GET %s failed", path)
            self._error(ApiError("InternalFailure", f"{type(e).__name__}: {str(e)[:500]}", 500))

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._error(ApiError("UnknownOperationException", f"method {self.command}: use POST / for SageMaker's API", 405))

    do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

    # ---------------------------------------------------------------- who asks (`serve --auth`)
    def _caller(self, body: bytes, service: str):
        """The student who signed the request (None without --auth); sigv4.Refused (an ApiError) if none did."""
        students = self.server.lab.students
        return None if students is None else sigv4.verify(
            students, sigv4.Incoming(self.command, self.path, self.headers, body), service, self.server.lab.region)

    def _instructor(self) -> None:
        """The console and /_lab/ under --auth: an instructor's key (HTTP Basic), else 401."""
        if self.server.lab.students is not None:
            sigv4.instructor_login(self.server.lab.students, self.headers.get("Authorization"))

    # ---------------------------------------------------------------- SageMaker
    def _operation(self) -> str:
        target = self.headers.get("X-Amz-Target")
        prefix = model.target_prefix()
        if not target:
            raise ApiError("UnknownOperationException", f"X-Amz-Target: missing; send {prefix}.<Operation>, "
                           "e.g. SageMaker.DescribeCluster (an AWS SDK or the AWS CLI does)")
        svc, _, op = target.partition(".")
        if svc != prefix or not op:
            raise ApiError("UnknownOperationException", f"X-Amz-Target: {target[:100]!r} is not {prefix}.<Operation>")
        if op not in model.OPERATIONS:
            if op in model.service_model().operation_names:
                raise ApiError("UnknownOperationException", f"X-Amz-Target: {op} is SageMaker's but not a lab's: the lab "
                               "serves " + ", ".join(model.OPERATIONS))
            near = model.close_operation(op)
            raise ApiError("UnknownOperationException", f"X-Amz-Target: unknown operation {op[:100]!r}"
                           + (f"; did you mean {near}?" if near else ""))
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype and ctype not in JSON_TYPES:
            raise ApiError("SerializationException", f"Content-Type: {ctype[:80]!r}; send application/x-amz-json-1.1")
        return op

    def _json(self, body: bytes) -> Any:
        if not body.strip():
            return {}
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError("SerializationException", f"request body: not UTF-8 (byte {e.start})") from None
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as e:
            raise ApiError("SerializationException", f"request body: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        except (ValueError, RecursionError) as e:
            raise ApiError("SerializationException", f"request body: unreadable JSON: {str(e)[:200]}") from None
        if not isinstance(value, dict):
            raise ApiError("SerializationException", f"request body: expected a JSON object, got {model.json_kind(value)}")
        return value

    # ---------------------------------------------------------------- lab controls
    def _lab_post(self, path: str, body: bytes) -> dict:
        if path == "/_lab/capacity":
            return labctl.set_capacity(self.server.lab.store, body, self.headers.get("Content-Type") or "")
        if path == "/_lab/checkpoints":
            return labctl.checkpoint_action(self.server.lab, body)
        if path == "/_lab/groups":
            return labctl.group_action(self.server.lab, body)
        raise ApiError("ResourceNotFound", f"path {path[:100]!r}: the lab's controls are POST /_lab/capacity, "
                       "/_lab/checkpoints and /_lab/groups", 404)


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], lab: operations.Lab):
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        self.lab = lab
        self.s3 = s3.S3(s3_mirror())  # started on the first S3 request
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(lab: operations.Lab, host: str = "127.0.0.1", port: int = 0) -> ApiServer:
    model.service_model()  # fail now (old botocore), not on the first request
    return ApiServer((host, port), lab)


# ------------------------------------------------------------------------------------ one per state dir
class ServeLock:
    """One `slurmlab serve` per state directory: a file lock next to the store, plus who holds it."""

    def __init__(self, home: Path):
        from filelock import FileLock

        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.info = home / "serve.json"
        self.lock = FileLock(str(home / "serve.lock"))

    def acquire(self) -> None:
        from filelock import Timeout

        from lab.errors import Conflict

        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            who = ""
            try:
                d = json.loads(self.info.read_text())
                who = f" (pid {d.get('pid')}, {d.get('url')})"
            except (OSError, ValueError):
                pass
            raise Conflict(f"another `slurmlab serve`{who} already serves the state directory {self.home}",
                           "use that server, stop it first (Ctrl-C or kill its pid), or give this one another --state-dir") from None

    def publish(self, url: str) -> None:
        self.info.write_text(json.dumps({"pid": os.getpid(), "url": url, "started": time.time()}))

    def release(self) -> None:
        try:
            self.info.unlink(missing_ok=True)
        finally:
            self.lock.release()


class EngineWatch(threading.Thread):
    """While clusters exist, keep the engine process running (it exits by itself when idle)."""

    def __init__(self, lab: operations.Lab, every: float = 5.0):
        super().__init__(name="engine-watch", daemon=True)
        self.lab = lab
        self.every = every
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                if self.lab.store.clusters():
                    self.lab.engine()
            except Exception:  # noqa: BLE001
                log.exception("engine watch")
