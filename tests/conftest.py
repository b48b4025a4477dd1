import os

import pytest


@pytest.fixture
def lab_home(tmp_path, monkeypatch):
    """A private $SLURMLAB_HOME for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("SLURMLAB_HOME", str(home))
    return home


def pytest_collection_modifyitems(config, items):
    """e2e tests need root and a host that can run libvirtd; outside CI they skip when that is missing.
    In CI (CI=true) they never skip: a missing host is a failure."""
    if os.environ.get("CI") == "true" or os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="e2e tests need root (they start libvirtd and VMs)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)
