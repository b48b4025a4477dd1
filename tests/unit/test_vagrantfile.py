import ipaddress

import pytest

from lab.providers import network
from lab.providers.base import ClusterNet, MachineSpec, mac_for
from lab.providers.vagrantfile import render


def _render(**over):
    net = ClusterNet("slurmlab-demo", "slbr7", "10.213.7.0/24", "10.213.7.1")
    machines = [
        MachineSpec("demo-compute-1", "compute", 1, 768, mac_for("demo", "demo-compute-1"), "10.213.7.12", "Compute"),
        MachineSpec("demo-controller-1", "controller", 1, 768, mac_for("demo", "demo-controller-1"), "10.213.7.10", "Controller",
                    state_disk="demo-state-1764600000.qcow2"),
    ]
    kw = dict(cluster="demo", box="slurmlab/trixie-slurm", machines=machines, net=net,
              private_key="/lab/clusters/demo/secrets/id_ed25519", public_key="ssh-ed25519 AAAAC3Nz slurmlab-demo",
              driver="qemu", emulator_path="/var/lib/libvirt/slurmlab/qemu-system-x86_64-tcg", pool="slurmlab",
              munge_key_file="/var/lib/libvirt/slurmlab/credentials/demo/munge.key")
    kw.update(over)
    return render(**kw)


def test_vagrantfile_matches_golden():
    # only compares; `make golden` regenerates it (tests/unit/golden.py)
    from tests.unit import golden

    golden.assert_matches("Vagrantfile.golden", _render())


def test_nodes_sorted_and_never_the_insecure_key():
    text = _render()
    assert text.index('"demo-compute-1"') < text.index('"demo-controller-1"')
    assert "insert_key = false" in text
    assert "insecure_private_key" not in text


def test_only_the_controller_has_a_state_disk_and_destroy_keeps_it():
    text = _render()
    ctl = text[text.index('"demo-controller-1"'):]
    assert text.count("lv.storage ") == 1 and 'lv.storage :file, path: "demo-state-1764600000.qcow2"' in ctl
    assert 'allow_existing: true, serial: "slurmlab-state"' in ctl  # vagrant destroy leaves it; the guest finds it


def test_kvm_driver_has_no_emulator_wrapper():
    text = _render(driver="kvm", emulator_path=None)
    assert 'lv.driver = "kvm"' in text and "emulator_path" not in text


def test_public_key_with_comma_is_refused():
    with pytest.raises(ValueError):
        _render(public_key="ssh-ed25519 AAA,bad")


def test_mac_is_stable_and_distinct():
    assert mac_for("a", "a-x-1") == mac_for("a", "a-x-1")
    assert mac_for("a", "a-x-1") != mac_for("a", "a-x-2")
    assert mac_for("a", "a-x-1").startswith("52:54:00:")


def test_pick_subnet_skips_used():
    used = {"10.213.1.0/24", "10.213.2.0/24"}
    assert network.pick_subnet(used, 0) == ipaddress.ip_network("10.213.3.0/24")
    assert network.pick_subnet(set(), 5) == ipaddress.ip_network("10.213.6.0/24")


def test_address_for_ordinals():
    net = ClusterNet("n", "b", "10.213.9.0/24", "10.213.9.1")
    assert network.address_for(net, 0) == "10.213.9.10"
    with pytest.raises(ValueError):
        network.address_for(net, 500)


def test_vagrant_keeps_the_network_it_did_not_create():
    assert "lv.management_network_keep = true" in _render()


def test_destroying_one_node_never_takes_the_cluster_network(tmp_path, monkeypatch):
    """vagrant-libvirt undefines every network listed in the machine's created_networks on destroy;
    the provider drops that list first, also for machines made by an older Vagrantfile."""
    from lab.providers import vagrant

    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path))
    state = tmp_path / "clusters" / "demo" / ".vagrant" / "machines"
    for n in ("demo-compute-1", "demo-compute-2"):
        (state / n / "libvirt").mkdir(parents=True)
        (state / n / "libvirt" / "created_networks").write_text("223c984f-bd68-4f71-b894-d0e1f0a9a8b7\n")
    calls = []
    prov = vagrant.VagrantProvider()
    monkeypatch.setattr(prov, "_vagrant", lambda cluster, args, logname, timeout=0: calls.append(
        (args, (state / args[-1] / "libvirt" / "created_networks").exists())))
    monkeypatch.setattr(vagrant, "_purge_domain", lambda cluster, name: None)
    monkeypatch.setattr(prov.warm, "is_fork", lambda cluster, name: False)  # not the machine's libvirt (a live "demo")
    prov.remove("demo", ["demo-compute-2"])
    assert calls == [(["destroy", "-f", "demo-compute-2"], False)]
    assert (state / "demo-compute-1" / "libvirt" / "created_networks").exists()  # another node's file untouched


