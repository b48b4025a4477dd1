"""Test doubles: a provider and a configurer that record calls and can be told to fail. Both
implement the whole contract (lab.providers.base.Provider, lab.configure.base.Configurer) with
blocking methods: the engine runs them in threads, as it runs Vagrant and Ansible."""

from __future__ import annotations

import threading

from lab.configure.base import Configurer, ConfigureError
from lab.configure.inventory import ClusterContext
from lab.providers.base import Checkpoints, LaunchError, Observed, Provider


class FakeProvider(Provider, Checkpoints):
    name = "fake"
    id_prefix = "i-fake"

    def __init__(self):
        self.vms: dict[str, dict[str, str]] = {}
        self.fail_launch: dict[str, int] = {}  # node -> how many more launches fail (transient)
        self.fail_for_good: dict[str, str] = {}  # node -> the permanent failure every launch raises
        self.launched: list[str] = []
        self.rebooted: list[str] = []
        self.removed: list[str] = []
        self.saved: dict[tuple[str, str], tuple[dict, dict]] = {}  # checkpoints
        self.lock = threading.Lock()

    def allocate(self, cluster, name, used, preferred_index=0):
        i = 10
        while f"10.0.{preferred_index}.{i}" in used:
            i += 1
        return f"10.0.{preferred_index}.{i}", "52:54:00:00:00:01"

    def prepare(self, cluster, machines, preferred_index=0, box=None):
        self.vms.setdefault(cluster, {})

    def ensure(self, cluster, machine):
        with self.lock:
            self.launched.append(machine.name)
            if machine.name in self.fail_for_good:
                raise LaunchError(self.fail_for_good[machine.name], transient=False)
            if self.fail_launch.get(machine.name, 0) > 0:
                self.fail_launch[machine.name] -= 1
                raise LaunchError(f"{machine.name}: injected launch failure")
            self.vms.setdefault(cluster, {})[machine.name] = "running"
        return Observed(machine.name, "running", machine.address)

    def reboot(self, cluster, name):
        with self.lock:
            self.rebooted.append(name)
            if name not in self.vms.get(cluster, {}):
                raise LaunchError(f"{name}: no VM to reboot")
            self.vms[cluster][name] = "running"
        return Observed(name, "running")

    def observe(self, cluster):
        return {n: Observed(n, s) for n, s in self.vms.get(cluster, {}).items()}

    def remove(self, cluster, names):
        for n in names:
            self.vms.get(cluster, {}).pop(n, None)
            self.removed.append(n)

    def delete_cluster(self, cluster):
        self.vms.pop(cluster, None)
        return []

    def checkpoint(self, cluster, tag, record):
        self.saved[(cluster, tag)] = (record, dict(self.vms.get(cluster, {})))
        return {"tag": tag, "created": 0.0, "size": 0, "nodes": sorted(self.vms.get(cluster, {})), "timings": {}}

    def restore(self, cluster, tag):
        record, vms = self.saved[(cluster, tag)]
        self.vms[cluster] = dict(vms)
        return {"record": record, "timings": {}}

    def checkpoints(self, cluster):
        return [{"tag": t, "created": 0.0, "size": 0, "nodes": []} for (c, t) in self.saved if c == cluster]

    def delete_checkpoint(self, cluster, tag):
        self.saved.pop((cluster, tag))


class FakeConfigurer(Configurer):
    def __init__(self):
        self.calls: list[tuple] = []
        self.fail_configure: dict[str, int] = {}
        self.unhealthy: dict[str, str] = {}  # node -> the failure its next deep health checks report

    def context(self, cluster, groups, nodes):
        return ClusterContext(cluster.name, groups, nodes, ssh_key=None, munge_key=None, ssh_executable="ssh")

    def set_clocks(self, ctx):
        self.calls.append(("set_clocks",))
        return {}

    def health_check(self, ctx, targets, op_id, faults):
        self.calls.append(("health_check", tuple(targets)))
        return {n: [self.unhealthy[n]] if n in self.unhealthy else [] for n in targets}

    def configure(self, ctx, node, node_type):
        self.calls.append(("configure", node, node_type))
        if self.fail_configure.get(node, 0) > 0:
            self.fail_configure[node] -= 1
            raise ConfigureError(f"nodes.yml failed: {node}: task 'munge key' failed: no such file")

    def join(self, ctx, batch):
        self.calls.append(("join", tuple(batch)))

    def leave(self, ctx, names):
        self.calls.append(("leave", tuple(names)))
