"""The six ClusterExtension operations (docs/adr/0017-cluster-extensions.md) on the lab's engine.

The request side is lab/control/extensions.py (the whole request checked, one row and one event
written, nothing else changed on a bad one); this module maps the ClusterArn to a cluster, replays a
ClientToken, filters and pages, and names the errors the model declares: a second extension of a
name is ResourceInUse, an extension being deleted is ConflictException (lab.api.common.lab_error).
"""

from __future__ import annotations

from collections.abc import Callable

from lab.api import model
from lab.api.common import Lab, cluster_name
from lab.api.model import ApiError
from lab.api.paging import paged
from lab.api.tokens import fingerprint, keep, seen
from lab.control import extensions


def _changed(lab: Lab, op: str, body: dict, do: Callable[[str], str]) -> dict:
    """A Create or Update: the answer a ClientToken already got, or `do(cluster)`'s ARN (kept for it)."""
    name = cluster_name(lab, body["ClusterArn"], "ClusterArn")
    token = body.get("ClientToken")
    fp = fingerprint(op, name, {k: v for k, v in body.items() if k != "ClientToken"})
    got = seen(lab, token, fp)
    if got is not None:
        return got
    result = {"ExtensionArn": do(name)}
    lab.engine()
    keep(lab, token, fp, result)
    return result


def create_cluster_extension(lab: Lab, body: dict) -> dict:
    def do(name: str) -> str:
        try:
            return extensions.create(lab.store, name, body["ExtensionName"], body.get("ExtensionVersion"),
                                     body.get("ConfigurationValues"), body.get("Tags")).arn
        except extensions.NameTaken as e:
            raise ApiError("ResourceInUse", e.message + (f" ({e.fix})" if e.fix else "")) from None
    return _changed(lab, "CreateClusterExtension", body, do)


def update_cluster_extension(lab: Lab, body: dict) -> dict:
    def do(name: str) -> str:
        return extensions.update(lab.store, name, body["ExtensionArn"], body.get("ExtensionVersion"),
                                 body.get("ConfigurationValues")).arn
    return _changed(lab, "UpdateClusterExtension", body, do)


def delete_cluster_extension(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterArn"], "ClusterArn")
    arn = extensions.delete(lab.store, name, body["ExtensionArn"]).arn
    lab.engine()
    return {"ExtensionArn": arn}


def describe_cluster_extension(lab: Lab, body: dict) -> dict:
    return extensions.describe(lab.store, cluster_name(lab, body["ClusterArn"], "ClusterArn"), body["ExtensionArn"])


def _at_or_between(t: float, body: dict) -> bool:
    """CreationTimeAfter / CreationTimeBefore, inclusive ("at or after", "at or before")."""
    lo, hi = model.timestamp(body.get("CreationTimeAfter")), model.timestamp(body.get("CreationTimeBefore"))
    return (lo is None or t >= lo) and (hi is None or t <= hi)


def list_cluster_extensions(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterArn"], "ClusterArn")
    items = [s for s in extensions.summaries(lab.store, name) if _at_or_between(s["CreationTime"], body)]
    return paged(items, body, "extensions", "Extensions")


def list_cluster_extension_versions(lab: Lab, body: dict) -> dict:
    return paged(extensions.version_summaries(body["ExtensionName"]), body, "extension-versions", "ExtensionVersions")


EXTENSION_HANDLERS: dict[str, Callable[[Lab, dict], dict]] = {
    "CreateClusterExtension": create_cluster_extension,
    "DescribeClusterExtension": describe_cluster_extension,
    "ListClusterExtensions": list_cluster_extensions,
    "ListClusterExtensionVersions": list_cluster_extension_versions,
    "UpdateClusterExtension": update_cluster_extension,
    "DeleteClusterExtension": delete_cluster_extension,
}
