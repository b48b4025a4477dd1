"""The six ClusterExtension operations through boto3 (every reply checked against the model's output
shape by botocheck): the whole life on the sim provider's engine (Creating -> Active on every node,
Update, Delete, then ResourceNotFound), both paginators, ClientToken replay and mismatch, events, and
every bad request with its AWS error and nothing changed."""

from __future__ import annotations

import json
import re

import pytest
from botocore.exceptions import ClientError

from lab.spec.servicemodel import shape
from lab.store.db import ExtensionRow
from tests.api.conftest import wait_for
from tests.api.seed import create_request, seed_cluster

OBS = "sagemaker-observability"


def _arn(c, name="demo"):
    return c.describe_cluster(ClusterName=name)["ClusterArn"]


def _error(call, **kw) -> tuple[str, str]:
    with pytest.raises(ClientError) as e:
        call(**kw)
    return e.value.response["Error"]["Code"], e.value.response["Error"]["Message"]


def test_an_extension_s_whole_life_with_boto3(live_api):
    c = live_api.client()
    c.create_cluster(**create_request("demo", computes=2))
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService", what="demo InService")
    cluster = _arn(c)

    created = c.create_cluster_extension(ClusterArn=cluster, ExtensionName=OBS, ClientToken="token-0001",
                                         ConfigurationValues='{"metricsProvider":{"nodeMetrics":{"level":"ADVANCED"}}}')
    arn = created["ExtensionArn"]
    assert re.fullmatch(shape("ExtensionArn").metadata["pattern"], arn)
    assert arn.startswith(cluster.replace(":cluster/", ":extension/sagemaker-observability/") + "/")
    # the same token and parameters: the same answer; other parameters: refused, nothing changed
    again = c.create_cluster_extension(ClusterArn=cluster, ExtensionName=OBS, ClientToken="token-0001",
                                       ConfigurationValues='{"metricsProvider":{"nodeMetrics":{"level":"ADVANCED"}}}')
    assert again["ExtensionArn"] == arn
    code, msg = _error(c.create_cluster_extension, ClusterArn=cluster, ExtensionName=OBS, ClientToken="token-0001")
    assert code == "ValidationException" and "ClientToken: already used with other parameters" in msg

    def described():
        return c.describe_cluster_extension(ClusterArn=cluster, ExtensionArn=arn)

    wait_for(lambda: described()["ExtensionDetails"]["Status"] == "Active", what="the extension Active")
    d = described()
    assert d["NodeSummary"] == {"TotalCount": 4, "ActiveCount": 4} and "Health" not in d
    details = d["ExtensionDetails"]
    assert (details["ClusterArn"], details["ExtensionName"], details["ExtensionVersion"]) == (cluster, OBS, "1.1.0")
    assert json.loads(details["ConfigurationValues"]) == {  # every default filled in
        "metricsProvider": {"nodeMetrics": {"level": "ADVANCED"}, "slurmMetrics": {"level": "BASIC"}},
        "scrapeIntervalSeconds": 60}
    [summary] = c.list_cluster_extensions(ClusterArn=cluster)["Extensions"]
    assert summary["ExtensionArn"] == arn and summary["Status"] == "Active"
    pages = list(c.get_paginator("list_cluster_extensions").paginate(ClusterArn=cluster, PaginationConfig={"PageSize": 1}))
    assert [e["ExtensionArn"] for p in pages for e in p["Extensions"]] == [arn]
    events = c.list_cluster_events(ClusterName="demo", ResourceType="Cluster")["Events"]
    assert any(e["Description"].startswith("CreateClusterExtension: sagemaker-observability 1.1.0") for e in events)
    assert any(e["Description"] == "extension sagemaker-observability 1.1.0 is Active" for e in events)

    # Update: merged settings (null = the default), the same version, a token of its own
    up = c.update_cluster_extension(ClusterArn=cluster, ExtensionArn=arn, ClientToken="token-0002",
                                    ConfigurationValues='{"metricsProvider":{"nodeMetrics":{"level":null}},'
                                                        '"scrapeIntervalSeconds":30}')
    assert up["ExtensionArn"] == arn
    assert c.update_cluster_extension(ClusterArn=cluster, ExtensionArn=arn, ClientToken="token-0002",
                                      ConfigurationValues='{"metricsProvider":{"nodeMetrics":{"level":null}},'
                                                          '"scrapeIntervalSeconds":30}')["ExtensionArn"] == arn
    wait_for(lambda: described()["ExtensionDetails"]["Status"] == "Active", what="the update applied")
    assert json.loads(described()["ExtensionDetails"]["ConfigurationValues"]) == {
        "metricsProvider": {"nodeMetrics": {"level": "BASIC"}, "slurmMetrics": {"level": "BASIC"}},
        "scrapeIntervalSeconds": 30}

    # Delete: Deleting (no Update or second Delete meanwhile), then gone
    assert c.delete_cluster_extension(ClusterArn=cluster, ExtensionArn=arn)["ExtensionArn"] == arn
    code, _ = _error(c.update_cluster_extension, ClusterArn=cluster, ExtensionArn=arn, ConfigurationValues="{}")
    status = described()["ExtensionDetails"]["Status"] if code == "ConflictException" else None
    assert code == "ResourceNotFound" or status == "Deleting"
    wait_for(lambda: not c.list_cluster_extensions(ClusterArn=cluster)["Extensions"], what="the extension gone")
    assert _error(c.describe_cluster_extension, ClusterArn=cluster, ExtensionArn=arn)[0] == "ResourceNotFound"
    events = c.list_cluster_events(ClusterName="demo", ResourceType="Cluster")["Events"]
    assert any(e["Description"].startswith("extension sagemaker-observability removed from every node") for e in events)
    c.delete_cluster(ClusterName="demo")
    wait_for(lambda: not c.list_clusters()["ClusterSummaries"], what="demo deleted")


