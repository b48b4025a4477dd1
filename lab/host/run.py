"""Running subprocesses, in the lab's network namespace when the host needs one."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence

from lab.errors import CommandFailed

log = logging.getLogger(__name__)


def netns_prefix() -> list[str]:
    """`ip netns exec NS` when VM traffic must stay in the lab's namespace, else nothing."""
    from lab.host import mode

    if mode.uses_netns():
        from lab import paths

        return ["ip", "netns", "exec", paths.netns()]
    return []


def run(
    cmd: Sequence[str],
    *,
    in_netns: bool = False,
    check: bool = True,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run a command, capture its output (stdout and stderr merged), raise CommandFailed on error."""
    full = (netns_prefix() if in_netns else []) + list(cmd)
    merged_env = {**os.environ, **(env or {})}
    log.debug("run: %s", " ".join(full))
    proc = subprocess.run(
        full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=merged_env,
        cwd=cwd,
        input=input,
    )
    if check and proc.returncode != 0:
        raise CommandFailed(full, proc.returncode, proc.stdout or "")
    return proc
