"""Students of a workshop server (`slurmlab serve --auth`): an access key pair and a quota each, and
which student owns which cluster.

    $SLURMLAB_HOME/students.json   0600, written atomically under students.lock:
        {"Version": 1,
         "Students": {"alice": {"Name", "AccessKeyId", "Secret": <Fernet token>, "Instructor", "Quota", "Created"}},
         "Owners": {"<cluster name>": {"Student": "alice", "Created": <the cluster's creation time>}}}
    $SLURMLAB_HOME/students.key    0600: the Fernet key the secrets are encrypted with

SigV4 needs the secret itself on the server (it recomputes the HMAC), so a hash cannot be kept: the
secret is encrypted with a per-lab key kept in another file. docs/adr/0009-students-and-sigv4.md
says what that protects against and what it does not. No secret is logged; the CLI prints a
new pair once.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import string
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lab.errors import Conflict, LabError, NotFound, UsageError
from lab.osutil import atomic_write
from lab.paths import home

FILE = "students.json"
KEY_FILE = "students.key"
LOCK_FILE = "students.lock"
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,31}")
NAME_FIX = "use 1 to 32 characters: lower-case letters, digits and '-', starting with a letter (e.g. alice, team-3)"
KEY_ALPHABET = string.ascii_uppercase + "234567"  # AWS key ids: AKIA + 16 of these


class Limits(BaseModel):
    """What one student may hold at once (None: no limit)."""

    model_config = ConfigDict(extra="forbid")
    MaxClusters: int | None = Field(default=2, ge=0)
    MaxNodes: int | None = Field(default=8, ge=0)  # the sum of InstanceCount over the groups of all their clusters
    MaxMemoryMiB: int | None = Field(default=8192, ge=0)  # nodes x their instance type's memory (lab.spec.Catalog)


class Student(BaseModel):
    model_config = ConfigDict(extra="forbid")
    Name: str
    AccessKeyId: str
    Secret: str = Field(repr=False)  # the secret access key, Fernet-encrypted with students.key
    Instructor: bool = False
    Quota: Limits = Field(default_factory=Limits)
    Created: float = 0.0

    def public(self) -> dict:
        """What `students list` shows: everything but the secret."""
        return {"Name": self.Name, "AccessKeyId": self.AccessKeyId, "Instructor": self.Instructor,
                "Quota": self.Quota.model_dump(), "Created": self.Created}


class Owner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    Student: str
    Created: float  # the cluster's creation time: a later cluster of the same name is not theirs


class StudentsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    Version: int = 1
    Students: dict[str, Student] = {}
    Owners: dict[str, Owner] = {}


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise UsageError(f"student name {name!r}: not a valid name", NAME_FIX)


def new_key_pair() -> tuple[str, str]:
    """(access key id, secret access key) shaped like AWS's: AKIA + 16 characters, and 40 characters."""
    akid = "AKIA" + "".join(secrets.choice(KEY_ALPHABET) for _ in range(16))
    secret = "".join(secrets.choice(string.ascii_letters + string.digits + "+/") for _ in range(40))
    return akid, secret


