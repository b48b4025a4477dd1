"""Acting: build the slurmlab box from Debian's mirror and add it to Vagrant.

One build at a time (a file lock in the cache). Everything happens in a work directory
`cache()/boxes/.work-*`; the finished .box is renamed into `cache()/boxes/<hash>/` and only then
added to Vagrant. On any error, Ctrl-C or SIGTERM the work directory is torn down: child processes
killed, filesystems unmounted, loop devices detached, files deleted. A build killed with SIGKILL
leaves a work directory behind; the next build tears it down before starting.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from lab.errors import CommandFailed, HostError
from lab.osutil import atomic_write, kill_group, now_z
from lab.paths import cache

from . import recipe as rc
from . import vagrant as vg

Progress = Callable[[str], None]

GIB = 1024**3
SPACE_NEEDED = 3 * GIB
MBR_BIN = Path("/usr/lib/EXTLINUX/mbr.bin")
WORK_PREFIX = ".work-"

# tool -> Debian package that provides it
BUILD_TOOLS: dict[str, str] = {
    "mmdebstrap": "mmdebstrap",
    "sfdisk": "fdisk",
    "losetup": "mount",
    "mount": "mount",
    "unshare": "util-linux",
    "mkfs.ext4": "e2fsprogs",
    "e2fsck": "e2fsprogs",
    "extlinux": "extlinux",
    "chroot": "coreutils",
    "qemu-img": "qemu-utils",
    "tar": "tar",
    "vagrant": "vagrant",
}
ADD_TOOLS = {"vagrant": "vagrant"}


def boxes_dir() -> Path:
    return cache() / "boxes"


def box_file(h: str) -> Path:
    return boxes_dir() / h / rc.BOX_FILENAME


# ---------------------------------------------------------------- preflight


def check_tools(tools: dict[str, str]) -> None:
    path = os.environ.get("PATH", os.defpath) + ":/usr/sbin:/sbin"
    missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool, path=path) is None})
    if missing:
        names = ", ".join(t for t, p in tools.items() if p in missing)
        raise HostError(
            f"missing tools for the box build: {names}",
            f"apt-get install {' '.join(missing)}",
        )


def is_root() -> bool:
    return os.geteuid() == 0


def check_build_host(space_dir: Path) -> None:
    """Root, the tools (by Debian package), and ~3 GiB free in the cache: before touching anything."""
    if not is_root():
        raise HostError(
            "building the box needs root (loop devices, mount, chroot)",
            "run `sudo slurmlab box build` (or use a box that is already built)",
        )
    check_tools(BUILD_TOOLS)
    if not MBR_BIN.is_file():
        raise HostError(f"{MBR_BIN} not found (the MBR boot code)", "apt-get install extlinux")
    probe = space_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < SPACE_NEEDED:
        raise HostError(
            f"the box build needs {SPACE_NEEDED / GIB:.1f} GiB free in {space_dir}, "
            f"only {free / GIB:.1f} GiB available",
            "free some space there, or point SLURMLAB_CACHE at a filesystem with more room",
        )


# ---------------------------------------------------------------- subprocesses


class _Log:
    """Everything the build's commands print, kept in cache()/boxes/build.log."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Where run() records the session id of the running child, for cleanup_stale().
        self.session_file: Path | None = None
        self._f = open(path, "w", buffering=1)  # noqa: SIM115 (closed by close())

    def write(self, s: str) -> None:
        self._f.write(s)

    def close(self) -> None:
        self._f.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/local/sbin:/usr/sbin:/sbin"
    env["LC_ALL"] = "C.UTF-8"
    env["DEBIAN_FRONTEND"] = "noninteractive"
    return env


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the builder dies (even of SIGKILL)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run(
    cmd: list[str],
    *,
    log: _Log | None = None,
    input: str | None = None,
    on_line: Callable[[str], None] | None = None,
    check: bool = True,
) -> str:
    """Run a command in its own process group; on any exception (Ctrl-C too) kill the group."""
    if log:
        log.write(f"$ {' '.join(cmd)}\n")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=_env(),
        start_new_session=True,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (only calls prctl)
    )
    lines: list[str] = []
    try:
        if log and log.session_file:
            log.session_file.write_text(f"{proc.pid}\n")
        if input is not None:
            assert proc.stdin
            proc.stdin.write(input)
            proc.stdin.close()
        assert proc.stdout
        for line in proc.stdout:
            lines.append(line)
            if log:
                log.write(line)
            if on_line:
                on_line(line.rstrip("\n"))
        code = proc.wait()
    except BaseException:
        kill_group(proc.pid, grace=20.0, wait=proc)
        raise
    out = "".join(lines)
    if check and code != 0:
        fix = f"full log: {log.path}" if log else None
        raise CommandFailed(cmd, code, out, fix)
    return out


