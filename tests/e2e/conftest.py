import pytest

from tests.e2e import lock, vmcpu
from tests.e2e.labcli import Served


@pytest.fixture(scope="package", autouse=True)
def e2e_session():
    """This session's share of libvirtd (tests/e2e/lock.py): the fd that a test stopping it makes exclusive.
    Held while the e2e package's tests run, not to the session's end: a stream's unit tests after them
    run beside the other stream's tests that must run alone (ADR 0029)."""
    with lock.shared() as fd:
        yield fd


@pytest.fixture(autouse=True)
def vm_cpu(request):
    """What the test's VMs cost (tests/e2e/vmcpu.py): a line of artifacts/test-vm-cpu.jsonl."""
    try:
        watch = vmcpu.Watch(request.node.nodeid)
    except Exception:  # noqa: BLE001 - a measurement never fails a test
        watch = None
    yield
    try:
        if watch:
            watch.done()
    except Exception:  # noqa: BLE001
        pass


@pytest.fixture
def alone(e2e_session):
    """The test runs with no other e2e session beside it: it waits until the other stream's session is
    over (tests/e2e/lock.py). For a test that stops libvirtd, and for one that load breaks (Chromium
    driving JupyterLab failed twice with the other stream's VMs busy beside it); each runs last in its
    stream, to wait the least."""
    with lock.alone(e2e_session, timeout=3600) as waited:
        print(f"waited {waited:.0f} s for the other e2e sessions to end")
        yield


@pytest.fixture(scope="module")
def served(lab_home):
    """`slurmlab serve` on the module's own lab home (its `lab_home` fixture)."""
    s = Served(lab_home)
    yield s
    s.stop()
