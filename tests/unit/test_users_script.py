"""roles/users/files/users.sh with the real shadow tools and systemd-sysusers of this machine, on a copy of
its /etc mounted over /etc in a mount namespace of the test's own (`unshare -m`): every missing account
and its group added in one sysusers run with the password hash from a credential file, a group left by
an earlier run reused, a gid of another group refused, a second run changes nothing, a new hash
replaces the old, removed accounts go. (On real VMs: tests/e2e/test_cluster.py's users tests.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles/users/files/users.sh"
HASH = "$6$abc$Zl5w4qA9bT0O7.E1"  # a crypt(3) string: its $ signs must reach /etc/shadow as they are

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("systemd-sysusers"),
                                reason="needs root, unshare and systemd-sysusers (Debian's CI machine has them)")


class Etc:
    def __init__(self, tmp: Path):
        self.dir = tmp / "etc"
        subprocess.run(["cp", "-a", "/etc", str(self.dir)], check=True)

    def run(self, *args: str, before: str = "") -> subprocess.CompletedProcess:
        """users.sh ARGS with /etc the copy; `before`: shell run first in the same namespace."""
        inner = f'mount --bind "$1" /etc && {before or ":"} && shift && exec sh "$@"'
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", str(self.dir),
                               str(SCRIPT), *args], capture_output=True, text=True, timeout=60)

    def entries(self, name: str) -> dict[str, str]:
        """`name`'s lines in passwd, shadow and group of the copy."""
        out = {}
        for f in ("passwd", "shadow", "group"):
            out[f] = next((ln for ln in (self.dir / f).read_text().splitlines() if ln.split(":")[0] == name), "")
        return out


@pytest.fixture
def etc(tmp_path):
    return Etc(tmp_path)


def keep(*accounts: str) -> list[str]:
    return [HASH, "/home", "/bin/bash", "no", *accounts]


def test_missing_accounts_added_in_one_run_with_their_hash_and_group(etc):
    p = etc.run(*keep("stu01:7001", "stu02:7002"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines() == ["slurmlab-users changed: added stu01 (7001)", "slurmlab-users changed: added stu02 (7002)"]
    e = etc.entries("stu02")
    assert e["passwd"] == "stu02:x:7002:7002::/home/stu02:/bin/bash"
    assert e["shadow"].split(":")[1] == HASH
    assert e["group"].startswith("stu02:x:7002:")
    # the credential files are gone
    assert not [x for x in os.listdir("/run") if x.startswith("slurmlab-users.")]
    # a second run changes nothing
    again = etc.run(*keep("stu01:7001", "stu02:7002"))
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr


def test_a_left_group_is_reused_and_a_gid_of_another_group_is_refused(etc):
    p = etc.run(*keep("stu01:7001", "stu02:7002"), before="groupadd -g 7001 stu01 && groupadd -g 7002 other")
    assert p.returncode == 1
    assert "slurmlab-users changed: added stu01 (7001)" in p.stdout
    assert "slurmlab-users failed: gid 7002 belongs to another group than stu02" in p.stdout
    assert etc.entries("stu01")["passwd"] == "stu01:x:7001:7001::/home/stu01:/bin/bash"
    assert etc.entries("stu02")["passwd"] == ""


def test_an_account_with_another_uid_is_named_and_left_alone(etc):
    etc.run(*keep("stu01:7001"))
    p = etc.run(*keep("stu01:7005"))
    assert p.returncode == 1
    assert "slurmlab-users failed: stu01 exists with another uid, gid or home than 7005:7005:/home/stu01" in p.stdout
    assert etc.entries("stu01")["passwd"].startswith("stu01:x:7001:7001:")


def test_a_new_hash_replaces_the_old_and_removed_accounts_go(etc):
    etc.run(*keep("stu01:7001", "stu02:7002"))
    new = "$6$new$abcdefgh"
    p = etc.run(new, "/home", "/bin/bash", "no", "-stu02", "stu01:7001")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines() == ["slurmlab-users changed: removed stu02", "slurmlab-users changed: password of stu01"]
    assert etc.entries("stu01")["shadow"].split(":")[1] == new
    assert etc.entries("stu02") == {"passwd": "", "shadow": "", "group": ""}
