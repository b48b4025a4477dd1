"""Image versions in the HyperPod views (issue 32): each node's CurrentImageReleaseVersion,
DesiredImageReleaseVersion and ImageVersionStatus, the same per instance group, the cluster's
aggregate (ClusterSummary.ImageVersionStatus), and the group's AutoPatchConfig as
ClusterAutoPatchConfigDetails. Read-only; the releases are the provider's (lab/box/releases.py).

- Current: the release the node's VM was made from (nodes.release, set at launch); a group's is its
  oldest node's (HyperPod keeps a group on one AMI: the oldest is what an update still has to move).
- Desired: a pinned ImageReleaseVersion; else the release an update or patch under way takes the node
  (or group) to; else, with AutoPatchConfig, the newest release of its line; else its current one.
- Status: lab.box.releases.status; a group's and the cluster's is the most urgent of their nodes'.
"""

from __future__ import annotations

from lab.box import releases as rel
from lab.engine.patching import META as PATCH_META  # the engine's patch state of a group
from lab.providers import registry
from lab.store.db import ClusterRow, GroupRow, NodeRow, Store


def _op_targets(st: Store, cluster: str) -> dict[str, str]:
    """node -> the release an update or patch under way takes it to."""
    out: dict[str, str] = {}
    for op in st.operations(cluster, "InProgress"):
        out.update((op.details or {}).get("NodeReleases") or {})
    return out


class Versions:
    """The image-version fields of one cluster's nodes and groups, computed once per view."""

    def __init__(self, st: Store, c: ClusterRow, groups: list[GroupRow], nodes: list[NodeRow],
                 releases: list | None = None):
        self.c = c
        self.releases = registry.releases(c.provider) if releases is None else releases
        self.targets = _op_targets(st, c.name)
        self.by_group: dict[str, list[NodeRow]] = {}
        for n in nodes:
            self.by_group.setdefault(n.grp, []).append(n)
        self.groups = groups
        self._memo: dict[tuple, str | None] = {}  # per group and release, not per node: a listing has 1,000

    def _release(self, version: str | None):
        return rel.find(self.releases, version) if version else None

    def _status(self, version: str) -> str | None:
        key = ("status", version)
        if key not in self._memo:
            self._memo[key] = rel.status(self.releases, self._release(version))
        return self._memo[key]

    def _desired_of_group(self, group: str, current: str | None) -> str | None:
        key = ("desired", group, current)
        if key not in self._memo:
            self._memo[key] = self._desired(group, current)
        return self._memo[key]

    def _desired(self, group: str, current: str | None) -> str | None:
        sg = self.c.group_spec(group)
        if sg.get("ImageReleaseVersion"):
            return sg["ImageReleaseVersion"]
        moving = {self.targets[n.name] for n in self.by_group.get(group, ()) if n.name in self.targets}
        if moving:
            return max(moving, key=rel.version_key)
        cur = self._release(current)
        if sg.get("AutoPatchConfig") and cur is not None:
            top = rel.newest(self.releases, cur.line)
            if top is not None:
                return top.version
        return current

    def node(self, n: NodeRow) -> dict:
        if not n.release:
            return {}
        out = {"CurrentImageReleaseVersion": n.release,
               "DesiredImageReleaseVersion": self.targets.get(n.name) or self._desired_of_group(n.grp, n.release)}
        st = self._status(n.release)
        if st:
            out["ImageVersionStatus"] = st
        return out

    def group(self, group: str) -> dict:
        mine = [n.release for n in self.by_group.get(group, ()) if n.release]
        if not mine:
            pin = self.c.group_spec(group).get("ImageReleaseVersion")
            return {"DesiredImageReleaseVersion": pin} if pin else {}
        current = min(mine, key=rel.version_key)
        out = {"CurrentImageReleaseVersion": current,
               "DesiredImageReleaseVersion": self._desired_of_group(group, current)}
        st = rel.worst(self._status(v) for v in set(mine))
        if st:
            out["ImageVersionStatus"] = st
        return out

    def cluster(self) -> str | None:
        return rel.worst(self.group(g.name).get("ImageVersionStatus") for g in self.groups)


def auto_patch_details(st: Store, c: ClusterRow, group: str) -> dict | None:
    """The group's AutoPatchConfig as DescribeCluster shows it (ClusterAutoPatchConfigDetails): the
    request's fields, the patch date the user asked for (Desired) and the one the engine keeps (Current)."""
    cfg = c.group_spec(group).get("AutoPatchConfig")
    if not cfg:
        return None
    out = {k: v for k, v in cfg.items() if k != "PatchSchedule"}
    asked = (cfg.get("PatchSchedule") or {}).get("NextPatchDate")
    state = st.meta(PATCH_META.format(cluster=c.name, group=group)) or {}
    if asked is not None:
        out["DesiredPatchSchedule"] = {"NextPatchDate": asked}
    nxt = state.get("next") if state.get("next") is not None else asked
    if nxt is not None:
        out["CurrentPatchSchedule"] = {"NextPatchDate": nxt}
    return out
