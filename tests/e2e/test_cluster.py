"""Issue 3 (and the capacity scenario of issue 4) on real VMs, one shared cluster.

examples/small.yaml: 1 controller + 1 login + 2 compute (768 MiB each). Only one ml.c5.large is
available at first: the cluster goes InService with one compute node, a job runs there, then
capacity appears, the second node joins by itself (slurm.conf + one scontrol reconfigure) and
the running job survives the join. Then both nodes are idle, `srun -N2 hostname` covers them,
a second Ansible run changes nothing, `slurmlab verify` passes and then names the check that fails
when a node's slurmd is stopped, a scale-out adds a third node and a scale-in removes it while
the rest keep working, and delete leaves nothing in libvirt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.host import libvirtd
from lab.providers import network

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "small.yaml"
CAPACITY = Path(__file__).parent / "data" / "capacity-one-compute.yaml"
NAME = "ci"


def sl(*args, check=True, timeout=2400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lab", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    sys.stderr.write(p.stderr[-4000:])
    if check and p.returncode != 0:
        raise AssertionError(f"slurmlab {' '.join(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


def describe() -> dict:
    return json.loads(sl("describe-cluster", NAME, "--output", "json").stdout)


def nodes() -> dict[str, dict]:
    data = json.loads(sl("list-cluster-nodes", NAME, "--output", "json").stdout)
    return {n["NodeLogicalId"]: n for n in data["ClusterNodeSummaries"]}


def on(node: str, command: str) -> str:
    p = sl("ssh", NAME, node, "--", command, check=False, timeout=300)
    assert p.returncode == 0, f"{command!r} on {node} failed: {p.stdout}{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module", autouse=True)
def lab_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("slurmlab-home")
    old = os.environ.get("SLURMLAB_HOME")
    os.environ["SLURMLAB_HOME"] = str(home)
    yield home
    # safety net: whatever happened, leave nothing behind; keep the logs
    if (home / "clusters" / NAME).exists():
        dest = REPO / "artifacts" / "e2e-logs"
        shutil.copytree(home / "clusters" / NAME / "logs", dest / "vagrant", dirs_exist_ok=True)
        shutil.copytree(home / "clusters" / NAME / "ansible", dest / "ansible", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("fact_cache"))
    if (home / "engine.log").exists():
        (REPO / "artifacts").mkdir(exist_ok=True)
        shutil.copy(home / "engine.log", REPO / "artifacts" / "engine.log")
    sl("delete-cluster", NAME, check=False, timeout=900)
    sl("engine", "stop", check=False)
    if old is None:
        os.environ.pop("SLURMLAB_HOME", None)
    else:
        os.environ["SLURMLAB_HOME"] = old


def test_bad_spec_creates_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.read_text().replace("ml.c5.large", "ml.c5.lrge"))
    p = sl("create-cluster", "--spec", str(bad), check=False)
    assert p.returncode == 2
    assert "ml.c5.lrge" in p.stderr and "ml.c5.large" in p.stderr  # names the field and a close valid type
    assert json.loads(sl("list-clusters", "--output", "json").stdout)["ClusterSummaries"] == []


def test_inservice_with_the_compute_node_that_has_capacity():
    t0 = time.monotonic()
    sl("create-cluster", "--spec", str(SPEC), "--capacity", str(CAPACITY), "--wait", "--wait-for", "InService")
    # InService needs the controller and the login node; wait for the one compute node that fits
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        d = describe()
        compute = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "compute")
        if compute["CurrentCount"] == 1:
            break
        time.sleep(5)
    d = describe()
    assert d["ClusterStatus"] == "InService"
    groups = {g["InstanceGroupName"]: g for g in d["InstanceGroups"]}
    assert groups["controller"]["CurrentCount"] == 1 and groups["login"]["CurrentCount"] == 1
    assert groups["compute"]["CurrentCount"] == 1 and groups["compute"]["TargetCount"] == 2
    assert groups["compute"]["Status"] == "Degraded"
    short = [n for n in nodes().values() if n["InstanceStatus"]["Status"] == "Failure"]
    assert len(short) == 1 and "InsufficientCapacity" in short[0]["InstanceStatus"]["Message"]
    print(f"InService with 1 of 2 compute nodes after {time.monotonic() - t0:.0f} s")


def test_second_node_joins_while_a_job_runs():
    ns = nodes()
    first = next(n for n, v in ns.items() if "compute" in n and v["InstanceStatus"]["Status"] == "Running")
    second = next(n for n in ns if "compute" in n and n != first)
    job = on("login", f"sbatch --parsable -N1 -w {first} --wrap 'sleep 1800'").strip()
    assert job.isdigit()
    deadline = time.monotonic() + 120
    while on("login", f"squeue -h -j {job} -o %T").strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job never started on the first compute node"
        time.sleep(2)
    sl("capacity", "set", "ml.c5.large", "2")
    d = json.loads(sl("describe-cluster", NAME, "--wait-for", "FullSize", "--timeout", "1500", "--output", "json").stdout)
    assert d["ClusterStatus"] == "InService"
    assert all(g["CurrentCount"] == g["TargetCount"] for g in d["InstanceGroups"])
    # the job kept its id and is still running on the first node after the join's reconfigure
    assert on("login", f"squeue -h -j {job} -o '%T %N'").split() == ["RUNNING", first]
    assert nodes()[second]["InstanceStatus"]["Status"] == "Running"
    on("login", f"scancel {job}")


def test_both_compute_nodes_idle_and_srun_covers_them():
    deadline = time.monotonic() + 60
    while True:
        states = on("login", "sinfo -h -N -p dev -o '%N %T'").split("\n")
        states = dict(line.split() for line in states if line.strip())
        if set(states.values()) == {"idle"} or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert states == {f"{NAME}-compute-1": "idle", f"{NAME}-compute-2": "idle"}
    out = on("login", "srun -N2 hostname").split()
    assert sorted(out) == [f"{NAME}-compute-1", f"{NAME}-compute-2"]
    # the login node submits but runs no slurmd; the lifecycle script ran
    assert on("login", "systemctl is-active slurmd || true").strip() != "active"
    assert "host=" in on("login", "cat /etc/slurmlab-lifecycle-ran")


def test_second_ansible_run_changes_nothing():
    from lab.configure.runner import run_playbook
    from lab.engine import daemon
    from lab.workspace import ClusterDir

    st = daemon.store()
    conf = daemon.make_configurer("vagrant")
    ctx = conf.context(st.cluster(NAME), st.groups(NAME), st.nodes(NAME))
    for playbook in ("controller.yml", "nodes.yml", "join.yml"):
        r = run_playbook(ctx, playbook, workdir=ClusterDir(NAME).root)
        assert r.ok and sum(r.changed.values()) == 0, f"{playbook} changed {r.changed}"


def _keep(name: str, p: subprocess.CompletedProcess) -> None:
    """The command's output in artifacts/ (docs/workshop.md quotes these runs)."""
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / name).write_text(f"$ {' '.join(['slurmlab', *p.args[3:]])}\n{p.stdout}{p.stderr}[rc={p.returncode}]\n")


