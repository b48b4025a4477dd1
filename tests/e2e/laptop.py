"""A student's laptop for the room's e2e test (issue 44): a network namespace of the test's own, joined
to this machine's namespace by a veth pair with link-local addresses (169.254.77.1 here, .2 on the
laptop). The laptop reaches the room's port on this machine's address, as a laptop in the classroom
does; this machine sends only to the link-local peer, never to a private-range or public address
(SANDBOX.md's network rule), and the VMs stay behind the room's forward."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

LAB_SIDE, LAPTOP_SIDE = "169.254.77.1", "169.254.77.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Laptop:
    """The namespace, and a home of its own (`home`: its ~/.ssh, as a laptop user's)."""

    def __init__(self, home: Path):
        self.home = home
        (home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
        tag = os.getpid() % 100000
        self.netns, self.veth, self.peer = f"sllaptop{tag}", f"sllap{tag}a", f"sllap{tag}b"

    def __enter__(self) -> "Laptop":
        _ip("netns", "add", self.netns)
        try:
            _ip("link", "add", self.veth, "type", "veth", "peer", "name", self.peer, "netns", self.netns)
            _ip("addr", "add", f"{LAB_SIDE}/30", "dev", self.veth)
            _ip("link", "set", self.veth, "up")
            for args in (("addr", "add", f"{LAPTOP_SIDE}/30", "dev", self.peer), ("link", "set", self.peer, "up"),
                         ("link", "set", "lo", "up")):
                _ip("-n", self.netns, *args)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)

    def run(self, cmd: list[str], env: dict | None = None, cwd: Path | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess:
        """`cmd` on the laptop (inside its namespace, with the laptop's home)."""
        env = {**(env or os.environ), "HOME": str(self.home)}
        return subprocess.run(["ip", "netns", "exec", self.netns, *cmd], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
