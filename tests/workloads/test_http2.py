"""HTTP/2 through the gateway on intercepted hosts (docs/egress.md, "HTTP/2"): curl --http2 and
nghttp inside a sandbox negotiate h2 with the gateway, which forwards each stream to an
HTTP/1.1 upstream (egress_upstream.py) or an HTTP/2 one (a grpcio server, which nghttp also
calls with a raw gRPC frame so its trailers can be read), injects the
credential, masks its echo, and refuses a denied path on one stream while the connection's
other streams go on. A gRPC client inside the sandbox calls a unary method with the secret's
placeholder as `authorization` metadata: the server sees the real value, the response, its
headers and its trailers come back masked, and the call ends with status OK (trailers carried).
"""

import json
import os
import sys
import subprocess
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import harness  # noqa: E402
from egress_upstream import HOST, Upstream  # noqa: E402

SECRET = "h2-s3cr3t-value-4b7e1c9a0d"
GRPC_SECRET = "grpc-s3cr3t-value-8c2f6a1e5b"
METHOD = "/space.test.Echo/Call"


GRPC_SERVER = r"""
import json, sys, threading
from concurrent import futures
import grpc

key, cert, host, log = sys.argv[1:5]
lock = threading.Lock()

def call(request, context):
    auth = dict(context.invocation_metadata()).get("authorization", "")
    with lock, open(log, "a") as f:
        f.write(json.dumps({"authorization": auth, "request": request.decode()}) + "\n")
    context.send_initial_metadata((("x-echo-auth", auth),))
    context.set_trailing_metadata((("x-echo-trailer", auth),))
    return ("auth=" + auth).encode()

handler = grpc.method_handlers_generic_handler("space.test.Echo", {
    "Call": grpc.unary_unary_rpc_method_handler(
        call, request_deserializer=lambda b: b, response_serializer=lambda b: b)})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(handler,))
creds = grpc.ssl_server_credentials([(open(key, "rb").read(), open(cert, "rb").read())])
port = server.add_secure_port("%s:0" % host, creds)
server.start()
print(port, flush=True)
sys.stdin.read()  # until the test closes our stdin
server.stop(0)
"""


