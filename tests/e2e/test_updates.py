"""Issues 12, 14, 16, 29, 32 and 42 on real VMs, on clusters of this module's own, in the stream beside the
class cluster's (`make test` runs tests/e2e/test_cluster.py in a pytest process of its own, at once).

examples/workshop.yaml without its GPU group makes two clusters at once: `patch` (two compute nodes),
forked from role templates as CI's clusters are, and `twin` (one node per role) with `Lab.RoleTemplates:
false`, fully configured, unless an earlier run kept the twin's fingerprints for the same box and the
same configuration files (tests/e2e/fullconfig.py). Node by node the two are the same apart from identity
(issue 42); the twin goes. On `patch`: a checkpoint, the cluster broken and restored (issue 14); a rolling update of the
controller while a job runs (issue 12); auto-patch of the compute nodes around a job (issue 32); then a
second cluster placed on a second, remote host because this one has no room (issues 16 and 29). Issue 45: the
controller's VM destroyed and rebuilt on its state disk while a job runs; a compute node whose kernel
panicked found hung and rebooted; an `srun --auto-resume=1` that was not told its step ended. (These here: the class stream ends waiting for this one, and with the
hung node there it took 1691 s to this stream's 1221 s in CI run H.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lab.host import libvirtd
from lab.providers import network
from tests.e2e.homes import close_home
from tests.e2e.labcli import REPO, Cluster, events_of, keep, sl, wait

pytestmark = pytest.mark.e2e

SPEC = REPO / "examples" / "workshop.yaml"
NAME = "patch"  # forked from role templates; its nodes are updated, patched, checkpointed
TWIN = "twin"  # the same cluster, one node per role, every node fully configured
FAR, H2 = "far", "e2e-b"  # the cluster on the second host, and the remote host (the rig's stand-in)
ROLE = "arn:aws:iam::000000000000:role/lab"
PATCH = Cluster(NAME)
describe, nodes, on, student, job_state = PATCH.describe, PATCH.nodes, PATCH.on, PATCH.student, PATCH.job_state


def _spec(name: str, compute: int, **lab) -> Path:
    """examples/workshop.yaml as `name`, without its GPU group, with `compute` compute nodes and `lab`."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["ClusterName"] = name
    spec["InstanceGroups"] = [{**g, "InstanceCount": compute if g["InstanceGroupName"] == "compute" else 1,
                               "LifeCycleConfig": {**g["LifeCycleConfig"], "SourceS3Uri": str(SPEC.parent / "lifecycle")}}
                              for g in spec["InstanceGroups"] if g["InstanceGroupName"] != "gpu"]
    spec["Lab"] = {**spec.get("Lab", {}), **lab}
    path = Path(os.environ["SLURMLAB_HOME"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module", autouse=True)
def lab_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("slurmlab-home")
    old = os.environ.get("SLURMLAB_HOME")
    os.environ["SLURMLAB_HOME"] = str(home)
    os.environ["SLURMLAB_HOST_LOST_S"] = "20"  # the engine gives a silent second host up after 20 s (not 60)
    # `patch` has student accounts: its room (lab/room) gets ports from 2301, never the class stream's 2201
    os.environ["SLURMLAB_ROOM_FIRST_PORT"] = "2301"
    # a run killed on this machine before its delete (another SLURMLAB_HOME) left VMs and checkpoints
    # under these names: a create would refuse them (lab/providers/leftovers.py)
    for name in (NAME, TWIN, FAR):
        sl("delete-cluster", name, "--leftovers", timeout=300)
    yield home
    sl("delete-cluster", TWIN, check=False, timeout=900)
    close_home(home, old, NAME, "engine-updates.log")


def _full_configuration_key() -> str:
    from lab import box
    from lab.providers.templates import box_image
    from tests.e2e import fullconfig

    return fullconfig.key(box_image(box.DEFAULT_BOX))


KEPT: dict[str, str] = {}  # {role: the twin's fingerprint} of an earlier run with the same key (tests/e2e/fullconfig.py)


def test_the_cluster_from_role_templates_and_its_twin_fully_configured_come_up():
    """Both clusters are made at once from examples/workshop.yaml without its GPU group: `patch` (two
    compute nodes) forked from role templates, as CI's clusters are, and `twin` (one node per role) with
    `Lab.RoleTemplates: false`, each node forked from the plain template and fully configured. The twin
    is made only when no earlier run kept its fingerprints for the same box and configuration files
    (tests/e2e/fullconfig.py)."""
    from tests.e2e import fullconfig

    KEPT.update(fullconfig.load(_full_configuration_key()) or {})
    if not KEPT:
        sl("create-cluster", "--spec", str(_spec(TWIN, compute=1, RoleTemplates=False)))
    sl("create-cluster", "--spec", str(_spec(NAME, compute=2)), "--wait", "--wait-for", "FullSize", "--timeout", "1500")
    up = [e for e in events_of(NAME) if ": VM up" in e]
    assert len(up) == 4 and all("forked from role template" in e for e in up), up
    if not KEPT:
        sl("describe-cluster", TWIN, "--wait-for", "FullSize", "--timeout", "1500")
        up = [e for e in events_of(TWIN) if ": VM up" in e]
        assert len(up) == 3 and all("forked from template" in e for e in up), up


def test_a_fork_of_a_role_template_is_the_node_a_full_configuration_makes():
    """Issue 42: node by node, role by role, the fork of a role template (`patch`) and the fully configured
    node (`twin`, or its fingerprints kept by an earlier run of the same inputs) are the same (packages,
    enabled and active units, accounts, configuration files, owners and modes) apart from identity
    (tests/e2e/equivalence.py names each identity file and why)."""
    from tests.e2e import fullconfig
    from tests.e2e.equivalence import FINGERPRINT, differences

    made = {}
    try:
        for role in ("controller", "login", "compute"):
            a = sl("ssh", NAME, f"{NAME}-{role}-1", "--", FINGERPRINT, timeout=300).stdout
            b = KEPT.get(role) or sl("ssh", TWIN, f"{TWIN}-{role}-1", "--", FINGERPRINT, timeout=300).stdout
            made[role] = b
            diff = differences(a, NAME, b, TWIN)
            assert diff == {}, f"{role}: the role template's fork ({NAME}) and the full configuration ({TWIN}) differ: {diff}"
        if not KEPT:  # every role the same: the twin's fingerprints serve the next run of the same inputs
            fullconfig.save(_full_configuration_key(), made)
    finally:
        if not KEPT:
            sl("delete-cluster", TWIN, timeout=900)


def test_checkpoint_then_break_the_cluster_and_restore_it():
    """Issue 14: a checkpoint of the running cluster; then the cluster broken: compute-2 scaled in,
    slurmctld stopped, a student's file deleted. The restore puts every VM back with its memory (no
    boot: compute-1's boot id is unchanged), compute-2 with its old InstanceId, the file, slurmctld
    answering; srun reaches every compute node. The times go to artifacts/checkpoint-times.json
    (bench/checkpoint_restore.py measures restore against a rebuild)."""
    first, second = f"{NAME}-compute-1", f"{NAME}-compute-2"
    student("echo kept-by-the-checkpoint > checkpoint-proof")
    before = {n: v["InstanceId"] for n, v in nodes().items()}
    boot = on(first, "cat /proc/sys/kernel/random/boot_id").strip()
    made = json.loads(sl("checkpoint", "create", NAME, "before-break", "--output", "json", timeout=900).stdout)
    listed = json.loads(sl("checkpoint", "list", NAME, "--output", "json").stdout)["Checkpoints"]
    assert [c["Tag"] for c in listed] == ["before-break"] and listed[0]["SizeBytes"] > 0, listed
    assert sorted(listed[0]["Nodes"]) == sorted(before), listed
    dup = sl("checkpoint", "create", NAME, "before-break", check=False)
    assert dup.returncode != 0 and "already has a checkpoint 'before-break'" in dup.stderr, dup.stderr

    assert second in sl("batch-delete-cluster-nodes", NAME, second).stdout  # break it
    sl("describe-cluster", NAME, "--wait-for", "FullSize", "--timeout", "600")
    assert second not in nodes()
    on("controller", "sudo systemctl stop slurmctld")
    student("rm checkpoint-proof")

    back = json.loads(sl("checkpoint", "restore", NAME, "before-break", "--output", "json", timeout=900).stdout)
    assert {n: v["InstanceId"] for n, v in nodes().items()} == before
    assert on(first, "cat /proc/sys/kernel/random/boot_id").strip() == boot  # its memory back, not booted
    assert student("cat checkpoint-proof").strip() == "kept-by-the-checkpoint"
    assert "UP" in on("login", "scontrol ping")
    skew = abs(float(on(first, "date +%s.%N")) - time.time())
    assert skew < 60, f"{first}'s clock is {skew:.0f} s off after the restore"
    assert sorted(on("login", "timeout 120 srun -p dev -N2 hostname").split()) == [first, second]
    d = describe()
    assert d["ClusterStatus"] == "InService", d
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / "checkpoint-times.json").write_text(json.dumps(
        {"checkpoint_s": made["Seconds"], "restore_s": back["Seconds"], "size_bytes": listed[0]["SizeBytes"],
         "vms": len(before), "checkpoint": made["Message"], "restore": back["Message"]}, indent=2))


def test_rolling_update_of_the_controller_while_a_job_runs():
    """Issue 12, UpdateClusterSoftware: the current box added once more under another name (`box tag`:
    a second image), the controller updated to it while a job runs on compute-1 and another waits,
    held. The controller is shut down cleanly and replaced (a new InstanceId, a fork of the new box's
    template), its state disk moved to the new VM, and health-checked on the new box: the running job
    goes on and completes, it is in accounting, the held job is still queued and runs once released, a
    file in the student's home is still there; the cluster is InService again. (Compute
    nodes replaced by VMs of the new box while jobs run: the auto-patch test below; batches, their
    order and the controller last: tests/unit/test_engine_software.py on the sim provider.)"""
    tagged = json.loads(sl("box", "tag", "slurmlab/trixie-slurm-next", "--output", "json", timeout=1200).stdout)
    first, ctl = f"{NAME}-compute-1", f"{NAME}-controller-1"
    old = nodes()[ctl]["InstanceId"]
    student("echo written-before-the-update > state-disk-proof; rm -f update-done")
    # runs until the test says the update is over: it is running on compute-1 throughout the update
    job = student(f"sbatch --parsable -p dev -w {first} --wrap 'while [ ! -f update-done ]; do sleep 2; done; echo survived'").strip()
    held = student("sbatch --parsable --hold -p dev --wrap 'cat state-disk-proof'").strip()
    try:
        wait(lambda: on("login", f"squeue -h -j {job} -o %T").strip() == "RUNNING", 120, "the job to run", 2)
    except AssertionError as e:  # why Slurm did not start it (CI once timed out here after a restore)
        raise AssertionError(f"{e}\n" + on("login", "squeue -o '%i %T %r %N %C %m'; sinfo -N -o '%N %c %m %T %E'; date")
                             + on("controller", "date; sudo tail -n 40 /var/log/slurm/slurmctld.log || "
                                                "sudo journalctl -u slurmctld -n 40 --no-pager")) from None
    sl("update-cluster-software", NAME, "--group", "controller", "--image-id", tagged["image_id"])
    assert describe()["ClusterStatus"] == "SystemUpdating"
    wait(lambda: describe()["ClusterStatus"] == "InService", 2400, "the update to end", 5)
    events = [e["Description"] for e in json.loads(sl("list-cluster-events", NAME, "--output", "json").stdout)["Events"]]
    keep("software-update-events.txt", subprocess.CompletedProcess([], 0, "\n".join(events[-40:]), ""))
    assert any(e.startswith("UpdateClusterSoftware completed") for e in events), events[-40:]
    assert f"{ctl}: passed its health check on box slurmlab/trixie-slurm-next" in events, events[-40:]
    assert on("login", f"squeue -h -j {job} -o '%T %N'").split() == ["RUNNING", first]  # never stopped
    student("touch update-done")
    assert job_state(job, timeout=300) == ("COMPLETED", first)  # in accounting: the database moved too
    after = nodes()[ctl]
    assert after["InstanceStatus"]["Status"] == "Running" and after["InstanceId"] != old, after
    # the controller's state disk: the queued job, the student's files
    assert on("login", f"squeue -h -j {held} -o %T").strip() == "PENDING"
    on("login", f"sudo scontrol release {held}")
    assert job_state(held, timeout=300)[0] == "COMPLETED"
    assert student(f"cat slurm-{held}.out").strip() == "written-before-the-update"
    import xml.etree.ElementTree as ET

    conn = libvirtd.connect()
    try:  # the new VM is a fork of the new box's template: its disk is a layer over that template's frozen disk
        disk = ET.fromstring(conn.lookupByName(ctl).XMLDesc(0)).find("devices/disk/source").get("file")
        backing = ET.fromstring(conn.storageVolLookupByPath(disk).XMLDesc(0)).findtext("backingStore/path")
        assert backing and backing.endswith("/disk.qcow2"), (ctl, disk, backing)
        meta = json.loads((Path(backing).parent / "meta.json").read_text())
        assert meta["box"] == "slurmlab/trixie-slurm-next", (ctl, backing, meta)
    finally:
        conn.close()


def _slurm_answers() -> bool:
    try:
        on("login", "squeue -h -o %i")
    except AssertionError:
        return False
    return True


def _wait_for_state_save(ended: str, running: str) -> None:
    """Until slurmctld wrote its job state (StateSaveLocation, on the state disk) with `ended` out of the
    queue: a change to `running` (its comment) makes it write once more."""
    wait(lambda: on("login", f"squeue -h -t all -j {ended} -o %T").strip() in ("", "COMPLETED"), 120, "the job ended", 2)
    since = int(on("controller", "date +%s"))
    on("controller", f"sudo scontrol update jobid={running} comment=before-the-loss")
    wait(lambda: int(on("controller", "stat -c %Y /var/lib/slurm/slurmctld/job_state")) > since, 120,
         "slurmctld's state written", 2)


def test_the_controller_destroyed_is_rebuilt_on_its_state_disk():
    """Issue 45: the controller's VM destroyed (no shutdown: slurmctld, MariaDB and the NFS server die with it)
    while a student's job runs on compute-1. The engine finds the VM gone, says so, and rebuilds the
    controller under its name and address on its state disk: slurmctld reads its saved state back, the
    running job goes on and completes into accounting, an earlier job's record is kept, the student's file
    in /home is still there, and the student still logs in. The times go to artifacts/ (not asserted)."""
    first, ctl = f"{NAME}-compute-1", f"{NAME}-controller-1"
    earlier = student("sbatch --parsable -p dev --wrap true").strip()
    student("echo written-before-the-loss > loss-proof; rm -f loss-over")
    job = student(f"sbatch --parsable -p dev -w {first} --wrap 'while [ ! -f loss-over ]; do sleep 2; done'").strip()
    wait(lambda: on("login", f"squeue -h -j {job} -o %T").strip() == "RUNNING", 120, "the job to run", 2)
    assert job_state(earlier, timeout=120)[0] == "COMPLETED"
    # slurmctld writes its state to the state disk a few seconds after a change: a job that ended after the
    # last write comes back from the disk as running, and Slurm requeues it minutes later (CI run G: its
    # ghost held compute-1 for 5 min). Here the loss comes after that write (docs/recovery.md says so).
    _wait_for_state_save(earlier, job)
    old = nodes()[ctl]["InstanceId"]
    seen = set(events_of(NAME))
    conn = libvirtd.connect()
    try:
        conn.lookupByName(ctl).destroy()
    finally:
        conn.close()
    t0 = time.time()
    said = wait(lambda: [e for e in events_of(NAME) if e not in seen and e.startswith(f"{ctl}:")], 300,
                "an event about the controller", 3)
    found = time.time() - t0
    wait(lambda: nodes()[ctl]["InstanceStatus"]["Status"] == "Running" and nodes()[ctl]["InstanceId"] != old, 1200,
         "the controller rebuilt", 5)
    wait(_slurm_answers, 300, "slurmctld answering again", 3)
    back = time.time() - t0
    keep("controller-lost-events.txt", subprocess.CompletedProcess([], 0, "\n".join(events_of(NAME)[-15:]), ""))
    assert on("login", f"squeue -h -j {job} -o '%T %N'").split() == ["RUNNING", first]  # its slurmstepd ran on
    student("touch loss-over")
    assert job_state(job, timeout=300) == ("COMPLETED", first)
    assert job_state(earlier, timeout=60)[0] == "COMPLETED"  # the accounting database is the state disk's
    assert student("cat loss-proof").strip() == "written-before-the-loss"
    assert describe()["ClusterStatus"] == "InService"
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / "controller-lost.json").write_text(json.dumps(
        {"found_s": round(found, 1), "slurm_answers_s": round(back, 1), "event": said[0]}))


