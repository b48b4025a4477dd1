"""The simulated configurer's old home: it lives in lab/configure/sim.py (a configurer, not a
provider). Kept only for lab/providers/sim.py's re-export; delete it with that line (issue 27,
lab.importgraph.PENDING)."""

from lab.configure.sim import SimConfigurer

__all__ = ["SimConfigurer"]
