"""Role templates (docs/adr/0022): a warm-start template (templates.py) on which the roles have done the
work every node of a role does the same way in every cluster, saved again; a node of that role is forked
from it and its configuration run (controller.yml, nodes.yml) finds that work done.

Built from the shape's plain template: a fork of it with no cluster identity on the templates' network
(no node name, no munge key, no Slurm daemon), `playbooks/template.yml` run on it by Ansible (the
`configure` callable: lab/configure/roletemplate.py, given by whoever builds; this package runs no
Ansible), then, through the guest agent, chrony stopped where its server is a cluster's name, the build's
key removed, the machine-id emptied, the page cache dropped, and the VM saved. A controller's template
holds a state disk (state.qcow2): formatted, the folders on it, MariaDB's datadir with slurm_acct_db and
slurmdbd's tables; its fork gets a copy as its cluster's new state disk (a controller whose state disk
exists already, a replaced one, is forked from the plain template: the saved memory expects this disk).

Under `<templates>/roles/<key>/`: disk.qcow2 (an overlay over the plain template's disk), mem.save,
state.qcow2 (controller), meta.json. The key is the plain template's key, the role and the hash of the
files of the roles template.yml runs for it: a changed role makes its templates stale (pruned with the
box's). A missing role template never stops a node: it is forked from the plain template and fully
configured, while the role template builds in the background (lab/providers/warm.py).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab import paths
from lab.providers import buildaddresses, templates
from lab.providers.templates import Shape, TemplateError

log = logging.getLogger(__name__)

ROLE_REVISION = 1
# per role: the Ansible group of its host in template.yml, and the roles whose files its template holds
ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "Controller": ("slurm_controller", ("common", "state_disk", "nfs_server", "accounting")),
    "Login": ("slurm_login", ("common", "nfs_client", "users")),
    "Compute": ("slurm_compute", ("common", "nfs_client", "users")),
}
BUILD_CLUSTER = "slurmlab-role-template"  # the build's inventory names no real cluster
SSH_TIMEOUT_S = 300.0
# room kept in the build VM's XML, saved with it, for its forks' XML (their names and paths); the plain
# template's room (templates.PAD_BYTES) holds the build VM's XML with this much padding
BUILD_PAD = templates.PAD_BYTES // 2

# configure(address, private_key, role, workdir) runs template.yml on the build VM; raises on failure
Configure = Callable[[str, Path, str, Path], None]

_building: set[str] = set()  # build VMs of this process: ended when it exits (a background build's engine stops)


@atexit.register
def _end_builds() -> None:
    if not _building:
        return
    from lab.host import libvirtd
    from lab.providers.domains import end_named

    try:
        conn = libvirtd.connect()
    except Exception:  # noqa: BLE001 - at exit: the next build of the key ends it (end_named first)
        return
    try:
        for name in list(_building):
            end_named(conn, name)
    finally:
        conn.close()


@dataclass(frozen=True)
class RoleTemplate(templates.Template):
    """A plain template's files (disk.qcow2 over the plain one's disk, mem.save, meta.json), and the
    controller's state disk."""

    role: str

    @property
    def state(self) -> Path:
        return self.folder / "state.qcow2"

    def is_complete(self) -> bool:
        need = [self.disk, self.memory, self.folder / "meta.json"] + ([self.state] if self.role == "Controller" else [])
        return all(f.is_file() for f in need)


def root() -> Path:
    return templates.root() / "roles"


def files_hash(role: str) -> str:
    """sha256 of the files of the roles template.yml runs for `role`, and of template.yml."""
    base = paths.resource("roles")
    h = hashlib.sha256()
    files = [("playbooks/template.yml", paths.resource("playbooks") / "template.yml")]
    for r in ROLES[role][1]:
        files += sorted((str(p.relative_to(base)), p) for p in (base / r).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts)
    for rel, f in files:
        h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def key(box: str, shape: Shape, driver: str, role: str) -> str:
    base = templates.key(box, shape, driver)
    doc = {"base": base, "role": role, "files": files_hash(role), "revision": ROLE_REVISION}
    return f"{base}-{role.lower()}-{hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:10]}"


def find(box: str, shape: Shape, driver: str, role: str) -> RoleTemplate | None:
    if role not in ROLES:
        return None
    try:
        k = key(box, shape, driver, role)
    except TemplateError:
        return None
    t = RoleTemplate(k, root() / k, role)
    return t if t.is_complete() else None


def failure(box: str, shape: Shape, driver: str, role: str) -> str | None:
    try:
        k = key(box, shape, driver, role)
    except TemplateError as e:
        return str(e)
    f = root() / f"{k}.failed"
    return f.read_text().strip() if f.exists() else None


