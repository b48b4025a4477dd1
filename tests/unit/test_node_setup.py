"""The box's boot-time node setup (customize.sh writes it to /usr/local/lib/slurmlab/node-setup),
run against a directory tree: what it writes must be what the Ansible roles would write, so that
Ansible finds a node that booted right already converged (docs/adr/0002)."""

from __future__ import annotations

import base64
import subprocess

import jinja2
import pytest

from lab import paths
from lab.providers.base import MachineSpec
from lab.providers.vagrantfile import hosts_credential, node_credential, qemu_args
from tests.unit.test_box import _embedded

BOX_HOSTS = "127.0.0.1\tlocalhost\n127.0.1.1\tslurmlab\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
MACHINES = [
    MachineSpec("demo-controller-1", "controller", 1, 768, "m1", "10.213.7.10", "Controller"),
    MachineSpec("demo-login-1", "login", 1, 768, "m2", "10.213.7.11", "Login"),
    MachineSpec("demo-compute-1", "compute", 1, 768, "m3", "10.213.7.12", "Compute"),
]


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "root"
    for d in ("etc/munge", "etc/default", "etc/slurm", "etc/systemd/system/multi-user.target.wants", "run"):
        (root / d).mkdir(parents=True)
    (root / "etc/hosts").write_text(BOX_HOSTS)
    (root / "etc/slurm/slurm.conf").write_text("# from the package\n")
    script = tmp_path / "node-setup"
    script.write_text(_embedded("usr/local/lib/slurmlab/node-setup"))
    creds = tmp_path / "creds"
    creds.mkdir()
    return root, script, creds


def run(tree, **creds):
    root, script, cdir = tree
    for name, text in creds.items():
        (cdir / name.replace("_", ".", 1)).write_bytes(text if isinstance(text, bytes) else text.encode())
    env = {"PATH": "/usr/bin:/bin", "CREDENTIALS_DIRECTORY": str(cdir), "SLURMLAB_ROOT": str(root),
           "SLURMLAB_SYSTEMCTL": "true", "SLURMLAB_CHOWN": "true"}
    return subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, check=False)


def _role_template(role: str, name: str, **variables) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(paths.resource("roles", role, "templates"))),
                             trim_blocks=True, keep_trailing_newline=True)
    return env.get_template(name).render(**variables)


def _blockinfile(original: str, cluster: str, block: str) -> str:
    """What Ansible's blockinfile (insertafter EOF) leaves in a file without the block."""
    lines = [f"# BEGIN slurmlab cluster {cluster}", *block.splitlines(), f"# END slurmlab cluster {cluster}"]
    return original + "\n".join(lines) + "\n"


def test_without_credentials_nothing_changes(tree):
    r = run(tree)
    root = tree[0]
    assert r.returncode == 0 and "left to Ansible" in r.stdout
    assert (root / "etc/hosts").read_text() == BOX_HOSTS
    assert (root / "run/slurmlab/node-setup.status").read_text().startswith("none:")


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.node_type)
def test_a_node_is_set_up_as_the_roles_would_set_it_up(tree, machine):
    root = tree[0]
    key = bytes(range(256)) * 4
    r = run(tree, slurmlab_node=node_credential("demo", machine, "demo-controller-1"),
            slurmlab_hosts=hosts_credential(MACHINES), slurmlab_munge_key=key)
    assert r.returncode == 0, r.stderr
    assert (root / "etc/hostname").read_text() == machine.name + "\n"
    hosts_block = _role_template("common", "hosts_block.j2", slurmlab_controller_name="demo-controller-1",
                                 slurmlab_etc_hosts=[{"name": m.name, "address": m.address} for m in MACHINES])
    assert hosts_block.splitlines()[-1].endswith(" slurmlab-controller")  # the alias role templates rely on
    assert (root / "etc/hosts").read_text() == _blockinfile(BOX_HOSTS, "demo", hosts_block)
    k = root / "etc/munge/munge.key"
    assert k.read_bytes() == key and k.stat().st_mode & 0o777 == 0o400
    wants = sorted(p.name for p in (root / "etc/systemd/system/multi-user.target.wants").iterdir())
    status = (root / "run/slurmlab/node-setup.status").read_text()
    assert status.startswith("ok: ")
    if machine.node_type == "Compute":
        assert (root / "etc/default/slurmd").read_text() == _role_template(
            "slurm_node", "default-slurmd.j2", slurm_node_slurmd_options="--conf-server demo-controller-1")
        assert wants == ["munge.service", "slurmd.service"]
        assert not (root / "etc/slurm/slurm.conf").exists()
    elif machine.node_type == "Login":
        assert (root / "etc/default/sackd").read_text() == _role_template(
            "slurm_node", "default-sackd.j2", slurm_node_sackd_options="--conf-server demo-controller-1")
        assert wants == ["munge.service", "sackd.service"]
    else:
        assert wants == ["munge.service"] and (root / "etc/slurm/slurm.conf").exists()

    # a second boot (or a changed list) replaces the block in place, once
    more = [*MACHINES, MachineSpec("demo-compute-2", "compute", 1, 768, "m4", "10.213.7.13", "Compute")]
    assert run(tree, slurmlab_hosts=hosts_credential(more)).returncode == 0
    text = (root / "etc/hosts").read_text()
    assert text.count("# BEGIN slurmlab cluster demo") == 1 and "10.213.7.13 demo-compute-2\n" in text


