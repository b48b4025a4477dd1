"""`slurmlab verify`: the testinfra suite in lab/verify/suite, run with pytest against an inventory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parent / "suite"


def command(inventory: Path, junit: Path | None = None, extra_args=()) -> list[str]:
    """The pytest command line for `inventory` (see docs/verify.md)."""
    cmd = [
        sys.executable, "-m", "pytest", str(SUITE),
        f"--ansible-inventory={Path(inventory).resolve()}",
        "--hosts=ansible://all",
        "--force-ansible",
        "-p", "no:cacheprovider",
        "-o", "addopts=",
        f"--rootdir={SUITE}",
        "-v", "-rfE", "--tb=short",
    ]
    if junit is not None:
        cmd.append(f"--junitxml={Path(junit).resolve()}")
    return cmd + list(extra_args)


def run(inventory: Path, junit: Path | None = None, extra_args=()) -> int:
    """Run the suite; pytest's exit code (0: every check passed, 1: some failed, 5: none collected)."""
    return subprocess.run(command(inventory, junit, extra_args), check=False).returncode
