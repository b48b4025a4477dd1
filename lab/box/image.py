"""Building the .box image, stage by stage, in a work directory `cache()/boxes/.work-*`:

    wheels       the recipe's pinned wheels from PyPI, with this Python's pip (for customize.sh)
    bootstrap    mmdebstrap the root tree (customize.sh runs in its hook)
    configure    check Slurm's version, pick the kernel, write fstab and extlinux.conf
    disk         a sparse raw disk: MBR partition table, ext4 filled from the tree (mke2fs -d)
    bootloader   extlinux in a private mount namespace, the MBR boot code, e2fsck
    qcow2        qemu-img convert
    package      metadata.json, Vagrantfile, slurmlab.json, tar; renamed into the cache (the commit)

The work directory is torn down whatever happens (lab.box.teardown).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.errors import CommandFailed
from lab.osutil import atomic_write, now_z

from . import recipe as rc
from .cache import WORK_PREFIX, box_file, boxes_dir
from .preflight import GIB, MBR_BIN
from .process import BuildLog, run
from .teardown import teardown

Progress = Callable[[str], None]


class Clock:
    """progress("[  12.3s] step: detail"), seconds since the clock was made."""

    def __init__(self, progress: Progress):
        self.t0 = time.monotonic()
        self.progress = progress

    def __call__(self, step: str, detail: str = "") -> None:
        t = time.monotonic() - self.t0
        self.progress(f"[{t:6.1f}s] {step}" + (f": {detail}" if detail else ""))


@dataclass
class _Build:
    """What the stages share: the recipe, the work directory's files, the log, the clock."""

    recipe: rc.Recipe
    work: Path
    log: BuildLog
    say: Clock

    @property
    def raw(self) -> Path:
        return self.work / "disk.raw"

    @property
    def rootfs(self) -> Path:
        return self.work / "rootfs"

    @property
    def size(self) -> int:
        return self.recipe.disk_gib * GIB

    @property
    def off(self) -> int:
        return self.recipe.partition_offset


def _wheels(b: _Build) -> Path:
    """The recipe's pinned wheels, downloaded on the host with this Python's pip (the nodes have no
    route out): customize.sh installs them in the image."""
    d = b.work / "wheels"
    d.mkdir()
    if b.recipe.wheels:
        b.say("wheels", ", ".join(b.recipe.wheels))
        run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(d),
             *b.recipe.wheels], log=b.log)
    return d


PLACEHOLDER_HOOKS = Path("/usr/share/mmdebstrap/hooks/file-mirror-automount")  # local .debs in --include


def _placeholders(b: _Build) -> list[str]:
    """The empty package that provides the recipe's placeholders (recipe.PLACEHOLDERS), built with
    dpkg-deb: mmdebstrap's arguments that install it (none without placeholders)."""
    if not b.recipe.placeholders:
        return []
    tree = b.work / "placeholders"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(rc.render_placeholder_control(b.recipe.placeholders))
    deb = b.work / "slurmlab-placeholders_1_all.deb"
    run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)], log=b.log)
    return [f"--include={deb}", f"--hook-dir={PLACEHOLDER_HOOKS}"]


def _bootstrap(b: _Build, script: Path, wheels: Path) -> None:
    recipe, say = b.recipe, b.say
    say("mmdebstrap", f"Debian {recipe.suite} {recipe.variant} from {recipe.mirror}")
    state = {"step": "mmdebstrap"}

    def watch(line: str) -> None:
        if "slurmlab customize:" in line:
            state["step"] = "configure"
            say("configure", line.split("slurmlab customize:", 1)[1].strip())
        elif line.startswith("I: ") and state["step"] == "mmdebstrap":
            say("mmdebstrap", line[3:].strip())

    run(
        [
            "mmdebstrap",
            "--mode=root",
            f"--variant={recipe.variant}",
            f"--architectures={recipe.arch}",
            f"--include={','.join(recipe.packages)}",
            *_placeholders(b),
            *(f"--dpkgopt={o}" for o in recipe.dpkg_options),
            *(f"--aptopt={o}" for o in recipe.apt_options),
            f'--customize-hook=sh {script} "$1" {wheels} {rc.FILES_DIR}',
            recipe.suite,
            str(b.rootfs),
            recipe.mirror,
        ],
        log=b.log,
        on_line=watch,
    )


def _configure(b: _Build, root_uuid: str) -> tuple[str, str]:
    """Slurm's version (checked against the recipe's series) and the kernel; fstab, extlinux.conf."""
    recipe, rootfs = b.recipe, b.rootfs
    b.say("configure", "slurm version, kernel, fstab, extlinux.conf")
    slurm_cmd = ["chroot", str(rootfs), "/usr/sbin/slurmd", "-V"]
    slurm_out = run(slurm_cmd, log=b.log)
    slurm = rc.parse_slurm_version(slurm_out)
    if not slurm or not slurm.startswith(recipe.slurm_series + "."):
        raise CommandFailed(
            slurm_cmd,
            0,
            f"expected Slurm {recipe.slurm_series}.x in the image, got: {slurm_out.strip()}",
            f"the {recipe.suite} mirror no longer carries Slurm {recipe.slurm_series}",
        )
    kernel, initrd = rc.pick_kernel(os.listdir(rootfs / "boot"))
    (rootfs / "etc/fstab").write_text(rc.render_fstab(root_uuid))
    (rootfs / "boot/extlinux").mkdir(exist_ok=True)
    (rootfs / "boot/extlinux/extlinux.conf").write_text(
        rc.render_extlinux_conf(kernel, initrd, root_uuid, recipe.kernel_args)
    )
    b.say("configure", f"slurm {slurm}, kernel {kernel.removeprefix('vmlinuz-')}")
    return slurm, kernel


