"""`slurmlab users show|add|remove`: student accounts user01..userNN with one shared password."""

from __future__ import annotations

import typer

from lab.cmd.base import OutputOpt, app, store
from lab.output import Output, out, print_json

users_app = typer.Typer(help="Student accounts: user01..userNN with one shared password, on every node.",
                        no_args_is_help=True)
app.add_typer(users_app, name="users")


def _accounts_data(name: str, acc) -> dict:
    return {"ClusterName": name, "Account": acc.account, "Password": acc.password,
            "Users": [{"Name": u.name, "Uid": u.uid} for u in acc.users], "Removed": list(acc.removed)}


def _room(name: str) -> dict | None:
    """The cluster's room (lab/room), as describe-cluster shows it."""
    from lab.control import views

    return views.room_of(store().cluster(name))


@users_app.command("show")
def users_show(name: str, output: Output = OutputOpt) -> None:
    """The cluster's student accounts, their shared password and Slurm account."""
    from lab import users
    from lab.control import clusters
    from lab.errors import NotFound

    clusters.get(store(), name)
    acc = users.load(name)
    if acc is None:
        raise NotFound(f"cluster '{name}' has no student accounts", users.no_accounts_fix(name))
    room = _room(name)
    if output == Output.json:
        print_json(_accounts_data(name, acc) | ({"Room": room} if room else {}))
        return
    out.print(f"{name}: {len(acc.users)} student account{'s' if len(acc.users) != 1 else ''}", markup=False)
    out.print(f"  users:    {users.name_range(acc.names) or '(none)'}", markup=False)
    out.print(f"  password: {acc.password}", markup=False)
    out.print(f"  account:  {acc.account} (Slurm)", markup=False)
    uids = [u.uid for u in acc.users]
    if uids and uids == list(range(uids[0], uids[0] + len(uids))):
        out.print(f"  uids:     {uids[0]}..{uids[-1]} (gid = uid)", markup=False)
    elif uids:
        out.print(f"  uids:     {', '.join(f'{u.name}={u.uid}' for u in acc.users)} (gid = uid)", markup=False)
    if acc.removed:
        out.print(f"  removed:  {', '.join(acc.removed)}", markup=False)
    if room:
        from lab.room.ports import describe_line

        out.print(f"  room:     {describe_line(name, room)}", markup=False, highlight=False)


def _users_change(verb: str, name: str, names: list[str], output: Output) -> None:
    from lab.providers import registry
    from lab.workflows import accounts

    r = accounts.change(store(), name, verb, names)
    c, change, nodes = r.cluster, r.change, r.nodes
    acc = change.accounts
    if output == Output.json:
        data = {**_accounts_data(name, acc), "Changed": change.changed, "Unchanged": change.unchanged,
                "Nodes": nodes, "Simulated": registry.info(c.provider).simulated}
        if not change.created:  # the password only where it is new (else: slurmlab users show)
            data.pop("Password")
        print_json(data)
        return
    done = "added" if verb == "add" else "removed"
    if change.changed:
        out.print(f"{done}: {', '.join(change.changed)}", markup=False)
    if change.unchanged:
        out.print(f"already {done}: {', '.join(change.unchanged)}", markup=False)
    if change.created:
        out.print(f"password: {acc.password}  (the same for every student: slurmlab users show {name})", markup=False)
    if registry.info(c.provider).simulated:
        out.print(f"cluster {name} is simulated (provider {c.provider}): users.json updated, no nodes to change", markup=False)
    elif nodes:
        out.print(f"nodes updated: {len(nodes)} ({', '.join(nodes)})", markup=False)
    else:
        out.print("no node is running yet: the nodes get the accounts when they are configured", markup=False)


@users_app.command("add")
def users_add(name: str, user: list[str] = typer.Argument(..., metavar="USER...", help="user names, e.g. user21"),
              output: Output = OutputOpt) -> None:
    """Add student accounts (same password) on every running node; a name that exists is pushed again."""
    _users_change("add", name, user, output)


@users_app.command("remove")
def users_remove(name: str, user: list[str] = typer.Argument(..., metavar="USER...", help="user names"),
                 output: Output = OutputOpt) -> None:
    """Remove student accounts from every running node (nodes that join later delete them too)."""
    _users_change("remove", name, user, output)
