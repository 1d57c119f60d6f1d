"""Reads and writes host files through the file API with traversal in the path parameter:
"/../../..<host canary>", percent-encoded dots and slashes, backslashes, NUL bytes, relative
paths, overlong UTF-8 dots, and "/proc/1/root/..". A 4xx, or a file of the sandbox itself, is
fine; the host canary's content or a write landing on the host is an escape.
Blocked by: the agent resolves every path inside the sandbox's root (openat2 RESOLVE_IN_ROOT)
in the sandbox's own mount namespace; the API refuses relative paths and NUL bytes.
space-attack: sandbox=host
"""
import urllib.parse

from hostside import (CANARY, CANARY_VALUE, SANDBOX, api, escaped, finish, host_canary_intact,
                      is_client_error, note)

raw_paths = [
    "/../../../../../.." + CANARY,
    "/.." * 40 + CANARY,
    CANARY,
    "/proc/1/root" + CANARY,
    "/proc/self/root/../../.." + CANARY,
    "/proc/self/cwd/../../.." + CANARY,
]
encoded = [
    "%2F..%2F..%2F..%2F..%2F.." + urllib.parse.quote(CANARY, safe=""),
    "/%2e%2e/%2e%2e/%2e%2e" + CANARY,
    "/%c0%ae%c0%ae/%c0%ae%c0%ae" + CANARY,
    "/..%5c..%5c..%5c" + CANARY.replace("/", "%5c"),
    "etc/passwd",
    "../../../../etc/passwd",
    "/etc/passwd%00.txt",
    "",
]
results = {}
for p in raw_paths:
    q = urllib.parse.quote(p, safe="/")
    for method in ("GET", "PUT"):
        body = b"PWNED" if method == "PUT" else None
        hdr = {"Content-Type": "application/octet-stream"} if body else None
        r = api(method, "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, q), body, hdr)
        if CANARY_VALUE.encode() in r.body:
            escaped("%s %s returned the host canary" % (method, p[:60]))
        results.setdefault(r.status, 0)
        results[r.status] += 1
for q in encoded:
    for method in ("GET", "PUT", "DELETE"):
        body = b"PWNED" if method == "PUT" else None
        hdr = {"Content-Type": "application/octet-stream"} if body else None
        r = api(method, "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, q), body, hdr)
        if CANARY_VALUE.encode() in r.body:
            escaped("%s %s returned the host canary" % (method, q[:60]))
        if q in ("etc/passwd", "../../../../etc/passwd", "") and not is_client_error(r):
            escaped("relative path %r accepted: %d" % (q, r.status))
        results.setdefault(r.status, 0)
        results[r.status] += 1
if not host_canary_intact():
    escaped("the host canary changed")
# Whatever a PUT wrote must be inside the sandbox: the path the traversal named, seen from the
# sandbox, holds the write; the host's does not.
r = api("GET", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, urllib.parse.quote(CANARY)))
note("statuses %s; the traversal target inside the sandbox is %d" % (
    dict(sorted(results.items())), r.status))
if r.status == 200 and r.body != b"PWNED":
    escaped("GET of the canary path returned something else than the sandbox's own write")
finish()
