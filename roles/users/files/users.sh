#!/bin/sh
# The student accounts (tasks/main.yml), one command for all of them: each missing group and user
# added with its uid/gid, a differing password hash replaced, the removed ones deleted; with homes=yes
# (the NFS server) the homes made from /etc/skel (mode 0700) and deleted. /etc/passwd and /etc/shadow
# are read once. Arguments: the password hash, the homes' folder, the shell, yes|no (make homes), then
# -NAME for each account to remove and NAME:UID for each account to keep.
# Prints "slurmlab-users changed: ..." per change and "slurmlab-users failed: ..." per failure.
h="$1" base="$2" shell="$3" homes="$4"; shift 4
pw=" $(cut -d: -f1,3,4,6 /etc/passwd | tr '\n' ' ')"
sh=" $(cut -d: -f1,2 /etc/shadow | tr '\n' ' ')"
gr=" $(cut -d: -f1,3 /etc/group | tr '\n' ' ')"
rc=0
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
    *" $n:$u:$u:$base/$n "*) ;;
    *" $n:"*) echo "slurmlab-users failed: $n exists with another uid, gid or home than $u:$u:$base/$n"; rc=1; continue ;;
    *)
      case "$gr" in
        *" $n:$u "*) ;;
        *" $n:"*) echo "slurmlab-users failed: group $n exists with another gid than $u"; rc=1; continue ;;
        *) groupadd -g "$u" "$n" || { echo "slurmlab-users failed: groupadd $n"; rc=1; continue; } ;;
      esac
      useradd -M -u "$u" -g "$u" -d "$base/$n" -s "$shell" -p "$h" "$n" \
        || { echo "slurmlab-users failed: useradd $n"; rc=1; continue; }
      sh="$sh $n:$h "
      echo "slurmlab-users changed: added $n ($u)" ;;
  esac
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
