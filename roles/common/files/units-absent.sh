# shellcheck shell=sh
# units_absent UNIT...: each unit that is enabled or not inactive is disabled and stopped (say "UNIT stopped").
# files_absent FILE...: each file that exists is removed (say "FILE removed"), and reload is set to 1.
#
# The roles' one "take it away" for a state of absent (jupyterhub, observability). Not run alone: a
# role's raw task puts this text in front of its script, which defines say and die (docs/roles.md,
# "Scripts").
units_absent() {
  for ua_unit in "$@"; do
    if [ "$(systemctl is-enabled "$ua_unit" 2>/dev/null)" = enabled ] || [ "$(systemctl is-active "$ua_unit")" != inactive ]; then
      SYSTEMCTL_SKIP_SYSV=1 systemctl disable --now --no-reload "$ua_unit" >/dev/null 2>&1 \
        || systemctl stop "$ua_unit" || die "cannot stop $ua_unit"
      say "$ua_unit stopped"
    fi
  done
}

files_absent() {
  for fa_file in "$@"; do
    if [ -e "$fa_file" ]; then
      rm -f "$fa_file" || die "cannot remove $fa_file"
      say "$fa_file removed"
      # shellcheck disable=SC2034  # read by the script this text is put in front of
      reload=1
    fi
  done
}
