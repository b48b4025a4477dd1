"""What goes into the slurmlab box, as data, and the pure functions that render its files.

Everything that changes the image is in `Recipe` or in customize.sh; `inputs_hash()` covers both,
so a changed package list, mirror or script yields a new hash and a new box. Nothing here runs a
subprocess.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from lab import settings

HERE = Path(__file__).resolve().parent
CUSTOMIZE_SCRIPT = HERE / "customize.sh"
FILES_DIR = HERE / "files"

# Bump when builder code (not data below) changes what the image contains.
RECIPE_REVISION = 2

BOX_FILENAME = "slurmlab-trixie-slurm.box"  # the default line's; box_filename(suite) for any
MARKER_FILENAME = "slurmlab.json"
MIRROR_ENV = settings.DEBIAN_MIRROR.name
DEFAULT_MIRROR = settings.DEBIAN_MIRROR.default

PACKAGES: tuple[str, ...] = (
    "linux-image-cloud-amd64",
    "systemd-sysv",
    # time: the nodes have no route out, so the controller's chronyd serves the cluster's time
    # (roles/common/tasks/time.yml); systemd-timesyncd had no server to reach and the clocks drifted apart
    "chrony",
    "udev",
    "openssh-server",
    "python3",
    "sudo",
    "munge",
    "slurmctld",
    "slurmd",
    "slurm-client",
    "sackd",
    # accounting on the controller: slurmdbd with MariaDB (docs/workshop.md)
    "slurmdbd",
    "mariadb-server",
    # shared /home and /fsx: the controller exports them over NFSv4, the other nodes mount them
    "nfs-kernel-server",
    "nfs-common",
    "libnss-myhostname",
    "iproute2",
    "ca-certificates",
    "less",
    "procps",
    "e2fsprogs",
    # hostnamectl, timedatectl and logind need the system bus (Ansible's hostname module, Vagrant).
    "dbus",
    # initramfs compression (Debian's default; without it update-initramfs falls back to gzip).
    "zstd",
    # warm start (docs/adr/0011): a VM forked from a saved template takes its identity through the
    # guest agent (virtio-serial): no network round trip, no boot. Started only where the channel exists.
    "qemu-guest-agent",
    # the sagemaker-observability extension (docs/adr/0017): node metrics on every node, Prometheus on
    # the controller. In the box because the nodes have no route out; installed disabled (customize.sh),
    # roles/observability writes their config and starts them. Recommends (the textfile collectors) not.
    "prometheus",
    "prometheus-node-exporter",
    # JupyterHub (issue 31): the hub and its proxy, Lab's Python side; the wheels in customize.sh
    "jupyterhub",
    "python3-jupyter-server",
    "python3-jupyterlab-server",
    "python3-notebook-shim",
    "python3-async-lru",
    "python3-httpx",
    "python3-pip",
)

# A workshop's exercises (issue 44, docs/research/workshop-box.md): compilers, Open MPI with the PMIx
# that Slurm's mpi_pmix plugin uses (slurm-wlm-basic-plugins), MPI for Python with numpy, Lmod
# (modulefiles from customize.sh), a ping-pong benchmark (NPopenmpi; mpi4py.bench too), scp and rsync. The
# default line only: forky's Slurm 26.05 has no mpi_pmix, so srun cannot start Open MPI 5 there.
WORKSHOP_PACKAGES: tuple[str, ...] = (
    "gcc",
    "g++",
    "gfortran",
    "make",
    "openmpi-bin",
    "libopenmpi-dev",
    "python3-mpi4py",
    "python3-numpy",
    "lmod",
    "netpipe-openmpi",
    # files in and out through the room's port (lab/room): scp (SFTP since OpenSSH 9) and rsync
    "openssh-sftp-server",
    "rsync",
    # ReFrame's dependencies (issue 46, docs/verification.md; its wheel is WORKSHOP_WHEELS): Debian's, older
    # than the wheel's pins (jsonschema 4.19, lxml 5.4, fasteners 0.18, tabulate 0.9: ReFrame 4.10.4 was
    # checked with exactly these); ClusterShell is only an sdist on PyPI. polars (results storage, off
    # by default, imported only then) is left out.
    "python3-argcomplete",
    "python3-clustershell",
    "python3-fasteners",
    "python3-jinja2",
    "python3-jsonschema",
    "python3-lxml",
    "python3-requests",
    "python3-semver",
    "python3-tabulate",
    "python3-yaml",
)

# Empty packages that stand in for libraries no lab node can use (`slurmlab-placeholders`, made by
# the builder with dpkg-deb): trixie's libucx0 (linked by Open MPI, never used: Debian's
# openmpi-mca-params.conf turns UCX off) depends on AMD's ROCm runtime, which drags in LLVM, 233 MiB
# installed, 82 MiB of the box. Only UCX's ROCm modules link it; DPKG_WORKSHOP leaves them out.
PLACEHOLDERS: tuple[str, ...] = ("libamdhip64-5 (= 5.7.1-6+deb13u1)", "libhsa-runtime64-1 (= 6.1.2-3)")

# Wheels from PyPI, pinned, for what Debian's trixie lacks (issue 31, docs/research/jupyterhub.md):
# JupyterLab 4.1+ does not start with trixie's jupyterlab-server 2.25.2, and Debian's jupyterlab
# package pulls ~880 MiB of JS toolchain; batchspawner (the Slurm spawner) is not in Debian at all.
# The builder downloads them on the host (sys.executable -m pip); customize.sh installs them
# with the image's own pip, --no-deps --no-index (their dependencies are PACKAGES above).
WHEELS: tuple[str, ...] = ("jupyterlab==4.0.13", "jupyter-lsp==2.2.5", "batchspawner==1.3.0")

# The workshop's wheels (the default line only, as WORKSHOP_PACKAGES): ReFrame, the regression-test
# framework (`reframe`; `slurmlab reframe-config` writes its site configuration), pure Python, and
# archspec, the one dependency trixie lacks (pure Python too); the others are in WORKSHOP_PACKAGES.
WORKSHOP_WHEELS: tuple[str, ...] = ("reframe-hpc==4.10.4", "archspec==0.2.7")

# Not installed in the image (they have no use in a lab node and cost ~70 MB). The copyright
# files stay. These options also stay in the image's /etc/dpkg/dpkg.cfg.d/.
DPKG_OPTIONS: tuple[str, ...] = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)

# With the workshop's packages: UCX's ROCm modules (their libraries are placeholders), gcc's LTO
# dumper (31 MiB, a debugging tool) and the sanitizer runtimes (-fsanitize=; 39 MiB). One pattern per
# library: dpkg's globs have no braces. -flto and -static still work.
DPKG_WORKSHOP: tuple[str, ...] = (
    "path-exclude=/usr/lib/x86_64-linux-gnu/ucx/*rocm*",
    "path-exclude=/usr/bin/*lto-dump*",
    *(f"path-exclude=/usr/lib/x86_64-linux-gnu/lib{s}san.so.*" for s in ("a", "t", "hwa", "l", "ub")),
    *(f"path-exclude=/usr/lib/gcc/x86_64-linux-gnu/*/lib{s}san*" for s in ("a", "t", "hwa", "l", "ub")),
)


@dataclass(frozen=True)
class Recipe:
    suite: str = "trixie"
    arch: str = "amd64"
    # minbase = apt variant + Priority:required; measured on trixie with this package list the
    # only difference is `login`, which the serial console needs.
    variant: str = "minbase"
    mirror: str = DEFAULT_MIRROR
    packages: tuple[str, ...] = PACKAGES + WORKSHOP_PACKAGES
    wheels: tuple[str, ...] = WHEELS + WORKSHOP_WHEELS
    dpkg_options: tuple[str, ...] = DPKG_OPTIONS + DPKG_WORKSHOP
    # virtual packages an empty `slurmlab-placeholders` package provides (PLACEHOLDERS)
    placeholders: tuple[str, ...] = PLACEHOLDERS
    disk_gib: int = 8
    partition_offset: int = 1024 * 1024
    mkfs_options: tuple[str, ...] = ("-L", "slurmlab-root")
    kernel_args: tuple[str, ...] = ("rw", "console=ttyS0", "net.ifnames=0")
    # Compressed: 120 MB instead of 282 MB, no measurable cost in boot time (qemu decompresses
    # natively; the guest runs emulated). zstd compresses 5x faster than zlib; needs qemu >= 5.1.
    qcow2_options: tuple[str, ...] = ("-c", "-o", "compression_type=zstd")
    slurm_series: str = "24.11"
    revision: int = RECIPE_REVISION
    # apt options for the build only (not kept in the image). forky is Debian's testing suite: a mirror
    # snapshot's Release file expires within days (Valid-Until), and apt refuses an expired one.
    apt_options: tuple[str, ...] = ()


# Box lines (issue 32): a Debian suite and the Slurm series its mirror carries. Each line is its own
# Vagrant box (`slurmlab/<suite>-slurm`), cache entry and release line (lab/box/releases.py).
# trixie: Debian 13, Slurm 24.11 (the default); forky: Debian 14 (testing), Slurm 26.05.
LINES: dict[str, str] = {"trixie": "24.11", "forky": "26.05"}
DEFAULT_SUITE = "trixie"


def box_name(suite: str = DEFAULT_SUITE) -> str:
    return f"slurmlab/{suite}-slurm"


def box_filename(suite: str = DEFAULT_SUITE) -> str:
    return f"slurmlab-{suite}-slurm.box"


def suite_of(name: str) -> str | None:
    """The line of a box name slurmlab builds (None: not one of its lines)."""
    return next((s for s in LINES if box_name(s) == name), None)


def default_recipe(suite: str = DEFAULT_SUITE) -> Recipe:
    """The recipe of a line for this host: the mirror may be overridden with $SLURMLAB_DEBIAN_MIRROR."""
    if suite not in LINES:
        from lab.errors import UsageError

        raise UsageError(f"--suite {suite}: slurmlab builds boxes of {', '.join(LINES)}",
                         f"give one of them (--suite {DEFAULT_SUITE} is the default)")
    mirror = settings.DEBIAN_MIRROR.get()
    if suite == DEFAULT_SUITE:
        return Recipe(mirror=mirror.rstrip("/"))
    # forky carries JupyterLab 4.4 itself (a dependency of its jupyterhub stack): only batchspawner from PyPI.
    # Its kernel pulls dracut by default; customize.sh trims an initramfs-tools initramfs: ask for that one.
    # No workshop packages there (WORKSHOP_PACKAGES), so no placeholders and no excludes for them.
    return Recipe(mirror=mirror.rstrip("/"), suite=suite, slurm_series=LINES[suite],
                  packages=(*PACKAGES, "initramfs-tools"), apt_options=("Acquire::Check-Valid-Until false",),
                  dpkg_options=DPKG_OPTIONS, placeholders=(),
                  wheels=tuple(w for w in WHEELS if w.startswith("batchspawner")))


def inputs_hash(recipe: Recipe | None = None, script_text: str | None = None) -> str:
    """A short sha256 over the recipe and the customize script: the box's cache key (the suite and
    Slurm series are in the recipe: each line has its own)."""
    recipe = recipe or default_recipe()
    if script_text is None:
        script_text = CUSTOMIZE_SCRIPT.read_text()
    doc = asdict(recipe)
    doc["packages"] = sorted(set(recipe.packages))  # order and duplicates do not change the image
    if not recipe.apt_options:
        del doc["apt_options"]  # the field came after boxes were built: no options, the hash they had
    if not recipe.placeholders:
        del doc["placeholders"]  # likewise
    doc["files"] = {str(p.relative_to(FILES_DIR)): p.read_text() for p in box_files()}
    doc["templates"] = {
        "extlinux.conf": render_extlinux_conf("@KERNEL@", "@INITRD@", "@UUID@", recipe.kernel_args),
        "fstab": render_fstab("@UUID@"),
        "metadata.json": render_metadata(recipe.disk_gib),
        "Vagrantfile": render_vagrantfile(),
    }
    doc["customize.sh"] = script_text
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


WORKSHOP_FEATURE = "workshop"


def has_workshop(recipe: Recipe) -> bool:
    return set(WORKSHOP_PACKAGES) <= set(recipe.packages)


def box_files() -> list[Path]:
    """The files customize.sh installs as they are (lab/box/files: the seff script, the modulefiles),
    sorted: part of the inputs hash."""
    return sorted(p for p in FILES_DIR.rglob("*") if p.is_file())


def render_placeholder_control(placeholders: tuple[str, ...]) -> str:
    """DEBIAN/control of the empty package that provides `placeholders` (see PLACEHOLDERS)."""
    return (
        "Package: slurmlab-placeholders\n"
        "Version: 1\n"
        "Architecture: all\n"
        "Maintainer: slurmlab <slurmlab@localhost>\n"
        f"Provides: {', '.join(placeholders)}\n"
        "Section: misc\n"
        "Priority: optional\n"
        "Description: slurmlab: stands in for libraries a lab node cannot use\n"
        " Empty. UCX (linked by Open MPI) depends on AMD's ROCm runtime; only UCX's\n"
        " ROCm modules use it, and the box leaves them out.\n"
    )


def render_extlinux_conf(kernel: str, initrd: str, root_uuid: str, kernel_args: tuple[str, ...]) -> str:
    """extlinux.conf that boots straight into the image's kernel (paths relative to /boot)."""
    args = " ".join((f"root=UUID={root_uuid}", *kernel_args))
    return (
        "# slurmlab: generated at box build time\n"
        "DEFAULT slurmlab\n"
        "PROMPT 0\n"
        "TIMEOUT 0\n"
        "\n"
        "LABEL slurmlab\n"
        f"  LINUX /boot/{kernel}\n"
        f"  INITRD /boot/{initrd}\n"
        f"  APPEND {args}\n"
    )


