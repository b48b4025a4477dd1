"""Remote hosts (qemu+ssh): how the lab reaches them and their VMs, and what their qemu is told to read
(docs/adr/0016-remote-hosts.md)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from lab.host import registry, sshhost
from lab.host.registry import Host
from lab.providers import hostside, reach, state_disk
from lab.providers.base import LaunchError
from tests.unit.test_vagrantfile import _render

CAPS = """<capabilities><host><secmodel><model>none</model><doi>0</doi></secmodel>
<secmodel><model>dac</model><doi>0</doi><baselabel type='kvm'>+64055:+994</baselabel>
<baselabel type='qemu'>+64055:+994</baselabel></secmodel></host></capabilities>"""
CAPS_APPARMOR = CAPS.replace("<model>none</model>", "<model>apparmor</model>")


def _remote(tmp_path, netns="slurmlab", **kw) -> Host:
    key = tmp_path / "id_ed25519"
    key.write_text("k")
    return Host("far", f"qemu+ssh://root@10.212.1.2/system?keyfile={key}", netns, pool="slurmlab", **kw)


def test_a_qemu_ssh_uri_makes_a_remote_host_and_others_do_not(tmp_path):
    h = _remote(tmp_path)
    assert h.remote and h.ssh == ("root", "10.212.1.2", str(tmp_path / "id_ed25519"))
    assert Host("b", "qemu+ssh://lab-b/system").ssh == ("root", "lab-b", None)
    for uri in ("qemu:///system", "qemu+unix:///system?socket=/x/sock"):
        assert not Host("b", uri).remote


def test_the_host_is_reached_in_its_namespace_with_its_key_known_hosts_and_a_master_of_its_own(lab_home, tmp_path):
    h = _remote(tmp_path)
    text = Path(sshhost.to_host(h)).read_text()
    assert text.startswith("#!/bin/sh\nexec ip netns exec slurmlab /usr/bin/ssh ") and text.rstrip().endswith('"$@"')
    args = shlex.split(text.splitlines()[1])
    opts = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-o")
    assert opts["StrictHostKeyChecking"] == "yes" and opts["BatchMode"] == "yes"
    assert opts["UserKnownHostsFile"].split()[0] == str(lab_home / "hosts" / "far" / "known_hosts")
    assert opts["ControlPath"] == sshhost.control_path("far") and opts["ControlMaster"] == "auto"
    assert args[args.index("-i") + 1] == str(tmp_path / "id_ed25519")
    # another host, or the same host name of another lab home: another master
    assert sshhost.control_path("far") != sshhost.control_path("far2")
    assert len(sshhost.control_path("a" * 20)) < 100
    # a real machine reached from this namespace: no `ip netns exec`
    assert "netns" not in Path(sshhost.to_host(_remote(tmp_path, netns=None))).read_text()


def test_a_remote_hosts_vms_are_reached_through_the_host(lab_home, tmp_path):
    h = _remote(tmp_path)
    exe = reach.ssh_exe(h)
    assert Path(exe).name == "ssh-via-far"
    args = shlex.split(Path(exe).read_text().splitlines()[1])
    assert args[:2] == ["exec", "/usr/bin/ssh"] and args[2] == "-o"
    assert args[3] == f"ProxyCommand={lab_home}/bin/ssh-to-far -W %h:%p root@10.212.1.2"
    assert sshhost.proxy_command(h) == f"{lab_home}/bin/ssh-to-far -W %h:%p root@10.212.1.2"
    # a host on this machine keeps its namespace's plain ssh
    assert Path(reach.ssh_exe(Host("h2", "qemu+unix:///system?socket=/s", "slurmlab-h2"))).name == "ssh-slurmlab-h2"


def test_libvirt_rides_the_hosts_ssh(lab_home, tmp_path):
    uri = sshhost.libvirt_uri(_remote(tmp_path))
    assert uri.startswith("qemu+ssh://root@10.212.1.2/system?")
    assert f"keyfile={tmp_path}/id_ed25519" in uri and f"command={lab_home}/bin/ssh-to-far" in uri and "no_tty=1" in uri
    again = sshhost.libvirt_uri(Host("far", uri, "slurmlab"))  # never doubled
    assert again.count("command=") == 1 and again.count("no_tty") == 1


def test_hosts_file_keeps_a_remotes_driver(lab_home, tmp_path):
    registry.add(_remote(tmp_path, driver="qemu"))
    got = registry.get("far")
    assert got.remote and got.driver == "qemu" and got.netns == "slurmlab"


class FakeLibvirtError(Exception):
    pass


class FakeStream:
    def __init__(self, sent):
        self.sent = sent

    def send(self, data):
        self.sent.append(data)
        return len(data)

    def finish(self):
        pass


class FakeVol:
    def __init__(self, xml, sent, folder):
        self.xml, self.sent, self.folder = xml, sent, folder

    def upload(self, st, offset, length, flags):
        assert offset == 0

    def path(self):
        return f"{self.folder}/" + self.xml.split("<name>")[1].split("<")[0]


class FakePool:
    def __init__(self, sent):
        self.sent, self.created, self.existing = sent, [], {}
        self.target = "/var/lib/libvirt/images/slurmlab"

    def XMLDesc(self, flags):
        return f"<pool type='dir'><name>slurmlab</name><target><path>{self.target}</path></target></pool>"

    def refresh(self, flags):
        pass

    def storageVolLookupByName(self, name):
        if name not in self.existing:
            raise FakeLibvirtError(name)
        return self.existing[name]

    def createXML(self, xml, flags):
        self.created.append(xml)
        return FakeVol(xml, self.sent, self.target)


class FakeConn:
    def __init__(self, caps=CAPS):
        self.caps, self.sent = caps, []
        self.pool = FakePool(self.sent)

    def getCapabilities(self):
        return self.caps

    def storagePoolLookupByName(self, name):
        return self.pool

    def newStream(self, flags):
        return FakeStream(self.sent)

    def close(self):
        pass


@pytest.fixture
def fake_libvirt(monkeypatch):
    import libvirt

    monkeypatch.setattr(libvirt, "libvirtError", FakeLibvirtError)
    conn = FakeConn()
    monkeypatch.setattr(Host, "connect", lambda self: conn)
    return conn


def test_the_munge_key_goes_to_the_hosts_pool_readable_by_its_qemu_only(lab_home, tmp_path, fake_libvirt):
    key = tmp_path / "munge.key"
    key.write_bytes(b"\x01" * 1024)
    on = hostside.inputs(_remote(tmp_path, driver="qemu"), "far", key)
    assert on.munge_key_file == "/var/lib/libvirt/images/slurmlab/far-munge.key"
    assert fake_libvirt.sent == [b"\x01" * 1024]
    xml = fake_libvirt.pool.created[0]
    assert "<capacity unit='bytes'>1024</capacity>" in xml and "<mode>0400</mode>" in xml
    assert "<owner>64055</owner>" in xml and "<group>994</group>" in xml  # the host's qemu user, not this machine's
    assert on.emulator_path is None and "tcg><tb-cache unit='MiB'>128</tb-cache></tcg><pae" in on.features
    # removed with the cluster's volumes, and never another cluster's
    assert state_disk.is_cluster_volume("far", "far-munge.key") and not state_disk.is_cluster_volume("fa", "far-munge.key")


def test_a_host_that_confines_qemu_gets_no_uploaded_key(lab_home, tmp_path, fake_libvirt):
    fake_libvirt.caps = CAPS_APPARMOR
    key = tmp_path / "munge.key"
    key.write_bytes(b"k" * 1024)
    assert hostside.inputs(_remote(tmp_path, driver="qemu"), "far", key).munge_key_file is None
    assert fake_libvirt.sent == []


def test_a_remote_hosts_vagrantfile_names_no_path_of_this_machine(lab_home, tmp_path, fake_libvirt):
    """What a remote host's qemu would be told to read must be that host's: the guard finds a path of this
    machine anywhere but the lines Vagrant itself reads here, and the remote inputs have none."""
    key = lab_home / "clusters" / "far" / "secrets" / "munge.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * 1024)
    host = _remote(tmp_path, driver="qemu")
    on = hostside.inputs(host, "far", key)
    text = _render(driver=on.driver, emulator_path=on.emulator_path, munge_key_file=on.munge_key_file, uri=on.uri,
                   features=on.features, proxy_command=on.proxy_command, private_key=str(lab_home / "k"))
    assert "lv.proxy_command" in text and str(lab_home) in text  # client-side lines do name this machine's files
    assert hostside.foreign_paths(text) == []
    hostside.refuse_foreign(host, text)
    assert "<tcg><tb-cache" not in text and "tcg><tb-cache unit='MiB'>128</tb-cache></tcg><pae" in text
    # what a local host gets (the TCG wrapper, the credentials copy) is caught for a remote
    from lab.host import libvirtd
    from lab.providers.vagrantfile import credentials_dir

    for bad in (dict(emulator_path=str(hostside.paths.libvirt_dir() / libvirtd.QEMU_WRAPPER)),
                dict(munge_key_file=str(credentials_dir("far") / "munge.key"))):
        text = _render(**{**dict(driver="qemu", emulator_path=None, munge_key_file=on.munge_key_file, uri=on.uri,
                                 proxy_command=on.proxy_command), **bad})
        assert hostside.foreign_paths(text), bad
        with pytest.raises(LaunchError) as e:
            hostside.refuse_foreign(host, text)
        assert e.value.permanent and "far" in str(e.value)


def test_a_quote_in_a_proxy_command_is_refused():
    with pytest.raises(ValueError):
        _render(proxy_command='ssh "x" -W %h:%p')


def test_a_remote_pool_at_the_same_path_as_this_machines_is_the_remotes(lab_home, tmp_path, fake_libvirt):
    """A remote whose pool folder has the name of this machine's pool folder holds the key there: that is no
    path of this machine (the check leaves the remote's pool folder out), and anything else still is."""
    from lab import paths

    fake_libvirt.pool.target = str(paths.pool_dir())
    key = tmp_path / "munge.key"
    key.write_bytes(b"k" * 1024)
    host = _remote(tmp_path, driver="qemu")
    on = hostside.inputs(host, "far", key)
    assert on.pool_path == str(paths.pool_dir()) and on.munge_key_file.startswith(str(paths.pool_dir()))
    text = _render(emulator_path=None, munge_key_file=on.munge_key_file, uri=on.uri, proxy_command=on.proxy_command)
    assert hostside.foreign_paths(text) and hostside.foreign_paths(text, theirs=on.pool_path) == []
    hostside.refuse_foreign(host, text, on.pool_path)
    bad = _render(munge_key_file=on.munge_key_file, uri=on.uri)  # the local TCG wrapper is still this machine's
    assert hostside.foreign_paths(bad, theirs=on.pool_path)


class _KeptVol:
    """A key volume already on the host: what a download of it gives."""

    def __init__(self, data, deleted):
        self.data, self.deleted = data, deleted

    def info(self):
        return [0, len(self.data), len(self.data)]

    def download(self, st, offset, length, flags):
        st.data = self.data

    def path(self):
        return "/var/lib/libvirt/images/slurmlab/far-munge.key"

    def delete(self, flags):
        self.deleted.append(True)


def test_the_key_is_uploaded_once_and_replaced_when_it_differs(lab_home, tmp_path, fake_libvirt, monkeypatch):
    class Stream(FakeStream):
        def recv(self, n):
            out, self.data = getattr(self, "data", b""), b""
            return out

    monkeypatch.setattr(FakeConn, "newStream", lambda self, flags: Stream(self.sent))
    key = tmp_path / "munge.key"
    key.write_bytes(b"a" * 1024)
    deleted: list = []
    fake_libvirt.pool.existing["far-munge.key"] = _KeptVol(b"a" * 1024, deleted)
    host = _remote(tmp_path, driver="qemu")
    assert hostside.inputs(host, "far", key).munge_key_file.endswith("/far-munge.key")
    assert fake_libvirt.sent == [] and fake_libvirt.pool.created == [] and deleted == []  # the same key: kept
    fake_libvirt.pool.existing["far-munge.key"] = _KeptVol(b"b" * 1024, deleted)  # another cluster's, by that name
    hostside.inputs(host, "far", key)
    assert deleted == [True] and fake_libvirt.sent == [b"a" * 1024] and len(fake_libvirt.pool.created) == 1


@pytest.mark.parametrize("says,problem", [
    ("printf 'SSH-2.0-OpenSSH_9.2\\r\\n'", ""),
    ("echo 'Stdio forwarding request failed: Session open refused by peer' >&2; exit 255", "Session open refused"),
])
def test_a_host_that_does_not_forward_is_named(lab_home, tmp_path, monkeypatch, says, problem):
    """Its VMs are reached by `ssh -W` through it: the probe asks it to forward to its own sshd."""
    fake = tmp_path / "ssh-to-far"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\n{says}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sshhost, "to_host", lambda host: str(fake))
    got = sshhost.forwards(_remote(tmp_path))
    assert (problem in got) if problem else got == ""
    assert (tmp_path / "args").read_text().split() == ["-W", "10.212.1.2:22", "root@10.212.1.2"]


def test_kept_connections_to_nodes_fit_a_socket_path_and_are_apart_per_host(tmp_path, monkeypatch):
    """A long lab home (pytest's) and a remote's wrapper name: the master's socket path, with the 17 bytes ssh
    adds while setting it up, fits in 108; clusters on two hosts never share a folder."""
    from lab.configure import slurmstate
    from lab.providers import kept

    home = tmp_path / ("h" * 60) / "slurmlab-home0"
    monkeypatch.setenv("SLURMLAB_HOME", str(home))
    ways = {"far": str(home / "bin" / "ssh-via-a-remote-host-name"), "class": str(home / "bin" / "ssh")}
    monkeypatch.setattr(kept, "cluster_ssh_exe", lambda cluster: ways[cluster])
    far, local = kept.control_folder("far"), kept.control_folder("class")
    assert far != local and far.parent == local.parent == Path("/tmp")
    assert len(f"{far}/{'c' * 40}.{'r' * 16}") < 108
    assert oct(far.stat().st_mode & 0o777) == "0o700"
    opts = slurmstate._shared_connection("far")
    assert f"ControlPath={far}/%C" in opts
    far.rmdir(), local.rmdir()
