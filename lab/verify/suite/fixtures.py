"""Fixtures of the cluster suite, a pytest plugin (`-p lab.verify.suite.fixtures`): the cluster (from
--ansible-inventory and --hosts), `sinfo`, and each check parametrized by node name (`node`,
`compute`, `login`, `non_controller`), so a failure names the check and the node. A plugin rather
than a conftest.py: it also serves test files outside this folder (`slurmlab verify --tests DIR`).
See test_cluster.py for how to run the suite."""

from __future__ import annotations

import time

import pytest
from lab.verify.suite.labcluster import GOOD_STATES, Cluster

_cluster: Cluster | None = None


def _get_cluster(config) -> Cluster:
    global _cluster
    if _cluster is None:
        inv = config.getoption("ansible_inventory")
        if not inv:
            raise pytest.UsageError("the cluster suite needs --ansible-inventory PATH")
        pattern = (config.getoption("hosts") or "ansible://all").split(",")
        _cluster = Cluster(inv, pattern)
    return _cluster


def pytest_generate_tests(metafunc):
    """Parametrize by node name, so a failure names the check and the node."""
    wanted = [f for f in ("node", "compute", "login", "non_controller") if f in metafunc.fixturenames]
    if not wanted:
        return
    c = _get_cluster(metafunc.config)
    names = {
        "node": c.nodes,
        "compute": c.compute,
        "login": c.login,
        "non_controller": [n for n in c.nodes if n not in c.controllers],
    }[wanted[0]]
    metafunc.parametrize(wanted[0], names, ids=names)


@pytest.fixture(scope="session")
def cluster(request) -> Cluster:
    return _get_cluster(request.config)


@pytest.fixture(scope="session")
def sinfo(cluster) -> dict[str, dict]:
    """{node: {"states": {...}, "partitions": {...}}} from `sinfo -N` on the controller.
    Waits up to 60 s for transient states (completing after the submit test) to settle."""
    want = {cluster.slurm_name(n) for n in cluster.compute}
    deadline = time.monotonic() + 60
    while True:
        rows: dict[str, dict] = {}
        for line in cluster.out(cluster.controller, "sinfo -N -h -o '%N|%P|%T'").splitlines():
            parts = line.strip().split("|")
            if len(parts) != 3:
                continue
            node, part, state = parts
            r = rows.setdefault(node, {"states": set(), "partitions": set()})
            r["partitions"].add(part.rstrip("*"))
            r["states"].add(state)
        settled = all(n in rows and rows[n]["states"] <= GOOD_STATES for n in want)
        if settled or time.monotonic() > deadline:
            return rows
        time.sleep(3)
