"""lab/spec/extensions.py: the catalogue, the configuration's checks (paths, close-match hints), the
RFC 7386 merge with null = default, and the ARN against the model's pattern."""

from __future__ import annotations

import re

import pytest

from lab.errors import UsageError
from lab.spec import extensions as ext
from lab.spec.problems import SpecInvalid
from lab.spec.servicemodel import shape

OBS = "sagemaker-observability"


def test_versions_are_highest_first_and_the_latest_is_the_default():
    assert ext.versions(OBS) == ("1.1.0", "1.0.0") and ext.versions("nope") == ()
    assert ext.pick_version(OBS, None) == "1.1.0" and ext.pick_version(OBS, "1.0.0") == "1.0.0"
    with pytest.raises(UsageError) as e:
        ext.pick_version(OBS, "2.0.0")
    assert "ExtensionVersion: sagemaker-observability has no version '2.0.0'" in e.value.message
    assert "ListClusterExtensionVersions" in e.value.fix and "1.1.0, 1.0.0" in e.value.fix
    with pytest.raises(UsageError) as e:
        ext.check_name("sagemaker-observabilty")
    assert "did you mean 'sagemaker-observability'" in e.value.message and "ListClusterExtensionVersions" in e.value.fix
    assert ext.later("1.10.0", "1.9.0") and not ext.later("1.0.0", "1.0.0")


def test_every_problem_is_named_by_its_path():
    cfg = {"metricsProvider": {"nodeMetrics": {"levl": "BASIC"}, "slurmMetrics": {"level": "FULL"}, "gpuMetrics": {}},
           "scrapeIntervalSeconds": 5, "scrapeInterval": 30}
    got = {p.path: (p.what, p.fix) for p in ext.problems(cfg, "1.1.0")}
    assert got["ConfigurationValues.metricsProvider.nodeMetrics.levl"][0] == "unknown setting; did you mean 'level'?"
    assert got["ConfigurationValues.metricsProvider.slurmMetrics.level"][0] == "'FULL' is not one of BASIC, ADVANCED"
    assert got["ConfigurationValues.metricsProvider.gpuMetrics"][0].startswith("unknown setting")
    assert got["ConfigurationValues.scrapeIntervalSeconds"][0] == "5 is not a whole number from 10 to 300"
    assert got["ConfigurationValues.scrapeInterval"][0] == "unknown setting; did you mean 'scrapeIntervalSeconds'?"
    assert len(got) == 5
    assert [p.what for p in ext.problems({"scrapeIntervalSeconds": True}, "1.1.0")] == ["True is not a whole number from 10 to 300"]
    assert [p.what for p in ext.problems({"metricsProvider": "ADVANCED"}, "1.1.0")] == ["expected an object, got a string"]


def test_per_user_slurm_metrics_need_1_1_0():
    cfg = {"metricsProvider": {"slurmMetrics": {"level": "ADVANCED"}}}
    assert ext.problems(cfg, "1.1.0") == []
    [p] = ext.problems(cfg, "1.0.0")
    assert p.what == "ADVANCED needs version 1.1.0 or later (this extension is 1.0.0)"
    with pytest.raises(SpecInvalid, match="1 problem in the extension configuration"):
        ext.check(cfg, "1.0.0")


def test_the_model_s_example_parses_and_bad_json_is_refused():
    assert ext.parse(ext.EXAMPLE) == {"metricsProvider": {"nodeMetrics": {"level": "ADVANCED"}}}
    assert ext.problems(ext.parse(ext.EXAMPLE), "1.0.0") == []
    assert ext.parse(None) == {}
    with pytest.raises(UsageError, match="ConfigurationValues: not JSON"):
        ext.parse("{metricsProvider")
    with pytest.raises(UsageError, match="expected a JSON object, got a list"):
        ext.parse("[1]")


def test_merge_is_rfc_7386_and_null_is_the_default():
    base = {"metricsProvider": {"nodeMetrics": {"level": "ADVANCED"}}, "scrapeIntervalSeconds": 30}
    patch = {"metricsProvider": {"slurmMetrics": {"level": "ADVANCED"}}, "scrapeIntervalSeconds": None}
    merged = ext.merge(base, patch)
    assert merged == {"metricsProvider": {"nodeMetrics": {"level": "ADVANCED"}, "slurmMetrics": {"level": "ADVANCED"}}}
    assert ext.problems(patch, "1.1.0") == []  # null is allowed: it means the default
    values = ext.settings(merged)
    assert values["scrapeIntervalSeconds"] == 60 and values["metricsProvider"]["nodeMetrics"]["level"] == "ADVANCED"
    assert ext.settings({}) == ext.defaults() == {"metricsProvider": {"nodeMetrics": {"level": "BASIC"},
                                                                      "slurmMetrics": {"level": "BASIC"}},
                                                  "scrapeIntervalSeconds": 60}
    assert ext.merge({"a": 1}, {"a": {"b": None}}) == {"a": {}} and ext.merge({"a": 1}, 5) == 5
    assert ext.scrape_interval(ext.settings({"scrapeIntervalSeconds": 15})) == 15
    assert ext.shown({"b": 1, "a": {"c": 2}}) == '{"a":{"c":2},"b":1}'


def test_the_arn_matches_the_model_s_pattern():
    cluster = "arn:aws:sagemaker:eu-west-1:123456789012:cluster/0123456789ab"
    arn = ext.arn(cluster, OBS, "abcdef012345")
    assert arn == "arn:aws:sagemaker:eu-west-1:123456789012:extension/sagemaker-observability/0123456789ab/abcdef012345"
    assert re.fullmatch(shape("ExtensionArn").metadata["pattern"], arn)
    with pytest.raises(ValueError):
        ext.arn("arn:aws:sagemaker:eu-west-1:123456789012:cluster/demo", OBS, "x")
