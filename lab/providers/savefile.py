"""libvirt's qemu save image: read its header, and copy it with another domain XML inside.

Why the lab rewrites it (docs/adr/0011): `virsh restore FILE --xml X` and virDomainSaveImageDefineXML
refuse a new name, UUID or MAC (libvirt's ABI check: "Target domain uuid ... does not match source"),
so one saved template could only ever come back as itself. The XML is not part of qemu's migration
stream; libvirt keeps it in its own header in front of the stream, and starts the new qemu from it.
A copy whose XML names another domain restores as that domain (measured on libvirt 9.0 / qemu 7.2).

The format (libvirt src/qemu/qemu_saveimage.h, QEMU_SAVE_VERSION 2), little-endian:

    0   magic "LibvirtQemudSave" (16 bytes; "LibvirtQemudPart" while libvirt is still writing it)
    16  u32 version (2)      20 u32 data_len      24 u32 was_running
    28  u32 format (0 raw)   32 u32 cookieOffset  36 u32 unused[14]
    92  data: the domain XML, NUL, (padding), the cookie at cookieOffset, NUL; data_len bytes
    92+data_len  qemu's migration stream

The new XML must fit where the old one was (before the cookie): the template's XML carries a padding
comment for that (lab/providers/templates.py). Anything but a raw version-2 image is refused with the
reason, and the caller boots the node cold instead.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"LibvirtQemudSave"
PARTIAL = b"LibvirtQemudPart"
VERSION = 2
FORMAT_RAW = 0
_HEADER = struct.Struct("<16s5I14I")
HEADER_SIZE = _HEADER.size  # 92


class SaveFormatError(Exception):
    """The file is not a save image this code knows how to rewrite; the message says why."""


@dataclass(frozen=True)
class SaveImage:
    version: int
    data_len: int
    was_running: int
    format: int
    cookie_offset: int
    xml: str
    cookie: bytes

    @property
    def xml_room(self) -> int:
        """Bytes the XML and its NUL may take (up to the cookie, else the whole data area)."""
        return self.cookie_offset or self.data_len


def parse(head: bytes) -> SaveImage:
    """The header and the data area of a save image, from its first bytes (at least 92 + data_len)."""
    if len(head) < HEADER_SIZE:
        raise SaveFormatError(f"too short for a libvirt save image ({len(head)} bytes)")
    magic, version, data_len, was_running, fmt, cookie_offset, *_ = _HEADER.unpack_from(head)
    if magic == PARTIAL:
        raise SaveFormatError("the save image is incomplete (libvirt was still writing it)")
    if magic != MAGIC:
        raise SaveFormatError(f"not a libvirt qemu save image (magic {magic!r})")
    if version != VERSION:
        raise SaveFormatError(f"save image version {version}: the lab rewrites version {VERSION} only")
    if fmt != FORMAT_RAW:
        raise SaveFormatError(f"save image format {fmt} (compressed): the lab rewrites raw images only")
    if len(head) < HEADER_SIZE + data_len:
        raise SaveFormatError(f"the header says {data_len} bytes of XML and cookie; the file is shorter")
    if cookie_offset > data_len:
        raise SaveFormatError(f"cookie offset {cookie_offset} beyond the data area ({data_len} bytes)")
    data = head[HEADER_SIZE:HEADER_SIZE + data_len]
    xml_end = data.find(b"\0")
    if xml_end < 0 or (cookie_offset and xml_end >= cookie_offset):
        raise SaveFormatError("the domain XML in the save image is not NUL-terminated before the cookie")
    cookie = data[cookie_offset:].split(b"\0", 1)[0] if cookie_offset else b""
    return SaveImage(version, data_len, was_running, fmt, cookie_offset, data[:xml_end].decode(), cookie)


def _head(f) -> bytes:
    """The header and data area from an open save image (just the first bytes if it is not one)."""
    head = f.read(HEADER_SIZE)
    if len(head) == HEADER_SIZE and head[:16] in (MAGIC, PARTIAL):
        (data_len,) = struct.unpack_from("<I", head, 20)
        head += f.read(data_len)
    return head


def head(path: Path) -> bytes:
    """The header and data area of the save image at `path` (what `with_xml` rewrites)."""
    with open(path, "rb") as f:
        return _head(f)


def read(path: Path) -> SaveImage:
    return parse(head(path))


def with_xml(head: bytes, xml: str) -> bytes:
    """The header and data area of `head` with `xml` in place of the domain XML (same total length:
    the stream behind it does not move)."""
    img = parse(head)
    new = xml.encode()
    if b"\0" in new:
        raise SaveFormatError("the new domain XML holds a NUL byte")
    if len(new) + 1 > img.xml_room:
        raise SaveFormatError(f"the new domain XML ({len(new)} bytes) does not fit the template's room "
                              f"({img.xml_room - 1} bytes); rebuild the template (slurmlab box templates --rebuild)")
    data = bytearray(head[HEADER_SIZE:HEADER_SIZE + img.data_len])
    data[:img.xml_room] = new + b"\0" * (img.xml_room - len(new))
    return head[:HEADER_SIZE] + bytes(data)


def copy_with_xml(src: Path, dst: Path, xml: str) -> int:
    """Write `dst`: `src` with `xml` as its domain XML. Returns the bytes written. The copy goes
    through a temporary name, so a crash never leaves a half image under `dst`."""
    tmp = dst.with_name(dst.name + ".part")
    with open(src, "rb") as fi:
        out = with_xml(_head(fi), xml)
        size = os.fstat(fi.fileno()).st_size
        with open(tmp, "wb") as fo:
            fo.write(out)
            pos, left = len(out), size - len(out)
            while left > 0:  # explicit offsets: the buffered read above moved the fd's own past `pos`
                n = os.copy_file_range(fi.fileno(), fo.fileno(), min(left, 1 << 30), pos, pos)
                if n <= 0:
                    break
                pos, left = pos + n, left - n
            if left:
                raise SaveFormatError(f"copying {src} stopped {left} bytes short")
    os.replace(tmp, dst)
    return size
