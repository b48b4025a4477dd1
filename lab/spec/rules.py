"""The lab's own rules, on top of HyperPod's model: what a Slurm cluster of local VMs needs.

They run on the raw request body (a dict) and tolerate parts of it being malformed, so that one
run reports every problem; the service-model check (shapes.py) reports the malformed parts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lab.paths import home

from .problems import Loc, Problem

DEFAULT_PARTITION = "dev"
DEFAULT_MAX_NODES_PER_GROUP = 64
MAX_NODES_ENV = "SLURMLAB_MAX_NODES_PER_GROUP"
HOSTNAME_MAX = 63

_LABEL = re.compile(r"[a-z0-9](-*[a-z0-9])*")
_BOX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_SERVICE_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")  # ClusterName, InstanceGroupName, PartitionName


def max_nodes_per_group() -> int:
    """The lab's sanity cap on InstanceCount: `$SLURMLAB_MAX_NODES_PER_GROUP`, else 64."""
    raw = os.environ.get(MAX_NODES_ENV, "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_MAX_NODES_PER_GROUP
    return value if value >= 1 else DEFAULT_MAX_NODES_PER_GROUP


def s3_mirror() -> Path:
    """Where an `s3://bucket/prefix` SourceS3Uri is looked for: `$SLURMLAB_HOME/s3/bucket/prefix`."""
    return home() / "s3"


# --- names -------------------------------------------------------------------------------------


def suggest_label(value: str) -> str:
    """'Workers_1' -> 'workers-1': the closest name a hostname can take."""
    s = re.sub(r"[^a-z0-9-]+", "-", value.lower())
    s = re.sub(r"-{2,}", "-", s).strip("-")
    return s or "group"


def _label_problem(value: str, kind: str) -> tuple[str, str | None] | None:
    """Why `value` cannot be part of a node's hostname / Slurm NodeName, or None if it can."""
    if _LABEL.fullmatch(value) and not (kind == "ClusterName" and value[0].isdigit()):
        return None
    bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c == "-"))})
    fix = f"use '{suggest_label(value)}'"
    why = "node names <ClusterName>-<InstanceGroupName>-<n> are hostnames"
    if bad:
        shown = " ".join(f"'{c}'" for c in bad)
        return f"'{value}': {shown} cannot be used in a hostname ({why})", fix
    if value != value.lower():
        return f"'{value}': {why}, which the lab keeps lowercase", fix
    if value.startswith("-") or value.endswith("-"):
        return f"'{value}': cannot start or end with '-' ({why})", fix
    if kind == "ClusterName" and value[0].isdigit():
        return f"'{value}': cannot start with a digit: it starts every node's hostname", f"use 'c{suggest_label(value)}'"
    return f"'{value}' cannot be used in a hostname", fix


def cluster_name_hook(value: str) -> tuple[str, str | None] | None:
    return _label_problem(value, "ClusterName")


def group_name_hook(value: str) -> tuple[str, str | None] | None:
    return _label_problem(value, "InstanceGroupName")


def partition_name_hook(value: str) -> tuple[str, str | None] | None:
    if not _SERVICE_NAME.fullmatch(value):
        bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c == "-"))})
        if bad:
            shown = " ".join(f"'{c}'" for c in bad)
            return f"'{value}': {shown} not allowed in a partition name (letters, digits and '-')", f"use '{suggest_label(value)}'"
        return f"'{value}': a partition name starts and ends with a letter or digit", f"use '{suggest_label(value)}'"
    if value.lower() == "default":
        return f"'{value}' is reserved by Slurm (PartitionName=DEFAULT sets defaults)", f"use another name, e.g. '{DEFAULT_PARTITION}'"
    return None


HOOKS = {
    "ClusterName": cluster_name_hook,
    "ClusterInstanceGroupName": group_name_hook,
    "ClusterPartitionName": partition_name_hook,
    "S3Uri": lambda value: None,  # a lab takes local folders too; see check_lifecycle
}


# --- lifecycle scripts -------------------------------------------------------------------------


