"""The engine process: one per state directory (a file lock), detached from the CLI that starts it.

The CLI writes desired state into the store and makes sure this process runs; Ctrl-C on the CLI
never stops provisioning, and a killed engine resumes from the store plus what libvirt shows.
It exits by itself when no cluster is left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time

from filelock import FileLock, Timeout

from lab import paths, settings
from lab.osutil import running
from lab.store import Store

log = logging.getLogger("lab.engine")


def lock_path():
    return paths.home() / "engine.lock"


def pid_path():
    return paths.home() / "engine.pid"


def store() -> Store:
    return Store(paths.home() / "state.db")


def running_pid() -> int | None:
    """PID of the engine holding the lock, or None."""
    lock = FileLock(str(lock_path()))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            return int(pid_path().read_text())
        except (OSError, ValueError):
            return -1
    lock.release()
    return None


def ensure_running() -> int:
    """Start the engine in the background unless one already runs; return its pid."""
    paths.home().mkdir(parents=True, exist_ok=True)
    pid = running_pid()
    if pid:
        return pid
    logf = open(paths.home() / "engine.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "lab.engine.daemon"], stdin=subprocess.DEVNULL, stdout=logf,
                            stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy())
    for _ in range(100):
        if running_pid():
            break
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    return proc.pid


def stop(timeout: float = 30) -> bool:
    pid = running_pid()
    if not pid or pid < 0:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running_pid():
        time.sleep(0.2)
    return True


def make_provider(name: str):
    """The provider a cluster was created with (lab/providers/registry.py)."""
    from lab.providers import registry

    from lab.providers.vagrant import VagrantProvider

    provider = registry.make(name)
    if isinstance(provider, VagrantProvider):  # its role templates are built by Ansible (docs/adr/0022)
        from lab.configure import roletemplate

        provider.warm.configure_template = roletemplate.run
    return provider


def make_configurer(name: str):
    """What configures the nodes of provider `name`'s clusters: Ansible, or for a simulated provider
    the simulated configurer."""
    from lab.providers import registry

    if registry.info(name).simulated:
        from lab.configure.sim import SimConfigurer

        return SimConfigurer()
    from lab.configure.ansible import AnsibleConfigurer
    from lab.providers.reach import cluster_ssh_exe

    return AnsibleConfigurer(cluster_ssh_exe)


def make_engine(st: Store):
    """The daemon's engine: each cluster built by its own provider, made on first use; its boot and
    fork slots counted from the cores and memory of the cluster's own host (lab/engine/slots.py)."""
    from lab.engine import slots
    from lab.engine.engine import Engine, Tuning

    return Engine(st, provider_factory=make_provider, configurer_factory=make_configurer,
                  tuning=Tuning(max_attempts=settings.LEGACY_ATTEMPTS.get(), host_slots=slots.HostSlots(),
                                host_lost_s=settings.HOST_LOST_S.get()))


def _home_of(path) -> tuple[int, int] | None:
    """The state file's identity (device, inode); None when it is gone."""
    try:
        s = os.stat(path)
    except OSError:
        return None
    return s.st_dev, s.st_ino


async def serve_forever(idle_exit: float = 5.0) -> None:
    st = store()
    state = paths.home() / "state.db"
    home = _home_of(state)
    engine = make_engine(st)
    stop_ev = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_ev.set)
    idle_since = None
    while not stop_ev.is_set():
        if _home_of(state) != home:  # its folder deleted or replaced: nothing here is this engine's any more
            log.warning("state %s is gone (deleted or replaced): engine exits", state)
            break
        await engine.step()
        if not st.clusters() and not engine.tasks:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > idle_exit:
                log.info("no clusters left: engine exits")
                break
        else:
            idle_since = None
        try:
            await asyncio.wait_for(stop_ev.wait(), timeout=engine.tuning.tick)
        except asyncio.TimeoutError:
            pass
    await engine.drain()


def _end_orphans_of_previous_engine() -> None:
    """A killed engine leaves its vagrant/ansible children running in its process group (it was a
    session leader, so the group id is its pid). End that group: its work is redone on resume."""
    try:
        old = int(pid_path().read_text())
    except (OSError, ValueError):
        return
    if old == os.getpid():
        return
    if running(old):
        return  # still alive: not ours to touch (the lock says it is not an engine any more, though)
    try:
        os.killpg(old, signal.SIGTERM)
        log.info("ended leftover processes of the previous engine (process group %d)", old)
    except (ProcessLookupError, PermissionError):
        pass


def _end_left_builds() -> None:
    """Role templates' build VMs whose engine was killed mid-build (lab/providers/buildaddresses.py)."""
    from lab.providers import buildaddresses, roletemplates

    try:
        for name in buildaddresses.end_left(roletemplates.root()):
            log.info("ended the role template build VM %s: the engine that built it was killed", name)
    except Exception as e:  # noqa: BLE001 - the next build given its address ends it too
        log.warning("could not look for left role template build VMs: %s", e)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    paths.home().mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path()))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("another engine holds %s: exiting", lock_path())
        return
    _end_orphans_of_previous_engine()
    _end_left_builds()
    pid_path().write_text(str(os.getpid()))
    log.info("engine %d started, state %s", os.getpid(), paths.home())
    try:
        asyncio.run(serve_forever())
    finally:
        pid_path().unlink(missing_ok=True)
        lock.release()


if __name__ == "__main__":
    main()
