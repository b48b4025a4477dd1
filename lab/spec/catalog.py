"""Instance types -> VM sizes for the lab.

The names are HyperPod's (the ClusterInstanceType enum of botocore's SageMaker model); the sizes are
the lab's, small enough for a laptop running VMs under software emulation. A handful of common types
have a fixed size (DEFAULTS); every other type of the enum is sized by a rule on its size suffix
(`rule_size`). `$SLURMLAB_HOME/catalog.yaml` overrides both:

    instance_types:
      ml.c5.large: {vcpus: 1, memory_mib: 1024}
      ml.g5.xlarge: {vcpus: 2, memory_mib: 2048}

A name that is not a HyperPod instance type is always an error that lists close valid names. The
file is read with lab.spec.yamlsrc and checked by pydantic (`CatalogFile`): every problem at once,
as `<file>:<line>: <field path>: <what>; <fix>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from lab.errors import SpecError
from lab.paths import home

from . import yamlsrc
from .servicemodel import instance_type_hint, instance_types
from .problems import Problem, SpecInvalid

CATALOG_FILE = "catalog.yaml"
VCPUS_RANGE = (1, 64)
MEMORY_MIB_RANGE = (256, 1024 * 1024)


@dataclass(frozen=True)
class VmSize:
    vcpus: int
    memory_mib: int
    source: str = "default"  # "default" (the table), "rule", or the catalog.yaml path


def _d(vcpus: int, memory_mib: int) -> VmSize:
    return VmSize(vcpus, memory_mib, "default")


# The common types, sized by hand. Every VM here but the 2xlarge and bigger fits in 1 GiB.
DEFAULTS: dict[str, VmSize] = {
    "ml.t3.medium": _d(1, 768),
    "ml.t3.large": _d(1, 1024),
    "ml.t3.xlarge": _d(2, 1024),
    "ml.t3.2xlarge": _d(2, 1536),
    "ml.c5.large": _d(1, 768),
    "ml.c5.xlarge": _d(2, 1024),
    "ml.c5.2xlarge": _d(2, 1536),
    "ml.m5.large": _d(1, 1024),
    "ml.m5.xlarge": _d(2, 1024),
    "ml.m5.2xlarge": _d(2, 1536),
    "ml.g5.xlarge": _d(2, 1024),
    "ml.g5.2xlarge": _d(2, 1536),
    "ml.p4d.24xlarge": _d(2, 2048),
    "ml.p5.48xlarge": _d(2, 2048),
    "ml.trn1.32xlarge": _d(2, 2048),
}

# Slurm's view of a node (docs/adr/0031): each of the VM's vCPUs is one core of two hardware threads,
# as an AWS instance's vCPUs are, so Slurm sees twice the VM's vCPUs: an ml.c5.large (2 vCPUs on AWS,
# 1 in the lab) has CPUs=2 in slurm.conf, and the jobs written for HyperPod (`srun -N2 -n4` on two of
# them) are placed as there. slurmd runs with SlurmdParameters=config_overrides: it takes slurm.conf's
# count over the VM's; the tasks share the VM's vCPUs.
SLURM_CPUS_PER_VCPU = 2


def slurm_cpus(vcpus: int) -> int:
    """The CPUs slurm.conf gives a node whose VM has `vcpus` (SLURM_CPUS_PER_VCPU)."""
    return vcpus * SLURM_CPUS_PER_VCPU


# The rule, by the size suffix (the part after the last dot).
RULE: tuple[tuple[str, VmSize], ...] = (
    ("medium, large (and smaller)", VmSize(1, 768, "rule")),
    ("xlarge", VmSize(2, 1024, "rule")),
    ("2xlarge to 4xlarge", VmSize(2, 1536, "rule")),
    ("6xlarge and bigger, metal", VmSize(2, 2048, "rule")),
)


def rule_size(instance_type: str) -> VmSize:
    """The size the rule gives any instance type name (2 vCPUs at most: a lab host may have 2 cores)."""
    suffix = instance_type.rsplit(".", 1)[-1]
    if suffix in ("nano", "micro", "small", "medium", "large"):
        return RULE[0][1]
    if suffix == "xlarge":
        return RULE[1][1]
    m = re.fullmatch(r"(\d+)xlarge", suffix)
    if m and int(m.group(1)) <= 4:
        return RULE[2][1]
    return RULE[3][1]


def _same(count: int, *names: str) -> dict[str, int]:
    return {n: count for n in names}


# The real number of GPUs of HyperPod's GPU instance types (every one in the ClusterInstanceType
# enum; a unit test keeps the names in it). A lab VM of such a type gets that many emulated GPUs
# (Slurm GRES `gpu`) unless the spec's `Lab.Gpus` asks for fewer. Trainium (trn*) and every other
# type have none.
GPUS: dict[str, int] = {
    **_same(1, "ml.g4dn.xlarge", "ml.g4dn.2xlarge", "ml.g4dn.4xlarge", "ml.g4dn.8xlarge", "ml.g4dn.16xlarge"),
    "ml.g4dn.12xlarge": 4,
    **_same(1, "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.16xlarge"),
    **_same(4, "ml.g5.12xlarge", "ml.g5.24xlarge"),
    "ml.g5.48xlarge": 8,
    **_same(1, "ml.g6.xlarge", "ml.g6.2xlarge", "ml.g6.4xlarge", "ml.g6.8xlarge", "ml.g6.16xlarge"),
    **_same(4, "ml.g6.12xlarge", "ml.g6.24xlarge"),
    "ml.g6.48xlarge": 8,
    **_same(1, "ml.gr6.4xlarge", "ml.gr6.8xlarge"),
    **_same(1, "ml.g6e.xlarge", "ml.g6e.2xlarge", "ml.g6e.4xlarge", "ml.g6e.8xlarge", "ml.g6e.16xlarge"),
    **_same(4, "ml.g6e.12xlarge", "ml.g6e.24xlarge"),
    "ml.g6e.48xlarge": 8,
    **_same(1, "ml.g7.2xlarge", "ml.g7.4xlarge", "ml.g7.8xlarge"),
    "ml.g7.12xlarge": 2,
    "ml.g7.24xlarge": 4,
    "ml.g7.48xlarge": 8,
    **_same(1, "ml.g7e.2xlarge", "ml.g7e.4xlarge", "ml.g7e.8xlarge"),
    "ml.g7e.12xlarge": 2,
    "ml.g7e.24xlarge": 4,
    "ml.g7e.48xlarge": 8,
    **_same(8, "ml.p4d.24xlarge", "ml.p4de.24xlarge"),
    "ml.p5.4xlarge": 1,
    **_same(8, "ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.p5en.48xlarge"),
    "ml.p6e-gb200.36xlarge": 4,
    **_same(8, "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge"),
}


def gpu_count(instance_type: str) -> int:
    """The GPUs a real instance of this type has (0 for CPU-only, Trainium and unknown types)."""
    return GPUS.get(instance_type, 0)


def check_instance_type(name: str) -> None:
    """SpecError unless `name` is in HyperPod's ClusterInstanceType enum."""
    if name not in instance_types():
        raise SpecError(f"'{name}' is not a HyperPod instance type", instance_type_hint(name))


