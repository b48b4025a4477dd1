"""What qemu on a cluster's host reads, made where that host can read it (docs/adr/0016-remote-hosts.md).

On this machine (the local host, a simulated one) qemu reads the lab's own files: the TCG wrapper
named as `emulator_path` (lab.host.libvirtd.ensure_wrapper) and the munge key credential copied for
the qemu user (lab.secrets.qemu_readable_copy). A remote host has none of this machine's paths:

- TCG's translation cache is capped in the domain XML (`<features><tcg><tb-cache>`, libvirt >= 8.0)
  instead of by the wrapper;
- the munge key is uploaded through libvirt as a raw volume `<cluster>-munge.key` of the host's
  pool, owned by that host's qemu user, mode 0400 (its path there goes to `-fw_cfg ...,file=`), and
  is removed with the cluster's other volumes (state_disk.is_cluster_volume). A host that confines
  qemu (AppArmor, SELinux) would refuse qemu that file: the node then gets the key from Ansible's
  munge role after boot (ADR 0002's fallback) and no credential is uploaded.

The domain type (kvm or qemu) is lab.host.caps.domain_type's: this machine's /dev/kvm on this
machine, the remote's own libvirt there; the host's boot and fork slots ask the same
(lab/engine/slots.py).

`foreign_paths` is the guard: a remote host's Vagrantfile may name no path of this machine except
in the lines only this machine reads (the key Vagrant logs in with, the libvirt URI, the proxy).
"""

from __future__ import annotations

import re
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from lab import paths, secrets, settings
from lab.host import pools
from lab.host.caps import confined, domain_type, qemu_owner

TB_CACHE_MIB = 128  # as the local wrapper's tb-size (docs/adr/0001 #3)
# vagrant-libvirt writes each `features` string raw as `<STRING/>` (templates/domain.xml.erb), so one
# string can carry the element that has no setting of its own; the first and last tags close around it
TCG_FEATURES = ["acpi", "apic", f"tcg><tb-cache unit='MiB'>{TB_CACHE_MIB}</tb-cache></tcg><pae"]
_uploading = threading.Lock()
CLIENT_SIDE = re.compile(r"^\s*(config\.ssh\.private_key_path|lv\.uri|lv\.proxy_command)\s*=")


@dataclass
class LaunchInputs:
    """The host-dependent lines of a cluster's Vagrantfile."""
    driver: str
    emulator_path: str | None = None
    features: list[str] = field(default_factory=list)
    proxy_command: str | None = None
    munge_key_file: str | None = None
    uri: str = ""
    pool_path: str | None = None  # a remote's pool folder: that host's, even if this machine has the same path


def munge_volume(cluster: str) -> str:
    return f"{cluster}-munge.key"


def upload_munge_key(host, conn, cluster: str, key: bytes) -> str | None:
    """The key as a volume of the host's pool (replaced when it differs); its path on the host, or None
    when the host confines qemu."""
    caps = conn.getCapabilities()
    if confined(caps):
        return None
    pool = conn.storagePoolLookupByName(host.pool)
    pools.refresh(pool)
    uid, gid = qemu_owner(caps)
    with _uploading:  # one prepare of the cluster at a time makes it (the next finds it made)
        return _upload(conn, pool, munge_volume(cluster), key, uid, gid)


def _upload(conn, pool, name: str, key: bytes, uid: int, gid: int) -> str:
    from lab.providers import volstream

    vol, new = volstream.kept_or_new(pool, name, len(key), (uid, gid), 0o400,
                                     lambda v: v.info()[1] == len(key) and volstream.read(conn, v, len(key)) == key)
    if new:
        volstream.send(conn, vol, 0, key)
    return vol.path()


def inputs(host, cluster: str, munge_key: Path) -> LaunchInputs:
    """What the cluster's Vagrantfile says of its host: driver, TCG cap, credential, how it is reached."""
    from lab.host import libvirtd
    from lab.providers.vagrantfile import credentials_dir

    if not host.remote:
        driver = domain_type(host, None)  # this machine's /dev/kvm
        fw = secrets.qemu_readable_copy(munge_key, credentials_dir(cluster) / "munge.key")
        return LaunchInputs(driver, None if driver == "kvm" else str(libvirtd.ensure_wrapper()),
                            munge_key_file=str(fw), uri=host.uri)
    from lab.host import sshhost

    conn = host.connect()
    try:
        driver = domain_type(host, conn)  # what its own libvirt offers
        fw = upload_munge_key(host, conn, cluster, munge_key.read_bytes())
        pool_path = ET.fromstring(conn.storagePoolLookupByName(host.pool).XMLDesc(0)).findtext("target/path")
    finally:
        conn.close()
    return LaunchInputs(driver, None, TCG_FEATURES if driver == "qemu" else [], sshhost.proxy_command(host), fw,
                        sshhost.libvirt_uri(host), pool_path)


def local_roots() -> list[str]:
    """Folders of this machine that a remote host's qemu must never be told to read."""
    from lab.paths import REPO_ROOT

    roots = {paths.home(), paths.cache(), paths.libvirt_dir(), paths.pool_dir(), settings.HOSTS_DIR.get(),
             REPO_ROOT, Path.home() / ".vagrant.d"}
    return sorted({str(r.resolve()) if r.exists() else str(r) for r in roots} | {str(r) for r in roots})


def foreign_paths(text: str, roots: list[str] | None = None, theirs: str | None = None) -> list[str]:
    """Lines of a Vagrantfile or domain XML that name a folder of this machine (`local_roots`), the
    lines only this machine reads (CLIENT_SIDE) left out. `theirs`: the remote's pool folder, which is
    that host's own even when this machine has a folder of the same name."""
    roots = roots if roots is not None else local_roots()
    return [line.strip() for line in text.splitlines()
            if not CLIENT_SIDE.match(line) and any(r in (line.replace(theirs, "") if theirs else line) for r in roots)]


def refuse_foreign(host, text: str, theirs: str | None = None) -> None:
    """A permanent LaunchError when a remote host's Vagrantfile names a path of this machine."""
    from lab.providers.base import LaunchError

    if host.remote and (foreign := foreign_paths(text, theirs=theirs)):
        raise LaunchError(f"the Vagrantfile for remote host {host.name} names paths of this machine, which its qemu "
                          f"cannot read: {'; '.join(foreign)}", transient=False)
