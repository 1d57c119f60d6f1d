"""Checks what an exec's environment carries: nothing of the daemon's own environment (the
runner starts spaced with extra variables, among them SPACE_TEST_SECRET=SPCANARY_..., and
ctest's SPACE_BUILD_DIR) and nothing of the host session (SSH_*, SUDO_*, XDG_*, DBUS_*,
INVOCATION_ID...). Only the sandbox's defaults and what the request passed are allowed.
Blocked by: the daemon builds each exec's environment from the sandbox's spec (its defaults
and the gateway's proxy and trust-store variables) and the request, never from its own.
space-attack: sandbox=shared
"""
import os

passed = set(os.environ.get("SPACE_ATTACK_ENV_NAMES", "").split(","))
# The egress gateway's variables (docs/egress.md): the proxy, and the trust store holding the
# sandbox's own CA. Granted secrets would add placeholders; this sandbox has none.
gateway = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE",
           "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
           "PIP_CERT", "NPM_CONFIG_CAFILE"}
allowed = {"PATH", "HOME", "HOSTNAME", "LANG", "PWD", "TERM", "SHLVL", "_", "OLDPWD",
           "SPACE_SANDBOX_ID", "LC_CTYPE"} | gateway | {v.lower() for v in gateway
                                                        if v.endswith("PROXY")} | passed
bad = []
for k, v in os.environ.items():
    if "SPCANARY" in v or "SPCANARY" in k:
        bad.append("%s holds the daemon's canary" % k)
    elif k not in allowed:
        bad.append("unexpected variable %s" % k)
if bad:
    print("ESCAPED: " + "; ".join(bad))
    raise SystemExit(1)
print("BLOCKED: environment holds only %s" % ",".join(sorted(k for k in os.environ
                                                              if k not in passed)))
