"""The fault benchmarks' cluster (bench/faults.py, bench/faults_parts.py): its spec, commands run on it,
and what the lab's state, libvirt and /proc say about it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAME = "faults"
SPEC = f"""ClusterName: {NAME}
NodeProvisioningMode: Continuous
NodeRecovery: Automatic
InstanceGroups:
  - InstanceGroupName: controller
    InstanceType: ml.t3.medium
    InstanceCount: 1
    SlurmConfig: {{NodeType: Controller}}
    LifeCycleConfig: {{SourceS3Uri: {REPO / 'examples' / 'lifecycle'}, OnCreate: on_create.sh}}
  - InstanceGroupName: compute
    InstanceType: ml.c5.large
    InstanceCount: 2
    SlurmConfig: {{NodeType: Compute, PartitionNames: [dev]}}
    LifeCycleConfig: {{SourceS3Uri: {REPO / 'examples' / 'lifecycle'}, OnCreate: on_create.sh}}
"""
C1, C2 = f"{NAME}-compute-1", f"{NAME}-compute-2"
# a kernel panic (kernel.panic=0: the vCPU spins): libvirt says the VM runs, nothing in it answers. From a
# timer, PANIC_IN_S later: the ssh command that set it has returned by then
PANIC_IN_S = 5
PANIC = (f"sudo systemd-run --on-active={PANIC_IN_S} --timer-property=AccuracySec=100ms --unit=slurmlab-panic "
         "sh -c 'echo 1 > /proc/sys/kernel/sysrq; echo c > /proc/sysrq-trigger'")


def say(msg: str) -> None:
    print(f"faults: [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sl(*args, check=True, timeout=1800) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=REPO)
    if check and p.returncode != 0:
        raise RuntimeError(f"slurmlab {' '.join(args)} exited {p.returncode}: {(p.stdout + p.stderr).strip()[-1500:]}")
    return p


def on(node: str, command: str, check=True, timeout=300) -> str:
    p = sl("ssh", NAME, node, "--", command, check=False, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{command!r} on {node} exited {p.returncode}: {(p.stdout + p.stderr).strip()[-800:]}")
    return p.stdout


class Lab:
    def __init__(self, home: Path, name: str = NAME):
        from lab.store.db import Store

        self.home, self.name = home, name
        self.st = Store(home / "state.db")
        self.pool = None  # bench.faults.LoopPool when the run has a pool of its own

    # ------------------------------------------------------------------ what is there
    def phase(self, node: str) -> str | None:
        n = self.st.node(self.name, node)
        return n.phase if n else None

    def node(self, node: str):
        return self.st.node(self.name, node)

    def full(self) -> bool:
        c = self.st.cluster(self.name)
        if c is None:
            return False
        nodes = self.st.nodes(self.name)
        return all(sum(1 for n in nodes if n.grp == g.name and n.phase == "running") == g.target_count
                   and sum(1 for n in nodes if n.grp == g.name) == g.target_count for g in self.st.groups(self.name))

    def lost(self) -> list[str]:
        return [f"{n.name}: {n.phase} {n.message}"[:200] for n in self.st.nodes(self.name) if n.phase != "running"]

    def orphans(self) -> list[str]:
        """Domains and pool volumes of the cluster no node owns; this lab's Vagrant/Ansible processes
        outside the running engine's process group and not its children."""
        from lab.engine import daemon
        from lab.host import libvirtd
        from lab.providers.base import state_disk_name

        c = self.st.cluster(self.name)
        nodes = {n.name for n in self.st.nodes(self.name)} if c else set()
        # the controller's state disk belongs to the cluster, not to a node (docs/adr/0007)
        owned = {state_disk_name(self.name, c.created_at)} if c else set()
        out = []
        conn = libvirtd.connect()
        try:
            for d in conn.listAllDomains():
                if d.name().startswith(f"{self.name}-") and d.name() not in nodes:
                    out.append(f"domain {d.name()}")
            pool = conn.storagePoolLookupByName(libvirtd.POOL)
            pool.refresh(0)
            for v in pool.listAllVolumes():
                if (v.name().startswith(f"{self.name}-") and v.name() not in owned
                        and not any(v.name().startswith(n) for n in nodes)):
                    out.append(f"volume {v.name()}")
            if not nodes:
                out += [f"network {n.name()}" for n in conn.listAllNetworks() if self.name in n.name()]
        finally:
            conn.close()
        engine = daemon.running_pid()
        mark = f"SLURMLAB_HOME={self.home}".encode()
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if mark not in (proc / "environ").read_bytes().split(b"\0"):
                    continue
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                pgid = os.getpgid(int(proc.name))
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ProcessLookupError, ValueError, IndexError):
                continue
            # the engine's `vagrant up` runs in a session of its own, and may finish in the background after
            # its VM answers (lab/providers/vagrant.py): the engine's child, not an orphan
            if int(proc.name) == os.getpid() or pgid == os.getpgid(0) or (engine and engine in (pgid, ppid)):
                continue
            if "vagrant" in cmd or "ansible" in cmd:
                out.append(f"process {proc.name} {cmd[:120]}")
        return out

    def leftovers(self) -> list[str]:
        """After the delete: anything of the cluster in libvirt or on disk."""
        out = self.orphans()
        if (self.home / "clusters" / self.name).exists():
            out.append(f"folder {self.home / 'clusters' / self.name}")
        return out

    # ------------------------------------------------------------------ acting
    def wait(self, cond: Callable[[], bool], timeout: float, what: str) -> float:
        t0 = time.monotonic()
        while not cond():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            time.sleep(1)
        return time.monotonic() - t0

    def destroy(self, node: str) -> None:
        from lab.host import libvirtd

        conn = libvirtd.connect()
        try:
            conn.lookupByName(node).destroy()
        finally:
            conn.close()

    def paused(self) -> list[str]:
        """The cluster's domains that are paused."""
        import libvirt

        from lab.host import libvirtd

        conn = libvirtd.connect()
        try:
            return sorted(d.name() for d in conn.listAllDomains()
                          if d.name().startswith(f"{self.name}-") and d.state()[0] == libvirt.VIR_DOMAIN_PAUSED)
        finally:
            conn.close()

    def domains(self) -> list[str]:
        from lab.host import libvirtd

        conn = libvirtd.connect()
        try:
            return sorted(d.name() for d in conn.listAllDomains() if d.name().startswith(f"{self.name}-"))
        finally:
            conn.close()

    def domain_running(self, node: str) -> bool:
        import libvirt

        from lab.host import libvirtd

        conn = libvirtd.connect()
        try:
            return conn.lookupByName(node).isActive() == 1
        except libvirt.libvirtError:
            return False
        finally:
            conn.close()

    def kill_engine(self) -> int:
        from lab.engine import daemon
        from lab.osutil import running

        pid = daemon.running_pid()
        if not pid or pid < 0:
            raise RuntimeError("no engine to kill")
        os.kill(pid, signal.SIGKILL)
        self.wait(lambda: not running(pid), 30, "the engine to die")
        return pid

    def scale_out(self) -> str:
        out = sl("batch-add-cluster-nodes", self.name, "compute", "--output", "json").stdout
        return json.loads(out)["Successful"][0]["NodeLogicalId"]

    def scale_in(self, node: str) -> None:
        sl("batch-delete-cluster-nodes", self.name, node)
        self.wait(lambda: self.full() and self.node(node) is None, 900, f"{node} removed")


def sinfo(node: str) -> str:
    return on("controller", f"sinfo -h -N -n {node} -o %T", check=False).strip()


def then_scale_in(lab: Lab, new: str, recover: float, detail: str, ok: bool = True) -> dict:
    """A scale-out scenario's row: what was lost or left while the added node ran, then it goes."""
    lost, orphans = lab.lost(), lab.orphans()
    lab.scale_in(new)
    return {"recover_s": round(recover, 1), "survived_extra": ok and not lost and not orphans,
            "lost_before_scale_in": lost, "orphans_before_scale_in": orphans, "detail": detail + "; then scaled in"}


def in_libvirtd(*command: str) -> None:
    """The same in libvirtd's mount namespace (`ip netns exec` gave it one; a mount made here after
    it started does not reach it). A libvirtd started later copies ours."""
    from lab.host import libvirtd

    pid = libvirtd.daemon_state("libvirtd").pid
    if pid and os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
        subprocess.run(["nsenter", "-t", str(pid), "-m", *command], check=False)
