"""What every handler of the API shares: the lab (`Lab`), the request's region, and the mapping of
names and errors (a ClusterName or ARN to a cluster, the lab's errors to SageMaker's)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.api import model
from lab.api.model import ApiError
from lab.control import views
from lab.errors import Conflict, LabError, NotFound, UsageError
from lab.spec.problems import SpecInvalid
from lab.store.db import Store
from lab.store.rows import ClusterRow
from lab.students import Registry, Student


@dataclass
class Lab:
    """What the handlers share: the store, the provider new clusters use, and hooks."""

    store: Store
    provider: str = "sim"
    base_dir: Path | None = None  # relative LifeCycleConfig.SourceS3Uri resolve against it
    ensure_engine: Callable[[], Any] | None = None
    region: str = field(default_factory=views.default_region)  # ARNs of requests that name no region
    account: str = field(default_factory=views.default_account)
    tokens: dict[str, tuple[float, str, dict]] = field(default_factory=dict)
    tokens_lock: threading.Lock = field(default_factory=threading.Lock)
    resolve_image: Callable[[str | None], str] | None = None  # ImageId -> box (None: lab.box.images.resolve)
    students: Registry | None = None  # `serve --auth`: requests are signed by students (lab/api/tenancy.py)
    hubs: Any = None  # `serve`: forwards to the clusters' JupyterHubs, the console's links (lab/api/hubs.py)

    def engine(self) -> None:
        if self.ensure_engine:
            self.ensure_engine()


REGION: ContextVar[str | None] = ContextVar("region", default=None)  # the request's, set by call()
CALLER: ContextVar[Student | None] = ContextVar("caller", default=None)  # who signed it (None: no --auth, the console)


def visible(lab: Lab, c: ClusterRow) -> bool:
    """Whether the request's caller may see cluster `c`: a student sees only their own clusters."""
    who = CALLER.get()
    if lab.students is None or who is None or who.Instructor:
        return True
    return lab.students.owner(c.name, c.created_at) == who.Name


# ------------------------------------------------------------------------------------ helpers
def cluster_name(lab: Lab, ref: str, field_name: str = "ClusterName") -> str:
    """A ClusterName or ClusterArn -> the name of an existing cluster (else ResourceNotFound)."""
    if ref.startswith("arn:"):
        for c in lab.store.clusters():
            if c.arn == ref and visible(lab, c):
                return c.name
        raise ApiError("ResourceNotFound", f"{field_name}: no cluster with ARN '{ref}' in this lab")
    c = lab.store.cluster(ref)
    if c is None or not visible(lab, c):  # another student's cluster is not there for this one
        raise ApiError("ResourceNotFound", f"{field_name}: no cluster named '{ref}' in this lab "
                       "(ListClusters shows the clusters there are)")
    return ref


def not_found(field_name: str, e: NotFound) -> ApiError:
    """ResourceNotFound naming the request's field, with the engine's message and fix."""
    return ApiError("ResourceNotFound", f"{field_name}: {e.message}" + (f" ({e.fix})" if e.fix else ""))


def spec_error(e: SpecInvalid, code: str = "ValidationException") -> ApiError:
    limit = [p for p in e.problems if "lab's limit" in p.what]
    if limit and len(limit) == len(e.problems):
        code = "ResourceLimitExceeded"
    return model.validation_error(e.problems, code)


def lab_error(e: LabError, op: str) -> ApiError:
    """A lab error raised by the engine -> the SageMaker error the operation declares."""
    if isinstance(e, SpecInvalid):
        return spec_error(e)
    text = e.message + (f" ({e.fix})" if e.fix else "")
    declared = model.op_errors(op)
    if isinstance(e, NotFound):
        return ApiError("ResourceNotFound", text)
    if isinstance(e, Conflict):
        for code in ("ResourceInUse", "ConflictException") if op == "CreateCluster" else ("ConflictException", "ResourceInUse"):
            if code in declared:
                return ApiError(code, text)
        return ApiError("ValidationException", text)
    if isinstance(e, UsageError):
        return ApiError("ValidationException", text)
    return ApiError("InternalFailure", text, 500)
