"""The host's commands: doctor, host up|down|status, box build|list."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import typer

from lab import exitcodes, paths
from lab.cmd.base import OutputOpt, app, box_app, box_progress, host_app
from lab.output import Output, out, print_json


# ---------------------------------------------------------------- doctor
@app.command()
def doctor(output: Output = OutputOpt) -> None:
    """Check the host: tools, KVM, namespace, libvirt, box, memory, disk. Each problem comes with its fix."""
    from lab import doctor as doc

    results = doc.run_probes()
    blocking = doc.blocking_failures(results)
    if output == Output.json:
        print_json({"ok": not blocking, "probes": [r.as_dict() for r in results]})
    else:
        for r in results:
            mark = "[green]ok  [/green]" if r.ok else ("[red]FAIL[/red]" if r.severity == doc.BLOCKING else "[yellow]warn[/yellow]")
            out.print(f"{mark} {r.title}: {r.detail}")
            if r.fix:
                out.print(f"       fix: {r.fix}")
        out.print("all blocking checks pass" if not blocking else f"{len(blocking)} blocking problem(s)")
    raise typer.Exit(exitcodes.HOST if blocking else exitcodes.OK)


# ---------------------------------------------------------------- host
@host_app.command("up")
def host_up(output: Output = OutputOpt) -> None:
    """Create the namespace, start virtlogd + libvirtd in it, create the storage pool. Idempotent."""
    from lab.host import libvirtd, mode

    libvirtd.up()
    st = libvirtd.daemon_state("libvirtd")
    data = {"mode": mode.detect(), "netns": paths.netns() if mode.uses_netns() else None,
            "libvirtd_pid": st.pid, "uri": libvirtd.URI, "pool": libvirtd.POOL}
    if output == Output.json:
        print_json(data)
    else:
        out.print(f"host ready: mode={data['mode']} netns={data['netns']} libvirtd pid={st.pid} pool={libvirtd.POOL}")


@host_app.command("down")
def host_down(output: Output = OutputOpt) -> None:
    """Stop the lab's libvirtd and remove its namespace (refuses while VMs exist)."""
    from lab.host import libvirtd

    done = libvirtd.down()
    if output == Output.json:
        print_json({"stopped": done})
    else:
        for d in done or ["nothing to stop"]:
            out.print(d)


@host_app.command("status")
def host_status(output: Output = OutputOpt) -> None:
    """Show the host mode, the namespace and the daemons."""
    from lab.host import kvm, libvirtd, mode

    k = kvm.detect()
    data = {
        "mode": mode.detect(),
        "netns": str(libvirtd.netns_path()) if mode.uses_netns() else None,
        "netns_present": libvirtd.netns_path().exists() if mode.uses_netns() else None,
        "daemons": {n: vars(libvirtd.daemon_state(n)) for n in ("virtlogd", "libvirtd")},
        "kvm": vars(k),
    }
    if output == Output.json:
        print_json(data)
    else:
        out.print(f"mode: {data['mode']}  namespace: {data['netns']} present={data['netns_present']}")
        for n, d in data["daemons"].items():
            out.print(f"{n}: pid={d['pid']} in_netns={d['in_netns']}")
        out.print(f"driver: {k.driver} ({k.reason})")


# ---------------------------------------------------------------- box
@box_app.command("build")
def box_build(
    name: Optional[str] = typer.Option(None, help="box name (default slurmlab/<suite>-slurm)"),
    suite: str = typer.Option("trixie", help="the box line: trixie (Debian 13, Slurm 24.11) or forky (Debian 14 "
                                             "testing, Slurm 26.05)"),
    force: bool = typer.Option(False, help="rebuild even when the cached box is current"),
    templates: bool = typer.Option(True, help="also boot and save the warm-start templates of the default shapes "
                                              "(docs/adr/0011; one boot each, ~50 s under emulation)"),
    for_spec: Optional[list[str]] = typer.Option(None, "--for", metavar="SPEC",
                                                 help="also the templates of this cluster spec's instance types"),
    output: Output = OutputOpt,
) -> None:
    """Build a box from Debian's mirror (Debian 13 + Slurm 24.11 by default) and add it to Vagrant (cached by
    inputs) as the next release of its line, then its warm-start templates."""
    from lab import box

    info = box.build(name, suite=suite, force=force, progress=box_progress)
    made = _templates_for(info.name, box_progress, for_spec or []) if templates else []
    if output == Output.json:
        print_json({**vars(info), "templates": made})
    else:
        out.print(f"box {info.name} ready ({(info.size_bytes or 0) / 2**20:.0f} MiB, inputs {info.inputs_hash[:12]})"
                  + (f"; templates {', '.join(made)}" if made else ""))


