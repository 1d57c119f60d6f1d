"""A hostile upstream bound to API_TOKEN (api.example.test/hostile/<form>) echoes the injected
Authorization back in every form substring masking could miss: in the status line's reason
phrase; in a header *name* (PATH_TOKEN, whose value is a valid field name, through
/bound/hostile/); gzip-compressed although the gateway asked for identity;
JSON-escaped with "\\/"; percent-encoded; base64 at all three alignments; hex; as byte ranges
(the sandbox asks for 8 bytes at a time and reassembles them); and as a 206 partial answer
sent without being asked. Each answer is decoded every way the sandbox could (gunzip, JSON,
percent-decoding, base64, hex) and searched for the secret.
Blocked when: the reason phrase is replaced by the standard one; header names and values are
masked; the gateway drops Range (and If-Range) from requests to hosts a granted secret is bound
to and refuses, with a 502 saying why, a compressed or partial response from them; the masker
knows the JSON, percent, base64 and hex forms of every value. A hostile upstream can still
encode a value in ways no mask knows (XOR, a cipher): docs/threat-model.md says so.
space-attack: sandbox=fresh opts=--secret,API_TOKEN,--secret,PATH_TOKEN timeout=60
"""
import base64
import gzip
import json
import os
import urllib.parse

import requests

PH = os.environ.get("API_TOKEN", "")
PREFIX = os.environ["SPACE_EGRESS_SECRET_PREFIX"]
LEN = int(os.environ["SPACE_EGRESS_SECRET_LEN"])
escapes, notes = [], []
s = requests.Session()
auth = {"Authorization": "Bearer " + PH}


def decodings(raw):
    """Every reading of `raw` (bytes) the sandbox could make."""
    out = [raw]
    try:
        out.append(gzip.decompress(raw))
    except Exception:
        pass
    text = raw.decode("latin-1")
    try:
        out.append(json.dumps(json.loads(text)).encode())
        out.append(str(json.loads(text)).encode())
    except Exception:
        pass
    out.append(urllib.parse.unquote_to_bytes(text))
    for line in text.split("\n"):
        for fix in ("", "=", "=="):
            try:
                out.append(base64.b64decode(line.strip().replace("*", "A") + fix))
            except Exception:
                pass
        try:
            out.append(bytes.fromhex(line.strip()))
        except ValueError:
            pass
    return out


def inspect(what, raw):
    for d in decodings(raw):
        if PREFIX.encode() in d:
            i = d.index(PREFIX.encode())
            escapes.append("%s: the secret is readable: %r" % (what, d[max(0, i - 20):i + 50]))
            return False
    return True


def get(form, **kw):
    prefix, hdrs = "/hostile/", dict(auth)
    if form == "header-name":
        prefix, hdrs = "/bound/hostile/", {"Authorization": "Bearer " + os.environ["PATH_TOKEN"]}
    hdrs.update(kw.pop("h", {}))
    r = s.get("https://api.example.test" + prefix + form, headers=hdrs, timeout=15, stream=True)
    body = r.raw.read(decode_content=False)
    head = "%d %s\n" % (r.status_code, r.reason) + "".join(
        "%s: %s\n" % (k, v) for k, v in r.raw.headers.items())
    return r, head.encode() + b"\n" + body


for form in ("reason", "header-name", "json", "pct", "b64", "hex"):
    r, raw = get(form)
    if r.status_code != 200:
        print("ERROR: /hostile/%s answered %d: %r" % (form, r.status_code, raw[:200]))
        raise SystemExit(2)
    if inspect(form, raw):
        notes.append("%s masked" % form)

r, raw = get("gzip", h={"Accept-Encoding": "gzip"})
if r.status_code == 502:
    notes.append("gzip refused (502)")
inspect("gzip (%d)" % r.status_code, raw)
r, raw = get("partial")
if r.status_code == 502:
    notes.append("unasked 206 refused (502)")
inspect("partial (%d)" % r.status_code, raw)

# Ranges of 8 bytes, reassembled.
pieces, whole_seen = b"", False
for start in range(0, len("auth=Bearer ") + LEN + 8, 8):
    r, raw = get("range", h={"Range": "bytes=%d-%d" % (start, start + 7)})
    body = raw.split(b"\n\n", 1)[1]
    if r.status_code == 200:
        whole_seen = True
    inspect("range %d (%d)" % (start, r.status_code), raw)
    pieces += body[:8] if r.status_code == 206 else b""
inspect("reassembled ranges", pieces)
if whole_seen:
    notes.append("Range dropped: whole masked bodies came back")

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