def render_fstab(root_uuid: str) -> str:
    return (
        f"# <file system> <mount point> <type> <options> <dump> <pass>\nUUID={root_uuid} / ext4 errors=remount-ro 0 1\n"
    )


def render_metadata(disk_gib: int) -> str:
    return json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": disk_gib}) + "\n"


def render_vagrantfile() -> str:
    """The box's own Vagrantfile: software emulation by default (the project's Vagrantfile decides)."""
    return (
        "# slurmlab box defaults; a project's Vagrantfile overrides them.\n"
        'Vagrant.configure("2") do |config|\n'
        "  config.vm.provider :libvirt do |libvirt|\n"
        '    libvirt.driver = "qemu"\n'
        "  end\n"
        "end\n"
    )


def render_marker(
    *, name: str, inputs_hash: str, built_at: str, recipe: Recipe, slurm_version: str, kernel: str
) -> str:
    """slurmlab.json: identifies a slurmlab-built box (inside the .box and next to it)."""
    doc = {
        "format": 1,
        "name": name,
        "inputs_hash": inputs_hash,
        "built_at": built_at,
        "debian_suite": recipe.suite,
        "mirror": recipe.mirror,
        "slurm_version": slurm_version,
        "kernel": kernel,
        # what the box can do beyond a plain boot: "warm-start" = qemu-guest-agent and fork-identity
        # (lab/providers/warm.py forks only boxes that say so)
        # "workshop" = compilers, Open MPI and Slurm's mpi_pmix, Lmod, seff (WORKSHOP_PACKAGES): the
        # lab sets MpiDefault=pmix for a cluster of such a box (lab/configure/inventory.py)
        "features": ["warm-start", *([WORKSHOP_FEATURE] if has_workshop(recipe) else [])],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def pick_kernel(boot_files: list[str]) -> tuple[str, str]:
    """(vmlinuz-X, initrd.img-X) for the newest kernel that has both files in /boot."""
    kernels = {f.removeprefix("vmlinuz-") for f in boot_files if f.startswith("vmlinuz-")}
    initrds = {f.removeprefix("initrd.img-") for f in boot_files if f.startswith("initrd.img-")}
    both = sorted(kernels & initrds, key=_version_key)
    if not both:
        raise ValueError(f"no kernel with an initrd in /boot: {sorted(boot_files)}")
    v = both[-1]
    return f"vmlinuz-{v}", f"initrd.img-{v}"


def _version_key(v: str) -> list:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+~]", v)]


def parse_slurm_version(output: str) -> str | None:
    """`slurmd -V` prints `slurm 24.11.5` upstream, `slurm-wlm 24.11.5` on Debian."""
    m = re.search(r"\bslurm(?:-wlm)?\s+(\d+\.\d+\.\d+)", output)
    return m.group(1) if m else None
