"""`space port` and POST /v1/sandboxes/{id}/ports/{port}: a real HTTP server inside a sandbox
reached from the host through the forward; what is not reachable (another sandbox's ports, the
sandbox's other addresses, a microVM), the errors, and that a forward leaves nothing behind."""

import os
import re
import signal
import socket
import subprocess
import threading
import urllib.request

from harness import SPACE, SpaceTestCase, main, wait_for


class PortTest(SpaceTestCase):
    def serve(self, sid, text, port=8080):
        self.space_ok("exec", sid, "--", "sh", "-c",
                      "mkdir -p /root/site && printf '%s' > /root/site/index.html" % text)
        self.space_ok("exec", sid, "--detach", "--cwd", "/root/site", "--", "python3", "-m",
                      "http.server", str(port), "--bind", "127.0.0.1")

        def up():
            rc, _, _ = self.space("exec", sid, "--", "python3", "-c",
                                  "import urllib.request as u; u.urlopen('http://127.0.0.1:%d/')"
                                  % port)
            return rc == 0
        wait_for(up, timeout=20, what="the server in %s" % sid)

    def start_forward(self, sid, port, listen="127.0.0.1:0"):
        p = subprocess.Popen([SPACE, "port", sid, str(port), "--listen", listen], env=self.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.match(r"forwarding 127\.0\.0\.1:(\d+) -> (\S+) port (\d+)", line)
        self.assertTrue(m, "space port said %r; stderr %r" % (line, p.stderr.read() if not line else ""))
        self.addCleanup(self.stop_forward, p)
        return p, int(m.group(1))

    def stop_forward(self, p):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        p.stdout.close()
        p.stderr.close()

    def test_forward_reaches_a_server_inside(self):
        a, b = self.create(), self.create()
        self.serve(a, "hello from a")
        self.serve(b, "hello from b")
        fa, port_a = self.start_forward(a, 8080)
        fb, port_b = self.start_forward(b, 8080)
        get = lambda port: urllib.request.urlopen("http://127.0.0.1:%d/index.html" % port,
                                                  timeout=20).read()
        self.assertEqual(get(port_a), b"hello from a")
        self.assertEqual(get(port_b), b"hello from b")  # each forward reaches its own sandbox
        # Several at once, and a large body both ways.
        results = []
        threads = [threading.Thread(target=lambda: results.append(get(port_a))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [b"hello from a"] * 8)
        self.space_ok("exec", a, "--", "sh", "-c", "head -c 3145728 /dev/urandom > /root/site/big")
        self.space_ok("cp", a + ":/root/site/big", os.path.join(self.tmp, "big"))
        with open(os.path.join(self.tmp, "big"), "rb") as f:
            self.assertEqual(urllib.request.urlopen("http://127.0.0.1:%d/big" % port_a,
                                                    timeout=60).read(), f.read())
        kinds = [e["kind"] for e in self.api("GET", "/v1/sandboxes/%s/audit" % a).json["events"]]
        self.assertIn("port.connect", kinds)
        # Ctrl-C stops it: 130, and the host port is free again.
        fa.send_signal(signal.SIGINT)
        self.assertEqual(fa.wait(10), 130)
        with socket.socket() as s:
            self.assertNotEqual(s.connect_ex(("127.0.0.1", port_a)), 0)

    def test_raw_tunnel_and_errors(self):
        sid = self.create()
        self.serve(sid, "raw")
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.daemon.socket)
        s.sendall(b"POST /v1/sandboxes/%s/ports/8080 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                  b"Upgrade: tcp\r\nContent-Length: 0\r\n\r\n"
                  b"GET /index.html HTTP/1.0\r\n\r\n" % sid.encode())  # tunnel bytes right behind
        data = b""
        s.settimeout(20)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 101 Switching Protocols\r\n"), data[:200])
        self.assertIn(b"Upgrade: tcp", data)
        self.assertTrue(data.endswith(b"raw"), data[-200:])
        # Nothing listens there: a clear error, and the forward stays up for the next try.
        f, port = self.start_forward(sid, 9)
        with socket.socket() as c:
            c.settimeout(20)
            c.connect(("127.0.0.1", port))
            self.assertEqual(c.recv(100), b"")  # closed
        err = self.assert_api_error(self.api("POST", "/v1/sandboxes/%s/ports/9" % sid,
                                             headers={"Connection": "Upgrade", "Upgrade": "tcp"}),
                                    503, 503)
        self.assertIn("nothing listens on port 9", err["message"])
        # A server bound to another address of the sandbox than 127.0.0.1 is out of reach
        # (the tunnel goes to 127.0.0.1 only), and bad input is refused.
        for args, needle in ((["port", sid, "0"], "PORT must be a port number"),
                             (["port", sid, "8080", "--listen", "0.0.0.0:0"], "loopback"),
                             (["port", "sb_000000000000", "8080"], "unknown sandbox")):
            rc, _, err = self.space(*args)
            self.assertEqual(rc, 125, args)
            self.assertIn(needle, err)


if __name__ == "__main__":
    main()