class _FakeProc:
    """A process that exits with `rc` after `after` waits (None: never)."""

    def __init__(self, after, rc=0):
        self.after, self.rc, self.returncode, self.pid = after, rc, None, 0

    def wait(self, timeout=None):
        import subprocess

        if self.after is not None:
            self.after -= 1
            if self.after <= 0:
                self.returncode = self.rc
                return self.rc
        raise subprocess.TimeoutExpired("vagrant", timeout)


def test_wait_or_ready_returns_when_the_vm_answers_before_vagrant_returns():
    from lab.providers.watch import wait_or_ready

    answers = iter([False, False, True])
    clock = iter(range(100)).__next__
    assert wait_or_ready(_FakeProc(None), 600, lambda: next(answers), clock=clock) is None
    # vagrant ends first: its exit code counts (a failure is a failure even if ssh would answer)
    assert wait_or_ready(_FakeProc(2, rc=1), 600, lambda: False, clock=iter(range(100)).__next__) == 1
    # no readiness check: plain wait
    assert wait_or_ready(_FakeProc(1, rc=0), 600, None, clock=iter(range(100)).__next__) == 0


def test_wait_or_ready_ends_a_vagrant_that_takes_too_long(monkeypatch):
    from lab.providers import watch

    ended = []
    monkeypatch.setattr(watch, "end_group", lambda p: ended.append(p))
    proc = _FakeProc(None)
    assert watch.wait_or_ready(proc, 5, lambda: False, clock=iter(range(0, 100, 2)).__next__) == -1
    assert ended == [proc]


def test_a_vm_stopped_under_its_boot_ends_vagrant_up_at_once(monkeypatch):
    """bench/faults.py vm_killed_while_booting: the domain destroyed while `vagrant up` waited for its
    IP address kept the node launching until vagrant's boot_timeout (600 s). The watcher ends vagrant
    and raises a transient LaunchError as soon as the domain, seen running, is shut off."""
    import pytest

    from lab.providers import watch
    from lab.providers.base import LaunchError

    ended = []
    monkeypatch.setattr(watch, "end_group", lambda p: ended.append(p))
    states = iter([None, "missing", "running", "running", "shutoff"])  # libvirt away, defining, booting, killed
    abort = watch.stopped_while_booting("demo-compute-3", state=lambda name: next(states))
    proc = _FakeProc(None)
    with pytest.raises(LaunchError) as e:
        watch.wait_or_ready(proc, 600, lambda: False, clock=iter(range(100)).__next__, abort=abort)
    assert e.value.transient and "demo-compute-3: the VM stopped while it booted (domain shutoff)" in str(e.value)
    assert ended == [proc]
    # never seen running: a domain still being defined (missing, shut off) is no reason to stop
    quiet = watch.stopped_while_booting("x", state=lambda name: "shutoff")
    assert [quiet() for _ in range(3)] == [None, None, None]


def test_a_node_on_another_box_gets_its_own():
    """UpdateClusterSoftware: a node replaced with another box names it in its own block only."""
    machines = [
        MachineSpec("demo-compute-1", "compute", 1, 768, mac_for("demo", "demo-compute-1"), "10.213.7.12", "Compute",
                    "slurmlab/trixie-slurm-next"),
        MachineSpec("demo-controller-1", "controller", 1, 768, mac_for("demo", "demo-controller-1"), "10.213.7.10",
                    "Controller"),
    ]
    text = _render(machines=machines)
    compute, controller = text.split('config.vm.define "demo-compute-1"')[1].split('config.vm.define "demo-controller-1"')
    assert 'm.vm.box = "slurmlab/trixie-slurm-next"' in compute
    assert "m.vm.box" not in controller and text.count('config.vm.box = "slurmlab/trixie-slurm"') == 1