def _templates_for(box_name: str, progress, specs: list[str]) -> list[str]:
    """The box's templates of the default shapes and of `specs`' groups (built where missing); stale
    ones removed."""
    from lab.host import kvm, libvirtd
    from lab.providers import templates as tpl
    from lab.providers.warm import box_supports
    from lab.spec import load_spec
    from lab.spec.catalog import load_catalog

    from lab.providers.roletemplates import ROLES

    shapes, catalog = set(tpl.default_shapes()), load_catalog()
    roles = {(r, s) for r in ROLES for s in shapes}  # examples/cluster.yaml's, and every role of the defaults
    for path in specs:
        for g in load_spec(path).InstanceGroups:
            z = catalog.size(g.instance_type)
            shapes.add(tpl.Shape(z.vcpus, z.memory_mib))
            if g.node_type in ROLES:
                roles.add((g.node_type, tpl.Shape(z.vcpus, z.memory_mib)))

    for k in tpl.prune_stale():
        progress(f"removed template {k} (its box or the template recipe changed)")
    if (why := box_supports(box_name)) is not None:
        progress(f"no warm-start templates: {why}")
        return []
    libvirtd.up()

    def one(shape) -> str | None:
        t0 = time.monotonic()
        try:
            t = tpl.ensure(box_name, shape, kvm.detect().driver, progress=progress)
        except tpl.TemplateError as e:
            progress(f"template of {shape} not built (nodes of that shape boot cold): {e}")
            return None
        if time.monotonic() - t0 > 1:
            progress(f"template {t.key} ready ({t.meta['timings']})")
        return t.key

    # one boot per core at once (each template is a VM booting under emulation)
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        made = [k for k in pool.map(one, sorted(shapes, key=str)) if k]
    return made + _role_templates_for(box_name, progress, roles)


def _role_templates_for(box_name: str, progress, roles: set) -> list[str]:
    """The role templates of `roles` ({(node type, shape)}: docs/adr/0022), built where missing."""
    from lab.configure import roletemplate
    from lab.host import kvm
    from lab.providers import roletemplates as rtpl
    from lab.providers import templates as tpl

    for k in rtpl.prune_stale():
        progress(f"removed role template {k} (its template or its roles changed)")

    def one(pair) -> str | None:
        role, shape = pair
        t0 = time.monotonic()
        try:
            rtpl.forget_failure(box_name, shape, kvm.detect().driver, role)  # asked for: tried again
            t = rtpl.ensure(box_name, shape, kvm.detect().driver, role, roletemplate.run, progress=progress)
        except tpl.TemplateError as e:
            progress(f"{role} role template of {shape} not built (its nodes are fully configured): {e}")
            return None
        if time.monotonic() - t0 > 1:
            progress(f"role template {t.key} ready ({t.meta['timings']})")
        return t.key

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return [k for k in pool.map(one, sorted(roles, key=str)) if k]


@box_app.command("templates")
def box_templates(rebuild: bool = typer.Option(False, help="remove every template and forgotten failed builds: "
                                                          "the next fork (or box build) makes them anew"),
                  output: Output = OutputOpt) -> None:
    """The warm-start templates: one booted, saved VM per box and shape (plain), and per role (role=: the
    roles' cluster-independent work done), forked into new nodes (docs/adr/0011, 0022), and the hosts
    whose pool holds them (another host's copy goes up with its first fork there: docs/adr/0026)."""
    import shutil
    import time

    from lab.providers import roletemplates as rtpl
    from lab.providers import templates as tpl

    if rebuild:
        for t in rtpl.listing():
            shutil.rmtree(rtpl.root() / t["key"], ignore_errors=True)
        for t in tpl.listing():
            shutil.rmtree(tpl.root() / t["key"], ignore_errors=True)
        tpl.forget_failures()
        rtpl.forget_failures()
    rows = [{**t, "role": None} for t in tpl.listing()] + rtpl.listing()
    on, unreachable = _templates_on_hosts()
    for t in rows:
        t["hosts"] = ["local"] + sorted(on.get(t["key"], []))
    if output == Output.json:
        print_json(rows)
        return
    if not rows:
        out.print("no templates; `slurmlab box build` makes them (or the first warm node of a shape)")
    for t in rows:
        age = (time.time() - t["created"]) / 3600
        took = (f"boot {t['timings'].get('booted', '?')} s" if t["role"] is None
                else f"configured {t['timings'].get('configure', '?')} s")
        out.print(f"{t['key']}  {'role=' + t['role'] if t['role'] else 'plain'}  box={t['box']}  {t['cpus']} vCPU "
                  f"{t['memory_mib']} MiB  {t['driver']}  {t['size'] / 2**20:.0f} MiB  {age:.1f} h old  {took}  "
                  f"on {', '.join(t['hosts'])}")
    for name, why in unreachable:
        out.print(f"host {name}: its templates are not listed: {why}")


