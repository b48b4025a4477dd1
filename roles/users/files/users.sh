#!/bin/sh
# The student accounts (tasks/main.yml), one command for all of them: the removed ones deleted, every
# missing account and its group added in one systemd-sysusers run, a differing password hash replaced;
# with homes=yes (the NFS server) the homes made from /etc/skel (mode 0700) and deleted. Arguments: the
# password hash, the homes' folder, the shell, yes|no (make homes), then -NAME for each account to
# remove and NAME:UID for each account to keep (its group: NAME with gid UID).
# Prints "slurmlab-users changed: ..." per change and "slurmlab-users failed: ..." per failure.
#
# Why systemd-sysusers: a groupadd and a useradd per student cost a node 0.5 s each under emulation
# (20 students: 10 s of a node's configuration, 20-37 s on a loaded machine); one sysusers run adds
# them all in 0.2 s, with the same locks on /etc/passwd and /etc/shadow (docs/adr/0027). It takes
# each password hash from a credential file (passwd.hashed-password.NAME, systemd.system-credentials(7)),
# never on a command line. It exits 0 even where it could not add an account: every account is
# checked in /etc/passwd afterwards.
h="$1" base="$2" shell="$3" homes="$4"; shift 4
read_files() {
  pw=" $(cut -d: -f1,3,4,6 /etc/passwd | tr '\n' ' ')"
  sh=" $(cut -d: -f1,2 /etc/shadow | tr '\n' ' ')"
  gr=" $(cut -d: -f1,3 /etc/group | tr '\n' ' ')"
}
read_files
rc=0 missing="" bad=" "
cred=$(mktemp -d /run/slurmlab-users.XXXXXX) || { echo "slurmlab-users failed: cannot make a folder in /run"; exit 1; }
trap 'rm -rf "$cred"' EXIT
for a in "$@"; do
  case "$a" in
    -*)
      n="${a#-}"
      case "$pw" in *" $n:"*) ;; *) continue ;; esac
      if { if [ "$homes" = yes ]; then userdel -r "$n" 2>/dev/null || userdel "$n"; else userdel "$n"; fi; }; then
        echo "slurmlab-users changed: removed $n"
      else
        echo "slurmlab-users failed: cannot remove $n"; rc=1
      fi
      continue ;;
  esac
  n="${a%%:*}" u="${a#*:}"
  case "$pw" in
    *" $n:$u:$u:$base/$n "*) continue ;;
    *" $n:"*) echo "slurmlab-users failed: $n exists with another uid, gid or home than $u:$u:$base/$n"; rc=1; bad="$bad$n "; continue ;;
  esac
  case "$gr" in
    *" $n:$u "*) ;;  # a group left by an earlier run: the account joins it
    *" $n:"*) echo "slurmlab-users failed: group $n exists with another gid than $u"; rc=1; bad="$bad$n "; continue ;;
    *":$u "*) echo "slurmlab-users failed: gid $u belongs to another group than $n"; rc=1; bad="$bad$n "; continue ;;
    *) echo "g $n $u" >> "$cred/students.conf" ;;
  esac
  echo "u $n $u:$u - $base/$n $shell" >> "$cred/students.conf"
  (umask 077 && printf '%s' "$h" > "$cred/passwd.hashed-password.$n")
  missing="$missing $n"
done
if [ -n "$missing" ]; then
  CREDENTIALS_DIRECTORY="$cred" systemd-sysusers "$cred/students.conf" >/dev/null 2>"$cred/err" \
    || echo "slurmlab-users failed: systemd-sysusers: $(tail -n 3 "$cred/err" | tr '\n' ' ')"
  read_files
fi
for a in "$@"; do
  case "$a" in -*) continue ;; esac
  n="${a%%:*}" u="${a#*:}"
  case "$bad" in *" $n "*) continue ;; esac
  case "$pw" in
    *" $n:$u:$u:$base/$n "*) ;;
    *) echo "slurmlab-users failed: cannot add $n ($u): $(grep -F "$n" "$cred/err" 2>/dev/null | tail -n 1)"; rc=1; continue ;;
  esac
  case "$missing " in *" $n "*) echo "slurmlab-users changed: added $n ($u)" ;; esac
  case "$sh" in
    *" $n:$h "*) ;;
    *) usermod -p "$h" "$n" || { echo "slurmlab-users failed: password of $n"; rc=1; continue; }
       echo "slurmlab-users changed: password of $n" ;;
  esac
  if [ "$homes" = yes ] && [ ! -d "$base/$n" ]; then
    if install -d -m 0700 -o "$u" -g "$u" "$base/$n" && cp -rT /etc/skel "$base/$n" && chown -R "$u:$u" "$base/$n"; then
      echo "slurmlab-users changed: home $base/$n"
    else
      echo "slurmlab-users failed: home of $n"; rc=1
    fi
  fi
done
exit "$rc"
