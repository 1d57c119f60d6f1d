"""Runs inside the victim sandbox of the escape suite (tests/security/lib/watch.py): listens on
127.0.0.1:PORT and on the abstract Unix socket @NAME, holds a SysV shared-memory segment with
KEY, and appends every contact to /tmp/victim-conn.log. Attacks from another sandbox must never
reach any of them. Usage: victim.py PORT NAME KEY"""

import ctypes
import select
import socket
import sys

port, name, key = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(key, 4096, 0o1000 | 0o666)  # IPC_CREAT

tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("127.0.0.1", port))
tcp.listen(16)
unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
unix.bind("\0" + name)
unix.listen(16)
with open("/tmp/victim-ready", "w") as f:
    f.write("shm %d\n" % shm)

while True:
    ready, _, _ = select.select([tcp, unix], [], [])
    for s in ready:
        conn, peer = s.accept()
        with open("/tmp/victim-conn.log", "a") as log:
            log.write("%s connection from %r\n" % ("tcp" if s is tcp else "unix", peer))
        conn.close()
