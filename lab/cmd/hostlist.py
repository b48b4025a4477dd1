"""The lab's libvirt hosts: host add|remove|list|limit|simulate (docs/workshop.md, docs/adr/0010-hosts.md)."""

from __future__ import annotations

from typing import Optional

import typer

from lab.cmd.base import OutputOpt, host_app
from lab.output import Output, out, print_json

MemOpt = typer.Option(None, "--memory-mib", help="memory (MiB) the lab may use on that host (default: what it has free)")
CpuOpt = typer.Option(None, "--cpus", help="vCPUs the lab may start on that host (default: no limit)")


def _probe(host):
    """The host's report, for the lab's box (its size: whether the host's pool can take it)."""
    from lab import box
    from lab.host import probe

    return probe.probe(host, box.DEFAULT_BOX, box.image_bytes())


def _show(rep, clusters: list[str], output: Output) -> None:
    if output == Output.json:
        print_json({**rep.as_dict(), "clusters": clusters})
        return
    _line(rep, clusters)


def _line(rep, clusters: list[str]) -> None:
    if not rep.reachable:
        out.print(f"{rep.name}  {rep.uri}  [red]unreachable[/red]: {rep.problem}", highlight=False)
        return
    limit = f" (lab limit {rep.memory_limit_mib} MiB)" if rep.memory_limit_mib else ""
    cpus = f" (lab limit {rep.cpus_limit})" if rep.cpus_limit else ""
    out.print(f"{rep.name}  {rep.uri}\n  memory {rep.memory_free_mib}/{rep.memory_total_mib} MiB free{limit}, "
              f"cpus {rep.cpus}{cpus}, pool {rep.pool_free_gib} GiB free, box {rep.box or '-'}\n"
              f"  clusters: {', '.join(clusters) or '-'}"
              + (f"\n  remote over ssh, domain type {rep.driver}" if rep.driver else "")
              + "".join(f"\n  note: {n}" for n in rep.notes)
              + (f"\n  [yellow]{rep.problem}[/yellow] fix: {rep.fix}" if rep.problem else ""),
              highlight=False, markup=True)


@host_app.command("add")
def host_add(
    name: str = typer.Argument(..., help="a short name for the host, e.g. h2"),
    uri: str = typer.Option(..., "--uri", help="its libvirt URI, e.g. qemu+ssh://root@lab-b/system"),
    netns: Optional[str] = typer.Option(None, "--netns", help="the network namespace where its VMs are reached "
                                        "(a host on this machine; none for another machine)"),
    ssh_user: Optional[str] = typer.Option(None, "--ssh-user", help="qemu+ssh: the user libvirt logs in as"),
    ssh_key: Optional[str] = typer.Option(None, "--ssh-key", help="qemu+ssh: the private key libvirt's ssh uses"),
    accept_host_key: bool = typer.Option(False, "--accept-host-key", help="qemu+ssh: record the host's ssh key as "
                                         "it is now (else it must be in ~/.ssh/known_hosts already)"),
    driver: Optional[str] = typer.Option(None, "--driver", help="the domain type there: kvm or qemu (default: kvm "
                                         "when that host's libvirt offers it)"),
    memory_mib: Optional[int] = MemOpt,
    cpus: Optional[int] = CpuOpt,
    output: Output = OutputOpt,
) -> None:
    """Add a libvirt host the lab may place clusters on. Its libvirtd must answer; nothing is recorded if not."""
    from lab.errors import Conflict, HostError, UsageError
    from lab.host import registry, sshhost

    registry.check_name(name)
    if name == registry.LOCAL or any(h.name == name for h in registry.all_hosts()):
        raise Conflict(f"a host named {name!r} exists already", "pick another name, or `slurmlab host remove` it first")
    if driver not in (None, "kvm", "qemu"):
        raise UsageError(f"--driver {driver}: not a domain type the lab runs", "give --driver kvm or --driver qemu")
    uri = registry.with_ssh(uri, ssh_user, ssh_key)
    host = registry.Host(name, uri, netns, memory_mib, cpus, pool=registry.get(registry.LOCAL).pool, driver=driver)
    if accept_host_key:
        if not host.remote:
            raise UsageError("--accept-host-key is for qemu+ssh:// URIs", "leave it out")
        if not sshhost.accept_key(host):
            raise HostError(f"no ssh host key from {host.ssh[1]}", "check the address and that sshd runs there")
    try:
        registry.require_reachable(host)
    except HostError:
        sshhost.forget(name)
        raise
    rep = _probe(host)
    if rep.problem:
        sshhost.forget(name)
        raise HostError(rep.problem, rep.fix)
    registry.add(host)
    _show(rep, [], output)