@pytest.mark.parametrize("node, why", [
    ("name=Bad_Name\nrole=Compute\ncluster=demo\ncontroller=demo-controller-1\n", "name 'Bad_Name'"),
    ("name=demo-compute-1\nrole=Worker\ncluster=demo\ncontroller=demo-controller-1\n", "role 'Worker'"),
    ("name=demo-compute-1\nrole=Compute\ncluster=demo\n", "controller ''"),
    ("name=demo-compute-1\nrole=Compute\ncluster=demo\ncontroller=c\nextra=1\n", "unknown key 'extra'"),
])
def test_a_bad_credential_fails_with_the_reason_and_changes_nothing(tree, node, why):
    root = tree[0]
    r = run(tree, slurmlab_node=node, slurmlab_hosts=hosts_credential(MACHINES), slurmlab_munge_key=b"k" * 64)
    assert r.returncode == 1
    status = (root / "run/slurmlab/node-setup.status").read_text()
    assert status.startswith("failed: ") and why in status
    assert (root / "etc/hosts").read_text() == BOX_HOSTS and not (root / "etc/munge/munge.key").exists()


def test_a_bad_hosts_line_fails(tree):
    r = run(tree, slurmlab_node=node_credential("demo", MACHINES[2], "demo-controller-1"),
            slurmlab_hosts="10.0.0.1 ok-name\n10.0.0.2 bad;name\n")
    assert r.returncode == 1 and "bad line" in (tree[0] / "run/slurmlab/node-setup.status").read_text()


def test_qemu_args_carry_identity_but_never_the_munge_key():
    args = qemu_args("demo", MACHINES[2], MACHINES, "ssh-ed25519 AAAA k", "/var/lib/libvirt/slurmlab/credentials/demo/munge.key")
    joined = " ".join(args)
    assert "io.systemd.credential:system.hostname=demo-compute-1" in joined
    node = next(a for a in args if "slurmlab.node=" in a).split("slurmlab.node=", 1)[1]
    assert base64.b64decode(node).decode() == node_credential("demo", MACHINES[2], "demo-controller-1")
    assert args[-2:] == ["-fw_cfg", "name=opt/io.systemd.credentials/slurmlab.munge_key,"
                                    "file=/var/lib/libvirt/slurmlab/credentials/demo/munge.key"]
    # a bare VM (no node type) gets the SSH key only
    bare = qemu_args("demo", MachineSpec("x-1", "g", 1, 512, "m", "10.0.0.2"), MACHINES, "ssh-ed25519 AAAA k", "/k")
    assert len(bare) == 2 and "authorized_keys" in bare[1]


def test_qemu_readable_copy_is_private(tmp_path):
    from lab import secrets

    src = tmp_path / "munge.key"
    src.write_bytes(b"s" * 1024)
    dest = secrets.qemu_readable_copy(src, tmp_path / "creds" / "c" / "munge.key")
    assert dest.read_bytes() == b"s" * 1024
    assert dest.stat().st_mode & 0o777 == 0o400 and dest.parent.stat().st_mode & 0o777 == 0o700
    src.write_bytes(b"t" * 1024)
    assert secrets.qemu_readable_copy(src, dest).read_bytes() == b"t" * 1024


def test_renice_every_thread_of_a_process(tmp_path, monkeypatch):
    """The controller's qemu is favoured: every thread of the pid in libvirt's pid file is reniced."""
    import os
    import threading
    import time

    from lab.providers import priority

    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    (tmp_path / "demo-controller-1.pid").write_text(f"{os.getpid()}\n")
    assert priority.qemu_pid("demo-controller-1", tmp_path) == os.getpid()
    assert priority.qemu_pid("absent", tmp_path) is None
    before = os.getpriority(os.PRIO_PROCESS, worker.native_id)
    want = before + 1 if before < 19 else before - 1  # make test runs the unit tests at nice 19
    try:
        priority.favor_when_started("demo-controller-1", nice=want, poll=0.01, pid_dir=tmp_path)
        deadline = time.monotonic() + 3
        while os.getpriority(os.PRIO_PROCESS, worker.native_id) != want and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.getpriority(os.PRIO_PROCESS, worker.native_id) == want
    finally:
        stop.set()
        for tid in os.listdir("/proc/self/task"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), before)
            except OSError:
                pass
    monkeypatch.setenv("SLURMLAB_CONTROLLER_NICE", "0")
    assert priority.controller_nice() == 0
    monkeypatch.setenv("SLURMLAB_CONTROLLER_NICE", "x")
    assert priority.controller_nice() == priority.CONTROLLER_NICE
