"""lab.box: inputs hash, parsers on recorded output, rendered files, the fast paths of build().

Fast, no root, no network, no real vagrant: subprocesses are faked where a path would run one.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from lab import box
from lab.box import cache, image, install, preflight
from lab.box import recipe as rc
from lab.box import teardown as td
from lab.box import vagrant as vg
from lab.errors import HostError

# `vagrant box list --machine-readable`, recorded from Vagrant 2.3.4 (Debian 12).
BOX_LIST_TWO = """\
1795988990,,ui,info,other                 (libvirt%!(VAGRANT_COMMA) 0)
1795988990,,box-name,other
1795988990,,box-provider,libvirt
1795988990,,box-version,0
1795988990,,ui,info,slurmlab/trixie-slurm (libvirt%!(VAGRANT_COMMA) 0)
1795988990,,box-name,slurmlab/trixie-slurm
1795988990,,box-provider,libvirt
1795988990,,box-version,0
"""
BOX_LIST_EMPTY = "1795988988,,ui,warn,There are no installed boxes! Use `vagrant box add` to add some.\n"
# Newer Vagrant (2.4) adds an architecture line per box; the parser must not trip over it.
BOX_LIST_ARCH = """\
1700000000,,ui,info,generic/debian12 (libvirt%!(VAGRANT_COMMA) 4.3.12%!(VAGRANT_COMMA) (amd64))
1700000000,,box-name,generic/debian12
1700000000,,box-provider,libvirt
1700000000,,box-architecture,amd64
1700000000,,box-version,4.3.12
"""
# `losetup --json --list`, recorded (util-linux 2.38).
LOSETUP_JSON = """{
   "loopdevices": [
      {"name": "/dev/loop0", "sizelimit": 0, "offset": 1048576, "autoclear": false, "ro": false,
       "back-file": "/c/boxes/.work-abc/disk.raw", "dio": false, "log-sec": 512},
      {"name": "/dev/loop1", "sizelimit": 0, "offset": 0, "autoclear": true, "ro": false,
       "back-file": "/c/boxes/.work-old/disk.raw (deleted)", "dio": false, "log-sec": 512},
      {"name": "/dev/loop2", "sizelimit": 0, "offset": 0, "autoclear": false, "ro": false,
       "back-file": "/var/lib/other/disk.img", "dio": false, "log-sec": 512}
   ]
}"""


# ------------------------------------------------------------------ inputs hash


def test_inputs_hash_is_stable():
    r = rc.Recipe()
    assert rc.inputs_hash(r, "script") == rc.inputs_hash(rc.Recipe(), "script")
    assert len(rc.inputs_hash(r, "script")) == 16


def test_inputs_hash_changes_with_the_package_list():
    r = rc.Recipe()
    more = dataclasses.replace(r, packages=(*r.packages, "vim-tiny"))
    fewer = dataclasses.replace(r, packages=r.packages[1:])
    hashes = {rc.inputs_hash(x, "script") for x in (r, more, fewer)}
    assert len(hashes) == 3


def test_inputs_hash_ignores_package_order_and_duplicates():
    r = rc.Recipe()
    shuffled = dataclasses.replace(r, packages=tuple(reversed(r.packages)) + r.packages[:2])
    assert rc.inputs_hash(r, "s") == rc.inputs_hash(shuffled, "s")


@pytest.mark.parametrize(
    "change",
    [
        {"suite": "forky"},
        {"mirror": "http://mirror.example/debian"},
        {"variant": "apt"},
        {"disk_gib": 16},
        {"kernel_args": ("rw", "console=ttyS0")},
        {"qcow2_options": ()},
        {"revision": rc.RECIPE_REVISION + 1},
    ],
)
def test_inputs_hash_changes_with_each_input(change):
    assert rc.inputs_hash(rc.Recipe(), "s") != rc.inputs_hash(dataclasses.replace(rc.Recipe(), **change), "s")


def test_inputs_hash_covers_the_customize_script():
    assert rc.inputs_hash(rc.Recipe(), "echo a\n") != rc.inputs_hash(rc.Recipe(), "echo b\n")
    # the default reads the script shipped in the package
    assert rc.inputs_hash(rc.Recipe()) == rc.inputs_hash(rc.Recipe(), rc.CUSTOMIZE_SCRIPT.read_text())


def test_mirror_from_environment(monkeypatch):
    monkeypatch.delenv(rc.MIRROR_ENV, raising=False)
    default = box.inputs_hash()
    assert rc.default_recipe().mirror == rc.DEFAULT_MIRROR
    monkeypatch.setenv(rc.MIRROR_ENV, "http://apt-cache.local:3142/debian/")
    assert rc.default_recipe().mirror == "http://apt-cache.local:3142/debian"
    assert box.inputs_hash() != default


def test_recipe_has_what_nodes_need():
    need = {
        "linux-image-cloud-amd64",
        "openssh-server",
        "python3",
        "sudo",
        "munge",
        "slurmctld",
        "slurmd",
        "slurm-client",
        "sackd",
        "libnss-myhostname",
        "systemd-sysv",
        "udev",
    }
    assert need <= set(rc.PACKAGES)
    assert rc.Recipe().suite == "trixie"


# ------------------------------------------------------------------ rendered files


def test_extlinux_conf():
    text = rc.render_extlinux_conf(
        "vmlinuz-6.12.1-cloud-amd64", "initrd.img-6.12.1-cloud-amd64", "1234-abcd", rc.Recipe().kernel_args
    )
    assert text == (
        "# slurmlab: generated at box build time\n"
        "DEFAULT slurmlab\n"
        "PROMPT 0\n"
        "TIMEOUT 0\n"
        "\n"
        "LABEL slurmlab\n"
        "  LINUX /boot/vmlinuz-6.12.1-cloud-amd64\n"
        "  INITRD /boot/initrd.img-6.12.1-cloud-amd64\n"
        "  APPEND root=UUID=1234-abcd rw console=ttyS0 net.ifnames=0\n"
    )


def test_metadata_json():
    assert json.loads(rc.render_metadata(8)) == {"provider": "libvirt", "format": "qcow2", "virtual_size": 8}


def test_fstab_and_vagrantfile():
    assert "UUID=u-1 / ext4 errors=remount-ro 0 1\n" in rc.render_fstab("u-1")
    vf = rc.render_vagrantfile()
    assert 'libvirt.driver = "qemu"' in vf and vf.startswith("#") and 'Vagrant.configure("2")' in vf


def test_marker():
    doc = json.loads(
        rc.render_marker(
            name="a/b",
            inputs_hash="h",
            built_at="2025-01-01T00:00:00Z",
            recipe=rc.Recipe(),
            slurm_version="24.11.5",
            kernel="6.12.1-cloud-amd64",
        )
    )
    assert doc["name"] == "a/b" and doc["inputs_hash"] == "h" and doc["debian_suite"] == "trixie"
    assert doc["slurm_version"] == "24.11.5" and doc["built_at"] == "2025-01-01T00:00:00Z"


def test_pick_kernel_takes_the_newest_with_an_initrd():
    files = [
        "config-6.12.9-cloud-amd64",
        "vmlinuz-6.12.9-cloud-amd64",
        "initrd.img-6.12.9-cloud-amd64",
        "vmlinuz-6.12.10-cloud-amd64",
        "initrd.img-6.12.10-cloud-amd64",
        "vmlinuz-6.13.0-cloud-amd64",
        "System.map-6.12.9-cloud-amd64",
        "extlinux",
    ]
    assert rc.pick_kernel(files) == ("vmlinuz-6.12.10-cloud-amd64", "initrd.img-6.12.10-cloud-amd64")
    with pytest.raises(ValueError):
        rc.pick_kernel(["vmlinuz-6.12.9-cloud-amd64"])


@pytest.mark.parametrize(
    "out,want",
    [("slurm-wlm 24.11.5\n", "24.11.5"), ("slurm 24.11.0\n", "24.11.0"), ("nothing", None)],
)
def test_parse_slurm_version(out, want):
    assert rc.parse_slurm_version(out) == want


def test_the_box_carries_the_observability_extension_disabled(tmp_path):
    """Prometheus and its node exporter are in the image (the nodes have no route out) and disabled:
    no node starts them at boot, roles/observability does when the extension is installed."""
    assert {"prometheus", "prometheus-node-exporter"} <= set(rc.PACKAGES)
    text = rc.CUSTOMIZE_SCRIPT.read_text()
    start = text.index('say "observability:')
    block = text[start : text.index('\nsay "', start + 1)]
    (tmp_path / "block.sh").write_text(
        f'set -eu\nR={tmp_path}/root\nsay() {{ :; }}\nin_root() {{ echo "$*" >> {tmp_path}/calls; }}\n{block}\n')
    (tmp_path / "root/var/lib/prometheus/metrics2").mkdir(parents=True)
    subprocess.run(["sh", str(tmp_path / "block.sh")], check=True)
    assert (tmp_path / "calls").read_text().splitlines() == [
        "systemctl disable prometheus.service", "systemctl disable prometheus-node-exporter.service"]
    assert not (tmp_path / "root/var/lib/prometheus/metrics2").exists()


def test_customize_script_is_valid_sh():
    subprocess.run(["sh", "-n", str(rc.CUSTOMIZE_SCRIPT)], check=True)
    text = rc.CUSTOMIZE_SCRIPT.read_text()
    assert "ImportCredential=slurmlab.authorized_keys" in text
    assert 'rm -f "$R"/etc/ssh/ssh_host_*' in text
    assert "munge.key" in text and "insecure" not in text


def _embedded(name: str) -> str:
    """The text of a file that customize.sh writes with `cat > "$R/..." <<'EOF'`."""
    text = rc.CUSTOMIZE_SCRIPT.read_text()
    start = text.index(f"cat > \"$R/{name}\" <<'EOF'\n") + len(f"cat > \"$R/{name}\" <<'EOF'\n")
    return text[start : text.index("\nEOF\n", start) + 1]


def test_authorized_keys_script(tmp_path):
    script = (
        _embedded("usr/local/lib/slurmlab/authorized-keys")
        .replace("/var/lib/vagrant", f"{tmp_path}/var/lib/vagrant")
        .replace("/root/.ssh", f"{tmp_path}/root/.ssh")
        .replace("chown vagrant:vagrant", ": chown")
    )
    (tmp_path / "ak.sh").write_text(script)
    creds = tmp_path / "creds"
    creds.mkdir()

    def run(content: str | None):
        if content is not None:
            (creds / "slurmlab.authorized_keys").write_text(content)
        env = {"PATH": "/usr/bin:/bin", "CREDENTIALS_DIRECTORY": str(creds)}
        return subprocess.run(["sh", str(tmp_path / "ak.sh")], env=env, capture_output=True, text=True, check=False)

    r = run(None)
    assert r.returncode == 0 and "no slurmlab.authorized_keys credential" in r.stdout
    assert not (tmp_path / "root/.ssh/authorized_keys").exists()

    r = run("ssh-ed25519 AAAA one\n\n# comment\nssh-ed25519 BBBB two")  # no final newline
    assert r.returncode == 0 and "authorized_keys installed (2 keys)" in r.stdout
    for home in ("var/lib/vagrant", "root"):
        f = tmp_path / home / ".ssh/authorized_keys"
        assert f.read_text() == "ssh-ed25519 AAAA one\nssh-ed25519 BBBB two\n"
        assert f.stat().st_mode & 0o777 == 0o600 and f.parent.stat().st_mode & 0o777 == 0o700

    r = run("ssh-ed25519 CCCC three\n")
    assert "(1 key)" in r.stdout
    assert (tmp_path / "root/.ssh/authorized_keys").read_text() == "ssh-ed25519 CCCC three\n"

    r = run("# nothing\n")
    assert r.returncode == 1 and "no key line" in r.stderr
    assert (tmp_path / "root/.ssh/authorized_keys").read_text() == "ssh-ed25519 CCCC three\n"


def test_units_written_by_customize():
    unit = _embedded("etc/systemd/system/slurmlab-authorized-keys.service")
    assert "ImportCredential=slurmlab.authorized_keys" in unit and "Before=ssh.service" in unit
    dropin = _embedded("etc/systemd/system/ssh.service.d/10-slurmlab-host-keys.conf")
    # the reset must come first, then key generation, then the config test
    assert dropin.index("ExecStartPre=\n") < dropin.index("ssh-host-keys") < dropin.index("sshd -t")
    keys = _embedded("usr/local/lib/slurmlab/ssh-host-keys")
    assert "for t in ed25519 ecdsa" in keys and "rsa" not in keys
    sshd = _embedded("etc/ssh/sshd_config.d/10-slurmlab.conf")
    for line in ("PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "PermitRootLogin prohibit-password", "UseDNS no"):  # fmt: skip
        assert line in sshd


# ------------------------------------------------------------------ parsers


def test_parse_box_list_recorded():
    assert vg.parse_box_list(BOX_LIST_TWO) == [
        vg.VagrantBox("other", "libvirt", "0"),
        vg.VagrantBox("slurmlab/trixie-slurm", "libvirt", "0"),
    ]


def test_parse_box_list_empty_and_architecture():
    assert vg.parse_box_list(BOX_LIST_EMPTY) == []
    assert vg.parse_box_list("") == []
    assert vg.parse_box_list(BOX_LIST_ARCH) == [vg.VagrantBox("generic/debian12", "libvirt", "4.3.12")]


def test_parse_losetup_json():
    assert td.parse_losetup_json(LOSETUP_JSON, Path("/c/boxes/.work-abc")) == ["/dev/loop0"]
    assert td.parse_losetup_json(LOSETUP_JSON, Path("/c/boxes/.work-old")) == ["/dev/loop1"]
    assert td.parse_losetup_json(LOSETUP_JSON, Path("/c/boxes/.work-ab")) == []
    assert td.parse_losetup_json("", Path("/x")) == []


def test_parse_mountinfo_deepest_first_and_escapes():
    text = (
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "90 27 7:0 / /c/.work-1/mnt rw - ext4 /dev/loop0 rw\n"
        "91 90 0:21 / /c/.work-1/mnt/proc rw - proc proc rw\n"
        "92 27 0:5 / /c/.work-10/x rw - tmpfs tmpfs rw\n"
        "93 27 0:5 / /c/a\\040b/m rw - tmpfs tmpfs rw\n"
    )
    assert td.parse_mountinfo(text, Path("/c/.work-1")) == ["/c/.work-1/mnt/proc", "/c/.work-1/mnt"]
    assert td.parse_mountinfo(text, Path("/c/a b")) == ["/c/a b/m"]


# ------------------------------------------------------------------ vagrant box directory, build() paths


def _add_fake_box(home: Path, name: str, h: str | None, complete: bool = True) -> Path:
    d = home / "boxes" / vg.escape_name(name) / "0" / "libvirt"
    d.mkdir(parents=True)
    (d / "metadata.json").write_text(rc.render_metadata(8))
    if complete:
        (d / "box.img").write_bytes(b"qcow")
    if h:
        (d / "slurmlab.json").write_text(json.dumps({"inputs_hash": h, "built_at": "T", "slurm_version": "24.11.5"}))
    return d


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("VAGRANT_HOME", str(tmp_path / "vagrant"))
    monkeypatch.setenv("SLURMLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _no_subprocess(*a, **k):
    raise AssertionError(f"unexpected subprocess: {a}")


def test_is_current(homes):
    assert not box.is_current()
    _add_fake_box(homes / "vagrant", box.DEFAULT_BOX, "old")
    assert not box.is_current()
    _add_fake_box(homes / "vagrant", "x/y", box.inputs_hash())
    assert box.is_current("x/y")
    _add_fake_box(homes / "vagrant", "half", box.inputs_hash(), complete=False)
    assert not box.is_current("half")


def test_build_up_to_date_does_nothing(homes, monkeypatch):
    _add_fake_box(homes / "vagrant", box.DEFAULT_BOX, box.inputs_hash())
    monkeypatch.setattr(subprocess, "Popen", _no_subprocess)
    monkeypatch.setattr(subprocess, "run", _no_subprocess)
    said = []
    info = box.build(progress=said.append)
    assert info.added and info.current and info.slurmlab and info.inputs_hash == box.inputs_hash()
    assert info.path is None  # not in this cache
    assert said and "box up to date" in said[0]


def test_build_cached_box_is_only_added(homes, monkeypatch):
    h = box.inputs_hash()
    cached = cache.box_file(h)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"tar")
    calls = []

    def fake_add(name, path, hh, progress):
        calls.append((name, path, hh))
        _add_fake_box(homes / "vagrant", name, hh)

    monkeypatch.setattr(install, "vagrant_add", fake_add)
    monkeypatch.setattr(image, "build_image", _no_subprocess)
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 1000)  # adding a cached box needs no root
    monkeypatch.setattr(preflight, "check_tools", lambda tools: None)
    info = box.build("lab/test")
    assert calls == [("lab/test", cached, h)]
    assert info.path == cached and info.size_bytes == 3 and info.added


def test_build_needs_root(homes, monkeypatch):
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 1000)
    with pytest.raises(HostError) as e:
        box.build()
    assert "root" in e.value.message and e.value.fix


def test_missing_tool_names_the_debian_package(monkeypatch):
    monkeypatch.setattr(preflight.shutil, "which", lambda tool, path=None: None if tool == "extlinux" else "/bin/x")
    with pytest.raises(HostError) as e:
        preflight.check_tools(preflight.BUILD_TOOLS)
    assert e.value.fix == "apt-get install extlinux"


def test_not_enough_space(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 0)
    monkeypatch.setattr(preflight, "check_tools", lambda tools: None)
    monkeypatch.setattr(preflight, "MBR_BIN", Path(__file__))
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda p: type("U", (), {"free": 1024**3})())
    with pytest.raises(HostError) as e:
        preflight.check_build_host(tmp_path / "not" / "yet")
    assert "3.0 GiB" in e.value.message and "1.0 GiB" in e.value.message


def test_list_boxes_marks_slurmlab_and_current(homes, monkeypatch):
    _add_fake_box(homes / "vagrant", "slurmlab/trixie-slurm", box.inputs_hash())
    _add_fake_box(homes / "vagrant", "other", None)
    monkeypatch.setattr(preflight, "check_tools", lambda tools: None)

    def fake_run(cmd, **kw):
        assert cmd == ["vagrant", "box", "list", "--machine-readable"]
        return subprocess.CompletedProcess(cmd, 0, BOX_LIST_TWO, "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    boxes = {i.name: i for i in box.list_boxes()}
    assert set(boxes) == {"other", "slurmlab/trixie-slurm"}
    assert boxes["slurmlab/trixie-slurm"].slurmlab and boxes["slurmlab/trixie-slurm"].current
    assert boxes["slurmlab/trixie-slurm"].slurm_version == "24.11.5"
    assert not boxes["other"].slurmlab and not boxes["other"].current and boxes["other"].inputs_hash == ""
    assert all(i.added for i in boxes.values())


def test_cleanup_stale_tears_down_old_work_dirs(homes, monkeypatch):
    stale = cache.boxes_dir() / ".work-dead"
    (stale / "rootfs" / "etc").mkdir(parents=True)
    keep = cache.boxes_dir() / "0123456789abcdef"
    keep.mkdir()
    monkeypatch.setattr(td, "_mounts_under", lambda d: [])
    monkeypatch.setattr(td, "_loops_under", lambda d: [])
    said = []
    td.cleanup_stale(said.append)
    assert not stale.exists() and keep.exists() and "stale" in said[0]


def test_teardown_never_deletes_across_a_mount(homes, monkeypatch):
    work = cache.boxes_dir() / ".work-busy"
    work.mkdir(parents=True)
    monkeypatch.setattr(td, "_mounts_under", lambda d: [str(d / "rootfs/dev")])
    monkeypatch.setattr(td, "_loops_under", lambda d: [])
    monkeypatch.setattr(td.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 32))
    with pytest.raises(HostError):
        td.teardown(work)
    assert work.exists()


def test_stop_orphans_only_kills_the_stale_builds_session(tmp_path):
    work = tmp_path / ".work-x"
    work.mkdir()
    ours = subprocess.Popen(["sh", "-c", "sleep 60 & wait", str(work)], start_new_session=True)
    other = subprocess.Popen(["sh", "-c", "sleep 60 & wait", "unrelated"], start_new_session=True)
    try:
        (work / "session").write_text(f"{other.pid}\n")
        td._stop_orphans(work, lambda s: None, grace=5)
        assert other.poll() is None  # its command line does not name the work dir: left alone
        (work / "session").write_text(f"{ours.pid}\n")
        said = []
        td._stop_orphans(work, said.append, grace=5)
        assert ours.wait(timeout=5) is not None and "2 processes" in said[0]
        assert td._session_members(ours.pid) == []
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_image_bytes_is_the_newest_added_image_or_none(tmp_path):
    """What a host's pool must take for the box (lab.host.probe's "can it take the box")."""
    assert vg.image_bytes("slurmlab/trixie-slurm", home=tmp_path) is None
    for version, size in (("0", 3), ("1", 5)):
        d = tmp_path / "boxes" / "slurmlab-VAGRANTSLASH-trixie-slurm" / version / "libvirt"
        d.mkdir(parents=True)
        (d / "box_0.img").write_bytes(b"x" * size)
    assert vg.image_bytes("slurmlab/trixie-slurm", home=tmp_path) == 5
