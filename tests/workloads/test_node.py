"""Node 20 through the gateway with the defaults SPACE sets in a sandbox, no flags or shims:
Node's `fetch` and `https.get` ignore the proxy variables, so they resolve through the DNS stub
(every name answers 127.0.0.1) and connect to the transparent listeners; NODE_EXTRA_CA_CERTS
gives them the sandbox CA. An allowed host works (tunneled, and intercepted with the secret
injected); a denied host gets the gateway's 403 whose body names the reason, over TLS (a
handshake with a leaf from the sandbox's own CA) and over plain HTTP, and nothing reaches it.
"""

import json
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
from egress_upstream import HOST, Upstream  # noqa: E402

SECRET = "node-w0rkload-SECRET-5b7e1a"

FETCH = r'''
const url = process.argv[1];
fetch(url, {headers: {authorization: 'Bearer ' + process.env.API_TOKEN}})
  .then(async r => console.log(JSON.stringify({status: r.status, body: await r.text()})))
  .catch(e => { console.log(JSON.stringify({error: String(e.cause || e)})); });
'''

HTTPS_GET = r'''
const url = new URL(process.argv[1]);
const mod = require(url.protocol === 'https:' ? 'https' : 'http');
mod.get(url, {headers: {authorization: 'Bearer ' + process.env.API_TOKEN}}, res => {
  let body = '';
  res.on('data', d => body += d);
  res.on('end', () => console.log(JSON.stringify({status: res.statusCode, body})));
}).on('error', e => console.log(JSON.stringify({error: String(e)})));
'''


@unittest.skipUnless(shutil.which("node"), "node is not installed (Debian: apt install nodejs)")
class NodeWorkloadTest(harness.SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        cls.upstream = Upstream(cls.tmp).start()
        up = cls.upstream
        resolve = {"%s.example.test:443" % n: "%s:%d" % (HOST, up.https_port)
                   for n in ("api", "git", "denied")}
        resolve["plain.example.test:80"] = "%s:%d" % (HOST, up.http_port)
        resolve["denied.example.test:80"] = "%s:%d" % (HOST, up.http_port)
        return {
            "profiles": {"test": {"egress": {
                "allow": ["api.example.test", "git.example.test", "plain.example.test:80"],
                "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {"API_TOKEN": {"value": SECRET, "hosts": ["api.example.test"],
                                      "profiles": ["test"]}},
            "gateway": {"resolve": resolve, "upstream_ca_files": [up.certs["ca"]],
                        "sandbox_ca_files": [up.certs["ca"]]},
        }

    @classmethod
    def prepare_class(cls):
        cls.sid = cls.create_for_class("--secret", "API_TOKEN")

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.upstream.stop()

    def node(self, script, url):
        rc, out, err = self.space("exec", self.sid, "--", "node", "-e", script, url,
                                  timeout=90)
        self.assertEqual(rc, 0, (out, err))
        return json.loads(out.strip().splitlines()[-1])

    def test_allowed_hosts(self):
        for script in (FETCH, HTTPS_GET):
            got = self.node(script, "https://git.example.test/hello.txt")  # tunneled
            self.assertEqual(got, {"status": 200, "body": "hello from upstream\n"})
            got = self.node(script, "https://api.example.test/echo")  # intercepted
            self.assertEqual(got.get("status"), 200, got)
            self.assertEqual(json.loads(got["body"])["host"], "api.example.test")
            rec = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"][-1]
            self.assertEqual(rec["headers"]["authorization"], "Bearer " + SECRET)
            self.assertNotIn(SECRET, json.dumps(got))
            got = self.node(script, "http://plain.example.test/echo")
            self.assertEqual(got.get("status"), 200, got)

    def test_denied_host_gets_403_with_the_reason(self):
        for script in (FETCH, HTTPS_GET):
            for url in ("https://denied.example.test/echo", "http://denied.example.test/echo"):
                got = self.node(script, url)
                self.assertEqual(got.get("status"), 403, (url, got))
                self.assertIn("SPACE egress gateway:", got["body"])
                self.assertIn("host denied.example.test not in profile test", got["body"])
        self.assertFalse([e for e in self.upstream.echoes()
                          if e["host"] and e["host"].startswith("denied.example.test")])


if __name__ == "__main__":
    harness.main()
