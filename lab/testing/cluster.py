"""`LabCluster`: a running lab cluster as a test uses it, by name, in the lab home of the environment
($SLURMLAB_HOME): commands on its nodes (as a user), batch jobs, testinfra hosts, a boto3 client, and a
checkpoint to go back to."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from lab.testing.jobs import Job

READY_TAG = "pytest-ready"  # the checkpoint the plugin takes when the cluster is ready; reset() restores it


class CommandFailed(AssertionError):
    """A command on a node exited non-zero (an AssertionError: pytest shows it as a failed check)."""


def lab(*args: str, timeout: float = 3600, stream: bool = False) -> subprocess.CompletedProcess:
    """`slurmlab ARGS` as a user runs it (this interpreter's package). `stream`: its stderr (the progress)
    goes to this process's stderr as it comes; else both are captured."""
    cmd = [sys.executable, "-m", "lab", *args]
    if stream:
        return subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _sbatch_options(options: dict) -> list[str]:
    """sbatch's long options from keyword arguments: nodes=2 -> --nodes=2, mem_per_cpu="100M" ->
    --mem-per-cpu=100M, exclusive=True -> --exclusive (False or None: left out)."""
    out = []
    for k, v in options.items():
        if v is None or v is False:
            continue
        opt = "--" + k.replace("_", "-")
        out.append(opt if v is True else f"{opt}={v}")
    return out


class LabCluster:
    """One cluster of the lab home, by name."""

    def __init__(self, name: str):
        self.name = name
        self._served = None

    # ------------------------------------------------------------------ the record
    def _store(self):
        from lab.engine import daemon

        return daemon.store()

    def describe(self) -> dict:
        """DescribeCluster's answer (with the lab's fields), as `slurmlab describe-cluster NAME` prints it."""
        from lab.control import clusters

        return clusters.describe(self._store(), self.name)

    def nodes(self) -> dict[str, dict]:
        """ListClusterNodes' summaries by node name."""
        from lab.control import clusters

        return {n["NodeLogicalId"]: n for n in clusters.list_nodes(self._store(), self.name)}

    def node(self, node: str):
        """The store's row of `node`: a node's name, or a group's name for its first node."""
        from lab.cmd.base import node_named

        return node_named(self._store(), self.name, node)

    def users(self) -> list[str]:
        """The cluster's student accounts (lab/users.py), in order; [] when it has none."""
        from lab import users

        acc = users.load(self.name)
        return acc.names if acc else []

    def default_user(self) -> str:
        """Whom jobs run as when a test does not say: the first student, else `vagrant` (every node has it)."""
        return next(iter(self.users()), "vagrant")

    # ------------------------------------------------------------------ commands
    def run(self, node: str, command: str, user: str | None = None, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """`command` (a shell line) on `node` (a node's name or a group's: its first node) over the lab's kept
        ssh connection, as `vagrant`, or as `user` ("root", or an account) in its home. `check`: a non-zero
        exit raises CommandFailed with what the command printed."""
        from lab.providers import kept

        line = command
        if user == "root":
            line = f"sudo -H -- sh -c {shlex.quote(command)}"
        elif user:
            line = f"sudo -u {shlex.quote(user)} -H -- sh -c {shlex.quote('cd && ' + command)}"
        match = self.node(node)
        p = subprocess.run(kept.command(self.name, match.address, [line]), capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise CommandFailed(f"{command!r} on {match.name}{f' as {user}' if user else ''} exited {p.returncode}:\n"
                                f"{p.stdout[-3000:]}{p.stderr[-3000:]}")
        return p

    def out(self, node: str, command: str, user: str | None = None) -> str:
        """run()'s stdout."""
        return self.run(node, command, user=user).stdout

    def sbatch(self, script: str, user: str | None = None, node: str = "login", **options) -> Job:
        """Submit `script` (its text: a #! line and #SBATCH lines as usual) with `sbatch` on `node` as `user`
        (default: default_user()). Keyword options become sbatch's long options (nodes=2 -> --nodes=2).
        The job works in /fsx/USER (shared by every node) unless chdir= says otherwise, and writes its
        output to slurm-JOBID.out there unless output= says otherwise."""
        user = user or self.default_user()
        workdir = str(options.pop("chdir", f"/fsx/{user}"))
        output = options.pop("output", "slurm-%j.out")
        args = _sbatch_options({"parsable": True, "chdir": workdir, "output": output, **options})
        line = (f"mkdir -p {shlex.quote(workdir)} && printf %s {shlex.quote(script)} | sbatch "
                + " ".join(shlex.quote(a) for a in args))
        got = self.out(node, line, user=user).strip().splitlines()
        job_id = (got[-1] if got else "").split(";")[0]  # --parsable: ID or ID;CLUSTER
        if not job_id.isdigit():
            raise CommandFailed(f"sbatch on {node} as {user} printed no job id: {got}")
        path = output.replace("%j", job_id).replace("%u", user)
        return Job(self, job_id, user, path if path.startswith("/") else f"{workdir}/{path}", node)

    def host(self, node: str):
        """A testinfra host for `node` (as `vagrant`, sudo for root's checks: `host.sudo()`), over ssh
        through the lab's network namespace."""
        import testinfra.host

        from lab.providers import kept
        from lab.providers.reach import SSH_OPTS, cluster_ssh_exe
        from lab.workspace import ClusterDir

        match = self.node(node)
        extra = " ".join(shlex.quote(o) for o in [*kept.options(self.name), *SSH_OPTS])
        return testinfra.host.Host(_LabSsh(cluster_ssh_exe(self.name), f"vagrant@{match.address}",
                                           ssh_identity_file=str(ClusterDir(self.name).ssh_key), ssh_extra_args=extra))

    # ------------------------------------------------------------------ the API
    @property
    def sagemaker(self):
        """A boto3 `sagemaker` client on `slurmlab serve` for the lab home (started for this process if
        none runs: stop_serving() ends it)."""
        if self._served is None:
            from lab import paths
            from lab.testing.served import Served

            self._served = Served(Path(paths.home()), rooms=False)
        return self._served.client()

    def stop_serving(self) -> None:
        if self._served is not None:
            self._served.stop()
            self._served = None

    # ------------------------------------------------------------------ checkpoints
    def checkpoints(self) -> list[str]:
        """The tags of the cluster's checkpoints, oldest first."""
        from lab.control import checkpoints

        return [r["tag"] for r in checkpoints.listing(self._store(), self.name)]

    def checkpoint(self, tag: str = READY_TAG) -> float:
        """Save the cluster as it is now under `tag` (replacing a checkpoint of that tag); seconds it took."""
        if tag in self.checkpoints():
            lab("checkpoint", "delete", self.name, tag, timeout=600)
        return self._checkpoint_op("create", tag)

    def reset(self, tag: str = READY_TAG) -> float:
        """Put the cluster back to checkpoint `tag` (by default the one taken when it was ready); seconds."""
        if tag not in self.checkpoints():
            raise RuntimeError(f"cluster {self.name} has no checkpoint {tag!r} to reset to (it has: "
                               f"{', '.join(self.checkpoints()) or 'none'}): take one with "
                               f"slurmlab checkpoint create {self.name} {tag}, or run pytest with --slurm-checkpoint")
        return self._checkpoint_op("restore", tag)

    def _checkpoint_op(self, verb: str, tag: str) -> float:
        t0 = time.monotonic()
        p = lab("checkpoint", verb, self.name, tag, timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"slurmlab checkpoint {verb} {self.name} {tag} exited {p.returncode}: {p.stderr[-2000:]}")
        return time.monotonic() - t0


def _lab_ssh_backend():
    from testinfra.backend.ssh import SshBackend

    class LabSsh(SshBackend):
        """testinfra's ssh backend with the lab's ssh (the wrapper that enters the namespace) instead of
        the `ssh` found on PATH."""

        def __init__(self, ssh_exe: str, *args, **kwargs):
            self.ssh_exe = ssh_exe
            super().__init__(*args, **kwargs)

        def _build_ssh_command(self, command: str):
            cmd, args = super()._build_ssh_command(command)
            return [shlex.quote(self.ssh_exe) if c == "ssh" else c for c in cmd], args

    return LabSsh


def _LabSsh(ssh_exe: str, hostspec: str, **kwargs):  # noqa: N802 - a class made on first use (testinfra imports late)
    return _lab_ssh_backend()(ssh_exe, hostspec, **kwargs)
