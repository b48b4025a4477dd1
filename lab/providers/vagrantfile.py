"""Render a cluster's Vagrantfile from Vagrantfile.j2 (pure: tested against a golden file).

Each VM gets its identity as systemd credentials (docs/adr/0002-provisioning-pipeline.md):
SMBIOS type 11 strings for what is not secret (the SSH public key, system.hostname, slurmlab.node,
slurmlab.hosts) and qemu's fw_cfg for the munge key, read by qemu from a file so that the key is
never on a command line, in the domain XML or in libvirt's logs.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import jinja2

from lab import paths
from lab.providers.base import STATE_DISK_SERIAL, ClusterNet, MachineSpec

FW_CFG_MUNGE_KEY = "opt/io.systemd.credentials/slurmlab.munge_key"


def _smbios(text: str) -> list[str]:
    return ["-smbios", f"type=11,value=io.systemd.credential:{text}"]


def _smbios_binary(name: str, data: str) -> list[str]:
    b64 = base64.b64encode(data.encode()).decode()
    return ["-smbios", f"type=11,value=io.systemd.credential.binary:{name}={b64}"]


def node_credential(cluster: str, machine: MachineSpec, controller: str) -> str:
    """The slurmlab.node credential (read by the box's node-setup script)."""
    return f"name={machine.name}\nrole={machine.node_type}\ncluster={cluster}\ncontroller={controller}\n"


CONTROLLER_ALIAS = "slurmlab-controller"  # roles/common/templates/hosts_block.j2 (slurmlab_controller_alias)


def hosts_credential(machines: Sequence[MachineSpec]) -> str:
    """The slurmlab.hosts credential: one 'ADDRESS NAME' line per node, sorted by name (the order of
    roles/common/templates/hosts_block.j2, so Ansible's blockinfile finds nothing to change)."""
    lines = [f"{m.address} {m.name}\n" for m in sorted(machines, key=lambda m: m.name) if m.address]
    # the controller's name in every cluster (chrony's server, the NFS units): role templates hold them
    lines += [f"{m.address} {CONTROLLER_ALIAS}\n" for m in machines if m.node_type == "Controller" and m.address]
    return "".join(lines)


def qemu_args(cluster: str, machine: MachineSpec, machines: Sequence[MachineSpec], public_key: str,
              munge_key_file: str | None) -> list[str]:
    args = _smbios(f"slurmlab.authorized_keys={public_key}")
    controller = next((m.name for m in machines if m.node_type == "Controller"), None)
    if machine.node_type and controller:
        args += _smbios(f"system.hostname={machine.name}")
        args += _smbios_binary("slurmlab.node", node_credential(cluster, machine, controller))
        args += _smbios_binary("slurmlab.hosts", hosts_credential(machines))
        if munge_key_file:
            args += ["-fw_cfg", f"name={FW_CFG_MUNGE_KEY},file={munge_key_file}"]
    return args


def render(
    *,
    cluster: str,
    box: str,
    machines: Sequence[MachineSpec],
    net: ClusterNet,
    private_key: str,
    public_key: str,
    driver: str,
    emulator_path: str | None,
    pool: str,
    uri: str = "qemu:///system",
    boot_timeout: int = 600,
    munge_key_file: str | None = None,
    state_disk_size: str = "8G",
    features: Sequence[str] = (),
    proxy_command: str | None = None,
) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.resource())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    if any(c in public_key for c in ',"\n'):
        raise ValueError("public key must be one line without commas or quotes")
    if any('"' in x or "\n" in x for x in (*features, proxy_command or "")):
        raise ValueError("features and proxy_command must be one line without double quotes")
    if munge_key_file and any(c in munge_key_file for c in ',"\n'):
        raise ValueError(f"munge key path {munge_key_file!r} must not hold commas, quotes or newlines (qemu -fw_cfg)")
    nodes = [
        {"name": m.name, "cpus": m.cpus, "memory_mib": m.memory_mib, "mac": m.mac, "box": m.box,
         "state_disk": m.state_disk, "qemuargs": qemu_args(cluster, m, machines, public_key, munge_key_file)}
        for m in sorted(machines, key=lambda m: m.name)
    ]
    return env.get_template("Vagrantfile.j2").render(
        cluster=cluster,
        box=box,
        nodes=nodes,
        network={"name": net.name, "cidr": net.cidr},
        private_key=private_key,
        public_key=public_key,
        driver=driver,
        emulator_path=emulator_path,
        pool=pool,
        uri=uri,
        boot_timeout=boot_timeout,
        state_disk_serial=STATE_DISK_SERIAL,
        state_disk_size=state_disk_size,
        features=list(features),
        proxy_command=proxy_command,
    )


def credentials_dir(cluster: str):
    """Secrets qemu hands to the cluster's VMs (fw_cfg): a folder only the qemu user can read,
    under the libvirt folder (qemu may not reach $SLURMLAB_HOME). Removed with the cluster."""
    return paths.libvirt_dir() / "credentials" / cluster
