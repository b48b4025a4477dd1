"""Deep health checks (StartClusterHealthCheck): the request checked and recorded, and what a check's
result does to a node.

`start` checks the whole request before it writes anything (a bad group, instance id or check, a
node that is not Running, a cluster that is not InService: UsageError naming the field, nothing
changed), then records one DeepHealthCheck operation (its details keep the request's configurations
and each node's checks) and marks each node `healthcheck` (lab/engine/plan.py HEALTH_MARKS). The
engine runs the checks of every marked node in one task (`healthcheck` action) through the cluster's
configurer: real checks on real VMs (lab/configure/health.py), simulated ones on the sim provider
(lab/capacity.py `health_faults`: seeded, labelled so). bookkeeping.health_outcome says what a result does: nothing (passed), a reboot
or a replacement (NodeRecovery Automatic), or Failure until someone acts (NodeRecovery None).
"""

from __future__ import annotations

from lab.engine import daemon
from lab.engine.bookkeeping import HEALTH_CHECK
from lab.control.operations import new_op
from lab.engine.plan import HEALTH_ASKED, HEALTH_MARKS, leaving, node_status
from lab.control.views import get, named_group
from lab.errors import UsageError
from lab.store.db import Store

CHECKS = ("InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation")  # the model's DeepHealthCheckType


def start(st: Store, name: str, configurations: list[dict], *, start_engine: bool = False) -> str:
    """Record a deep health check of the nodes the configurations name; returns its operation id."""
    c = get(st, name)
    if c.status != "InService":
        raise UsageError(f"cluster '{name}' is {c.status}: a deep health check needs an InService cluster",
                         "wait until describe-cluster says InService")
    if not configurations:
        raise UsageError("DeepHealthCheckConfigurations: give at least one", "e.g. [{InstanceGroupName: compute, "
                         "DeepHealthChecks: [InstanceStress]}]")
    with st.tx():
        groups = {g.name: g for g in st.groups(name) if g.status != "Deleting"}
        nodes = [n for n in st.nodes(name) if not leaving(n)]
        by_id = {n.instance_id: n for n in nodes}
        checks: dict[str, list[str]] = {}
        for i, cfg in enumerate(configurations):
            where = f"DeepHealthCheckConfigurations[{i}]"
            g = cfg.get("InstanceGroupName")
            named_group(groups, f"{where}.InstanceGroupName", g, name)
            asked = cfg.get("DeepHealthChecks") or []
            bad = [k for k in asked if k not in CHECKS]
            if not asked or bad:
                raise UsageError(f"{where}.DeepHealthChecks: {bad[0]!r} is not a check" if bad else
                                 f"{where}.DeepHealthChecks: name at least one check", f"use {', '.join(CHECKS)}")
            chosen = [n for n in nodes if n.grp == g]
            if cfg.get("InstanceIds"):
                chosen = []
                for j, iid in enumerate(cfg["InstanceIds"]):
                    n = by_id.get(iid)
                    if n is None or n.grp != g:
                        raise UsageError(f"{where}.InstanceIds[{j}]: no instance '{iid}' in instance group '{g}'",
                                         "list-cluster-nodes shows the instance ids")
                    chosen.append(n)
            if not chosen:
                raise UsageError(f"{where}: instance group '{g}' has no instance to check", "scale it up first")
            for n in chosen:
                if n.phase != "running" or n.pending:
                    doing = "a deep health check" if n.pending in HEALTH_MARKS else (n.pending or n.message or n.phase)
                    raise UsageError(f"{where}: {n.name} ({n.instance_id}) is {node_status(n.phase, n.pending)} "
                                     f"({doing}): only a Running node with nothing else under way is checked",
                                     "wait until list-cluster-nodes shows it Running")
                mine = checks.setdefault(n.name, [])
                mine += [k for k in asked if k not in mine]
        op = new_op(name, HEALTH_CHECK, {n.grp for n in nodes if n.name in checks}, list(checks),
                    details={"Configurations": configurations, "Checks": checks})
        st.add_operation(op)
        for node in checks:
            st.update_node(name, node, pending=HEALTH_ASKED)
        shown = "; ".join(f"{n}: {', '.join(k)}" for n, k in checks.items())
        st.add_event(name, "Cluster", "Info", f"StartClusterHealthCheck: {shown}"[:500], operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return op.id
