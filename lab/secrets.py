"""Per-cluster secrets: an SSH key pair and a munge key. Mode 0600, created once, never logged."""

from __future__ import annotations

import os
from pathlib import Path

from lab.osutil import atomic_write


def _write_secret(path: Path, data: bytes) -> None:
    atomic_write(path, data, 0o600)


def ensure_ssh_key(private: Path, comment: str) -> str:
    """Create an ed25519 key pair if absent; return the public key line.

    Crash-safe: each file is written atomically, and the public key is derived again from
    the private one whenever it is missing (a crash between the two writes), so a key pair
    is never half made and a private key is never replaced."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = private.with_suffix(".pub")
    if private.exists():
        key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
    else:
        key = Ed25519PrivateKey.generate()
        _write_secret(
            private,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            ),
        )
        public.unlink(missing_ok=True)
    os.chmod(private, 0o600)
    if not public.exists():
        pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        atomic_write(public, pub + f" {comment}\n".encode(), 0o644)
    return public.read_text().strip()


def ensure_munge_key(path: Path) -> None:
    """1024 random bytes, as `mungekey` makes them."""
    if not path.exists():
        _write_secret(path, os.urandom(1024))
    os.chmod(path, 0o600)


def qemu_user() -> tuple[int, int]:
    """uid, gid of libvirt's qemu processes (qemu.conf `user =`/`group =`, Debian's default
    libvirt-qemu), or root's when that user does not exist."""
    import grp
    import pwd
    import re

    user, group = "libvirt-qemu", "libvirt-qemu"
    try:
        text = Path("/etc/libvirt/qemu.conf").read_text()
        m = re.search(r'(?m)^\s*user\s*=\s*"([^"]+)"', text)
        user = m.group(1) if m else user
        m = re.search(r'(?m)^\s*group\s*=\s*"([^"]+)"', text)
        group = m.group(1) if m else group
    except OSError:
        pass
    try:
        uid = int(user[1:]) if user.startswith("+") else pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):
        uid = 0
    try:
        gid = int(group[1:]) if group.startswith("+") else grp.getgrnam(group).gr_gid
    except (KeyError, ValueError):
        gid = 0
    return uid, gid


def qemu_readable_copy(src: Path, dest: Path) -> Path:
    """A copy of a secret that only the qemu user can read (0400, in a 0700 folder of its own):
    qemu hands it to the guest through fw_cfg (`-fw_cfg name=...,file=dest`). Rewritten when
    the source differs."""
    data = src.read_bytes()
    if dest.exists() and dest.read_bytes() == data:
        return dest
    uid, gid = qemu_user()
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(dest.parent, 0o700)
    if os.geteuid() == 0:
        os.chown(dest.parent, uid, gid)
    atomic_write(dest, data, 0o400, owner=(uid, gid) if os.geteuid() == 0 else None)
    return dest