def test_versions_and_both_paginators(api):
    c = api.client()
    assert c.list_cluster_extension_versions(ExtensionName=OBS)["ExtensionVersions"] == [
        {"ExtensionVersion": "1.1.0"}, {"ExtensionVersion": "1.0.0"}]
    first = c.list_cluster_extension_versions(ExtensionName=OBS, MaxResults=1)
    assert first["ExtensionVersions"] == [{"ExtensionVersion": "1.1.0"}] and first["NextToken"]
    pages = list(c.get_paginator("list_cluster_extension_versions").paginate(
        ExtensionName=OBS, PaginationConfig={"PageSize": 1}))
    assert [v["ExtensionVersion"] for p in pages for v in p["ExtensionVersions"]] == ["1.1.0", "1.0.0"]
    assert len(pages) == 2
    assert c.list_cluster_extension_versions(ExtensionName="eks-other")["ExtensionVersions"] == []  # not an error

    seed_cluster(api.store, "demo", computes=1)
    cluster = _arn(c)
    arn = c.create_cluster_extension(ClusterArn=cluster, ExtensionName=OBS)["ExtensionArn"]
    made = api.store.extension("demo", OBS)
    base = int(made.created_at)  # whole seconds: boto3 sends timestamps to the millisecond
    for i, t in enumerate((base + 10, base + 20)):  # two more rows (the catalogue has one name)
        api.store.add_extension(ExtensionRow("demo", f"sagemaker-more-{i}", arn[:-12] + f"{i:012d}", "1.0.0", {}, {},
                                             "Active", t, t))
    pages = list(c.get_paginator("list_cluster_extensions").paginate(ClusterArn=cluster, PaginationConfig={"PageSize": 2}))
    assert [len(p["Extensions"]) for p in pages] == [2, 1]
    assert [e["ExtensionName"] for p in pages for e in p["Extensions"]] == [OBS, "sagemaker-more-0", "sagemaker-more-1"]
    # CreationTimeAfter / Before are inclusive ("at or after")
    at = c.list_cluster_extensions(ClusterArn=cluster, CreationTimeAfter=base + 10, CreationTimeBefore=base + 10)["Extensions"]
    assert [e["ExtensionName"] for e in at] == ["sagemaker-more-0"]


