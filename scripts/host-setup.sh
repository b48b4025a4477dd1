#!/usr/bin/env bash
# Idempotent host set-up for slurmlab: Debian packages, /dev/kvm permissions, the virtualenv.
# Usage: scripts/host-setup.sh [--no-venv]
# Needs root for the packages (apt-get). Safe to run again: it only does what is missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SLURMLAB_VENV:-$HERE/.venv}"
PY="${SLURMLAB_PYTHON:-python3}"

PACKAGES=(
  qemu-system-x86 qemu-utils
  libvirt-daemon-system libvirt-clients libvirt-daemon-driver-qemu libvirt-dev pkg-config
  dnsmasq-base iptables iproute2
  vagrant vagrant-libvirt
  mmdebstrap debootstrap fdisk extlinux syslinux-common e2fsprogs
  gcc python3-dev openssh-client rsync
  openssh-server  # `host simulate --remote`: the stand-in for another machine runs its own sshd
  shellcheck  # make lint: the roles' scripts (roles/*/files/*.sh)
  chromium  # headless, for the web console test (tests/api/test_console.py)
  libjs-chart.js  # Chart.js 3.9, served by the console's metrics view (GET /_lab/assets/chart.min.js)
)

say() { printf '[host-setup] %s\n' "$*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    say "missing Debian packages: ${missing[*]}"
    say "fix: run as root, or: sudo apt-get install -y ${missing[*]}"
    exit 2
  fi
  # Never let package installation start libvirtd in the machine's own network namespace
  # where there is no init system: a policy-rc.d that exits 101 keeps services down.
  if [[ ! -d /run/systemd/system && ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
    say "installed /usr/sbin/policy-rc.d (exit 101): services do not start on install"
  fi
  say "installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages: all present"
fi

# /dev/kvm 0600 root:root makes libvirt re-probe qemu on every define (about 48 s each).
if [[ -e /dev/kvm && $(id -u) -eq 0 ]] && getent group kvm >/dev/null; then
  chgrp kvm /dev/kvm 2>/dev/null || true
  chmod 0660 /dev/kvm 2>/dev/null || true
fi

if [[ "${1:-}" != "--no-venv" ]]; then
  if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating virtualenv $VENV"
    "$PY" -m venv "$VENV"
  fi
  stamp="$VENV/.slurmlab-installed"
  if [[ ! -f "$stamp" || "$HERE/pyproject.toml" -nt "$stamp" ]]; then
    say "installing slurmlab and its Python dependencies into $VENV"
    # (this machine's pip config names local indexes that may not exist: drop those warnings)
    "$VENV/bin/pip" install -q -e "$HERE[test]" 2> >(grep -v "^WARNING: Location .* is ignored" >&2)
    touch "$stamp"
  else
    say "virtualenv: up to date"
  fi
fi
say "done"
