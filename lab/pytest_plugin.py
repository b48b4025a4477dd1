"""slurmlab's pytest plugin (entry point `pytest11: slurmlab`; `-p no:slurmlab` turns it off): the fixture
`slurm_cluster`, a lab cluster for a test session (docs/verification.md).

    import pytest

    @pytest.mark.slurm_cluster(spec="cluster.yaml")
    def test_hello(slurm_cluster):
        job = slurm_cluster.sbatch("#!/bin/sh\\nsrun -N2 hostname\\n", nodes=2)
        assert job.wait() == "COMPLETED"
        assert len(job.output.split()) == 2

The cluster comes from the command line (--slurm-cluster NAME: a running one; --slurm-spec FILE) or the
test's marker `slurm_cluster(spec=..., name=...)`. A spec whose cluster already runs is reused; else it is
created once for the session (with its progress on stderr), a checkpoint is taken when it is ready, and it
is deleted at the end (--slurm-keep keeps it). `slurm_cluster.reset()` puts it back to that checkpoint;
--slurm-reset=module does so before each test module after the first.

This module is imported by every pytest run of the environment: its imports stay light."""

from __future__ import annotations

from pathlib import Path

import pytest

MARKER = "slurm_cluster"


def pytest_addoption(parser) -> None:
    g = parser.getgroup("slurmlab", "slurmlab: a lab cluster for the tests (fixture slurm_cluster)")
    g.addoption("--slurm-cluster", default=None, metavar="NAME",
                help="use this running lab cluster (wins over specs and markers)")
    g.addoption("--slurm-spec", default=None, metavar="FILE",
                help="the cluster spec (YAML) for tests whose marker names none; its cluster is reused if it runs")
    g.addoption("--slurm-provider", default="vagrant", choices=("vagrant", "sim"),
                help="how a cluster the session creates is made: vagrant (real VMs) or sim (simulated: no Slurm "
                     "inside, for API practice)")
    g.addoption("--slurm-keep", action="store_true", default=False,
                help="keep the clusters the session created (default: deleted at its end)")
    g.addoption("--slurm-checkpoint", action="store_true", default=False,
                help="take the ready checkpoint of a reused cluster too (a created one always gets it)")
    g.addoption("--slurm-reset", choices=("none", "module"), default="none",
                help="module: put the cluster back to its ready checkpoint before each test module after the first")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(spec=None, name=None): the lab cluster the test's slurm_cluster "
                            "fixture gives (a spec file, relative to the test's folder, or a running cluster's name)")


class _Session:
    """The clusters of one pytest session: by name, which it created, and which module last used each."""

    def __init__(self, config):
        self.config = config
        self.clusters: dict = {}
        self.created: list[str] = []
        self.last_module: dict[str, str] = {}

    def get(self, name: str | None, spec: Path | None, take_checkpoint: bool):
        from lab.testing.cluster import LabCluster, lab

        if name is None:
            from lab.spec import load_spec

            name = load_spec(spec).name
        if name in self.clusters:
            return self.clusters[name]
        c = LabCluster(name)
        status = _status(c)
        if status is None and spec is None:
            pytest.fail(f"no lab cluster {name} is running (slurmlab list-clusters), and no spec says how to make "
                        "it: give --slurm-spec FILE or the marker's spec=", pytrace=False)
        if status is None:
            p = lab("create-cluster", "--spec", str(spec), "--wait", "--wait-for", "FullSize", "--output", "json",
                    "--provider", self.config.getoption("slurm_provider"), stream=True)
            self.created.append(name)
            if p.returncode != 0:
                pytest.fail(f"slurmlab create-cluster --spec {spec} exited {p.returncode}; the cluster's events: "
                            f"slurmlab list-cluster-events {name}", pytrace=False)
            take_checkpoint = True
        elif status != "InService":
            pytest.fail(f"lab cluster {name} is {status}, not InService: slurmlab describe-cluster {name}",
                        pytrace=False)
        if take_checkpoint:
            c.checkpoint()
        self.clusters[name] = c
        return c

    def close(self) -> None:
        from lab.testing.cluster import lab

        for c in self.clusters.values():
            c.stop_serving()
        if not self.config.getoption("slurm_keep"):
            for name in self.created:
                lab("delete-cluster", name, timeout=1800)


def _status(c) -> str | None:
    """The cluster's status, None when the lab home has no cluster of that name."""
    from lab.errors import NotFound

    try:
        return c.describe()["ClusterStatus"]
    except NotFound:
        return None


@pytest.fixture(scope="session")
def _slurmlab_session(request):
    s = _Session(request.config)
    yield s
    s.close()


@pytest.fixture
def slurm_cluster(request, _slurmlab_session):
    """The lab cluster of this test (lab.testing.cluster.LabCluster): --slurm-cluster, else the marker's
    name or spec, else --slurm-spec. Made once per session; reset between modules with --slurm-reset=module."""
    config = request.config
    marker = request.node.get_closest_marker(MARKER)
    kw = dict(marker.kwargs) if marker else {}
    if marker and marker.args and "spec" not in kw:
        kw["spec"] = marker.args[0]
    name = config.getoption("slurm_cluster") or None
    spec = None
    if name is None:
        name = kw.get("name")
        if kw.get("spec"):
            spec = Path(kw["spec"])
            if not spec.is_absolute():
                spec = Path(request.node.path).parent / spec
        elif config.getoption("slurm_spec"):
            spec = Path(config.getoption("slurm_spec")).expanduser().resolve()
    if name is None and spec is None:
        pytest.fail("slurm_cluster needs a cluster: pytest --slurm-cluster NAME, --slurm-spec FILE, or "
                    "@pytest.mark.slurm_cluster(spec='cluster.yaml')", pytrace=False)
    if spec is not None and not spec.is_file():
        pytest.fail(f"slurm_cluster: no spec file {spec}", pytrace=False)
    c = _slurmlab_session.get(name, spec, config.getoption("slurm_checkpoint"))
    module = request.node.module.__name__ if request.node.module else ""
    last = _slurmlab_session.last_module.get(c.name)
    if config.getoption("slurm_reset") == "module" and last is not None and last != module:
        c.reset()
    _slurmlab_session.last_module[c.name] = module
    return c