def local_source(uri: str, base_dir: Path | None) -> tuple[Path | None, str | None, str | None]:
    """Resolve a SourceS3Uri to a local folder: (path, what is wrong, fix).

    Takes a path (relative ones against `base_dir`), `file://` URI, or `s3://bucket/prefix` when that
    prefix is mirrored under `$SLURMLAB_HOME/s3/`.
    """
    if uri.startswith(("s3://", "https://", "http://")):
        if uri.startswith("s3://"):
            parsed = urlparse(uri)
            mirror = s3_mirror() / parsed.netloc / parsed.path.lstrip("/")
            if parsed.netloc and mirror.is_dir():
                return mirror, None, None
            return None, (
                f"'{uri}': a lab cannot fetch from S3"
            ), f"use a local folder (a path or file:// URI), or copy the scripts to {mirror}"
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


# --- the cluster -------------------------------------------------------------------------------


def _node_type(group: Any) -> str | None:
    if isinstance(group, dict) and isinstance(group.get("SlurmConfig"), dict):
        t = group["SlurmConfig"].get("NodeType")
        return t if isinstance(t, str) else None
    return None


def _name(group: Any) -> str | None:
    if isinstance(group, dict) and isinstance(group.get("InstanceGroupName"), str):
        return group["InstanceGroupName"]
    return None


def _count(group: Any, key: str = "InstanceCount") -> int | None:
    if isinstance(group, dict):
        v = group.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _ref(i: int, group: Any) -> str:
    name = _name(group)
    return f"'{name}' (InstanceGroups[{i}])" if name else f"InstanceGroups[{i}]"


