"""The baseline of bench/cluster_timeline.py: the same spec built the naive way (real VMs, root).

No engine and no store: the library's own pieces, driven in the order a plain script would use.
  1. the cluster's folder, keys, isolated libvirt network and a Vagrantfile listing every node
     (VagrantProvider.prepare, as the engine does; every VM Lab.Start Cold: no warm-start template
     is built beside it), a static DHCP entry per node, then ONE
     `vagrant up <every node> --parallel` (vagrant-libvirt brings the machines up in parallel);
  2. ONE Ansible run of playbooks/site.yml over the full inventory (ansible-runner, the engine's
     runner and settings; slurm.conf lists every compute node from the start);
  3. the first job: `srun -N1 hostname` from the login node (the controller without one), polled.
Observed on the way, per node: its libvirt domain defined (libvirt polled each second), the VM
answering ssh (an ssh probe every 2 s inside the lab's namespace, with the cluster's key), its
Ansible tasks (ansible-runner's events). bench/phases.py turns them into phases.

Everything is removed afterwards, on failure and on Ctrl-C too: VagrantProvider.delete_cluster
(the engine's teardown: ends the vagrant command still running, vagrant destroy, domains and
volumes purged through libvirt, the network, the folder), then each node's domain and volumes once
more by name. Progress goes to stderr, one line per step with the seconds since the start.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from bench import phases as ph

REPO = Path(__file__).resolve().parents[1]
SSH_PROBE_EVERY = 2.0
FIRST_JOB_TIMEOUT = 600.0


class NaiveFailed(RuntimeError):
    pass


class _Clock:
    def __init__(self) -> None:
        self.t0 = time.time()

    def say(self, msg: str) -> None:
        print(f"[{time.time() - self.t0:7.1f}s] naive: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ probes
def srun_once(cluster: str, address: str, command: str = "srun -N1 hostname", timeout: float = 120) -> tuple[bool, str]:
    """One try of the first job on a node (ssh inside the lab's namespace, the cluster's key)."""
    from lab.configure.remote import run_on_node

    try:
        p = run_on_node(cluster, address, command, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    return p.returncode == 0, p.stdout


def ssh_answers(cluster: str, address: str) -> bool:
    """Does the VM take an ssh login with the cluster's key (what `vagrant up` waits for)?"""
    from lab.providers.reach import ssh_answers as answers

    return answers(cluster, address, connect_timeout=5, timeout=20)


def _watch_ssh(cluster: str, node: str, address: str, stop: threading.Event, seen: dict[str, float]) -> None:
    while not stop.is_set():
        if ssh_answers(cluster, address):
            seen[node] = time.time()
            return
        stop.wait(SSH_PROBE_EVERY)


def _watch_domains(names: set[str], stop: threading.Event, defined: dict[str, float]) -> None:
    """First time each domain shows in libvirt (vagrant-libvirt defines it after creating its disk)."""
    from lab.host import libvirtd

    conn = None
    while not stop.is_set() and len(defined) < len(names):
        try:
            if conn is None:
                conn = libvirtd.connect()
            now = time.time()
            for dom in conn.listAllDomains():
                if dom.name() in names:
                    defined.setdefault(dom.name(), now)
        except Exception:  # noqa: BLE001 - libvirt restarting, a domain vanishing mid-listing: next second
            try:
                if conn is not None:
                    conn.close()
            except Exception:  # noqa: BLE001
                pass
            conn = None
        stop.wait(1.0)
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass


# ------------------------------------------------------------------------------------ the cluster
def memory_warning(vm_mib: list[int], free_mib: int) -> str | None:
    """A warning when the VMs and the host's reserve (lab.host.registry.HOST_RESERVE_MIB) do not fit
    in `free_mib` (MemAvailable); the run goes on, as the engine's per-VM check would."""
    from lab.host.registry import HOST_RESERVE_MIB

    need = sum(vm_mib) + HOST_RESERVE_MIB
    if free_mib >= need:
        return None
    return (f"warning: {free_mib} MiB free, the VMs take {sum(vm_mib)} MiB (+{HOST_RESERVE_MIB} kept for the host); "
            "going on, as the engine's per-VM check would")


