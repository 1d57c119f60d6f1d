"""Keeps reading (and writing) through API streams opened with a token that is then revoked:
an audit log followed with `?follow=true`, an exec's output stream, a large file download read
slowly, and a file upload sent slowly. Revoking a token is how an operator cuts off a leaked
credential; a stream opened before the revocation that keeps delivering new audit events,
command output or file bytes, or keeps taking upload bytes, outlives it indefinitely.
Blocked by: every long-lived stream re-checks its caller's token (at most a second apart, and
before each write; src/api/auth.h StreamAuth) and ends once the token is revoked or expired:
the audit stream and the exec stream end with an error line (the exec's process tree is
killed), the download is cut short, the upload is refused with 401.
space-attack: sandbox=host timeout=120
"""
import json
import os
import socket
import time

from hostside import SANDBOX, SOCKET, api, daemon_healthy, escaped, finish, note, sh_ok

GRACE = 2.5  # seconds a stream may run on after the revocation (the check is every second)


class Stream:
    """A raw HTTP/1.1 exchange on the API socket whose chunked response is read as it comes."""

    def __init__(self, method, path, token, body=None, chunked_body=False, extra=""):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(SOCKET)
        head = "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s" % (
            method, path, token, extra)
        if chunked_body:
            head += "Transfer-Encoding: chunked\r\n"
        elif body is not None:
            head += "Content-Length: %d\r\n" % len(body)
        self.s.sendall(head.encode() + b"\r\n" + (body or b""))
        self.raw = b""
        self.status = None
        self.data = b""  # the decoded body so far
        self.ended = None  # "final chunk", "closed" once the response is over

    def _recv(self, timeout):
        self.s.settimeout(max(timeout, 0.01))
        try:
            d = self.s.recv(1 << 20)
        except socket.timeout:
            return True
        except OSError:
            d = b""
        if not d:
            self.ended = self.ended or "closed"
            return False
        self.raw += d
        return True

    def head(self, timeout=30):
        end = time.time() + timeout
        while b"\r\n\r\n" not in self.raw and time.time() < end and not self.ended:
            self._recv(end - time.time())
        if b"\r\n\r\n" not in self.raw:
            return None
        h, self.raw = self.raw.split(b"\r\n\r\n", 1)
        self.status = int(h.split(b" ")[1])
        self.chunked = b"transfer-encoding: chunked" in h.lower()
        return self.status

    def _decode(self):
        while self.chunked and not self.ended:
            nl = self.raw.find(b"\r\n")
            if nl < 0:
                return
            size = int(self.raw[:nl].split(b";")[0], 16)
            if size == 0:
                self.ended = "final chunk"
                return
            if len(self.raw) < nl + 2 + size + 2:
                return
            self.data += self.raw[nl + 2:nl + 2 + size]
            self.raw = self.raw[nl + 2 + size + 2:]
        if not self.chunked:
            self.data += self.raw
            self.raw = b""

    def read_for(self, seconds, until=None):
        """Reads for `seconds` (or until the response ends, or `until(self)` holds)."""
        end = time.time() + seconds
        while not self.ended and time.time() < end:
            if not self._recv(min(0.2, end - time.time())):
                break
            self._decode()
            if until and until(self):
                break
        self._decode()

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except OSError:
            return False

    def close(self):
        self.s.close()


def mint(name, ops):
    r = api("POST", "/v1/tokens", {"name": name, "profiles": ["*"], "ops": ops, "ttl": "10m"})
    if r.status != 201:
        print("ERROR: root could not mint a token: %d %s" % (r.status, r.body[:200]))
        raise SystemExit(2)
    return r.json["token"], r.json["id"]


def revoke(tid):
    r = api("DELETE", "/v1/tokens/" + tid)
    if r.status != 204:
        print("ERROR: revoking %s answered %d" % (tid, r.status))
        raise SystemExit(2)
    return time.time()


def lines(data):
    out = []
    for l in data.split(b"\n"):
        if l.strip():
            try:
                out.append(json.loads(l))
            except ValueError:
                out.append({"unparsed": l[:80].decode("latin-1")})
    return out


made = []

# --- 1. the audit log, followed ---------------------------------------------------------------
tok, tid = mint("sec-stream-audit", ["read"])
made.append(tid)
log = api("GET", "/v1/sandboxes/%s/audit" % SANDBOX).json or {}
last = max([e.get("seq", 0) for e in log.get("events", [])] or [0])
st = Stream("GET", "/v1/sandboxes/%s/audit?follow=true&after=%d" % (SANDBOX, last), tok)
if st.head() != 200:
    print("ERROR: the audit stream answered %s" % st.status)
    raise SystemExit(2)
