"""Paging and time filters of the List operations: one pager, tokens that name their listing."""

from __future__ import annotations

import base64
import json
from typing import Any

from lab.api import model
from lab.api.model import ApiError

DEFAULT_PAGE = 100  # MaxResults when a list request gives none (the model's maximum)


def _token(kind: str, position: Any) -> str:
    raw = json.dumps({"k": kind, "p": position}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _untoken(kind: str, token: str | None) -> Any:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        d = json.loads(raw)
        if d["k"] != kind:
            raise ValueError
        return d["p"]
    except Exception:  # noqa: BLE001 - any garbage is the same error
        raise ApiError("ValidationException", "NextToken: not a token this server issued for this operation "
                       "(pass the NextToken of the previous response, unchanged)") from None


def paged(items: list, body: dict, kind: str, key: str) -> dict:
    """One page of `items` as `{key: [...], "NextToken"?}`: MaxResults (default DEFAULT_PAGE) from the
    position the request's NextToken names. `kind` keeps one listing's tokens out of another's."""
    start = _untoken(kind, body.get("NextToken")) or 0
    if not isinstance(start, int) or start < 0:
        raise ApiError("ValidationException", "NextToken: not a token this server issued for this operation")
    n = body.get("MaxResults") or DEFAULT_PAGE
    out: dict[str, Any] = {key: items[start:start + n]}
    if start + n < len(items):
        out["NextToken"] = _token(kind, start + n)
    return out


def between(t: float | None, body: dict, after: str, before: str) -> bool:
    lo = model.timestamp(body.get(after))
    hi = model.timestamp(body.get(before))
    if lo is None and hi is None:
        return True
    if t is None:
        return False
    return (lo is None or t > lo) and (hi is None or t < hi)
