#!/bin/sh
# One file from the Ansible host, written only if it differs (tasks/auto_resume.yml). Needs
# install_if_changed. Arguments: the file, its mode, a tag, the text in base64. Prints
# "<tag> changed" when it changed the file.
f="$1" mode="$2" tag="$3"
printf %s "$4" | base64 -d | install_if_changed "$f" "$mode"
case $? in 0) echo "$tag changed" ;; 1) ;; *) exit 1 ;; esac
