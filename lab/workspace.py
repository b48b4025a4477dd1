"""Files of one cluster under $SLURMLAB_HOME/clusters/<name>/ (Vagrantfile, keys, inventory, logs)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from lab import paths


@dataclass(frozen=True)
class ClusterDir:
    name: str

    @property
    def root(self) -> Path:
        return paths.home() / "clusters" / self.name

    @property
    def vagrantfile(self) -> Path:
        return self.root / "Vagrantfile"

    @property
    def ssh_key(self) -> Path:
        return self.root / "secrets" / "id_ed25519"

    @property
    def munge_key(self) -> Path:
        return self.root / "secrets" / "munge.key"

    @property
    def users(self) -> Path:
        """The student accounts (names, uids, the shared password and its hash): lab/users.py."""
        return self.root / "secrets" / "users.json"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.logs.mkdir(exist_ok=True)
        (self.root / "secrets").mkdir(exist_ok=True, mode=0o700)

    def remove(self, tries: int = 5) -> None:
        """Remove the folder. A writer racing the removal (the room's last log line as it closes with
        the cluster, CI run of 2026-12-07) can put a file back into a folder rmtree has emptied:
        remove again until it is gone."""
        for i in range(tries):
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists():
                return
            time.sleep(0.2 * (i + 1))