def ensure(box: str, shape: Shape, driver: str, role: str, configure: Configure,
           progress: Callable[[str], None] = lambda s: None, nice: int = 0) -> RoleTemplate:
    """The role template, built now if there is none (under a lock). Raises TemplateError, also when an
    earlier build failed (`slurmlab box templates --rebuild` forgets it)."""
    from filelock import FileLock

    k = key(box, shape, driver, role)
    t = RoleTemplate(k, root() / k, role)
    if t.is_complete():
        return t
    root().mkdir(parents=True, exist_ok=True)
    os.chmod(root(), 0o755)
    with FileLock(str(root() / f"{k}.lock")):
        if t.is_complete():
            return t
        if (why := failure(box, shape, driver, role)) is not None:
            raise TemplateError(why)
        plain = templates.ensure(box, shape, driver, progress=progress)
        progress(f"building the {role} role template {k} (its roles' cluster-independent work, done once)")
        try:
            _build(t, plain, shape, driver, configure, nice)
        except TemplateError as e:
            (root() / f"{k}.failed").write_text(f"{e}\n")
            raise
    return t


def _ssh_ready(address: str, private_key: Path, timeout: float) -> None:
    from lab.providers.reach import SSH_OPTS, ssh_exe

    t0 = time.monotonic()
    while True:
        r = subprocess.run([ssh_exe(), "-i", str(private_key), *SSH_OPTS, f"vagrant@{address}", "true"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return
        if time.monotonic() - t0 > timeout:
            raise TemplateError(f"the role template's build VM did not answer ssh at {address}: {r.stderr.strip()[-200:]}")
        time.sleep(1)


# What the build leaves behind, removed through the guest agent before the save: chrony stopped where
# its server is a cluster's name (a fork's run starts it: roles/common/tasks/time.yml), the build's
# key, Ansible's files, the machine-id (a fork writes its own), the page cache (a small save image).
CLEANUP = ("set -e; {stop} rm -rf /root/.ansible /var/lib/vagrant/.ansible /root/.ssh/authorized_keys "
           "/var/lib/vagrant/.ssh/authorized_keys; : > /etc/machine-id; sync; echo 3 > /proc/sys/vm/drop_caches")


def _build(t: RoleTemplate, plain: templates.Template, shape: Shape, driver: str, configure: Configure,
           nice: int = 0) -> None:
    import ipaddress

    import libvirt

    from lab.host import libvirtd
    from lab.providers import agent, fork, savefile
    from lab.providers.base import ClusterNet, MachineSpec
    from lab.providers.domains import end_named

    t0 = time.monotonic()
    shutil.rmtree(t.folder, ignore_errors=True)
    t.folder.mkdir(parents=True)
    os.chmod(t.folder, 0o755)
    name = f"slurmlab-rtpl-{t.key}"
    build_key = t.folder / "build_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "slurmlab-role-template-build", "-f",
                    str(build_key)], check=True, capture_output=True)
    net_ip = ipaddress.ip_network(templates.NET_SUBNET)
    net = ClusterNet(templates.NET_NAME, templates.NET_BRIDGE, templates.NET_SUBNET, str(net_ip.network_address + 1))
    mac = "52:54:00:fd:%02x:%02x" % tuple(hashlib.sha256(t.key.encode()).digest()[:2])
    conn = libvirtd.connect()
    address, address_lock = buildaddresses.take(root(), conn, name)
    machine = MachineSpec(name=name, group="template", cpus=shape.cpus, memory_mib=shape.memory_mib, mac=mac,
                          address=address)
    timings: dict[str, float] = {}
    _building.add(name)
    try:
        templates.ensure_network(conn)
        end_named(conn, name)
        state = None
        if t.role == "Controller":
            state = t.state
            r = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(state), _state_size()],
                               capture_output=True, text=True)
            if r.returncode:
                raise TemplateError(f"qemu-img create {state}: {r.stderr.strip()}")
        try:
            fork.fork(conn, pool_dir=t.folder, template=plain, cluster=BUILD_CLUSTER, machine=machine,
                      machines=[machine], net=net, public_key=(build_key.with_suffix(".pub")).read_text(),
                      munge_key=None, state_disk=state, description=f"slurmlab role template {t.key}",
                      pad=BUILD_PAD)
        except fork.ForkError as e:
            raise TemplateError(f"building role template {t.key}: {e}") from None
        timings["fork"] = round(time.monotonic() - t0, 1)
        if nice:  # a build in the background leaves the CPU to the cluster that is being made
            from lab.providers import priority

            if (pid := priority.qemu_pid(name)) is not None:
                priority.renice(pid, nice)
        _ssh_ready(machine.address, build_key, SSH_TIMEOUT_S)
        t1 = time.monotonic()
        try:
            configure(machine.address, build_key, t.role, t.folder / "ansible")
        except Exception as e:  # noqa: BLE001 - the configurer's own error says which task failed
            raise TemplateError(f"building role template {t.key}: template.yml: {e}") from None
        timings["configure"] = round(time.monotonic() - t1, 1)
        shutil.rmtree(t.folder / "ansible", ignore_errors=True)
        t2 = time.monotonic()
        dom = conn.lookupByName(name)
        stop = "systemctl stop chrony;" if t.role != "Controller" else ""
        ran = agent.run(dom, "/bin/sh", ["-c", CLEANUP.format(stop=stop)], timeout=120)
        if ran.exitcode != 0:
            raise TemplateError(f"building role template {t.key}: clean-up failed: {ran.tail()}")
        part = t.folder / "mem.save.part"
        dom.save(str(part))
        img = savefile.read(part)
        os.replace(part, t.memory)
        dom.undefine()
        os.replace(t.folder / f"{name}.img", t.disk)
        for f in [t.disk] + ([t.state] if state else []):
            os.chmod(f, 0o444)  # frozen: the saved memory expects exactly these disks
        timings["save"] = round(time.monotonic() - t2, 1)
        meta = {"key": t.key, "role": t.role, "base": plain.key, "cpus": shape.cpus, "memory_mib": shape.memory_mib,
                "driver": driver, "box": plain.meta["box"], "box_inputs_hash": plain.meta.get("box_inputs_hash"),
                "files": files_hash(t.role), "revision": ROLE_REVISION,
                "created": time.time(), "xml_room": img.xml_room, "timings": timings}
        (t.folder / "meta.json").write_text(json.dumps(meta, indent=1))
        log.info("role template %s built in %.0f s (%s)", t.key, time.monotonic() - t0, timings)
    except (libvirt.libvirtError, agent.AgentError, OSError, savefile.SaveFormatError) as e:
        raise TemplateError(f"building role template {t.key}: {e}") from None
    finally:
        end_named(conn, name)
        _building.discard(name)
        buildaddresses.give_back(root(), address, address_lock)
        conn.close()
        for f in (build_key, build_key.with_suffix(".pub")):
            f.unlink(missing_ok=True)
        if not t.is_complete():
            shutil.rmtree(t.folder, ignore_errors=True)