def _bodies(cluster: str) -> dict:
    return {"ClusterArn": cluster, "ExtensionName": OBS}


@pytest.mark.parametrize("extra, code, says", [
    ({"ExtensionName": "sagemaker-observabilty"}, "ValidationException", "ListClusterExtensionVersions"),
    ({"ExtensionVersion": "2.0.0"}, "ValidationException", "sagemaker-observability has no version '2.0.0'"),
    ({"ExtensionVersion": "1.0"}, "ValidationException", "ExtensionVersion"),
    ({"ExtensionName": "Sagemaker_Obs"}, "ValidationException", "ExtensionName"),
    ({"ConfigurationValues": '{"metricsProvider":{"nodeMetrics":{"levl":"BASIC"}}}'}, "ValidationException",
     "ConfigurationValues.metricsProvider.nodeMetrics.levl: unknown setting; did you mean 'level'?"),
    ({"ConfigurationValues": '{"scrapeIntervalSeconds": 1}'}, "ValidationException",
     "ConfigurationValues.scrapeIntervalSeconds: 1 is not a whole number from 10 to 300"),
    ({"ConfigurationValues": "not json"}, "ValidationException", "ConfigurationValues: not JSON"),
    ({"ExtensionVersion": "1.0.0", "ConfigurationValues": '{"metricsProvider":{"slurmMetrics":{"level":"ADVANCED"}}}'},
     "ValidationException", "ADVANCED needs version 1.1.0"),
    ({"ClusterArn": "arn:aws:sagemaker:us-east-1:000000000000:cluster/000000000000"}, "ResourceNotFound", "ClusterArn"),
])
def test_bad_creates_name_the_field_and_change_nothing(api, extra, code, says):
    seed_cluster(api.store, "demo", computes=1)
    c = api.client()
    before = (api.store.extensions(), len(api.store.events("demo")))
    got, msg = _error(c.create_cluster_extension, **{**_bodies(_arn(c)), **extra})
    assert got == code and says in msg, msg
    assert (api.store.extensions(), len(api.store.events("demo"))) == before


def test_clusters_that_take_no_extension_and_a_second_of_a_name(api):
    seed_cluster(api.store, "legacy", computes=1, request=create_request("legacy", 1, continuous=False))
    seed_cluster(api.store, "going", computes=1, status="Deleting")
    seed_cluster(api.store, "demo", computes=1)
    c = api.client()
    before = (api.store.extensions(), [len(api.store.events(n)) for n in ("legacy", "going")])
    code, msg = _error(c.create_cluster_extension, **_bodies(_arn(c, "legacy")))
    assert code == "ValidationException" and "legacy mode" in msg and "NodeProvisioningMode" in msg
    code, msg = _error(c.create_cluster_extension, **_bodies(_arn(c, "going")))
    assert code == "ValidationException" and "is Deleting" in msg
    assert (api.store.extensions(), [len(api.store.events(n)) for n in ("legacy", "going")]) == before
    c.create_cluster_extension(**_bodies(_arn(c)))
    rows = api.store.extensions()
    code, msg = _error(c.create_cluster_extension, **_bodies(_arn(c)), ExtensionVersion="1.0.0")
    assert code == "ResourceInUse" and "has the extension sagemaker-observability already" in msg
    assert api.store.extensions() == rows


