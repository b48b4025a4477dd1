#!/usr/bin/python3
"""envsubst (GNU gettext) for a node without gettext-base: standard input to standard output with
$VAR and ${VAR} replaced by the environment's values (unset: empty). With an argument (SHELL-FORMAT,
e.g. '$A ${B}'), only the variables it names. Written by slurmlab's role hyperpod_env."""
import os
import re
import sys

only = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", sys.argv[1])) if len(sys.argv) > 1 else None


def value(m):
    name = m.group(1) or m.group(2)
    if only is not None and name not in only:
        return m.group(0)
    return os.environ.get(name, "")


sys.stdout.write(re.sub(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))", value, sys.stdin.read()))
