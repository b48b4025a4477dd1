"""The templates of a box tagged from another (`slurmlab box tag`: the same .box file added to Vagrant
under a second name): the same image, so the same templates.

Instead of building each shape's template (a boot under emulation, 40-90 s) and each role template
(template.yml, 20-45 s) again for the new name, every current template of the source box gets a copy
under the new box's key: its frozen files hard-linked (base.img, mem.save, the controller's state.qcow2;
nothing writes them), its overlay copied (a few MiB) with the backing file named anew, and meta.json
naming the new box and what it was copied from. A fork of a copy is a fork of the new box's template:
its disk is a layer over the copy's frozen disk (the key, pruning and listing are the new box's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from lab.providers import roletemplates, templates
from lab.providers.templates import Shape, TemplateError


def share(source: str, target: str, driver: str) -> list[str]:
    """Copies for box `target` of the current templates (plain and role) of box `source`, which must
    be the same image; the keys made. A copy already there is kept."""
    made = []
    role_rows = roletemplates.listing()
    for row in templates.listing():
        shape = Shape(row["cpus"], row["memory_mib"])
        if row["box"] != source or row["driver"] != driver:
            continue
        try:
            if row["key"] != templates.key(source, shape, driver):
                continue  # stale: pruned by the next box build
            k = templates.key(target, shape, driver)
        except TemplateError:
            continue
        plain = templates.Template(k, templates.root() / k)
        if not plain.is_complete():
            _copy(templates.root() / row["key"], plain.folder, links=("base.img", "mem.save"),
                  backing=plain.folder / "base.img",
                  meta={"key": k, "box": target, "box_image": str(templates.box_image(target))})
            made.append(k)
        for role_row in role_rows:
            role = role_row["role"]
            if role_row["base"] != row["key"]:
                continue
            try:
                if role_row["key"] != roletemplates.key(source, shape, driver, role):
                    continue
                rk = roletemplates.key(target, shape, driver, role)
            except TemplateError:
                continue
            if not roletemplates.RoleTemplate(rk, roletemplates.root() / rk, role).is_complete():
                _copy(roletemplates.root() / role_row["key"], roletemplates.root() / rk, links=("mem.save", "state.qcow2"),
                      backing=plain.disk, meta={"key": rk, "base": k, "box": target})
                made.append(rk)
    return made


def _copy(src: Path, dest: Path, *, links: tuple[str, ...], backing: Path, meta: dict) -> None:
    """`src`'s template files into `dest` (made whole, then renamed into place, under the build's lock)."""
    from filelock import FileLock

    with FileLock(str(dest.with_name(dest.name + ".lock"))):
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        os.chmod(part, 0o755)
        try:
            for f in links:
                if (src / f).is_file():
                    os.link(src / f, part / f)
            shutil.copyfile(src / "disk.qcow2", part / "disk.qcow2")
            r = subprocess.run(["qemu-img", "rebase", "-u", "-F", "qcow2", "-b", str(backing), str(part / "disk.qcow2")],
                               capture_output=True, text=True)
            if r.returncode:
                raise TemplateError(f"qemu-img rebase of {part / 'disk.qcow2'}: {r.stderr.strip()[-300:]}")
            st = (src / "disk.qcow2").stat()
            os.chown(part / "disk.qcow2", st.st_uid, st.st_gid)
            shutil.copystat(src / "disk.qcow2", part / "disk.qcow2")  # frozen, as the original (0444)
            doc = json.loads((src / "meta.json").read_text())
            doc.update(meta, created=time.time(), copied_from=src.name)
            (part / "meta.json").write_text(json.dumps(doc, indent=1))
            shutil.rmtree(dest, ignore_errors=True)  # an incomplete one
            os.replace(part, dest)
        finally:
            shutil.rmtree(part, ignore_errors=True)