def test_image_ids_name_boxes(monkeypatch):
    from lab import box
    from lab.box import images
    from lab.errors import NotFound, UsageError

    iid = images.image_id("slurmlab/trixie-slurm-next", "0123456789abcdef")
    assert iid.startswith("ami-") and len(iid) == 4 + 17 and iid != images.image_id("slurmlab/trixie-slurm", "0123456789abcdef")
    assert images.resolve(iid, lookup=lambda: {iid: "slurmlab/trixie-slurm-next"}) == "slurmlab/trixie-slurm-next"
    with pytest.raises(UsageError) as e:
        images.resolve("ami-00000000", lookup=lambda: {iid: "slurmlab/trixie-slurm-next"})
    assert "names no box of this lab" in str(e.value) and iid in str(e.value) and e.value.fix.startswith("slurmlab box list")
    monkeypatch.setattr(box, "is_current", lambda name=box.DEFAULT_BOX: False)
    with pytest.raises(NotFound) as nf:
        images.resolve("default")
    assert nf.value.fix == "slurmlab box build"
    monkeypatch.setattr(box, "is_current", lambda name=box.DEFAULT_BOX: True)
    assert images.resolve(None) == box.DEFAULT_BOX


def test_a_vagrant_still_running_on_a_machine_is_found(tmp_path):
    """Found by CI: a background `vagrant up` that never ended held vagrant's lock on its machine, so
    the destroy and up of a software update failed for ever. `_vagrant` ends such a process first."""
    import subprocess
    import time

    from lab.osutil import kill_group
    from lab.providers.watch import stale_vagrants

    fake = tmp_path / "vagrant"
    fake.write_text("#!/bin/sh\nsleep 300\n")
    fake.chmod(0o755)
    p = subprocess.Popen(["/bin/sh", str(fake), "up", "demo-compute-1"], cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not stale_vagrants(tmp_path, "demo-compute-1") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stale_vagrants(tmp_path, "demo-compute-1") == [p.pid]
        assert stale_vagrants(tmp_path, "demo-compute-2") == []  # another machine
        assert stale_vagrants(tmp_path / "elsewhere", "demo-compute-1") == []  # another cluster's folder
    finally:
        kill_group(p.pid, grace=2, wait=p)


class _Vol:
    def __init__(self, name, gone):
        self._name, self._gone = name, gone

    def name(self):
        return self._name

    def delete(self, flags):
        self._gone.append(self._name)


def _fake_libvirt(monkeypatch, volumes, domains):
    import libvirt

    from lab.host import libvirtd

    gone = []

    class Pool:
        def refresh(self, flags):
            pass

        def listAllVolumes(self):
            return [_Vol(v, gone) for v in volumes]

    class Dom:
        def __init__(self, xml):
            self.xml = xml

        def XMLDesc(self, flags):
            return self.xml

    class Conn:
        def storagePoolLookupByName(self, name):
            return Pool()

        def lookupByName(self, name):
            if name not in domains:
                raise libvirt.libvirtError("no domain")
            return Dom(domains[name])

        def close(self):
            pass

    monkeypatch.setattr(libvirtd, "connect", Conn)
    return gone


def test_a_clusters_state_disk_goes_with_it_and_no_other(monkeypatch):
    from lab.providers import state_disk

    gone = _fake_libvirt(monkeypatch, ["demo-state-1764600000.qcow2", "demo-b-state-1764600000.qcow2",
                                       "demo-controller-1.img", "demo-state-x.qcow2"], {})
    assert state_disk.delete_volumes("demo") == ["volume demo-state-1764600000.qcow2"]
    assert gone == ["demo-state-1764600000.qcow2"]


def test_keeps_state_asks_libvirt_for_the_disk_with_the_serial(monkeypatch):
    from lab.providers import state_disk

    with_disk = ("<domain><devices><disk device='disk'><source file='/p/c.img'/></disk><disk device='disk'>"
                 "<source file='/p/demo-state-1.qcow2'/><serial>slurmlab-state</serial></disk></devices></domain>")
    _fake_libvirt(monkeypatch, [], {"new-controller-1": with_disk,
                                    "old-controller-1": "<domain><devices><disk device='disk'/></devices></domain>"})
    assert state_disk.attached("demo", "new-controller-1") and not state_disk.attached("demo", "old-controller-1")
    assert not state_disk.attached("demo", "gone-controller-1")
