"""Who sent a request: its AWS Signature Version 4, checked against the students' keys (lab.students).

The signature is recomputed with botocore's own signer (SigV4Auth, or S3SigV4Auth for `s3`) on the
request as it arrived: method, path and query as sent, the headers named in SignedHeaders, the body,
and the client's X-Amz-Date; then compared in constant time. Refusals name what is wrong the way
AWS does (its codes, its "Signature expired" and "Credential should be scoped to ..." wording) and
say how to fix it; nothing of the request has been acted on when one is raised.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from lab.api.model import ApiError
from lab.students import Registry, Student

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = 15 * 60  # seconds, as AWS allows
AMZ_DATE = "%Y%m%dT%H%M%SZ"
HEX64 = re.compile(r"[0-9a-f]{64}")

# kind of refusal -> (code, HTTP status) per service: SageMaker's JSON errors, S3's XML ones
CODES = {
    "sagemaker": {"missing": ("UnrecognizedClientException", 400), "malformed": ("IncompleteSignatureException", 400),
                  "unknown-key": ("UnrecognizedClientException", 400), "scope": ("InvalidSignatureException", 400),
                  "expired": ("InvalidSignatureException", 400), "mismatch": ("InvalidSignatureException", 400)},
    "s3": {"missing": ("AccessDenied", 403), "malformed": ("AuthorizationHeaderMalformed", 400),
           "unknown-key": ("InvalidAccessKeyId", 403), "scope": ("AuthorizationHeaderMalformed", 400),
           "expired": ("RequestTimeTooSkewed", 403), "mismatch": ("SignatureDoesNotMatch", 403)},
    "console": {"missing": ("UnrecognizedClientException", 401), "malformed": ("UnrecognizedClientException", 401),
                "unknown-key": ("UnrecognizedClientException", 401), "mismatch": ("AccessDeniedException", 403)},
}


class Refused(ApiError):
    """A request whose signature does not name a student, or does not check out (an error reply)."""

    def __init__(self, kind: str, service: str, message: str):
        code, status = CODES[service][kind]
        super().__init__(code, message, status)
        self.kind = kind


@dataclass(frozen=True)
class Incoming:
    """A request as it arrived: `target` is the path and query of the request line, `headers` has get_all()."""

    method: str
    target: str
    headers: object  # http.client.HTTPMessage (email.message.Message)
    body: bytes


class _ExactHeaders:
    """botocore's signer, on exactly the headers the client signed (it would pick its own set)."""

    def __init__(self, credentials: Credentials, service: str, region: str, signed: HTTPHeaders):
        super().__init__(credentials, service, region)
        self._signed = signed

    def headers_to_sign(self, request):
        return self._signed


class _JsonSigner(_ExactHeaders, SigV4Auth):
    pass


class _S3Signer(_ExactHeaders, S3SigV4Auth):
    pass


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime(AMZ_DATE)


