"""ClientToken replay (BatchAddClusterNodes, MoveClusterNodes, Create/UpdateClusterExtension): a token
names one request for 8 hours; the same token with the same parameters gets the first answer again,
with other parameters a ValidationException."""

from __future__ import annotations

import hashlib
import json
import time

from lab.api.common import Lab
from lab.api.model import ApiError

CLIENT_TOKEN_TTL = 8 * 3600  # "valid for 8 hours" (the model's documentation of ClientToken)


def fingerprint(*request) -> str:
    """What a token's request is compared by (name the operation in it: one token, one operation)."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def seen(lab: Lab, token: str | None, fp: str) -> dict | None:
    """The answer a ClientToken already got (8 hours), None if new; the same token with other
    parameters is a ValidationException."""
    if not token:
        return None
    with lab.tokens_lock:
        now = time.time()
        for k in [k for k, (t, _, _) in lab.tokens.items() if now - t > CLIENT_TOKEN_TTL]:
            del lab.tokens[k]
        got = lab.tokens.get(token)
    if got and got[1] != fp:
        raise ApiError("ValidationException", "ClientToken: already used with other parameters "
                       "(a token names one request; use a new token for a new request)")
    return got[2] if got else None


def keep(lab: Lab, token: str | None, fp: str, result: dict) -> None:
    if token:
        with lab.tokens_lock:
            lab.tokens[token] = (time.time(), fp, result)
