"""Benchmark: faults on real VMs, each reported as survived or not, nodes lost, orphans, time to recover.

One scenario after the other on one small cluster, each bounded in time.

Real VMs; run as root on a host set up by `make up` (libvirtd, the box), with no other VMs running.
The cluster (controller + 2 compute, no login; ~30 min in all on 2 cores without KVM (26 min on 2026-12-07)) lives in a
private $SLURMLAB_HOME (a new /tmp/slurmlab-faults-*, kept for its logs). The scenarios, in order:

  engine_sigkill_during_create   the engine SIGKILLed at 5 seeded random moments of the create,
                                 started again at once each time (as the next CLI command would)
  vm_killed_after_join           a job runs on compute-1; compute-2's domain is destroyed
                                 (NodeRecovery Automatic brings it back; the job must survive)
  sshd_stopped                   compute-1's sshd stopped (Ansible and ssh cannot reach it), then
                                 BatchRebootClusterNodes of it
  vm_killed_while_booting        a scale-out node's domain destroyed while it boots
  host_memory_too_small          a process leaves the host less memory than the next VM needs (plus
                                 the lab's 1 GiB reserve; ~1.4 GiB stay free): the scale-out is
                                 refused (InsufficientCapacity), then goes ahead when it is freed
  libvirtd_restart_in_scale_out  libvirtd stopped while a scale-out node launches, `slurmlab host up`
                                 15 s later (the engine marks the cluster stale, then resumes)
  pool_disk_full                 the storage pool's disk short before a scale-out (refused with
                                 InsufficientCapacity, retried), then filled while the VM boots (qemu
                                 pauses the VMs that write; the engine marks them and resumes them once
                                 the filler is gone)
  slurmd_stopped                 compute-1's slurmd stopped: Slurm calls it down* (SlurmdTimeout), the
                                 lab shows it and restarts slurmd (recovery, docs/recovery.md); time
                                 from the stop to idle again, and until the lab showed it
  vm_hung                        compute-2's kernel panics (sysrq c): libvirt says it runs, neither ssh nor
                                 its guest agent answers; the engine finds it hung and reboots it (issue 45)
  action_replace_under_auto_resume  an `srun --auto-resume=1 -N2` step writing its progress to /fsx;
                                 compute-2 set `state=down reason="Action:Replace"` while it runs: the
                                 VM is replaced under its name, the step starts again and finishes
  slurmctld_killed, node_cut_off, nfs_stalled, disk_full_during_checkpoint, engine_killed_during_fork,
  controller_destroyed           the cluster's own parts (bench/faults_parts.py says what each does)
  delete_interrupted             `slurmlab delete-cluster` interrupted (SIGINT) 1-4 s into the delete,
                                 run again if the cluster is not gone by then

The run has a storage pool of its own (--pool-mib, default 4096): a loop-mounted ext4 image, so that
pool_disk_full fills that and never the host's disk. It is removed at the end.

After every scenario: nodes lost (a node not Running at the end), orphans (libvirt domains or pool
volumes of the cluster that no node owns, Vagrant/Ansible processes of this lab outside the running
engine's process group) and, at the very end, anything of the cluster left in libvirt or on disk.

Output: JSON on stdout and in bench/results/faults-<time>.json, the table on stderr.

    .venv/bin/python bench/faults.py [--seed N] [--only NAME,NAME] [--pool-mib MIB]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import faults_parts  # noqa: E402
from bench.faultlab import (C1, C2, NAME, PANIC, PANIC_IN_S, SPEC, Lab, in_libvirtd, on, say, sinfo,  # noqa: E402
                            sl, then_scale_in)

POOL_NOT_RUN = "not run: --pool-mib 0 (the lab's own pool, on the host's disk, is never filled)"


# ---------------------------------------------------------------------------------- scenarios
def engine_sigkill_during_create(lab: Lab, rng: random.Random) -> dict:
    sl("create-cluster", "--spec", str(lab.home / "faults.yaml"))
    t0 = time.monotonic()
    kills = []
    while len(kills) < 5 and not lab.full():
        delay = rng.uniform(5, 25)  # a create from role templates is full in under a minute (2026-12-07: 47 s)
        end = time.monotonic() + delay
        while time.monotonic() < end and not lab.full():
            time.sleep(0.5)
        if lab.full():
            break
        phases = sorted(f"{n.name.removeprefix(NAME + '-')}:{n.phase}" for n in lab.st.nodes(NAME))
        lab.kill_engine()
        kills.append({"at_s": round(time.monotonic() - t0, 1), "phases": phases})
        say(f"  engine killed at {kills[-1]['at_s']} s ({', '.join(phases)})")
        sl("engine", "start")
    last = time.monotonic()
    lab.wait(lab.full, 1800, "the cluster at full size")
    return {"recover_s": round(time.monotonic() - last, 1), "create_s": round(time.monotonic() - t0, 1),
            "kills": kills, "detail": f"{len(kills)} SIGKILLs; full size {time.monotonic() - t0:.0f} s after create"}


def vm_killed_after_join(lab: Lab, rng: random.Random) -> dict:
    job = on("controller", f"sbatch --parsable -N1 -w {C1} --wrap 'sleep 1800'").strip()
    lab.wait(lambda: on("controller", f"squeue -h -j {job} -o %T").strip() == "RUNNING", 120, "the job to run")
    t0 = time.time()
    lab.destroy(C2)
    lab.wait(lambda: (n := lab.node(C2)) is not None and n.phase != "running", 300, f"the engine to see {C2} gone")
    recover = lab.wait(lambda: (n := lab.node(C2)) is not None and n.phase == "running" and (n.joined_at or 0) > t0,
                       1200, f"{C2} back")
    state = on("controller", f"squeue -h -j {job} -o '%T %N'").split()
    on("controller", f"scancel {job}", check=False)
    job_ok = state == ["RUNNING", C1]
    return {"recover_s": round(time.time() - t0, 1), "survived_extra": job_ok,
            "detail": f"{C2} Running again {time.time() - t0:.0f} s after its domain was destroyed "
                      f"(engine saw it in {time.time() - t0 - recover:.0f} s); job on {C1}: {' '.join(state) or 'gone'}"}


def sshd_stopped(lab: Lab, rng: random.Random) -> dict:
    # every process of the unit too: each connection's sshd-session lives in ssh.service, and kept connections
    # (ControlMaster: the engine's, `slurmlab ssh`'s) outlive a stop (KillMode=process) and the user's sessions
    on(C1, "sudo systemd-run --on-active=1 --timer-property=AccuracySec=100ms --unit=faults-stop-ssh sh -c "
           "'systemctl stop ssh.socket 2>/dev/null; systemctl kill --kill-whom=all -s KILL ssh.service; "
           "systemctl stop ssh.service'")
    # the guest takes seconds to run the timer (TCG): wait until a new ssh login is refused
    deadline, unreachable = time.monotonic() + 90, False
    while not unreachable and time.monotonic() < deadline:
        time.sleep(3)
        unreachable = sl("ssh", NAME, C1, "--", "true", check=False, timeout=120).returncode != 0
    t0 = time.time()
    sl("batch-reboot-cluster-nodes", NAME, C1)
    lab.wait(lambda: (n := lab.node(C1)) is not None and n.phase == "running" and (n.joined_at or 0) > t0
             and n.pending is None, 1200, f"{C1} rebooted and back")
    hosts = sorted(on("controller", "srun -p dev -N2 hostname").split())
    return {"recover_s": round(time.time() - t0, 1), "survived_extra": unreachable and hosts == [C1, C2],
            "detail": f"ssh to {C1} {'refused' if unreachable else 'still worked (scenario not set up)'}; "
                      f"BatchReboot brought it back in {time.time() - t0:.0f} s; srun -N2: {' '.join(hosts)}"}


def vm_killed_while_booting(lab: Lab, rng: random.Random) -> dict:
    new = lab.scale_out()
    lab.wait(lambda: lab.phase(new) == "launching" and lab.domain_running(new), 600, f"{new} booting")
    time.sleep(rng.uniform(0.5, 4))  # a fork answers ssh ~8 s after its launch (a cold boot took minutes)
    killed_in = lab.phase(new)
    iid = lab.node(new).instance_id
    t0 = time.time()
    lab.destroy(new)
    # Running on a VM up since: the old one's "running" can be read before the engine saw it destroyed
    lab.wait(lambda: (n := lab.node(new)).phase == "running" and (n.instance_id != iid or (n.booted_at or 0) > t0),
             1500, f"{new} Running after its domain was destroyed")
    recover = time.time() - t0
    return then_scale_in(lab, new, recover, f"{new} destroyed while {killed_in}; Running {recover:.0f} s later")


def slurmd_stopped(lab: Lab, rng: random.Random) -> dict:
    lab.wait(lambda: sinfo(C1) == "idle", 300, f"{C1} idle")
    t0 = time.time()
    on(C1, "sudo systemctl stop slurmd")
    down = lab.wait(lambda: "down" in sinfo(C1) or "*" in sinfo(C1), 600, "Slurm to call it down")
    shown = lab.wait(lambda: (lab.node(C1).slurm or "").startswith("Slurm:"), 120, "the lab to show it")
    lab.wait(lambda: sinfo(C1) == "idle" and lab.node(C1).slurm is None, 900, f"{C1} repaired")
    hosts = sorted(on("controller", "srun -p dev -N2 hostname").split())
    steps = [e.description for e in lab.st.events(NAME) if e.time >= t0 and e.node == C1]
    return {"recover_s": round(time.time() - t0, 1), "survived_extra": hosts == [C1, C2],
            "slurm_down_after_s": round(down, 1), "lab_showed_after_s": round(shown, 1),
            "detail": f"Slurm said down {down:.0f} s after the stop, the lab {shown:.0f} s after that; idle again "
                      f"{time.time() - t0:.0f} s after the stop ({'; '.join(x.split(': ', 1)[-1][:60] for x in steps[-3:])}); "
                      f"srun -N2: {' '.join(hosts)}"}




def vm_hung(lab: Lab, rng: random.Random) -> dict:
    """compute-2's kernel panics (sysrq c; kernel.panic=0: its vCPU spins): libvirt says it runs, nothing
    answers. The engine finds it by its silent guest agent (lab/engine/hangs.py) and reboots it."""
    lab.wait(lambda: sinfo(C2) == "idle", 300, f"{C2} idle")
    iid = lab.node(C2).instance_id
    on(C2, PANIC)
    t0 = time.time() + PANIC_IN_S
    found = lab.wait(lambda: any(e.node == C2 and e.time >= t0 and ": hung for " in e.description
                                 for e in lab.st.events(NAME)), 600, f"the engine to find {C2} hung")
    lab.wait(lambda: (n := lab.node(C2)) is not None and n.phase == "running" and (n.joined_at or 0) > t0
             and n.pending is None and sinfo(C2) == "idle", 900, f"{C2} back in Slurm")
    usable = time.time() - t0
    hosts = sorted(on("controller", "srun -p dev -N2 hostname").split())
    same = lab.node(C2).instance_id == iid
    return {"recover_s": round(usable, 1), "detected_s": round(found, 1), "survived_extra": hosts == [C1, C2],
            "detail": f"{C2} panicked; found hung {found:.0f} s later, {'rebooted' if same else 'replaced'}, idle in "
                      f"Slurm {usable:.0f} s after the panic; srun -N2: {' '.join(hosts)}"}


AUTO_RESUME_STEP = ("d=/fsx/ar && h=$(hostname) && i=$(cat $d/$h 2>/dev/null || echo 0) && "
                    "while [ $i -lt 60 ]; do i=$((i + 1)); echo $i > $d/$h; sleep 2; done && echo finished-$h")
# A transient unit of its own: a background process of an ssh session need not outlive it, and the
# controller's $HOME is not the compute nodes' (the step's progress goes to the shared /fsx)
AUTO_RESUME_RUN = ("sudo systemd-run --unit=faults-auto-resume --collect --uid=vagrant --gid=vagrant "
                   "-p WorkingDirectory=/fsx sh -c {}")


def action_replace_under_auto_resume(lab: Lab, rng: random.Random) -> dict:
    import shlex

    iid = lab.node(C2).instance_id
    step = (f"srun --auto-resume=1 -p dev -N2 --ntasks-per-node=1 sh -c {shlex.quote(AUTO_RESUME_STEP)} "
            "> /fsx/ar.out 2>&1; echo exit=$? >> /fsx/ar.out")
    on("controller", "rm -rf /fsx/ar /fsx/ar.out && mkdir /fsx/ar && " + AUTO_RESUME_RUN.format(shlex.quote(step)))
    lab.wait(lambda: on("controller", "ls /fsx/ar | wc -l").strip() == "2", 300, "the step on both nodes")
    time.sleep(rng.uniform(5, 20))
    before = on("controller", f"cat /fsx/ar/{C2}").strip()
    t0 = time.time()
    on("controller", f"sudo scontrol update nodename={C2} state=down reason='Action:Replace'")
    lab.wait(lambda: lab.node(C2).instance_id != iid and lab.node(C2).phase == "running", 1500, f"{C2} replaced")
    replaced = time.time() - t0
    lab.wait(lambda: "exit=" in on("controller", "cat /fsx/ar.out"), 900, "the step to end")
    out = on("controller", "cat /fsx/ar.out")
    on("controller", "rm -rf /fsx/ar /fsx/ar.out", check=False)
    ok = "exit=0" in out and "starting the step again" in out and f"finished-{C2}" in out
    return {"recover_s": round(time.time() - t0, 1), "survived_extra": ok, "replaced_after_s": round(replaced, 1),
            "detail": f"{C2} replaced (new instance, same name) {replaced:.0f} s after Action:Replace at step {before}/60; "
                      f"the auto-resume step {'restarted and finished' if ok else 'did not finish: ' + out[-300:]!r} "
                      f"{time.time() - t0:.0f} s after"}


HOG = """
import mmap, sys, time
n = int(sys.argv[1]) << 20
m = mmap.mmap(-1, n)
for i in range(0, n, 4096):
    m[i] = 1
