#!/bin/sh
# `scontrol reconfigure` (handlers/main.yml): a timeout is accepted (wait.yml then proves the new
# node set is in force), and the owed reconfigure (the marker, argument 1) is forgotten once done.
out=$(scontrol reconfigure 2>&1); rc=$?
[ -z "$out" ] || printf '%s\n' "$out" >&2
case "$out" in *"timed out"*) rc=0 ;; esac
if [ "$rc" -eq 0 ]; then rm -f "$1"; fi
exit "$rc"
