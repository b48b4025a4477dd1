"""The cluster under test, as the suite's checks see it: the inventory's groups, host vars, and
one testinfra host per node (Ansible's connection, or plain ssh: lab/verify/__init__.py). Shared by
fixtures.py (fixtures, parametrization), the test_*.py modules and a user's own checks
(`from lab.verify.suite.labcluster import active`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys

import pytest
import testinfra

from lab import settings

# Ansible from this interpreter's environment, and the connection defaults slurmlab's runner uses.
# Values already in the environment win, so another cluster's settings pass through.
os.environ["PATH"] = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"
_cp = f"/tmp/slurmlab-cp-{os.getuid()}"
for _k, _v in {
    "ANSIBLE_PIPELINING": "True",
    "ANSIBLE_HOST_KEY_CHECKING": "False",
    "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=120s -o UserKnownHostsFile=/dev/null "
                        "-o StrictHostKeyChecking=no -o ServerAliveInterval=15",
    "ANSIBLE_SSH_TRANSFER_METHOD": "piped",
    "ANSIBLE_CONTROL_PATH_DIR": _cp,
    "ANSIBLE_SSH_RETRIES": "3",
    "ANSIBLE_TIMEOUT": "30",
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_RETRY_FILES_ENABLED": "False",
    "ANSIBLE_DEPRECATION_WARNINGS": "False",
    "ANSIBLE_LOCALHOST_WARNING": "False",
}.items():
    os.environ.setdefault(_k, _v)

BACKEND_ENV = settings.VERIFY_BACKEND.name
CONTROLLER, LOGIN, COMPUTE = "slurm_controller", "slurm_login", "slurm_compute"
MUNGE_KEY = "/etc/munge/munge.key"
# The base64 body of Vagrant's well-known insecure public key (the trailing '==' left off).
VAGRANT_INSECURE_KEY = (
    "AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF8iallvQVp22WDkTkyrtvp9eWW6A8YVr+kz4TjGYe7gHzIw+niNltGEFHzD8+v1I2YJ6oXevct1YeS0o9H"
    "ZyN1Q9qgCgzUFtdOKLv6IedplqoPkcmF0aYet2PkEDo3MlTBckFXPITAMzF8dJSIFo9D8HfdOV0IAdx4O7PtixWKn5y2hMNG0zQPyUecp4pzC6k"
    "ivAIhyfHilFR61RGL+GPXQ2MWZWFYbAGjyiYJnAmCP3NOTd0jMZEnDkbUvxhMmBYSdETk1rRgm+R4LOzFUGaHqHDLKLX+FIPKcF6ZhehgeKlvUPs"
    "UeaEYo4WyQXg3dt/sFKGrwNHK4R7r7Qau4A"
)
GOOD_STATES = {"idle", "allocated", "mixed"}
CLOCK_TOLERANCE = 1.0  # seconds
SRUN_WAIT = 60  # seconds srun may wait for its allocation


class Cluster:
    """The inventory's three groups, their host vars, and one testinfra host per node."""

    def __init__(self, inventory: str, pattern: list[str]):
        self.inventory = inventory
        # ansible (default): every command is an Ansible module run; ssh: testinfra runs `ssh` itself
        # with the inventory's user, key and become (one multiplexed connection per node: ~20x faster
        # under emulation). `slurmlab verify` chooses ssh for its own clusters (lab/verify/__init__.py).
        kw = {"ansible_inventory": inventory, "force_ansible": settings.VERIFY_BACKEND.get() != "ssh"}
        wanted = {h.backend.host for h in testinfra.get_hosts(pattern, **kw)}
        groups = {}
        for g in (CONTROLLER, LOGIN, COMPUTE):
            try:
                names = [h.backend.host for h in testinfra.get_hosts([f"ansible://{g}"], **kw)]
            except RuntimeError:  # the group matched no host
                names = []
            groups[g] = sorted(n for n in names if n in wanted)
        self.controllers, self.login, self.compute = groups[CONTROLLER], groups[LOGIN], groups[COMPUTE]
        self.nodes = sorted(set(self.controllers) | set(self.login) | set(self.compute))
        self._kw = kw
        self._hosts: dict = {}
        self._vars: dict = {}

    @property
    def controller(self) -> str:
        if len(self.controllers) != 1:
            pytest.fail(f"the inventory's group {CONTROLLER} must hold exactly one host, it holds {self.controllers}")
        return self.controllers[0]

    def host(self, name: str):
        if name not in self._hosts:
            self._hosts[name] = testinfra.get_host(f"ansible://{name}", **self._kw)
        return self._hosts[name]

    def vars(self, name: str) -> dict:
        if name not in self._vars:
            self._vars[name] = self.host(name).backend.get_variables()
        return self._vars[name]

    def slurm_name(self, name: str) -> str:
        """The node's Slurm/host name: slurmlab_node_name, else the inventory hostname."""
        return str(self.vars(name).get("slurmlab_node_name") or name)

    def user(self, name: str) -> str:
        """Who submits jobs: slurmlab_verify_user, else ansible_user, else vagrant."""
        v = self.vars(name)
        return str(v.get("slurmlab_verify_user") or v.get("ansible_user") or "vagrant")

    def users(self) -> list[dict]:
        """The student accounts (slurmlab_users: [{name, uid}]), [] when the cluster has none."""
        return list(self.vars(self.controller).get("slurmlab_users") or [])

    def gpus(self, name: str) -> int:
        return int(self.vars(name).get("slurmlab_gpus") or 0)

    def expected_partitions(self, name: str) -> list[str] | None:
        """slurmlab_partitions; an empty list means the default partition; None: not known."""
        v = self.vars(name)
        if "slurmlab_partitions" not in v:
            return None
        parts = list(v["slurmlab_partitions"] or [])
        if not parts and v.get("slurmlab_partitions_default"):
            parts = [v["slurmlab_partitions_default"]]
        return parts

    def run(self, name: str, cmd: str, user: str | None = None):
        """Run `cmd` with sh on node `name`: as root (ansible_become), or as `user` via runuser."""
        if user:
            cmd = f"runuser -u {shlex.quote(user)} -- sh -c {shlex.quote('cd /tmp && ' + cmd)}"
        try:
            return self.host(name).run(cmd)
        except AssertionError as e:  # testinfra: ansible exited 4 (unreachable) or worse
            why = re.search(r'"msg": "(.*?)"', str(e))
            msg = f"{name}: Ansible could not run `{cmd}`: {why.group(1) if why else str(e)[:800]}"
        pytest.fail(msg, pytrace=False)

    def out(self, name: str, cmd: str, user: str | None = None) -> str:
        r = self.run(name, cmd, user)
        if r.rc != 0:
            pytest.fail(f"{name}: `{cmd}` exited {r.rc}: {(r.stderr or r.stdout).strip()[:500]}", pytrace=False)
        return r.stdout.strip()



def active(c: Cluster, name: str, unit: str) -> str:
    return c.run(name, f"systemctl is-active {unit}").stdout.strip()

