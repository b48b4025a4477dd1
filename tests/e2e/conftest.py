import pytest

from tests.e2e import lock


@pytest.fixture(scope="session", autouse=True)
def e2e_session():
    """This session's share of libvirtd (tests/e2e/lock.py): the fd that a test stopping it makes exclusive."""
    with lock.shared() as fd:
        yield fd