def test_a_hung_node_is_found_rebooted_and_back_in_slurm():
    """Issue 45: compute-2's kernel panics (sysrq c; kernel.panic=0, so its vCPU spins): libvirt says it runs,
    neither ssh nor its guest agent answers. The engine finds it hung by its silent agent, says so in one
    event, reboots it (the same instance), and it joins Slurm again, idle. The times go to artifacts/ (a
    benchmark's figures, not asserted)."""
    node = f"{NAME}-compute-2"
    before = nodes()[node]["InstanceId"]
    seen = set(events_of(NAME))
    # 5 s later, from a timer of the guest's systemd: the ssh command that sets it has returned by then
    on(node, "sudo systemd-run --on-active=5 --timer-property=AccuracySec=100ms --unit=slurmlab-test-panic sh -c "
             "'echo 1 > /proc/sys/kernel/sysrq; echo c > /proc/sysrq-trigger'")
    t0 = time.time() + 5
    hung = wait(lambda: [e for e in events_of(NAME) if e not in seen and e.startswith(f"{node}: hung for ")], 600,
                f"the engine to find {node} hung", 5)
    found = time.time() - t0
    assert hung[0].endswith("rebooting it") and "its guest agent does not answer" in hung[0], hung
    wait(lambda: nodes()[node]["InstanceStatus"]["Status"] == "Running"
         and on("controller", f"sinfo -h -N -n {node} -o %T").strip() == "idle", 900, f"{node} idle in Slurm", 5)
    assert nodes()[node]["InstanceId"] == before  # rebooted, not replaced: it answered after its reboot
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / "hung-vm.json").write_text(json.dumps(
        {"node": node, "found_s": round(found, 1), "idle_in_slurm_s": round(time.time() - t0, 1), "event": hung[0]}))


