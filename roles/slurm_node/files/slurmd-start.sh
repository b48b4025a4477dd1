#!/bin/sh
# slurmd enabled and running (tasks/slurmd.yml); prints "slurmd-started" if it was not both. A
# slurmd that is not active is restarted at once (an attempt still in flight read the old
# configuration and will fail).
a=$(systemctl is-active slurmd); e=$(systemctl is-enabled slurmd)
[ "$e" = enabled ] || SYSTEMCTL_SKIP_SYSV=1 systemctl enable slurmd --no-reload || exit $?
[ "$a" = active ] || systemctl restart slurmd || exit $?
[ "$a/$e" = active/enabled ] || echo slurmd-started