print("ready", flush=True)
time.sleep(300)  # bounded even if nobody ends it
"""


def hog_size(available_mib: int, vm_mib: int) -> int:
    """MiB the hog takes so that the host keeps 300 MiB less than the next VM and the host's reserve
    (lab.host.registry.HOST_RESERVE_MIB) need: the launch is refused, the guests are not starved."""
    from lab.host.registry import HOST_RESERVE_MIB

    return available_mib - (vm_mib + HOST_RESERVE_MIB) + 300


def host_memory_too_small(lab: Lab, rng: random.Random) -> dict:
    """A process takes the host's memory down to less than the next VM needs plus the host's reserve
    (the host keeps about 1.4 GiB: the guests are not starved); the scale-out must be refused with
    InsufficientCapacity, not crash, and go ahead by itself once the memory is back."""
    from lab.engine import daemon
    from lab.osutil import meminfo_mib

    engine = daemon.running_pid()
    size = next(g.memory_mib for g in lab.st.groups(NAME) if g.name == "compute")
    hog_mib = hog_size(meminfo_mib(), size)
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(hog_mib)], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "ready", "the memory hog did not start"
        say(f"  {hog_mib} MiB taken; {meminfo_mib()} MiB available")
        new = lab.scale_out()
        lab.wait(lambda: "InsufficientCapacity: host " in ((n := lab.node(new)) and n.message or ""), 600,
                 f"{new} refused for the host's memory")
        refused = lab.node(new).message
    finally:
        hog.kill()
        hog.wait()
    t0 = time.time()
    lab.wait(lambda: lab.phase(new) == "running", 1500, f"{new} Running once the memory was back")
    recover = time.time() - t0
    same_engine = daemon.running_pid() == engine
    return then_scale_in(lab, new, recover, f"refused: '{refused[:160]}'; Running {recover:.0f} s after the memory "
                          f"came back; engine {'kept running' if same_engine else 'was restarted'}", ok=same_engine)


def libvirtd_restart_in_scale_out(lab: Lab, rng: random.Random) -> dict:
    from lab.host import libvirtd

    new = lab.scale_out()
    lab.wait(lambda: lab.phase(new) == "launching", 600, f"{new} launching")
    time.sleep(rng.uniform(3, 20))
    pid = libvirtd.daemon_state("libvirtd").pid
    os.kill(pid, signal.SIGTERM)
    t0 = time.time()
    stale = False
    end = time.monotonic() + 15
    while time.monotonic() < end:
        stale = stale or lab.st.cluster(NAME).unobserved_since is not None
        time.sleep(0.5)
    sl("host", "up", timeout=300)
    lab.wait(lambda: lab.phase(new) == "running" and lab.st.cluster(NAME).unobserved_since is None, 1500,
             f"{new} Running after libvirtd came back")
    recover = time.time() - t0
    return then_scale_in(lab, new, recover, f"libvirtd down 15 s while {new} launched; cluster marked stale: "
                          f"{stale}; {new} Running {recover:.0f} s after libvirtd was stopped", ok=stale)


class LoopPool:
    """A size-limited storage pool for this run: an ext4 image (sparse, in /var/tmp) loop-mounted under
    /var/lib/libvirt (qemu reaches it), the pool's folder in it and the filler beside it (so that the
    pool never lists the filler as a volume). The whole cluster lives in it: its disk can be filled
    without touching the host's."""

    def __init__(self, mib: int):
        self.root = Path(tempfile.mkdtemp(prefix="slurmlab-faults-pool-", dir="/var/lib/libvirt"))
        self.image = Path("/var/tmp") / f"{self.root.name}.ext4"
        self.pool, self.filler = self.root / "pool", self.root / "filler"
        self.name = self.root.name.replace("-pool-", "-")  # a pool of its own (a crashed run's stays apart)
        subprocess.run(["truncate", "-s", f"{mib}M", str(self.image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)], check=True)
        self.dev = subprocess.run(["losetup", "--find", "--show", str(self.image)], check=True, capture_output=True,
                                  text=True).stdout.strip()
        subprocess.run(["mount", self.dev, str(self.root)], check=True)
        in_libvirtd("mount", self.dev, str(self.root))
        self.pool.mkdir()
        os.environ.update(SLURMLAB_POOL=self.name, SLURMLAB_POOL_DIR=str(self.pool))

    def free(self) -> int:
        from lab.providers import disk

        return disk.free_mib(self.root)

    def fill_to(self, left_mib: int | None) -> int:
        """Leave `left_mib` free (None: remove the filler); the MiB free after."""
        if left_mib is None:
            self.filler.unlink(missing_ok=True)
            return self.free()
        have = self.filler.stat().st_size >> 20 if self.filler.exists() else 0
        want = max(0, have + self.free() - left_mib)
        if want <= have:
            os.truncate(self.filler, want << 20)
            return self.free()
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for _ in range(64):  # the last MiBs go to the filesystem's own metadata
                try:
                    os.posix_fallocate(fd, 0, want << 20)
                    break
                except OSError:
                    want -= 1
        finally:
            os.close(fd)
        return self.free()

    def down(self) -> None:
        import libvirt

        from lab.host import libvirtd

        self.filler.unlink(missing_ok=True)
        with contextlib.suppress(libvirt.libvirtError):
            conn = libvirtd.connect()
            try:
                pool = conn.storagePoolLookupByName(self.name)
                for v in pool.listAllVolumes():  # the box's copy; the cluster's disks went with it
                    v.delete(0)
                if pool.isActive():
                    pool.destroy()
                pool.undefine()
            finally:
                conn.close()
        in_libvirtd("umount", str(self.root))
        subprocess.run(["umount", str(self.root)], check=False)
        subprocess.run(["losetup", "-d", self.dev], check=False)
        self.image.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()


