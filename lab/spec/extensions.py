"""The cluster extensions the lab knows (CreateClusterExtension; docs/adr/0017-cluster-extensions.md):
their versions, their configuration (`ConfigurationValues`, a JSON object in a string) checked
setting by setting, merged as RFC 7386 says (`null` puts a setting back to its default), and the ARN
of an installed one.

The model shows one key path, `{"metricsProvider":{"nodeMetrics":{"level":"ADVANCED"}}}`; the other
settings are the lab's own (docs/api.md says so). Pure: no store, no engine.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from lab.errors import UsageError
from lab.spec.problems import Problem, SpecInvalid
from lab.spec.servicemodel import close_matches, kind, short

OBSERVABILITY = "sagemaker-observability"
# name -> versions, highest first (ListClusterExtensionVersions' order)
CATALOGUE: dict[str, tuple[str, ...]] = {OBSERVABILITY: ("1.1.0", "1.0.0")}
FIELD = "ConfigurationValues"
EXAMPLE = '{"metricsProvider":{"nodeMetrics":{"level":"ADVANCED"}}}'


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]
    default: str
    since: dict[str, str]  # a value -> the first version that has it

    def problem(self, v: Any, version: str) -> str | None:
        if v not in self.values:
            return f"{short(v)} is not one of {', '.join(self.values)}"
        first = self.since.get(v)
        if first and _key(version) < _key(first):
            return f"{v} needs version {first} or later (this extension is {version})"
        return None


@dataclass(frozen=True)
class Whole:
    low: int
    high: int
    default: int

    def problem(self, v: Any, version: str) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int) or not self.low <= v <= self.high:
            return f"{short(v)} is not a whole number from {self.low} to {self.high}"
        return None


LEVEL = ("BASIC", "ADVANCED")
# the settings of sagemaker-observability: nested keys -> a Choice or a Whole
SETTINGS: dict[str, Any] = {
    "metricsProvider": {
        "nodeMetrics": {"level": Choice(LEVEL, "BASIC", {})},
        "slurmMetrics": {"level": Choice(LEVEL, "BASIC", {"ADVANCED": "1.1.0"})},
    },
    "scrapeIntervalSeconds": Whole(10, 300, 60),
}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def later(a: str, b: str) -> bool:
    """Whether version `a` is later than `b`."""
    return _key(a) > _key(b)


# ------------------------------------------------------------------------------------ names, versions
def versions(name: str) -> tuple[str, ...]:
    """The extension's versions, highest first; () for a name the lab does not know."""
    return CATALOGUE.get(name, ())


def check_name(name: str, field: str = "ExtensionName") -> None:
    if name not in CATALOGUE:
        near = close_matches(name, CATALOGUE, n=1)
        raise UsageError(f"{field}: the lab has no extension named {name!r}"
                         + (f"; did you mean {near[0]!r}?" if near else ""),
                         f"ListClusterExtensionVersions names an extension's versions; the lab's: {', '.join(CATALOGUE)}")


def pick_version(name: str, version: str | None, field: str = "ExtensionVersion") -> str:
    """The version asked for (the latest when none), checked against the catalogue."""
    check_name(name)
    have = versions(name)
    if version is None:
        return have[0]
    if version not in have:
        raise UsageError(f"{field}: {name} has no version {version!r}",
                         f"ListClusterExtensionVersions --extension-name {name} lists {', '.join(have)}")
    return version


# ------------------------------------------------------------------------------------ configuration
def parse(text: str | None, field: str = FIELD) -> dict:
    """The request's ConfigurationValues as a JSON object ({} when absent)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{field}: not JSON ({e})", f"give a JSON object in a string, e.g. {EXAMPLE}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{field}: expected a JSON object, got {kind(value, 'an object')}", f"e.g. {EXAMPLE}")
    return value


def problems(config: dict, version: str, field: str = FIELD) -> list[Problem]:
    """Every unknown setting and bad value of `config` (a request's, `null` meaning the default)."""
    out: list[Problem] = []
    _walk(config, SETTINGS, (field,), version, out)
    return out


def _walk(given: dict, schema: dict, loc: tuple, version: str, out: list[Problem]) -> None:
    for k, v in given.items():
        here = (*loc, k)
        if k not in schema:
            near = close_matches(str(k), schema, n=1)
            out.append(Problem(here, "unknown setting" + (f"; did you mean {near[0]!r}?" if near else ""),
                               f"the settings here are {', '.join(schema)}"))
            continue
        want = schema[k]
        if v is None:  # the default
            continue
        if isinstance(want, dict):
            if not isinstance(v, dict):
                out.append(Problem(here, f"expected an object, got {kind(v, 'an object')}",
                                   f"its settings are {', '.join(want)}"))
            else:
                _walk(v, want, here, version, out)
            continue
        why = want.problem(v, version)
        if why:
            out.append(Problem(here, why))


def check(config: dict, version: str, field: str = FIELD) -> None:
    """Raise SpecInvalid (a ValidationException naming each setting) when `config` has a problem."""
    found = problems(config, version, field)
    if found:
        raise SpecInvalid(found, what="extension configuration")


def merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: `patch`'s objects merged into `base`'s, `null` removes a key."""
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def defaults(schema: dict = SETTINGS) -> dict:
    """Every setting at its default."""
    return {k: defaults(v) if isinstance(v, dict) else v.default for k, v in schema.items()}


def settings(config: dict) -> dict:
    """`config` (already checked, without nulls) over the defaults: every setting has a value."""
    return merge(defaults(), config)


def shown(values: dict) -> str:
    """ConfigurationValues as DescribeClusterExtension shows them (compact JSON)."""
    return json.dumps(values, separators=(",", ":"), sort_keys=True)


def scrape_interval(values: dict) -> int:
    return int(values.get("scrapeIntervalSeconds") or SETTINGS["scrapeIntervalSeconds"].default)


# ------------------------------------------------------------------------------------ ARNs
_CLUSTER_ARN = re.compile(r"(arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}):cluster/([a-z0-9]{12})")


def arn(cluster_arn: str, name: str, ext_id: str) -> str:
    """arn:aws:sagemaker:REGION:ACCOUNT:extension/<name>/<cluster's 12 hex>/<id>, in the cluster's
    region and account (the model's ExtensionArn pattern)."""
    m = _CLUSTER_ARN.fullmatch(cluster_arn)
    if m is None:
        raise ValueError(f"not a cluster ARN: {cluster_arn!r}")
    return f"{m.group(1)}:extension/{name}/{m.group(2)}/{ext_id}"
