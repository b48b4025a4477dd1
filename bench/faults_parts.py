"""Fault scenarios of the cluster's own parts (issue 45), run by bench/faults.py after its others:

  slurmctld_killed            slurmctld SIGKILLed while a job runs: systemd starts it again (the
                              controller role's drop-in); the job runs on, and the engine's view of
                              Slurm comes back
  controller_destroyed        the controller's domain destroyed while a job runs: the engine rebuilds
                              the controller (same name and address) on its state disk; the job record,
                              the accounting database and /home are kept, and the job runs on
  node_cut_off                compute-1's link to the cluster network down for 90 s (libvirt's link
                              state; the guest runs on), then up
  nfs_stalled                 the controller's NFS server stopped for 60 s (`rpc.nfsd 0`, a timer in
                              the guest starts it again) while a job writes to /fsx every second
  disk_full_during_checkpoint the checkpoint's folder on a 600 MiB filesystem: the disk fills while
                              the VMs are saved; the checkpoint fails, says why, and every VM runs on
  engine_killed_during_fork   the engine SIGKILLed while a scale-out node is forked, started again

Each returns the row of bench/faults.py (recover_s, detail, survived_extra).
"""

from __future__ import annotations

import random
import shlex
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.faultlab import C1, C2, NAME, Lab, in_libvirtd, on, say, sinfo, sl, then_scale_in


def _job(command: str, node: str = C1) -> str:
    job = on("controller", f"sbatch --parsable -p dev -N1 -w {node} --wrap {shlex.quote(command)}").strip()
    return job


def _state(job: str) -> str:
    return on("controller", f"squeue -h -j {job} -o %T", check=False).strip()


def _ended(job: str) -> bool:
    """Out of the queue (squeue -j names an ended job COMPLETED, FAILED ... for MinJobAge, or not at all)."""
    return _state(job) not in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED")


def _answers() -> bool:
    return sl("ssh", NAME, "controller", "--", "sinfo -h -o %a", check=False, timeout=120).returncode == 0


def _state_written(lab: Lab, job: str) -> None:
    """Until slurmctld wrote its state (StateSaveLocation) with `job` as it is now: it writes a few seconds
    after a change, and a job started after its last write comes back PENDING from a restart (the first
    run of this scenario, 2026-12-07), or running after it ended (docs/recovery.md)."""
    since = int(on("controller", "date +%s"))
    on("controller", f"sudo scontrol update jobid={job} comment=written")  # a change: it writes again
    lab.wait(lambda: int(on("controller", "stat -c %Y /var/lib/slurm/slurmctld/job_state")) > since, 120,
             "slurmctld's state written")


def slurmctld_killed(lab: Lab, rng: random.Random) -> dict:
    job = _job("sleep 900")
    lab.wait(lambda: _state(job) == "RUNNING", 180, "the job to run")
    _state_written(lab, job)
    before = int(on("controller", "systemctl show -p NRestarts --value slurmctld").strip() or 0)
    t0 = time.time()
    on("controller", "sudo systemctl kill -s KILL slurmctld")
    back = lab.wait(lambda: int(on("controller", "systemctl show -p NRestarts --value slurmctld", check=False).strip()
                                or 0) > before and _answers(), 300, "slurmctld restarted and answering")
    state = on("controller", f"squeue -h -j {job} -o '%T %N'").split()
    on("controller", f"scancel {job}", check=False)
    said = [e.description for e in lab.st.events(NAME) if e.time >= t0 and "Slurm" in e.description]
    ok = state == ["RUNNING", C1]
    return {"recover_s": round(back, 1), "survived_extra": ok,
            "detail": f"systemd started slurmctld again; it answered {back:.0f} s after the kill; job on {C1}: "
                      f"{' '.join(state) or 'gone'}; engine events: {'; '.join(x[:60] for x in said) or 'none'}"}


