#!/bin/sh
# Turns a fresh mmdebstrap tree into the slurmlab node image.
#
# Runs on the host as mmdebstrap's --customize-hook: $1 is the image's root directory (a plain
# directory; builder.py later writes fstab and extlinux.conf and makes the ext4 filesystem from it).
# mmdebstrap keeps its own policy-rc.d (exit 101) in place while hooks run, so nothing installed
# here starts a service. Every line of this file is part of the
# box's inputs hash: editing it makes `slurmlab box build` produce a new box.
set -eu

R="$1"
WHEELS="${2:-}"  # a directory of the recipe's wheels (lab/box/image.py downloads them); empty: none
FILES="${3:-}"   # lab/box/files: installed as they are (their text is part of the inputs hash too)
[ -d "$R/etc" ] || { echo "customize.sh: $R is not a root filesystem" >&2; exit 2; }
in_root() { chroot "$R" "$@"; }
say() { echo "I: slurmlab customize: $*"; }

say "hostname and hosts"
# No /etc/hostname: a VM takes its name from the system.hostname credential at early boot (a
# static /etc/hostname would take precedence); slurmlab-node.service then writes the file.
rm -f "$R/etc/hostname"
cat > "$R/etc/hosts" <<'EOF'
127.0.0.1	localhost
127.0.1.1	slurmlab
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF
# mmdebstrap copied the build host's resolver config: it must not ship.
rm -f "$R/etc/resolv.conf"

say "user vagrant (uid 1000, home /var/lib/vagrant, password locked, passwordless sudo, no keys)"
# The admin user's home is on the node's own disk, not in /home: /home is the cluster's shared
# (NFS) home of the student accounts, and Vagrant and Ansible must reach a node whose NFS server
# (the controller) is down.
in_root useradd --create-home --home-dir /var/lib/vagrant --uid 1000 --user-group --shell /bin/bash vagrant
in_root usermod --lock vagrant
install -d -m 0700 -o 1000 -g 1000 "$R/var/lib/vagrant/.ssh"
install -d -m 0700 "$R/root/.ssh"
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > "$R/etc/sudoers.d/vagrant"
chmod 0440 "$R/etc/sudoers.d/vagrant"
in_root visudo -c -q -f /etc/sudoers.d/vagrant

say "sshd: keys only, host keys made at first boot"
cat > "$R/etc/ssh/sshd_config.d/10-slurmlab.conf" <<'EOF'
# slurmlab: public keys only. The keys come from the VM's slurmlab.authorized_keys credential.
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
# Only these two host keys exist (an RSA key costs ~20 s to make under emulation).
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
EOF
rm -f "$R"/etc/ssh/ssh_host_*
install -d -m 0755 "$R/usr/local/lib/slurmlab"
cat > "$R/usr/local/lib/slurmlab/ssh-host-keys" <<'EOF'
#!/bin/sh
# Makes the missing SSH host keys (ed25519 and ecdsa only) before sshd starts and prints their
# fingerprints to the console. Few processes: each one costs ~0.1 s under emulation.
set -eu
for t in ed25519 ecdsa; do
  k="/etc/ssh/ssh_host_${t}_key"
  if [ ! -s "$k" ]; then
    if [ -e "$k" ] || [ -e "$k.pub" ]; then rm -f "$k" "$k.pub"; fi
    ssh-keygen -q -t "$t" -N '' -f "$k"
    echo "slurmlab: generated SSH host key $(ssh-keygen -l -f "$k.pub")"
  fi
done
EOF
chmod 0755 "$R/usr/local/lib/slurmlab/ssh-host-keys"
install -d -m 0755 "$R/etc/systemd/system/ssh.service.d"
cat > "$R/etc/systemd/system/ssh.service.d/10-slurmlab-host-keys.conf" <<'EOF'
[Service]
ExecStartPre=
ExecStartPre=/usr/local/lib/slurmlab/ssh-host-keys
ExecStartPre=/usr/sbin/sshd -t
StandardOutput=journal+console
EOF
# Debian's own first-boot generator runs `ssh-keygen -A` (RSA too): replaced by the drop-in above.
in_root systemctl mask sshd-keygen.service
in_root systemctl disable ssh.socket >/dev/null 2>&1 || true
in_root systemctl enable ssh.service
# systemd's sshd generator (AF_VSOCK and AF_UNIX sockets) only adds a failure message at boot here.
install -d -m 0755 "$R/etc/systemd/system-generators"
ln -sf /dev/null "$R/etc/systemd/system-generators/systemd-ssh-generator"