def test_an_auto_resume_srun_not_told_that_its_step_ended_is_ended_with_the_steps_code():
    """Issue 45 (the class day): compute-1 cannot reach the login node while its step's task ends (a route
    `unreachable` on compute-1; slurmctld and the NFS server stay in reach). slurmstepd's 5 tries to tell
    srun fail at once, and Slurm's srun would wait for ever while slurmctld has the step COMPLETED. The
    `--auto-resume=1` wrapper sees that, says so, ends srun and the job, and exits 0, the step's code."""
    node, login = f"{NAME}-compute-1", nodes()[f"{NAME}-login-1"]["PrivatePrimaryIp"]
    student("rm -f ~/untold.out ~/untold.done ~/untold.started; (nohup srun --auto-resume=1 -p dev -N1 -w " + node
            + " sh -c 'hostname > ~/untold.started; sleep 15; hostname > ~/untold.done' > ~/untold.out 2>&1;"
            " echo exit=$? >> ~/untold.out) > /dev/null 2>&1 &")
    step = wait(lambda: [s for s in on("controller", f"squeue -h -s -w {node} -o %i").split() if s.endswith(".0")],
                300, "the step to run", 1)[0]
    # its task runs: the step in squeue is not enough (CI run L: the route came before slurmstepd had
    # connected to srun, the task never started, and nothing wrote untold.done)
    wait(lambda: student("cat ~/untold.started 2>/dev/null || true").strip() == node, 120, "the task to start", 1)
    on(node, f"sudo ip route add unreachable {login}/32")
    try:
        wait(lambda: student("cat ~/untold.done 2>/dev/null || true").strip() == node, 120, "the task to end", 2)
        # until slurmctld has the step's end: slurmstepd tells srun before it tells slurmctld, so its tries to
        # tell srun are over (an emulated guest under CI's load took longer than 5 s to get there: run J)
        wait(lambda: on("controller", f"sacct -n -P -j {step} -o State").strip() not in ("", "RUNNING"), 360,
             "slurmctld to have the step's end", 3)
    finally:
        on(node, f"sudo ip route del unreachable {login}/32")
    wait(lambda: "exit=" in student("cat ~/untold.out"), 300, "srun to end", 5)
    out = student("cat ~/untold.out")
    keep("untold-srun.txt", subprocess.CompletedProcess([], 0, out, ""))
    assert "but srun was not told" in out and "exit=0" in out, out
    assert not on("controller", f"squeue -h -w {node} -o %i").strip()  # the job is gone, its node free