def check_cluster(
    data: dict, *, base_dir: Path | None, max_nodes: int, check_files: bool = True
) -> tuple[list[Problem], dict]:
    """The lab's rules for a whole cluster. Returns the problems and a copy of `data` whose local
    lifecycle paths are absolute. `check_files=False` leaves the lifecycle folders unchecked."""
    problems: list[Problem] = []
    out = dict(data)

    # Orchestrator: Slurm only (absent means Slurm: the lab builds nothing else).
    orch = data.get("Orchestrator")
    if isinstance(orch, dict):
        if "Eks" in orch:
            problems.append(Problem(("Orchestrator", "Eks"), "the lab builds Slurm clusters only", "use Orchestrator: {Slurm: {SlurmConfigStrategy: Managed}}"))
        elif "Slurm" not in orch:
            problems.append(Problem(("Orchestrator",), "names no orchestrator", "use Orchestrator: {Slurm: {SlurmConfigStrategy: Managed}}, or leave Orchestrator out"))

    # The lab's own key.
    if "Lab" in data:
        problems += check_lab(data["Lab"], data.get("InstanceGroups"))

    groups = data.get("InstanceGroups")
    if "InstanceGroups" not in data:
        problems.append(Problem(("InstanceGroups",), "missing: a Slurm cluster needs at least a Controller group", "add InstanceGroups with a group whose SlurmConfig.NodeType is Controller"))
        return problems, out
    if not isinstance(groups, list):
        return problems, out

    cluster = data.get("ClusterName")
    cluster_ok = isinstance(cluster, str) and cluster_name_hook(cluster) is None and len(cluster) <= HOSTNAME_MAX
    digits = len(str(max_nodes))
    seen: dict[str, int] = {}
    new_groups = list(groups)

    for i, g in enumerate(groups):
        loc: Loc = ("InstanceGroups", i)
        if not isinstance(g, dict):
            continue
        name = _name(g)
        # duplicate names
        if name is not None:
            if name in seen:
                j = seen[name]
                problems.append(Problem(loc + ("InstanceGroupName",), f"'{name}' is also the name of InstanceGroups[{j}]", "give every instance group its own name"))
            else:
                seen[name] = i
        # node names must stay hostnames
        if name is not None and cluster_ok and group_name_hook(name) is None:
            longest = f"{cluster}-{name}-{'9' * digits}"
            if len(longest) > HOSTNAME_MAX:
                problems.append(Problem(
                    loc + ("InstanceGroupName",),
                    f"node names like '{longest}' would be {len(longest)} characters; a hostname has at most {HOSTNAME_MAX}",
                    f"shorten ClusterName or InstanceGroupName by {len(longest) - HOSTNAME_MAX}",
                ))
        # instance type: exactly one of InstanceType / InstanceRequirements
        has_type, has_req = "InstanceType" in g, "InstanceRequirements" in g
        if not has_type and not has_req:
            problems.append(Problem(loc + ("InstanceType",), "missing: the lab sizes each VM by its instance type", "add InstanceType, e.g. InstanceType: ml.c5.large"))
        elif has_type and has_req:
            problems.append(Problem(loc + ("InstanceRequirements",), "InstanceType and InstanceRequirements cannot both be given", "keep one of them"))
        # Slurm role
        node_type = _node_type(g)
        if "SlurmConfig" not in g:
            problems.append(Problem(
                loc + ("SlurmConfig",),
                "missing: the lab needs each group's Slurm role (provisioning_parameters.json is not supported)",
                "add SlurmConfig: {NodeType: Compute} (or Controller, or Login)",
            ))
        count = _count(g)
        if count is not None and count > max_nodes and node_type != "Controller":
            problems.append(Problem(
                loc + ("InstanceCount",),
                f"{count} is more than the lab's limit of {max_nodes} nodes per group",
                f"lower it, or raise the limit with {MAX_NODES_ENV}",
            ))
        min_count = _count(g, "MinInstanceCount")
        if count is not None and min_count is not None and min_count > count:
            problems.append(Problem(loc + ("MinInstanceCount",), f"{min_count} is more than InstanceCount ({count})", f"use at most {count}"))
        if node_type == "Controller":
            if count is not None and count != 1:
                problems.append(Problem(loc + ("InstanceCount",), f"the Controller group must have exactly 1 instance, not {count} (the lab runs one slurmctld, no backup controllers)", "set InstanceCount: 1"))
            if min_count is not None and min_count != 1:
                problems.append(Problem(loc + ("MinInstanceCount",), f"the Controller group's MinInstanceCount must be 1, not {min_count}", "set it to 1, or leave it out"))
        if node_type == "Login" and count == 0:
            problems.append(Problem(loc + ("InstanceCount",), "a Login group needs at least 1 instance (the cluster waits for one login node)", "set InstanceCount: 1, or remove the group"))
        sc = g.get("SlurmConfig")
        if node_type in ("Controller", "Login") and isinstance(sc, dict) and sc.get("PartitionNames"):
            problems.append(Problem(loc + ("SlurmConfig", "PartitionNames"), f"only Compute groups belong to partitions, this is a {node_type} group", "remove PartitionNames"))
        # lifecycle scripts
        if "LifeCycleConfig" in g and check_files:
            lp, uri = check_lifecycle(g["LifeCycleConfig"], loc + ("LifeCycleConfig",), base_dir)
            problems += lp
            if uri is not None and uri != g["LifeCycleConfig"].get("SourceS3Uri"):
                new_groups[i] = {**g, "LifeCycleConfig": {**g["LifeCycleConfig"], "SourceS3Uri": uri}}

    out["InstanceGroups"] = new_groups

    # Exactly one Controller group, at most one Login group.
    for role, limit in (("Controller", 1), ("Login", 1)):
        idx = [i for i, g in enumerate(groups) if _node_type(g) == role]
        if role == "Controller" and not idx and groups:
            problems.append(Problem(("InstanceGroups",), "no group has SlurmConfig.NodeType: Controller", "add a group with SlurmConfig.NodeType: Controller and InstanceCount: 1"))
        if len(idx) > limit:
            refs = [_ref(i, groups[i]) for i in idx]
            names = ", ".join(refs[:-1]) + " and " + refs[-1]
            both = "both" if len(idx) == 2 else "all"
            if role == "Controller":
                why, fix = "a cluster has exactly one", "make the others Login or Compute groups"
            else:
                why, fix = "the lab allows one Login group", "put all login nodes in one group (raise its InstanceCount)"
            for i in idx[limit:]:
                problems.append(Problem(("InstanceGroups", i, "SlurmConfig", "NodeType"), f"{names} are {both} {role} groups; {why}", fix))
    return problems, out


# --- the lab's own key: Lab -------------------------------------------------------------------