say "per-VM authorized_keys from the systemd credential slurmlab.authorized_keys"
cat > "$R/usr/local/lib/slurmlab/authorized-keys" <<'EOF'
#!/bin/sh
# Installs the SSH public keys passed to this VM as the system credential
# slurmlab.authorized_keys (qemu: -smbios type=11,value=io.systemd.credential:slurmlab.authorized_keys=KEY)
# for the users vagrant and root. Without the credential the existing files stay as they are.
# Runs before ssh.service, so plain writes are safe. Shell builtins where possible: each process
# costs ~0.1 s under emulation and this is on the way to sshd.
set -eu
src="${CREDENTIALS_DIRECTORY:-/nonexistent}/slurmlab.authorized_keys"
if [ ! -s "$src" ]; then
  echo "slurmlab: no slurmlab.authorized_keys credential; authorized_keys left unchanged"
  exit 0
fi
keys=""
n=0
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in "" | "#"*) continue ;; esac
  keys="$keys$line
"
  n=$((n + 1))
done < "$src"
if [ "$n" -eq 0 ]; then
  echo "slurmlab: the slurmlab.authorized_keys credential holds no key line; nothing installed" >&2
  exit 1
fi
umask 077
mkdir -p /var/lib/vagrant/.ssh /root/.ssh
printf '%s' "$keys" > /var/lib/vagrant/.ssh/authorized_keys
printf '%s' "$keys" > /root/.ssh/authorized_keys
chown vagrant:vagrant /var/lib/vagrant/.ssh /var/lib/vagrant/.ssh/authorized_keys
chmod 0700 /var/lib/vagrant/.ssh /root/.ssh
s=s; [ "$n" -eq 1 ] && s=""
echo "slurmlab: authorized_keys installed ($n key$s) for vagrant and root"
EOF
chmod 0755 "$R/usr/local/lib/slurmlab/authorized-keys"
cat > "$R/etc/systemd/system/slurmlab-authorized-keys.service" <<'EOF'
[Unit]
Description=slurmlab: install SSH authorized_keys from the VM's credential
After=local-fs.target
Before=ssh.service sshd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ImportCredential=slurmlab.authorized_keys
ExecStart=/usr/local/lib/slurmlab/authorized-keys
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
in_root systemctl enable slurmlab-authorized-keys.service

say "node identity at boot from the credentials slurmlab.node, slurmlab.hosts, slurmlab.munge_key"
cat > "$R/usr/local/lib/slurmlab/node-setup" <<'EOF'
#!/bin/sh
# Sets a slurmlab node up at boot from the system credentials the VM was started with, before
# munge, sshd and the Slurm daemons start, so that Ansible finds the node converged:
#   slurmlab.node       name=, role=Controller|Login|Compute, cluster=, controller= (one per line)
#   slurmlab.hosts      "ADDRESS NAME" lines: the cluster's nodes, written into /etc/hosts
#   slurmlab.munge_key  the cluster's munge key (from a file on the host through qemu's fw_cfg:
#                       never on a command line, never in a log)
# Writes /etc/hostname, the /etc/hosts block (the same text as Ansible's blockinfile in the role
# common), /etc/munge/munge.key, /etc/default/slurmd or sackd (the role slurm_node's text), and
# enables and queues munge, plus slurmd (compute) or sackd (login). The controller's slurm.conf
# and slurmctld stay Ansible's. The outcome goes to $STATUS (read by Ansible's probe):
# "ok ...", or "failed: <reason>" and exit 1. Without slurmlab.node it does nothing (a plain box).
# Shell builtins where possible: each process costs ~0.1 s under emulation.
set -eu
ROOT="${SLURMLAB_ROOT:-}"  # tests run it against a directory tree
SYSTEMCTL="${SLURMLAB_SYSTEMCTL:-systemctl}"
CHOWN="${SLURMLAB_CHOWN:-chown}"
C="${CREDENTIALS_DIRECTORY:-/nonexistent}"
STATUS="$ROOT/run/slurmlab/node-setup.status"
mkdir -p "${STATUS%/*}"
fail() {
  echo "failed: $*" > "$STATUS"
  echo "slurmlab: node setup failed: $*" >&2
  exit 1
}
if [ ! -s "$C/slurmlab.node" ]; then
  echo "none: no slurmlab.node credential" > "$STATUS"
  echo "slurmlab: no slurmlab.node credential; the node is left to Ansible"
  exit 0
