"""The lab's rules for a group's maintenance fields (issue 32), on top of HyperPod's model (which checks
their types, enums, ranges and the ImageReleaseVersion pattern):

- ScheduledUpdateConfig.ScheduleExpression: a cron() HyperPod accepts (lab/cron.py), that fires again.
- AutoPatchConfig: DrainPolicy only with DrainFirst; DrainFirst needs DeploymentConfig's
  RollingUpdatePolicy.MaximumBatchSize (as the model documents); IdleWaitWindowInSeconds only with
  WhenIdle or WhenAllIdle. HyperPod documents DrainFirst for EKS clusters; the lab runs it on Slurm
  (a Slurm drain instead of pod evictions: docs/adr/0019).
- a group on the controller may not auto-patch or follow a schedule alone: the controller is replaced
  by UpdateClusterSoftware only (its state disk moves with it, docs/adr/0007).

Whether an ImageReleaseVersion names a release the lab has is the provider's to say (the releases are
its boxes): lab/control/pins.py, when the cluster is made or updated.
"""

from __future__ import annotations

import time
from typing import Any

from lab import cron

from ..problems import Loc, Problem


def check_maintenance(g: Any, loc: Loc, node_type: str | None, now: float | None = None) -> list[Problem]:
    if not isinstance(g, dict):
        return []
    out: list[Problem] = []
    su = g.get("ScheduledUpdateConfig")
    if isinstance(su, dict) and isinstance(su.get("ScheduleExpression"), str):
        where = loc + ("ScheduledUpdateConfig", "ScheduleExpression")
        try:
            c = cron.parse(su["ScheduleExpression"])
        except cron.CronError as e:
            out.append(Problem(where, str(e), "write it as cron(Minutes Hours Day-of-month Month Day-of-week Year)"))
        else:
            if c.next_after(time.time() if now is None else now) is None:
                out.append(Problem(where, f"'{c.text}' never fires again (its year is past)", "give * or a coming year"))
    ap = g.get("AutoPatchConfig")
    if isinstance(ap, dict):
        strategy = ap.get("PatchingStrategy")
        if "DrainPolicy" in ap and strategy != "DrainFirst":
            out.append(Problem(loc + ("AutoPatchConfig", "DrainPolicy"), f"DrainPolicy applies to PatchingStrategy "
                               f"DrainFirst only, not {strategy}", "remove DrainPolicy, or use DrainFirst"))
        if "IdleWaitWindowInSeconds" in ap and strategy == "DrainFirst":
            out.append(Problem(loc + ("AutoPatchConfig", "IdleWaitWindowInSeconds"), "IdleWaitWindowInSeconds applies "
                               "to WhenIdle and WhenAllIdle only", "remove it (DrainFirst waits DrainPolicy."
                               "DrainTimeoutInSeconds)"))
        size = (((ap.get("DeploymentConfig") or {}).get("RollingUpdatePolicy") or {}).get("MaximumBatchSize")
                if isinstance(ap.get("DeploymentConfig"), dict) else None)
        if strategy == "DrainFirst" and not size:
            out.append(Problem(loc + ("AutoPatchConfig", "DeploymentConfig"), "PatchingStrategy DrainFirst needs "
                               "DeploymentConfig.RollingUpdatePolicy.MaximumBatchSize (how many nodes drain at once)",
                               "add DeploymentConfig: {RollingUpdatePolicy: {MaximumBatchSize: {Type: INSTANCE_COUNT, "
                               "Value: 1}}}"))
    if node_type == "Controller":
        for key in ("AutoPatchConfig", "ScheduledUpdateConfig"):
            if g.get(key):
                out.append(Problem(loc + (key,), "the controller group is updated by UpdateClusterSoftware only (its "
                                   "state disk moves to the new VM; slurmctld stops meanwhile)",
                                   f"remove {key} from the controller group; give it to the login and compute groups"))
    return out
