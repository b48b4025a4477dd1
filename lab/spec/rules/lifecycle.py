"""Lifecycle scripts: a LifeCycleConfig's SourceS3Uri resolved to a local folder, its scripts found."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lab.paths import home

from ..problems import Loc, Problem


def s3_mirror() -> Path:
    """Where an `s3://bucket/prefix` SourceS3Uri is looked for: `$SLURMLAB_HOME/s3/bucket/prefix`."""
    return home() / "s3"


def local_source(uri: str, base_dir: Path | None) -> tuple[Path | None, str | None, str | None]:
    """Resolve a SourceS3Uri to a local folder: (path, what is wrong, fix).

    Takes a path (relative ones against `base_dir`), `file://` URI, or `s3://bucket/prefix` when that
    prefix is under `$SLURMLAB_HOME/s3/` (where `slurmlab serve`'s S3 keeps what `aws s3 sync` uploads).
    """
    if uri.startswith(("s3://", "https://", "http://")):
        if uri.startswith("s3://"):
            parsed = urlparse(uri)
            mirror = s3_mirror() / parsed.netloc / parsed.path.lstrip("/")
            if parsed.netloc and mirror.is_dir():
                return mirror, None, None
            return None, (
                f"'{uri}': nothing under that prefix in the lab's S3 ({mirror})"
            ), (f"upload the scripts first: aws s3 sync ./lifecycle {uri} --endpoint-url <slurmlab serve's URL> "
                "(or copy them to that folder), or use a local folder (a path or file:// URI)")
        return None, f"'{uri}': a lab cannot fetch lifecycle scripts over the network", "use a local folder (a path or file:// URI)"
    if uri.startswith("file:"):
        parsed = urlparse(uri)
        raw = unquote(parsed.path)
        if parsed.netloc and parsed.netloc != "localhost":
            raw = parsed.netloc + raw  # file://relative/dir: a friendly reading of a common mistake
    else:
        raw = uri
    if not raw:
        return None, "empty path", "name the folder that holds the lifecycle scripts"
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        if base_dir is None:
            return None, f"'{uri}': a relative path needs a spec file to be relative to", "use an absolute path"
        path = base_dir / path
    path = Path(os.path.normpath(path))
    if not path.exists():
        return None, f"folder {path} does not exist", "create it, or point SourceS3Uri at the folder with your lifecycle scripts"
    if not path.is_dir():
        return None, f"{path} is not a folder", "point SourceS3Uri at the folder that holds the scripts, and name the script in OnCreate"
    return path, None, None


def absolute_uri(uri: str, path: Path) -> str:
    """The same kind of reference as `uri`, made absolute (s3:// is kept as given)."""
    if uri.startswith("s3://"):
        return uri
    if uri.startswith("file:"):
        return path.as_uri()
    return str(path)


def check_lifecycle(lc: Any, loc: Loc, base_dir: Path | None) -> tuple[list[Problem], str | None]:
    """Problems of one LifeCycleConfig, and its SourceS3Uri made absolute (None if unusable)."""
    problems: list[Problem] = []
    if not isinstance(lc, dict):
        return problems, None
    uri = lc.get("SourceS3Uri")
    scripts = [k for k in ("OnCreate", "OnInitComplete") if isinstance(lc.get(k), str)]
    if "SourceS3Uri" not in lc:
        problems.append(Problem(loc + ("SourceS3Uri",), "missing: the folder that holds the lifecycle scripts", "add SourceS3Uri: ./lifecycle (a path relative to the spec file)"))
    if "OnCreate" not in lc and "OnInitComplete" not in lc:
        problems.append(Problem(loc + ("OnCreate",), "missing: the script to run on each new node", "add OnCreate: on_create.sh"))
    if not isinstance(uri, str):
        return problems, None
    folder, what, fix = local_source(uri, base_dir)
    if folder is None:
        problems.append(Problem(loc + ("SourceS3Uri",), what or "unusable", fix))
        return problems, None
    for key in scripts:
        name = lc[key]
        target = Path(os.path.normpath(folder / name))
        if Path(name).is_absolute() or not target.is_relative_to(folder):
            problems.append(Problem(loc + (key,), f"'{name}' is outside the SourceS3Uri folder", "name a script inside that folder, relative to it"))
        elif not target.is_file():
            present = sorted(p.name for p in folder.iterdir() if p.is_file())[:8]
            hint = f" (it has: {', '.join(present)})" if present else " (it is empty)"
            problems.append(Problem(loc + (key,), f"no file '{name}' in {folder}{hint}", "create the script, or fix the name"))
    return problems, absolute_uri(uri, folder)