# ---------------------------------------------------------------- teardown


def parse_mountinfo(text: str, under: Path) -> list[str]:
    """Mount points at or below `under` in /proc/self/mountinfo text, deepest first."""
    prefix = str(under).rstrip("/")
    found = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if mp == prefix or mp.startswith(prefix + "/"):
            found.add(mp)
    return sorted(found, key=lambda p: (p.count("/"), p), reverse=True)


def parse_losetup_json(text: str, under: Path) -> list[str]:
    """Loop devices in `losetup --json --list` output whose backing file lies below `under`."""
    try:
        devices = json.loads(text or "{}").get("loopdevices", [])
    except ValueError:
        return []
    prefix = str(under).rstrip("/") + "/"
    return [
        dev["name"] for dev in devices if str(dev.get("back-file") or "").removesuffix(" (deleted)").startswith(prefix)
    ]


def _mounts_under(d: Path) -> list[str]:
    try:
        return parse_mountinfo(Path("/proc/self/mountinfo").read_text(), d)
    except OSError:
        return []


def _loops_under(d: Path) -> list[str]:
    try:
        r = subprocess.run(
            ["losetup", "--json", "--list"], capture_output=True, text=True, env=_env(), timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_losetup_json(r.stdout, d)


def teardown(work: Path) -> None:
    """Unmount everything under `work`, detach its loop devices, delete it. Signals wait."""
    blockable = threading.current_thread() is threading.main_thread()
    if blockable:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        for attempt in ("umount", "umount -l"):
            for mp in _mounts_under(work):
                subprocess.run([*attempt.split(), mp], capture_output=True, env=_env(), check=False)
            if not _mounts_under(work):
                break
        for dev in _loops_under(work):
            subprocess.run(["losetup", "-d", dev], capture_output=True, env=_env(), check=False)
        left = _mounts_under(work)
        if left:
            # Never delete across a mount point (a bind-mounted /dev would go with it).
            raise HostError(
                f"could not unmount {', '.join(left)} after a failed box build",
                f"unmount them by hand (umount -R), then delete {work}",
            )
        shutil.rmtree(work, ignore_errors=True)
    finally:
        if blockable:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _session_members(sid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in session `sid` (from /proc/PID/stat)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(stat.parent.name))
    return pids


def _stop_orphans(work: Path, progress: Progress, grace: float = 60.0) -> None:
    """Stop what a killed build left running: its child's session, if it still works in `work`.

    A SIGKILLed builder cannot kill its children; mmdebstrap then carries on (it ignores the
    SIGTERM of PR_SET_PDEATHSIG while its workers run). The session id is checked against the
    work dir in a member's command line, so a reused id never kills an unrelated process.
    """
    try:
        sid = int((work / "session").read_text().strip())
    except (OSError, ValueError):
        return
    members = _session_members(sid)
    ours = False
    for pid in members:
        with contextlib.suppress(OSError):
            if str(work).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                ours = True
    if not ours:
        return
    progress(f"stopping {len(members)} processes left running by a killed build")
    kill_group(sid, grace=grace, alive=lambda: bool(_session_members(sid)))


def cleanup_stale(progress: Progress) -> None:
    """Tear down work directories left by killed builds. Call with the build lock held."""
    for work in sorted(boxes_dir().glob(WORK_PREFIX + "*")):
        if work.is_dir():
            progress(f"cleaning up a stale build directory {work}")
            _stop_orphans(work, progress)
            teardown(work)


def cleanup_stale_if_idle(progress: Progress) -> None:
    """Tear down leftovers of killed builds, unless a build is running (then it is its job)."""
    d = boxes_dir()
    if not is_root() or not d.is_dir() or not any(p.is_dir() for p in d.glob(WORK_PREFIX + "*")):
        return
    lock = FileLock(str(d / ".build.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return
    try:
        cleanup_stale(progress)
    finally:
        lock.release()


class _Terminated(BaseException):
    """SIGTERM arrived during the build: clean up, then die of SIGTERM."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, old)
        os.kill(os.getpid(), signal.SIGTERM)  # the caller's own handler (or the default) decides
        raise KeyboardInterrupt("terminated") from None  # if that handler returned
    finally:
        signal.signal(signal.SIGTERM, old)


# ---------------------------------------------------------------- the build


class Clock:
    """progress("[  12.3s] step: detail"), seconds since the clock was made."""

    def __init__(self, progress: Progress):
        self.t0 = time.monotonic()
        self.progress = progress

    def __call__(self, step: str, detail: str = "") -> None:
        t = time.monotonic() - self.t0
        self.progress(f"[{t:6.1f}s] {step}" + (f": {detail}" if detail else ""))


@contextlib.contextmanager
def build_lock(progress: Progress) -> Iterator[None]:
    boxes_dir().mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(boxes_dir() / ".build.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress("waiting for another box build to finish")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def build_image(name: str, h: str, recipe: rc.Recipe, script_text: str, say: Clock) -> Path:
    """Build the .box for inputs hash `h` and rename it into the cache. Returns its path."""
    final = box_file(h)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=boxes_dir()))
    log = _Log(boxes_dir() / "build.log")
    log.session_file = work / "session"
    try:
        (work / "pid").write_text(f"{os.getpid()}\n")
        script = work / "customize.sh"
        script.write_text(script_text)
        raw, rootfs, mnt = work / "disk.raw", work / "rootfs", work / "mnt"
        rootfs.mkdir()
        mnt.mkdir()
        size = recipe.disk_gib * GIB
        off = recipe.partition_offset

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
                *(f"--dpkgopt={o}" for o in recipe.dpkg_options),
                f'--customize-hook=sh {script} "$1"',
                recipe.suite,
                str(rootfs),
                recipe.mirror,
            ],
            log=log,
            on_line=watch,
        )

        say("configure", "slurm version, kernel, fstab, extlinux.conf")
        slurm_cmd = ["chroot", str(rootfs), "/usr/sbin/slurmd", "-V"]
        slurm_out = run(slurm_cmd, log=log)
        slurm = rc.parse_slurm_version(slurm_out)
        if not slurm or not slurm.startswith(recipe.slurm_series + "."):
            raise CommandFailed(
                slurm_cmd,
                0,
                f"expected Slurm {recipe.slurm_series}.x in the image, got: {slurm_out.strip()}",
                f"the {recipe.suite} mirror no longer carries Slurm {recipe.slurm_series}",
            )
        kernel, initrd = rc.pick_kernel(os.listdir(rootfs / "boot"))
        root_uuid = str(uuid.uuid4())
        (rootfs / "etc/fstab").write_text(rc.render_fstab(root_uuid))
        (rootfs / "boot/extlinux").mkdir(exist_ok=True)
        (rootfs / "boot/extlinux/extlinux.conf").write_text(
            rc.render_extlinux_conf(kernel, initrd, root_uuid, recipe.kernel_args)
        )
        say("configure", f"slurm {slurm}, kernel {kernel.removeprefix('vmlinuz-')}")

        # The filesystem is written from the tree by mke2fs (-d), never mounted while it is
        # filled: a mount in the host's namespace can be copied into another process's mount
        # namespace (any `unshare -m` meanwhile) and then never be cleanly unmounted.
        say("disk image", f"sparse raw {recipe.disk_gib} GiB, MBR, ext4 at {off // 1024} KiB")
        with open(raw, "wb") as f:
            f.truncate(size)
        run(
            ["sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", str(raw)],
            input=f"label: dos\nstart={off // 512}, type=83, bootable\n",
            log=log,
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
                str(rootfs),
                str(raw),
                f"{(size - off) // 1024}k",
            ],
            log=log,
        )
        shutil.rmtree(rootfs)

        # extlinux must see the mounted filesystem: mount it for a moment in a private mount
        # namespace (gone, with its autoclear loop device, when that shell exits or is killed).
        say("bootloader", "extlinux, MBR boot code")
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
            log=log,
        )
        with open(raw, "r+b") as f:
            f.write(MBR_BIN.read_bytes()[:440])
        run(["e2fsck", "-fn", f"{raw}?offset={off}"], log=log)  # a consistent filesystem, or fail

        say("qcow2", "qemu-img convert")
        pkg = work / "pkg"
        pkg.mkdir()
        run(["qemu-img", "convert", "-O", "qcow2", *recipe.qcow2_options, str(raw), str(pkg / "box.img")], log=log)
        raw.unlink()

        say("package", "metadata.json, Vagrantfile, slurmlab.json, tar")
        built_at = now_z()
        marker = rc.render_marker(
            name=name,
            inputs_hash=h,
            built_at=built_at,
            recipe=recipe,
            slurm_version=slurm,
            kernel=kernel.removeprefix("vmlinuz-"),
        )
        (pkg / "metadata.json").write_text(rc.render_metadata(recipe.disk_gib))
        (pkg / "Vagrantfile").write_text(rc.render_vagrantfile())
        (pkg / rc.MARKER_FILENAME).write_text(marker)
        out = work / "out.box"
        run(
            ["tar", "-cf", str(out), "-C", str(pkg), "metadata.json", "Vagrantfile", rc.MARKER_FILENAME, "box.img"],
            log=log,
        )
        with open(out, "rb") as f:
            os.fsync(f.fileno())
        final.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(final.parent / rc.MARKER_FILENAME, marker)
        os.replace(out, final)  # the commit point
        size_mb = final.stat().st_size / 1e6
        say("package", f"{final} ({size_mb:.0f} MB)")
    finally:
        log.close()
        teardown(work)
    return final


def prune_cache(keep: str) -> None:
    """Delete cached boxes built from other inputs (Vagrant keeps its own copy of added boxes)."""
    for d in boxes_dir().iterdir():
        if d.is_dir() and not d.name.startswith(".") and d.name != keep and (d / rc.BOX_FILENAME).exists():
            shutil.rmtree(d, ignore_errors=True)


def vagrant_add(name: str, box: Path, h: str, say: Clock) -> None:
    """`vagrant box add --force`; never leaves a half-added box behind."""
    say("vagrant box add", f"{name} from {box}")
    try:
        run(["vagrant", "box", "add", "--force", "--name", name, str(box)])
    except BaseException:
        _remove_partial(name)
        raise
    d = vg.box_dir(name, "0")
    marker = vg.read_marker(d)
    if not d or not vg.is_complete(d) or not marker or marker.get("inputs_hash") != h:
        raise CommandFailed(
            ["vagrant", "box", "add", "--force", "--name", name, str(box)],
            0,
            f"the added box in {d} does not carry inputs hash {h}",
        )
    # vagrant-libvirt uploads a box into the pool once and never refreshes it: drop stale copies
    from lab.host import libvirtd

    stale = libvirtd.prune_box_volumes(name, keep_newest=False)
    say("vagrant box add", "done" + (f"; removed {len(stale)} stale copies from the pool" if stale else ""))


def _remove_partial(name: str) -> None:
    for d in vg.box_dirs(name):
        if not vg.is_complete(d):
            version = d.relative_to(vg.vagrant_home() / "boxes" / vg.escape_name(name)).parts[0]
            r = subprocess.run(
                ["vagrant", "box", "remove", "--force", "--provider", vg.PROVIDER, "--box-version", version, name],
                capture_output=True,
                env=_env(),
                check=False,
            )
            if r.returncode != 0:
                shutil.rmtree(d, ignore_errors=True)
