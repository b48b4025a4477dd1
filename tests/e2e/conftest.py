import pytest

from tests.e2e import lock
from tests.e2e.labcli import Served


@pytest.fixture(scope="session", autouse=True)
def e2e_session():
    """This session's share of libvirtd (tests/e2e/lock.py): the fd that a test stopping it makes exclusive."""
    with lock.shared() as fd:
        yield fd


@pytest.fixture(scope="module")
def served(lab_home):
    """`slurmlab serve` on the module's own lab home (its `lab_home` fixture)."""
    s = Served(lab_home)
    yield s
    s.stop()
