"""roles/nfs_client/files/nfs-client.sh against a stand-in systemctl (issue 42): the shared folders as mount
and automount units, written where they differ, enabled by their link and started, with no `systemctl
daemon-reload` for new units (3 s on an idle emulated node, 10-15 s while the other nodes configure); a
reload only for a loaded unit that changed, and once when the fstab block of the role before is removed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "\n".join([(ROOT / "roles/common/files/install-if-changed.sh").read_text(),
                    (ROOT / "roles/nfs_client/files/nfs-client.sh").read_text()])
SYSTEMCTL = r'''#!/bin/sh
echo "systemctl $*" >> "$FAKE/calls"
case "$1" in
  is-active) if [ -e "$FAKE/active-$2" ]; then echo active; else echo inactive; fi ;;
  start) touch "$FAKE/active-$2" ;;
esac
'''
OLD_FSTAB = """UUID=u-1 / ext4 errors=remount-ro 0 1
# BEGIN slurmlab shared folders
demo-controller-1:/home /home nfs nfsvers=4.2,hard,timeo=100,_netdev,nofail,x-systemd.automount 0 0
# END slurmlab shared folders
"""


class Node:
    def __init__(self, tmp: Path):
        self.tmp, self.fake, self.units = tmp, tmp / "fake", tmp / "units"
        (self.fake / "bin").mkdir(parents=True)
        (self.fake / "bin" / "systemctl").write_text(SYSTEMCTL)
        (self.fake / "bin" / "systemctl").chmod(0o755)
        self.fstab = tmp / "fstab"
        self.fstab.write_text("UUID=u-1 / ext4 errors=remount-ro 0 1\n")
        self.home, self.fsx = tmp / "home", tmp / "fsx"

    def run(self, server: str = "demo-controller-1") -> subprocess.CompletedProcess:
        if (self.fake / "calls").exists():
            (self.fake / "calls").unlink()
        p = subprocess.run(["sh", "-c", SCRIPT, "slurmlab-nfs-client", server, "nfsvers=4.2,hard,timeo=100", "30",
                            str(self.units), str(self.fstab), str(self.home), str(self.fsx)],
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": f"{self.fake / 'bin'}:/usr/bin:/bin", "FAKE": str(self.fake),
                                "NFS_CLIENT_MARKER": str(self.fake / "nfs-client.done")})
        assert p.returncode == 0, p.stdout + p.stderr
        return p

    def calls(self) -> list[str]:
        f = self.fake / "calls"
        return [c for c in f.read_text().splitlines() if not c.startswith("systemctl is-active")] if f.exists() else []

    def unit(self, path: Path, kind: str) -> str:
        name = subprocess.run(["systemd-escape", "--path", str(path)], capture_output=True, text=True).stdout.strip()
        return f"{name}.{kind}"


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def test_new_units_are_written_enabled_and_started_without_a_reload(node):
    p = node.run()
    home_mount = (node.units / node.unit(node.home, "mount")).read_text()
    assert f"What=demo-controller-1:{node.home}\nWhere={node.home}\nType=nfs\nOptions=nfsvers=4.2,hard,timeo=100\n" \
           "TimeoutSec=30" in home_mount
    for path in (node.home, node.fsx):
        auto = node.unit(path, "automount")
        assert f"Where={path}\n" in (node.units / auto).read_text()
        assert (node.units / "remote-fs.target.wants" / auto).resolve() == node.units / auto  # enabled
        assert path.is_dir()
    assert node.calls() == [f"systemctl start {node.unit(node.home, 'automount')}",
                            f"systemctl start {node.unit(node.fsx, 'automount')}"]
    assert "daemon-reload" not in " ".join(node.calls()) and "slurmlab-nfs changed" in p.stdout
    again = node.run()
    assert node.calls() == [] and "changed" not in again.stdout  # a second run changes nothing


def test_a_changed_server_reloads_the_units_once(node):
    node.run()
    node.run("other-controller-1")
    assert node.calls() == ["systemctl daemon-reload"]
    assert "What=other-controller-1:" in (node.units / node.unit(node.home, "mount")).read_text()


def test_the_fstab_block_of_the_role_before_is_removed_with_one_reload(node):
    node.fstab.write_text(OLD_FSTAB)
    p = node.run()
    assert node.fstab.read_text() == "UUID=u-1 / ext4 errors=remount-ro 0 1\n"
    assert node.calls()[0] == "systemctl daemon-reload" and node.calls().count("systemctl daemon-reload") == 1
    assert "the shared folders are units now" in p.stdout


def test_a_run_leaves_its_arguments_and_automounts_for_the_probe(node):
    node.run()
    args, units = (node.fake / "nfs-client.done").read_text().splitlines()
    # what roles/nfs_client/tasks/main.yml builds as nfs_client_args and compares with the probe's copy
    assert args == f"demo-controller-1 nfsvers=4.2,hard,timeo=100 30 {node.units} {node.fstab} {node.home} {node.fsx}"
    assert units.split() == [node.unit(node.home, "automount"), node.unit(node.fsx, "automount")]