def test_bad_updates_and_deletes(api):
    seed_cluster(api.store, "demo", computes=1)
    seed_cluster(api.store, "other", computes=1)
    c = api.client()
    cluster = _arn(c)
    arn = c.create_cluster_extension(**_bodies(cluster))["ExtensionArn"]
    rows, n_events = api.store.extensions(), len(api.store.events("demo"))
    # a lower version, a bad setting, an extension of another cluster, one that is not there
    code, msg = _error(c.update_cluster_extension, ClusterArn=cluster, ExtensionArn=arn, ExtensionVersion="1.0.0")
    assert code == "ValidationException" and "older than the installed 1.1.0" in msg
    code, msg = _error(c.update_cluster_extension, ClusterArn=cluster, ExtensionArn=arn,
                       ConfigurationValues='{"metricsProvider":{"nodeMetric":{}}}')
    assert code == "ValidationException" and "did you mean 'nodeMetrics'" in msg
    for call in (c.update_cluster_extension, c.delete_cluster_extension, c.describe_cluster_extension):
        code, msg = _error(call, ClusterArn=_arn(c, "other"), ExtensionArn=arn)
        assert code == "ResourceNotFound" and "has no extension" in msg
        code, _ = _error(call, ClusterArn=cluster, ExtensionArn=arn[:-12] + "0" * 12)
        assert code == "ResourceNotFound"
    code, _ = _error(c.describe_cluster_extension, ClusterArn=cluster, ExtensionArn="arn:aws:sagemaker:x")
    assert code == "ValidationException"  # not an ExtensionArn at all: the model's pattern
    assert (api.store.extensions(), len(api.store.events("demo"))) == (rows, n_events)
    # Deleting: neither an Update nor a second Delete
    c.delete_cluster_extension(ClusterArn=cluster, ExtensionArn=arn)
    rows, n_events = api.store.extensions(), len(api.store.events("demo"))
    assert rows[0].status == "Deleting"
    for call, kw in ((c.update_cluster_extension, {"ConfigurationValues": "{}"}), (c.delete_cluster_extension, {})):
        code, msg = _error(call, ClusterArn=cluster, ExtensionArn=arn, **kw)
        assert code == "ConflictException" and "Deleting" in msg
    assert (api.store.extensions(), len(api.store.events("demo"))) == (rows, n_events)
    # a Deleting cluster: no Update either
    arn2 = c.create_cluster_extension(**_bodies(_arn(c, "other")))["ExtensionArn"]
    api.store.update_cluster("other", status="Deleting")
    code, _ = _error(c.update_cluster_extension, ClusterArn=_arn(c, "other"), ExtensionArn=arn2, ConfigurationValues="{}")
    assert code == "ConflictException"


def test_the_cli_drives_the_six_operations(api, monkeypatch):
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.engine import daemon
    from lab.errors import Conflict, UsageError

    monkeypatch.setattr(daemon, "ensure_running", lambda *a, **k: 0)  # no engine: the rows only
    seed_cluster(api.store, "demo", computes=1)
    run = CliRunner().invoke
    assert run(app, ["list-cluster-extension-versions"]).output.split() == ["1.1.0", "1.0.0"]
    made = json.loads(run(app, ["create-cluster-extension", "demo", "--extension-version", "1.0.0",
                                "--configuration", '{"scrapeIntervalSeconds": 20}', "-o", "json"]).output)
    assert made["ExtensionArn"] == api.store.extension("demo", OBS).arn
    text = run(app, ["describe-cluster-extension", "demo"]).output
    assert "sagemaker-observability 1.0.0  Creating  active on 0 of 3 running nodes" in text
    assert '"scrapeIntervalSeconds":20' in text
    d = json.loads(run(app, ["describe-cluster-extension", "demo", made["ExtensionArn"], "-o", "json"]).output)
    assert d["ExtensionDetails"]["CreationTime"].endswith("+00:00") and d["NodeSummary"]["TotalCount"] == 3
    listed = json.loads(run(app, ["list-cluster-extensions", "demo", "-o", "json"]).output)["Extensions"]
    assert [x["ExtensionName"] for x in listed] == [OBS]
    bad = run(app, ["update-cluster-extension", "demo", "--configuration", '{"scrapeIntervalSecond": 30}'])
    assert isinstance(bad.exception, UsageError) and "did you mean 'scrapeIntervalSeconds'" in bad.exception.message
    assert "1.1.0 Creating on demo" in run(app, ["update-cluster-extension", "demo", "--extension-version", "1.1.0"]).output
    assert "Deleting on demo" in run(app, ["delete-cluster-extension", "demo"]).output
    again = run(app, ["delete-cluster-extension", "demo"])
    assert isinstance(again.exception, Conflict)
    assert api.store.extension("demo", OBS).status == "Deleting"