def parse_authorization(value: str, service: str) -> dict:
    """The parts of `AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request, SignedHeaders=a;b,
    Signature=HEX`: AccessKeyId, Date, Region, Service, SignedHeaders (list), Signature."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Refused("malformed", service, f"Authorization: the lab accepts {ALGORITHM} (SigV4) only, not "
                      f"{algorithm[:40]!r}; sign with an AWS SDK or the AWS CLI")
    parts = {}
    for item in rest.split(","):
        k, eq, v = item.strip().partition("=")
        if eq:
            parts[k] = v
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not parts.get(k)]
    if missing:
        raise Refused("malformed", service, f"Authorization header requires {', '.join(missing)} "
                      "(an AWS SDK or the AWS CLI writes them)")
    cred = parts["Credential"].split("/")
    if len(cred) != 5 or cred[4] != "aws4_request" or not re.fullmatch(r"\d{8}", cred[1]):
        raise Refused("malformed", service, "Authorization: Credential should be ACCESS_KEY_ID/YYYYMMDD/REGION/SERVICE/"
                      f"aws4_request, got {parts['Credential'][:120]!r}")
    return {"AccessKeyId": cred[0], "Date": cred[1], "Region": cred[2], "Service": cred[3],
            "SignedHeaders": parts["SignedHeaders"].lower().split(";"), "Signature": parts["Signature"]}


def verify(registry: Registry, req: Incoming, service: str, region: str, now: float | None = None) -> Student:
    """The student who signed `req` for `service` in `region`; Refused otherwise."""
    auth = req.headers.get("Authorization")
    if not auth:
        raise Refused("missing", service, "The request is not signed (no Authorization header): this lab serves "
                      "students with their own keys; give your access key id and secret access key "
                      "(slurmlab students add NAME prints them) to boto3 or the AWS CLI")
    a = parse_authorization(auth, service)
    if a["Service"] != service:
        raise Refused("scope", service, f"Credential should be scoped to correct service: '{service}', not "
                      f"'{a['Service'][:40]}'. Send SageMaker's operations signed for sagemaker (boto3.client('sagemaker')) "
                      "and lifecycle scripts signed for s3; nothing was done")
    if a["Region"] != region:
        raise Refused("scope", service, f"Credential should be scoped to a valid region, not '{a['Region'][:40]}'. "
                      f"This lab serves region '{region}': use region_name='{region}' in boto3 or --region {region} "
                      "with the AWS CLI; nothing was done")
    amz = req.headers.get("X-Amz-Date") or ""
    try:
        t = datetime.strptime(amz, AMZ_DATE).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise Refused("malformed", service, f"X-Amz-Date: {amz[:40]!r} is not an ISO 8601 basic time like "
                      "20261202T101500Z (an AWS SDK sends it)") from None
    if "x-amz-date" not in a["SignedHeaders"] or "host" not in a["SignedHeaders"]:
        raise Refused("malformed", service, "Authorization: SignedHeaders must include host and x-amz-date")
    if a["Date"] != amz[:8]:
        raise Refused("mismatch", service, f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of "
                      f"date from HTTP: '{a['Date']}' != '{amz[:8]}', from 'X-Amz-Date'.")
    now = time.time() if now is None else now
    if t < now - MAX_SKEW:
        raise Refused("expired", service, f"Signature expired: {amz} is now earlier than {_stamp(now - MAX_SKEW)} "
                      f"({_stamp(now)} - 15 min.). Check the clock of the machine that signs (it is "
                      f"{round((now - t) / 60)} min behind the lab's)")
    if t > now + MAX_SKEW:
        raise Refused("expired", service, f"Signature not yet current: {amz} is still later than "
                      f"{_stamp(now + MAX_SKEW)} ({_stamp(now)} + 15 min.). Check the clock of the machine that signs")
    student = registry.by_key(a["AccessKeyId"])
    if student is None:
        raise Refused("unknown-key", service, "The security token included in the request is invalid. "
                      f"(No student has the access key id {a['AccessKeyId'][:40]!r}: check AWS_ACCESS_KEY_ID, "
                      "or ask for a key: slurmlab students add NAME)")
    expected = _signature(registry.secret_of(student), req, a, service, amz)
    if expected is None or not hmac.compare_digest(expected, a["Signature"]):
        raise Refused("mismatch", service, "The request signature we calculated does not match the signature you "
                      "provided. Check your AWS Secret Access Key and signing method.")
    return student


def _signature(secret: str, req: Incoming, a: dict, service: str, amz: str) -> str | None:
    signed = HTTPHeaders()
    for name in a["SignedHeaders"]:
        values = req.headers.get_all(name)
        if not values:
            return None  # a signed header that did not arrive: the request is not the one signed
        for v in values:
            signed[name] = v
    declared = req.headers.get("X-Amz-Content-SHA256")
    if declared and HEX64.fullmatch(declared) and declared != hashlib.sha256(req.body).hexdigest():
        return None  # the body is not the one signed
    request = AWSRequest(method=req.method, url=f"http://{req.headers.get('Host', '')}{req.target}", data=req.body,
                         headers=signed)
    request.context["timestamp"] = amz
    signer = (_S3Signer if service == "s3" else _JsonSigner)(Credentials("-", secret), service, a["Region"], signed)
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


def instructor_login(registry: Registry, authorization: str | None) -> Student:
    """The console and the lab's controls under --auth: HTTP Basic with an instructor's access key id
    as the user name and their secret access key as the password (a browser asks for them once)."""
    import base64
    import binascii

    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        raise Refused("missing", "console", "the console and /_lab/ need an instructor's key: user name = access key id, "
                      "password = secret access key (slurmlab students add NAME --instructor)")
    try:
        akid, _, secret = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise Refused("malformed", "console", "Authorization: Basic credentials are not base64 of user:password") from None
    who = registry.by_key(akid)
    if who is None or not hmac.compare_digest(registry.secret_of(who).encode(), secret.encode()):
        raise Refused("unknown-key", "console", "the access key id or secret access key is wrong")
    if not who.Instructor:
        raise Refused("mismatch", "console", f"student '{who.Name}' is not an instructor: the console and /_lab/ "
                      "show every student's clusters (slurmlab students add NAME --instructor makes an instructor key)")
    return who
