#!/bin/sh
# Slurm accounting (tasks/associations.yml), after slurmctld runs: the cluster (slurmctld registers
# it itself; added here if it did not), the account and the users' associations, added and deleted.
# Arguments: cluster, account, its description, its organization, how long to wait for slurmdbd (s),
# the users and the removed users (comma-separated). Prints "slurmlab-accounting changed: ..." per
# change, "slurmlab-accounting failed: ..." on a failure.
cluster="$1" acct="$2" desc="$3" org="$4" wait="$5" users="$6" removed="$7"
say() { echo "slurmlab-accounting changed: $*"; }
die() { echo "slurmlab-accounting failed: $*" >&2; exit 1; }
i=0
until have=$(sacctmgr -n -P show cluster format=cluster 2>&1); do
  i=$((i + 2))
  [ "$i" -lt "$wait" ] || die "slurmdbd does not answer after $wait s: $have $(tail -n 5 /var/log/slurm/slurmdbd.log 2>/dev/null | tr '\n' ' ')"
  sleep 2
done
# shellcheck disable=SC2086,SC2116 # unquoted on purpose: one word per cluster name
case " $(echo $have) " in
  *" $cluster "*) ;;
  *) sacctmgr -i add cluster "$cluster" >/dev/null || die "cannot add cluster $cluster"; say "cluster $cluster" ;;
esac
if [ -n "$users$removed" ]; then
  a=$(sacctmgr -n -P show account "$acct" format=account)
  [ -n "$a" ] || {
    sacctmgr -i add account "$acct" Description="$desc" Organization="$org" >/dev/null || die "cannot add account $acct"
    say "account $acct"
  }
  # shellcheck disable=SC2005,SC2046 # unquoted on purpose: one word per user
  have=" $(echo $(sacctmgr -n -P show association cluster="$cluster" account="$acct" format=user)) "
  add=""
  for u in $(echo "$users" | tr ',' ' '); do case "$have" in *" $u "*) ;; *) add="$add,$u" ;; esac; done
  if [ -n "$add" ]; then
    sacctmgr -i add user "${add#,}" account="$acct" defaultaccount="$acct" cluster="$cluster" >/dev/null || die "cannot add users ${add#,}"
    say "users ${add#,}"
  fi
  del=""
  for u in $(echo "$removed" | tr ',' ' '); do case "$have" in *" $u "*) del="$del,$u" ;; esac; done
  if [ -n "$del" ]; then
    sacctmgr -i delete user name="${del#,}" >/dev/null || die "cannot delete users ${del#,}"
    say "removed users ${del#,}"
  fi
fi
