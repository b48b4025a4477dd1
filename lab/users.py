"""A cluster's student accounts: `$SLURMLAB_HOME/clusters/<name>/secrets/users.json`, mode 0600.

    {"password": "otter-lamp-seed-violin", "password_hash": "$6$...", "account": "workshop",
     "users": [{"name": "user01", "uid": 5001}, ...], "removed": ["user07"], "next_uid": 5021}

Every student has the same password; the nodes get only its SHA-512 crypt hash (glibc's `$6$`, as
/etc/shadow holds it). UID == GID, from 5001 up; an account added later gets a uid this file never
gave before (not a removed student's). `removed` lists the accounts `slurmlab users remove` took
away, which every node deletes (nodes that join later too); adding such a name again takes it off
the list with a new uid. The password is shown where a person asks for it (create-cluster and up,
once; `slurmlab users show`), never logged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from filelock import FileLock

from lab.errors import LabError, NotFound, UsageError
from lab.spec.rules import USERS_MAX, user_name_problem
from lab.wordlist import passphrase
from lab.osutil import atomic_write
from lab.workspace import ClusterDir

ACCOUNT = "workshop"  # the Slurm account every student is in
FIRST_UID = 5001
ROUNDS = 5000  # glibc's default for $6$ (what chpasswd and `openssl passwd -6` write)


@dataclass
class User:
    name: str
    uid: int  # == gid


@dataclass
class Accounts:
    password: str
    password_hash: str
    account: str = ACCOUNT
    users: list[User] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    next_uid: int = FIRST_UID

    @property
    def names(self) -> list[str]:
        return [u.name for u in self.users]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: dict) -> Accounts:
        users = [User(str(u["name"]), int(u["uid"])) for u in d["users"]]
        next_uid = max(int(d.get("next_uid") or FIRST_UID), *(u.uid + 1 for u in users), FIRST_UID)
        return cls(password=str(d["password"]), password_hash=str(d["password_hash"]),
                   account=str(d.get("account") or ACCOUNT), users=users,
                   removed=[str(n) for n in d.get("removed", [])], next_uid=next_uid)


@dataclass
class Change:
    """What `add` or `remove` did: `changed` names; `unchanged` were already so (the command is
    idempotent: a rerun after a failed playbook pushes the same state again)."""

    accounts: Accounts
    changed: list[str]
    unchanged: list[str]
    created: bool = False  # add: the cluster had no accounts; a password was made


def hash_password(password: str) -> str:
    """SHA-512 crypt (`$6$<salt>$...`), what /etc/shadow holds and glibc's crypt(3) verifies."""
    from passlib.hash import sha512_crypt

    return sha512_crypt.using(rounds=ROUNDS).hash(password)


def verify_password(password: str, password_hash: str) -> bool:
    from passlib.hash import sha512_crypt

    return sha512_crypt.verify(password, password_hash)


def name_range(names: list[str]) -> str:
    """'user01..user20' for a run of numbered names, else the names with commas."""
    if len(names) >= 3:
        parts = [re.fullmatch(r"(.*?)(\d+)", n) for n in names]
        if all(parts) and len({(m.group(1), len(m.group(2))) for m in parts}) == 1:
            nums = [int(m.group(2)) for m in parts]
            if nums == list(range(nums[0], nums[0] + len(nums))):
                return f"{names[0]}..{names[-1]}"
    return ", ".join(names)


# ------------------------------------------------------------------------------ the file
def _path(cluster: str):
    return ClusterDir(cluster).users


def _lock(cluster: str) -> FileLock:
    path = _path(cluster)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return FileLock(str(path) + ".lock", mode=0o600)


def load(cluster: str) -> Accounts | None:
    """The cluster's accounts, None when it has none."""
    path = _path(cluster)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return Accounts.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as e:
        raise LabError(f"{path} is not a student accounts file ({e})",
                       f"remove it and add the accounts again: slurmlab users add {cluster} user01 ...") from None


def save(cluster: str, accounts: Accounts) -> None:
    cd = ClusterDir(cluster)
    cd.create()
    atomic_write(cd.users, accounts.to_json(), 0o600)


