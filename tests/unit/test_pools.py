"""lab/host/pools.py: a pool refresh waits out the pool's own jobs (two forks at once on one host: the
second one's template check met "asynchronous jobs running" and it booted cold), and raises any other
error, or the same one once the wait is over."""

from __future__ import annotations

import libvirt
import pytest

from lab.host import pools


class Err(libvirt.libvirtError):
    def __init__(self, msg):
        Exception.__init__(self, msg)
        self.msg = msg

    def get_error_message(self):
        return self.msg


class Pool:
    def __init__(self, errors):
        self.errors, self.calls = list(errors), 0

    def refresh(self, flags):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


BUSY = "internal error: pool 'slurmlab' has asynchronous jobs running."


def test_a_busy_pool_is_refreshed_once_its_jobs_end():
    clock, pool = Clock(), Pool([Err(BUSY), Err(BUSY)])
    pools.refresh(pool, sleep=clock.sleep, clock=clock)
    assert pool.calls == 3 and clock.t == 1.0


def test_another_error_is_raised_at_once():
    clock, pool = Clock(), Pool([Err("cannot open directory: Permission denied")])
    with pytest.raises(libvirt.libvirtError, match="Permission denied"):
        pools.refresh(pool, sleep=clock.sleep, clock=clock)
    assert pool.calls == 1 and clock.t == 0


def test_a_pool_busy_for_longer_than_the_wait_raises():
    clock, pool = Clock(), Pool([Err(BUSY)] * 100)
    with pytest.raises(libvirt.libvirtError, match="asynchronous jobs"):
        pools.refresh(pool, wait_s=5, sleep=clock.sleep, clock=clock)
    assert 10 <= pool.calls <= 12