class GrpcUpstream:
    """A grpcio server (HTTP/2 only) on 127.0.0.2 with the test CA's *.example.test leaf, run by
    Debian's /usr/bin/python3 (python3-grpcio). Its one unary method answers with the
    `authorization` metadata it received, and echoes it in its initial and trailing metadata
    too (the gateway must mask all three). `seen()` lists what it received."""

    def __init__(self, workdir, certs):
        script = os.path.join(workdir, "grpc_server.py")
        with open(script, "w") as f:
            f.write(GRPC_SERVER)
        self.log = os.path.join(workdir, "grpc_seen.jsonl")
        self.proc = subprocess.Popen(["/usr/bin/python3", script, certs["key"], certs["cert"],
                                      HOST, self.log], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise AssertionError("the gRPC test server did not start (is python3-grpcio "
                                 "installed for /usr/bin/python3?)")
        self.port = int(line)

    def seen(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(ln) for ln in f if ln.strip()]

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its handle
            self.proc.wait()
        self.proc.stdout.close()


class Http2Test(harness.SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        cls.upstream = Upstream(cls.tmp).start()
        cls.grpc = GrpcUpstream(cls.tmp, cls.upstream.certs)
        up = cls.upstream
        resolve = {"%s.example.test:443" % n: "%s:%d" % (HOST, up.https_port)
                   for n in ("api", "paths")}
        resolve["grpc.example.test:443"] = "%s:%d" % (HOST, cls.grpc.port)
        return {
            "profiles": {"test": {"egress": {
                "allow": ["api.example.test", "grpc.example.test",
                          {"host": "paths.example.test", "methods": ["GET"],
                           "paths": ["/public/"]}],
                "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {
                "API_TOKEN": {"value": SECRET, "hosts": ["api.example.test"],
                              "profiles": ["test"]},
                "GRPC_TOKEN": {"value": GRPC_SECRET, "hosts": ["grpc.example.test"],
                               "profiles": ["test"]},
            },
            "gateway": {"resolve": resolve,
                        "upstream_ca_files": [up.certs["ca"]],
                        "sandbox_ca_files": [up.certs["ca"]]},
        }

    @classmethod
    def prepare_class(cls):
        cls.sid = cls.create_for_class("--profile", "test", "--secret", "API_TOKEN",
                                       "--secret", "GRPC_TOKEN")

    @classmethod
    def tearDownClass(cls):
        try:
            cls.grpc.stop()
        finally:
            try:
                super().tearDownClass()
            finally:
                cls.upstream.stop()

    def sh_ok(self, script, timeout=120):
        rc, out, err = self.space("exec", self.sid, "--", "sh", "-c", script, timeout=timeout)
        self.assertEqual(rc, 0, "in sandbox: %s\nrc %d\nstdout: %s\nstderr: %s" %
                         (script, rc, out[-3000:], err[-3000:]))
        return out

    def audit_events(self):
        out = self.space_ok("audit", self.sid, "--json")
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def test_curl_h2_to_http11_upstream_injects_and_masks(self):
        # Through the proxy (CONNECT) and through DNS + the transparent :443 listener.
        for how in ("", "--noproxy '*'"):
            out = self.sh_ok(
                "curl --http2 -sS %s -D /tmp/h -w '\\nversion=%%{http_version}\\n' "
                "https://api.example.test/echo -H \"Authorization: Bearer $API_TOKEN\"; "
                "cat /tmp/h" % how)
            self.assertIn("version=2\n", out, "h2 was not negotiated with the gateway: " + out)
            got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"]
            self.assertTrue(got, "the upstream saw no request")
            self.assertEqual(got[-1]["headers"]["authorization"], "Bearer " + SECRET)
            self.assertNotIn(SECRET, out)
            # Echoed in the body and in a header: both masked.
            self.assertGreaterEqual(out.count("*" * len(SECRET)), 2, out)
        events = self.audit_events()
        reqs = [e["data"] for e in events if e["kind"] == "egress.request"
                and e["data"].get("host") == "api.example.test"]
        self.assertTrue(any(r.get("http2") and r.get("secrets") == ["API_TOKEN"] and
                            r.get("redactions") for r in reqs), reqs)
        self.assertNotIn(SECRET, json.dumps(events))

    def test_post_body_reaches_http11_upstream(self):
        out = self.sh_ok("head -c 300000 /dev/zero | tr '\\0' x > /tmp/big && "
                         "curl --http2 -sS -w '\\nversion=%{http_version}\\n' "
                         "--data-binary @/tmp/big https://api.example.test/echo")
        self.assertIn("version=2\n", out)
        got = [e for e in self.upstream.echoes() if e["method"] == "POST"]
        self.assertTrue(got and got[-1]["body"] == "x" * 300000, "the body did not arrive whole")

    def test_denied_path_refused_while_other_streams_go_on(self):
        # nghttp ignores proxy variables: DNS stub + transparent :443. Its URIs share one
        # connection.
        out = self.sh_ok("nghttp -ns https://paths.example.test/public/a "
                         "https://paths.example.test/private/b "
                         "https://paths.example.test/public/c")
        lines = [ln.split() for ln in out.splitlines()]
        codes = {ln[-1]: ln for ln in lines if ln and ln[-1].startswith("/")}
        self.assertIn("200", codes.get("/public/a", []), out)
        self.assertIn("403", codes.get("/private/b", []), out)
        self.assertIn("200", codes.get("/public/c", []), out)
        denied = [e["data"] for e in self.audit_events() if e["kind"] == "egress.denied"
                  and e["data"].get("path") == "/private/b"]
        self.assertTrue(denied and denied[-1].get("http2"), denied)
        out = self.sh_ok("curl --http2 -sS -w '\\n%{http_code} %{http_version}\\n' "
                         "https://paths.example.test/private/x")
        self.assertIn("403 2\n", out)
        self.assertIn("not allowed", out)

    def test_authority_must_name_the_intercepted_host(self):
        out = self.sh_ok("curl --http2 -sS -w '\\n%{http_code} %{http_version}\\n' "
                         "-H 'Host: api.example.test' https://paths.example.test/public/x")
        self.assertIn("421 2\n", out)
        self.assertFalse([e for e in self.upstream.echoes() if e["path"] == "/public/x"
                          and e["host"] == "api.example.test"])

    def test_nghttp_to_http2_upstream_gets_masked_trailers(self):
        # A raw gRPC call (5-byte frame header, then "hi") from nghttp, through DNS + the
        # transparent :443 listener, to the grpcio server: h2 on both sides, the trailers come
        # back (masked), the server saw the real value.
        out = self.sh_ok("printf '\\000\\000\\000\\000\\002hi' > /tmp/msg && "
                         "nghttp -v -H ':method: POST' -H 'content-type: application/grpc' "
                         "-H 'te: trailers' -H \"authorization: Bearer $GRPC_TOKEN\" "
                         "-d /tmp/msg https://grpc.example.test%s" % METHOD)
        self.assertIn("The negotiated protocol: h2", out)
        self.assertIn(":status: 200", out)
        masked = "Bearer " + "*" * len(GRPC_SECRET)
        self.assertIn("x-echo-auth: " + masked, out)
        self.assertIn("x-echo-trailer: " + masked, out)
        self.assertIn("grpc-status: 0", out)
        self.assertNotIn(GRPC_SECRET, out)
        seen = self.grpc.seen()
        self.assertTrue(seen and seen[-1]["authorization"] == "Bearer " + GRPC_SECRET, seen)

    def test_grpc_unary_call_with_injected_metadata(self):
        script = textwrap.dedent("""
            import grpc, os, sys
            ca = open("/etc/space/ca-bundle.crt", "rb").read()
            ch = grpc.secure_channel("grpc.example.test:443", grpc.ssl_channel_credentials(ca))
            call = ch.unary_unary("%s", request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            resp, c = call.with_call(b"hello", timeout=30, metadata=(
                ("authorization", "Bearer " + os.environ["GRPC_TOKEN"]),))
            print("response=" + resp.decode())
            print("code=" + str(c.code()))
            for k, v in c.initial_metadata():
                print("initial %%s=%%s" %% (k, v))
            for k, v in c.trailing_metadata():
                print("trailer %%s=%%s" %% (k, v))
            """ % METHOD)
        for how in ("", "env -u https_proxy -u HTTPS_PROXY -u http_proxy -u HTTP_PROXY "
                        "-u all_proxy -u ALL_PROXY"):
            out = self.sh_ok("cat > /tmp/g.py <<'EOF'\n%sEOF\n%s /usr/bin/python3 /tmp/g.py" %
                             (script, how))
            self.assertIn("code=StatusCode.OK", out)
            seen = self.grpc.seen()
            self.assertTrue(seen, "the gRPC server saw no call")
            self.assertEqual(seen[-1]["authorization"], "Bearer " + GRPC_SECRET)
            self.assertEqual(seen[-1]["request"], "hello")
            self.assertNotIn(GRPC_SECRET, out)
            masked = "Bearer " + "*" * len(GRPC_SECRET)
            self.assertIn("response=auth=" + masked, out)
            self.assertIn("initial x-echo-auth=" + masked, out)
            self.assertIn("trailer x-echo-trailer=" + masked, out)
        reqs = [e["data"] for e in self.audit_events() if e["kind"] == "egress.request"
                and e["data"].get("host") == "grpc.example.test"]
        self.assertTrue(reqs and reqs[-1].get("http2") and reqs[-1].get("status") == 200 and
                        reqs[-1].get("secrets") == ["GRPC_TOKEN"], reqs)


if __name__ == "__main__":
    harness.main()
