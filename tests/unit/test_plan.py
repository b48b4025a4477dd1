"""The pure planner (lab.engine.plan), rule by rule: launch order, who may configure, the join
batching window. Rows are built directly; no store, no provider, no engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from lab.engine import plan as planner
from lab.engine.plan import JOIN_MAX_WAIT_S, JOIN_QUIET_S, VM_UP_PHASES, join_wait, plan
from lab.store.db import ClusterRow, GroupRow, NodeRow

NOW = 1000.0


def cluster(mode: str | None = "Continuous", status: str = "Creating") -> ClusterRow:
    spec = {"NodeProvisioningMode": mode} if mode else {}
    return ClusterRow("demo", "arn:x", status, None, spec, "fake", 1, 0.0)


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
    expect: dict[str, list]  # kind -> sorted node short names; "join" -> [(batch short names, reason)]
    mode: str | None = "Continuous"
    observed: dict[str, str] = field(default_factory=dict)  # extra VMs (short name -> state)
    busy: set[str] = field(default_factory=set)  # short names, or "join"
    extra: dict[str, dict] = field(default_factory=dict)  # short name -> more NodeRow fields
    computes: int = 2
    gpus: int = 0
    join_wait: float | None = None
    kw: dict = field(default_factory=dict)  # plan() keyword arguments


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
]


def run_case(c: Case) -> planner.Plan:
    gs = groups(computes=c.computes, logins=int(any(k.startswith("login") for k in c.nodes)), gpus=c.gpus)
    nodes = [node(short, phase, **c.extra.get(short, {})) for short, phase in c.nodes.items()]
    # a VM for every node whose phase says it has one (a failed node that had booted keeps it)
    observed = {n.name: "running" for n in nodes if n.phase in VM_UP_PHASES or (n.phase == "failed" and n.booted_at)}
    observed.update({f"demo-{k}": v for k, v in c.observed.items()})
    busy = {b if b == "join" else f"demo-{b}" for b in c.busy}
    return plan(cluster(c.mode), gs, nodes, observed, busy, NOW, **c.kw)


def short(name: str) -> str:
    return name.removeprefix("demo-")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_rules(case: Case):
    p = run_case(case)
    for kind, want in case.expect.items():
        if kind in ("join", "leave"):
            got = [(tuple(short(x) for x in a.batch), a.reason) for a in p.actions if a.kind == kind]
            if kind == "leave":
                got = [x for b, _ in got for x in b]
            assert got == want, f"{kind}: {got} != {want}; all actions {p.actions}"
        else:
            got = sorted(short(a.node) for a in p.actions if a.kind == kind)
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


def test_defaults():
    assert (JOIN_QUIET_S, JOIN_MAX_WAIT_S) == (10.0, 30.0)  # measured: two compute nodes configured 7 s apart
    assert planner.JOIN_COMING_PHASES == {"booted", "configuring"}


def test_boot_slots_name_the_waiting_nodes():
    p = run_case(Case("x", {**ALL_PLANNED, "controller-1": "running"}, {}, kw={"boot_slots": 1}))
    assert [short(a.node) for a in p.actions if a.kind == "launch"] == ["login-1"]
    assert [short(n) for n in p.boot_waiting] == ["compute-1", "compute-2"]


def test_boot_slots_from_the_host(monkeypatch):
    from lab.engine import daemon
    from lab.host import kvm

    monkeypatch.setenv("SLURMLAB_BOOT_SLOTS", "3")
    assert daemon.boot_slots() == {"vagrant": 3}
    monkeypatch.setenv("SLURMLAB_BOOT_SLOTS", "0")
    assert daemon.boot_slots() == {}
    monkeypatch.delenv("SLURMLAB_BOOT_SLOTS")
    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"usable": True})())
    assert daemon.boot_slots() == {}  # KVM: boots are cheap, no limit
    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"usable": False})())
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert daemon.boot_slots() == {"vagrant": 2}  # emulation: one per core
