"""ARNs and ids as a strict client expects them: a cluster's ARN names the region its creator signed
for (else the server's default) and the configured account; every provider's instance ids match the
model's ClusterNodeId pattern (tests/unit/test_engine_sim.py checks the sim provider's)."""

from __future__ import annotations

import json
import re

import pytest

from tests.api.seed import create_request

def test_the_arn_names_the_region_the_client_signed_for(api):
    c = api.client(region="eu-west-2")
    arn = c.create_cluster(**create_request("west"))["ClusterArn"]
    assert re.fullmatch(r"arn:aws:sagemaker:eu-west-2:000000000000:cluster/[a-z0-9]{12}", arn)
    assert api.client().describe_cluster(ClusterName=arn)["ClusterName"] == "west"  # found by it from any region
    assert api.client(region="ap-south-1").delete_cluster(ClusterName="west")["ClusterArn"] == arn


def test_unsigned_requests_get_the_servers_region_and_account(api):
    api.lab.region, api.lab.account = "ca-central-1", "123456789012"
    status, body = api.raw(json.dumps(create_request("plain")), target="SageMaker.CreateCluster")
    assert status == 200
    assert body["ClusterArn"].startswith("arn:aws:sagemaker:ca-central-1:123456789012:cluster/")


@pytest.mark.parametrize("kw,says", [({"region": "Mars"}, "--region (or $SLURMLAB_REGION) 'Mars': not an AWS region"),
                                     ({"account": "12ab"}, "--account-id (or $SLURMLAB_ACCOUNT_ID) '12ab': not 12 digits")])
def test_serve_refuses_a_bad_region_or_account(lab_home, kw, says):
    from lab import api
    from lab.errors import UsageError

    with pytest.raises(UsageError) as e:
        api.run(port=0, provider="sim", **kw)
    assert says in e.value.message
    assert not (lab_home / "serve.lock").exists()  # refused before it took the state directory