def _records(spec, prov, t0: float):
    """The cluster, its groups and its nodes as the engine would record them (in memory only)."""
    from lab.control import clusters
    from lab.engine.bookkeeping import instance_id
    from lab.store.db import ClusterRow, NodeRow

    stored, groups = clusters._group_rows(spec.name, spec)  # the rows create-cluster writes
    c = ClusterRow(name=spec.name, arn=clusters.arn(spec.name), status="Creating", failure_message=None,
                   spec=stored, provider="vagrant", net_index=1, created_at=t0)
    nodes, used = [], set()
    for g in groups:  # names, ordinals and address order as the engine's plan creates them
        for ordinal in range(1, g.target_count + 1):
            name = f"{c.name}-{g.name}-{ordinal}"
            address, mac = prov.allocate(c.name, name, used, c.net_index)
            used.add(address)
            # phase "booted": not running, so slurm.conf lists compute nodes only as `joining` says
            nodes.append(NodeRow(cluster=c.name, name=name, grp=g.name, ordinal=ordinal,
                                 instance_id=instance_id(c.name, name), address=address, mac=mac, phase="booted"))
    return c, groups, nodes


def machines_of(groups, nodes) -> list:
    """The VMs of the naive build for VagrantProvider.prepare: every one booted by `vagrant up`, so
    Lab.Start Cold (prepare would otherwise start building missing warm-start templates in the
    background, on the CPU the naive build is measured on)."""
    from lab.providers.base import MachineSpec, Start

    gmap = {g.name: g for g in groups}
    return [MachineSpec(n.name, n.grp, gmap[n.grp].cpus, gmap[n.grp].memory_mib, n.mac, n.address,
                        gmap[n.grp].node_type, start=Start.COLD) for n in nodes]


def _preflight(prov, name: str, expected: list[str]) -> None:
    """Nothing of a cluster of this name may exist, nor a domain of one of the `expected` node names:
    the libvirt daemon is shared with whoever else uses the lab, so a leftover is refused, never removed."""
    from lab.engine import daemon
    from lab.providers import network
    from lab.workspace import ClusterDir

    if daemon.running_pid():  # our private home's engine (the continuous run started it)
        daemon.stop()
    st = daemon.store()
    try:
        if st.cluster(name) is not None:
            raise NaiveFailed(f"cluster {name} is still in the store of {st.path}: the continuous run's delete did not finish")
    finally:
        st.close()
    found = prov.observe(name)
    if found:
        raise NaiveFailed(f"libvirt already has domains of a cluster {name}: {', '.join(sorted(found))}")
    if ClusterDir(name).root.exists():
        raise NaiveFailed(f"{ClusterDir(name).root} exists")
    from lab.host import libvirtd

    conn = libvirtd.connect()
    try:
        if network.net_name(name) in {n.name() for n in conn.listAllNetworks()}:
            raise NaiveFailed(f"libvirt network {network.net_name(name)} exists already")
        taken = sorted({d.name() for d in conn.listAllDomains()} & set(expected))
        if taken:
            raise NaiveFailed(f"libvirt already has domains named {', '.join(taken)}")
    finally:
        conn.close()


def _keep_logs(name: str, dest: Path) -> None:
    """vagrant's log and Ansible's stdout, copied out of the cluster's folder before it is removed."""
    from lab.workspace import ClusterDir

    cd = ClusterDir(name)
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(cd.logs.glob("*.log")) if cd.logs.exists() else []:
        shutil.copy2(f, dest / f.name)
    for out in sorted((cd.root / "ansible").glob("*/artifacts/*/stdout")):
        shutil.copy2(out, dest / f"ansible-{out.parents[2].name}.stdout")


