"""The pure planner (lab.engine.plan) as one table, rows in, actions out: launch order, legacy vs
continuous, failure / retry / backoff, transient vs permanent launch failures, capacity, the join
window, boot slots, scaling down and leaving, reboot / replace / lost VMs, deletion and rollback.
Rows are built directly; no store, no provider, no engine."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from lab.engine import plan as planner
from lab.engine.plan import JOIN_MAX_WAIT_S, JOIN_QUIET_S, NO_RETRY, VM_UP_PHASES, join_wait, plan
from lab.providers.base import DISK_FULL
from lab.store.db import ClusterRow, GroupRow, NodeRow

NOW = 1000.0


def cluster(mode: str | None = "Continuous", status: str = "Creating", recovery: str | None = None,
            in_service_at: float | None = None) -> ClusterRow:
    spec = {"NodeProvisioningMode": mode} if mode else {}
    if recovery:
        spec["NodeRecovery"] = recovery
    return ClusterRow("demo", "arn:x", status, None, spec, "fake", 1, 0.0, in_service_at=in_service_at)


def groups(computes: int = 2, logins: int = 1, gpus: int = 0) -> list[GroupRow]:
    gs = [GroupRow("demo", "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "Creating")]
    if logins:
        gs.append(GroupRow("demo", "login", "ml.t3.medium", "Login", logins, [], 1, 768, "Creating"))
    gs.append(GroupRow("demo", "compute", "ml.c5.large", "Compute", computes, ["dev"], 1, 768, "Creating"))
    if gpus:
        gs.append(GroupRow("demo", "gpu", "ml.g5.xlarge", "Compute", gpus, ["gpu"], 1, 768, "Creating"))
    return gs


def node(short: str, phase: str, **kw) -> NodeRow:
    """node("compute-2", "configured", configured_at=...) -> the row of demo-compute-2."""
    grp, o = short.rsplit("-", 1)
    if phase in VM_UP_PHASES or phase == "failed":
        kw.setdefault("booted_at", 1.0)
    return NodeRow(cluster="demo", name=f"demo-{short}", grp=grp, ordinal=int(o), instance_id=f"i-{short}",
                   address=f"10.0.1.{10 + int(o)}", mac="m", phase=phase, **kw)


@dataclass
class Case:
    id: str
    nodes: dict[str, str]  # short name -> phase
    # kind -> sorted node short names ("create_node": group-ordinal, "drop_group": the group, node-less
    # kinds: the kind); "join" -> [(batch short names, reason)]; "status" -> {"cluster" or group: status}
    expect: dict[str, list]
    mode: str | None = "Continuous"
    observed: dict[str, str] = field(default_factory=dict)  # extra VMs (short name -> state)
    busy: set[str] = field(default_factory=set)  # short names, or "join"
    extra: dict[str, dict] = field(default_factory=dict)  # short name -> more NodeRow fields
    computes: int = 2
    gpus: int = 0
    join_wait: float | None = None
    kw: dict = field(default_factory=dict)  # plan() keyword arguments
    status: str = "Creating"  # the cluster's
    recovery: str | None = None  # NodeRecovery (None: Automatic)
    in_service_at: float | None = None
    group_status: dict[str, str] = field(default_factory=dict)  # group -> its recorded status
    protected: dict[str, str] = field(default_factory=dict)  # group -> why it is protected (recovery.py)


ALL_PLANNED = {"controller-1": "planned", "login-1": "planned", "compute-1": "planned", "compute-2": "planned"}
OTHERS = ["compute-1", "compute-2", "login-1"]
CTL_UP = {"controller-1": "running"}


def configured(ago: float | None) -> dict:
    return {"configured_at": None if ago is None else NOW - ago}


CASES = [
    # ---- 1. launch order (continuous): the controller first, the others once its VM is defined
    Case("continuous: controller not defined -> only the controller launches",
         ALL_PLANNED, {"launch": ["controller-1"]}),
    Case("continuous: controller launching, no VM yet -> nothing else launches",
         {**ALL_PLANNED, "controller-1": "launching"}, {"launch": []}, busy={"controller-1"}),
    Case("continuous: controller's domain defined (booting) -> the others launch",
         {**ALL_PLANNED, "controller-1": "launching"}, {"launch": OTHERS},
         busy={"controller-1"}, observed={"controller-1": "running"}),
    Case("continuous: controller's domain defined in any libvirt state (shutoff) -> the others launch",
         {**ALL_PLANNED, "controller-1": "failed"}, {"launch": OTHERS},
         observed={"controller-1": "shutoff"}, extra={"controller-1": {"retry_at": NOW + 60}}),
    Case("continuous: controller booted, being configured -> the others launch",
         {**ALL_PLANNED, "controller-1": "configuring"}, {"launch": OTHERS, "configure": []},
         busy={"controller-1"}),
    Case("continuous: controller running -> the others launch",
         {**ALL_PLANNED, **CTL_UP}, {"launch": OTHERS}),
    Case("continuous: a resumed `launching` node waits for the controller's VM too",
         {**ALL_PLANNED, "compute-1": "launching"}, {"launch": ["controller-1"]}),
    Case("continuous: a failed node's retry waits for the controller's VM too",
         {**ALL_PLANNED, "compute-1": "failed"}, {"launch": ["controller-1"]},
         extra={"compute-1": {"booted_at": None}}),
    Case("legacy: every VM launches at once",
         ALL_PLANNED, {"launch": ["compute-1", "compute-2", "controller-1", "login-1"]}, mode=None),

    # ---- 2. configure: compute nodes as soon as they are up, login nodes after the controller runs
    Case("continuous: compute configures before the controller runs, login does not",
         {"controller-1": "configuring", "login-1": "booted", "compute-1": "booted", "compute-2": "configuring"},
         {"configure": ["compute-1", "compute-2"]}, busy={"controller-1"}),
    Case("legacy: compute configures before the controller runs, login does not",
         {"controller-1": "booted", "login-1": "booted", "compute-1": "booted", "compute-2": "booted"},
         {"configure": ["compute-1", "compute-2", "controller-1"]}, mode=None),
    Case("controller running -> login configures too",
         {**CTL_UP, "login-1": "booted", "compute-1": "booted", "compute-2": "configuring"},
         {"configure": ["compute-1", "login-1"]}, busy={"compute-2"}),
    Case("a failed configure is retried at once for compute, after the controller for login",
         {"controller-1": "configuring", "login-1": "failed", "compute-1": "failed", "compute-2": "booted"},
         {"configure": ["compute-1", "compute-2"], "launch": []}, busy={"controller-1"}),
    Case("a login node found `configured` (old row) is configured again only after the controller",
         {"controller-1": "configuring", "login-1": "configured", "compute-1": "planned", "compute-2": "planned"},
         {"configure": []}, busy={"controller-1", "compute-1", "compute-2"}),

    # ---- 3. join: waits for the controller, for no other slurm.conf change, and for the window
    Case("join waits for the controller to run (compute configured early)",
         {"controller-1": "configuring", "login-1": "planned", "compute-1": "configured", "compute-2": "configured"},
         {"join": []}, busy={"controller-1", "login-1"},
         extra={"compute-1": configured(100), "compute-2": configured(100)}),
    Case("controller runs -> the early-configured nodes join at once, one batch",
         {**CTL_UP, "login-1": "configuring", "compute-1": "configured", "compute-2": "configured"},
         {"join": [(("compute-1", "compute-2"), "alone")]}, busy={"login-1"},
         extra={"compute-1": configured(100), "compute-2": configured(90)}),
    Case("nobody else coming -> join at once, even just configured",
         {**CTL_UP, "login-1": "running", "compute-1": "configured", "compute-2": "configured"},
         {"join": [(("compute-1", "compute-2"), "alone")]},
         extra={"compute-1": configured(0), "compute-2": configured(0)}),
    Case("resume: a node in `joining` (join cut short by a crash) -> join at once, others coming or not",
         {**CTL_UP, "compute-1": "joining", "compute-2": "configured", "compute-3": "configuring"},
         {"join": [(("compute-1", "compute-2"), "resume")]}, computes=3, busy={"compute-3"},
         extra={"compute-1": configured(1), "compute-2": configured(0)}),
    Case("quiet period not elapsed, another node configuring -> no join yet",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configuring"},
         {"join": []}, busy={"compute-2"}, extra={"compute-1": configured(2)}, join_wait=JOIN_QUIET_S - 2),
    Case("quiet period not elapsed, another node booted (not configuring yet) -> no join yet",
         {**CTL_UP, "compute-1": "configured", "compute-2": "booted"},
         {"join": [], "configure": ["compute-2"]}, extra={"compute-1": configured(4)}, join_wait=JOIN_QUIET_S - 4),
    Case("two configured 4 s apart, a third coming: window restarts with the newest",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configured", "compute-3": "configuring"},
         {"join": []}, computes=3, busy={"compute-3"},
         extra={"compute-1": configured(5), "compute-2": configured(1)}, join_wait=JOIN_QUIET_S - 1),
    Case("quiet period elapsed -> both join in one batch though a third is still configuring",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configured", "compute-3": "configuring"},
         {"join": [(("compute-1", "compute-2"), "quiet")]}, computes=3, busy={"compute-3"},
         extra={"compute-1": configured(JOIN_QUIET_S + 4), "compute-2": configured(JOIN_QUIET_S)}),
    Case("max wait: the oldest waited JOIN_MAX_WAIT_S -> join though the window keeps restarting",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configured", "compute-3": "configuring"},
         {"join": [(("compute-1", "compute-2"), "max_wait")]}, computes=3, busy={"compute-3"},
         extra={"compute-1": configured(JOIN_MAX_WAIT_S), "compute-2": configured(1)}),
    Case("max wait is the bound on join_wait",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configured", "compute-3": "configuring"},
         {"join": []}, computes=3, busy={"compute-3"},
         extra={"compute-1": configured(JOIN_MAX_WAIT_S - 2), "compute-2": configured(0)}, join_wait=2.0),
    Case("configured_at None (a row older than the column) counts as configured long ago",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configured", "compute-3": "configuring"},
         {"join": [(("compute-1", "compute-2"), "max_wait")]}, computes=3, busy={"compute-3"},
         extra={"compute-1": configured(None), "compute-2": configured(0)}),
    Case("every configured_at None -> quiet",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configuring"},
         {"join": [(("compute-1",), "quiet")]}, busy={"compute-2"}),
    Case("a compute node of another compute group coming also holds the batch",
         {**CTL_UP, "compute-1": "configured", "gpu-1": "booted"},
         {"join": [], "configure": ["gpu-1"]}, computes=1, gpus=1, extra={"compute-1": configured(1)},
         join_wait=JOIN_QUIET_S - 1),
    Case("a login node coming does not hold the batch",
         {**CTL_UP, "login-1": "configuring", "compute-1": "configured"},
         {"join": [(("compute-1",), "alone")]}, computes=1, busy={"login-1"}, extra={"compute-1": configured(0)}),
    Case("launching / planned compute nodes do not hold the batch",
         {**CTL_UP, "compute-1": "configured", "compute-2": "launching", "compute-3": "planned"},
         {"join": [(("compute-1",), "alone")], "launch": ["compute-3"]}, computes=3, busy={"compute-2"},
         extra={"compute-1": configured(0)}),
    Case("a leaving node configuring does not hold the batch",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configuring"},
         {"join": [(("compute-1",), "alone")]}, busy={"compute-2"},
         extra={"compute-1": configured(0), "compute-2": {"pending": "delete"}}),
    Case("a surplus node (target lowered) booted does not hold the batch",
         {**CTL_UP, "compute-1": "configured", "compute-2": "booted"},
         {"join": [(("compute-1",), "alone")], "remove": ["compute-2"]}, computes=1,
         extra={"compute-1": configured(0)}),
    Case("never while a join or a leave is in flight (both are the 'join' task)",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configured"},
         {"join": []}, busy={"join"}, extra={"compute-1": configured(100), "compute-2": configured(100)}),
    Case("never in the pass that starts a leave",
         {**CTL_UP, "compute-1": "configured", "compute-2": "running"},
         {"join": [], "leave": ["compute-2"]},
         extra={"compute-1": configured(100), "compute-2": {"pending": "delete", "joined_at": 5.0}}),
    Case("window parameters are plan() keyword arguments",
         {**CTL_UP, "compute-1": "configured", "compute-2": "configuring"},
         {"join": [(("compute-1",), "quiet")]}, busy={"compute-2"}, extra={"compute-1": configured(2)},
         kw={"join_quiet_s": 1.0, "join_max_wait_s": 10.0}),
    # ---- 4. boot slots: at most boot_slots VMs boot at once; controller, then login, then compute
    Case("boot slots: 2 slots, controller booting -> the login node takes the other slot",
         {**ALL_PLANNED, "controller-1": "launching"}, {"launch": ["login-1"]},
         busy={"controller-1"}, observed={"controller-1": "running"}, kw={"boot_slots": 2}),
    Case("boot slots: 2 slots, controller running, nothing booting -> login first, then the lowest compute",
         {**ALL_PLANNED, "controller-1": "running"}, {"launch": ["compute-1", "login-1"]},
         kw={"boot_slots": 2}),
    Case("boot slots: all slots taken -> nothing launches",
         {**CTL_UP, "login-1": "launching", "compute-1": "launching", "compute-2": "planned"},
         {"launch": []}, busy={"login-1", "compute-1"}, kw={"boot_slots": 2}),
    Case("boot slots: a resumed launch (no task) takes its slot again, no new one starts",
         {**CTL_UP, "login-1": "launching", "compute-1": "planned", "compute-2": "planned"},
         {"launch": ["compute-1", "login-1"]}, kw={"boot_slots": 2}),
    Case("boot slots: a booted node frees its slot",
         {**CTL_UP, "login-1": "booted", "compute-1": "launching", "compute-2": "planned"},
         {"launch": ["compute-2"], "configure": ["login-1"]}, busy={"compute-1"}, kw={"boot_slots": 2}),
    Case("boot slots: a failed node's retry waits for a slot like a new one",
         {**CTL_UP, "login-1": "launching", "compute-1": "launching", "compute-2": "failed"},
         {"launch": []}, busy={"login-1", "compute-1"}, extra={"compute-2": {"booted_at": None}},
         kw={"boot_slots": 2}),
    Case("boot slots: none (KVM) -> every node launches at once",
         {**ALL_PLANNED, "controller-1": "running"}, {"launch": OTHERS}),
    Case("boot slots: legacy mode honours them too",
         ALL_PLANNED, {"launch": ["controller-1", "login-1"]}, mode=None, kw={"boot_slots": 2}),
    Case("fork slots: forked compute nodes take no boot slot (a cold-booting GPU node holds the only one)",
         {**CTL_UP, "login-1": "running", "gpu-1": "launching", "compute-1": "planned", "compute-2": "planned"},
         {"launch": ["compute-1", "compute-2"]}, busy={"gpu-1"}, gpus=1,
         kw={"boot_slots": 1, "fork_slots": 4, "fork_groups": {"compute"}}),
    Case("fork slots: compute forks wait while the controller and the login node (they gate InService) come up",
         {**ALL_PLANNED, "controller-1": "launching"}, {"launch": ["login-1"]},
         busy={"controller-1"}, observed={"controller-1": "running"},
         kw={"boot_slots": 2, "fork_slots": 4, "fork_groups": {"controller", "login", "compute"}}),
    Case("fork slots: the gating nodes up -> every compute fork at once, up to the slots",
         {**CTL_UP, "login-1": "booted", "compute-1": "planned", "compute-2": "planned"},
         {"launch": ["compute-1", "compute-2"], "configure": ["login-1"]},
         kw={"boot_slots": 1, "fork_slots": 4, "fork_groups": {"controller", "login", "compute"}}),
    Case("fork slots: forks in flight hold theirs, cold boots are counted apart",
         {**CTL_UP, "login-1": "running", "compute-1": "launching", "compute-2": "planned", "gpu-1": "launching"},
         {"launch": []}, busy={"compute-1", "gpu-1"}, gpus=1,
         kw={"boot_slots": 1, "fork_slots": 1, "fork_groups": {"compute"}}),
    Case("fork slots: none -> every fork launches at once, cold boots still wait",
         {**CTL_UP, "login-1": "running", "gpu-1": "launching", "compute-1": "planned", "compute-2": "planned"},
         {"launch": ["compute-1", "compute-2"]}, busy={"gpu-1"}, gpus=1,
         kw={"boot_slots": 1, "fork_groups": {"compute"}}),
    # ---- 5. failure, retry, backoff (a transient failure: retry_at is a backoff away)
    Case("failed, backoff not over -> nothing; the group is Degraded",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"}, {"launch": [], "configure": [],
                                                                   "status": {"compute": "Degraded"}},
         computes=2, extra={"compute-1": {"booted_at": None, "retry_at": NOW + 5, "attempts": 1}}),
    Case("failed, backoff over, no VM -> launched again (capacity counted)",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"}, {"launch": ["compute-1"], "short": []},
         extra={"compute-1": {"booted_at": None, "retry_at": NOW - 1, "attempts": 2}}),
    Case("failed configure, VM up, backoff over -> configured again",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"}, {"configure": ["compute-1"], "launch": []},
         extra={"compute-1": {"retry_at": NOW - 1}}),
    Case("failed, its VM stopped -> started again without new capacity (it holds its instance)",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"}, {"launch": ["compute-1"], "short": []},
         observed={"compute-1": "shutoff"}, extra={"compute-1": {"retry_at": NOW - 1}},
         kw={"limits": {"ml.c5.large": 1}, "used": {"ml.c5.large": 2}}),
    # ---- 6. transient vs permanent launch failure
    Case("permanent launch failure (retry_at NO_RETRY) -> never retried, Failure until replaced or deleted",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"},
         {"launch": [], "configure": [], "short": [], "status": {"compute": "Degraded"}},
         extra={"compute-1": {"booted_at": None, "retry_at": NO_RETRY, "attempts": 1}}),
    Case("permanent launch failure, continuous create -> the cluster still goes InService",
         {**CTL_UP, "login-1": "running", "compute-1": "failed", "compute-2": "running"},
         {"launch": [], "rollback": [], "status": {"cluster": "InService", "compute": "Degraded"}},
         extra={"compute-1": {"booted_at": None, "retry_at": NO_RETRY, "attempts": 1}}),
    Case("permanent launch failure, legacy create -> rollback at once (no waiting for the attempts)",
         {"controller-1": "running", "login-1": "running", "compute-1": "failed", "compute-2": "running"},
         {"rollback": ["compute-1"], "launch": []}, mode=None,
         extra={"compute-1": {"booted_at": None, "retry_at": NO_RETRY, "attempts": 1}}),
    Case("transient launch failure, legacy create, attempts left -> retried, no rollback",
         {"controller-1": "running", "login-1": "running", "compute-1": "failed", "compute-2": "running"},
         {"rollback": [], "launch": ["compute-1"]}, mode=None,
         extra={"compute-1": {"booted_at": None, "retry_at": NOW - 1, "attempts": 2}}),
    Case("transient launch failure, legacy create, attempts used up -> rollback",
         {"controller-1": "running", "login-1": "running", "compute-1": "failed", "compute-2": "running"},
         {"rollback": ["compute-1"], "launch": []}, mode=None,
         extra={"compute-1": {"booted_at": None, "retry_at": NOW - 1, "attempts": 3}}),
    Case("a permanent failure replaced (BatchReplaceClusterNodes) -> replace",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"}, {"replace": ["compute-1"], "launch": []},
         extra={"compute-1": {"booted_at": None, "retry_at": NO_RETRY, "pending": "replace"}}),
    # ---- 7. capacity
    Case("capacity for one more compute -> one launches, the other is short",
         {**CTL_UP, "compute-1": "planned", "compute-2": "planned"}, {"launch": ["compute-1"], "short": ["compute-2"]},
         kw={"limits": {"ml.c5.large": 1}, "used": {}}),
    Case("capacity used up elsewhere in the lab -> both short, the controller's type unaffected",
         {"controller-1": "planned", "compute-1": "planned", "compute-2": "planned"},
         {"launch": ["controller-1"], "short": ["compute-1", "compute-2"]}, mode=None,
         kw={"limits": {"ml.c5.large": 3}, "used": {"ml.c5.large": 3}}),
    Case("capacity limit on another type only -> no shortage",
         {**CTL_UP, "compute-1": "planned", "compute-2": "planned"}, {"launch": ["compute-1", "compute-2"],
                                                                      "short": []},
         kw={"limits": {"ml.g5.xlarge": 0}, "used": {}}),
    # ---- 8. counts: growing, scaling down, leaving
    Case("target above the records -> a record per missing ordinal",
         {**CTL_UP, "compute-1": "running", "compute-3": "running"}, {"create_node": ["compute-2", "compute-4"]},
         computes=4),
    Case("target lowered, the surplus joined Slurm -> it leaves (drain, slurm.conf) in one batch",
         {**CTL_UP, "compute-1": "running", "compute-2": "running", "compute-3": "running"},
         {"leave": ["compute-2", "compute-3"], "remove": []}, computes=1,
         extra={"compute-2": {"joined_at": 5.0}, "compute-3": {"joined_at": 5.0}}),
    Case("target lowered: a node not running goes before a running one",
         {**CTL_UP, "compute-1": "booted", "compute-2": "running"}, {"remove": ["compute-1"], "configure": []},
         computes=1),
    Case("BatchDeleteClusterNodes (pending delete) of a joined node -> leave",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"leave": ["compute-2"]},
         extra={"compute-2": {"pending": "delete", "joined_at": 5.0}}),
    Case("out of Slurm (removing, joined_at cleared) -> the VM is removed",
         {**CTL_UP, "compute-1": "running", "compute-2": "removing"}, {"remove": ["compute-2"], "leave": []},
         computes=1),
    Case("a failed remove waits for its retry time",
         {**CTL_UP, "compute-1": "running", "compute-2": "removing"}, {"remove": []}, computes=1,
         extra={"compute-2": {"retry_at": NOW + 30}}),
    Case("a leave waits while a join runs",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"leave": []}, busy={"join"},
         extra={"compute-2": {"pending": "delete", "joined_at": 5.0}}),
    Case("a node whose group is gone -> removed",
         {**CTL_UP, "compute-1": "running", "old-1": "running"}, {"remove": ["old-1"]}, computes=1),
    Case("a group being deleted with no node left -> dropped",
         {**CTL_UP}, {"drop_group": ["compute"]}, computes=0, group_status={"compute": "Deleting"}),
    Case("a VM with no record -> removed as an orphan",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"orphan": ["compute-9"]},
         observed={"compute-9": "running"}),
    # ---- 9. reboot, replace, VMs lost
    Case("BatchRebootClusterNodes -> reboot (the VM's state is the reason)",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"reboot": ["compute-1"]},
         extra={"compute-1": {"pending": "reboot"}}),
    Case("a reboot cut short (rebooting, no task) -> again; no VM: reason missing",
         {**CTL_UP, "compute-1": "rebooting", "compute-2": "running"}, {"reboot": ["compute-1"], "lost": []},
         observed={"compute-1": None}),
    Case("BatchReplaceClusterNodes, or a replace cut short -> replace",
         {**CTL_UP, "compute-1": "running", "compute-2": "replacing"}, {"replace": ["compute-1", "compute-2"]},
         extra={"compute-1": {"pending": "replace"}}),
    Case("a running node's VM gone, NodeRecovery Automatic -> lost (a new instance)",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"lost": ["compute-1"], "keep_lost": []},
         observed={"compute-1": None}),
    Case("a running node's VM stopped, NodeRecovery None -> kept as Failure",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"keep_lost": ["compute-1"], "lost": []},
         observed={"compute-1": "shutoff"}, recovery="None"),
    Case("a VM paused on a full pool disk -> kept, not lost (the provider resumes it); the others join",
         {**CTL_UP, "compute-1": "running", "compute-2": "configured"},
         {"lost": [], "keep_lost": [], "join": [(("compute-2",), "alone")]}, observed={"compute-1": DISK_FULL}),
    Case("a configured node's VM paused on a full disk -> no join until it runs again",
         {**CTL_UP, "compute-1": "running", "compute-2": "configured"}, {"join": [], "lost": []},
         observed={"compute-2": DISK_FULL}, extra={"compute-2": configured(60)}),
    # ---- 10. deletion, rollback, statuses
    Case("DeleteCluster -> one delete_cluster, nothing else",
         {**CTL_UP, "compute-1": "running"}, {"delete_cluster": ["delete_cluster"], "launch": []},
         status="Deleting", computes=1),
    Case("DeleteCluster already in flight -> nothing",
         {**CTL_UP, "compute-1": "running"}, {"delete_cluster": []}, status="Deleting", busy={"delete"}, computes=1),
    Case("a legacy create RollingBack -> rollback_cluster",
         {**CTL_UP, "compute-1": "failed"}, {"rollback_cluster": ["rollback_cluster"], "launch": []},
         mode=None, status="RollingBack", computes=1),
    Case("a Failed cluster -> nothing at all",
         {**CTL_UP, "compute-1": "planned"}, {"launch": [], "rollback_cluster": []}, status="Failed", computes=1),
    Case("an update settled -> InService again",
         {**CTL_UP, "login-1": "running", "compute-1": "running", "compute-2": "running"},
         {"status": {"cluster": "InService", "compute": "InService"}}, status="Updating", in_service_at=1.0,
         group_status={"compute": "Updating"}),
    Case("legacy create, not full -> not InService yet though controller and login run",
         {**CTL_UP, "login-1": "running", "compute-1": "running", "compute-2": "configuring"},
         {"status": {"cluster": None, "compute": "Creating"}}, mode=None, busy={"compute-2"}),
    # ---- deep health checks and moves (issue 12)
    Case("health check marks -> one healthcheck batch; the group stays InService",
         {**CTL_UP, "login-1": "running", "compute-1": "running", "compute-2": "running"},
         {"healthcheck": ["compute-1", "compute-2"], "status": {"compute": "InService"}}, status="InService",
         in_service_at=1.0, group_status={"compute": "InService"},
         extra={"compute-1": {"pending": "healthcheck"}, "compute-2": {"pending": "checking"}}),
    Case("a health check task in flight -> no second one",
         {**CTL_UP, "compute-1": "running"}, {"healthcheck": []}, status="InService", computes=1,
         extra={"compute-1": {"pending": "healthcheck"}}, busy={"healthcheck"}),
    Case("a marked node whose VM died -> lost, not checked",
         {**CTL_UP, "compute-1": "running"}, {"healthcheck": [], "lost": ["compute-1"]}, status="InService",
         computes=1, extra={"compute-1": {"pending": "checking"}}, observed={"compute-1": "shutoff"}),
    Case("a moving node detaches; a configured node's join waits for it",
         {**CTL_UP, "compute-1": "running", "compute-2": "configured"},
         {"detach": ["compute-1"], "join": []}, status="InService",
         extra={"compute-1": {"pending": "detach"}, "compute-2": configured(60)}),
    Case("an attaching node joins like any configured node",
         {**CTL_UP, "compute-1": "configured"}, {"join": [(("compute-1",), "alone")], "detach": []},
         status="InService", computes=1, extra={"compute-1": {"pending": "attach", **configured(60)}}),
    # ---- issue 26: protected groups, Slurm's marks (the rules themselves: tests/unit/test_recovery.py)
    Case("protected group: its failed node is not retried, the group Degraded",
         {**CTL_UP, "compute-1": "failed", "compute-2": "running"}, {"launch": [], "configure": [],
                                                                     "status": {"compute": "Degraded"}},
         extra={"compute-1": {"booted_at": None, "retry_at": NOW - 1, "attempts": 5}}, status="InService",
         protected={"compute": "5 failures in a row"}),
    Case("protected group: a VM that died is kept lost even with NodeRecovery Automatic",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"lost": [], "keep_lost": ["compute-1"]},
         observed={"compute-1": "shutoff"}, status="InService", protected={"compute": "5 failures in a row"}),
    Case("protected group: a planned node (a replacement decided before) still launches",
         {**CTL_UP, "compute-1": "planned", "compute-2": "running"}, {"launch": ["compute-1"]},
         status="InService", protected={"compute": "5 failures in a row"}),
    Case("a node Slurm calls down: its group Degraded though every VM runs",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"status": {"compute": "Degraded"}},
         extra={"compute-1": {"slurm": "Slurm: down* (Not responding)"}}, status="InService"),
    Case("the mark gone: InService again",
         {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {"status": {"compute": "InService"}},
         status="InService", group_status={"compute": "Degraded"}),
]


def run_case(c: Case) -> planner.Plan:
    gs = groups(computes=c.computes, logins=int(any(k.startswith("login") for k in c.nodes)), gpus=c.gpus)
    for g in gs:
        g.status = c.group_status.get(g.name, g.status)
        g.protected = c.protected.get(g.name)
    nodes = [node(short, phase, **c.extra.get(short, {})) for short, phase in c.nodes.items()]
    # a VM for every node whose phase says it has one (a failed node that had booted keeps it)
    observed = {n.name: "running" for n in nodes if n.phase in VM_UP_PHASES or (n.phase == "failed" and n.booted_at)}
    observed.update({f"demo-{k}": v for k, v in c.observed.items()})
    observed = {k: v for k, v in observed.items() if v is not None}  # None: no VM at all
    busy = {b if b in ("join", "delete", "rollback", "healthcheck") else f"demo-{b}" for b in c.busy}
    kw = dict(c.kw)
    if "used" in kw:
        kw["used"] = Counter(kw["used"])  # plan() adds its launches to it: a fresh one per run
    return plan(cluster(c.mode, c.status, c.recovery, c.in_service_at), gs, nodes, observed, busy, NOW, **kw)


def short(name: str) -> str:
    return name.removeprefix("demo-")


def label(a: planner.Action) -> str:
    if a.node:
        return short(a.node)
    if a.kind == "create_node":
        return f"{a.group}-{a.ordinal}"
    return a.group or a.kind


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_rules(case: Case):
    p = run_case(case)
    for kind, want in case.expect.items():
        if kind in ("join", "leave", "healthcheck", "detach"):
            got = [(tuple(short(x) for x in a.batch), a.reason) for a in p.actions if a.kind == kind]
            if kind != "join":
                got = [x for b, _ in got for x in b]
            assert got == want, f"{kind}: {got} != {want}; all actions {p.actions}"
        elif kind == "status":
            got = {k: p.cluster_status if k == "cluster" else p.group_status.get(k) for k in want}
            assert got == want, f"statuses: {got} != {want}"
        else:
            got = sorted(label(a) for a in p.actions if a.kind == kind)
            assert got == sorted(want), f"{kind}: {got} != {want}; all actions {p.actions}"
    if case.join_wait is None:
        assert p.join_wait is None
    else:
        assert p.join_wait == pytest.approx(case.join_wait)


# ---------------------------------------------------------------- join_wait() alone

def _n(phase: str, at: float | None) -> NodeRow:
    return node("compute-1", phase, configured_at=at)


@pytest.mark.parametrize("batch,coming,expect", [
    ([_n("joining", NOW)], True, (0.0, "resume")),
    ([_n("configured", NOW)], False, (0.0, "alone")),
    ([_n("configured", NOW - 1)], True, (JOIN_QUIET_S - 1, "window")),
    ([_n("configured", NOW - JOIN_QUIET_S)], True, (0.0, "quiet")),
    ([_n("configured", NOW - 29), _n("configured", NOW - 1)], True, (1.0, "window")),
    ([_n("configured", NOW - 30), _n("configured", NOW - 1)], True, (0.0, "max_wait")),
    ([_n("configured", None), _n("configured", NOW)], True, (0.0, "max_wait")),
    ([_n("configured", None)], True, (0.0, "quiet")),
], ids=["resume", "alone", "window", "quiet", "window-bounded-by-max", "max-wait", "none-is-old", "all-none"])
def test_join_wait(batch, coming, expect):
    wait, why = join_wait(batch, coming, NOW)
    assert (why, wait) == (expect[1], pytest.approx(expect[0]))


# ---------------------------------------------------------------- statuses around the new order

@pytest.mark.parametrize("mode,status", [("Continuous", "InService"), (None, None)])
def test_inservice_with_computes_configured_but_not_joined(mode, status):
    """Compute nodes configured early do not change InService: continuous when the controller and a
    login node run, legacy only at full size."""
    nodes = [node("controller-1", "running"), node("login-1", "running"),
             node("compute-1", "configured", configured_at=NOW), node("compute-2", "configured", configured_at=NOW)]
    observed = {n.name: "running" for n in nodes}
    p = plan(cluster(mode), groups(), nodes, observed, {"join"}, NOW)
    assert p.cluster_status == status and not p.full_size


def test_boot_slots_name_the_waiting_nodes():
    p = run_case(Case("x", {**ALL_PLANNED, "controller-1": "running"}, {}, kw={"boot_slots": 1}))
    assert [short(a.node) for a in p.actions if a.kind == "launch"] == ["login-1"]
    assert [short(n) for n in p.boot_waiting] == ["compute-1", "compute-2"]


def test_fork_slots_name_the_waiting_nodes_apart_from_boots():
    p = run_case(Case("x", {**CTL_UP, "login-1": "running", "gpu-1": "planned", "compute-1": "planned",
                            "compute-2": "planned"}, {}, gpus=1,
                      kw={"boot_slots": 0, "fork_slots": 1, "fork_groups": {"compute"}}))
    assert [short(a.node) for a in p.actions if a.kind == "launch"] == ["compute-1"]
    assert [short(n) for n in p.boot_waiting] == ["gpu-1"]
    assert [short(n) for n in p.fork_waiting] == ["compute-2"]


def test_fork_slots_from_the_host(monkeypatch):
    from lab.engine import slots
    from lab.host import kvm

    monkeypatch.setenv("SLURMLAB_FORK_SLOTS", "5")
    assert slots.fork_slots() == {"vagrant": 5}
    monkeypatch.setenv("SLURMLAB_FORK_SLOTS", "0")
    assert slots.fork_slots() == {}
    monkeypatch.delenv("SLURMLAB_FORK_SLOTS")
    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"usable": True})())
    assert slots.fork_slots() == {}  # KVM: no limit
    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"usable": False})())
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("lab.osutil.meminfo_mib", lambda field: 24 * 1024)
    assert slots.fork_slots() == {"vagrant": 4}  # emulation: two per core
    monkeypatch.setattr("lab.osutil.meminfo_mib", lambda field: 3 * 1024)
    assert slots.fork_slots() == {"vagrant": 2}  # a small host: one per GiB beyond its reserve
    monkeypatch.setattr("lab.osutil.meminfo_mib", lambda field: 512)
    assert slots.fork_slots() == {"vagrant": 1}


def test_boot_slots_from_the_host(monkeypatch):
    from lab.engine import slots
    from lab.host import kvm

    monkeypatch.setenv("SLURMLAB_BOOT_SLOTS", "3")
    assert slots.boot_slots() == {"vagrant": 3}
    monkeypatch.setenv("SLURMLAB_BOOT_SLOTS", "0")
    assert slots.boot_slots() == {}
    monkeypatch.delenv("SLURMLAB_BOOT_SLOTS")
    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"usable": True})())
    assert slots.boot_slots() == {}  # KVM: boots are cheap, no limit
    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"usable": False})())
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert slots.boot_slots() == {"vagrant": 2}  # emulation: one per core


def test_vms_paused_on_a_full_disk_are_named():
    p = run_case(Case("", {**CTL_UP, "compute-1": "running", "compute-2": "running"}, {},
                      observed={"controller-1": DISK_FULL, "compute-2": DISK_FULL}))
    assert sorted(p.disk_full) == ["demo-compute-2", "demo-controller-1"]
    busy = run_case(Case("", {**CTL_UP, "compute-1": "launching"}, {}, observed={"compute-1": DISK_FULL},
                         busy={"compute-1"}, computes=1))
    assert busy.disk_full == ["demo-compute-1"]  # a VM paused under its own launch says so too
    assert not [a for a in p.actions if a.kind in ("lost", "keep_lost", "reboot", "replace")]