fi
name="" role="" cluster="" controller=""
while IFS='=' read -r k v || [ -n "$k" ]; do
  case "$k" in
    name) name=$v ;; role) role=$v ;; cluster) cluster=$v ;; controller) controller=$v ;;
    "" | "#"*) ;;
    *) fail "slurmlab.node: unknown key '$k'" ;;
  esac
done < "$C/slurmlab.node"
case "$name" in "" | -* | *[!a-z0-9-]*) fail "slurmlab.node: name '$name' is not a short lower-case hostname" ;; esac
case "$controller" in "" | -* | *[!a-z0-9-]*) fail "slurmlab.node: controller '$controller' is not a short lower-case hostname" ;; esac
case "$cluster" in "" | -* | *[!A-Za-z0-9_-]*) fail "slurmlab.node: cluster '$cluster' is not a cluster name" ;; esac
case "$role" in Controller | Login | Compute) ;; *) fail "slurmlab.node: role '$role' is not Controller, Login or Compute" ;; esac

# hostname: /etc/hostname and the running name (systemd set it from system.hostname already)
if [ "$(cat "$ROOT/etc/hostname" 2>/dev/null || true)" != "$name" ]; then
  echo "$name" > "$ROOT/etc/hostname.slurmlab"
  mv -f "$ROOT/etc/hostname.slurmlab" "$ROOT/etc/hostname"
fi
if [ -z "$ROOT" ] && [ "$(cat /proc/sys/kernel/hostname)" != "$name" ]; then
  echo "$name" > /proc/sys/kernel/hostname
fi

# /etc/hosts: the managed block, replaced (or appended) as blockinfile does it
if [ -s "$C/slurmlab.hosts" ]; then
  begin="# BEGIN slurmlab cluster $cluster" end="# END slurmlab cluster $cluster"
  tmp="$ROOT/etc/hosts.slurmlab"
  : > "$tmp"
  inside="" placed=""
  block() {
    echo "$begin"
    while read -r addr host || [ -n "$addr" ]; do
      case "$addr" in "" | "#"*) continue ;; esac
      case "$addr$host" in *[!0-9A-Za-z.:-]*) fail "slurmlab.hosts: bad line '$addr $host'" ;; esac
      echo "$addr $host"
    done < "$C/slurmlab.hosts"
    echo "$end"
  }
  while IFS= read -r line || [ -n "$line" ]; do
    if [ "$line" = "$begin" ]; then inside=1; block >> "$tmp"; placed=1; continue; fi
    if [ -n "$inside" ]; then [ "$line" = "$end" ] && inside=""; continue; fi
    printf '%s\n' "$line" >> "$tmp"
  done < "$ROOT/etc/hosts"
  [ -n "$placed" ] || block >> "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$ROOT/etc/hosts"
fi

# the munge key (binary: copied, never read into the shell)
key=""
if [ -s "$C/slurmlab.munge_key" ]; then
  umask 077
  cp "$C/slurmlab.munge_key" "$ROOT/etc/munge/munge.key.slurmlab"
  $CHOWN munge:munge "$ROOT/etc/munge/munge.key.slurmlab"
  chmod 0400 "$ROOT/etc/munge/munge.key.slurmlab"
  mv -f "$ROOT/etc/munge/munge.key.slurmlab" "$ROOT/etc/munge/munge.key"
  umask 022
  key=1
fi

# configless daemon options (the same text as roles/slurm_node/templates/default-*.j2)
units=""
case "$role" in
  Compute)
    printf '%s\n' "# Managed by slurmlab. Local edits are overwritten." \
      "SLURMD_OPTIONS=\"--conf-server $controller\"" > "$ROOT/etc/default/slurmd"
    rm -f "$ROOT/etc/slurm/slurm.conf"
    units="slurmd.service" ;;
  Login)
    printf '%s\n' "# Managed by slurmlab. Local edits are overwritten." \
      "SACKD_OPTIONS=\"--conf-server $controller\"" > "$ROOT/etc/default/sackd"
    rm -f "$ROOT/etc/slurm/slurm.conf"
    units="sackd.service" ;;
esac
[ -n "$key" ] && units="munge.service $units"

