"""Reaches the API without being root: connects to the daemon's socket as an unprivileged
host user (nobody), and checks the socket's and its directory's permissions. Today the socket
is the only authentication (mode 0600, root): anyone who can connect controls every sandbox.
Blocked by: the socket file is 0600 root:root, so connect(2) as another uid fails with EACCES.
space-attack: sandbox=host
"""
import os
import socket
import stat

from hostside import SOCKET, escaped, finish, note

st = os.stat(SOCKET)
mode = stat.S_IMODE(st.st_mode)
if mode & 0o077 or st.st_uid != 0:
    escaped("socket mode %o owner %d" % (mode, st.st_uid))
else:
    note("socket mode %o, owner root" % mode)
pid = os.fork()
if pid == 0:
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(SOCKET)
        s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n")
        data = s.recv(100)
        os._exit(10 if data.startswith(b"HTTP/1.1 200") else 11)
    except PermissionError:
        os._exit(0)
    except OSError:
        os._exit(12)
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
if code == 10:
    escaped("uid 65534 listed the sandboxes")
elif code == 0:
    note("uid 65534: EACCES on connect")
else:
    note("uid 65534 could not talk to the API (exit %d)" % code)
finish()