def test_a_users_own_tests_run_through_the_pytest_plugin():
    """Issue 46: examples/verification/ (the ten-line test_hello.py among them) with plain pytest, its
    slurm_cluster fixture given this running cluster by name: a batch job on two nodes, a testinfra host,
    commands as a user. (Here rather than on the class cluster: the streams' lengths, ADR 0029.)"""
    folder = REPO / "examples" / "verification"
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rfE", str(folder),
                        f"--rootdir={folder}", "--slurm-cluster", NAME], cwd=folder, capture_output=True, text=True,
                       timeout=900, stdin=subprocess.DEVNULL)
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / "plugin-run.txt").write_text(p.stdout + p.stderr)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "4 passed" in p.stdout and "test_a_job_runs_on_two_nodes PASSED" in p.stdout


def test_a_reframe_check_runs_through_the_generated_configuration():
    """Issue 46: `slurmlab reframe-config --install` puts the cluster's ReFrame configuration on the login node;
    a student runs examples/reframe/hello.py with the box's ReFrame through its Slurm backend: hostname on
    the two nodes of partition dev. (Here rather than on the class cluster: the streams' lengths, ADR 0029.)"""
    p = sl("reframe-config", NAME, "--install")
    keep("reframe-install.txt", p)
    assert f"installed /etc/slurmlab/reframe/{NAME}.py on {NAME}-login-1" in p.stderr, p.stderr
    check = (REPO / "examples" / "reframe" / "hello.py").read_text()
    student(f"mkdir -p rfm && cat > rfm/hello.py <<'CHECK'\n{check}CHECK\n")
    out = student("cd rfm && bash -lc 'reframe -c hello.py -r' 2>&1; echo rc=$?")
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # ReFrame colours its verdicts, a terminal or not
    keep("reframe-run.txt", subprocess.CompletedProcess(["reframe"], 0, out, ""))
    assert "rc=0" in out and "[  PASSED  ] Ran 1/1 test case(s)" in out, out[-3000:]
    assert f"{NAME}:dev" in out


