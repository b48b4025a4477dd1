"""Per-cluster secrets: an SSH key pair and a munge key. Mode 0600, created once, never logged."""

from __future__ import annotations

import os
from pathlib import Path


def _write_secret(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def ensure_ssh_key(private: Path, comment: str) -> str:
    """Create an ed25519 key pair if absent; return the public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = private.with_suffix(".pub")
    if not private.exists():
        key = Ed25519PrivateKey.generate()
        _write_secret(
            private,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            ),
        )
        pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        public.write_bytes(pub + f" {comment}\n".encode())
    os.chmod(private, 0o600)
    return public.read_text().strip()


def ensure_munge_key(path: Path) -> None:
    """1024 random bytes, as `mungekey` makes them."""
    if not path.exists():
        _write_secret(path, os.urandom(1024))
    os.chmod(path, 0o600)
