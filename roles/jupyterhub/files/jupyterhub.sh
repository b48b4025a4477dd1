#!/bin/sh
# JupyterHub on one login node (tasks/main.yml). Needs install_if_changed, units_absent and files_absent.
# The proxy (configurable-http-proxy) is a service of its own, jupyterhub-proxy: systemd starts it
# first and counts it started only once its API listens (its ExecStartPost); the hub (Debian's
# jupyterhub.service with a drop-in) requires it and never starts it (should_start = False). A hub
# that starts its proxy itself gives it 10 s to listen: on a loaded, emulated login node the proxy
# took 13 s, the hub exited, and systemd restarted both in a loop (issue 44).
# Arguments: present|absent, the hub's configuration file, its PAM service file, the drop-in of
# Debian's jupyterhub.service, the proxy's unit file, the hub's data folder, the proxy's port, the
# proxy's API port, the hub's port, the base URL, the students file, the seconds to wait for
# /hub/health; with present: the configuration, the PAM service, the drop-in, the proxy's unit and
# the students in base64.
# present: writes what differs, makes the proxy's token once (data folder, 0600), reloads systemd
# once if it holds an older copy of a unit, starts the proxy and the hub or restarts what changed
# (not for the students file: the hub reads it at each login), waits until the hub answers
# /hub/health through the proxy.
# absent: stops and disables both, deletes what this role wrote and the hub's data.
# Prints "slurmlab-jupyterhub changed: ..." per change, "slurmlab-jupyterhub failed: ..." on a failure,
# which names the part that did not come up and the last lines of its journal.
state="$1" conf="$2" pam="$3" dropin="$4" proxy_unit="$5" data="$6" port="$7" api_port="$8" hub_port="$9"
shift 9
base="$1" students="$2" wait_s="$3"
shift 3
UNIT=jupyterhub
PROXY=${proxy_unit##*/}
PROXY=${PROXY%.service}
TOKEN="$data/proxy.env"
say() { echo "slurmlab-jupyterhub changed: $*"; }
die() { echo "slurmlab-jupyterhub failed: $*" >&2; exit 1; }
journal() { journalctl -u "$1" -n 8 --no-pager -o cat | tr '\n' ' '; }
listens() { ss -Hltn "sport = :$1" | grep -q .; }
reload="" restart_hub="" restart_proxy=""

put() {
  mkdir -p "${1%/*}" || die "cannot make ${1%/*}"
  echo "$4" | base64 -d | install_if_changed "$1" "$2" "$3"
  case $? in 0) say "$1"; return 0 ;; 1) return 1 ;; *) die "cannot write $1" ;; esac
}

# shellcheck disable=SC2016  # $1 and $2 are bash -c's own arguments
status() {  # bash's /dev/tcp, not a Python start-up a second on an emulated CPU the hub needs to start
  timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET %shub/health HTTP/1.0\r\n\r\n" "$2" >&3 && head -n 1 <&3' \
    slurmlab-health "$port" "$base" 2>/dev/null | tr -d '\r'
}

if [ "$state" = present ]; then
  case "$wait_s" in '' | *[!0-9]*) die "the wait must be a number of seconds, not '$wait_s'" ;; esac
  if [ ! -d "$data" ]; then
    install -d -m 0700 -o root -g root "$data" || die "cannot make $data"
    say "$data"
  fi
  put "$conf" 0600 root:root "$1" && restart_hub=1
  put "$pam" 0644 root:root "$2"
  put "$dropin" 0644 root:root "$3" && { reload=1; restart_hub=1; }
  put "$proxy_unit" 0644 root:root "$4" && { reload=1; restart_proxy=1; }
  put "$students" 0644 root:root "$5"
  if [ ! -s "$TOKEN" ]; then  # the hub's key to the proxy's API: this node's own, never printed
    (umask 077 && printf 'CONFIGPROXY_AUTH_TOKEN=%s\n' "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$TOKEN") \
      || die "cannot write $TOKEN"
    say "$TOKEN"
    restart_proxy=1
  fi
  for u in "$PROXY" "$UNIT"; do
    if [ "$(systemctl is-enabled "$u" 2>/dev/null)" != enabled ]; then
      SYSTEMCTL_SKIP_SYSV=1 systemctl enable "$u" --no-reload >/dev/null 2>&1 || die "cannot enable $u"
      say "$u enabled"
      reload=1
    fi
  done
  # a reload only where systemd holds an older copy: a unit not loaded yet reads its files when it
  # starts (a daemon-reload costs the login node 3-10 s under emulation)
  if [ -n "$reload" ] && systemctl show -p NeedDaemonReload --value "$PROXY" "$UNIT" | grep -qx yes; then
    systemctl daemon-reload || die "systemctl daemon-reload failed"
  fi
  # the proxy first (systemd counts it started once its API listens), then the hub; a new proxy
  # restarts the hub as well, in the same transaction (its routes live in the proxy's memory)
  if [ "$(systemctl is-active "$PROXY")" != active ] || [ -n "$restart_proxy" ]; then
    if [ "$(systemctl is-active "$UNIT")" = active ]; then both="$UNIT"; else both=""; fi
    # shellcheck disable=SC2086  # $both: the hub's name or nothing
    systemctl restart "$PROXY" $both \
      || die "the proxy ($PROXY) did not start listening on :$api_port: $(journal "$PROXY")"
    say "$PROXY started${both:+, $UNIT restarted}"
    [ -z "$both" ] || restart_hub=""
  fi
  if [ "$(systemctl is-active "$UNIT")" != active ]; then
    systemctl start "$UNIT" || die "the hub ($UNIT) did not start: $(journal "$UNIT")"
    say "$UNIT started"
  elif [ -n "$restart_hub" ]; then
    systemctl restart "$UNIT" || die "the hub ($UNIT) did not restart: $(journal "$UNIT")"
    say "$UNIT restarted"
  fi
  # the hub's Python needs ~50 s to start on one emulated vCPU, longer under load: wait_s is sized for it
  deadline=$(($(date +%s) + wait_s))
  until listens "$hub_port" && [ "$(status | cut -d' ' -f2)" = 200 ]; do
    if [ "$(systemctl is-active "$PROXY")" != active ]; then
      die "the proxy ($PROXY) is $(systemctl is-active "$PROXY"): $(journal "$PROXY")"
    fi
    if [ "$(systemctl is-active "$UNIT")" = failed ]; then
      die "the hub ($UNIT) failed, restarted $(systemctl show -p NRestarts --value "$UNIT") times: $(journal "$UNIT")"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      if ! listens "$hub_port"; then
        die "the hub ($UNIT) does not listen on :$hub_port after ${wait_s} s (restarted $(systemctl show -p NRestarts --value "$UNIT") times): $(journal "$UNIT")"
      fi
      got=$(status)
      die "the proxy on :$port answers '${got:-nothing}' for ${base}hub/health after ${wait_s} s: $(journal "$UNIT")"
    fi
    sleep 2
  done
  exit 0
fi

[ "$state" = absent ] || die "state must be present or absent, not '$state'"
units_absent "$UNIT" "$PROXY"
files_absent "$dropin" "$proxy_unit" "$conf" "$pam" "$students"
rmdir "${dropin%/*}" 2>/dev/null
if [ -e "$data" ]; then rm -rf "$data" || die "cannot remove $data"; say "$data removed"; fi
if [ -n "$reload" ]; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
exit 0