def _junit(path: Path) -> tuple[dict, set[str]]:
    """(the testsuite's counters, the names of the failed test cases) of a JUnit XML file."""
    import xml.etree.ElementTree as ET

    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = {tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None or tc.find("error") is not None}
    return counts, failed


def test_verify_passes_on_the_cluster(tmp_path):
    junit = tmp_path / "verify.xml"
    p = sl("verify", NAME, "--junit", str(junit), check=False, timeout=1200)
    _keep("verify-pass.txt", p)
    counts, failed = _junit(junit)
    assert p.returncode == 0, f"verify failed: {sorted(failed)}\n{p.stdout[-4000:]}"
    assert counts["tests"] >= 30 and counts["failures"] == 0 and counts["errors"] == 0 and not failed
    assert "test_srun_covers_all_compute_nodes PASSED" in p.stdout


def test_verify_names_a_stopped_slurmd(tmp_path):
    node = f"{NAME}-compute-2"
    on(node, "sudo systemctl stop slurmd")
    try:
        junit = tmp_path / "verify.xml"
        p = sl("verify", NAME, "--junit", str(junit), check=False, timeout=1200)
        _keep("verify-slurmd-stopped.txt", p)
        _, failed = _junit(junit)
        assert p.returncode == 1, p.stdout[-4000:]
        assert f"test_slurmd_active_on_compute[{node}]" in failed
        assert f"FAILED" in p.stdout and f"test_slurmd_active_on_compute[{node}]" in p.stdout
        # the healthy compute node's check passed: the failure is pinned on the stopped one
        assert f"test_slurmd_active_on_compute[{NAME}-compute-1]" not in failed
    finally:
        on(node, "sudo systemctl start slurmd")
        # ReturnToService=2: the node comes back when its slurmd registers again
        deadline = time.monotonic() + 300
        while on("login", f"sinfo -h -N -n {node} -o %T").strip() != "idle" and time.monotonic() < deadline:
            on("controller", f"sudo scontrol update nodename={node} state=resume 2>/dev/null || true")
            time.sleep(5)
    assert on("login", f"sinfo -h -N -n {node} -o %T").strip() == "idle"


