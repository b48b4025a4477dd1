"""The lab's libvirt hosts: this machine ("local") and the ones `slurmlab host add` lists.

The list lives in `$SLURMLAB_HOME/hosts.yml` (written atomically, one entry per host):

    hosts:
      - name: h2
        uri: qemu+unix:///system?socket=/var/lib/slurmlab-hosts/h2/run/libvirt-sock
        netns: slurmlab-h2      # where ssh and vagrant reach this host's VMs (none: this namespace)
        memory_mib: 6144        # what the lab may use there (none: what libvirt reports free)
        cpus: 2
        simulated: true         # made by `slurmlab host simulate` (docs/adr/0010-hosts.md)
      - name: far
        uri: qemu+ssh://root@10.212.1.2/system?keyfile=/root/.slurmlab/hosts/far/id_ed25519
        netns: slurmlab         # where that address is reached (none: this namespace)
        driver: qemu            # the domain type there (none: what its libvirt offers)

A host whose URI names a machine over ssh is *remote* (docs/adr/0016-remote-hosts.md): the lab
reaches its libvirtd and its VMs only through ssh to that machine (lab.host.sshhost), and nothing
qemu reads there is a path of this machine (lab.providers.hostside).

"local" is always there (libvirtd of `slurmlab host up`); an entry named local only sets its limits.
Each host's VM networks live on that host, so a cluster's machines share one host (placement.py).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from lab import paths
from lab.errors import Conflict, HostError, NotFound, UsageError
from lab.osutil import atomic_write, meminfo_mib

LOCAL = "local"
NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
HOST_RESERVE_MIB = 1024  # kept free on every host for its own use


@dataclass
class Host:
    name: str
    uri: str
    netns: str | None = None
    memory_mib: int | None = None
    cpus: int | None = None
    simulated: bool = False
    pool: str = field(default="")
    driver: str | None = None

    @property
    def local(self) -> bool:
        return self.name == LOCAL

    @property
    def remote(self) -> bool:
        """Reached over ssh (qemu+ssh://USER@ADDRESS/...): another machine, or the rig's stand-in for one."""
        return self.ssh is not None

    @property
    def ssh(self) -> tuple[str, str, str | None] | None:
        """(user, address, key file) of a qemu+ssh URI; None for any other transport."""
        from urllib.parse import parse_qs, urlsplit

        parts = urlsplit(self.uri)
        if not parts.scheme.endswith("+ssh") or not parts.hostname:
            return None
        key = parse_qs(parts.query).get("keyfile", [None])[0]
        return parts.username or "root", parts.hostname, key

    def connect(self):
        """A libvirt connection to this host (libvirt's stderr printer silenced)."""
        import libvirt

        if self.local:
            from lab.host import libvirtd

            return libvirtd.connect()
        libvirt.registerErrorHandler(lambda *_: None, None)
        if self.remote:
            from lab.host import sshhost

            return libvirt.open(sshhost.libvirt_uri(self))
        return libvirt.open(self.uri)


def available_mib(conn) -> int:
    """Memory the host can give new VMs: free plus page cache and buffers (what the kernel calls
    MemAvailable, roughly; libvirt's bare free memory leaves the cache out, and a machine that has
    written VM disks for an hour has gigabytes of it). On this machine, no more than MemAvailable: libvirt
    counts shared memory (tmpfs files, a process's shared pages) as cache, which the kernel cannot drop
    (issue 45's fault run: a process holding 20 GiB of it left the host "free" for another VM)."""
    import libvirt

    try:
        s = conn.getMemoryStats(libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS, 0)
        got = (s.get("free", 0) + s.get("buffers", 0) + s.get("cached", 0)) // 1024
    except libvirt.libvirtError:
        got = conn.getFreeMemory() // (1 << 20)
    return min(got, meminfo_mib()) if _on_this_machine(conn) else got


def _on_this_machine(conn) -> bool:
    from urllib.parse import urlparse

    try:
        return not urlparse(conn.getURI()).hostname
    except Exception:  # noqa: BLE001 - a connection that cannot say: its own figures
        return False


def file() -> Path:
    return paths.home() / "hosts.yml"


def _local(entry: dict | None) -> Host:
    from lab.host import libvirtd, mode

    e = entry or {}
    return Host(LOCAL, libvirtd.URI, paths.netns() if mode.uses_netns() else None,
                e.get("memory_mib"), e.get("cpus"), pool=libvirtd.POOL)


def _entries() -> list[dict]:
    f = file()
    if not f.exists():
        return []
    try:
        data = yaml.safe_load(f.read_text()) or {}
    except yaml.YAMLError as e:
        raise UsageError(f"{f} is not valid YAML: {e}", "fix the file by hand, or remove it and add the hosts again") from None
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, list) or not all(isinstance(h, dict) and isinstance(h.get("name"), str) for h in hosts):
        raise UsageError(f"{f}: `hosts` must be a list of entries with a name", "see docs/workshop.md for the format")
    return hosts


