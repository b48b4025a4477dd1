#!/bin/sh
# JupyterHub on one login node (tasks/main.yml). Needs install_if_changed.
# Arguments: present|absent, the hub's configuration file, its PAM service file, the drop-in of
# Debian's jupyterhub.service, the hub's data folder, the proxy's port, the hub's port, the base URL,
# the students file; with present: the configuration, the PAM service, the drop-in and the students
# in base64.
# present: writes what differs, reloads systemd once, starts the hub or restarts it when its
# configuration or drop-in changed (not for the students file: the hub reads it at each login),
# waits until it answers /hub/health.
# absent: stops and disables the hub, deletes what this role wrote and the hub's data.
# Prints "slurmlab-jupyterhub changed: ..." per change, "slurmlab-jupyterhub failed: ..." on a failure.
state="$1" conf="$2" pam="$3" dropin="$4" data="$5" port="$6" hub_port="$7" base="$8" students="$9"
UNIT=jupyterhub
say() { echo "slurmlab-jupyterhub changed: $*"; }
die() { echo "slurmlab-jupyterhub failed: $*" >&2; exit 1; }
journal() { journalctl -u "$UNIT" -n 8 --no-pager -o cat | tr '\n' ' '; }
reload="" restart=""

put() {
  mkdir -p "${1%/*}" || die "cannot make ${1%/*}"
  echo "$4" | base64 -d | install_if_changed "$1" "$2" "$3"
  case $? in 0) say "$1"; return 0 ;; 1) return 1 ;; *) die "cannot write $1" ;; esac
}

# shellcheck disable=SC2016  # $1 and $2 are bash -c's own arguments
healthy() {  # bash's /dev/tcp, not a Python start-up a second on an emulated CPU the hub needs to start
  timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET %shub/health HTTP/1.0\r\n\r\n" "$2" >&3 && head -n 1 <&3' \
    slurmlab-health "$port" "$base" 2>/dev/null | grep -q " 200 "
}

if [ "$state" = present ]; then
  put "$conf" 0600 root:root "${10}" && restart=1
  put "$pam" 0644 root:root "${11}"
  put "$dropin" 0644 root:root "${12}" && { reload=1; restart=1; }
  put "$students" 0644 root:root "${13}"
  if [ ! -d "$data" ]; then
    install -d -m 0700 -o root -g root "$data" || die "cannot make $data"
    say "$data"
  fi
  if [ "$(systemctl is-enabled "$UNIT" 2>/dev/null)" != enabled ]; then
    SYSTEMCTL_SKIP_SYSV=1 systemctl enable "$UNIT" --no-reload >/dev/null 2>&1 || die "cannot enable $UNIT"
    say "$UNIT enabled"
    reload=1
  fi
  if [ -n "$reload" ]; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
  if [ "$(systemctl is-active "$UNIT")" != active ]; then
    systemctl start "$UNIT" || die "$UNIT did not start: $(journal)"
    say "$UNIT started"
  elif [ -n "$restart" ]; then
    systemctl restart "$UNIT" || die "$UNIT did not restart: $(journal)"
    say "$UNIT restarted"
  fi
  i=0
  until ss -Hltn "sport = :$hub_port" | grep -q . && healthy; do
    i=$((i + 1))
    if [ "$i" -gt 180 ] || [ "$(systemctl is-active "$UNIT")" = failed ]; then
      die "$UNIT does not answer http://127.0.0.1:$port${base}hub/health: $(journal)"
    fi
    sleep 1
  done
  exit 0
fi

[ "$state" = absent ] || die "state must be present or absent, not '$state'"
if [ "$(systemctl is-enabled "$UNIT" 2>/dev/null)" = enabled ] || [ "$(systemctl is-active "$UNIT")" != inactive ]; then
  SYSTEMCTL_SKIP_SYSV=1 systemctl disable --now --no-reload "$UNIT" >/dev/null 2>&1 \
    || systemctl stop "$UNIT" || die "cannot stop $UNIT"
  say "$UNIT stopped"
fi
for f in "$dropin" "$conf" "$pam" "$students"; do
  if [ -e "$f" ]; then rm -f "$f" || die "cannot remove $f"; say "$f removed"; reload=1; fi
done
rmdir "${dropin%/*}" 2>/dev/null
if [ -e "$data" ]; then rm -rf "$data" || die "cannot remove $data"; say "$data removed"; fi
if [ -n "$reload" ]; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
exit 0