def teardown(prov, name: str, names: list[str], up_done: threading.Event | None, say) -> list[str]:
    """Remove every domain, volume and the network of the naive cluster, and its folder. Returns
    what is still there afterwards (nothing, when all went well). `up_done` is set when the thread
    running `vagrant up` has returned (an Event: Python 3.11's Thread.is_alive() wrongly says False
    after a join() that Ctrl-C interrupted)."""
    from lab.host import libvirtd
    from lab.providers import network
    from lab.providers.domains import purge as _purge_domain

    say("teardown: end vagrant, destroy the VMs, remove volumes, network and folder")
    for _ in range(2):
        try:
            removed = prov.delete_cluster(name)  # ends the in-flight `vagrant up` first
            say(f"teardown: removed {', '.join(removed) or 'nothing'}")
        except Exception as e:  # noqa: BLE001 - go on: the by-name purge below still runs
            say(f"teardown: delete_cluster failed: {e}")
        if up_done is not None and not up_done.is_set():
            say("teardown: waiting for the ended `vagrant up` to return, then once more")
            up_done.wait(timeout=180)
            up_done = None
            continue
        break
    for n in names:  # a domain vagrant had not finished defining, or a volume without its domain
        try:
            _purge_domain(name, n)
        except Exception as e:  # noqa: BLE001
            say(f"teardown: purge {n} failed: {e}")
    left: list[str] = []
    try:
        network.remove(name)
        left = [f"domain {n}" for n in sorted(prov.observe(name))]
        conn = libvirtd.connect()
        try:
            if network.net_name(name) in {n.name() for n in conn.listAllNetworks()}:
                left.append(f"network {network.net_name(name)}")
            pool = conn.storagePoolLookupByName(libvirtd.POOL)
            pool.refresh(0)
            left += [f"volume {v.name()}" for v in pool.listAllVolumes()
                     if any(v.name() == f"{n}.img" or v.name().startswith(f"{n}-") for n in names)]
        finally:
            conn.close()
    except Exception as e:  # noqa: BLE001
        left.append(f"(could not check: {e})")
    say("teardown: nothing left" if not left else f"teardown: LEFT BEHIND: {', '.join(left)}")
    return left


