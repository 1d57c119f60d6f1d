"""API tokens (docs/api-auth.md) against the real spaced and space: a token scoped to the test
profile works there and nowhere else (live sandboxes do not exist for it), operations it lacks
are refused with 403, expired, revoked and garbage tokens get 401, the loopback TCP listener
serves nothing without a token, the Unix socket serves only root, and a token's text never
reaches spaced's logs, the audit log or the database."""

import http.client
import json
import os
import socket
import time

from harness import (Daemon, SpaceTestCase, free_port, main, read_text, safe_rmtree,
                     wait_for)

ALL_SANDBOX_OPS = ["read", "create", "exec", "files", "lifecycle"]


def tcp_request(port, method, path, body=None, token=None, timeout=30):
    """One request to the TCP listener: (status, headers, parsed JSON body or raw bytes)."""
    headers = {}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data
        return r.status, dict(r.getheaders()), parsed
    finally:
        conn.close()


class TokensTest(SpaceTestCase):
    API_LISTEN = True
    issued = []  # every token text made in this class, for the never-logged check


    def tearDown(self):
        self.assertTrue(self.daemon.alive(), "spaced died:\n%s" % self.daemon.log_tail())

    # -- helpers ------------------------------------------------------------------------------

    def token(self, profiles=("test",), ops=ALL_SANDBOX_OPS, ttl="1h", name="it"):
        """`space token create` as root; returns (text, id)."""
        args = ["token", "create", "--name", name, "--ttl", ttl]
        for p in profiles:
            args += ["--profile", p]
        for o in ops:
            args += ["--op", o]
        rc, out, err = self.space(*args)
        self.assertEqual(rc, 0, err)
        text = out.strip()
        self.assertRegex(text, r"^spt_[0-9a-f]{12}_[0-9a-f]{64}$")
        self.assertIn("only time", err)
        self.assertNotIn(text, err, "the text goes to stdout only")
        type(self).issued.append(text)
        return text, text[4:16]

    def as_token(self, text, method, path, body=None, headers=None):
        h = dict(headers or {})
        h["Authorization"] = "Bearer " + text
        return self.api(method, path, body, headers=h)

    def space_as(self, text, *args, **kw):
        env = dict(kw.pop("env", {}) or {})
        env["SPACE_TOKEN"] = text
        return self.space(*args, env=env, **kw)

    @staticmethod
    def request_as_nobody(sock_path):
        """GET /v1/sandboxes on a Unix socket from a forked child running as uid/gid 65534;
        returns the raw response (or "ERROR ..." if it could not get one)."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop privileges, ask, write the answer to the pipe, exit
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(10)
                s.connect(sock_path)
                s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                os.write(w, data)
            except BaseException as e:  # noqa: BLE001 - report anything to the parent
                os.write(w, ("ERROR %r" % e).encode())
            finally:
                os._exit(0)
        os.close(w)
        out = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            out += chunk
        os.close(r)
        os.waitpid(pid, 0)
        return out.decode("utf-8", "replace")

    # -- tests --------------------------------------------------------------------------------

    def test_test_token_creates_and_runs_in_test(self):
        text, tid = self.token()
        rc, out, err = self.space_as(text, "create")
        self.assertEqual(rc, 0, err)
        sid = out.strip()
        self.known_ids.add(sid)
        self.addCleanup(self._destroy_quietly, sid)
        self.assertEqual(self.inspect(sid)["profile"], "test")
        rc, out, err = self.space_as(text, "exec", sid, "--", "echo", "hello")
        self.assertEqual((rc, out), (0, "hello\n"), err)
        src = os.path.join(self.tmp, "tok-upload.txt")
        with open(src, "w") as f:
            f.write("payload\n")
        rc, _, err = self.space_as(text, "cp", src, sid + ":/root/up.txt")
        self.assertEqual(rc, 0, err)
        rc, out, err = self.space_as(text, "exec", sid, "--", "cat", "/root/up.txt")
        self.assertEqual(out, "payload\n", err)
        rc, out, _ = self.space_as(text, "ls", "--json")
        self.assertIn(sid, [s["id"] for s in json.loads(out)])

        # The audit log names the token by id on the events its requests caused.
        r = self.api("GET", "/v1/sandboxes/%s/audit" % sid)
        self.assertEqual(r.status, 200, r)
        by_kind = {}
        for ev in r.json["events"]:
            by_kind.setdefault(ev["kind"], []).append(ev)
        self.assertEqual(by_kind["sandbox.create"][0]["data"].get("token"), tid)
        self.assertTrue(all(e["data"].get("token") == tid for e in by_kind["exec.start"]))
        self.assertNotIn(text[17:].encode(), r.body)

        rc, _, err = self.space_as(text, "rm", sid)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.inspect(sid)["state"], "destroyed")

    def test_one_token_cannot_hold_every_connection(self):
        """A token's requests in progress are bounded (64, streams included): its holder cannot
        take all of spaced's connections and threads with followers that never end; other
        tokens and root are served meanwhile."""
        text, tid = self.token()
        other, _ = self.token(name="other")
        sid = self.create()
        r, _ = self.api_exec(sid, ["sleep", "60"], detach=True)
        self.assertEqual(r.status, 202, r)
        pid = r.json["pid"]

        def follow():
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(20)
            s.connect(self.daemon.socket)
            s.sendall(("GET /v1/sandboxes/%s/processes/%d/logs?follow=true HTTP/1.1\r\n"
                       "Host: x\r\nAuthorization: Bearer %s\r\n\r\n" % (sid, pid, text)).encode())
            return s

        followers = []
        try:
            for _ in range(64):
                s = follow()
                followers.append(s)
                self.assertTrue(s.recv(64).startswith(b"HTTP/1.1 200"), "a follower is served")
            s = follow()
            followers.append(s)
            head = s.recv(4096).decode(errors="replace")
            self.assertTrue(head.startswith("HTTP/1.1 429"), head[:200])
            self.assertIn("token %s has 64 requests in progress" % tid, head)
            r = self.as_token(other, "GET", "/v1/sandboxes/%s" % sid)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(self.api("GET", "/v1/sandboxes/%s" % sid).status, 200)
        finally:
            for s in followers:
                s.close()
        # Their requests ended with their connections: the token is served again.
        wait_for(lambda: self.as_token(text, "GET", "/v1/sandboxes/%s" % sid).status == 200,
                 timeout=10, what="the token's followers to end")
        self.space_ok("rm", "--force", sid)

    def test_test_token_cannot_create_in_live(self):
        text, _ = self.token()
        rc, out, err = self.space_as(text, "create", "--profile", "live")
        self._learn_ids(out)
        self.assertEqual(rc, 125, out)
        self.assertIn("may not use profile live", err)
        r = self.as_token(text, "POST", "/v1/sandboxes", {"profile": "live"})
        err = self.assert_api_error(r, 403, 403, code="permission_denied")
        self.assertIn("may not use profile live", err["message"])
        self.assertNotIn("live", [s["profile"] for s in self.api_list("/v1/sandboxes",
                                                                      "sandboxes")])

    def test_live_sandbox_is_invisible_to_a_test_token(self):
        live = self.create("--profile", "live")
        self.exec_ok(live, "sh", "-c", "echo keep > /root/marker")
        text, _ = self.token(ops=ALL_SANDBOX_OPS)
        unknown = "sb_000000000000"
        for method, suffix, body in (("GET", "", None), ("DELETE", "?force=true", None),
                                     ("POST", "/pause", None), ("POST", "/resume", None),
                                     ("GET", "/processes", None), ("GET", "/diff", None),
                                     ("GET", "/files?path=/etc/hostname", None),
                                     ("PUT", "/files?path=/root/x", b"data"),
                                     ("DELETE", "/files?path=/root/marker", None),
                                     ("DELETE", "/processes/1", None),
                                     ("POST", "/exec", {"cmd": ["true"]}),
                                     ("GET", "/audit", None)):
            with self.subTest(method=method, suffix=suffix):
                hidden = self.as_token(text, method, "/v1/sandboxes/%s%s" % (live, suffix), body)
                missing = self.as_token(text, method, "/v1/sandboxes/%s%s" % (unknown, suffix),
                                        body)
                self.assert_api_error(hidden, 404, 404, code="not_found")
                # Exactly what an id that never existed gets: existence does not leak.
                self.assertEqual(hidden.body.replace(live.encode(), b"ID"),
                                 missing.body.replace(unknown.encode(), b"ID"))
        rc, out, err = self.space_as(text, "exec", live, "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn("unknown sandbox", err)
        r = self.as_token(text, "GET", "/v1/sandboxes")
        self.assertEqual(r.status, 200)
        self.assertNotIn(live, [s["id"] for s in r.json["sandboxes"]])
        # Nothing reached it: root still sees it running, its file untouched.
        info = self.inspect(live)
        self.assertEqual((info["state"], info["profile"]), ("running", "live"))
        self.assertEqual(self.exec_ok(live, "cat", "/root/marker"), "keep\n")
        self.assertIn(live, self.list_ids())

    def test_missing_operation_is_403(self):
        text, _ = self.token(ops=["read"])
        sid = self.create()
        self.assertEqual(self.as_token(text, "GET", "/v1/sandboxes/" + sid).status, 200)
        for method, path, body, op in (
                ("POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]}, "exec"),
                ("POST", "/v1/sandboxes", {}, "create"),
                ("DELETE", "/v1/sandboxes/" + sid, None, "lifecycle"),
                ("PUT", "/v1/sandboxes/%s/files?path=/root/x" % sid, b"x", "files"),
                ("PUT", "/v1/images/foo", b"x", "images"),
                ("GET", "/v1/tokens", None, "admin"),
                ("GET", "/metrics", None, "admin")):
            with self.subTest(method=method, path=path):
                r = self.as_token(text, method, path, body)
                err = self.assert_api_error(r, 403, 403, code="permission_denied")
                self.assertIn('"%s"' % op, err["message"])
        rc, _, err = self.space_as(text, "exec", sid, "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn('"exec" operation', err)
        self.assertEqual(self.inspect(sid)["state"], "running")

    def test_expired_token_is_401(self):
        text, tid = self.token(ttl="1s")
        time.sleep(1.5)
        r = self.as_token(text, "GET", "/v1/sandboxes")
        err = self.assert_api_error(r, 401, 401, code="unauthenticated")
        self.assertIn("expired at", err["message"])
        self.assertIn(tid, err["message"])
        self.assertNotIn(text[17:], err["message"])
        self.assertTrue(r.headers.get("WWW-Authenticate", "").startswith("Bearer"), r.headers)
        rc, _, err = self.space_as(text, "ls")
        self.assertEqual(rc, 125)
        self.assertIn("expired", err)

    def test_revoked_token_is_401(self):
        text, tid = self.token()
        self.assertEqual(self.as_token(text, "GET", "/v1/sandboxes").status, 200)
        rc, _, err = self.space("token", "rm", tid)
        self.assertEqual(rc, 0, err)
        r = self.as_token(text, "GET", "/v1/sandboxes")
        err = self.assert_api_error(r, 401, 401, code="unauthenticated")
        self.assertIn("revoked", err["message"])
        tokens = json.loads(self.space_ok("token", "ls", "--json"))
        mine = [t for t in tokens if t["id"] == tid]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["state"], "revoked")
        self.assertNotIn("token", mine[0], "no secrets in the list")
        table = self.space_ok("token", "ls")
        self.assertIn(tid, table)
        self.assertNotIn(text[17:], table)
        rc, _, err = self.space("token", "rm", "ffffffffffff")
        self.assertEqual(rc, 125)
        self.assertIn("unknown API token", err)

    def test_revoking_a_token_revokes_what_it_minted(self):
        admin, admin_id = self.token(ops=ALL_SANDBOX_OPS + ["admin"], ttl="2h", name="ci")
        child = self.as_token(admin, "POST", "/v1/tokens",
                              {"name": "job", "profiles": ["test"], "ops": ["read", "admin"],
                               "ttl": "1h"})
        self.assertEqual(child.status, 201, child)
        grandchild = self.as_token(child.json["token"], "POST", "/v1/tokens",
                                   {"name": "step", "profiles": ["test"], "ops": ["read"],
                                    "ttl": "30m"})
        self.assertEqual(grandchild.status, 201, grandchild)
        type(self).issued += [child.json["token"], grandchild.json["token"]]
        other, _ = self.token(ops=["read"], name="other")
        rc, _, err = self.space("token", "rm", admin_id)
        self.assertEqual(rc, 0, err)
        for text in (admin, child.json["token"], grandchild.json["token"]):
            r = self.as_token(text, "GET", "/v1/sandboxes")
            err = self.assert_api_error(r, 401, 401, code="unauthenticated")
            self.assertIn("was revoked at", err["message"])
        self.assertEqual(self.as_token(other, "GET", "/v1/sandboxes").status, 200)
        states = {t["id"]: t["state"] for t in json.loads(self.space_ok("token", "ls", "--json"))}
        self.assertEqual(states[child.json["id"]], "revoked")
        self.assertEqual(states[grandchild.json["id"]], "revoked")
        self.assertIn("and the 2 token(s) minted below it: %s,%s" % (child.json["id"],
                                                                      grandchild.json["id"]),
                      self.daemon.log_text())

    def test_cli_audit_follow_ends_when_its_token_is_revoked(self):
        import subprocess
        from harness import SPACE
        sid = self.create()
        text, tid = self.token(ops=["read"], name="follower")
        env = self.env()
        env.update({"SPACE_API": "http://127.0.0.1:%d" % self.port, "SPACE_SOCKET": "/nonexistent",
                    "SPACE_TOKEN": text})
        p = subprocess.Popen([SPACE, "audit", sid, "--follow"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            time.sleep(1.5)
            self.assertIsNone(p.poll(), "the stream ended before the revocation")
            rc, _, err = self.space("token", "rm", tid)
            self.assertEqual(rc, 0, err)
            out, err = p.communicate(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("sandbox.create", out.decode())  # the events before it were shown
        self.assertIn("revoked", err.decode())
        self.assertNotIn('"error"', out.decode(), "the error line is not printed as an event")

    def test_garbage_tokens_are_401(self):
        for garbage in ("nonsense", "spt_", "spt_0123456789ab_" + "0" * 64,
                        "spt_zzzzzzzzzzzz_" + "0" * 64, "x" * 5000):
            with self.subTest(garbage=garbage[:30]):
                r = self.as_token(garbage, "GET", "/v1/sandboxes")
                err = self.assert_api_error(r, 401, 401, code="unauthenticated")
                if len(garbage) > 8:  # "spt_" itself is in the message's example
                    self.assertNotIn(garbage, err["message"])
                self.assertIn('error="invalid_token"', r.headers.get("WWW-Authenticate", ""))
        r = self.api("GET", "/v1/sandboxes", headers={"Authorization": "Basic dXNlcjpwYXNz"})
        err = self.assert_api_error(r, 401, 401)
        self.assertNotIn("dXNlcjpwYXNz", err["message"])

    def test_token_requests_are_validated(self):
        good = {"name": "x", "profiles": ["test"], "ops": ["read"], "ttl": "1h"}
        for field, value, needle in (("ops", ["read", "root"], "read, create, exec"),
                                     ("profiles", ["prod"], "live, test"),
                                     ("ttl", "400d", "365 days"),
                                     ("ttl", None, "required"),
                                     ("name", "", "name")):
            with self.subTest(field=field, value=value):
                body = dict(good)
                if value is None:
                    del body[field]
                else:
                    body[field] = value
                err = self.assert_api_error(self.api("POST", "/v1/tokens", body), 400, 400)
                self.assertIn(needle, err["message"])
        rc, out, err = self.space("token", "create", "--name", "j", "--profile", "*", "--op",
                                  "read", "--ttl", "10m", "--json")
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        type(self).issued.append(j["token"])
        self.assertEqual(j["profiles"], ["*"])
        self.assertEqual(j["token"][4:16], j["id"])
        # A token with "admin" cannot mint a stronger token than itself.
        admin, _ = self.token(ops=["read", "admin"])
        r = self.as_token(admin, "POST", "/v1/tokens", dict(good, ops=["exec"]))
        self.assert_api_error(r, 403, 403)
        r = self.as_token(admin, "POST", "/v1/tokens", dict(good, profiles=["live"]))
        self.assert_api_error(r, 403, 403)
        r = self.as_token(admin, "POST", "/v1/tokens", dict(good, ttl="2h"))
        self.assert_api_error(r, 403, 403)  # it would outlive the admin token
        r = self.as_token(admin, "POST", "/v1/tokens", dict(good, ttl="10m"))
        self.assertEqual(r.status, 201, r)
        type(self).issued.append(r.json["token"])

    def test_tcp_listener_needs_a_token(self):
        status, headers, body = tcp_request(self.port, "GET", "/v1/sandboxes")
        self.assertEqual(status, 401, body)
        self.assertEqual(body["error"]["code"], "unauthenticated")
        self.assertTrue(headers.get("WWW-Authenticate", "").startswith("Bearer"), headers)
        for path in ("/v1/health", "/metrics", "/v1/no-such-route"):
            self.assertEqual(tcp_request(self.port, "GET", path)[0], 401, path)
        status, _, _ = tcp_request(self.port, "POST", "/v1/sandboxes", {})
        self.assertEqual(status, 401)

        text, _ = self.token()
        status, _, body = tcp_request(self.port, "GET", "/v1/sandboxes", token=text)
        self.assertEqual(status, 200, body)
        # The CLI over TCP: SPACE_API + SPACE_TOKEN.
        env = {"SPACE_API": "http://127.0.0.1:%d" % self.port, "SPACE_SOCKET": "/nonexistent"}
        rc, out, err = self.space_as(text, "run", "--", "echo", "over tcp", env=env)
        self.assertEqual((rc, out), (0, "over tcp\n"), err)
        rc, _, err = self.space("ls", env=env)
        self.assertEqual(rc, 125)
        self.assertIn("needs an API token", err)

    def test_unix_socket_serves_only_root(self):
        # Loosen the socket's mode (as a careless admin might): the peer check still refuses.
        os.chmod(self.daemon.socket, 0o666)
        try:
            out = self.request_as_nobody(self.daemon.socket)
            self.assertTrue(out.startswith("HTTP/1.1 403"), out)
            self.assertIn("may not use this socket", out)
        finally:
            os.chmod(self.daemon.socket, 0o600)
        self.assertEqual(self.api("GET", "/v1/health").status, 200)

    def test_non_loopback_listener_is_refused_at_startup(self):
        root = os.path.join(self.tmp, "public")
        os.makedirs(root)
        d = Daemon(root, config={"api_listen": "0.0.0.0:%d" % free_port()})
        try:
            with self.assertRaises(RuntimeError):
                d.start(timeout=20)
            self.assertNotEqual(d.proc.wait(10), 0)
            self.assertIn("TLS", d.log_text())
            self.assertFalse(os.path.exists(d.socket), "no socket left behind")
        finally:
            d.stop()
            safe_rmtree(root)

    def test_zz_token_text_is_never_logged(self):
        # Some more traffic with a token: successes, refusals and a failing request.
        text, tid = self.token(ops=["read", "create", "exec", "lifecycle"])
        rc, out, err = self.space_as(text, "run", "--", "sh", "-c", "echo $SPACE_SANDBOX_ID")
        self.assertEqual(rc, 0, err)
        sid = out.strip()
        self.as_token(text, "GET", "/v1/tokens")
        self.as_token(text + "0", "GET", "/v1/sandboxes")
        tcp_request(self.port, "GET", "/v1/sandboxes", token=text)

        secrets = [t[17:] for t in self.issued]
        self.assertGreater(len(secrets), 5)
        logs = self.daemon.log_text() + read_text(os.path.join(self.daemon.state_dir,
                                                               "spaced.log"))
        self.assertIn(tid, logs, "the logs do name the token by id")
        for s in secrets:
            self.assertNotIn(s, logs)
        audit = self.api("GET", "/v1/sandboxes/%s/audit" % sid)
        self.assertEqual(audit.status, 200)
        self.assertIn(tid.encode(), audit.body)
        for s in secrets:
            self.assertNotIn(s.encode(), audit.body)
        # Nor the database (only SHA-256 of each secret is kept), nor anything else on disk.
        for dirpath, _, files in os.walk(self.daemon.state_dir):
            for name in files:
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                if os.path.getsize(path) > 64 << 20:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                for s in secrets:
                    self.assertNotIn(s.encode(), data, path)


if __name__ == "__main__":
    main()
