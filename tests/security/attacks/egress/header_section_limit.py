"""Gets a request head far over the gateway's 16 KiB limit forwarded by making it of many short
header lines (10000 x "X-A: b", 80 KiB, after one field whose length shifts where the parser's
16 KiB windows fall), sent in one write, and again in pieces of a few sizes (so the gateway's
reads split it differently: through a microVM's relay one alignment got through), through the
proxy and the transparent HTTP listener. The
limit exists to bound what one connection makes the daemon hold and what it sends upstream;
each line alone is tiny. The gateway's own 400 or 431 is the only acceptable answer; a 502
("sending the request upstream failed") or the upstream's own 431 means the head went upstream.
Blocked when: every head over 16 KiB is refused whatever its lines' lengths — Beast 1.74's
header_limit bounds a parse window, not the head (fields consumed in one window do not count
against the next), so the gateway must also check the head's total size (read_header's byte
count, and the size of what it parsed).
space-attack: sandbox=fresh timeout=30
"""
import socket
import time

escapes, notes = [], []


def exchange(data, port, piece=0):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = b""
    try:
        if piece:
            for i in range(0, len(data), piece):
                s.sendall(data[i:i + piece])
                time.sleep(0.002)  # one read each, as far as the gateway can tell
        else:
            s.sendall(data)
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    s.close()
    return out


for port, start in [(3128, b"GET http://plain.example.test/echo HTTP/1.1\r\n"),
                    (80, b"GET /echo HTTP/1.1\r\n")]:
    # The first field's length: 8 alignments of the 8-byte lines, in one write; then a few of
    # them in pieces.
    for pad, piece in [(p, 0) for p in range(16, 26)] + [(p, n) for p in (16, 21, 24, 25)
                                                          for n in (997, 16411, 65536)]:
        first = b"X-F: " + b"a" * (pad - 7) + b"\r\n"
        head = (start + b"Host: plain.example.test\r\nConnection: close\r\n" + first +
                b"X-A: b\r\n" * 10000 + b"\r\n")
        out = exchange(head, port, piece)
        status = out.split(b"\r\n", 1)[0].decode("latin-1")
        # The gateway's own refusal (its body starts "SPACE egress gateway:"), not a relayed
        # answer and not its 502 for a request that already went upstream.
        own = b"SPACE egress gateway: " in out and b"sending the request upstream" not in out
        if own and status[9:12] in ("400", "431"):
            notes.append("%d/%d/%d: %s" % (port, pad, piece, status[9:12]))
        elif not out:
            # The head can still be arriving when the gateway refuses it and closes (sent in
            # pieces, or carried by a microVM's relay): its answer is then lost to the reset. A
            # forwarded head gets an answer, the upstream's or the gateway's 502.
            notes.append("%d/%d/%d: reset" % (port, pad, piece))
        else:
            escapes.append("a %d KiB head of short lines (first field %d bytes, pieces of %d) "
                           "on :%d was forwarded: %s" % (len(head) >> 10, pad, piece, port,
                                              out.split(b"\r\n\r\n", 1)[-1][:70]
                                              .decode("latin-1").strip() or status))
if escapes:
    print("ESCAPED: %d of %d heads went upstream: %s" % (len(escapes), len(escapes) + len(notes),
                                                           "; ".join(escapes[:3])))
    raise SystemExit(1)
print("BLOCKED: every 80 KiB head refused (%s)" % ", ".join(notes))