LAB_KEYS = ("Box", "Users", "Gpus")
USERS_KEYS = ("Count", "Prefix", "Password")
USERS_MAX = 200
USER_PREFIX = "user"
USER_NAME_MAX = 32  # useradd's limit, and what `ls -l` shows in full
PASSWORD_MIN = 8
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]*")
# Names a student account must not take: Debian's system users and groups (a student's group has
# the student's name), and the users the lab's own services run as.
RESERVED_USER_NAMES = frozenset("""
root daemon bin sys sync games man lp mail news uucp proxy www-data backup list irc gnats nobody nogroup
adm tty disk kmem dialout fax voice cdrom floppy tape sudo audio dip operator src shadow utmp video sasl
plugdev staff users input sgx kvm render netdev crontab messagebus polkitd sshd _apt _rpc statd tss
dnsmasq avahi ntp chrony _chrony systemd-journal systemd-network systemd-resolve systemd-timesync
systemd-coredump slurm munge mysql mariadb vagrant libvirt-qemu admin ubuntu debian
""".split())


def user_names(prefix: str, count: int) -> list[str]:
    """`<prefix>NN` for 1..count, zero-padded to 2 digits (3 when count > 99): user01..user20."""
    width = 3 if count > 99 else 2
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def user_name_problem(name: Any, *, what: str = "user name") -> tuple[str, str] | None:
    """Why `name` cannot be a student's Linux and Slurm user name, or None if it can."""
    if not isinstance(name, str):
        return f"{name!r} is not a {what}", "use lower-case letters, digits, '_' and '-', e.g. 'user01'"
    if not _USER_NAME.fullmatch(name):
        fixed = re.sub(r"[^a-z0-9_-]+", "", name.lower())
        if fixed and not _USER_NAME.fullmatch(fixed):
            fixed = "u" + fixed
        hint = f"use '{fixed}'" if fixed else "use e.g. 'user'"
        return (f"'{name}' is not a valid {what}: lower-case letters, digits, '_' and '-', starting with a "
                "letter or '_' (Linux and Slurm user names)", hint)
    if len(name) > USER_NAME_MAX:
        return f"'{name}' has {len(name)} characters; a user name has at most {USER_NAME_MAX}", "use a shorter one"
    if name in RESERVED_USER_NAMES or name.startswith("systemd-"):
        return f"'{name}' is a system account's name", "use another, e.g. 'user' or 'student'"
    return None


def user_count_problem(value: Any) -> tuple[str, str] | None:
    """Why `value` is not a number of student accounts, or None."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= USERS_MAX:
        return None
    return f"{value!r} is not a user count from 1 to {USERS_MAX}", f"give a whole number from 1 to {USERS_MAX}"


def password_problem(value: Any) -> tuple[str, str] | None:
    """Why `value` cannot be the students' shared password, or None."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}", "quote it, e.g. Password: 'correct-horse-battery'"
    if len(value) < PASSWORD_MIN:
        return (f"a password of {len(value)} characters is too short (at least {PASSWORD_MIN})",
                "use a longer one, or leave Password out and the lab makes one of 4 words")
    if ":" in value or "\n" in value or "\r" in value:
        return "a password cannot contain ':' or a line break (chpasswd reads name:password lines)", "choose another"
    return None


def check_users(users: Any) -> list[Problem]:
    """Lab.Users: a count (`Users: 20`) or {Count, Prefix, Password}."""
    loc: Loc = ("Lab", "Users")
    if isinstance(users, int) and not isinstance(users, bool):
        bad = user_count_problem(users)
        return [Problem(loc, *bad)] if bad else []
    if not isinstance(users, dict):
        return [Problem(loc, f"expected a count or a mapping, got {type(users).__name__}",
                        "use e.g. Users: 20, or Users: {Count: 20, Prefix: user, Password: '...'}")]
    problems: list[Problem] = []
    for key in users:
        if key not in USERS_KEYS:
            problems.append(Problem(loc + (str(key),), f"unknown field: Users has {', '.join(USERS_KEYS)}", "remove it"))
    count = users.get("Count")
    if "Count" not in users:
        problems.append(Problem(loc + ("Count",), "missing: how many student accounts", "add Count: 20"))
        count = None
    elif (bad := user_count_problem(count)) is not None:
        problems.append(Problem(loc + ("Count",), *bad))
        count = None
    if "Prefix" in users:
        prefix = users["Prefix"]
        bad = user_name_problem(prefix, what="user name prefix")
        if bad is not None:
            problems.append(Problem(loc + ("Prefix",), *bad))
        elif count is not None and len(longest := user_names(prefix, count)[-1]) > USER_NAME_MAX:
            problems.append(Problem(loc + ("Prefix",), f"names like '{longest}' would have {len(longest)} characters; "
                                    f"a user name has at most {USER_NAME_MAX}", "use a shorter prefix"))
    if "Password" in users and (bad := password_problem(users["Password"])) is not None:
        problems.append(Problem(loc + ("Password",), *bad))
    return problems


