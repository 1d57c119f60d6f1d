"""Crashes the daemon's request parsing with malformed and hostile JSON: truncated documents,
wrong types for every field, numbers beyond 64 bits, NaN/Infinity, invalid UTF-8, lone
surrogates, duplicate keys, 100000-deep nesting, a 1 MiB string key, and non-object tops.
Each malformed request must get a 4xx with an error object; requests that are valid but
extreme (tiny CPU shares, huge limits) may succeed but never with a 5xx; the daemon must stay
healthy.
Blocked by: nlohmann's parser without exceptions escaping, a depth check before parsing, and
typed field validation (src/api/request.cc).
space-attack: sandbox=host
"""
from hostside import SANDBOX, api, daemon_healthy, escaped, finish, is_client_error, note

bodies = [b"", b"{", b"}", b"null", b"[]", b'"x"', b"1e999999", b'{"memory":',
          b'{"memory": NaN}', b'{"memory": Infinity}', b'{"memory": -1}',
          b'{"memory": 1e400}', b'{"memory": 18446744073709551616}', b'{"pids": 1.5}',
          b'{"pids": -9223372036854775808}', b'{"pids": 99999999999999999999}',
          b'{"cpus": "NaN"}', b'{"cpus": 1e-320}', b'{"timeout": -0.0}', b'{"timeout": "1e999s"}',
          b'{"env": {"A": 1}}', b'{"env": ["A=1"]}', b'{"env": {"": "x"}}', b'{"env": {"A=B": "x"}}',
          b'{"image": "../../etc"}', b'{"image": "x/../../y"}', b'{"workdir": "relative"}',
          b'{"workdir": "/\\u0000x"}', b'{"runtime": "linux\\u0000"}', b'{"memory": "1E"}',
          b'{"memory": "99999999999999999999P"}', b'{"memory": "0x10M"}',
          b'{"a": 1, "a": 2}', b'{"\xff\xfe": 1}', b'{"x": "\xc0\xaf"}', b'{"x": "\\ud800"}',
          b"[" * 100000 + b"]" * 100000, b'{"a":' * 50000 + b"1" + b"}" * 50000,
          b'{"' + b"k" * (1 << 20) + b'": 1}', b'{"secrets": [null]}', b'{"allow": ["a b"]}']
exec_bodies = [b'{"cmd": []}', b'{"cmd": [""]}', b'{"cmd": "ls"}', b'{"cmd": [1]}',
               b'{"cmd": ["a\\u0000b"]}', b'{"cmd": ["ls"], "env": {"A\\u0000": "x"}}',
               b'{"cmd": ["ls"], "cwd": "tmp"}', b'{"cmd": ["ls"], "detach": "yes"}',
               b'{"cmd": ["ls"], "timeout": 0}', b'{"cmd": ["ls"], "detach": true, "stdin": true}',
               b'{"cmd": ["ls"]', b"[" * 70 + b"]" * 70, b'{"cmd": ["ls"], "uid": 0}']
# Valid JSON with legal-but-extreme values: any answer except a 5xx (a created sandbox is
# removed at once).
extreme = {b"", b'{"cpus": 1e-320}', b'{"memory": "1E"}', b'{"a": 1, "a": 2}',
           b'{"memory": "99999999999999999999P"}', b'{"timeout": "1e999s"}'}
for b in bodies:
    r = api("POST", "/v1/sandboxes", b, {"Content-Type": "application/json"})
    if r.status in (200, 201):
        sid = (r.json or {}).get("id")
        if sid:
            api("DELETE", "/v1/sandboxes/%s?force=true" % sid)
    if b in extreme:
        if r.status >= 500:
            escaped("create body %r -> %d %r" % (b[:40], r.status, r.body[:80]))
        elif r.status < 300:
            note("valid extreme %r accepted" % b[:24])
        continue
    if not (is_client_error(r) or r.status == 413):
        escaped("create body %r -> %d %r" % (b[:40], r.status, r.body[:80]))
for b in exec_bodies:
    r = api("POST", "/v1/sandboxes/%s/exec" % SANDBOX, b, {"Content-Type": "application/json"})
    if not is_client_error(r):
        escaped("exec body %r -> %d %r" % (b[:40], r.status, r.body[:80]))
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
note("%d create and %d exec bodies, each answered with a 4xx error object" % (
    len(bodies), len(exec_bodies)))
finish()
