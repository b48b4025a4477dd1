"""Which provider and configurer build a cluster: the one its row names (`ClusterRow.provider`).

`Backends(provider, configurer)` builds every cluster with that pair (the tests' form); `providers` /
`configurers` map provider names to objects, and the factories make one on first use for a name not
mapped (the daemon passes lab/providers/registry.py's). A cluster whose provider has no entry and no
factory falls back to the positional pair."""

from __future__ import annotations

from collections.abc import Callable

from lab.configure.base import Configurer
from lab.configure.inventory import ClusterContext
from lab.providers.base import Provider
from lab.store.db import ClusterRow, Store


class Backends:
    def __init__(self, store: Store, provider: Provider | None = None, configurer: Configurer | None = None, *,
                 providers: dict[str, Provider] | None = None, configurers: dict[str, Configurer] | None = None,
                 provider_factory: Callable[[str], Provider] | None = None,
                 configurer_factory: Callable[[str], Configurer] | None = None):
        self.store = store
        self.provider = provider
        self.configurer = configurer
        self.providers = dict(providers or {})
        self.configurers = dict(configurers or {})
        if provider is not None:
            self.providers.setdefault(provider.name, provider)
            if configurer is not None:
                self.configurers.setdefault(provider.name, configurer)
        self.provider_factory = provider_factory
        self.configurer_factory = configurer_factory

    def provider_for(self, c: ClusterRow) -> Provider:
        p = self.providers.get(c.provider)
        if p is None and self.provider_factory is not None:
            p = self.providers[c.provider] = self.provider_factory(c.provider)
        if p is None:
            p = self.provider
        if p is None:
            raise RuntimeError(f"no provider {c.provider!r} in this engine")
        return p

    def configurer_for(self, c: ClusterRow) -> Configurer | None:
        conf = self.configurers.get(c.provider)
        if conf is None and self.configurer_factory is not None:
            conf = self.configurers[c.provider] = self.configurer_factory(c.provider)
        return conf if conf is not None else self.configurer

    def context_from(self, c: ClusterRow, groups, nodes) -> ClusterContext | None:
        conf = self.configurer_for(c)
        return None if conf is None else conf.context(c, groups, nodes)

    def context(self, cluster: str) -> ClusterContext | None:
        """The configurer's view of the cluster as the store has it now."""
        c, groups, nodes = self.store.snapshot(cluster)
        return self.context_from(c, groups, nodes)
