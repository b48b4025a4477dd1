"""`slurmlab students add|list|remove|set-quota`: per-student access keys and quotas for `slurmlab serve --auth`."""

from __future__ import annotations

from typing import Optional

import typer

from lab.cmd.base import OutputOpt, app, store
from lab.output import Output, out, print_json

students_app = typer.Typer(help="Students of `slurmlab serve --auth`: an AWS-style access key pair and a quota each.",
                           no_args_is_help=True)
app.add_typer(students_app, name="students")

MaxClusters = typer.Option(None, "--max-clusters", help="clusters at once (default 2; -1: no limit)")
MaxNodes = typer.Option(None, "--max-nodes", help="nodes at once, over all their clusters (default 8; -1: no limit)")
MaxMemory = typer.Option(None, "--max-memory-mib", help="node memory at once in MiB: nodes x their instance type's "
                         "memory (default 8192; -1: no limit)")


def _limit(v: Optional[int]) -> str:
    return "no limit" if v is None else str(v)


def _quota_text(s) -> str:
    if s.Instructor:
        return "none (instructor: sees every cluster)"
    q = s.Quota
    return f"{_limit(q.MaxClusters)} clusters, {_limit(q.MaxNodes)} nodes, {_limit(q.MaxMemoryMiB)} MiB"


def _holdings(reg) -> dict[str, list[str]]:
    """Student name -> the clusters they own now."""
    held: dict[str, list[str]] = {}
    for c in store().clusters():
        who = reg.owner(c.name, c.created_at)
        if who:
            held.setdefault(who, []).append(c.name)
    return held


@students_app.command("add")
def students_add(name: str = typer.Argument(..., help="the student's name: a-z, 0-9 and '-', e.g. alice"),
                 max_clusters: Optional[int] = MaxClusters, max_nodes: Optional[int] = MaxNodes,
                 max_memory_mib: Optional[int] = MaxMemory,
                 instructor: bool = typer.Option(False, "--instructor", help="sees and changes every student's "
                                                 "clusters, no quota; opens the console"),
                 output: Output = OutputOpt) -> None:
    """Add a student: prints their new access key id and secret access key (the secret only this once)."""
    from lab import students

    limits = {k: (None if v < 0 else v) for k, v in (("MaxClusters", max_clusters), ("MaxNodes", max_nodes),
                                                      ("MaxMemoryMiB", max_memory_mib)) if v is not None}
    s, secret = students.Registry().add(name, students.Limits(**limits), instructor=instructor)
    if output == Output.json:
        print_json({**s.public(), "SecretAccessKey": secret})
        return
    out.print(f"student {s.Name} added{' (instructor)' if s.Instructor else ''}", markup=False)
    out.print(f"  AccessKeyId:      {s.AccessKeyId}", markup=False)
    out.print(f"  SecretAccessKey:  {secret}   (shown this once: hand it to {s.Name} now)", markup=False)
    out.print(f"  quota:            {_quota_text(s)}", markup=False)
    out.print(f"  connect:          AWS_ACCESS_KEY_ID={s.AccessKeyId} AWS_SECRET_ACCESS_KEY=<secret> aws sagemaker "
              "list-clusters --endpoint-url http://<server>:8008 --region <the server's region>", markup=False)


@students_app.command("list")
def students_list(output: Output = OutputOpt) -> None:
    """The students, their access key ids, quotas and clusters (never their secrets)."""
    from lab import students

    reg = students.Registry()
    rows, held = reg.students(), _holdings(reg)
    if output == Output.json:
        print_json({"Students": [{**s.public(), "Clusters": held.get(s.Name, [])} for s in rows]})
        return
    if not rows:
        out.print("no students (slurmlab students add NAME)", markup=False)
    for s in rows:
        out.print(f"{s.Name:<16} {s.AccessKeyId}  quota: {_quota_text(s)}  clusters: "
                  f"{', '.join(held.get(s.Name, [])) or '-'}", markup=False)


@students_app.command("remove")
def students_remove(name: str, output: Output = OutputOpt) -> None:
    """Remove a student: their key stops working at once; their clusters stay (the instructor sees them)."""
    from lab import students

    s = students.Registry().remove(name)
    if output == Output.json:
        print_json({"Removed": s.public()})
        return
    out.print(f"student {s.Name} removed (access key {s.AccessKeyId} no longer works)", markup=False)


@students_app.command("set-quota")
def students_set_quota(name: str, max_clusters: Optional[int] = MaxClusters, max_nodes: Optional[int] = MaxNodes,
                       max_memory_mib: Optional[int] = MaxMemory, output: Output = OutputOpt) -> None:
    """Change a student's quota (the limits given; -1: no limit). What they hold already stays."""
    from lab import students
    from lab.errors import UsageError

    if max_clusters is None and max_nodes is None and max_memory_mib is None:
        raise UsageError("set-quota: no limit given", "give --max-clusters, --max-nodes or --max-memory-mib")
    s = students.Registry().set_quota(name, MaxClusters=max_clusters, MaxNodes=max_nodes, MaxMemoryMiB=max_memory_mib)
    if output == Output.json:
        print_json(s.public())
        return
    out.print(f"student {s.Name}: quota {_quota_text(s)}", markup=False)
