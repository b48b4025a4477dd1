"""The roles' shared arithmetic, once: how many tries a wait of `timeout` seconds gets."""

from __future__ import annotations

import math


def attempts(timeout, delay, each=0) -> int:
    """Tries of an `until` loop that waits about `timeout` s: a try takes `each` s at most and the
    next one comes `delay` s later; at least one. `retries: "{{ t | slurmlab_attempts(d) }}"`."""
    step = float(delay) + float(each)
    return max(1, math.ceil(float(timeout) / step)) if step > 0 else 1


class FilterModule:
    def filters(self):
        return {"slurmlab_attempts": attempts}
