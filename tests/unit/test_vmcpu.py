"""tests/e2e/vmcpu.py (issue 43): the CPU each e2e test's VMs used, per cluster."""

from __future__ import annotations

import json

from tests.e2e import vmcpu


def test_cpu_per_cluster_between_two_readings():
    before = {10: ("class", 100.0), 11: ("class", 50.0), 20: ("patch", 7.0), 30: ("gone", 5.0)}
    after = {10: ("class", 130.0), 11: ("class", 52.5), 20: ("patch", 7.0), 40: ("patch", 12.0)}
    # 40 started during the test (counted from zero), 30 ended (left out), patch's 20 did nothing
    assert vmcpu.used(before, after) == {"class": 32.5, "patch": 12.0}


def test_a_vm_is_counted_for_its_cluster():
    assert vmcpu.cluster_of("class-compute-12") == "class"
    assert vmcpu.cluster_of("e2e-b-controller-1") == "e2e-b"
    assert vmcpu.cluster_of("slurmlab-role-template") == "slurmlab-role-template"


def test_one_json_line_per_test(tmp_path):
    out = tmp_path / "a" / "lines.jsonl"
    (tmp_path / "a").mkdir()
    vmcpu.record("t::one", 12.34, {"class": 5.0}, out)
    vmcpu.record("t::two", 1.0, {}, out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines == [{"test": "t::one", "seconds": 12.3, "vm_cpu_s": {"class": 5.0}},
                     {"test": "t::two", "seconds": 1.0, "vm_cpu_s": {}}]


def test_a_qemu_process_is_read_with_its_vms_cluster():
    import subprocess
    import sys

    fake = subprocess.Popen(["/usr/bin/qemu-system-x86_64", "-c", "import time; time.sleep(30)", "-name",
                             "guest=fake-compute-1,debug-threads=on"], executable=sys.executable)
    try:
        import time
        from pathlib import Path

        deadline = time.monotonic() + 10  # until the child has exec'd (its command line is qemu's)
        while b"guest=fake" not in Path(f"/proc/{fake.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        got = vmcpu.readings()
        assert got[fake.pid][0] == "fake" and got[fake.pid][1] >= 0
        assert all(cluster != "?" or pid != fake.pid for pid, (cluster, _cpu) in got.items())
    finally:
        fake.kill()
        fake.wait()
    assert fake.pid not in vmcpu.readings()


def test_a_vm_made_and_gone_within_the_test_is_counted(monkeypatch, tmp_path):
    seen = iter([{}, {7: ("legacy", 3.0)}, {7: ("legacy", 9.0)}])
    monkeypatch.setattr(vmcpu, "readings", lambda: next(seen, {}))
    monkeypatch.setattr(vmcpu, "OUT", tmp_path / "out.jsonl")
    monkeypatch.setattr(vmcpu, "record", lambda test, seconds, per, out=None, own=None: got.append(per))
    got = []
    import time

    w = vmcpu.Watch("t", every=0.01)
    time.sleep(0.2)
    w.done()
    assert got == [{"legacy": 9.0}]


def test_a_line_names_the_clusters_of_the_tests_own_lab_home(tmp_path, monkeypatch):
    from lab.engine import daemon
    from tests.api.seed import seed_cluster

    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path / "home"))
    assert vmcpu.own_clusters() == set()  # no store yet
    seed_cluster(daemon.store(), "patch")
    assert vmcpu.own_clusters() == {"patch"}
    out = tmp_path / "lines.jsonl"
    vmcpu.record("t::one", 1.0, {"patch": 2.0, "class": 9.0}, out, own={"patch"})
    assert json.loads(out.read_text())["own"] == ["patch"]
