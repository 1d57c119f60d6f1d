"""Escapes the sandbox id segment of the URL to reach other routes, other sandboxes or host
paths: "..", "%2e%2e", "%2F", ids with slashes and NULs, absurdly long ids, ids that look like
paths of the state directory ("../../etc"), and Unicode look-alikes.
Blocked by: parse_target rejects ".", ".." and segments decoding to '/' or NUL;
check_sandbox_id allows only [A-Za-z0-9][A-Za-z0-9_.-]{0,127}; unknown ids are 404.
space-attack: sandbox=host
"""
from hostside import SANDBOX, VICTIM, api, daemon_healthy, escaped, finish, note

ids = ["..", "%2e%2e", ".%2e", "..%2F..%2Fetc", "%2F", "sb_x%00", "sb_x%2Fexec", "a" * 5000,
       "../" + VICTIM, "%2e%2e%2f" + VICTIM, SANDBOX + "%2F..%2F" + VICTIM, "%C0%AE%C0%AE",
       "sb_%E2%80%AE", "-rf", ".hidden", "sb_x;id", "sb_x%0d%0aX-Injected:%201"]
statuses = {}
for sid in ids:
    for method, suffix, body in (("GET", "", None), ("DELETE", "", None),
                                 ("POST", "/exec", {"cmd": ["id"]}),
                                 ("GET", "/files?path=/etc/hostname", None)):
        r = api(method, "/v1/sandboxes/%s%s" % (sid, suffix), body)
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if r.status < 400 or r.status >= 500:
            escaped("%s /v1/sandboxes/%s%s answered %d" % (method, sid[:40], suffix, r.status))
        if "X-Injected" in str(r.headers):
            escaped("header injection through the id")
for path in ("/v1/sandboxes/../images", "/v1/%2e%2e/v1/health", "/v1/sandboxes/" + SANDBOX +
             "/../" + VICTIM + "/exec"):
    r = api("POST" if path.endswith("exec") else "GET", path, {"cmd": ["id"]})
    statuses[r.status] = statuses.get(r.status, 0) + 1
    if r.status < 400:
        escaped("%s answered %d" % (path, r.status))
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
r = api("GET", "/v1/sandboxes/%s" % VICTIM)
if r.status != 200:
    escaped("the victim sandbox is gone (%d)" % r.status)
note("%d hostile ids x 4 routes: statuses %s" % (len(ids), dict(sorted(statuses.items()))))
finish()