# enabled (the links `systemctl enable` makes: no daemon-reload at boot) and queued: they start
# after this unit (they are ordered after it), slurmd/sackd retrying until the controller serves
for u in $units; do
  ln -sf "/usr/lib/systemd/system/$u" "$ROOT/etc/systemd/system/multi-user.target.wants/$u"
done
if [ -n "$units" ] && [ -z "$ROOT" ]; then
  # shellcheck disable=SC2086
  $SYSTEMCTL --no-block start $units
fi
echo "ok: $name ($role of $cluster, controller $controller)${key:+, munge key}${units:+, started $units}" > "$STATUS"
echo "slurmlab: node setup done: $name ($role)${key:+, munge key installed}"
EOF
chmod 0755 "$R/usr/local/lib/slurmlab/node-setup"
cat > "$R/etc/systemd/system/slurmlab-node.service" <<'EOF'
[Unit]
Description=slurmlab: node name, cluster names and munge key from the VM's credentials
After=local-fs.target
Before=munge.service slurmd.service sackd.service slurmctld.service ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ImportCredential=slurmlab.node
ImportCredential=slurmlab.hosts
ImportCredential=slurmlab.munge_key
ExecStart=/usr/local/lib/slurmlab/node-setup
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
in_root systemctl enable slurmlab-node.service
# slurmd and sackd started at boot retry until the controller serves (and, for slurmd, until
# slurm.conf lists the node: its join); without a limit on the number of restarts.
for u in slurmd sackd; do
  install -d -m 0755 "$R/etc/systemd/system/$u.service.d"
  cat > "$R/etc/systemd/system/$u.service.d/10-slurmlab-retry.conf" <<'EOF'
[Unit]
StartLimitIntervalSec=0

[Service]
Restart=on-failure
RestartSec=5
EOF
done

say "warm start: a forked VM takes its identity from the guest agent (docs/adr/0011)"
cat > "$R/usr/local/lib/slurmlab/fork-identity" <<'EOF'
#!/bin/sh
# Gives a VM restored from a template (a fork: docs/adr/0011) its own identity. The lab runs it
# through the qemu guest agent right after the restore, with a tar archive on stdin:
#   fork.env      MAC=, ADDRESS= (with its prefix), GATEWAY=, MACHINE_ID= (one per line)
#   seed          random bytes from the host, mixed into the kernel's RNG first
#   ssh_host_{ed25519,ecdsa}_key[.pub]   the VM's own SSH host keys
#   slurmlab.node, slurmlab.hosts, slurmlab.munge_key, slurmlab.authorized_keys
#                 the same credentials a cold-booted VM gets at boot; node-setup and
#                 authorized-keys read them from here.
# The template was booted without any of them, so nothing of another node is left to undo. The
# outcome goes to /run/slurmlab/fork.status ("ok ..." or "failed: <reason>", exit 1). The archive's
# folder (the munge key, the host keys) is removed at the end, whatever happens.
set -eu
D=/run/slurmlab/fork
STATUS=/run/slurmlab/fork.status
mkdir -p /run/slurmlab
rm -rf "$D"
mkdir -m 0700 "$D"
trap 'rm -rf "$D"' EXIT
fail() {
  echo "failed: $*" > "$STATUS"
  echo "slurmlab: fork identity failed: $*" >&2
  exit 1
}
tar -x -C "$D" -f - || fail "the identity archive on stdin could not be read"
[ -s "$D/fork.env" ] || fail "the archive has no fork.env"
mac="" address="" gateway="" machine_id=""
while IFS='=' read -r k v || [ -n "$k" ]; do
  case "$k" in
    MAC) mac=$v ;; ADDRESS) address=$v ;; GATEWAY) gateway=$v ;; MACHINE_ID) machine_id=$v ;;
    "" | "#"*) ;;
    *) fail "fork.env: unknown key '$k'" ;;
  esac
done < "$D/fork.env"
case "$mac" in [0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]) ;;
  *) fail "fork.env: MAC '$mac' is not a lower-case MAC address" ;; esac
case "$address" in "" | *[!0-9./]* | */*/*) fail "fork.env: ADDRESS '$address' is not ADDRESS/PREFIX" ;; */*) ;;
  *) fail "fork.env: ADDRESS '$address' has no /PREFIX" ;; esac