def run(spec_path: Path) -> dict:
    """Build the spec the naive way, measure, remove it. Raises NaiveFailed (or the step's own
    error) after the teardown when a step fails."""
    from lab.osutil import meminfo_mib
    from lab.configure.ansible import AnsibleConfigurer
    from lab.configure.runner import run_playbook
    from lab.host import kvm, libvirtd
    from lab.providers import network
    from lab.providers.reach import ssh_exe
    from lab.providers.vagrant import VagrantProvider
    from lab import paths
    from lab.spec import load_spec
    from lab.workspace import ClusterDir

    spec = load_spec(spec_path)
    name = spec.name
    clock = _Clock()
    say = clock.say
    t0 = clock.t0
    prov = VagrantProvider()
    stop = threading.Event()
    names: list[str] = []
    up_done: threading.Event | None = None
    logs = paths.home() / "naive-logs"
    say(f"cluster {name} from {spec_path} (driver {kvm.detect().driver})")
    libvirtd.up()
    # outside the try: a refused run must not tear down what it found (it may be someone else's)
    _preflight(prov, name, [f"{name}-{g.InstanceGroupName}-{i}" for g in spec.InstanceGroups
                            for i in range(1, g.InstanceCount + 1)])
    try:
        c, groups, nodes = _records(spec, prov, t0)
        gmap = {g.name: g for g in groups}
        types = {n.name: gmap[n.grp].node_type for n in nodes}
        names = [n.name for n in nodes]
        machines = machines_of(groups, nodes)
        box = (c.spec.get("Lab") or {}).get("Box")
        prov.prepare(name, machines, c.net_index, box)
        for m in machines:  # static DHCP entries, as VagrantProvider.ensure adds them one by one
            network.add_host(name, m.mac, m.name, m.address)
        ssh_exe()  # the netns wrapper in $SLURMLAB_HOME/bin, written once before the probe threads run it
        short = memory_warning([m.memory_mib for m in machines], meminfo_mib())
        if short:
            say(short)
        say(f"{len(names)} nodes, Vagrantfile, network and keys ready in {ClusterDir(name).root}")

        # ---- 1. every VM in one `vagrant up`
        defined: dict[str, float] = {}
        ssh_seen: dict[str, float] = {}
        watchers = [threading.Thread(target=_watch_domains, args=(set(names), stop, defined), daemon=True,
                                     name="naive-domains")]
        watchers += [threading.Thread(target=_watch_ssh, args=(name, n.name, n.address, stop, ssh_seen), daemon=True,
                                      name=f"naive-ssh-{n.name}") for n in nodes]
        up_error: list[BaseException] = []
        up_done = threading.Event()
        args = ["up", *names, "--provider", "libvirt", "--no-provision", "--parallel"]

        def vagrant_up() -> None:
            try:
                prov._vagrant(name, args, "vagrant-up")  # the provider's runner: logged, killable by delete
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                up_error.append(e)
            finally:
                up_done.set()

        say(f"vagrant {' '.join(args)}")
        up_start = time.time()
        threading.Thread(target=vagrant_up, daemon=True, name="naive-vagrant-up").start()
        for w in watchers:
            w.start()
        told_defined: set[str] = set()
        told_ssh: set[str] = set()
        while not up_done.wait(1.0):
            for n in names:
                if n in defined and n not in told_defined:
                    told_defined.add(n)
                    say(f"  {n}: domain defined")
                if n in ssh_seen and n not in told_ssh:
                    told_ssh.add(n)
                    say(f"  {n}: answers ssh")
        up_end = time.time()
        if up_error:
            raise NaiveFailed(f"vagrant up failed: {up_error[0]}")
        say(f"vagrant up returned after {up_end - up_start:.1f} s")
        obs = prov.observe(name)
        down = [n for n in names if n not in obs or obs[n].state != "running"]
        if down:
            raise NaiveFailed(f"vagrant up returned but these domains are not running: {', '.join(down)}")
        # every VM answered vagrant's ssh check by now: a probe still sleeping gets a few seconds,
        # and a VM's ssh time is never later than vagrant up's return
        deadline = time.time() + 3 * SSH_PROBE_EVERY + 10
        while len(ssh_seen) < len(names) and time.time() < deadline:
            time.sleep(0.5)
        stop.set()
        ssh_at = {n: min(ssh_seen.get(n, up_end), up_end) for n in names}
        ssh_source = {n: "ssh probe" if ssh_seen.get(n, up_end + 1) <= up_end else "vagrant up returned" for n in names}

        # ---- 2. one Ansible run over every node
        ctx = AnsibleConfigurer(ssh_exe()).context(c, groups, nodes)
        computes = [n.name for n in nodes if types[n.name] == "Compute"]
        events: list[dict] = []

        def on_event(ev: dict) -> None:
            e = ph.ansible_event(ev, time.time())
            if e["event"] == "playbook_on_play_start":
                say(f"  ansible: play '{e['play']}'")
            elif e["event"] in ("runner_on_failed", "runner_on_unreachable"):
                say(f"  ansible: {e['host']}: task '{e['task']}' {e['event'].rsplit('_', 1)[1]}")
            if e["event"].startswith(("runner_", "playbook_on_play_start")):
                events.append(e)

        say(f"ansible-playbook site.yml on all {len(names)} nodes (one run; slurm.conf lists {len(computes)} compute nodes)")
        a_start = time.time()
        result = run_playbook(ctx, "site.yml", joining=computes, workdir=ClusterDir(name).root, on_event=on_event)
        a_end = time.time()
        say(f"ansible done in {a_end - a_start:.1f} s (changed per host: {result.changed})")

        # ---- 3. the first job
        entry = next((n for n in nodes if types[n.name] == "Login"), None) or \
            next(n for n in nodes if types[n.name] == "Controller")
        say(f"first job: srun -N1 hostname on {entry.name}, polled")
        first_job = None
        last = ""
        while first_job is None:
            ok, last = srun_once(name, entry.address)
            if ok:
                first_job = time.time()
            elif time.time() - a_end > FIRST_JOB_TIMEOUT:
                raise NaiveFailed(f"srun -N1 hostname failed on {entry.name} for {FIRST_JOB_TIMEOUT:.0f} s: {last.strip()[-500:]}")
            else:
                time.sleep(2)
        say(f"first job ran ({last.strip()}) at {first_job - t0:.1f} s")

        join_plays = {p.get("name") for p in yaml.safe_load((REPO / "playbooks" / "join.yml").read_text())}
        phases = ph.naive_phases(t0, types, defined, ssh_at, events, join_plays, a_start, a_end)
        joined = {n: p["join"][1] for n, p in phases.items() if "join" in p}
        return {
            "nodes": len(names),
            "time_to_first_job_s": round(first_job - t0, 1),
            "time_to_full_size_s": round(a_end - t0, 1),
            "setup_s": round(up_start - t0, 1),
            "vagrant_up_s": round(up_end - up_start, 1),
            "ansible_s": round(a_end - a_start, 1),
            "boot_to_ssh_s": {n: round(ssh_at[n] - up_start, 1) for n in sorted(names)},
            "ssh_ready_from": ssh_source,
            "join_latency_s": {n: round(joined[n] - (ssh_at[n] - t0), 1) for n in sorted(joined)},
            "reconfigures": ph.ansible_reconfigures(events),
            "node_types": types,
            "phases": phases,
            "logs": str(logs),
        }
    finally:
        stop.set()
        try:
            _keep_logs(name, logs)
        except Exception as e:  # noqa: BLE001
            say(f"could not copy the logs: {e}")
        teardown(prov, name, names, up_done, say)
