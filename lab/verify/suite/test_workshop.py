"""Checks of the workshop services: /home and /fsx shared over NFS from the controller, and Slurm
accounting (slurmdbd)."""

from __future__ import annotations

import os
import time

from lab.verify.suite.labcluster import active


# ---------------------------------------------------------------- shared folders (NFS)
SHARED = ("/home", "/fsx")


def test_nfs_server_exports_shared_folders(cluster):
    ctl = cluster.controller
    assert active(cluster, ctl, "nfs-server") == "active", f"nfs-server is not active on {ctl}"
    exported = {line.split()[0] for line in cluster.out(ctl, "exportfs -s").splitlines() if line.strip()}
    missing = set(SHARED) - exported
    assert not missing, f"{ctl} does not export {sorted(missing)} (exportfs -s: {sorted(exported)})"
    # with a state disk (docs/adr/0007), what the controller shares lives on it: a new VM finds it
    script = ("[ -b /dev/disk/by-id/virtio-slurmlab-state ] || { echo no-state-disk; exit 0; }; for p in "
              + " ".join(SHARED) + "; do findmnt -n -o SOURCE --target \"$p\" | tail -n 1; done")
    sources = cluster.out(ctl, script).split()
    if sources != ["no-state-disk"]:
        off = [p for p, src in zip(SHARED, sources) if not src.endswith(f"[/{p.strip('/')}]")]
        assert not off and len(sources) == len(SHARED), \
            f"{ctl} has a state disk but shares {off or SHARED} from elsewhere (findmnt: {sources})"


def test_shared_folders_mounted(cluster, non_controller):
    """Each shared folder answers (reading it mounts it) and is an NFS mount of the controller's, by the
    controller's name in every cluster (slurmlab-controller, /etc/hosts: docs/adr/0022)."""
    server = "slurmlab-controller"
    script = ("getent hosts slurmlab-controller; "
              "for p in " + " ".join(SHARED) + "; do timeout 40 ls \"$p/\" >/dev/null 2>&1 || echo \"$p unreadable\"; "
              "findmnt -n -o TARGET,FSTYPE,SOURCE --target \"$p/.\" | tail -n 1; done")
    lines = cluster.out(non_controller, script).splitlines()
    alias = lines.pop(0).split() if lines and not lines[0].startswith("/") else []
    assert alias[:1] == [cluster.vars(cluster.controller).get("ansible_host")], \
        f"{non_controller}: slurmlab-controller resolves to {alias[:1]}, not the controller's address"
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


# ---------------------------------------------------------------- JupyterHub (Lab.Jupyter)
def hub_health(cluster_name: str, port: int = 8000) -> str:
    """A shell command printing the status line of the hub's /hub/health on this node's proxy (bash's
    /dev/tcp: no curl in the box, and no Python start-up on an emulated CPU)."""
    return ("timeout 20 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + str(port) + "; printf \"GET /" + cluster_name
            + "/hub/health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n\" >&3; head -n 1 <&3' 2>&1 || true")


def test_jupyterhub_answers_on_login_when_enabled(cluster, login):
    """Lab.Jupyter: the hub and its proxy's service are active and the proxy answers /NAME/hub/health;
    without it, no hub runs."""
    v = cluster.vars(login)
    if not v.get("slurmlab_jupyter"):
        assert active(cluster, login, "jupyterhub") != "active", f"jupyterhub runs on {login} without Lab.Jupyter"
        return
    for unit in ("jupyterhub-proxy", "jupyterhub"):  # the proxy is a service of its own (issue 44)
        assert active(cluster, login, unit) == "active", \
            f"{unit} is not active on {login} (journalctl -u {unit} on the node says why)"
    status = cluster.out(login, hub_health(str(v.get("slurmlab_cluster_name"))))
    assert " 200 " in f"{status} ", f"JupyterHub on {login} does not answer /hub/health: {status or 'no answer'}"