def _group_types(group: dict) -> list[str]:
    if isinstance(group.get("InstanceType"), str):
        return [group["InstanceType"]]
    req = group.get("InstanceRequirements")
    types = req.get("InstanceTypes") if isinstance(req, dict) else None
    return [t for t in types if isinstance(t, str)] if isinstance(types, list) else []


def check_gpus(gpus: Any, groups: Any) -> list[Problem]:
    """Lab.Gpus: Compute group name -> emulated GPUs per node, 1..the instance type's real count."""
    from .catalog import gpu_count
    from .shapes import INSTANCE_TYPES

    if not isinstance(gpus, dict):
        return [Problem(("Lab", "Gpus"), f"expected a mapping, got {type(gpus).__name__}",
                        "use e.g. Gpus: {gpu: 2} (instance group name -> GPUs per node)")]
    by_name = {_name(g): g for g in groups if _name(g) is not None} if isinstance(groups, list) else {}
    problems: list[Problem] = []
    for gname, value in gpus.items():
        loc: Loc = ("Lab", "Gpus", str(gname))
        g = by_name.get(gname)
        if g is None:
            if isinstance(groups, list):  # else InstanceGroups itself is reported
                known = ", ".join(n for n, x in by_name.items() if _node_type(x) == "Compute") or "(none)"
                problems.append(Problem(loc, f"no instance group named '{gname}'", f"use a Compute group: {known}"))
            continue
        node_type = _node_type(g)
        if node_type is not None and node_type != "Compute":
            problems.append(Problem(loc, f"'{gname}' is a {node_type} group; only Compute groups run jobs on GPUs",
                                    "remove it, or name a Compute group"))
            continue
        types = _group_types(g)
        if not types or types[0] not in INSTANCE_TYPES:
            continue  # the instance type's own problem is reported
        itype = types[0]  # the type the lab launches (InstanceRequirements: the first)
        real = gpu_count(itype)
        if real == 0:
            problems.append(Problem(loc, f"{itype} has no GPUs; only GPU instance types (ml.g5.*, ml.p4d.*, ...) "
                                    "can have Gpus", f"remove it, or give group '{gname}' a GPU instance type"))
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= real:
            more = isinstance(value, int) and not isinstance(value, bool) and value > real
            what = (f"{value} is more than the {real} GPU{'s' if real != 1 else ''} of {itype}" if more
                    else f"{value!r} is not a GPU count from 1 to {real} ({itype} has {real})")
            problems.append(Problem(loc, what, f"use 1 to {real}, or leave the group out for {real}"))
    return problems


def check_lab(lab: Any, groups: Any = None) -> list[Problem]:
    """The lab-only key `Lab`; `groups` is the request's InstanceGroups (Lab.Gpus names them)."""
    if not isinstance(lab, dict):
        return [Problem(("Lab",), f"expected a mapping, got {type(lab).__name__}", "use e.g. Lab: {Box: slurmlab/trixie-slurm}")]
    problems: list[Problem] = []
    for key, value in lab.items():
        if key == "Box":
            if not isinstance(value, str) or not _BOX.fullmatch(value):
                problems.append(Problem(("Lab", "Box"), f"{value!r} is not a Vagrant box name", "use a name like 'slurmlab/trixie-slurm'"))
        elif key == "Users":
            problems += check_users(value)
        elif key == "Gpus":
            problems += check_gpus(value, groups)
        else:
            problems.append(Problem(("Lab", str(key)), f"unknown field: the lab's own settings are: {', '.join(LAB_KEYS)}", "remove it"))
    return problems
