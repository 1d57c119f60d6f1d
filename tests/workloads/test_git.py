"""git through the gateway, as agents run it (issue 24): `git clone` and `git push` over HTTPS
against a smart-HTTP server (git http-backend, tests/workloads/git_server.py) that requires a
token, with the sandbox holding only a placeholder (`--secret GIT_TOKEN`):
- the token in the URL (`https://x-access-token:$GIT_TOKEN@host/repo.git`): git sends it as
  `Authorization: Basic base64(user:placeholder)`; the gateway decodes it, puts the real token in
  and encodes it again;
- a credential helper (`credential.helper store` with the placeholder in ~/.git-credentials): the
  server's 401 makes git ask the helper, then the same Basic credential;
- the token in a header (`http.extraHeader="Authorization: Bearer $GIT_TOKEN"`).
A push to a host the secret is not bound to (mirror.example.test, same server) gets no
credential: the server sees the placeholder only and answers 401, the push fails. The real token
is searched for inside the sandbox (environment, files under /, every /proc/*/environ and
cmdline), in a snapshot's stored chunks and in the audit log read through the API: it is in none
of them. Every "internet" host is the local server on 127.0.0.2 behind the gateway's `resolve`
overrides, over HTTPS with the test CA of tests/integration/egress_upstream.py.
"""

import base64
import glob
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import harness  # noqa: E402
from egress_upstream import make_test_ca  # noqa: E402
from git_server import HOST, GitServer, make_repo  # noqa: E402

SECRET = "ghp_Wrkld0adT0ken7Q2x9ZpL4mN8vB1cR6sT"
GIT_ENV = ("export HOME=/tmp/home GIT_TERMINAL_PROMPT=0; mkdir -p $HOME; "
           "git config --global user.name agent; git config --global user.email a@example.test; ")


