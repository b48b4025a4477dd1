"""HyperPod's cluster API served locally (AWS JSON 1.1), the lab's controls and the web console.

    slurmlab serve --provider sim            # then: boto3.client("sagemaker", endpoint_url="http://127.0.0.1:8008", ...)

See docs/api.md.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.api.model import OPERATIONS, ApiError
from lab.api.operations import Lab
from lab.api.server import ApiServer, EngineWatch, ServeLock, make_server

log = logging.getLogger("lab.api")

PROVIDERS = ("vagrant", "sim")
DEFAULT_PORT = 8008


def run(host: str = "127.0.0.1", port: int = DEFAULT_PORT, provider: str = "vagrant", capacity_file: str | None = None,
        before_create: Callable[[Any], None] | None = None, on_ready: Callable[[ApiServer], None] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM. The state directory is $SLURMLAB_HOME (lab.paths.home())."""
    from lab import capacity, paths
    from lab.api.labctl import apply_capacity
    from lab.engine import daemon
    from lab.errors import UsageError

    if provider not in PROVIDERS:
        raise UsageError(f"--provider {provider}: unknown", f"use one of: {', '.join(PROVIDERS)}")
    cap = capacity.load(capacity_file) if capacity_file else None  # a bad file: nothing changes
    lock = ServeLock(paths.home())
    lock.acquire()
    server = None
    watch = None
    previous = signal.getsignal(signal.SIGTERM)
    try:
        st = daemon.store()
        if cap is not None:
            apply_capacity(st, cap)
        lab = Lab(store=st, provider=provider, base_dir=Path.cwd(), before_create=before_create,
                  ensure_engine=daemon.ensure_running)
        try:
            server = make_server(lab, host, port)
        except OSError as e:
            raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                             "pick another --port (0 picks a free one), or stop what uses it") from None
        lock.publish(server.url)
        daemon.ensure_running()
        watch = EngineWatch(lab)
        watch.start()

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
        if server:
            server.server_close()
        lock.release()


__all__ = ["DEFAULT_PORT", "OPERATIONS", "PROVIDERS", "ApiError", "ApiServer", "EngineWatch", "Lab", "ServeLock",
           "make_server", "run"]