case "$gateway" in *[!0-9.]*) fail "fork.env: GATEWAY '$gateway' is not an IPv4 address" ;; esac
case "$machine_id" in *[!0-9a-f]* | "") fail "fork.env: MACHINE_ID '$machine_id' is not 32 hex digits" ;; esac
[ "${#machine_id}" -eq 32 ] || fail "fork.env: MACHINE_ID '$machine_id' is not 32 hex digits"

# 1. entropy before anything draws a random number (two forks of one memory image share the
#    kernel's RNG state until this write)
if [ -s "$D/seed" ]; then cat "$D/seed" > /dev/urandom; fi
# 2. machine-id
printf '%s\n' "$machine_id" > /etc/machine-id.slurmlab
chmod 0444 /etc/machine-id.slurmlab
mv -f /etc/machine-id.slurmlab /etc/machine-id
# journald writes under /var/log/journal/<machine-id>, and journalctl reads the current id's folder
# only: without a restart `journalctl -u X` finds nothing (the template's boot stays under its id)
systemctl restart systemd-journald.service
# 3. SSH host keys (the template's are replaced; sshd rereads them on reload)
for t in ed25519 ecdsa; do
  [ -s "$D/ssh_host_${t}_key" ] && [ -s "$D/ssh_host_${t}_key.pub" ] || fail "the archive has no ssh_host_${t}_key"
  install -m 0600 -o root -g root "$D/ssh_host_${t}_key" "/etc/ssh/ssh_host_${t}_key"
  install -m 0644 -o root -g root "$D/ssh_host_${t}_key.pub" "/etc/ssh/ssh_host_${t}_key.pub"
done
# 4. network: the NIC's MAC is the template's until the guest sets it (virtio-net's state travels
#    in the saved image); a static address (no DHCP round trip), the same one the cluster's
#    network hands this MAC
ip link set dev eth0 address "$mac" || fail "could not set eth0's MAC to $mac"
{
  echo "# Managed by slurmlab: this VM was forked from a template (docs/adr/0011)."
  echo "[Match]"
  echo "Name=eth0"
  echo ""
  echo "[Network]"
  echo "Address=$address"
  [ -n "$gateway" ] && echo "Gateway=$gateway"
  echo "LinkLocalAddressing=no"
  echo "IPv6AcceptRA=no"
} > /etc/systemd/network/10-slurmlab-eth0.network.slurmlab
mv -f /etc/systemd/network/10-slurmlab-eth0.network.slurmlab /etc/systemd/network/10-slurmlab-eth0.network
networkctl reload
networkctl reconfigure eth0 || fail "networkctl reconfigure eth0 failed"
# 5. the cluster's SSH key, then the node's name, hosts, munge key and daemons: the boot-time
#    scripts of a cold VM, on the same credentials
CREDENTIALS_DIRECTORY="$D" /usr/local/lib/slurmlab/authorized-keys > /dev/null
CREDENTIALS_DIRECTORY="$D" /usr/local/lib/slurmlab/node-setup > /dev/null || fail "node-setup: $(cat /run/slurmlab/node-setup.status)"
# sshd rereads its host keys when it re-executes on SIGHUP (`systemctl reload` first runs `sshd -t`: 1.7 s)
if [ -s /run/sshd.pid ]; then kill -HUP "$(cat /run/sshd.pid)"; else systemctl reload ssh.service; fi
echo "ok: $(cat /proc/sys/kernel/hostname) $address $mac" > "$STATUS"
echo "slurmlab: fork identity set: $(cat /proc/sys/kernel/hostname) $address"
EOF
chmod 0755 "$R/usr/local/lib/slurmlab/fork-identity"
# The agent's socket exists only on forked VMs (their template has the channel); a cold VM has none.
# The agent unit starts when udev sees the port (Debian's rule), so nothing is enabled here.

say "network: DHCP on eth0 (net.ifnames=0) with systemd-networkd"
cat > "$R/etc/systemd/network/10-slurmlab-eth0.network" <<'EOF'
# The first NIC (Vagrant's management network). Other NICs are left to Vagrant or Ansible.
[Match]
Name=eth0

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no

[DHCPv4]
# libvirt's dnsmasq identifies guests by MAC (static leases, `virsh net-dhcp-leases`).
ClientIdentifier=mac
EOF
in_root systemctl enable systemd-networkd.service
in_root systemctl enable systemd-networkd-wait-online.service

