"""Typed errors. Each carries the fix a person should apply; the CLI maps them to exit codes."""

from __future__ import annotations


class LabError(Exception):
    """Base error: `message` says what is wrong, `fix` says how to fix it."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class UsageError(LabError):
    exit_code = 2


class SpecError(UsageError):
    """A bad cluster spec or capacity file: nothing was created."""


class NotFound(LabError):
    exit_code = 3


class Conflict(LabError):
    """A name clash or a resource in use."""

    exit_code = 4


class HostError(LabError):
    """The host lacks something (a package, root, space, libvirt)."""

    exit_code = 5


class CommandFailed(LabError):
    """A subprocess (vagrant, virsh, mmdebstrap, ansible) failed."""

    exit_code = 6

    def __init__(self, cmd: list[str], returncode: int, output: str, fix: str | None = None):
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"command failed ({returncode}): {' '.join(cmd)}\n{tail}", fix)
        self.cmd = cmd
        self.returncode = returncode
        self.output = output