def _disk(b: _Build, root_uuid: str) -> None:
    # The filesystem is written from the tree by mke2fs (-d), never mounted while it is
    # filled: a mount in the host's namespace can be copied into another process's mount
    # namespace (any `unshare -m` meanwhile) and then never be cleanly unmounted.
    recipe, raw, size, off = b.recipe, b.raw, b.size, b.off
    b.say("disk image", f"sparse raw {recipe.disk_gib} GiB, MBR, ext4 at {off // 1024} KiB")
    with open(raw, "wb") as f:
        f.truncate(size)
    run(
        ["sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", str(raw)],
        input=f"label: dos\nstart={off // 512}, type=83, bootable\n",
        log=b.log,
    )
    run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-U",
            root_uuid,
            *recipe.mkfs_options,
            "-E",
            f"offset={off}",
            "-d",
            str(b.rootfs),
            str(raw),
            f"{(size - off) // 1024}k",
        ],
        log=b.log,
    )
    shutil.rmtree(b.rootfs)


def _bootloader(b: _Build, mnt: Path) -> None:
    # extlinux must see the mounted filesystem: mount it for a moment in a private mount
    # namespace (gone, with its autoclear loop device, when that shell exits or is killed).
    raw, size, off = b.raw, b.size, b.off
    b.say("bootloader", "extlinux, MBR boot code")
    run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-ec",
            (
                'mount -o "loop,offset=$1,sizelimit=$2" "$3" "$4"; '
                'extlinux --install "$4/boot/extlinux"; umount "$4"'
            ),
            "sh",
            str(off),
            str(size - off),
            str(raw),
            str(mnt),
        ],
        log=b.log,
    )
    with open(raw, "r+b") as f:
        f.write(MBR_BIN.read_bytes()[:440])
    run(["e2fsck", "-fn", f"{raw}?offset={off}"], log=b.log)  # a consistent filesystem, or fail


def _qcow2(b: _Build, pkg: Path) -> None:
    b.say("qcow2", "qemu-img convert")
    pkg.mkdir()
    run(["qemu-img", "convert", "-O", "qcow2", *b.recipe.qcow2_options, str(b.raw), str(pkg / "box.img")], log=b.log)
    b.raw.unlink()


def _package(b: _Build, pkg: Path, final: Path, *, name: str, h: str, slurm: str, kernel: str) -> None:
    """The .box (tar) from `pkg`, fsync'd, its marker next to it, renamed to `final`: the commit point."""
    b.say("package", "metadata.json, Vagrantfile, slurmlab.json, tar")
    built_at = now_z()
    marker = rc.render_marker(
        name=name,
        inputs_hash=h,
        built_at=built_at,
        recipe=b.recipe,
        slurm_version=slurm,
        kernel=kernel.removeprefix("vmlinuz-"),
    )
    (pkg / "metadata.json").write_text(rc.render_metadata(b.recipe.disk_gib))
    (pkg / "Vagrantfile").write_text(rc.render_vagrantfile())
    (pkg / rc.MARKER_FILENAME).write_text(marker)
    out = b.work / "out.box"
    run(
        ["tar", "-cf", str(out), "-C", str(pkg), "metadata.json", "Vagrantfile", rc.MARKER_FILENAME, "box.img"],
        log=b.log,
    )
    with open(out, "rb") as f:
        os.fsync(f.fileno())
    final.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(final.parent / rc.MARKER_FILENAME, marker)
    os.replace(out, final)  # the commit point
    size_mb = final.stat().st_size / 1e6
    b.say("package", f"{final} ({size_mb:.0f} MB)")


def build_image(name: str, h: str, recipe: rc.Recipe, script_text: str, say: Clock) -> Path:
    """Build the .box for inputs hash `h` and rename it into the cache. Returns its path."""
    final = box_file(h, recipe.suite)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=boxes_dir()))
    log = BuildLog(boxes_dir() / "build.log")
    log.session_file = work / "session"
    try:
        (work / "pid").write_text(f"{os.getpid()}\n")
        script = work / "customize.sh"
        script.write_text(script_text)
        b = _Build(recipe=recipe, work=work, log=log, say=say)
        mnt = work / "mnt"
        b.rootfs.mkdir()
        mnt.mkdir()
        _bootstrap(b, script, _wheels(b))
        root_uuid = str(uuid.uuid4())
        slurm, kernel = _configure(b, root_uuid)
        _disk(b, root_uuid)
        _bootloader(b, mnt)
        pkg = work / "pkg"
        _qcow2(b, pkg)
        _package(b, pkg, final, name=name, h=h, slurm=slurm, kernel=kernel)
    finally:
        log.close()
        teardown(work)
    return final
