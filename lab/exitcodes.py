"""Exit codes of the slurmlab CLI, in one place (documented in README)."""

OK = 0
FAILURE = 1  # something went wrong while acting
USAGE = 2  # bad arguments, bad spec or capacity file: nothing changed
NOT_FOUND = 3  # no such cluster, node or box
CONFLICT = 4  # name clash, resource in use
HOST = 5  # host not ready: missing package, not root, no space, libvirt down (see `slurmlab doctor`)
COMMAND = 6  # a subprocess failed (vagrant, virsh, mmdebstrap, ansible)
INTERRUPTED = 130