class Registry:
    """The students file of one lab home. Every change is a read-modify-write under a file lock (the
    CLI and the server may both write); reads are cached until the file changes."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else home()
        self.path = self.root / FILE
        self.key_path = self.root / KEY_FILE
        self.quota_lock = threading.Lock()  # the server: one quota check-and-act at a time
        self._cache: tuple[tuple[int, int, int], StudentsFile] | None = None
        self._fernet = None

    # ---------------------------------------------------------------- file
    def _lock(self):
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / LOCK_FILE))

    def load(self) -> StudentsFile:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return StudentsFile()
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # atomic_write: a new inode each time
        if self._cache and self._cache[0] == stamp:
            return self._cache[1]
        try:
            data = StudentsFile.model_validate_json(self.path.read_bytes())
        except (ValidationError, ValueError) as e:
            raise LabError(f"{self.path}: not a students file ({str(e).splitlines()[0][:200]})",
                           "restore it from a backup, or remove it and add the students again") from None
        self._cache = (stamp, data)
        return data

    def _save(self, data: StudentsFile) -> None:
        atomic_write(self.path, json.dumps(data.model_dump(), indent=1, sort_keys=True) + "\n", 0o600)
        self._cache = None

    def _cipher(self):
        from cryptography.fernet import Fernet

        if self._fernet is None:
            if not self.key_path.exists():
                with self._lock():
                    if not self.key_path.exists():
                        atomic_write(self.key_path, Fernet.generate_key(), 0o600)
            os.chmod(self.key_path, 0o600)
            self._fernet = Fernet(self.key_path.read_bytes().strip())
        return self._fernet

    # ---------------------------------------------------------------- students
    def students(self) -> list[Student]:
        return sorted(self.load().Students.values(), key=lambda s: s.Name)

    def get(self, name: str) -> Student:
        s = self.load().Students.get(name)
        if s is None:
            raise NotFound(f"no student named '{name}'", "slurmlab students list shows them; slurmlab students add NAME adds one")
        return s

    def add(self, name: str, quota: Limits | None = None, instructor: bool = False) -> tuple[Student, str]:
        """A new student with a new key pair: (the student, the secret in clear, to show once)."""
        check_name(name)
        cipher = self._cipher()
        with self._lock():
            data = self.load()
            if name in data.Students:
                raise Conflict(f"a student named '{name}' already exists (access key {data.Students[name].AccessKeyId})",
                               "pick another name, or `slurmlab students remove` that one first")
            taken = {s.AccessKeyId for s in data.Students.values()}
            akid, secret = new_key_pair()
            while akid in taken:
                akid, secret = new_key_pair()
            s = Student(Name=name, AccessKeyId=akid, Secret=cipher.encrypt(secret.encode()).decode(), Instructor=instructor,
                        Quota=quota or Limits(), Created=round(time.time(), 3))
            self._save(data.model_copy(update={"Students": {**data.Students, name: s}}))
        return s, secret

    def remove(self, name: str) -> Student:
        """The student and their key are gone (their clusters stay, visible to the instructor)."""
        with self._lock():
            data = self.load()
            s = data.Students.get(name)
            if s is None:
                self.get(name)  # raises NotFound
            self._save(data.model_copy(update={"Students": {k: v for k, v in data.Students.items() if k != name}}))
        return s

    def set_quota(self, name: str, **limits: int | None) -> Student:
        """Replace the limits given (a value of None is kept; -1 means no limit)."""
        with self._lock():
            data = self.load()
            s = self.get(name)
            given = {k: (None if v < 0 else v) for k, v in limits.items() if v is not None}
            try:
                quota = Limits(**{**s.Quota.model_dump(), **given})
            except ValidationError as e:
                raise UsageError(f"quota of '{name}': {str(e).splitlines()[0]}", "give whole numbers >= 0 (-1: no limit)") from None
            s = s.model_copy(update={"Quota": quota})
            self._save(data.model_copy(update={"Students": {**data.Students, name: s}}))
        return s

    def by_key(self, access_key_id: str) -> Student | None:
        for s in self.load().Students.values():
            if secrets.compare_digest(s.AccessKeyId, access_key_id):
                return s
        return None

    def secret_of(self, s: Student) -> str:
        from cryptography.fernet import InvalidToken

        try:
            return self._cipher().decrypt(s.Secret.encode()).decode()
        except InvalidToken:
            raise LabError(f"the secret of student '{s.Name}' cannot be decrypted with {self.key_path}",
                           "the key file was replaced: `slurmlab students remove` and `add` the student again") from None

    # ---------------------------------------------------------------- ownership
    def owner(self, cluster: str, created: float) -> str | None:
        o = self.load().Owners.get(cluster)
        return o.Student if o is not None and abs(o.Created - created) < 1e-3 else None

    def set_owner(self, cluster: str, created: float, student: str) -> None:
        with self._lock():
            data = self.load()
            owners = {**data.Owners, cluster: Owner(Student=student, Created=created)}
            self._save(data.model_copy(update={"Owners": owners}))

    def forget_owners(self, keep: set[str]) -> None:
        """Drop the owners of clusters that are gone (names not in `keep`)."""
        with self._lock():
            data = self.load()
            if set(data.Owners) - keep:
                self._save(data.model_copy(update={"Owners": {k: v for k, v in data.Owners.items() if k in keep}}))