def test_lifecycle_rerun_runs_the_edited_scripts_on_a_new_fork_and_leaves_the_rest():
    """Issue 46: the compute group's scripts edited in a folder of their own; `slurmlab lifecycle rerun` replaces
    compute-2 with a new fork that runs them, shows their output as it comes, and says the result with its
    times (to artifacts/, a benchmark's figures, not asserted). The other nodes keep their instances."""
    node = f"{NAME}-compute-2"
    before = nodes()
    edited = Path(os.environ["SLURMLAB_HOME"]) / "lifecycle-edited"  # the group's scripts from now on: kept
    shutil.copytree(SPEC.parent / "lifecycle", edited)
    script = edited / "on_create.sh"
    script.write_text(script.read_text() + 'echo "Execute script: ./edited"\necho "edited on $(hostname)" > /etc/slurmlab-rerun\n')
    t0 = time.monotonic()
    p = sl("lifecycle", "rerun", NAME, node, "--from", str(edited))
    took = time.monotonic() - t0
    keep("lifecycle-rerun.txt", p)
    assert f"{node} | [on_create] start on {node}" in p.stdout and f"{node} | Execute script: ./edited" in p.stdout
    assert f"{node}: Succeeded (new fork " in p.stderr, p.stderr
    after = nodes()
    assert after[node]["InstanceId"] != before[node]["InstanceId"]
    assert {n: v["InstanceId"] for n, v in after.items() if n != node} == \
        {n: v["InstanceId"] for n, v in before.items() if n != node}
    assert on(node, "cat /etc/slurmlab-rerun").strip() == f"edited on {node}"
    wait(lambda: on("controller", f"sinfo -h -N -n {node} -o %T").strip() == "idle", 600, f"{node} idle in Slurm", 3)
    times = re.search(r"new fork ([0-9.]+) s, scripts' result ([0-9.]+) s", p.stderr)
    (REPO / "artifacts" / "lifecycle-rerun.json").write_text(json.dumps(
        {"node": node, "new_fork_s": float(times[1]), "scripts_result_s": float(times[2]), "command_s": round(took, 1),
         "idle_in_slurm_s": round(time.monotonic() - t0, 1)}))