def pool_disk_full(lab: Lab, rng: random.Random) -> dict:
    """The pool's disk short before a scale-out (refused, retried), then full while the VM boots (qemu
    pauses the VMs that write; the engine waits, says so, and resumes them once there is room)."""
    from lab.providers import disk

    pool = lab.pool
    need = disk.VM_DISK_MIB + disk.RESERVE_MIB
    say(f"  pool: {pool.fill_to(need - 300)} MiB free")
    new = lab.scale_out()
    lab.wait(lambda: "InsufficientCapacity: the storage pool" in ((n := lab.node(new)) and n.message or ""), 600,
             f"{new} refused for the pool's disk")
    refused = lab.node(new).message
    say(f"  pool: {pool.fill_to(need + 100)} MiB free (room for one VM)")
    lab.wait(lambda: lab.phase(new) == "launching" and lab.domain_running(new), 900, f"{new} booting")
    time.sleep(rng.uniform(5, 20))
    say(f"  pool: {pool.fill_to(0)} MiB free (full)")
    def marked() -> list[str]:
        return [n.name for n in lab.st.nodes(NAME) if (n.message or "").startswith("paused (disk full)")]

    paused: list[str] = []
    try:
        lab.wait(lambda: bool(paused.extend(lab.paused()) or paused), 300, "a VM paused on the full disk")
        lab.wait(lambda: bool(marked()), 120, "the engine to mark the paused VMs")
        lab.wait(lambda: new in paused or bool(paused.extend(lab.paused())), 90, f"{new} paused too")
    except TimeoutError as e:
        say(f"  {e}")
    marks = marked()
    shown = next((n.message for n in lab.st.nodes(NAME) if (n.message or "").startswith("paused")), "")
    t0 = time.time()
    say(f"  pool: {pool.fill_to(None)} MiB free (filler removed)")
    lab.wait(lambda: not lab.paused() and lab.phase(new) == "running"
             and not any((n.message or "").startswith("paused") for n in lab.st.nodes(NAME)), 1500,
             f"{new} Running and every VM resumed")
    recover = time.time() - t0
    return then_scale_in(lab, new, recover, f"refused: '{refused[:150]}'; then full while {new} booted: "
                          f"paused {', '.join(sorted(set(paused))) or 'none'}, marked {len(marks)} ('{shown[:90]}'); "
                          f"all Running {recover:.0f} s after space came back", ok=bool(paused and marks))