class Catalog:
    """Instance type -> VmSize: DEFAULTS, then the rule, with `overrides` (catalog.yaml) on top."""

    def __init__(self, overrides: Mapping[str, VmSize] | None = None):
        overrides = dict(overrides or {})
        for name in overrides:
            check_instance_type(name)
        self.overrides = overrides

    @classmethod
    def load(cls, path: Path | None = None) -> Catalog:
        """The catalog with `path` (default `$SLURMLAB_HOME/catalog.yaml`, if it exists) applied."""
        if path is None:
            path = home() / CATALOG_FILE
            if not path.exists():
                return cls()
        return cls(read_overrides(path))

    def size(self, instance_type: str) -> VmSize:
        check_instance_type(instance_type)
        if instance_type in self.overrides:
            return self.overrides[instance_type]
        return DEFAULTS.get(instance_type) or rule_size(instance_type)

    def __contains__(self, instance_type: object) -> bool:
        return instance_type in instance_types()

    def __iter__(self) -> Iterator[str]:
        return iter(instance_types())

    def table(self) -> list[tuple[str, VmSize]]:
        """Every HyperPod instance type with its lab size, in the enum's order."""
        return [(t, self.size(t)) for t in instance_types()]


def load_catalog(path: Path | None = None) -> Catalog:
    return Catalog.load(path)