def _state_size() -> str:
    from lab.providers.state_disk import SIZE

    return SIZE


def copy_state(t: RoleTemplate, dest: Path) -> None:
    """A new cluster's state disk: a copy of the template's (the saved memory has it mounted)."""
    part = dest.with_name(dest.name + ".part")
    r = subprocess.run(["qemu-img", "convert", "-q", "-O", "qcow2", str(t.state), str(part)], capture_output=True,
                       text=True)
    if r.returncode:
        part.unlink(missing_ok=True)
        raise TemplateError(f"qemu-img convert {t.state}: {r.stderr.strip()[-300:]}")
    os.chmod(part, 0o644)
    os.replace(part, dest)


def listing() -> list[dict]:
    out = []
    for d in sorted(root().iterdir()) if root().exists() else []:
        if not d.is_dir() or not (d / "meta.json").is_file():
            continue
        meta = json.loads((d / "meta.json").read_text())
        t = RoleTemplate(d.name, d, meta.get("role", ""))
        if t.is_complete():
            size = sum(f.stat().st_blocks * 512 for f in d.iterdir() if f.is_file())
            out.append({"key": t.key, "role": t.role, "base": meta["base"], "box": meta["box"], "cpus": meta["cpus"],
                        "memory_mib": meta["memory_mib"], "driver": meta["driver"], "size": size,
                        "created": meta["created"], "timings": meta.get("timings", {})})
    return out


def prune_stale() -> list[str]:
    """Remove role templates whose plain template, box or roles changed (their key is not current)."""
    gone = []
    for row in listing():
        try:
            current = key(row["box"], Shape(row["cpus"], row["memory_mib"]), row["driver"], row["role"]) == row["key"]
        except (TemplateError, KeyError):
            current = False
        if not current:
            shutil.rmtree(root() / row["key"], ignore_errors=True)
            gone.append(row["key"])
    return gone


def forget_failure(box: str, shape: Shape, driver: str, role: str) -> None:
    """An explicit build (`slurmlab box build`) tries again what failed before."""
    (root() / f"{key(box, shape, driver, role)}.failed").unlink(missing_ok=True)


def forget_failures() -> list[str]:
    return templates.forget_failures(root())
