"""A storage volume's bytes through libvirt's streams (virStorageVolUpload/Download): how the lab writes
and reads files of a host it reaches only through libvirt (the munge key, the templates: ADR 0016, 0026)."""

from __future__ import annotations

from typing import BinaryIO

CHUNK = 1 << 20


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