def test_auto_patch_when_idle_patches_the_idle_node_and_the_busy_one_after_its_job(served):
    """Issue 32: the box tagged above is a newer release of the line (`box list`); the compute nodes, still
    on the first release, report UpdateAvailable. AutoPatchConfig WhenIdle on the compute group (UpdateCluster
    through boto3): both nodes are cordoned (Slurm drain), compute-1 (idle) is patched at once while a job
    keeps running on compute-2, which is patched once its job ends. The job completes; srun -N2 after."""
    first, second = f"{NAME}-compute-1", f"{NAME}-compute-2"
    boxes = json.loads(sl("box", "list", "--output", "json").stdout)
    new = next(b["release"]["version"] for b in boxes if b["name"] == "slurmlab/trixie-slurm-next")
    before = nodes()
    old = before[first]["CurrentImageReleaseVersion"]
    assert old != new and before[second]["CurrentImageReleaseVersion"] == old, before[first]
    assert before[first]["ImageVersionStatus"] == "UpdateAvailable", before[first]
    job = student(f"sbatch --parsable -p dev -w {second} --wrap 'while [ ! -f patch-go ]; do sleep 5; done; echo patched-around'").strip()
    wait(lambda: on("login", f"squeue -h -j {job} -o %T").strip() == "RUNNING", 120, "the job to run")
    client = served.client()
    g = next(g for g in client.describe_cluster(ClusterName=NAME)["InstanceGroups"] if g["InstanceGroupName"] == "compute")
    spec = {k: g[k] for k in ("InstanceGroupName", "InstanceType", "SlurmConfig", "LifeCycleConfig") if k in g}
    client.update_cluster(ClusterName=NAME, InstanceGroups=[{  # boto3 wants an ExecutionRole; the lab takes any
        **spec, "InstanceCount": g["TargetCount"], "ExecutionRole": "arn:aws:iam::111122223333:role/lab",
        "AutoPatchConfig": {"PatchingStrategy": "WhenIdle"}}])

    def on_new(x):
        n = nodes()[x]
        return n.get("CurrentImageReleaseVersion") == new and n["InstanceStatus"]["Status"] == "Running"

    wait(lambda: on_new(first), 1500, f"{first} patched to {new}", 3)
    assert on("login", f"squeue -h -j {job} -o %T").strip() == "RUNNING"  # never killed
    assert nodes()[second]["CurrentImageReleaseVersion"] == old
    state = on("login", f"sinfo -h -N -n {second} -o '%T|%E'").strip()
    assert state.startswith("draining|slurmlab: auto-patch"), state  # cordoned: its job runs on, no new one starts
    student("touch patch-go")
    assert job_state(job, timeout=300) == ("COMPLETED", second)
    wait(lambda: on_new(second), 1500, f"{second} patched to {new}", 3)
    events = events_of(NAME)
    keep("auto-patch-events.txt", subprocess.CompletedProcess([], 0, "\n".join(events[-30:]), ""))
    assert any(e.startswith("AutoPatch completed: 2 node(s) patched") for e in events), events[-30:]
    after = nodes()
    for x in (first, second):
        assert after[x]["ImageVersionStatus"] == "UpToDate" and after[x]["InstanceId"] != before[x]["InstanceId"]
    assert sorted(on("login", "timeout 120 srun -p dev -N2 hostname").split()) == [first, second]