say "first boot: no prompts, a new machine-id per VM"
in_root systemctl mask systemd-firstboot.service
: > "$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"

say "boot time: services and timers that cost CPU or wait for the network"
for u in e2scrub_reap.service apt-daily.timer apt-daily-upgrade.timer fstrim.timer \
         e2scrub_all.timer dpkg-db-backup.timer man-db.timer; do
  if [ -e "$R/usr/lib/systemd/system/$u" ] || [ -e "$R/lib/systemd/system/$u" ]; then
    in_root systemctl disable "$u" >/dev/null 2>&1
  fi
done

say "slurm and munge: installed, disabled, no munge key (Ansible enables them per cluster)"
for u in slurmctld.service slurmd.service sackd.service munge.service; do
  in_root systemctl disable "$u" >/dev/null 2>&1
done
rm -f "$R/etc/munge/munge.key"

say "accounting, NFS: installed, disabled (the roles accounting and nfs_server start them on the controller)"
for u in mariadb.service slurmdbd.service nfs-server.service rpcbind.service rpcbind.socket \
         nfs-blkmap.service rpc-statd.service rpc-statd-notify.service nfs-idmapd.service; do
  if [ -e "$R/usr/lib/systemd/system/$u" ] || [ -e "$R/lib/systemd/system/$u" ]; then
    in_root systemctl disable "$u" >/dev/null 2>&1 || true
  fi
done
# NFSv4 only: no rpcbind, no statd (the clients mount with nfsvers=4.2).
install -d -m 0755 "$R/etc/nfs.conf.d"
cat > "$R/etc/nfs.conf.d/slurmlab.conf" <<'EOF'
# slurmlab: NFSv4 only (the cluster's /home and /fsx); no NFSv3, so no rpcbind and no statd.
[nfsd]
vers3=n
EOF
# MariaDB for one slurmdbd on a small VM (768 MiB to 1 GiB): a small buffer pool, no performance
# schema; innodb settings from Slurm's accounting.html.
install -d -m 0755 "$R/etc/mysql/mariadb.conf.d"
cat > "$R/etc/mysql/mariadb.conf.d/60-slurmlab.cnf" <<'EOF'
# slurmlab: one slurmdbd on a small lab VM
[mariadbd]
bind-address = 127.0.0.1
skip-name-resolve
performance_schema = OFF
innodb_buffer_pool_size = 32M
innodb_log_file_size = 64M
innodb_lock_wait_timeout = 900
max_connections = 40
EOF

say "observability: prometheus and its node exporter installed, disabled (roles/observability starts them)"
# (no existence test: both are in the recipe's packages, a renamed unit must fail the build)
for u in prometheus.service prometheus-node-exporter.service; do
  in_root systemctl disable "$u" >/dev/null 2>&1
done
# no metrics from the build itself
rm -rf "$R/var/lib/prometheus/metrics2"

say "jupyterhub: installed, disabled (roles/jupyterhub starts it on login nodes); the recipe's wheels"
in_root systemctl disable jupyterhub.service >/dev/null 2>&1
if [ -n "$WHEELS" ]; then
  # the builder downloaded them on the host (recipe.WHEELS); their dependencies are Debian's packages
  mkdir -p "$R/tmp/wheels"
  cp "$WHEELS"/*.whl "$R/tmp/wheels/"
  in_root sh -c 'pip install -q --no-deps --no-index --break-system-packages --root-user-action=ignore /tmp/wheels/*.whl'
  rm -rf "$R/tmp/wheels"
  if [ -x "$R/usr/local/bin/reframe" ]; then
    # ReFrame (recipe.WORKSHOP_WHEELS) runs on Debian's older dependencies: what it imports at start must load
    say "reframe $(in_root reframe -V) (slurmlab reframe-config writes a cluster's configuration)"
    in_root python3 -c 'import reframe.frontend.cli, reframe.core.config'
  fi
  # the nodes have no route out: no "receive official Jupyter news?" question, no update check
  mkdir -p "$R/usr/local/share/jupyter/lab/settings"
  cat > "$R/usr/local/share/jupyter/lab/settings/overrides.json" <<'EOF'
{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}
EOF
fi

# (/usr/bin/mpicc is an alternatives link: absolute, it points outside $R)
if [ -x "$R/usr/bin/mpicc.openmpi" ]; then
  say "workshop: seff, Lmod modulefiles for the compilers and MPI (the default environment needs none)"
  # mpicc, mpirun and python3's mpi4py work without a module (Debian's alternatives in /usr/bin); the
  # modules name what is there, set the usual variables, and make srun use PMIx even where a
  # cluster's MpiDefault is none.
  install -m 0755 "$FILES/seff" "$R/usr/local/bin/seff"
  # shellcheck disable=SC2016
  ver() { in_root dpkg-query -W -f '${Version}' "$1" | sed 's/^[0-9]*://; s/[-+~].*//'; }
  gcc_v=$(ver gcc-14) mpi_v=$(ver libopenmpi-dev) mpi4py_v=$(ver python3-mpi4py) numpy_v=$(ver python3-numpy)
  M="$R/etc/lmod/modules"
  install -d -m 0755 "$M/gcc" "$M/openmpi" "$M/mpi4py"
  cat > "$M/gcc/$gcc_v.lua" <<EOF
