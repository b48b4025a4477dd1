"""Per-cluster secrets (lab/secrets.py): made once, mode 0600, never replaced. (Checked on a real VM's
cluster by the e2e smoke test until issue 43 took that test out for CI's time: every e2e cluster now
logs in with these keys.)"""

from __future__ import annotations

import os
import stat

from lab import secrets
from lab.workspace import ClusterDir


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_the_cluster_key_pair_and_munge_key_are_0600_and_made_once(lab_home):
    cd = ClusterDir("demo")
    cd.create()
    assert _mode(cd.root) == 0o700 and _mode(cd.root / "secrets") == 0o700
    pub = secrets.ensure_ssh_key(cd.ssh_key, "slurmlab-demo")
    assert pub.startswith("ssh-ed25519 ") and pub.endswith(" slurmlab-demo")
    assert _mode(cd.ssh_key) == 0o600 and cd.ssh_key.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    secrets.ensure_munge_key(cd.munge_key)
    assert _mode(cd.munge_key) == 0o600 and len(cd.munge_key.read_bytes()) == 1024
    private, munge = cd.ssh_key.read_bytes(), cd.munge_key.read_bytes()
    os.chmod(cd.ssh_key, 0o644)  # loosened by hand: tightened again, the key kept
    cd.ssh_key.with_suffix(".pub").unlink()  # a crash between the two writes: the public key made again
    assert secrets.ensure_ssh_key(cd.ssh_key, "slurmlab-demo") == pub
    secrets.ensure_munge_key(cd.munge_key)
    assert cd.ssh_key.read_bytes() == private and cd.munge_key.read_bytes() == munge
    assert _mode(cd.ssh_key) == 0o600
