"""A storage volume's bytes through libvirt's streams (virStorageVolUpload/Download): how the lab writes
and reads files of a host it reaches only through libvirt (the munge key, the templates: ADR 0016, 0026)."""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

CHUNK = 1 << 20


def kept_or_new(pool, name: str, size: int, owner: tuple[int, int], mode: int, holds: Callable[[object], bool]):
    """The pool's volume `name` when `holds(vol)` says it has the right bytes already, else a new raw
    volume of `size` bytes owned by `owner` (uid, gid) with `mode` (one of that name deleted first):
    (the volume, whether it is new and must be written)."""
    import libvirt

    try:
        vol = pool.storageVolLookupByName(name)
        if holds(vol):
            return vol, False
        vol.delete(0)
    except libvirt.libvirtError:
        pass
    vol = pool.createXML(f"<volume><name>{name}</name><capacity unit='bytes'>{size}</capacity>"
                         f"<target><format type='raw'/><permissions><mode>{mode:04o}</mode><owner>{owner[0]}</owner>"
                         f"<group>{owner[1]}</group></permissions></target></volume>", 0)
    return vol, True


def read(conn, vol, length: int, offset: int = 0) -> bytes:
    """`length` bytes of `vol` from `offset` (fewer if the volume ends first)."""
    st = conn.newStream(0)
    vol.download(st, offset, length, 0)
    data = b""
    while len(data) < length:
        got = st.recv(length - len(data))
        if not isinstance(got, bytes) or not got:
            break
        data += got
    st.finish()
    return data


def receive_file(conn, vol, f: BinaryIO) -> int:
    """The whole volume's bytes written to `f`; how many."""
    st = conn.newStream(0)
    vol.download(st, 0, 0, 0)
    n = 0
    while True:
        got = st.recv(CHUNK)
        if not isinstance(got, bytes):
            st.abort()
            raise OSError(f"{vol.name()}: the stream failed ({got!r})")
        if not got:
            break
        f.write(got)
        n += len(got)
    st.finish()
    return n


def send(conn, vol, offset: int, data: bytes) -> None:
    """`data` written into `vol` at `offset`."""
    send_file(conn, vol, offset, len(data), _Bytes(data))


def send_file(conn, vol, offset: int, length: int, f: BinaryIO | _Bytes) -> None:
    """`length` bytes read from `f` written into `vol` at `offset`. OSError when `f` ends first."""
    if length <= 0:
        return
    st = conn.newStream(0)
    vol.upload(st, offset, length, 0)
    left = length
    while left > 0:
        chunk = f.read(min(CHUNK, left))
        if not chunk:
            st.abort()
            raise OSError(f"{vol.name()}: the local file ended {left} bytes short")
        view = memoryview(chunk)
        while view:
            n = st.send(view.tobytes())
            if not isinstance(n, int) or n <= 0:
                st.abort()
                raise OSError(f"{vol.name()}: the stream took no bytes ({n!r})")
            view = view[n:]
        left -= len(chunk)
    st.finish()


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out
