#!/bin/sh
# /etc/hosts (tasks/hosts.yml): drop a loopback alias of this node's name, put the cluster's block
# at the end, and replace the file only if that changed it. Needs install_if_changed.
# Arguments: the file, the node's name ('' keeps a loopback alias), the block's first and last
# lines, then the block's lines. Prints "slurmlab-hosts changed" when it changed the file.
f="$1" n="$2" b="$3" e="$4"; shift 4
{
  awk -v n="$n" -v b="$b" -v e="$e" '
    $0 == b { skip = 1; next }
    skip { if ($0 == e) skip = 0; next }
    n != "" && $1 == "127.0.1.1" { for (i = 2; i <= NF; i++) if ($i == n) next }
    { print }' "$f"
  printf '%s\n' "$b"; printf '%s\n' "$@"; printf '%s\n' "$e"
} | install_if_changed "$f" 0644 root:root
case $? in 0) echo "slurmlab-hosts changed" ;; 1) ;; *) exit 1 ;; esac