def controller_destroyed(lab: Lab, rng: random.Random) -> dict:
    ctl = f"{NAME}-controller-1"
    # from a compute node, as a student's job writes it: over NFS, which the server commits before it answers
    # (a file the controller wrote itself sat in its page cache and died with the VM: the first run)
    on(C1, "echo kept > /fsx/before-the-loss")
    done = on("controller", "sbatch --parsable -p dev -N1 --wrap true").strip()
    lab.wait(lambda: _ended(done), 180, "a short job to end")
    job = _job("sleep 1800")
    lab.wait(lambda: _state(job) == "RUNNING", 180, "the job to run")
    _state_written(lab, job)  # the loss comes after slurmctld wrote its state with both jobs
    iid = lab.node(ctl).instance_id
    t0 = time.time()
    lab.destroy(ctl)
    seen = lab.wait(lambda: (n := lab.node(ctl)) is not None and (n.phase != "running" or n.instance_id != iid), 300,
                    "the engine to see the controller gone")
    lab.wait(lambda: (n := lab.node(ctl)) is not None and n.phase == "running" and n.instance_id != iid
             and n.pending is None, 1500, "the controller rebuilt")
    back = lab.wait(_answers, 300, "slurmctld answering on the new controller")
    recover = time.time() - t0
    state = on("controller", f"squeue -h -j {job} -o '%T %N'").split()
    record = on("controller", f"sacct -n -X -P -j {done} -o State", check=False).strip()
    kept = on("controller", "cat /fsx/before-the-loss", check=False).strip()
    hosts = sorted(on("controller", "srun -p dev -N2 hostname").split())
    on("controller", f"scancel {job}; rm -f /fsx/before-the-loss", check=False)
    ok = state == ["RUNNING", C1] and record == "COMPLETED" and kept == "kept" and hosts == [C1, C2]
    return {"recover_s": round(recover, 1), "detected_s": round(seen, 1), "survived_extra": ok,
            "detail": f"controller's VM destroyed; the engine saw it in {seen:.0f} s, slurmctld answered on the rebuilt "
                      f"controller {recover:.0f} s after ({back:.0f} s after it ran); running job: "
                      f"{' '.join(state) or 'gone'}; the earlier job in sacct: {record or 'missing'}; /fsx file: "
                      f"{kept or 'missing'}; srun -N2: {' '.join(hosts)}"}


def set_link(cluster: str, node: str, state: str) -> None:
    """The node's interface on the cluster's network up or down (the guest sees its link go)."""
    import libvirt

    from lab.host import libvirtd
    from lab.providers import network

    conn = libvirtd.connect()
    try:
        dom = conn.lookupByName(node)
        for iface in ET.fromstring(dom.XMLDesc(0)).findall("devices/interface"):
            src = iface.find("source")
            if src is not None and src.get("network") == network.net_name(cluster):
                link = iface.find("link")
                if link is None:
                    link = ET.SubElement(iface, "link")
                link.set("state", state)
                dom.updateDeviceFlags(ET.tostring(iface, encoding="unicode"), libvirt.VIR_DOMAIN_AFFECT_LIVE)
                return
        raise RuntimeError(f"{node} has no interface on {network.net_name(cluster)}")
    finally:
        conn.close()


def node_cut_off(lab: Lab, rng: random.Random) -> dict:
    lab.wait(lambda: sinfo(C1) == "idle", 300, f"{C1} idle")
    iid = lab.node(C1).instance_id
    t0 = time.time()
    set_link(NAME, C1, "down")
    states = set()
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end:
            states.add(sinfo(C1))
            time.sleep(10)
    finally:
        set_link(NAME, C1, "up")
    t_up = time.time()
    lab.wait(lambda: (n := lab.node(C1)) is not None and n.phase == "running" and n.pending is None
             and sinfo(C1) == "idle", 900, f"{C1} idle again")
    recover = time.time() - t_up
    hosts = sorted(on("controller", "srun -p dev -N2 hostname").split())
    steps = [e.description.split(": ", 1)[-1][:70] for e in lab.st.events(NAME) if e.time >= t0 and e.node == C1]
    how = "same VM" if lab.node(C1).instance_id == iid else "replaced"
    return {"recover_s": round(recover, 1), "survived_extra": hosts == [C1, C2],
            "detail": f"{C1} cut off 90 s (Slurm said {', '.join(sorted(s for s in states if s)) or 'nothing'}); idle "
                      f"again {recover:.0f} s after its link came back ({how}; {'; '.join(steps[-3:]) or 'no event'}); "
                      f"srun -N2: {' '.join(hosts)}"}


STALL = ("sudo systemd-run --unit=faults-nfs-stall --collect sh -c "
         "'n=$(cat /proc/fs/nfsd/threads); rpc.nfsd 0; sleep 60; rpc.nfsd $n'")


