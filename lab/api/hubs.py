"""`slurmlab serve`'s way to each cluster's JupyterHub (Lab.Jupyter, issue 31): the console's link.

The first time the console's state names a cluster with a hub, serve starts a forward (the one of
`slurmlab open`: lab/providers/forward.py) on its own address and a free port to the first running
login node's hub, and keeps it while serve runs; a login node that changed (replaced, another one
running) gets a new forward. Nothing binds where serve does not: on 127.0.0.1 unless serve was asked
for another address (which needs --auth). The console builds the link from the page's own host name
and this port; under --auth only the instructor sees the console, and the hub itself lets in only
the cluster's own students (PAM, its allowed users).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from lab.control import jupyter
from lab.errors import LabError
from lab.store.db import Store

log = logging.getLogger(__name__)


@dataclass
class _Open:
    address: str
    forward: object
    dial: object


class Hubs:
    def __init__(self, bind: str = "127.0.0.1"):
        self.bind = bind
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def link(self, st: Store, name: str) -> dict:
        """{"Port", "Path", "Node"} of the cluster's hub on serve's address, or {"Waiting": why}."""
        try:
            node = jupyter.hub_node(st, name)
        except LabError as e:
            self.drop(name)
            return {"Waiting": e.message}
        with self._lock:
            have = self._open.get(name)
            if have is None or have.address != node.address:
                if have is not None:
                    self._close(have)
                try:
                    have = self._open[name] = self._start(name, node.address)
                except OSError as e:
                    self._open.pop(name, None)
                    return {"Waiting": f"cannot listen on {self.bind}: {e.strerror or e}"}
            return {"Port": have.forward.port, "Path": jupyter.path(name), "Node": node.name}

    def _start(self, name: str, address: str) -> _Open:
        from lab.providers import forward as fwd
        from lab.providers import placement

        dial = fwd.dialer_for(placement.host_of(name))
        try:
            f = fwd.Forward(dial, address, jupyter.PORT, 0, bind=self.bind)
        except OSError:
            dial.close()
            raise
        f.start()
        log.info("JupyterHub of %s: %s:%s -> %s:%s", name, self.bind, f.port, address, jupyter.PORT)
        return _Open(address, f, dial)

    @staticmethod
    def _close(o: _Open) -> None:
        o.forward.close()
        o.dial.close()

    def drop(self, name: str) -> None:
        with self._lock:
            o = self._open.pop(name, None)
        if o is not None:
            self._close(o)

    def close(self) -> None:
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for o in opened:
            self._close(o)
