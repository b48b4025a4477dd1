"""The end of an e2e module's lab home: its engine log kept under artifacts/, its cluster deleted,
the engine stopped, SLURMLAB_HOME as it was before the module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


def close_home(home: Path, old: str | None, cluster: str, log_as: str) -> None:
    if (home / "engine.log").exists():
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(home / "engine.log", ARTIFACTS / log_as)
    for args, timeout in ((["delete-cluster", cluster], 900), (["engine", "stop"], 60)):
        subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if old is None:
        os.environ.pop("SLURMLAB_HOME", None)
    else:
        os.environ["SLURMLAB_HOME"] = old
