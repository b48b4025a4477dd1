"""The lab's own top-level key `Lab`: Box, Users (student accounts), Gpus (emulated GPUs), Start
(Warm: nodes forked from a saved template; Cold: booted; docs/adr/0011) and NodeEnvironment (Lab, or
HyperPod: nodes shaped like HyperPod's for its lifecycle scripts; docs/adr/0015), Jupyter and
RoleTemplates (false: every node fully configured; docs/adr/0022)."""

from __future__ import annotations

import re
from typing import Any

from ..problems import Loc, Problem

_BOX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")

LAB_KEYS = ("Box", "Users", "Gpus", "Start", "NodeEnvironment", "Jupyter", "RoleTemplates")
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
    from ..catalog import gpu_count
    from .names import group_name, node_type_of
    from ..servicemodel import instance_types

    if not isinstance(gpus, dict):
        return [Problem(("Lab", "Gpus"), f"expected a mapping, got {type(gpus).__name__}",
                        "use e.g. Gpus: {gpu: 2} (instance group name -> GPUs per node)")]
    by_name = {group_name(g): g for g in groups if group_name(g) is not None} if isinstance(groups, list) else {}
    problems: list[Problem] = []
    for gname, value in gpus.items():
        loc: Loc = ("Lab", "Gpus", str(gname))
        g = by_name.get(gname)
        if g is None:
            if isinstance(groups, list):  # else InstanceGroups itself is reported
                known = ", ".join(n for n, x in by_name.items() if node_type_of(x) == "Compute") or "(none)"
                problems.append(Problem(loc, f"no instance group named '{gname}'", f"use a Compute group: {known}"))
            continue
        node_type = node_type_of(g)
        if node_type is not None and node_type != "Compute":
            problems.append(Problem(loc, f"'{gname}' is a {node_type} group; only Compute groups run jobs on GPUs",
                                    "remove it, or name a Compute group"))
            continue
        types = _group_types(g)
        if not types or types[0] not in instance_types():
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


def _is_login(group: Any) -> bool:
    from .names import node_type_of

    return node_type_of(group) == "Login"


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
        elif key == "Start":
            if value not in ("Warm", "Cold"):
                problems.append(Problem(("Lab", "Start"), f"{value!r} is not a way to start nodes",
                                        "use Warm (forked from a saved template, the default) or Cold (booted)"))
        elif key == "NodeEnvironment":
            if value not in ("Lab", "HyperPod"):
                problems.append(Problem(("Lab", "NodeEnvironment"), f"{value!r} is not a node environment",
                                        "use Lab (the default) or HyperPod (nodes shaped like HyperPod's for its "
                                        "lifecycle scripts: docs/hyperpod-nodes.md)"))
        elif key == "Jupyter":
            if not isinstance(value, bool):
                problems.append(Problem(("Lab", "Jupyter"), f"{value!r} is not true or false",
                                        "use true (JupyterHub on the login nodes) or leave it out"))
            elif value and isinstance(groups, list) and not any(_is_login(g) for g in groups):
                problems.append(Problem(("Lab", "Jupyter"), "JupyterHub runs on a login node and the cluster has none",
                                        "add an instance group with SlurmConfig: {NodeType: Login}, or leave Jupyter out"))
        elif key == "RoleTemplates":
            if not isinstance(value, bool):
                problems.append(Problem(("Lab", "RoleTemplates"), f"{value!r} is not true or false",
                                        "use false (every node fully configured by its role) or leave it out"))
        else:
            problems.append(Problem(("Lab", str(key)), f"unknown field: the lab's own settings are: {', '.join(LAB_KEYS)}", "remove it"))
    return problems