def _nfsd_threads() -> str:
    return on("controller", "sudo cat /proc/fs/nfsd/threads", check=False).strip()


def nfs_stalled(lab: Lab, rng: random.Random) -> dict:
    log = "/fsx/nfs-stall.log"
    on("controller", f"rm -f {log}")
    job = _job(f"for i in $(seq 150); do date +%s >> {log}; sleep 1; done")
    lab.wait(lambda: _state(job) == "RUNNING", 180, "the writing job to run")
    time.sleep(10)
    t0 = time.time()
    on("controller", STALL)
    lab.wait(lambda: _nfsd_threads() == "0", 60, "the NFS server stopped")
    lab.wait(lambda: _nfsd_threads() not in ("", "0"), 240, "the NFS server back")
    back = time.time() - t0
    lab.wait(lambda: _ended(job), 600, "the writing job to end")
    state = on("controller", f"sacct -n -X -P -j {job} -o State", check=False).strip()
    stamps = [int(x) for x in on("controller", f"cat {log}").split() if x.isdigit()]
    gap = max((b - a for a, b in zip(stamps, stamps[1:])), default=0)
    on("controller", f"rm -f {log}", check=False)
    lost = lab.lost()
    ok = state == "COMPLETED" and len(stamps) == 150 and not lost
    return {"recover_s": round(back, 1), "survived_extra": ok,
            "detail": f"nfsd stopped 60 s; the job's writes paused {gap} s at most and all {len(stamps)} of 150 "
                      f"landed; job {state or 'missing'}; nodes not Running: {len(lost)}"}


def disk_full_during_checkpoint(lab: Lab, rng: random.Random) -> dict:
    from lab.providers import checkpoint

    root = checkpoint.root(NAME)
    root.mkdir(parents=True, exist_ok=True)
    image = Path(tempfile.mkstemp(prefix="slurmlab-faults-ckpt-", suffix=".ext4", dir="/var/tmp")[1])
    subprocess.run(["truncate", "-s", "600M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        subprocess.run(["mount", dev, str(root)], check=True)
        in_libvirtd("mount", dev, str(root))
        say(f"  {root}: 600 MiB")
        t0 = time.time()
        p = sl("checkpoint", "create", NAME, "full", check=False, timeout=900)
        failed_in = time.time() - t0
        said = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
        paused = lab.paused()
        running = [d for d in lab.domains() if lab.domain_running(d)]
        left = sorted(x.name for x in root.iterdir() if x.name != "lost+found")
    finally:
        in_libvirtd("umount", str(root))
        subprocess.run(["umount", str(root)], check=False)
        subprocess.run(["losetup", "-d", dev], check=False)
        image.unlink(missing_ok=True)
    hosts = sorted(on("controller", "srun -p dev -N2 hostname").split())
    listed = sl("checkpoint", "list", NAME).stdout.strip()
    ok = (p.returncode != 0 and not paused and len(running) == 3 and not left and hosts == [C1, C2]
          and "full" not in listed.split())
    return {"recover_s": round(failed_in, 1), "survived_extra": ok,
            "detail": f"checkpoint on a full disk: exit {p.returncode} after {failed_in:.0f} s ('{said[0][:160]}'); "
                      f"paused after: {len(paused)}, running: {len(running)}/3; left in its folder: "
                      f"{', '.join(left) or 'nothing'}; srun -N2: {' '.join(hosts)}"}


def engine_killed_during_fork(lab: Lab, rng: random.Random) -> dict:
    new = lab.scale_out()
    lab.wait(lambda: lab.phase(new) == "launching", 600, f"{new} launching")
    time.sleep(rng.uniform(1, 8))
    had_domain = lab.domain_running(new)
    lab.kill_engine()
    t0 = time.time()
    sl("engine", "start")
    lab.wait(lambda: lab.phase(new) == "running", 1500, f"{new} Running after the engine was killed")
    recover = time.time() - t0
    return then_scale_in(lab, new, recover, f"engine SIGKILLed while {new} was forked (domain "
                          f"{'running' if had_domain else 'not yet defined'}); Running {recover:.0f} s after the restart")


SCENARIOS = [slurmctld_killed, node_cut_off, nfs_stalled, disk_full_during_checkpoint, engine_killed_during_fork,
             controller_destroyed]
