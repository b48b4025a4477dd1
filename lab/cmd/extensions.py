"""The cluster extension commands (HyperPod's Create/Describe/List/Update/DeleteClusterExtension and
ListClusterExtensionVersions by name; docs/adr/0017-cluster-extensions.md): parse, call
lab/control/extensions.py, render. An extension is named by its name (the default:
sagemaker-observability) or its ARN."""

from __future__ import annotations

from typing import Optional

import typer

from lab.cmd.base import OutputOpt, app, store
from lab.output import Output, out, print_json
from lab.spec.extensions import OBSERVABILITY

ExtensionArg = typer.Argument(OBSERVABILITY, help="the extension's name or ARN")
ConfigOpt = typer.Option(None, "--configuration", help='ConfigurationValues (JSON), e.g. {"scrapeIntervalSeconds":30}')


def _times(d: dict) -> dict:
    """CreationTime / LastModifiedTime as ISO 8601 (the CLI's JSON, like list-clusters)."""
    from lab.osutil import iso

    return {k: iso(v) if k.endswith("Time") and isinstance(v, (int, float)) else v for k, v in d.items()}


def _say(text: str) -> None:
    out.print(text, markup=False, highlight=False)


def _answer(row, output: Output, text: str) -> None:
    """A changing request's reply: the ExtensionArn (HyperPod's answer) as JSON, or a line for people."""
    if output == Output.json:
        print_json({"ExtensionArn": row.arn})
    else:
        _say(text)


@app.command("create-cluster-extension")
def create_cluster_extension(
    name: str,
    extension: str = typer.Option(OBSERVABILITY, "--extension-name", help="the extension to install"),
    version: Optional[str] = typer.Option(None, "--extension-version", help="default: the latest"),
    configuration: Optional[str] = ConfigOpt,
    output: Output = OutputOpt,
) -> None:
    """Install an extension on every running node of a Continuous cluster (and on nodes that join later)."""
    from lab.control import extensions

    row = extensions.create(store(), name, extension, version, configuration, start_engine=True)
    _answer(row, output, f"{row.name} {row.version} Creating on {name} ({row.arn}); watch: slurmlab describe-cluster-extension {name}")


@app.command("describe-cluster-extension")
def describe_cluster_extension(name: str, extension: str = ExtensionArg, output: Output = OutputOpt) -> None:
    """An extension's status, version, every setting, its nodes (running / active) and its health."""
    from lab.control import extensions

    d = extensions.describe(store(), name, extension)
    if output == Output.json:
        print_json({**d, "ExtensionDetails": _times(d["ExtensionDetails"])})
        return
    x, n = d["ExtensionDetails"], d["NodeSummary"]
    _say(f"{x['ExtensionName']} {x['ExtensionVersion']}  {x['Status']}  active on {n['ActiveCount']} of "
         f"{n['TotalCount']} running nodes")
    _say(f"  configuration: {x['ConfigurationValues']}")
    for i in d.get("Health", {}).get("Issues", []):
        _say(f"  {i['Code']} ({i['NodeCount']} node(s)): {i['Message']}")
    _say(f"  {x['ExtensionArn']}")


@app.command("list-cluster-extensions")
def list_cluster_extensions(name: str, output: Output = OutputOpt) -> None:
    """The cluster's extensions with their version and status."""
    from lab.control import extensions

    items = [_times(s) for s in extensions.summaries(store(), name)]
    if output == Output.json:
        print_json({"Extensions": items})
        return
    if not items:
        _say(f"no extension on {name} (slurmlab create-cluster-extension {name})")
    for s in items:
        _say(f"{s['ExtensionName']:<26} {s['ExtensionVersion']:<8} {s['Status']:<12} {s['CreationTime'][:19]}")


@app.command("list-cluster-extension-versions")
def list_cluster_extension_versions(extension: str = typer.Argument(OBSERVABILITY, help="the extension's name"),
                                    output: Output = OutputOpt) -> None:
    """The versions of an extension, the latest first."""
    from lab.control import extensions

    items = extensions.version_summaries(extension)
    if output == Output.json:
        print_json({"ExtensionVersions": items})
        return
    for v in items:
        _say(v["ExtensionVersion"])


@app.command("update-cluster-extension")
def update_cluster_extension(
    name: str,
    extension: str = ExtensionArg,
    version: Optional[str] = typer.Option(None, "--extension-version", help="a later version (default: unchanged)"),
    configuration: Optional[str] = ConfigOpt,
    output: Output = OutputOpt,
) -> None:
    """A later version and/or settings (merged into the ones given before; null puts one back to its
    default); applied to every running node again. With nothing changed: retries the failed nodes."""
    from lab.control import extensions

    row = extensions.update(store(), name, extension, version, configuration, start_engine=True)
    _answer(row, output, f"{row.name} {row.version} {row.status} on {name}")


@app.command("delete-cluster-extension")
def delete_cluster_extension(name: str, extension: str = ExtensionArg, output: Output = OutputOpt) -> None:
    """Remove an extension from every node of the cluster."""
    from lab.control import extensions

    row = extensions.delete(store(), name, extension, start_engine=True)
    _answer(row, output, f"{row.name} Deleting on {name}: removed from every node, then gone")