def _save(entries: list[dict]) -> None:
    atomic_write(file(), yaml.safe_dump({"hosts": entries}, sort_keys=False), 0o600)


def _from_entry(e: dict) -> Host:
    from lab.host import libvirtd

    return Host(e["name"], e["uri"], e.get("netns"), e.get("memory_mib"), e.get("cpus"),
                bool(e.get("simulated", False)), pool=libvirtd.POOL, driver=e.get("driver"))


def all_hosts() -> list[Host]:
    """Every host, local first."""
    entries = _entries()
    local = next((e for e in entries if e["name"] == LOCAL), None)
    return [_local(local)] + [_from_entry(e) for e in entries if e["name"] != LOCAL]


def get(name: str) -> Host:
    for h in all_hosts():
        if h.name == name:
            return h
    raise NotFound(f"no host named {name!r}", "`slurmlab host list` shows the hosts; `slurmlab host add` adds one")


def check_name(name: str) -> None:
    if not NAME.match(name):
        raise UsageError(f"host name {name!r} is not valid: 1-20 of a-z, 0-9 and -, starting with a letter",
                         "pick a name like h2 or lab-b")


def add(host: Host) -> None:
    """Record a host (its reachability is the caller's check: probe.check)."""
    check_name(host.name)
    if host.name == LOCAL or any(h.name == host.name for h in all_hosts()):
        raise Conflict(f"a host named {host.name!r} exists already", "pick another name, or `slurmlab host remove` it first")
    if any(h.uri == host.uri for h in all_hosts()):
        other = next(h.name for h in all_hosts() if h.uri == host.uri)
        raise Conflict(f"host {other!r} has that URI already ({host.uri})", "one entry per libvirtd")
    entry = {k: v for k, v in asdict(host).items() if k != "pool" and v not in (None, False)}
    _save(_entries() + [entry])


def set_limits(name: str, memory_mib: int | None, cpus: int | None) -> Host:
    """Set (a positive value) or lift (0) the host's memory and CPU limits; None leaves one as it is."""
    for v, what in ((memory_mib, "--memory-mib"), (cpus, "--cpus")):
        if v is not None and v < 0:
            raise UsageError(f"{what} must be a number of MiB or CPUs, or 0 for no limit, not {v}", f"give {what} 0 or more")
    get(name)  # NotFound first
    entries = _entries()
    entry = next((e for e in entries if e["name"] == name), None)
    if entry is None:  # local without an entry yet
        entry = {"name": name}
        entries.append(entry)
    for k, v in (("memory_mib", memory_mib), ("cpus", cpus)):
        if v == 0:
            entry.pop(k, None)
        elif v is not None:
            entry[k] = v
    _save(entries)
    return get(name)


def remove(name: str) -> None:
    if name == LOCAL:
        raise UsageError("the local host cannot be removed", "`slurmlab host limit local --memory-mib N` limits what it takes")
    get(name)
    _save([e for e in _entries() if e["name"] != name])


def with_ssh(uri: str, user: str | None, key: str | None) -> str:
    """`uri` with an ssh user (qemu+ssh://USER@host/...) and key (?keyfile=PATH), as libvirt reads them."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if not (user or key):
        return uri
    parts = urlsplit(uri)
    if "+ssh" not in parts.scheme:
        raise UsageError(f"--ssh-user and --ssh-key are for qemu+ssh:// URIs, not {uri}",
                         "use a qemu+ssh://HOST/system URI, or leave them out")
    netloc = parts.netloc
    if user:
        netloc = f"{user}@{netloc.split('@', 1)[-1]}"
    query = parse_qsl(parts.query)
    if key:
        path = Path(key).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"--ssh-key {key}: no such file", "give the path of the private key libvirt's ssh should use")
        query = [(k, v) for k, v in query if k != "keyfile"] + [("keyfile", str(path))]
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="/"), parts.fragment))


def require_reachable(host: Host) -> None:
    """HostError naming the URI when libvirt cannot open it."""
    import libvirt

    try:
        conn = host.connect()
    except libvirt.libvirtError as e:
        raise HostError(f"libvirt cannot open {host.uri}: {e.get_error_message()}",
                        "check the URI (`virsh -c URI version` must answer), that libvirtd runs there, and for "
                        "qemu+ssh that root's ssh key is accepted without a password") from None
    conn.close()
