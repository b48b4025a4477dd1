"""`slurmlab serve`'s rooms: the students' ssh way in to each cluster's login node from their laptops
(lab/room). A thread syncs them with the store every few seconds: a cluster with student accounts and a
running login node gets its room's port on --room-address; a deleted cluster's room closes."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class RoomWatch(threading.Thread):
    def __init__(self, store, bind: str, every: float = 3.0):
        from lab.room.door import Keeper

        super().__init__(name="room-watch", daemon=True)
        self.store, self.every = store, every
        self.keeper = Keeper(bind, "slurmlab serve")
        self.stop = threading.Event()

    def run(self) -> None:
        while True:
            try:
                self.keeper.sync(self.store)
            except Exception:  # noqa: BLE001 - the next pass tries again
                log.exception("room watch")
            if self.stop.wait(self.every):
                break
        self.keeper.close()
