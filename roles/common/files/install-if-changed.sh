# shellcheck shell=sh
# install_if_changed FILE [MODE] [OWNER] [BEFORE]
#
# The roles' one "write, compare, rename": standard input is what FILE should hold. It goes to
# FILE.slurmlab (same folder: the rename is atomic), is compared with FILE (cmp) and, only if it
# differs, gets MODE (chmod) and OWNER (chown user:group) when given, then BEFORE (a command, e.g.
# a function that leaves a marker) runs, and the rename puts it in place.
# Returns 0 when FILE changed, 1 when it already held that text (nothing touched), 2 when a step
# failed (FILE unchanged, the temporary file removed).
#
# Not run alone: a role's raw task puts this text in front of its script (docs/roles.md, "Scripts").
install_if_changed() {
  iic_file=$1 iic_mode=${2:-} iic_owner=${3:-} iic_before=${4:-}
  iic_tmp=$iic_file.slurmlab
  cat > "$iic_tmp" || { rm -f "$iic_tmp"; return 2; }
  if cmp -s "$iic_tmp" "$iic_file"; then rm -f "$iic_tmp"; return 1; fi
  if { [ -z "$iic_mode" ] || chmod "$iic_mode" "$iic_tmp"; } \
    && { [ -z "$iic_owner" ] || chown "$iic_owner" "$iic_tmp"; } \
    && { [ -z "$iic_before" ] || "$iic_before"; } \
    && mv -f "$iic_tmp" "$iic_file"; then
    return 0
  fi
  rm -f "$iic_tmp"
  return 2
}