def _templates_on_hosts() -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """{template key: the other hosts whose pool has its volumes}, and the hosts that did not answer."""
    import libvirt

    from lab.host import registry
    from lab.providers import hosttemplates

    on: dict[str, list[str]] = {}
    unreachable = []
    for h in registry.all_hosts():
        if h.local:
            continue
        try:
            conn = h.connect()
            try:
                keys = {v["template"] for v in hosttemplates.listing(conn, h.pool)}
            finally:
                conn.close()
        except libvirt.libvirtError as e:
            unreachable.append((h.name, e.get_error_message()))
            continue
        for k in keys:
            on.setdefault(k, []).append(h.name)
    return on, unreachable


@box_app.command("list")
def box_list(output: Output = OutputOpt) -> None:
    """List Vagrant's libvirt boxes: which slurmlab built (and from the current inputs), each one's image
    release (ImageReleaseVersion; docs/box.md) and the hosts that hold it (`local`: added to Vagrant here;
    another host: its pool holds the release's templates or box image). A release whose box left Vagrant
    but another host still holds is listed too (added False)."""
    from lab import box
    from lab.box import releases
    from lab.box.images import image_id

    known = releases.catalog()
    rows = [(b, releases.of_box(known, b.name)) for b in box.list_boxes()]
    rows += [(box.BoxInfo(name=r.box, inputs_hash=r.inputs_hash, path=None, size_bytes=None, added=False,
                          built_at=r.built_at, slurmlab=True, slurm_version=r.slurm_version), r)
             for r in known if not r.available and r.hosts]  # e.g. a rebuilt box's old image still on room-b
    ids = [image_id(b.name, b.inputs_hash) if b.slurmlab else None for b, _ in rows]
    if output == Output.json:
        print_json([{**vars(b), "image_id": iid, "release": r.to_json() if r else None, "hosts": list(r.hosts) if r else []}
                    for (b, r), iid in zip(rows, ids)])
        return
    if not rows:
        out.print("no boxes; run `slurmlab box build`")
    for (b, r), iid in zip(rows, ids):
        what = (f"release={r.version}  line={r.line}  slurm={r.slurm_version}" + ("  security" if r.security else "")
                if r else "release=-")
        out.print(f"{b.name}  {what}  image={iid or '-'}  inputs={b.inputs_hash[:12] if b.inputs_hash else '-'}  "
                  f"built={b.built_at or '-'}  on: {', '.join(r.hosts) if r and r.hosts else '-'}"
                  + ("  (not in Vagrant here)" if not b.added else ""), markup=False)


@box_app.command("tag")
def box_tag(name: str = typer.Argument(..., help="the new box name, e.g. slurmlab/trixie-slurm-next"),
            security: bool = typer.Option(False, help="mark the new release a security update: nodes on older "
                                                      "releases of its line report SecurityUpdateRequired"),
            output: Output = OutputOpt) -> None:
    """Add the current box under another name too: a new image release of its line (ImageReleaseVersion) and a
    second ImageId for UpdateClusterSoftware."""
    from lab.box.images import tag

    iid, r = tag(name, progress=box_progress, security=security)
    shared = _share_templates(name)
    if output == Output.json:
        print_json({"name": name, "image_id": iid, "release": r.to_json(), "templates": shared})
    else:
        out.print(f"box {name} added: release {r.version} of {r.line}{' (security)' if r.security else ''}, "
                  f"ImageId {iid}" + (f"; templates {', '.join(shared)} (copies of the default box's)" if shared else ""),
                  markup=False)


def _share_templates(name: str) -> list[str]:
    """The default box's templates, copied for box `name` when both are the same image (the same inputs)."""
    from lab import box as boxmod
    from lab.host import kvm
    from lab.providers import template_copies

    mine = boxmod.added_inputs(name)
    if mine is None or mine != boxmod.added_inputs(boxmod.DEFAULT_BOX):
        return []
    return template_copies.share(boxmod.DEFAULT_BOX, name, kvm.detect().driver)
