#!/bin/sh
# The Slurm configuration files (tasks/config.yml): each file whose text differs is replaced, and
# a running slurmctld owes a reconfigure from the moment a new file is in place until `scontrol
# reconfigure` succeeds (the marker, left before the rename; the handler removes it). Needs
# install_if_changed. Arguments: the folder, the files' owner and group, the marker ('' when
# slurmctld is not running), then NAME=TEXT-IN-BASE64 per file (NAME=- removes it).
# Prints "slurmlab-conf changed: ..." per change.
d="$1" o="$2" g="$3" m="$4"; shift 4
owe() { [ -z "$m" ] || echo "configuration changed; scontrol reconfigure owed" > "$m"; }
# an earlier run left the marker: the running slurmctld still owes a reconfigure
if [ -n "$m" ] && [ -e "$m" ]; then echo "slurmlab-conf changed: reconfigure owed by an earlier run"; fi
for a in "$@"; do
  n="${a%%=*}" v="${a#*=}"
  if [ "$v" = "-" ]; then
    [ -e "$d/$n" ] || continue
    owe
    rm -f "$d/$n"; echo "slurmlab-conf changed: $n removed"; continue
  fi
  echo "$v" | base64 -d | install_if_changed "$d/$n" 0644 "$o:$g" owe
  case $? in 0) echo "slurmlab-conf changed: $n" ;; 1) ;; *) echo "slurmlab-conf failed: cannot write $d/$n" >&2; exit 1 ;; esac
done
