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

BACKEND_ENV = "SLURMLAB_VERIFY_BACKEND"
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
        kw = {"ansible_inventory": inventory, "force_ansible": os.environ.get(BACKEND_ENV, "ansible") != "ssh"}
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


def test_ssh_password_login_only_where_wanted(cluster, node):
    """Keys only, except on login nodes of a cluster with student accounts (their shared password)."""
    want = "yes" if node in cluster.login and cluster.users() else "no"
    cfg = cluster.out(node, "/usr/sbin/sshd -T").lower().splitlines()
    values = [line.split(None, 1)[1] for line in cfg if line.startswith("passwordauthentication ")]
    assert values == [want], f"sshd on {node}: passwordauthentication {values or 'not reported'}, want {want}"


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


# ---------------------------------------------------------------- shared folders (NFS)
SHARED = ("/home", "/fsx")


def test_nfs_server_exports_shared_folders(cluster):
    ctl = cluster.controller
    assert active(cluster, ctl, "nfs-server") == "active", f"nfs-server is not active on {ctl}"
    exported = {line.split()[0] for line in cluster.out(ctl, "exportfs -s").splitlines() if line.strip()}
    missing = set(SHARED) - exported
    assert not missing, f"{ctl} does not export {sorted(missing)} (exportfs -s: {sorted(exported)})"


def test_shared_folders_mounted(cluster, non_controller):
    """Each shared folder answers (reading it mounts it) and is an NFS mount of the controller's."""
    server = cluster.slurm_name(cluster.controller)
    script = ("for p in " + " ".join(SHARED) + "; do timeout 40 ls \"$p/\" >/dev/null 2>&1 || echo \"$p unreadable\"; "
              "findmnt -n -o TARGET,FSTYPE,SOURCE --target \"$p/.\" | tail -n 1; done")
    lines = cluster.out(non_controller, script).splitlines()
    bad = [line for line in lines if "unreadable" in line]
    assert not bad, f"{non_controller}: {bad}"
    mounts = {f[0]: (f[1], f[2]) for f in (line.split() for line in lines) if len(f) == 3}
    for p in SHARED:
        fstype, source = mounts.get(p, ("none", "none"))
        assert fstype.startswith("nfs") and source == f"{server}:{p}", \
            f"{p} on {non_controller} is {fstype} from {source}, not NFS from {server}:{p}"


def test_shared_home_round_trip(cluster):
    """A file written on a compute node is at once readable on the login node (or the controller)."""
    users = cluster.users()
    writer = cluster.compute[0]
    reader = cluster.login[0] if cluster.login else cluster.controller
    token = f"slurmlab-verify-{os.getpid()}-{int(time.time())}"
    if users:
        user, path = users[0]["name"], f"/home/{users[0]['name']}/.{token}"
    else:
        user, path = None, f"/fsx/.{token}"
    cluster.out(writer, f"echo {token} > {path}", user)
    try:
        seen = cluster.out(reader, f"cat {path}", user)
        assert seen == token, f"{path} written on {writer} reads {seen!r} on {reader}"
    finally:
        cluster.run(writer, f"rm -f {path}", user)


# ---------------------------------------------------------------- student accounts
def test_student_accounts(cluster, node):
    """Every account of slurmlab_users exists with its uid, gid and home on every node."""
    users = cluster.users()
    if not users:
        pytest.skip("the cluster has no student accounts (slurmlab_users is empty)")
    want = {u["name"]: f"{u['uid']}:{u['uid']}:/home/{u['name']}" for u in users}
    got = {}
    for line in cluster.out(node, "getent passwd " + " ".join(want) + " || true").splitlines():
        f = line.split(":")
        if len(f) >= 6:
            got[f[0]] = f"{f[2]}:{f[3]}:{f[5]}"
    wrong = sorted(f"{n} is {got.get(n, 'missing')}, want {w}" for n, w in want.items() if got.get(n) != w)
    assert not wrong, f"{node}: " + "; ".join(wrong[:5]) + (f" (+{len(wrong) - 5} more)" if len(wrong) > 5 else "")


# ---------------------------------------------------------------- accounting
def test_slurmdbd_active_on_controller(cluster):
    ctl = cluster.controller
    for unit in ("mariadb", "slurmdbd"):
        assert active(cluster, ctl, unit) == "active", f"{unit} is not active on {ctl}"


def test_accounting_reachable_from_login(cluster, login):
    """As the submit user: the cluster is registered (slurmctld connected: ControlHost set) and
    sacct answers; with student accounts, each has an association."""
    user = cluster.user(login)
    cname = str(cluster.vars(login).get("slurmlab_cluster_name", "")).lower()
    rows = [r.split("|") for r in cluster.out(login, "sacctmgr -n -P show cluster format=cluster,controlhost", user).splitlines()]
    hosts = {r[0]: r[1] for r in rows if len(r) == 2}
    assert cname in hosts, f"cluster {cname} is not registered in slurmdbd (sacctmgr lists {sorted(hosts)})"
    assert hosts[cname], f"slurmctld of {cname} is not connected to slurmdbd (no ControlHost)"
    cluster.out(login, "sacct -n -X -S now-1hours -o jobid", user)
    users = [u["name"] for u in cluster.users()]
    if users:
        have = set(cluster.out(login, "sacctmgr -n -P show association format=user", user).split())
        missing = sorted(set(users) - have)
        assert not missing, f"no association in Slurm accounting for {missing[:5]}"


# ---------------------------------------------------------------- GPUs, cgroups
def test_gres_on_gpu_nodes(cluster, compute):
    """A node with emulated GPUs (slurmlab_gpus) has Gres=gpu:N in Slurm and N device files."""
    n = cluster.gpus(compute)
    name = cluster.slurm_name(compute)
    record = cluster.out(cluster.controller, f"scontrol --oneliner show node {shlex.quote(name)}")
    gres = re.search(r"\bGres=(\S+)", record)
    gres = gres.group(1) if gres else "(null)"
    if n == 0:
        assert "gpu" not in gres, f"{name} has no GPUs in the spec but Slurm shows Gres={gres}"
        return
    assert gres == f"gpu:{n}", f"{name}: Slurm shows Gres={gres}, want gpu:{n}"
    devices = cluster.out(compute, "ls /dev | grep -c '^nvidia[0-9]' || true")
    assert devices == str(n), f"{compute} has {devices} /dev/nvidiaN device files, want {n}"


def test_cgroup_confinement(cluster, compute):
    assert cluster.out(compute, "stat -f -c %T /sys/fs/cgroup") == "cgroup2fs", f"{compute} does not run cgroup v2"
    conf = dict(line.split("=", 1) for line in
                cluster.out(compute, "scontrol show config | sed -n 's/^\\(ProctrackType\\|TaskPlugin\\) *= */\\1=/p'").splitlines()
                if "=" in line)
    assert conf.get("ProctrackType") == "proctrack/cgroup", f"ProctrackType is {conf.get('ProctrackType')}"
    assert "task/cgroup" in conf.get("TaskPlugin", ""), f"TaskPlugin is {conf.get('TaskPlugin')}"