help([[GCC $gcc_v from Debian: gcc, g++, gfortran. Also on the PATH without this module.]])
whatis("Name: GCC")
whatis("Version: $gcc_v")
family("compiler")
setenv("CC", "gcc")
setenv("CXX", "g++")
setenv("FC", "gfortran")
setenv("F77", "gfortran")
EOF
  cat > "$M/openmpi/$mpi_v.lua" <<EOF
help([[Open MPI $mpi_v from Debian. Compile with mpicc, mpicxx or mpifort; start ranks with srun
(Slurm's PMIx: srun --mpi=pmix, which this module makes srun's default). Also on the PATH without it.]])
whatis("Name: Open MPI")
whatis("Version: $mpi_v")
family("mpi")
depends_on("gcc")
setenv("MPI_HOME", "/usr/lib/x86_64-linux-gnu/openmpi")
setenv("MPI_DIR", "/usr/lib/x86_64-linux-gnu/openmpi")
setenv("SLURM_MPI_TYPE", "pmix")
EOF
  cat > "$M/mpi4py/$mpi4py_v.lua" <<EOF
help([[MPI for Python $mpi4py_v with numpy $numpy_v (Debian): from mpi4py import MPI, under srun.]])
whatis("Name: mpi4py")
whatis("Version: $mpi4py_v")
depends_on("openmpi")
EOF
  # Only the modules above: Debian's default path adds Lmod's own Core/lmod and Core/settarg.
  # (/etc/lmod/.modulespath is read before the packaged conffile /etc/lmod/modulespath.)
  echo /etc/lmod/modules > "$R/etc/lmod/.modulespath"
  in_root bash -c '. /etc/profile.d/lmod.sh && module --terse avail' 2>&1 | sed 's/^/I: slurmlab customize: module avail: /'
fi

say "initramfs: the disk drivers a VM needs, no hardware database (17.8 MB -> ~8 MB)"
cat > "$R/etc/initramfs-tools/conf.d/slurmlab" <<'EOF'
# slurmlab: a small initramfs boots faster under emulation; hooks/zz-slurmlab adds the disk drivers.
MODULES=list
EOF
cat > "$R/etc/initramfs-tools/hooks/zz-slurmlab" <<'EOF'
#!/bin/sh
PREREQ="udev"
prereqs() { echo "$PREREQ"; }
case "${1:-}" in prereqs) prereqs; exit 0 ;; esac
. /usr/share/initramfs-tools/hook-functions
# Disk drivers for each vagrant-libvirt disk bus: virtio (default), scsi, sata, ide.
manual_add_modules virtio_blk virtio_scsi sd_mod ahci ata_piix
# udev's hardware database (13 MB) only names devices: the initramfs does not need it.
rm -f "$DESTDIR/usr/lib/udev/hwdb.bin" "$DESTDIR/etc/udev/hwdb.bin"
EOF
chmod 0755 "$R/etc/initramfs-tools/hooks/zz-slurmlab"
in_root update-initramfs -u -k all

say "clean up"
in_root apt-get clean
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/debconf/*-old \
       "$R"/var/lib/dpkg/*-old "$R"/tmp/* "$R"/var/tmp/*
find "$R/var/log" -type f -exec truncate -s 0 {} +
# Mark /etc and /var as up to date with /usr, so that every VM's first boot skips
# ldconfig.service, systemd-journal-catalog-update.service and friends (ConditionNeedsUpdate=).
in_root /usr/lib/systemd/systemd-update-done
say "done"
