"""roles/state_disk's command, run by sh on this machine with fakes for what would touch real disks.

blkid, mkfs.ext4, mount, mountpoint, findmnt and systemctl are fakes on PATH sharing one JSON state;
the block device is a node made with mknod for a loop device number no kernel has set up; fstab and
the folders are in a temporary folder; cp, mv and the shell are real. What it cannot prove: that the
guest's kernel mounts the disk (the e2e suite replaces a real controller and finds its data)."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / "roles/state_disk/files/state-disk.sh").read_text()  # what tasks/main.yml passes to sh -c

FAKE = r'''#!PYTHON
import json, os, sys
STATE = os.environ["FAKE_STATE"]
prog, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(STATE) as f:
    s = json.load(f)
s["calls"].append(" ".join([prog] + args))
rc = 0
if prog == "blkid":
    key = args[args.index("-s") + 1]
    value = s["fs"].get(key) if s["fs"] else None
    if value:
        print(value)
    else:
        rc = 2
elif prog == "mkfs.ext4":
    s["fs"] = {"TYPE": "ext4", "UUID": "1234-abcd"}
elif prog == "mountpoint":
    rc = 0 if args[-1] in s["mounted"] else 32
elif prog == "findmnt":
    print("\n".join(s["mounted"]))
elif prog == "mount":
    lines = [l.split() for l in open(s["fstab"]) if l.strip()]
    if not any(l[1] == args[-1] for l in lines):
        print(f"mount: {args[-1]}: not in fstab", file=sys.stderr)
        rc = 1
    else:
        s["mounted"].append(args[-1])
with open(STATE, "w") as f:
    json.dump(s, f)
sys.exit(rc)
'''


@pytest.fixture
def guest(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test makes a device node (mknod): run it as root, as CI does")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("blkid", "mkfs.ext4", "mount", "mountpoint", "findmnt", "systemctl"):
        (bin_ / tool).write_text(FAKE.replace("PYTHON", sys.executable))
        (bin_ / tool).chmod(0o755)
    dev = tmp_path / "vdb"
    os.mknod(dev, 0o600 | stat.S_IFBLK, os.makedev(7, 254))  # /dev/loop254: no kernel sets it up here
    root = tmp_path / "root"
    dirs = [root / "home", root / "var/lib/mysql"]
    for d in dirs:
        d.mkdir(parents=True)
        (d / "from-the-box").write_text(d.name)
    (root / "etc").mkdir()
    fstab = root / "etc/fstab"
    fstab.write_text("# the box's fstab\n")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"calls": [], "fs": None, "mounted": [], "fstab": str(fstab)}))
    top = tmp_path / "disk"

    class Guest:
        def run(self, device=dev, extra=()):
            p = subprocess.run(["sh", "-c", SCRIPT, "slurmlab-state-disk", str(device), str(top), str(fstab),
                                *map(str, dirs), *map(str, extra)], capture_output=True, text=True,
                               env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "FAKE_STATE": str(state)})
            return p.returncode, p.stdout + p.stderr

        def state(self):
            return json.loads(state.read_text())

        def set_state(self, **kw):
            state.write_text(json.dumps({**self.state(), **kw}))

        def new_vm(self):
            """A new VM: its own fstab and nothing mounted; the disk (top, formatted) is the same."""
            self.set_state(mounted=[], calls=[])
            fstab.write_text("# the box's fstab\n")

    g = Guest()
    g.dev, g.top, g.dirs, g.fstab = dev, top, dirs, fstab
    return g


def _kept(g, d):
    return g.top / str(d).lstrip("/").replace("/", "_")


def test_first_run_formats_copies_and_mounts_then_a_rerun_changes_nothing(guest):
    rc, out = guest.run()
    assert rc == 0, out
    assert "formatted (ext4)" in out and out.count("copied to the state disk") == 2, out
    lines = guest.fstab.read_text().splitlines()
    assert f"UUID=1234-abcd {guest.top} ext4 defaults 0 2" in lines
    for d in guest.dirs:
        assert f"{_kept(guest, d)} {d} none bind,x-systemd.requires-mounts-for={guest.top} 0 0" in lines
        assert (_kept(guest, d) / "from-the-box").read_text() == d.name  # what the folder held is on the disk
    assert guest.state()["mounted"] == [str(guest.top), *map(str, guest.dirs)]
    # mount(8) reads the new lines itself; systemd's generator at the next boot (no reload: issue 42)
    assert not any(c.startswith("systemctl") for c in guest.state()["calls"])
    before = guest.fstab.read_text()
    guest.set_state(calls=[])
    rc, out = guest.run()
    assert rc == 0 and "changed" not in out, out
    assert guest.fstab.read_text() == before
    assert not any(c.startswith(("mkfs", "mount ", "systemctl")) for c in guest.state()["calls"])


def test_a_new_vm_finds_the_data_of_the_old_one(guest):
    guest.run()
    (_kept(guest, guest.dirs[0]) / "written-by-a-student").write_text("kept")
    guest.new_vm()
    (guest.dirs[0] / "from-the-new-box").write_text("new")
    rc, out = guest.run()
    assert rc == 0, out
    assert "formatted" not in out and "copied" not in out, out  # neither formatted nor overwritten
    assert not any(c.startswith("mkfs") for c in guest.state()["calls"])
    assert (_kept(guest, guest.dirs[0]) / "written-by-a-student").read_text() == "kept"
    assert not (_kept(guest, guest.dirs[0]) / "from-the-new-box").exists()
    assert guest.state()["mounted"] == [str(guest.top), *map(str, guest.dirs)]


def test_a_folder_with_a_mount_below_it_stays_on_the_system_disk(guest):
    nfs = guest.dirs[0].parent / "var/lib/nfs"
    (nfs / "rpc_pipefs").mkdir(parents=True)
    guest.set_state(mounted=[str(nfs / "rpc_pipefs")])
    rc, out = guest.run(extra=[nfs])
    assert rc == 0, out
    assert f"{nfs} stays on the system disk: a file system is mounted below it" in out
    assert str(nfs) not in guest.fstab.read_text() and not _kept(guest, nfs).exists()


def test_no_state_disk_changes_nothing(guest, tmp_path):
    rc, out = guest.run(device=tmp_path / "no-such-disk")
    assert rc == 0 and "no state disk" in out and "changed" not in out, out
    assert guest.fstab.read_text() == "# the box's fstab\n" and guest.state()["calls"] == []


def test_a_disk_with_another_file_system_is_not_touched(guest):
    guest.set_state(fs={"TYPE": "xfs", "UUID": "9"})
    rc, out = guest.run()
    assert rc == 1 and "slurmlab-state failed:" in out and "holds a xfs file system" in out, out
    assert guest.fstab.read_text() == "# the box's fstab\n"
    assert not any(c.startswith(("mkfs", "mount")) for c in guest.state()["calls"])
