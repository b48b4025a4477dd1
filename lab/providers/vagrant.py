"""The real provider: Vagrant + vagrant-libvirt act, libvirt-python observes.

`vagrant up NODE` / `vagrant destroy -f NODE` run in the cluster's folder (inside the lab's
network namespace in netns mode); python-vagrant is kept behind this class. Reading state goes
through libvirt directly (0.3 s for all domains, against ~2 s per `vagrant status`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from lab import secrets
from lab.errors import LabError
from lab.host import libvirtd, registry
from lab.providers import (agent, checkpoint, disk, domains, fork, hostside, leftovers, network, placement, priority,
                           state_disk, templates, vagrantfile)
from lab.providers.base import (DISK_FULL, Checkpoints, ClusterNet, LaunchError, MachineSpec, Observed, Placement, Provider,
                                ProviderUnreachable, mac_for)
from lab.providers.warm import WarmStart
from lab.providers.domains import purge as _purge_domain
from lab.providers.reach import ssh_answers, vagrant_exe
from lab.providers.watch import STATE_NAMES, domain_state, end_group, stale_vagrants, stopped_while_booting, wait_or_ready
from lab.osutil import atomic_write, kill_group
from lab.workspace import ClusterDir

log = logging.getLogger(__name__)


# What vagrant says when trying again cannot help (checked on the log's tail): the node becomes a
# Failure at once instead of retrying. Anything else (libvirt busy, a domain that did not start, a
# network hiccup) is transient.
PERMANENT_FAILURES = (
    "could not be found or could not be accessed",  # the box is not installed (slurmlab box build)
    "There is a syntax error in the following Vagrantfile",
    "There are errors in the configuration of this machine",
    "The provider 'libvirt' could not be found",  # vagrant-libvirt missing (slurmlab doctor)
)


def is_transient(log_tail: str) -> bool:
    """Whether a failed vagrant command may succeed when tried again (PERMANENT_FAILURES: no)."""
    return not any(p in log_tail for p in PERMANENT_FAILURES)


def _vagrant_env() -> dict[str, str]:
    return {
        **os.environ,
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "VAGRANT_NO_COLOR": "1",
    }


class VagrantProvider(Provider, Checkpoints, Placement):
    """Real VMs. Every method blocks (subprocesses, libvirt): the engine runs the coroutine twins
    of lab.providers.base.Provider, which put each call in a thread."""

    name = "vagrant"
    id_prefix = "i-"

    def __init__(self, box: str | None = None):
        from lab import box as boxmod

        self.box = box or boxmod.DEFAULT_BOX
        self._machines: dict[str, dict[str, MachineSpec]] = {}
        self._lock = threading.Lock()
        self._inflight: dict[str, set] = {}  # cluster -> running vagrant processes (Popen)
        self._swept: dict[str, float] = {}  # cluster -> when its lost hosts were last asked (_sweep_abandoned)
        self._boxes: dict[str, str] = {}  # cluster -> its box (prepare)
        self._nets: dict[str, ClusterNet] = {}  # cluster -> its network (prepare)
        self.warm = WarmStart()  # nodes forked from saved templates (docs/adr/0011)

    # ------------------------------------------------------------------ helpers
    def _vagrant(self, cluster: str, args: list[str], logname: str, timeout: float = 1800,
                 ready: Callable[[], bool] | None = None, poll: float = 2.0,
                 abort: Callable[[], str | None] | None = None) -> None:
        """Run `vagrant ARGS` in the cluster's folder. With `ready`, return as soon as it says yes
        (checked every `poll` s): `vagrant up` goes on with its own bookkeeping for tens of seconds
        after the VM answers ssh (measured: the naive build's VMs answered at 163-185 s, `vagrant
        up` returned at 221 s); it then finishes in the background, still ended by a delete."""
        import subprocess

        cd = ClusterDir(cluster)
        logf = cd.logs / f"{logname}.log"
        cmd = [vagrant_exe(placement.host_of(cluster)), *args]
        for pid in stale_vagrants(cd.root, logname):
            # a `vagrant up` left to finish in the background (by this engine or a killed one) that never
            # did holds vagrant's lock on the machine: every later up, reload or destroy of it fails
            log.warning("ending vagrant (pid %s) still running on %s: it holds the machine's lock", pid, logname)
            kill_group(pid, grace=10.0, alive=lambda pid=pid: Path(f"/proc/{pid}").exists())
        with open(logf, "a") as f:
            f.write(f"\n$ vagrant {' '.join(args)}\n")
            f.flush()
            # its own process group: a delete can end it (and its ssh children) at once
            proc = subprocess.Popen(cmd, cwd=cd.root, env=_vagrant_env(), stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self._inflight.setdefault(cluster, set()).add(proc)
        try:
            rc = wait_or_ready(proc, timeout, ready, poll, abort=abort)
        except LaunchError as e:
            with self._lock:
                self._inflight.get(cluster, set()).discard(proc)
            e.log_path = logf
            raise
        if rc is None:  # ready before vagrant returned: let it finish in the background
            threading.Thread(target=self._reap, args=(cluster, proc, args, logf), daemon=True).start()
            return
        with self._lock:
            self._inflight.get(cluster, set()).discard(proc)
        if rc != 0:
            tail = "\n".join(logf.read_text().splitlines()[-12:])
            raise LaunchError(f"vagrant {' '.join(args)} failed ({rc}):\n{tail}", log_path=logf,
                              transient=is_transient(tail))

    def _reap(self, cluster: str, proc, args: list[str], logf: Path) -> None:
        rc = proc.wait()
        with self._lock:
            self._inflight.get(cluster, set()).discard(proc)
        if rc != 0:
            log.warning("vagrant %s exited %s after the VM answered ssh (see %s)", " ".join(args), rc, logf)

    def stop_inflight(self, cluster: str) -> int:
        """End the vagrant commands still running for a cluster (a delete or a rollback needs no
        VM that is still booting). Returns how many were ended."""
        with self._lock:
            procs = list(self._inflight.get(cluster, ()))
        for p in procs:
            end_group(p)
        return len(procs)

    def network(self, cluster: str, preferred_index: int = 0) -> ClusterNet:
        return network.ensure(cluster, preferred_index)

    # ------------------------------------------------------------------ interface

    def preflight(self, box: str | None, cluster: str) -> None:
        """The box added to Vagrant, the host up (namespace, libvirtd, pool), no leftovers of the name."""
        from lab import box as boxes

        boxes.require(box)
        libvirtd.up()
        leftovers.refuse(cluster)

    def leftovers(self, cluster: str, remove: bool = False) -> list[str]:
        return leftovers.remove(cluster) if remove else leftovers.find(cluster)

    def allocate(self, cluster: str, name: str, used: set[str], preferred_index: int = 0) -> tuple[str, str]:
        """A free static address on the cluster's network, and the node's stable MAC."""
        net = network.ensure(cluster, preferred_index)
        i = 0
        while network.address_for(net, i) in used:
            i += 1
        return network.address_for(net, i), mac_for(cluster, name)

    def prepare(self, cluster: str, machines: list[MachineSpec], preferred_index: int = 0,
                box: str | None = None) -> ClusterNet:
        """Write the cluster's folder: keys and the Vagrantfile listing `machines`. Idempotent."""
        cd = ClusterDir(cluster)
        cd.create()
        pub = secrets.ensure_ssh_key(cd.ssh_key, f"slurmlab-{cluster}")
        secrets.ensure_munge_key(cd.munge_key)
        libvirtd.up()
        host = placement.place(cluster, sum(m.memory_mib for m in machines), sum(m.cpus for m in machines))
        net = self.network(cluster, preferred_index)
        on = hostside.inputs(host, cluster, cd.munge_key)
        with self._lock:
            self._machines[cluster] = {m.name: m for m in machines}
            self._boxes[cluster] = box or self.box
            self._nets[cluster] = net
            text = vagrantfile.render(
                cluster=cluster, box=box or self.box, machines=list(self._machines[cluster].values()), net=net,
                private_key=str(cd.ssh_key), public_key=pub, driver=on.driver, emulator_path=on.emulator_path,
                pool=host.pool, uri=on.uri, munge_key_file=on.munge_key_file, state_disk_size=state_disk.SIZE,
                features=on.features, proxy_command=on.proxy_command,
            )
            hostside.refuse_foreign(host, text, on.pool_path)
            if not cd.vagrantfile.exists() or cd.vagrantfile.read_text() != text:
                atomic_write(cd.vagrantfile, text)
        for b in sorted({m.box or box or self.box for m in machines}):  # built here, whatever the host
            self.warm.prebuild(b, [m for m in machines if (m.box or box or self.box) == b])
        return net

    def ensure(self, cluster: str, machine: MachineSpec) -> Observed:
        """Start the VM (create it if missing) and wait until it answers SSH: a new VM is forked from
        its shape's template where it can be (warm.py), else booted with `vagrant up`; the reason for a
        cold boot is in the answer's details["warning"]."""
        host = placement.host_of(cluster)
        present = self.observe(cluster)
        if machine.name in present and self.warm.is_fork(cluster, machine.name):
            self.warm.reboot(cluster, machine.name, machine.address)  # a fork left shut off: its own disk boots
            return Observed(machine.name, "running", machine.address)
        if machine.name not in present:
            room = placement.room(host, cluster)
            if room.memory_mib < machine.memory_mib:
                raise LaunchError(f"InsufficientCapacity: host {host.name} has {room.memory_mib} MiB free for VMs "
                                  f"({registry.HOST_RESERVE_MIB} MiB kept for the host{', and the lab limit' if host.memory_mib else ''}); "
                                  f"{machine.name} needs {machine.memory_mib} MiB",
                                  transient=True)  # memory frees up: retried like HyperPod's capacity shortages
            short = disk.refusal(machine.name, host=host)
            if short:
                raise LaunchError(short, transient=True)
        network.add_host(cluster, machine.mac, machine.name, machine.address)
        if machine.node_type == "Controller" and not host.remote:  # its qemu is not a process of this machine
            priority.favor_when_started(machine.name)  # it boots first when every VM boots at once
        cold_because = None
        if machine.name not in present:
            box = machine.box or self._boxes.get(cluster, self.box)
            cold_because = self.warm.blocker(cluster, machine, box)
            if cold_because is None:
                try:
                    return self.warm.start(cluster, machine, self._cluster_machines(cluster, machine),
                                           self._nets.get(cluster) or self.network(cluster), box)
                except (templates.TemplateError, fork.ForkError) as e:
                    cold_because = str(e)
                    log.warning("%s boots cold: %s", machine.name, e)
        self._vagrant(cluster, ["up", machine.name, "--provider", "libvirt", "--no-provision"], machine.name,
                      ready=lambda: ssh_answers(cluster, machine.address, connect_timeout=3, timeout=15),
                      abort=stopped_while_booting(machine.name, lambda n: domain_state(n, host.connect)))
        obs = self.observe(cluster).get(machine.name)
        if not obs or obs.state != "running":
            raise LaunchError(f"{machine.name}: vagrant up returned but the domain is {obs.state if obs else 'missing'}")
        obs.address = machine.address
        obs.details["start"] = "Cold"
        if cold_because and cold_because != "Lab.Start is Cold":
            obs.details["warning"] = f"booted cold: {cold_because}"
        return obs

    def forks(self, cluster: str, machine: MachineSpec) -> bool:
        return self.warm.blocker(cluster, machine, machine.box or self._boxes.get(cluster, self.box)) is None

    def _cluster_machines(self, cluster: str, machine: MachineSpec) -> list[MachineSpec]:
        """Every machine of the cluster as prepare() last saw them, `machine` among them (its /etc/hosts)."""
        with self._lock:
            ms = dict(self._machines.get(cluster, {}))
        ms[machine.name] = machine
        return list(ms.values())

    def silent(self, cluster: str, names: list[str]) -> dict[str, str]:
        return agent.silent_on(placement.host_of(cluster), names)  # each guest agent pinged (issue 45)

    def observe(self, cluster: str) -> dict[str, Observed]:
        import libvirt

        host = placement.host_of(cluster)
        try:
            conn = host.connect()
        except libvirt.libvirtError as e:
            raise ProviderUnreachable(f"libvirt unreachable on host {host.name} ({host.uri}): {e.get_error_message()}") from None
        try:
            found = {}
            for dom in domains.of_cluster(conn, cluster):
                try:
                    code, reason = dom.state()
                except libvirt.libvirtError as e:  # removed between the listing and this call: gone, not unreachable
                    if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                        continue
                    raise
                state = disk.observe(dom, code, reason) or STATE_NAMES.get(code, "other")
                found[dom.name()] = Observed(dom.name(), state,
                                             details={"message": disk.message()} if state == DISK_FULL else {})
        except libvirt.libvirtError as e:  # the connection dropped while listing (libvirtd stopped)
            raise ProviderUnreachable(f"libvirt stopped answering on host {host.name} ({host.uri}): {e.get_error_message()}") from None
        finally:
            with contextlib.suppress(Exception):
                conn.close()
        self._sweep_abandoned(cluster)
        return found

    def reboot(self, cluster: str, name: str) -> Observed:
        """Restart the VM (start it if it is shut off) and wait until it answers SSH again."""
        if self.warm.is_fork(cluster, name):
            m = self._machines.get(cluster, {}).get(name)
            self.warm.reboot(cluster, name, m.address if m else None)
            return Observed(name, "running", m.address if m else None)
        self._vagrant(cluster, ["reload", name, "--no-provision"], name)
        obs = self.observe(cluster).get(name)
        if not obs or obs.state != "running":
            raise LaunchError(f"{name}: vagrant reload returned but the domain is {obs.state if obs else 'missing'}")
        return obs

    def _destroy(self, cluster: str, name: str) -> None:
        """`vagrant destroy -f NAME`, never taking the cluster's network (slurmlab's: network.py) with it:
        vagrant-libvirt undefines the networks of a machine's `created_networks` that libvirt reports no
        connections on, so that list goes first (machines made before `management_network_keep` too)."""
        (ClusterDir(cluster).root / ".vagrant" / "machines" / name / "libvirt" / "created_networks").unlink(missing_ok=True)
        try:
            self._vagrant(cluster, ["destroy", "-f", name], name, timeout=600)
        except LaunchError as e:
            log.warning("vagrant destroy %s failed, removing through libvirt: %s", name, e)

    def remove(self, cluster: str, names: list[str]) -> None:
        for name in names:
            if not self.warm.is_fork(cluster, name):  # Vagrant never made a fork
                self._destroy(cluster, name)
            _purge_domain(cluster, name)

    def delete_cluster(self, cluster: str) -> list[str]:
        """Remove every domain, volume and network of the cluster, then its folder."""
        self.stop_inflight(cluster)
        removed = []
        names = sorted(self.observe(cluster))
        cd = ClusterDir(cluster)
        if names and cd.vagrantfile.exists():
            for n in names:
                if not self.warm.is_fork(cluster, n):
                    self._destroy(cluster, n)
        for n in names:
            _purge_domain(cluster, n)
            removed.append(f"domain {n}")
        removed += state_disk.delete_volumes(cluster)
        removed += checkpoint.delete_all(cluster)
        removed += domains.purge_abandoned(cluster)
        if network.remove(cluster):
            removed.append(f"network {network.net_name(cluster)}")
        libvirtd.prune_box_volumes(self.box)
        shutil.rmtree(vagrantfile.credentials_dir(cluster), ignore_errors=True)
        cd.remove()
        self._machines.pop(cluster, None)
        self._boxes.pop(cluster, None)
        self._nets.pop(cluster, None)
        return removed

    def checkpoint(self, cluster: str, tag: str, record: dict) -> dict:
        return checkpoint.take(cluster, tag, record)

    def restore(self, cluster: str, tag: str) -> dict:
        return checkpoint.restore(cluster, tag)

    def checkpoints(self, cluster: str) -> list[dict]:
        return checkpoint.summaries(cluster)

    def delete_checkpoint(self, cluster: str, tag: str) -> None:
        checkpoint.delete(cluster, tag)

    def stop(self, cluster: str, name: str) -> None:
        """`vagrant halt NAME` (a fork: ACPI): the guest flushes its disks; forced after a timeout."""
        if (obs := self.observe(cluster).get(name)) is not None and obs.state == "running":
            if self.warm.is_fork(cluster, name):
                self.warm.stop(cluster, name)
            else:
                self._vagrant(cluster, ["halt", name], name, timeout=600)

    def place(self, cluster: str, memory_mib: int, cpus: int) -> str | None:
        ClusterDir(cluster).create()
        return placement.place(cluster, memory_mib, cpus).name

    def host_of(self, cluster: str) -> str | None:
        return placement.placed(cluster) or registry.LOCAL

    def rehome(self, cluster: str, memory_mib: int, cpus: int) -> str | None:
        """Another host for the cluster; vagrant's records of the lost one's VMs go (ids of no use there)."""
        host = placement.rehome(cluster, memory_mib, cpus)
        if host is None:
            return None
        self.stop_inflight(cluster)
        if stale := domains.purge_cluster_on(host, cluster):  # an earlier life's, not this cluster's VMs now
            log.warning("cluster %s: removed from host %s before its nodes launch there: %s", cluster, host.name, stale)
        shutil.rmtree(ClusterDir(cluster).root / ".vagrant", ignore_errors=True)
        self._swept.pop(cluster, None)
        return host.name

    SWEEP_EVERY_S = 30.0

    def _sweep_abandoned(self, cluster: str) -> None:
        """Remove what the cluster left on hosts that were lost, once they answer again."""
        import time

        import libvirt

        left = placement.abandoned(cluster)
        if not left or time.monotonic() - self._swept.get(cluster, -1e9) < self.SWEEP_EVERY_S:
            return
        self._swept[cluster] = time.monotonic()
        for name in left:
            try:
                host = registry.get(name)
                done = domains.purge_cluster_on(host, cluster)
            except libvirt.libvirtError:
                continue  # still away
            except LabError:  # the host was removed from the list: nothing left to reach
                done = []
            placement.forget_abandoned(cluster, name)
            for d in done:
                log.warning("cluster %s: removed %s (left there when that host was lost)", cluster, d)

    def keeps_state(self, cluster: str, name: str) -> bool:
        return state_disk.attached(cluster, name)


