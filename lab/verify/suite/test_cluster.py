"""Checks a running Slurm cluster through its Ansible inventory (docs/verify.md).

Run with `slurmlab verify NAME`, or directly:
    python -m pytest lab/verify/suite --ansible-inventory inventory.yml --hosts ansible://all

Every command goes through Ansible (testinfra's ansible backend with force_ansible), so the
inventory's connection vars (ansible_ssh_executable, keys, become) apply as they do for playbooks.
Groups: slurm_controller (one host), slurm_compute (one or more), slurm_login (optional).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time

import pytest
import testinfra

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
        kw = {"ansible_inventory": inventory, "force_ansible": True}
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


def active(c: Cluster, name: str, unit: str) -> str:
    return c.run(name, f"systemctl is-active {unit}").stdout.strip()


# ---------------------------------------------------------------- inventory
def test_inventory_groups(cluster):
    assert len(cluster.controllers) == 1, f"{CONTROLLER} must hold exactly one host: {cluster.controllers}"
    assert cluster.compute, f"{COMPUTE} holds no host"


# ---------------------------------------------------------------- munge
def test_munge_active(cluster, node):
    assert active(cluster, node, "munge") == "active", f"munge is not active on {node}"


def test_munge_key_same_on_every_node(cluster):
    # Digests are computed on the nodes; the key itself never leaves them.
    digests = {n: cluster.out(n, f"sha256sum {MUNGE_KEY}").split()[0] for n in cluster.nodes}
    assert len(set(digests.values())) == 1, "munge keys differ (sha256): " + ", ".join(
        f"{n}={d[:12]}" for n, d in sorted(digests.items()))


def test_munge_key_mode_and_owner(cluster, node):
    assert cluster.out(node, f"stat -c '%a %U' {MUNGE_KEY}") == "400 munge", \
        f"{MUNGE_KEY} on {node} must be mode 0400 owned by munge"


# ---------------------------------------------------------------- daemons
def test_slurmctld_active_on_controller(cluster):
    assert active(cluster, cluster.controller, "slurmctld") == "active"


def test_slurmctld_not_on_other_nodes(cluster, non_controller):
    assert active(cluster, non_controller, "slurmctld") != "active"
    assert cluster.run(non_controller, "pgrep -x slurmctld").stdout.strip() == "", "a slurmctld process runs"


def test_slurmd_active_on_compute(cluster, compute):
    assert active(cluster, compute, "slurmd") == "active", f"slurmd is not active on {compute}"


def test_sackd_active_on_login(cluster, login):
    assert active(cluster, login, "sackd") == "active", f"sackd is not active on {login}"


def test_slurmd_not_on_login(cluster, login):
    assert active(cluster, login, "slurmd") != "active"
    assert cluster.run(login, "pgrep -x slurmd").stdout.strip() == "", "a slurmd process runs"


def test_login_submits_and_queries(cluster, login):
    user = cluster.user(login)
    job = cluster.out(login, "sbatch --parsable --output=/dev/null --job-name=slurmlab-verify --wrap true", user)
    job_id = job.split(";")[0]
    assert job_id.isdigit(), f"sbatch printed {job!r}, not a job id"
    cluster.out(login, "squeue", user)
    listed = cluster.out(login, f"squeue -h -t all -j {job_id} -o %i", user).split()
    assert job_id in listed, f"job {job_id} submitted on {login} is not in squeue"


# ---------------------------------------------------------------- scheduling
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


def test_compute_node_state_in_sinfo(cluster, sinfo, compute):
    name = cluster.slurm_name(compute)
    assert name in sinfo, f"{name} is not in `sinfo -N` on {cluster.controller}"
    assert sinfo[name]["states"] <= GOOD_STATES, f"{name} is {sorted(sinfo[name]['states'])}, not idle/allocated/mixed"


def test_compute_node_in_its_partitions(cluster, sinfo, compute):
    expected = cluster.expected_partitions(compute)
    if expected is None:
        pytest.skip(f"{compute} has no slurmlab_partitions host var")
    name = cluster.slurm_name(compute)
    assert name in sinfo, f"{name} is not in `sinfo -N`"
    missing = set(expected) - sinfo[name]["partitions"]
    assert not missing, f"{name} is in {sorted(sinfo[name]['partitions'])}, not in {sorted(missing)}"


def _srun_plan(cluster) -> list[tuple[str | None, list[str]]]:
    """One srun over all compute nodes in a partition they share; else one per partition."""
    nodes = [cluster.slurm_name(n) for n in cluster.compute]
    parts = {cluster.slurm_name(n): cluster.expected_partitions(n) for n in cluster.compute}
    if any(p is None for p in parts.values()):
        return [(None, nodes)]  # partitions unknown: the default partition
    common = set.intersection(*(set(p) for p in parts.values()))
    if common:
        return [(sorted(common)[0], nodes)]
    plan: dict[str, list[str]] = {}
    for n in nodes:
        plan.setdefault(parts[n][0], []).append(n)
    return sorted(plan.items())


def test_srun_covers_all_compute_nodes(cluster):
    where = cluster.login[0] if cluster.login else cluster.controller
    user = cluster.user(where)
    seen: set[str] = set()
    for partition, nodes in _srun_plan(cluster):
        p = f" -p {shlex.quote(partition)} -w {','.join(nodes)}" if partition else ""
        # --immediate: fail when the nodes cannot be allocated within SRUN_WAIT s (a down or
        # draining node) instead of queueing; timeout bounds a launch that hangs on a dead slurmd.
        cmd = f"timeout {SRUN_WAIT + 60} srun --immediate={SRUN_WAIT} -N{len(nodes)}{p} hostname"
        seen |= {line.strip().split(".")[0] for line in cluster.out(where, cmd, user).splitlines() if line.strip()}
    want = {cluster.slurm_name(n) for n in cluster.compute}
    assert want <= seen, f"srun from {where} did not reach {sorted(want - seen)} (saw {sorted(seen)})"


# ---------------------------------------------------------------- names, ssh, clocks
def test_names_resolve(cluster, node):
    others = [cluster.slurm_name(n) for n in cluster.nodes if n != node]
    if not others:
        pytest.skip("a single node")
    script = "for n in " + " ".join(shlex.quote(o) for o in others) + \
             "; do getent hosts \"$n\" >/dev/null || echo \"$n\"; done"
    unresolved = cluster.out(node, script).split()
    assert not unresolved, f"{node} cannot resolve {unresolved}"


def test_ssh_password_login_disabled(cluster, node):
    cfg = cluster.out(node, "/usr/sbin/sshd -T").lower().splitlines()
    values = [line.split(None, 1)[1] for line in cfg if line.startswith("passwordauthentication ")]
    assert values == ["no"], f"sshd on {node}: passwordauthentication {values or 'not reported'}"


def test_vagrant_insecure_key_not_authorized(cluster, node):
    files = ("for h in /root $(getent passwd | cut -d: -f6 | sort -u); do "
             "for f in \"$h\"/.ssh/authorized_keys*; do [ -f \"$f\" ] && echo \"$f\"; done; done")
    found = cluster.run(node, f"({files}) | sort -u | xargs -r grep -lF {VAGRANT_INSECURE_KEY}").stdout.split()
    assert not found, f"Vagrant's insecure key is authorized on {node} in {found}"


def _clock_offset(cluster, name: str) -> tuple[float, float]:
    """(remote clock - local clock, half the round trip): the best of two samples."""
    best = None
    for _ in range(2):
        t0 = time.time()
        remote = float(cluster.out(name, "date +%s.%N"))
        t1 = time.time()
        sample = (remote - (t0 + t1) / 2, (t1 - t0) / 2)
        if best is None or sample[1] < best[1]:
            best = sample
    return best


def test_clocks_within_one_second(cluster):
    ctl = cluster.controller
    ref, ref_err = _clock_offset(cluster, ctl)
    bad = []
    for n in cluster.nodes:
        if n == ctl:
            continue
        off, err = _clock_offset(cluster, n)
        diff, slack = off - ref, err + ref_err  # the round trips bound where each `date` ran
        if abs(diff) > CLOCK_TOLERANCE + slack:
            bad.append(f"{n} {diff:+.3f}s (allowed {CLOCK_TOLERANCE}s + {slack:.3f}s round trip)")
    assert not bad, f"clocks differ from {ctl}'s: " + "; ".join(bad)