@host_app.command("simulate")
def host_simulate(
    name: str = typer.Argument("h2", help="the simulated host's name"),
    memory_mib: Optional[int] = MemOpt,
    cpus: Optional[int] = CpuOpt,
    remote: bool = typer.Option(False, "--remote", help="make it look like another machine: reached only over "
                                "qemu+ssh at an address of its own, none of the lab's files visible there"),
    output: Output = OutputOpt,
) -> None:
    """Start a second libvirt host on this machine (its own libvirtd, network and mount namespaces) and add it."""
    from lab.errors import Conflict
    from lab.host import registry, rig, simulated

    registry.check_name(name)
    known = next((h for h in registry.all_hosts() if h.name == name), None)
    if known and not known.simulated:
        raise Conflict(f"host {name!r} exists and is not a simulated one", "pick another name")
    if known and known.remote != remote:
        raise Conflict(f"host {name!r} is a simulated {'remote' if known.remote else 'local'} host",
                       f"`slurmlab host simulate {name}{' --remote' if known.remote else ''}`, or remove it first")
    host = rig.start(name) if remote else simulated.start(name)
    if known is None:
        host.memory_mib, host.cpus = memory_mib, cpus
        registry.add(host)
    elif memory_mib or cpus:
        registry.set_limits(name, memory_mib, cpus)
    _show(_probe(registry.get(name)), [], output)


@host_app.command("remove")
def host_remove(name: str = typer.Argument(...), output: Output = OutputOpt) -> None:
    """Remove a host from the lab (refused while clusters are placed on it). A simulated host is stopped."""
    from lab.errors import Conflict
    from lab.host import registry, simulated
    from lab.providers import placement

    host = registry.get(name)
    on = placement.clusters_on(name)
    if on:
        raise Conflict(f"host {name} still holds cluster(s) {', '.join(on)}", "delete them first (slurmlab delete-cluster NAME)")
    done = simulated.remove(name, host) if host.simulated else []
    if host.remote and not host.simulated:
        from lab.host import sshhost
        from lab.providers import hosttemplates

        done += hosttemplates.remove_all(host)  # a simulated host's pool goes with its folder
        sshhost.close(host)
        sshhost.forget(name)
    registry.remove(name)
    from lab.box import releases

    releases.forget_on_host(name)  # its pool's images are no release's any more (a simulated host's too)
    if output == Output.json:
        print_json({"removed": name, "done": done})
    else:
        for d in done:
            out.print(d)
        out.print(f"host {name} removed")


@host_app.command("limit")
def host_limit(name: str = typer.Argument(..., help="a host name (local: this machine)"),
               memory_mib: Optional[int] = MemOpt, cpus: Optional[int] = CpuOpt, output: Output = OutputOpt) -> None:
    """Set the memory and vCPUs the lab may use on a host (placement and capacity honour them); 0 lifts a limit."""
    from lab.host import registry
    from lab.providers import placement

    host = registry.set_limits(name, memory_mib, cpus)
    _show(_probe(host), placement.clusters_on(name), output)


@host_app.command("list")
def host_list(output: Output = OutputOpt) -> None:
    """The lab's hosts: reachable, memory, CPUs, pool, box, and the clusters placed on each."""
    from lab.host import registry
    from lab.providers import placement

    rows = [(_probe(h), placement.clusters_on(h.name)) for h in registry.all_hosts()]
    if output == Output.json:
        print_json([{**r.as_dict(), "clusters": c} for r, c in rows])
        return
    for r, c in rows:
        _line(r, c)


@host_app.command("prepare")
def host_prepare(name: str = typer.Argument(..., help="a host of the lab other than this machine"),
                 box_name: Optional[str] = typer.Option(None, "--box", help="the box whose templates go up "
                                                        "(default: the lab's default box)"),
                 shape: Optional[list[str]] = typer.Option(None, "--shape", help="only this shape, as `box templates` "
                                                           "names it (e.g. 1cpu-768mib); repeat for more"),
                 output: Output = OutputOpt) -> None:
    """Upload this machine's warm-start templates to host NAME's pool now (the ones its domain type can fork),
    so that its first nodes fork at once; otherwise they go up with its first fork there (docs/adr/0026)."""
    import libvirt

    from lab import box
    from lab.errors import UsageError
    from lab.host import registry
    from lab.providers import hostprepare
    from lab.providers.templates import TemplateError

    host = registry.get(name)
    if host.local:
        raise UsageError("the local host forks from the templates here: nothing to upload",
                         "`slurmlab box templates` lists them; `slurmlab box build` makes them")
    try:
        done = hostprepare.prepare(host, box_name or box.DEFAULT_BOX, shape or (), progress=lambda s: out.print(f"uploading {s} ...", markup=False)
                                   if output != Output.json else None)
    except libvirt.libvirtError as e:
        raise UsageError(f"host {name} does not answer: {e.get_error_message()}", "slurmlab doctor") from None
    except TemplateError as e:
        raise UsageError(str(e), f"slurmlab doctor; then slurmlab host prepare {name} again") from None
    if output == Output.json:
        print_json(done)
        return
    if not done["templates"]:
        out.print(f"no templates of {box_name or box.DEFAULT_BOX}{' ' + ', '.join(shape) if shape else ''} of domain "
                  f"type {done['driver']} here: `slurmlab box build` makes them", markup=False)
    for t in done["templates"]:
        out.print(f"{t['template']}{'  role=' + t['role'] if t['role'] else ''}  {t['seconds']} s", markup=False)
    out.print(f"host {name}: {len(done['templates'])} template(s) ready, {done['bytes'] / 2**20:.0f} MiB in its pool, "
              f"in {done['seconds']} s", markup=False)