class _Size(BaseModel):
    """One catalog.yaml entry."""

    model_config = ConfigDict(extra="forbid", strict=True)
    vcpus: int = Field(ge=VCPUS_RANGE[0], le=VCPUS_RANGE[1])
    memory_mib: int = Field(ge=MEMORY_MIB_RANGE[0], le=MEMORY_MIB_RANGE[1])


def _instance_type(name: str) -> str:
    if name not in instance_types():
        raise PydanticCustomError("instance_type", "'{name}' is not a HyperPod instance type",
                                  {"name": name, "fix": instance_type_hint(name)})
    return name


class CatalogFile(BaseModel):
    """catalog.yaml: `instance_types: {<HyperPod instance type>: {vcpus, memory_mib}}`."""

    model_config = ConfigDict(extra="forbid")
    instance_types: dict[Annotated[str, AfterValidator(_instance_type)], _Size] = {}

    @field_validator("instance_types", mode="before")
    @classmethod
    def _keys_as_text(cls, value: Any) -> Any:
        if value is None:
            return {}  # `instance_types:` with nothing under it
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else value


_RANGES = {"vcpus": VCPUS_RANGE, "memory_mib": MEMORY_MIB_RANGE}


def _problem(err: dict) -> Problem:
    """A pydantic error of CatalogFile -> the catalog's words for it."""
    loc, kind = tuple(err["loc"]), err["type"]
    if len(loc) == 3 and loc[2] == "[key]":  # a name that is not an instance type
        return Problem(loc[:2], err["msg"], (err.get("ctx") or {}).get("fix"))
    if kind == "extra_forbidden":
        where = "an entry has vcpus and memory_mib" if len(loc) > 1 else "catalog.yaml has only instance_types"
        return Problem(loc, f"unknown key: {where}", "remove it")
    if kind == "missing":
        return Problem(loc, "missing", f"add {loc[-1]}")
    if len(loc) == 1:
        return Problem(loc, "expected a mapping: instance type -> {vcpus, memory_mib}", None)
    if len(loc) == 2:
        return Problem(loc, "expected {vcpus: N, memory_mib: N}", None)
    lo, hi = _RANGES[loc[-1]]
    return Problem(loc, f"{err['input']!r} is not a whole number from {lo} to {hi}", None)


def read_overrides(path: Path) -> dict[str, VmSize]:
    """Read and check a catalog.yaml; every problem is reported with its line."""
    doc = yamlsrc.read(path)
    problems: list[Problem] = list(doc.duplicates)
    if doc.data is None:
        return {}  # an empty file changes nothing
    if not isinstance(doc.data, dict):
        problems.append(Problem((), "expected a mapping with the key instance_types", "see docs/spec.md"))
        raise SpecInvalid(doc.place(problems), str(path), what="instance type catalog")
    try:
        parsed = CatalogFile.model_validate(doc.data)
    except ValidationError as e:
        found = [_problem(err) for err in e.errors()]
        names = [p for p in found if p.what.endswith("is not a HyperPod instance type")]
        bad_names = {p.loc for p in names}
        # An entry under a name that is not an instance type: the name's problem says it all.
        problems += names + [p for p in found if p.loc[:2] not in bad_names]
    if problems:
        raise SpecInvalid(doc.place(problems), str(path), what="instance type catalog")
    return {name: VmSize(e.vcpus, e.memory_mib, str(path)) for name, e in parsed.instance_types.items()}
