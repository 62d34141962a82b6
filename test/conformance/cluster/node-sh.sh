#!/usr/bin/env bash
# Runs a shell command as root on a node VM of a running conformance cluster,
# through the root shell node-init keeps on the VM's second serial port, prints
# its output (stdout and stderr together) and exits with its exit code.
#
#   test/conformance/cluster/node-sh.sh RUN_DIR NODE 'ipvsadm -Ln'
#   test/conformance/cluster/node-sh.sh /tmp/kpi-conf-123 node2 'tail -50 /var/log/kubelet.log'
#
# One command at a time per node (the serial port is one line). KPI_NODE_SH_TIMEOUT
# (seconds, default 60) bounds the wait; 124 on timeout.
set -euo pipefail
(($# == 3)) || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
sock=$1/logs/shell-$2.sock
[[ -S $sock ]] || { echo "node-sh: no shell socket $sock (is the cluster up?)" >&2; exit 2; }
exec python3 - "$sock" "$3" "${KPI_NODE_SH_TIMEOUT:-60}" <<'EOF'
import os, socket, sys, time
sock, cmd, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
marker = "KPI-RC-%d-%d=" % (os.getpid(), int(time.time()))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
s.settimeout(1)
# Drop whatever an earlier command left unread.
try:
    while s.recv(65536):
        pass
except socket.timeout:
    pass
# The command runs in a subshell with stdin closed, so it cannot eat the
# shell's next lines; the marker is printed from two halves so the echo of
# this line (if any) never matches.
line = "( %s ) </dev/null 2>&1; echo \"%s\"\"%s$?\"\n" % (cmd, marker[:6], marker[6:])
s.sendall(line.encode())
buf = b""
deadline = time.time() + timeout
while time.time() < deadline:
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        continue
    if not chunk:
        break
    buf += chunk
    i = buf.find(marker.encode())
    if i >= 0 and b"\n" in buf[i:]:
        out = buf[:i].decode(errors="replace")
        rc = buf[i + len(marker):].split(b"\n")[0].strip()
        sys.stdout.write(out)
        sys.exit(int(rc or b"1"))
sys.stdout.write(buf.decode(errors="replace"))
print("node-sh: no answer within %gs" % timeout, file=sys.stderr)
sys.exit(124)
EOF