def _new(password: str | None = None) -> Accounts:
    password = password or passphrase()
    return Accounts(password=password, password_hash=hash_password(password))


def create(cluster: str, users) -> Accounts:
    """The accounts a new cluster's spec asks for (`users`: a lab.spec.LabUsers): user01.. from uid
    5001, the spec's Password or a new one of 4 words. Replaces what a cluster of the same name left."""
    acc = _new(users.Password)
    acc.users = [User(n, FIRST_UID + i) for i, n in enumerate(users.names)]
    acc.next_uid = FIRST_UID + len(acc.users)
    with _lock(cluster):
        save(cluster, acc)
    return acc


def _check_names(names: Iterable[str], verb: str) -> list[str]:
    """The names once each; UsageError listing every bad or repeated one."""
    names = list(names)
    problems, seen = [], set()
    for n in names:
        bad = user_name_problem(n)
        if bad:
            problems.append(f"{bad[0]}; {bad[1]}")
        elif n in seen:
            problems.append(f"'{n}' is named twice")
        seen.add(n)
    if not names:
        raise UsageError(f"users {verb}: no user names given", f"name them, e.g. slurmlab users {verb} CLUSTER user21")
    if problems:
        raise UsageError(f"users {verb}: {len(problems)} problem{'s' if len(problems) > 1 else ''} with the names:\n"
                         + "\n".join(f"  {p}" for p in problems), "nothing was changed; correct the names")
    return names


def add(cluster: str, names: Iterable[str]) -> Change:
    """Add accounts (new uids). A name that has one already is left as it is (reported in
    `unchanged`). A cluster without accounts gets its file, with a new password."""
    names = _check_names(names, "add")
    with _lock(cluster):
        acc = load(cluster)
        created = acc is None
        if acc is None:
            acc = _new()
        have = set(acc.names)
        new = [n for n in names if n not in have]
        if len(acc.users) + len(new) > USERS_MAX:
            raise UsageError(f"users add: {cluster} would have {len(acc.users) + len(new)} student accounts; "
                             f"at most {USERS_MAX}", "add fewer, or remove some first")
        for n in new:
            acc.users.append(User(n, acc.next_uid))
            acc.next_uid += 1
        acc.removed = [n for n in acc.removed if n not in new]
        save(cluster, acc)
    return Change(acc, new, [n for n in names if n in have], created)


def remove(cluster: str, names: Iterable[str]) -> Change:
    """Remove accounts: they go to `removed` (the nodes delete them). A name removed before is
    reported in `unchanged`; a name never known is an error and nothing changes."""
    names = _check_names(names, "remove")
    with _lock(cluster):
        acc = load(cluster)
        if acc is None:
            raise NotFound(f"cluster '{cluster}' has no student accounts", no_accounts_fix(cluster))
        have = set(acc.names)
        unknown = [n for n in names if n not in have and n not in acc.removed]
        if unknown:
            raise UsageError(f"users remove: no account named {', '.join(repr(n) for n in unknown)} in cluster "
                             f"'{cluster}'", f"nothing was changed; the accounts are: {name_range(acc.names) or '(none)'}")
        gone = [n for n in names if n in have]
        acc.users = [u for u in acc.users if u.name not in gone]
        acc.removed += [n for n in gone if n not in acc.removed]
        save(cluster, acc)
    return Change(acc, gone, [n for n in names if n not in gone])


def no_accounts_fix(cluster: str) -> str:
    return f"create the cluster with --users N, or run slurmlab users add {cluster} user01"


def inventory_vars(accounts: Accounts | None) -> dict:
    """The Ansible variables of the accounts (every play sees them; the roles make the users)."""
    if accounts is None:
        return {"slurmlab_users": [], "slurmlab_users_password_hash": "", "slurmlab_users_account": ACCOUNT,
                "slurmlab_users_removed": []}
    return {
        "slurmlab_users": [{"name": u.name, "uid": u.uid} for u in accounts.users],
        "slurmlab_users_password_hash": accounts.password_hash,
        "slurmlab_users_account": accounts.account,
        "slurmlab_users_removed": list(accounts.removed),
    }
