"""The qemu guest agent of a VM, through libvirt (virtio-serial: no network, no ssh).

A forked VM (docs/adr/0011) wakes up with the template's identity, MAC and address included, so
nothing can reach it over the network until it has its own. The agent can: libvirt reconnects to
the agent's port when it restores the domain, and `guest-exec` runs the box's fork-identity script
with the identity archive on its stdin (`input-data`), `guest-set-time` sets the clock in one call.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass


class AgentError(Exception):
    """The guest agent did not answer, or a command it ran failed; the message says which."""


def command(dom, execute: str, timeout: int = 10, **arguments) -> object:
    """One agent command; its `return` value. Raises AgentError."""
    import libvirt
    import libvirt_qemu

    msg = {"execute": execute, **({"arguments": arguments} if arguments else {})}
    try:
        out = libvirt_qemu.qemuAgentCommand(dom, json.dumps(msg), timeout, 0)
    except libvirt.libvirtError as e:
        raise AgentError(f"{execute}: {e.get_error_message()}") from None
    reply = json.loads(out)
    if "error" in reply:
        raise AgentError(f"{execute}: {reply['error'].get('desc', reply['error'])}")
    return reply.get("return")


def wait(dom, timeout: float, poll: float = 0.5) -> float:
    """Seconds until the agent answers `guest-ping` (AgentError after `timeout`)."""
    t0 = time.monotonic()
    last = ""
    while True:
        try:
            command(dom, "guest-ping", timeout=5)
            return time.monotonic() - t0
        except AgentError as e:
            last = str(e)
        if time.monotonic() - t0 > timeout:
            raise AgentError(f"the guest agent did not answer within {timeout:.0f} s ({last})")
        time.sleep(poll)


NO_CHANNEL = "guest agent is not configured"  # libvirt's answer for a domain without the agent's channel
PING_S = 5  # a guest agent that does not answer guest-ping this long is silent (issue 45)


def silent(conn, names: list[str]) -> dict[str, str]:
    """Of the domains `names` that libvirt says run, those whose agent does not answer `guest-ping` within
    PING_S (a hung guest: lab/engine/hangs.py), each with what did not answer. The agent is on
    virtio-serial: no network, milliseconds on a loaded machine. Paused, shut-off and missing domains are
    not asked: observe() and the planner act on those."""
    import libvirt

    out = {}
    for name in names:
        try:
            dom = conn.lookupByName(name)
            code, _ = dom.state()
        except libvirt.libvirtError:
            continue
        if code != libvirt.VIR_DOMAIN_RUNNING:
            continue
        try:
            command(dom, "guest-ping", timeout=PING_S)
        except AgentError as e:
            if NO_CHANNEL in str(e):  # made without the agent's channel (a VM booted before the Vagrantfile had it)
                continue  # nothing to judge it by: Slurm's own watch still covers it
            out[name] = f"libvirt says it runs, its guest agent does not answer ({e})"
    return out


def silent_on(host, names: list[str]) -> dict[str, str]:
    """silent() of the domains `names` on `host` (a lab.host.registry.Host)."""
    conn = host.connect()
    try:
        return silent(conn, names)
    finally:
        conn.close()


@dataclass
class Ran:
    exitcode: int
    out: str
    err: str

    def tail(self, lines: int = 8) -> str:
        return "\n".join((self.err or self.out).strip().splitlines()[-lines:])


def run(dom, path: str, args: list[str] | None = None, stdin: bytes | None = None, timeout: float = 120,
        poll: float = 0.1) -> Ran:
    """Run `path args` in the guest as root, `stdin` on its standard input; its exit code and output."""
    arguments = {"path": path, "arg": list(args or []), "capture-output": True}
    if stdin is not None:
        arguments["input-data"] = base64.b64encode(stdin).decode()
    pid = command(dom, "guest-exec", timeout=10, **arguments)["pid"]
    t0 = time.monotonic()
    while True:
        st = command(dom, "guest-exec-status", timeout=10, pid=pid)
        if st.get("exited"):
            dec = lambda k: base64.b64decode(st.get(k, "")).decode(errors="replace")  # noqa: E731
            return Ran(st.get("exitcode", -1 if "signal" in st else 0), dec("out-data"), dec("err-data"))
        if time.monotonic() - t0 > timeout:
            raise AgentError(f"{path} still running in the guest after {timeout:.0f} s")
        time.sleep(poll)


def set_time(dom) -> None:
    """The guest's clock set to the host's, in one agent call (no process in the guest). The agent
    then tries `hwclock -w`, which a VM without hwclock fails after the time is set: that is fine."""
    try:
        command(dom, "guest-set-time", timeout=10, time=time.time_ns())
    except AgentError as e:
        if "hwclock" not in str(e):
            raise
