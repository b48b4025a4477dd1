"""Issue 42: a node forked from a role template is the node a full configuration makes, apart from its
identity. A fingerprint of a node (what `FINGERPRINT` prints on it) and the comparison of two, with the
differences that are identity named one by one, each with its reason; tests/unit/test_equivalence.py
checks that any other difference fails."""

from __future__ import annotations

import re

# On the node, as root: packages, enabled and active units, accounts, every file's sha256 under the
# configuration folders, owners and modes of the folders the roles make (the homes themselves, not what
# jobs wrote in them). Runtime state (slurmd's credentials, logs, spools) is not configuration.
FINGERPRINT = r"""sudo sh -c '
echo "## packages"; dpkg-query -W -f "\${Package} \${Version}\n"
echo "## enabled"; systemctl list-unit-files --state=enabled --no-legend | awk "{print \$1}"
echo "## active"; systemctl list-units --state=active --no-legend --plain --type=service,mount,automount,socket,timer,path | awk "{print \$1}"
echo "## accounts"; getent passwd | awk -F: "{print \$1\":\"\$3\":\"\$4\":\"\$6\":\"\$7}"
echo "## groups"; getent group | awk -F: "{print \$1\":\"\$3\":\"\$4}"
echo "## files"; find /etc /usr/local /var/lib/slurmlab /opt -xdev -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum
echo "## modes"; { find /etc /usr/local /var/lib/slurmlab /var/lib/slurm /var/lib/mysql /srv -maxdepth 2 -xdev -printf "%p %u %g %m %y\n"
  find /home /fsx -maxdepth 1 -printf "%p %u %g %m %y\n"; } 2>/dev/null | sort
'"""

# Files whose content is the node's or the cluster's identity, and why.
IDENTITY_FILES = {
    "/etc/hostname": "the node's name",
    "/etc/hosts": "the cluster's names and addresses",
    "/etc/machine-id": "the node's machine-id",
    "/etc/munge/munge.key": "the cluster's munge key",
    "/etc/ssh/ssh_host_ecdsa_key": "the node's host key",
    "/etc/ssh/ssh_host_ecdsa_key.pub": "the node's host key",
    "/etc/ssh/ssh_host_ed25519_key": "the node's host key",
    "/etc/ssh/ssh_host_ed25519_key.pub": "the node's host key",
    "/etc/systemd/network/10-slurmlab-eth0.network": "the node's address",
    "/etc/default/slurmd": "the controller's name (--conf-server)",
    "/etc/default/sackd": "the controller's name (--conf-server)",
    "/etc/slurm/slurm.conf": "the cluster's name and nodes",
    "/etc/exports.d/slurmlab.exports": "the cluster's network",
    "/etc/fstab": "the state disk's file system UUID (a role template's copy keeps the template's)",
    "/etc/shadow": "the students' password (one per cluster)",
    "/etc/shadow-": "the students' password (one per cluster)",
    "/etc/slurmlab-lifecycle-ran": "what the example OnCreate script writes: the node's name",
    "/etc/slurm/gres.conf": "the cluster's GPU nodes (a cluster without any has none)",
    "/etc/jupyterhub/slurmlab_config.py": "the cluster's name and its login node's (the hub's address)",
    "/etc/systemd/system/jupyterhub-proxy.service": "the cluster's name (its description)",
}
# Paths under which names carry the cluster's name (slurmdbd's tables: <cluster>_job_table, ...).
RUNTIME = ("/var/lib/slurm/slurmd/",)


def sections(text: str, cluster: str) -> dict[str, set[str]]:
    """The fingerprint's sections as sets of lines, the cluster's name replaced by CLUSTER."""
    out: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            out[current] = set()
        elif current and line.strip():
            out[current].add(re.sub(rf"\b{re.escape(cluster)}(?=[-_:./ ]|$)", "CLUSTER", line))
    return out


def differences(a: str, cluster_a: str, b: str, cluster_b: str) -> dict[str, list[str]]:
    """What differs between two fingerprints and is not identity: {section: ["- line of a", "+ line of b"]}."""
    sa, sb = sections(a, cluster_a), sections(b, cluster_b)
    out: dict[str, list[str]] = {}
    for name in sorted(set(sa) | set(sb)):
        la, lb = sa.get(name, set()), sb.get(name, set())
        diff = [f"- {x}" for x in sorted(la - lb)] + [f"+ {x}" for x in sorted(lb - la)]
        if name == "files":
            diff = [d for d in diff if d.split()[-1] not in IDENTITY_FILES]
        if name == "modes":
            diff = [d for d in diff if d.split()[1] not in IDENTITY_FILES]
        diff = [d for d in diff if not any(d.split()[1].startswith(r) or d.split()[-1].startswith(r) for r in RUNTIME)]
        if diff:
            out[name] = diff
    if not sa.get("packages") or not sb.get("packages"):
        out["fingerprint"] = ["a fingerprint has no packages: it was not read"]
    return out
