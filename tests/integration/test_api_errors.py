"""Bad input to the REST API and the CLI: every case gets a 4xx with a JSON
{"error": {"code", "message"}} (or exit code 125 with a message), never a crash or a hang, and
the daemon stays up throughout."""

import json
import os
import socket
import time

from harness import MiB, SpaceTestCase, main


class ApiErrorsTest(SpaceTestCase):

    def tearDown(self):
        self.assertTrue(self.daemon.alive(), "spaced died:\n%s" % self.daemon.log_tail())
        self.assertEqual(self.api("GET", "/v1/health").status, 200)

    def test_malformed_json(self):
        for body in (b"{", b"not json", b"[1,2,3]", b'{"memory": }', b"\xff\xfe\x00",
                     b'"just a string"', b"null"):
            with self.subTest(body=body):
                r = self.api("POST", "/v1/sandboxes", body,
                             headers={"Content-Type": "application/json"})
                self.assert_api_error(r, 400, 400)

    def test_oversized_body(self):
        body = b'{"env": {"A": "' + b"x" * (2 * MiB) + b'"}}'
        r = self.api("POST", "/v1/sandboxes", body, headers={"Content-Type": "application/json"})
        self.assert_api_error(r, 400, 413)

    def test_unknown_id(self):
        for method, path in (("GET", "/v1/sandboxes/sb_0000000000000000"),
                             ("DELETE", "/v1/sandboxes/sb_0000000000000000"),
                             ("POST", "/v1/sandboxes/sb_0000000000000000/pause"),
                             ("GET", "/v1/sandboxes/sb_0000000000000000/processes"),
                             ("GET", "/v1/sandboxes/sb_0000000000000000/diff"),
                             ("GET", "/v1/sandboxes/sb_0000000000000000/files?path=/etc/passwd")):
            with self.subTest(method=method, path=path):
                self.assert_api_error(self.api(method, path), 404, 404, code="not_found")
        r, _ = self.api_exec("sb_0000000000000000", ["true"])
        self.assert_api_error(r, 404, 404)

    def test_bad_ids_and_paths(self):
        for path in ("/v1/sandboxes/..%2F..%2Fetc", "/v1/sandboxes/%00", "/v1/sandboxes/" +
                     "a" * 5000, "/v1/nothing-here", "/v2/sandboxes", "/v1/sandboxes/x/y/z"):
            with self.subTest(path=path):
                r = self.api("GET", path)
                self.assert_api_error(r, 400, 414)
        r = self.api("PATCH", "/v1/sandboxes")
        self.assert_api_error(r, 400, 405)

    def test_bad_limits(self):
        for field, value in (("memory", "12Q"), ("memory", "-5M"), ("memory", ""),
                             ("memory", "99999999999999999999G"), ("cpus", -1), ("cpus", 0),
                             ("cpus", "many"), ("pids", -3), ("pids", 0), ("disk", "1X"),
                             ("timeout", -1), ("runtime", "nope"), ("image", "../../etc"),
                             ("env", "A=B"), ("env", {"A": 1}), ("workdir", "relative")):
            with self.subTest(field=field, value=value):
                r = self.api("POST", "/v1/sandboxes", {field: value})
                self.assert_api_error(r, 400, 404)
                if r.status == 201:  # should not happen; do not leak it
                    self.api("DELETE", "/v1/sandboxes/%s" % r.json["id"])

    def test_limits_beyond_the_host_are_refused(self):
        host_mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        host_cpus = os.sysconf("SC_NPROCESSORS_ONLN")
        before = self.list_ids()
        for body, needle in (({"memory": "1E"}, "more than this host has"),
                             ({"memory": host_mem + (1 << 20)}, "more than this host has"),
                             ({"cpus": host_cpus + 1}, "more than this host's %d online CPUs"
                              % host_cpus)):
            with self.subTest(body=body):
                r = self.api("POST", "/v1/sandboxes", body)
                err = self.assert_api_error(r, 400, 400, code="invalid_argument")
                self.assertIn(needle, err["message"])
                if r.status == 201:
                    self.api("DELETE", "/v1/sandboxes/%s" % r.json["id"])
        rc, _, err = self.space("create", "--cpus", str(host_cpus + 1))
        self.assertEqual(rc, 125)
        self.assertIn("online CPUs", err)
        self.assertEqual(self.list_ids(), before)
        # What the host does have is fine.
        sid = self.create("--cpus", str(host_cpus), "--memory", "64M")
        self.assertEqual(self.inspect(sid)["limits"]["cpus"], host_cpus)

    def test_bad_exec_requests(self):
        sid = self.create()
        base = "/v1/sandboxes/%s/exec" % sid
        for body in ({}, {"cmd": []}, {"cmd": "echo hi"}, {"cmd": [1, 2]}, {"cmd": [""]},
                     {"cmd": ["true"], "timeout": -1}, {"cmd": ["true"], "env": ["A"]},
                     {"cmd": ["true"], "cwd": "relative"}):
            with self.subTest(body=body):
                self.assert_api_error(self.api("POST", base, body), 400, 400)
        self.assertEqual(self.exec_ok(sid, "echo", "fine"), "fine\n")

    def test_cli_bad_input_exits_125(self):
        for args in (("run", "--memory", "12Q", "--", "true"),
                     ("run", "--cpus", "-1", "--", "true"),
                     ("create", "--pids", "-3"),
                     ("exec", "sb_0000000000000000", "--", "true"),
                     ("inspect", "sb_0000000000000000"),
                     ("rm", "sb_0000000000000000"),
                     ("cp", "sb_0000000000000000:/etc/passwd", "/tmp/space-it-never")):
            with self.subTest(args=args):
                rc, out, err = self.space(*args)
                self.assertEqual(rc, 125, (out, err))
                self.assertTrue(err.strip(), "no message on stderr")

    def test_cli_usage_errors(self):
        rc, _, err = self.space("exec")
        self.assertNotEqual(rc, 0)
        rc, _, err = self.space("no-such-verb")
        self.assertNotEqual(rc, 0)
        self.assertTrue(err.strip())

    def test_garbage_on_the_socket(self):
        # Raw bytes that are not HTTP, a half-sent request, and a client that disconnects.
        for payload in (b"\x00" * 100 + b"\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n",
                        b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",
                        b"GET /v1/health HTTP/1.1\r\n" + b"X-Long: " + b"a" * 100000 + b"\r\n\r\n"):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)
            s.connect(self.daemon.socket)
            try:
                s.sendall(payload)
            except OSError:
                pass
            s.close()
        time.sleep(0.2)
        self.assertEqual(self.api("GET", "/v1/health").status, 200)

    def test_many_idle_connections_do_not_block_others(self):
        socks = []
        for _ in range(50):
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.daemon.socket)
            socks.append(s)
        try:
            t0 = time.monotonic()
            self.assertEqual(self.api("GET", "/v1/health", timeout=10).status, 200)
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            for s in socks:
                s.close()

    def test_invalid_utf8_is_400_naming_the_field(self):
        sid = self.create()
        files = "/v1/sandboxes/%s/files?path=" % sid
        for method, path, body, headers, needle in (
                ("GET", files + "/tmp/%FF", None, None, "query parameter path"),
                ("PUT", files + "/tmp/%C3%28", b"x", None, "query parameter path"),
                ("DELETE", files + "/tmp/%ED%A0%80", None, None, "query parameter path"),
                ("GET", "/v1/sandboxes/%C0%AF", None, None, "path segment 3"),
                ("POST", "/v1/sandboxes", b'{"env": {"A": "\xff"}}',
                 {"Content-Type": "application/json"}, "field env.A of the JSON body"),
                ("POST", "/v1/sandboxes/%s/exec" % sid, b'{"cmd": ["echo", "\\ud800"]}',
                 {"Content-Type": "application/json"}, "field cmd[1] of the JSON body")):
            with self.subTest(method=method, path=path):
                r = self.api(method, path, body, headers=headers)
                err = self.assert_api_error(r, 400, 400, code="invalid_argument")
                self.assertIn(needle, err["message"])
                r.body.decode("utf-8")  # the answer itself is valid UTF-8
        self.assertEqual(self.api("GET", "/v1/health").status, 200)

    def test_chunk_lines_are_bounded(self):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(self.daemon.socket)
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"\r\n3;ext=")
        answer = b""
        try:
            for _ in range(64):  # up to 64 MiB of one chunk extension
                s.sendall(b"e" * MiB)
        except OSError:
            pass
        try:
            answer = s.recv(4096)
        except OSError:
            pass
        s.close()
        self.assertTrue(answer.startswith(b"HTTP/1.1 400 "), answer[:200])
        self.assertIn(b"longer than 64 KiB", answer)
        self.assertEqual(self.api("GET", "/v1/health").status, 200)

    def test_metrics_and_health(self):
        r = self.api("GET", "/metrics")
        self.assertEqual(r.status, 200, r)
        self.assertIn(b"# TYPE", r.body)
        r = self.api("GET", "/v1/health")
        self.assertEqual(r.status, 200)
        json.dumps(r.json)


if __name__ == "__main__":
    main()
