"""Warm start on the Vagrant provider's local host: which nodes can be forked, and forking them
(docs/adr/0011). VagrantProvider asks `blocker` first; a node it says nothing against is forked
(`start`), any other boots cold with `vagrant up`, and the reason becomes a warning event.

What Vagrant still does for a cluster of forks: nothing per VM. The Vagrantfile keeps listing every
node (a `vagrant ssh NODE` of a cold node, the cold path of a fallback), and `vagrant status` shows
forks as "not created": the lab's own views (list-cluster-nodes, `slurmlab ssh`) are the truthful ones.
Acting on a fork goes through libvirt: reboot is a cold boot of its own disk (its identity is on it),
stop is an ACPI shutdown, remove undefines it and deletes its overlay.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from lab import paths
from lab.host import kvm, libvirtd, pools
from lab.providers import fork, hosttemplates, placement, roletemplates, templates
from lab.providers.base import ClusterNet, LaunchError, MachineSpec, Observed, Start
from lab.workspace import ClusterDir

log = logging.getLogger(__name__)

SSH_AFTER_FORK_S = 300.0  # a fork answers ssh ~4 s after its identity is set; with 12 VMs on 2 cores one took over 60 s (then it was thrown away and booted cold)
WARM_FEATURE = "warm-start"  # in the box's slurmlab.json: the box has qemu-guest-agent and fork-identity


def answers_within(cluster: str, address: str, limit_s: float, probe: Callable[..., bool] | None = None,
                   pause_s: float = 0.5) -> bool:
    """Does the VM at `address` take an ssh login within `limit_s`? Each try waits longer than the last
    (3 s to connect and 15 s in all, up to 30 s and 90 s): on a starved host a live VM's sshd took more
    than 15 s for one login, and a probe that always gave up first never saw it answer (issue 43's CI)."""
    if probe is None:
        from lab.providers.reach import ssh_answers as probe
    t0 = time.monotonic()
    tries = 0
    while not probe(cluster, address, connect_timeout=min(3 + 3 * tries, 30), timeout=min(15 + 15 * tries, 90)):
        tries += 1
        if time.monotonic() - t0 > limit_s:
            return False
        time.sleep(pause_s)
    return True


def shape_of(m: MachineSpec) -> templates.Shape:
    return templates.Shape(m.cpus, m.memory_mib)


def box_supports(box: str) -> str | None:
    """Why `box` cannot be forked (None: it can)."""
    from lab.box import vagrant as boxvagrant

    marker = boxvagrant.read_marker(boxvagrant.box_dir(box, "0"))
    if marker is None:
        return f"box {box} was not built by slurmlab (no guest agent, no fork-identity)"
    if WARM_FEATURE not in marker.get("features", []):
        return f"box {box} was built before warm start (slurmlab box build makes a new one)"
    return None


BACKGROUND_NICE = 10  # a role template built while clusters are made runs behind their VMs


class WarmStart:
    def __init__(self) -> None:
        self._prebuilding: set[str] = set()
        self._lock = threading.Lock()
        # what runs template.yml on a role template's build VM (lab/configure/roletemplate.run, given by
        # the engine: this package runs no Ansible); None: role templates are used, never built
        self.configure_template: roletemplates.Configure | None = None

    def role_template(self, cluster: str, machine: MachineSpec, box: str) -> tuple[roletemplates.RoleTemplate | None, str]:
        """The role template `machine` is forked from, or None and why (it is then forked from the plain
        template and fully configured; a missing role template starts building in the background)."""
        if machine.node_type not in roletemplates.ROLES:
            return None, "not a Slurm node"
        if not machine.role_template:
            return None, "its cluster forks no role template (Lab.RoleTemplates false, or HyperPod-shaped nodes)"
        if machine.state_disk and _state_disk_exists(cluster, machine.state_disk):
            return None, "its state disk holds the cluster's state (a role template's memory expects its own)"
        driver = kvm.detect().driver
        shape = shape_of(machine)
        # a failed build's reason (or a template held back by hand: a .failed file beside it) wins
        if (why := roletemplates.failure(box, shape, driver, machine.node_type)) is not None:
            return None, f"its role template is not used: {why[:200]} (slurmlab box templates --rebuild)"
        t = roletemplates.find(box, shape, driver, machine.node_type)
        if t is not None:
            return t, ""
        self._build_role_in_background(box, shape, driver, machine.node_type)
        return None, f"no {machine.node_type} role template of {shape} yet: it builds in the background"

    def _build_role_in_background(self, box: str, shape: templates.Shape, driver: str, role: str) -> None:
        if self.configure_template is None:
            return
        configure = self.configure_template
        self._in_background(f"{box}/{shape}/{role}", f"role-template-{role}-{shape}",
                            lambda: roletemplates.ensure(box, shape, driver, role, configure, progress=log.info,
                                                         nice=BACKGROUND_NICE))

    def _in_background(self, k: str, thread: str, build: Callable[[], object]) -> None:
        """Run `build` (a template's) in a thread, once at a time per `k`; its TemplateError is logged."""
        with self._lock:
            if k in self._prebuilding:
                return
            self._prebuilding.add(k)

        def run() -> None:
            try:
                build()
            except templates.TemplateError as e:
                log.warning("%s", e)
            finally:
                with self._lock:
                    self._prebuilding.discard(k)

        threading.Thread(target=run, daemon=True, name=thread).start()

    def blocker(self, cluster: str, machine: MachineSpec, box: str) -> str | None:
        """Why `machine` boots cold (None: it is forked)."""
        if machine.start != Start.WARM:
            return "Lab.Start is Cold"
        return box_supports(box) or templates.failure(box, shape_of(machine), kvm.detect().driver)

    def prebuild(self, box: str, machines: Sequence[MachineSpec]) -> None:
        """Start building, in the background, the templates `machines` will need (one per shape), so
        that the controller's fork does not wait for the compute nodes' template or the other way round."""
        driver = kvm.detect().driver
        for shape in sorted({shape_of(m) for m in machines if m.start == Start.WARM}, key=str):
            if box_supports(box) or templates.failure(box, shape, driver) or templates.find(box, shape, driver):
                continue
            self._in_background(f"{box}/{shape}", f"template-{shape}",
                                lambda s=shape: templates.ensure(box, s, driver, progress=log.info))

    def start(self, cluster: str, machine: MachineSpec, machines: Sequence[MachineSpec], net: ClusterNet,
              box: str) -> Observed:
        """Fork `machine` and wait until it answers ssh. Raises templates.TemplateError or fork.ForkError
        (nothing left behind): the caller boots it cold."""

        t0 = time.monotonic()
        role_tpl, why_not = self.role_template(cluster, machine, box)
        tpl = role_tpl or templates.ensure(box, shape_of(machine), kvm.detect().driver, progress=log.info)
        t_tpl = time.monotonic() - t0
        cd = ClusterDir(cluster)
        host = placement.host_of(cluster)
        if host.local:
            timings = self._fork_here(cluster, machine, machines, net, tpl, role_tpl, cd)
        else:
            timings = self._fork_on(host, cluster, machine, machines, net, tpl, cd)
        t1 = time.monotonic()
        if not answers_within(cluster, machine.address, SSH_AFTER_FORK_S):
            self.remove(cluster, machine.name)
            raise fork.ForkError(f"{machine.name} was forked but did not answer ssh within {SSH_AFTER_FORK_S:.0f} s")
        timings["ssh"] = round(time.monotonic() - t1, 2)
        if t_tpl > 1:
            timings["template"] = round(t_tpl, 1)
        details = {"start": Start.WARM.value, "template": tpl.key, "timings": timings,
                   "seconds": round(time.monotonic() - t0, 1), "role_template": role_tpl is not None}
        if role_tpl is None and machine.node_type in roletemplates.ROLES:
            details["notice"] = f"forked from the plain template and fully configured: {why_not}"
        return Observed(machine.name, "running", machine.address, details=details)

    @staticmethod
    def _fork_here(cluster: str, machine: MachineSpec, machines: Sequence[MachineSpec], net: ClusterNet,
                   tpl: templates.Template, role_tpl: roletemplates.RoleTemplate | None, cd: ClusterDir) -> dict:
        """A fork on this machine: its files in the lab's pool folder."""
        state = None
        copied = False
        if machine.state_disk:
            state = paths.pool_dir() / machine.state_disk
            if role_tpl is not None:  # a new cluster's state disk: the role template's, formatted and filled
                roletemplates.copy_state(role_tpl, state)
                copied = True
            elif not state.exists():
                r = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(state), _state_size()],
                                   capture_output=True, text=True)
                if r.returncode:
                    raise fork.ForkError(f"qemu-img create {state}: {r.stderr.strip()}")
        conn = libvirtd.connect()
        try:
            timings = fork.fork(conn, pool_dir=paths.pool_dir(), template=tpl, cluster=cluster, machine=machine,
                                machines=machines, net=net, public_key=cd.ssh_key.with_suffix(".pub").read_text(),
                                munge_key=cd.munge_key.read_bytes(), state_disk=state)
            _refresh_pool(conn, libvirtd.POOL)  # the overlay (and a new state disk) become volumes libvirt knows
        except fork.ForkError:
            if copied:  # the cold path makes its own state disk
                state.unlink(missing_ok=True)
            raise
        finally:
            conn.close()
        return timings

    @staticmethod
    def _fork_on(host, cluster: str, machine: MachineSpec, machines: Sequence[MachineSpec], net: ClusterNet,
                 tpl: templates.Template, cd: ClusterDir) -> dict:
        """A fork on another host: the template's files uploaded to its pool once, the fork's own as
        volumes there (lab/providers/hosttemplates.py)."""
        from lab.host.caps import driver_of

        t0 = time.monotonic()
        conn = host.connect()
        state = None
        try:
            if (theirs := driver_of(host, conn)) != (ours := kvm.detect().driver):
                raise fork.ForkError(f"the templates are {ours} domains and host {host.name} runs {theirs} ones")
            store = hosttemplates.PoolStore(conn, host.pool, hosttemplates.ensure(host, conn, tpl), tpl)
            uploaded = time.monotonic() - t0
            made_state = machine.state_disk is not None and not _state_disk_exists(cluster, machine.state_disk)
            try:
                if machine.state_disk:
                    state = store.state_disk(machine.state_disk, _state_size())
                timings = fork.fork(conn, pool_dir=paths.pool_dir(), template=tpl, cluster=cluster, machine=machine,
                                    machines=machines, net=net, public_key=cd.ssh_key.with_suffix(".pub").read_text(),
                                    munge_key=cd.munge_key.read_bytes(), state_disk=state, store=store)
            except (fork.ForkError, templates.TemplateError, OSError) as e:
                if made_state:  # the cold path makes its own state disk
                    store.drop(machine.state_disk)
                raise fork.ForkError(str(e)) from None
            except Exception as e:  # a libvirtError of the state disk
                if made_state:
                    store.drop(machine.state_disk)
                raise fork.ForkError(f"{machine.name}: state disk on host {host.name}: {e}") from None
        finally:
            conn.close()
        if uploaded > 1:
            timings["upload"] = round(uploaded, 1)
        return timings

    # ---------------------------------------------------------------- acting on a fork through libvirt
    @staticmethod
    def is_fork(cluster: str, name: str) -> bool:
        import libvirt

        conn = placement.host_of(cluster).connect()
        try:
            return fork.fork_of(conn.lookupByName(name).XMLDesc(0)) is not None
        except libvirt.libvirtError:
            return False
        finally:
            conn.close()

    def reboot(self, cluster: str, name: str, address: str | None) -> None:
        """A fork's reboot: its VM stops and boots cold from its own disk (its identity is written there)."""
        import libvirt

        conn = placement.host_of(cluster).connect()
        try:
            d = conn.lookupByName(name)
            if d.isActive():
                d.destroy()
            d.create()
        except libvirt.libvirtError as e:
            raise LaunchError(f"{name}: reboot failed: {e.get_error_message()}") from None
        finally:
            conn.close()
        if address and not answers_within(cluster, address, 600):
            raise LaunchError(f"{name} did not answer ssh within 600 s of its reboot")

    def stop(self, cluster: str, name: str, timeout: float = 120) -> None:
        """ACPI shutdown (the guest flushes its disks), forced after `timeout`."""
        import libvirt

        conn = placement.host_of(cluster).connect()
        try:
            d = conn.lookupByName(name)
            if not d.isActive():
                return
            d.shutdown()
            t0 = time.monotonic()
            while d.isActive() and time.monotonic() - t0 < timeout:
                time.sleep(1)
            if d.isActive():
                d.destroy()
        except libvirt.libvirtError:
            pass
        finally:
            conn.close()

    @staticmethod
    def remove(cluster: str, name: str) -> None:
        from lab.providers.domains import purge

        purge(cluster, name)


def _refresh_pool(conn, pool: str) -> None:
    import libvirt

    try:
        pools.refresh(conn.storagePoolLookupByName(pool))
    except libvirt.libvirtError as e:
        log.warning("storage pool %s not refreshed: %s", pool, e.get_error_message())


def _state_disk_exists(cluster: str, name: str) -> bool:
    """Whether the cluster's state disk `name` is on its host (a file here, a volume of another host's pool)."""
    import libvirt

    host = placement.host_of(cluster)
    if host.local:
        return (paths.pool_dir() / name).exists()
    conn = host.connect()
    try:
        pool = conn.storagePoolLookupByName(host.pool)
        pools.refresh(pool)
        pool.storageVolLookupByName(name)
        return True
    except libvirt.libvirtError:
        return False
    finally:
        conn.close()


def _state_size() -> str:
    from lab.providers.state_disk import SIZE

    return SIZE