def test_scale_out_then_in():
    """BatchAddClusterNodes: a third compute node joins the running cluster, every node resolves its
    name, srun reaches it. BatchDeleteClusterNodes of that node: drained, out of slurm.conf, VM gone;
    the cluster's network stays (vagrant-libvirt once took it down with the node) and jobs still run."""
    new = f"{NAME}-compute-3"
    sl("capacity", "set", "ml.c5.large", "3")  # the test's capacity day had room for two
    assert new in sl("batch-add-cluster-nodes", NAME, "compute").stdout
    sl("describe-cluster", NAME, "--wait-for", "FullSize", "--timeout", "900")
    assert nodes()[new]["InstanceStatus"]["Status"] == "Running"
    assert sorted(on("login", "srun -N3 hostname").split()) == [f"{NAME}-compute-{i}" for i in (1, 2, 3)]
    for node in ("controller", "login", f"{NAME}-compute-1"):  # the nodes that were there before it
        assert new in on(node, f"getent hosts {new}"), f"{node} cannot resolve {new}"

    assert new in sl("batch-delete-cluster-nodes", NAME, new).stdout
    d = json.loads(sl("describe-cluster", NAME, "--wait-for", "FullSize", "--timeout", "600", "--output", "json").stdout)
    compute = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "compute")
    assert (compute["CurrentCount"], compute["TargetCount"]) == (2, 2)
    assert new not in nodes()
    conn = libvirtd.connect()
    try:
        assert new not in [dom.name() for dom in conn.listAllDomains()]
        assert conn.networkLookupByName(network.net_name(NAME)).isActive()
    finally:
        conn.close()
    assert on("login", "sinfo -h -N -o '%N'").split() == [f"{NAME}-compute-1", f"{NAME}-compute-2"]
    assert sorted(on("login", "srun -N2 hostname").split()) == [f"{NAME}-compute-1", f"{NAME}-compute-2"]


def test_delete_leaves_nothing_in_libvirt():
    sl("delete-cluster", NAME, timeout=900)
    conn = libvirtd.connect()
    try:
        assert [d.name() for d in conn.listAllDomains() if d.name().startswith(f"{NAME}-")] == []
        assert network.net_name(NAME) not in [n.name() for n in conn.listAllNetworks()]
        pool = conn.storagePoolLookupByName(libvirtd.POOL)
        pool.refresh(0)
        assert [v.name() for v in pool.listAllVolumes() if v.name().startswith(f"{NAME}-")] == []
    finally:
        conn.close()
    assert not (Path(os.environ["SLURMLAB_HOME"]) / "clusters" / NAME).exists()