def delete_interrupted(lab: Lab, rng: random.Random) -> dict:
    """Ctrl-C on `slurmlab delete-cluster` once the delete is under way; then what a user does next:
    `delete-cluster` again, if the cluster is not gone by then."""
    p = subprocess.Popen([sys.executable, "-m", "lab", "delete-cluster", NAME], cwd=REPO, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         # a shell's background job ignores SIGINT, and so would its children
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lab.wait(lambda: (c := lab.st.cluster(NAME)) is None or c.status == "Deleting", 120, "the delete to start")
    time.sleep(rng.uniform(1, 4))
    left_at_ctrl_c = len(lab.domains())
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    said = err.strip().splitlines()[-1] if err.strip() else ""
    status = lab.st.cluster(NAME).status if lab.st.cluster(NAME) else "gone"
    t0 = time.time()
    if lab.st.cluster(NAME) is not None:
        sl("delete-cluster", NAME, timeout=900)
    return {"recover_s": round(time.time() - t0, 1), "leftovers": lab.leftovers(), "survived_extra": p.returncode == 130,
            "detail": f"Ctrl-C with {left_at_ctrl_c} of 3 domains left: exit {p.returncode} ('{said[:140]}'), cluster "
                      f"{status}; " + (f"a second delete-cluster finished in {time.time() - t0:.0f} s"
                                       if status != "gone" else "the engine had finished it")}


SCENARIOS = [engine_sigkill_during_create, vm_killed_after_join, sshd_stopped, slurmd_stopped, vm_hung,
             action_replace_under_auto_resume, vm_killed_while_booting, host_memory_too_small,
             libvirtd_restart_in_scale_out, pool_disk_full, *faults_parts.SCENARIOS, delete_interrupted]


def run(lab: Lab, fn, rng: random.Random) -> dict:
    say(f"{fn.__name__} ...")
    t0 = time.monotonic()
    row: dict = {"scenario": fn.__name__}
    try:
        row.update(fn(lab, rng))
        ok = row.pop("survived_extra", True)
        if fn is delete_interrupted:
            row.update(nodes_lost=0, orphans=row.pop("leftovers"))
        else:
            lab.wait(lab.full, 900, "full size after the scenario")
            row.update(nodes_lost=len(lab.lost()), orphans=lab.orphans())
        row["survived"] = bool(ok) and row["nodes_lost"] == 0 and not row["orphans"]
    except Exception as e:  # noqa: BLE001 - the table says what went wrong; the next scenario runs
        row.update(survived=False, error=f"{type(e).__name__}: {e}"[:1500])
        try:
            row.update(nodes_lost=len(lab.lost()), orphans=lab.orphans())
        except Exception as e2:  # noqa: BLE001
            row["orphans"] = [f"could not look: {e2}"]
    row["took_s"] = round(time.monotonic() - t0, 1)
    say(f"{fn.__name__}: {'survived' if row['survived'] else 'NOT survived'} ({row.get('detail') or row.get('error')})")
    return row


def table(rows: list[dict]) -> str:
    lines = ["| scenario | survived | nodes lost | orphans | time to recover | what happened |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("not_run"):
            lines.append(f"| {r['scenario']} | - | - | - | - | {r['not_run']} |")
            continue
        lines.append(f"| {r['scenario']} | {'yes' if r['survived'] else 'no'} | {r.get('nodes_lost', '?')} | "
                     f"{len(r.get('orphans') or [])} | {r.get('recover_s', '-')} s | "
                     f"{r.get('detail') or r.get('error')} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--only", default="", help="comma-separated scenario names (the create always runs)")
    ap.add_argument("--pool-mib", type=int, default=4096,
                    help="the run's own storage pool: a loop-mounted ext4 image of this size (0: the lab's pool, "
                         "and no pool_disk_full)")
    args = ap.parse_args(argv)
    names = {fn.__name__ for fn in SCENARIOS}
    unknown = sorted({s for s in args.only.split(",") if s} - names)
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(unknown)}: the scenarios are {', '.join(sorted(names))}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    home = Path(tempfile.mkdtemp(prefix="slurmlab-faults-"))
    os.environ["SLURMLAB_HOME"] = str(home)
    (home / "faults.yaml").write_text(SPEC)
    pool = LoopPool(args.pool_mib) if args.pool_mib else None  # before anything reads SLURMLAB_POOL
    from lab.host import kvm

    say(f"state in {home}" + (f"; storage pool {pool.name} ({args.pool_mib} MiB) in {pool.root}" if pool else ""))
    lab = Lab(home)
    lab.pool = pool
    rng = random.Random(args.seed)
    only = {s for s in args.only.split(",") if s}
    rows = []
    interrupted = None
    try:
        sl("host", "up", timeout=600)
        for fn in SCENARIOS:
            if only and fn.__name__ not in only and fn not in (engine_sigkill_during_create, delete_interrupted):
                continue
            if fn is pool_disk_full and pool is None:
                rows.append({"scenario": fn.__name__, "not_run": POOL_NOT_RUN})
                continue
            rows.append(run(lab, fn, rng))
            if fn is engine_sigkill_during_create and not lab.full():
                say("the cluster never reached full size: the other scenarios need it; stopping")
                break
    except KeyboardInterrupt as e:  # what ran so far is still written
        interrupted = f"interrupted ({e}) during {len(rows) + 1}th scenario"
        say(interrupted)
    finally:
        if lab.st.cluster(NAME) is not None:
            sl("delete-cluster", NAME, check=False, timeout=900)
        sl("engine", "stop", check=False)
        if pool is not None:
            pool.down()
    result = {"seed": args.seed, "driver": kvm.detect().driver, "home": str(home), "scenarios": rows,
              "survived": sum(1 for r in rows if r.get("survived")), "run": sum(1 for r in rows if "survived" in r),
              "interrupted": interrupted}
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"faults-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(table(rows), file=sys.stderr)
    sys.exit(130 if interrupted else 0 if result["survived"] == result["run"] else 1)


if __name__ == "__main__":
    main()
