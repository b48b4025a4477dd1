"""HyperPod's cluster API served locally (AWS JSON 1.1), the lab's controls and the web console.

    slurmlab serve --provider sim            # then: boto3.client("sagemaker", endpoint_url="http://127.0.0.1:8008", ...)

See docs/api.md.
"""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Callable
from pathlib import Path

from lab.api.hubs import Hubs
from lab.api.model import OPERATIONS, ApiError
from lab.api.operations import Lab
from lab.api.rooms import RoomWatch
from lab.api.server import ApiServer, EngineWatch, ServeLock, make_server

log = logging.getLogger("lab.api")

DEFAULT_PORT = 8008


def run(host: str = "127.0.0.1", port: int = DEFAULT_PORT, provider: str = "vagrant", capacity_file: str | None = None,
        on_ready: Callable[[ApiServer], None] | None = None,
        region: str | None = None, account: str | None = None, auth: bool = False,
        room_address: str | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM. The state directory is $SLURMLAB_HOME (lab.paths.home()). `region`
    and `account` make the ARNs of clusters created by requests that name no region (unsigned ones).
    `auth`: every request must be signed with a student's key (lab.students), and requests must be
    signed for `region`; without it only a loopback address may be bound. `room_address`: where the
    clusters' rooms listen (the students' ssh from their laptops, lab/room); None: no rooms."""
    from lab import capacity, paths
    from lab.api.labctl import apply_capacity
    from lab.engine import daemon
    from lab.errors import UsageError
    from lab.students import Registry

    from lab.providers import registry

    registry.check(provider)
    from lab.control import views

    region, account = region or views.default_region(), account or views.default_account()
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d{1,2}", region):
        raise UsageError(f"--region (or $SLURMLAB_REGION) {region!r}: not an AWS region name", "e.g. us-east-1 or eu-west-2")
    if not re.fullmatch(r"\d{12}", account):
        raise UsageError(f"--account-id (or $SLURMLAB_ACCOUNT_ID) {account!r}: not 12 digits",
                         "e.g. 123456789012 (the default is 000000000000)")
    if not auth and not is_loopback(host):
        raise UsageError(f"--host {host}: without --auth the lab serves this machine only (127.0.0.1 or ::1): anyone who "
                         "reaches the port could create, change and delete every cluster",
                         "add --auth (every request signed with a student's key: slurmlab students add NAME), "
                         "or listen on 127.0.0.1")
    cap = capacity.load(capacity_file) if capacity_file else None  # a bad file: nothing changes
    lock = ServeLock(paths.home())
    lock.acquire()
    server = None
    watch = rooms = None
    previous = signal.getsignal(signal.SIGTERM)
    try:
        st = daemon.store()
        if cap is not None:
            apply_capacity(st, cap)
        lab = Lab(store=st, provider=provider, base_dir=Path.cwd(),
                  ensure_engine=daemon.ensure_running, region=region, account=account,
                  students=Registry(paths.home()) if auth else None, hubs=Hubs(host))
        try:
            server = make_server(lab, host, port)
        except OSError as e:
            raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                             "pick another --port (0 picks a free one), or stop what uses it") from None
        lock.publish(server.url)
        daemon.ensure_running()
        watch = EngineWatch(lab)
        watch.start()
        if room_address is not None:  # the students' ssh way in (lab/room): one port per cluster
            rooms = RoomWatch(st, room_address)
            rooms.start()

        def _term(signum, frame):  # SIGTERM stops the server like Ctrl-C does
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _term)
        if on_ready:
            on_ready(server)
        try:
            server.serve_forever(poll_interval=0.25)
        except KeyboardInterrupt:
            log.info("stopping")
    finally:
        signal.signal(signal.SIGTERM, previous)
        if watch:
            watch.stop.set()
        if rooms:
            rooms.stop.set()
            rooms.join(timeout=10)
        if server:
            server.server_close()
            server.lab.hubs.close()
        lock.release()


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or `localhost`) is this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


__all__ = ["DEFAULT_PORT", "OPERATIONS", "ApiError", "ApiServer", "EngineWatch", "Lab", "ServeLock", "is_loopback",
           "make_server", "run"]