def _active_mib(conn) -> int:
    return sum(d.info()[1] // 1024 for d in conn.listAllDomains() if d.isActive())


def _rig_sees(command: str) -> str:
    from lab.host import rig

    p = rig.on_rig(H2, command)
    assert p.returncode == 0, (command, p.stdout, p.stderr)
    return p.stdout


def test_a_second_host_takes_the_cluster_the_first_has_no_room_for(served):
    """Issues 16, 29 and 47 on real VMs: a second libvirt host that looks like another machine (`host simulate
    --remote`: its own libvirtd, sshd and address in namespaces of its own, none of the lab's files there),
    reached only over qemu+ssh, its templates uploaded first (`host prepare`). With this host's memory limited to what its VMs use plus 200 MiB,
    a cluster made with boto3 (controller + 1 compute, 1536 MiB) is placed on the remote host. Its nodes
    are forked there (issue 47): the templates go up to the remote's pool through libvirt, rebased onto
    its volumes, and each node's overlay, save image copy and state disk are volumes there; its domains
    name no file of this machine; both clusters run `srun`. A checkpoint of it is taken and restored on the
    remote (its memory in the remote's pool; a file deleted and slurmctld stopped come back, the compute
    node keeps its boot id). Delete removes what the cluster had on the remote, the checkpoint's volumes
    too, and `host remove` leaves nothing on either host. (The loss of a host, its nodes rebuilt here,
    is on the sim engine: tests/unit/test_engine_hostloss.py; it ran on real VMs in CI until stop 37, then
    left the e2e suite for CI's time budget.)"""
    import xml.etree.ElementTree as ET

    from lab.host import registry, rig, simulated, sshhost
    from lab.providers import domains, fork, hostside

    sl("host", "simulate", H2, "--remote")
    # the other machine: none of the lab's folders, no socket of its libvirtd on this side
    home = os.environ["SLURMLAB_HOME"]
    assert _rig_sees(f"find /var/lib/libvirt/slurmlab {home} {REPO} -mindepth 1 2>/dev/null | wc -l").strip() == "0"
    assert _rig_sees("test -S /run/libvirt/libvirt-sock && echo yes").strip() == "yes"
    assert not list(simulated.folder(H2).rglob("libvirt-sock"))
    sl("delete-cluster", FAR, "--leftovers", timeout=300)  # a killed run's far, in the simulated host's own libvirt
    # its templates go up before the class (far's shape: a t3.medium controller and a c5.large worker)
    prepared = json.loads(sl("host", "prepare", H2, "--shape", "1cpu-768mib", "--output", "json", timeout=600).stdout)
    assert prepared["driver"] == "qemu" and None in {t["role"] for t in prepared["templates"]}, prepared
    try:
        conn = libvirtd.connect()
        try:
            # no room for far's two nodes, even if the class stream frees one of its own meanwhile
            sl("host", "limit", "local", "--memory-mib", str(_active_mib(conn) + 200))
        finally:
            conn.close()
        client = served.client()
        lifecycle = {"SourceS3Uri": str(REPO / "examples" / "lifecycle"), "OnCreate": "on_create.sh"}
        t_create = time.monotonic()
        arn = client.create_cluster(ClusterName=FAR, NodeProvisioningMode="Continuous", NodeRecovery="Automatic",
                                    InstanceGroups=[
            {"InstanceGroupName": "controller", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
             "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}, "LifeCycleConfig": lifecycle},
            {"InstanceGroupName": "compute", "InstanceType": "ml.c5.large", "InstanceCount": 1, "ExecutionRole": ROLE,
             "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["dev"]}, "LifeCycleConfig": lifecycle}])["ClusterArn"]
        assert arn.startswith("arn:aws:sagemaker:")

        def far_full() -> bool:
            ns = client.list_cluster_nodes(ClusterName=FAR)["ClusterNodeSummaries"]
            return len(ns) == 2 and all(n["InstanceStatus"]["Status"] == "Running" for n in ns)

        wait(far_full, 1200, "cluster far at full size on the second host")
        t_full = time.monotonic()
        far = json.loads(sl("describe-cluster", FAR, "--output", "json").stdout)
        assert far["Lab"]["Host"] == H2 and describe()["Lab"]["Host"] == "local", far
        listed = json.loads(sl("list-cluster-nodes", FAR, "--output", "json").stdout)["ClusterNodeSummaries"]
        assert {n["Lab"]["Host"] for n in listed} == {H2}
        # releases per host: the box's release is on H2 now, and far's nodes are on it (read from their disks there)
        from lab.box import DEFAULT_BOX

        release = next(b["release"] for b in json.loads(sl("box", "list", "--output", "json").stdout) if b["name"] == DEFAULT_BOX)
        assert H2 in release["hosts"], release
        assert {n["CurrentImageReleaseVersion"] for n in listed} == {release["version"]}, listed
        h2 = registry.get(H2)
        assert h2.remote and h2.uri.startswith("qemu+ssh://root@10.212.")
        c2 = h2.connect()
        try:
            doms = domains.of_cluster(c2, FAR)
            assert sorted(d.name() for d in doms) == ["far-compute-1", "far-controller-1"]
            for d in doms:  # what the remote's qemu reads is the remote's: its pool's volumes, rebased templates
                xml = d.XMLDesc(0)
                assert hostside.foreign_paths(xml) == [] and "/var/lib/libvirt/slurmlab" not in xml, d.name()
                assert fork.fork_of(xml), f"{d.name()} booted cold on the remote (the engine log's 'boots cold' says why)"
                files = [s.get("file") for s in ET.fromstring(xml).iter("source") if s.get("file")]
                assert files and all(f.startswith(f"{rig.POOL_PATH}/") for f in files), files
                assert any("slurmlab_tpl_" in f for f in files), f"no template volume in {d.name()}'s chain: {files}"
                tb = ET.fromstring(xml).find("features/tcg/tb-cache")  # TCG's cache capped without the local wrapper
                assert tb is not None and int(tb.text) << {"KiB": 10, "MiB": 20}[tb.get("unit", "KiB")] == 128 << 20, d.name()
        finally:
            c2.close()
        # the key reached the node (a fork gets it with its identity, through the guest agent)
        assert sl("ssh", FAR, "controller", "--", "systemctl is-active munge").stdout.strip() == "active"
        srun = "timeout 120 srun --immediate=60 -p dev -N1 hostname"
        assert sl("ssh", FAR, "controller", "--", srun).stdout.split() == ["far-compute-1"]
        both = srun.replace("-N1", "-N2")
        assert sorted(h.split(".")[0] for h in on("login", both).split()) == [f"{NAME}-compute-1", f"{NAME}-compute-2"]

        # a checkpoint on the remote (issue 47): its memory saved in the remote's pool, restored there
        def far_ssh(node: str, cmd: str) -> str:
            return sl("ssh", FAR, node, "--", cmd).stdout

        far_ssh("controller", "echo kept-on-the-remote | sudo tee /var/tmp/checkpoint-proof")
        boot = far_ssh("compute", "cat /proc/sys/kernel/random/boot_id").strip()
        made = json.loads(sl("checkpoint", "create", FAR, "far-1", "--output", "json", timeout=600).stdout)
        listed = json.loads(sl("checkpoint", "list", FAR, "--output", "json").stdout)["Checkpoints"]
        assert [(c["Tag"], c["Host"]) for c in listed] == [("far-1", H2)], listed
        c2 = h2.connect()
        try:
            pool = c2.storagePoolLookupByName(h2.pool)
            pool.refresh(0)
            assert sorted(v for v in pool.listVolumes() if v.startswith(f"{FAR}-ckpt.")) == [
                f"{FAR}-ckpt.far-1.far-compute-1.mem", f"{FAR}-ckpt.far-1.far-controller-1.mem"]
        finally:
            c2.close()
        far_ssh("controller", "sudo rm /var/tmp/checkpoint-proof; sudo systemctl stop slurmctld")  # break it
        back = json.loads(sl("checkpoint", "restore", FAR, "far-1", "--output", "json", timeout=600).stdout)
        assert far_ssh("controller", "cat /var/tmp/checkpoint-proof").strip() == "kept-on-the-remote"
        assert far_ssh("compute", "cat /proc/sys/kernel/random/boot_id").strip() == boot  # its memory back, no boot
        assert sl("ssh", FAR, "controller", "--", srun).stdout.split() == ["far-compute-1"]
        (REPO / "artifacts").mkdir(exist_ok=True)
        (REPO / "artifacts" / "remote-checkpoint-times.json").write_text(json.dumps(
            {"create_to_full_s": round(t_full - t_create, 1), "checkpoint_s": made["Seconds"],
             "restore_s": back["Seconds"], "size_bytes": listed[0]["SizeBytes"], "restore": back["Message"]}, indent=2))

        def nothing_left_on_h2() -> bool:
            c = h2.connect()
            try:
                pool = c.storagePoolLookupByName(h2.pool)
                pool.refresh(0)
                return (not domains.of_cluster(c, FAR) and network.net_name(FAR) not in [n.name() for n in c.listAllNetworks()]
                        and not [v for v in pool.listVolumes() if v.startswith(f"{FAR}-")])
            finally:
                c.close()

        client.delete_cluster(ClusterName=FAR)
        wait(lambda: all(c["ClusterName"] != FAR for c in client.list_clusters()["ClusterSummaries"]), 600, "far deleted")
        assert nothing_left_on_h2(), "delete left domains, the network or volumes (the munge key's too) on the remote"
        sl("host", "remove", H2)
        assert not Path("/run/netns", simulated.netns(H2)).exists() and not simulated.folder(H2).exists()
        assert not sshhost.folder(H2).exists() and not Path(sshhost.control_path(H2)).exists()
        assert not (Path(os.environ["SLURMLAB_HOME"]) / "bin" / f"ssh-to-{H2}").exists()
        assert [h["name"] for h in json.loads(sl("host", "list", "--output", "json").stdout)] == ["local"]
    finally:
        sl("host", "limit", "local", "--memory-mib", "0", check=False)
        sl("delete-cluster", FAR, check=False, timeout=900)
        if simulated.folder(H2).exists():
            simulated.stop(H2, force=True)
            simulated.remove(H2)
            sl("host", "remove", H2, check=False)