class GitWorkloadTest(harness.SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        certs = make_test_ca(cls.tmp)
        cls.repos = os.path.join(cls.tmp, "repos")
        os.makedirs(cls.repos)
        for name in ("url.git", "helper.git", "header.git", "mirror.git"):
            make_repo(cls.repos, name)
        cls.server = GitServer(cls.repos, certs["cert"], certs["key"], token=SECRET).start()
        target = "%s:%d" % (HOST, cls.server.port)
        return {
            "profiles": {"test": {"egress": {
                "allow": ["git.example.test", "mirror.example.test"],
                "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {"GIT_TOKEN": {"value": SECRET, "hosts": ["git.example.test"],
                                      "profiles": ["test"]}},
            "gateway": {"resolve": {"git.example.test:443": target,
                                    "mirror.example.test:443": target},
                        "upstream_ca_files": [certs["ca"]],
                        # Tunneled TLS (mirror.example.test) is the server's own.
                        "sandbox_ca_files": [certs["ca"]]},
        }

    @classmethod
    def prepare_class(cls):
        cls.sid = cls.create_for_class("--secret", "GIT_TOKEN")

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.server.stop()

    def sh(self, script, timeout=180):
        return self.space("exec", self.sid, "--", "sh", "-c", GIT_ENV + script, timeout=timeout)

    def sh_ok(self, script, timeout=180):
        rc, out, err = self.sh(script, timeout)
        self.assertEqual(rc, 0, "in sandbox: %s\nrc %d\nstdout: %s\nstderr: %s" %
                         (script, rc, out[-3000:], err[-3000:]))
        return out

    def placeholder(self):
        return self.inspect(self.sid)["env"]["GIT_TOKEN"]

    def head_subject(self, repo):
        return subprocess.run(["git", "--git-dir", os.path.join(self.repos, repo), "log", "-1",
                               "--format=%s", "main"], capture_output=True, text=True,
                              check=True).stdout.strip()

    def basic_creds(self, host):
        """The decoded user:password of every Basic credential the server got for `host`."""
        out = []
        for h, auth in self.server.auth_seen():
            if h == host and auth and auth.startswith("Basic "):
                out.append(base64.b64decode(auth[6:]).decode())
        return out

    def clone_commit_push(self, url, repo, extra=""):
        """Clones `url`, commits a file named after `repo`, pushes: the commit must arrive."""
        msg = "pushed-%s-%s" % (repo, os.urandom(4).hex())
        self.sh_ok("cd /tmp && rm -rf w-{r} && git {x} clone -q {u} w-{r} && cd w-{r} && "
                   "cat README && echo {m} > {r}.txt && git add {r}.txt && "
                   "git commit -q -m {m} && git {x} push -q origin HEAD:main"
                   .format(r=repo, u=url, x=extra, m=msg))
        self.assertEqual(self.head_subject(repo + ".git"), msg)

    def test_1_token_in_url(self):
        self.clone_commit_push('"https://x-access-token:$GIT_TOKEN@git.example.test/url.git"',
                               "url")
        creds = self.basic_creds("git.example.test")
        self.assertIn("x-access-token:" + SECRET, creds)
        self.assertFalse([c for c in creds if self.placeholder() in c])

    def test_2_credential_helper(self):
        # The placeholder in git's store helper; the URL has no credential, so the server's 401
        # makes git ask the helper.
        self.sh_ok("printf 'https://x-access-token:%s@git.example.test\\n' \"$GIT_TOKEN\" "
                   "> $HOME/.git-credentials && chmod 600 $HOME/.git-credentials")
        before = len(self.server.auth_seen())
        self.clone_commit_push("https://git.example.test/helper.git", "helper",
                               extra="-c credential.helper=store")
        seen = self.server.auth_seen()[before:]
        self.assertIn(("git.example.test", None), seen)  # asked first without, got the 401
        self.assertIn("x-access-token:" + SECRET, self.basic_creds("git.example.test"))

    def test_3_token_in_header(self):
        self.clone_commit_push("https://git.example.test/header.git", "header",
                               extra='-c http.extraHeader="Authorization: Bearer $GIT_TOKEN"')
        got = [a for h, a in self.server.auth_seen() if h == "git.example.test" and a]
        self.assertIn("Bearer " + SECRET, got)

    def test_4_host_not_bound_gets_no_credential(self):
        before = len(self.server.auth_seen())
        ph = self.placeholder()
        for url, extra in [
                ('"https://x-access-token:$GIT_TOKEN@mirror.example.test/mirror.git"', ""),
                ("https://mirror.example.test/mirror.git",
                 '-c http.extraHeader="Authorization: Bearer $GIT_TOKEN"')]:
            rc, out, err = self.sh(
                "cd /tmp && rm -rf m && mkdir m && cd m && git init -q -b main && "
                "echo x > f && git add f && git commit -q -m evil && "
                "git {x} push {u} HEAD:main".format(u=url, x=extra))
            self.assertNotEqual(rc, 0, out)
            # 401: with the URL's credential git gives up; with only the header it asks for a
            # username, which it may not (GIT_TERMINAL_PROMPT=0).
            self.assertRegex(err, r"401|Authentication failed|403|could not read Username")
        seen = self.server.auth_seen()[before:]
        mirror = [a for h, a in seen if h == "mirror.example.test"]
        self.assertTrue(mirror, seen)
        self.assertFalse([a for a in mirror if a and SECRET in a])
        self.assertIn("x-access-token:" + ph, self.basic_creds("mirror.example.test"))
        self.assertIn("Bearer " + ph, mirror)
        self.assertEqual(self.head_subject("mirror.git"), "first")

    def test_5_no_trace_of_the_token(self):
        # git with the placeholder in its config, credentials and a process still running.
        self.sh_ok("git config --global credential.helper store && "
                   "printf 'https://x-access-token:%s@git.example.test\\n' \"$GIT_TOKEN\" "
                   "> $HOME/.git-credentials && cd /tmp && rm -rf t && "
                   "git clone -q https://git.example.test/url.git t && "
                   "(sleep 120 >/dev/null 2>&1 &) && "
                   "git -C t remote set-url origin "
                   "\"https://x-access-token:$GIT_TOKEN@git.example.test/url.git\"")
        needle = SECRET[:16]
        out = self.sh_ok("env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null "
                         "| tr '\\0' '\\n'; grep -rIl -e '%s''%s' / --exclude-dir=proc "
                         "--exclude-dir=sys --exclude-dir=dev --exclude-dir=usr 2>/dev/null; "
                         "grep -c '%s' $HOME/.git-credentials /tmp/t/.git/config; true"
                         % (needle[:8], needle[8:], self.placeholder()))
        self.assertNotIn(needle, out)
        # The search can see what is there: the placeholder is in both files.
        self.assertIn(".git-credentials:1", out)
        self.assertIn("/tmp/t/.git/config:1", out)
        # A snapshot's stored chunks (zstd frames): the placeholder is in them, the token not.
        self.space_ok("snapshot", self.sid, "--json")
        chunks = [p for p in glob.glob(os.path.join(self.daemon.state_dir, "snapshots", "**"),
                                       recursive=True) if os.path.isfile(p)]
        self.assertTrue(chunks)
        data = b""
        for p in chunks:
            with open(p, "rb") as f:
                raw = f.read()
            data += raw
            z = subprocess.run(["zstd", "-dc", "-q", p], capture_output=True)
            data += z.stdout
        self.assertIn(self.placeholder().encode(), data)
        self.assertNotIn(SECRET.encode(), data)
        # The audit log through the API, which records every request and credential use.
        r = self.api("GET", "/v1/sandboxes/%s/audit" % self.sid)
        self.assertEqual(r.status, 200, r)
        self.assertIn(b"credential.use", r.body)
        self.assertNotIn(SECRET.encode(), r.body)


if __name__ == "__main__":
    harness.main()