sh_ok(SANDBOX, "true")  # an event the stream must deliver while the token is valid
st.read_for(5, until=lambda s: any("seq" in e for e in lines(s.data)))
before = len([e for e in lines(st.data) if "seq" in e])
revoked_at = revoke(tid)
st.read_for(GRACE)
cut = len(st.data)
sh_ok(SANDBOX, "true")  # events made after the grace must not reach the revoked stream
st.read_for(3)
after = [e for e in lines(st.data[cut:]) if "seq" in e]
note("audit: %d events before the revocation, %d after; stream %s" %
     (before, len(after), st.ended or "still open"))
if before == 0:
    print("ERROR: the audit stream delivered nothing while its token was valid")
    raise SystemExit(2)
if after:
    escaped("the audit stream kept delivering events %.1f s after its token was revoked" %
            (time.time() - revoked_at))
elif not st.ended:
    escaped("the audit stream is still open %.1f s after its token was revoked" %
            (time.time() - revoked_at))
st.close()

# --- 2. an exec's output ----------------------------------------------------------------------
tok, tid = mint("sec-stream-exec", ["read", "exec"])
made.append(tid)
marker = "sec-revoked-stream-%d" % os.getpid()
body = json.dumps({"cmd": ["sh", "-c", "i=0; while [ $i -lt 900 ]; do echo tick $i; "
                           "i=$((i+1)); sleep 0.1; done", marker], "timeout": 120}).encode()
st = Stream("POST", "/v1/sandboxes/%s/exec" % SANDBOX, tok, body,
            extra="Content-Type: application/json\r\n")
if st.head() != 200:
    print("ERROR: the exec answered %s" % st.status)
    raise SystemExit(2)
st.read_for(10, until=lambda s: any(e.get("type") == "stdout" for e in lines(s.data)))
revoked_at = revoke(tid)
st.read_for(GRACE)
cut = len(st.data)
st.read_for(2)
late = [e for e in lines(st.data[cut:]) if e.get("type") == "stdout"]

def still_running():
    procs = api("GET", "/v1/sandboxes/%s/processes" % SANDBOX).json or {}
    return [p for p in procs.get("processes", []) if marker in " ".join(p.get("argv") or [])]


running = still_running()
deadline = time.time() + 2  # the kill takes a moment to reach the agent
while running and time.time() < deadline:
    time.sleep(0.2)
    running = still_running()
note("exec: %d output events after the grace, stream %s, process %s" %
     (len(late), st.ended or "still open", "running" if running else "gone"))
if late:
    escaped("the exec stream kept delivering output after its token was revoked")
elif not st.ended:
    escaped("the exec stream is still open %.1f s after its token was revoked" %
            (time.time() - revoked_at))
if running:
    escaped("the exec's process still runs after its token was revoked and its stream ended")
    for p in running:
        api("DELETE", "/v1/sandboxes/%s/processes/%d?signal=9" % (SANDBOX, p["pid"]))
st.close()

# --- 3. a download, read slowly ---------------------------------------------------------------
SIZE = 256 << 20
big = "/tmp/sec-revoked-stream-%d" % os.getpid()
sh_ok(SANDBOX, "python3 -c \"open('%s','wb').truncate(%d)\"" % (big, SIZE))
tok, tid = mint("sec-stream-files", ["read", "files"])
made.append(tid)
st = Stream("GET", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, big), tok)
if st.head() != 200:
    print("ERROR: the download answered %s" % st.status)
    raise SystemExit(2)
st.read_for(5, until=lambda s: len(s.data) >= (1 << 20))
revoked_at = revoke(tid)
time.sleep(GRACE)  # the daemon's writes are blocked on a full socket meanwhile
cut = len(st.data)
st.read_for(8)
late = len(st.data) - cut
note("download: %d MiB before the revocation, %d MiB after, of %d; stream %s" %
     (cut >> 20, late >> 20, SIZE >> 20, st.ended or "still open"))
if len(st.data) >= SIZE or late > (32 << 20):
    escaped("the download went on for %d MiB after its token was revoked" % (late >> 20))
elif not st.ended:
    escaped("the download is still open %.1f s after its token was revoked" %
            (time.time() - revoked_at))
st.close()

# --- 4. an upload, sent slowly ----------------------------------------------------------------
tok, tid = mint("sec-stream-upload", ["read", "files"])
made.append(tid)
up = big + ".up"
st = Stream("PUT", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, up), tok, chunked_body=True,
            extra="Content-Type: application/octet-stream\r\n")
chunk = b"u" * 4096
st.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
time.sleep(0.5)
revoked_at = revoke(tid)
sent_after = 0
end = time.time() + GRACE + 1
while time.time() < end and st.send(b"%x\r\n%s\r\n" % (len(chunk), chunk)):
    sent_after += len(chunk)
    time.sleep(0.05)
st.send(b"0\r\n\r\n")
status = st.head(10)
note("upload: %d KiB sent after the revocation, answer %s" % (sent_after >> 10, status))
if status is not None and 200 <= status < 300:
    escaped("an upload begun before its token was revoked was accepted (%d) after it" % status)
st.close()

sh_ok(SANDBOX, "rm -f %s %s" % (big, up))
for t in made:
    api("DELETE", "/v1/tokens/" + t)
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
