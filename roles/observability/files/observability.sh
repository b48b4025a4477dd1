#!/bin/sh
# The sagemaker-observability extension on one node (tasks/main.yml). Needs install_if_changed, units_absent and files_absent.
# Arguments: present|absent, Prometheus's configuration file, its data folder, the Slurm exporter's
# path, the ports of the node exporter, Prometheus and the Slurm exporter; with present: the node
# exporter's systemd drop-in in base64 ("-": not a member), then on the controller Prometheus's
# configuration, its drop-in, the Slurm exporter and its unit (base64 each).
# present: writes what differs, reloads systemd once, starts what is not running, restarts what
# changed (Prometheus reloads a changed configuration), waits until each listens.
# absent: stops and disables every part, deletes its configuration and Prometheus's data.
# Prints "slurmlab-observability changed: ..." per change, "slurmlab-observability failed: ..." on a failure.
state="$1" pr_conf="$2" pr_data="$3" se_path="$4" ne_port="$5" pr_port="$6" se_port="$7"
NE=prometheus-node-exporter PR=prometheus SE=slurmlab-slurm-exporter
ne_dropin=/etc/systemd/system/$NE.service.d/slurmlab.conf
pr_dropin=/etc/systemd/system/$PR.service.d/slurmlab.conf
se_unit=/etc/systemd/system/$SE.service
say() { echo "slurmlab-observability changed: $*"; }
die() { echo "slurmlab-observability failed: $*" >&2; exit 1; }
journal() { journalctl -u "$1" -n 5 --no-pager -o cat | tr '\n' ' '; }
reload=""

# put FILE MODE OWNER BASE64: 0 when FILE changed, 1 when it held that text
put() {
  mkdir -p "${1%/*}" || die "cannot make ${1%/*}"
  echo "$4" | base64 -d | install_if_changed "$1" "$2" "$3"
  case $? in 0) say "$1"; return 0 ;; 1) return 1 ;; *) die "cannot write $1" ;; esac
}

# enabled UNIT: enabled at boot (no SysV sync and no daemon-reload here: 15 s under emulation with
# them; the one reload after every change covers it)
enabled() {
  if [ "$(systemctl is-enabled "$1" 2>/dev/null)" != enabled ]; then
    SYSTEMCTL_SKIP_SYSV=1 systemctl enable "$1" --no-reload >/dev/null 2>&1 || die "cannot enable $1"
    say "$1 enabled"
    reload=1
  fi
}

# serve UNIT PORT RESTART: running (restarted when RESTART is set) and listening on PORT
serve() {
  if [ "$(systemctl is-active "$1")" != active ]; then
    systemctl start "$1" || die "$1 did not start: $(journal "$1")"
    say "$1 started"
  elif [ -n "$3" ]; then
    systemctl restart "$1" || die "$1 did not restart: $(journal "$1")"
    say "$1 restarted"
  fi
  i=0
  until ss -Hltn "sport = :$2" | grep -q .; do
    i=$((i + 1))
    if [ "$i" -gt 60 ] || [ "$(systemctl is-active "$1")" = failed ]; then
      die "$1 does not listen on port $2: $(journal "$1")"
    fi
    sleep 1
  done
}

if [ "$state" = present ]; then
  ne="$8" prc="${9:-}" prd="${10:-}" sep="${11:-}" seu="${12:-}"
  ne_new="" pr_new="" pr_hup="" se_new=""
  if [ "$ne" != - ]; then
    put "$ne_dropin" 0644 root:root "$ne" && { ne_new=1; reload=1; }
  fi
  if [ -n "$prc" ]; then
    put "$pr_conf" 0644 root:root "$prc" && pr_hup=1
    put "$pr_dropin" 0644 root:root "$prd" && { pr_new=1; reload=1; }
    put "$se_path" 0755 root:root "$sep" && se_new=1
    put "$se_unit" 0644 root:root "$seu" && { se_new=1; reload=1; }
    if [ ! -d "$pr_data" ]; then
      install -d -m 0750 -o prometheus -g prometheus "$pr_data" || die "cannot make $pr_data"
      say "$pr_data"
    fi
  fi
  if [ "$ne" != - ]; then enabled "$NE"; fi
  if [ -n "$prc" ]; then enabled "$SE"; enabled "$PR"; fi
  if [ -n "$reload" ]; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
  if [ "$ne" != - ]; then serve "$NE" "$ne_port" "$ne_new"; fi
  if [ -n "$prc" ]; then
    serve "$SE" "$se_port" "$se_new"
    if [ -n "$pr_hup" ] && [ -z "$pr_new" ] && [ "$(systemctl is-active "$PR")" = active ]; then
      systemctl kill --kill-whom=main --signal=HUP "$PR" || die "cannot reload $PR"
      say "$PR reloaded its configuration"
    fi
    serve "$PR" "$pr_port" "$pr_new"
  fi
  exit 0
fi

[ "$state" = absent ] || die "state must be present or absent, not '$state'"
units_absent "$PR" "$SE" "$NE"
files_absent "$ne_dropin" "$pr_dropin" "$se_unit" "$pr_conf" "$se_path"
rmdir "${ne_dropin%/*}" "${pr_dropin%/*}" 2>/dev/null
if [ -e "$pr_data" ]; then rm -rf "$pr_data" || die "cannot remove $pr_data"; say "$pr_data removed"; fi
if [ -n "$reload" ]; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
exit 0
