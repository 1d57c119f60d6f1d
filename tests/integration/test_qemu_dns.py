"""Names resolve inside a qemu microVM guest (docs/qemu-runtime.md, "Egress"): the guest's
/etc/resolv.conf names the gateway's DNS stub (127.0.0.53), where the agent takes each query and
carries it over its channel to spaced, which hands it to the sandbox's stub and returns the
answer (docs/agent-protocol.md, "DNS"). The stub answers as for linux sandboxes: every
well-formed name resolves to 127.0.0.1 (the transparent listeners, which the agent carries too,
and which refuse denied hosts with a 403); names the profile denies are audited for this
sandbox; address literals and malformed names are NXDOMAIN.

Checked through the real spaced and CLI under TCG, with ONE sandbox for the class: busybox
nslookup resolves allowed and denied names to 127.0.0.1 (the denied ones audited); wget by name
works through the proxy variables and, without them, through DNS and the transparent HTTP
listener, which answers a denied name with the gateway's 403; a guest flood of
queries (concurrent resolvers, and a static helper sending well-formed, tiny and oversized
datagrams as fast as it can) leaves spaced healthy, its memory bounded and names resolving.
Upstream is a local server reached through `gateway.resolve` overrides on 127.0.0.1 only.

The image is busybox (Debian's busybox-static) imported from a tarball and made a VM disk by
`space image build-vm`; the flood helper is compiled here with the host's C compiler."""

import json
import os
import re
import shutil
import subprocess
import time

from harness import MiB, main
from vm_image import VmSuite, start_upstream, upstream_config

APPLETS = ["sh", "wget", "cat", "echo", "nslookup", "seq", "sleep", "grep", "wc", "timeout"]

# Sends N datagrams to the stub's address as fast as the socket takes them: queries for an
# allowed and many denied names, and every 8th datagram a 3-byte or a 5000-byte one (both out
# of the relay's bounds), reading answers as they come; then waits up to 3 s for the rest.
# Prints "sent S answered A".
FLOOD_C = r"""
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static size_t put_name(unsigned char *p, const char *name) {
  size_t n = 0;
  while (*name) {
    const char *dot = strchr(name, '.');
    size_t len = dot ? (size_t)(dot - name) : strlen(name);
    p[n++] = (unsigned char)len;
    memcpy(p + n, name, len);
    n += len;
    name += len + (dot ? 1 : 0);
  }
  p[n++] = 0;
  return n;
}

int main(int argc, char **argv) {
  int count = argc > 1 ? atoi(argv[1]) : 1000;
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(53);
  inet_pton(AF_INET, "127.0.0.53", &sa.sin_addr);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) { perror("socket"); return 1; }
  int big = 1 << 20;
  setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  static unsigned char q[5000], r[8192];
  int sent = 0, answered = 0;
  for (int i = 0; i < count; i++) {
    size_t len;
    if (i % 8 == 3) {
      len = 3;
    } else if (i % 8 == 5) {
      memset(q, 'x', sizeof q);
      len = sizeof q;
    } else {
      char name[64];
      if (i % 8 == 0) snprintf(name, sizeof name, "allowed.test");
      else snprintf(name, sizeof name, "f%d.denied.test", i);
      memset(q, 0, 12);
      q[0] = (unsigned char)(i >> 8); q[1] = (unsigned char)i;
      q[2] = 1; q[5] = 1;
      len = 12 + put_name(q + 12, name);
      q[len++] = 0; q[len++] = 1; q[len++] = 0; q[len++] = 1;
    }
    if (send(s, q, len, MSG_DONTWAIT) >= 0) sent++;
    while (recv(s, r, sizeof r, MSG_DONTWAIT) > 0) answered++;
  }
  struct pollfd p = {s, POLLIN, 0};
  while (poll(&p, 1, 3000) > 0)
    if (recv(s, r, sizeof r, MSG_DONTWAIT) > 0) answered++;
  printf("sent %d answered %d\n", sent, answered);
  return 0;
}
"""


class QemuDnsTest(VmSuite):

    @classmethod
    def daemon_config(cls):
        cls.upstream = start_upstream()
        cls.port = cls.upstream.server_address[1]
        return upstream_config(cls.port, allow=("allowed.test", "allowed.test:%d" % cls.port))

    @classmethod
    def prepare_class(cls):
        extra = []
        cc = shutil.which("cc") or shutil.which("gcc")
        cls.flood = None
        if cc:
            src = os.path.join(cls.tmp, "dnsflood.c")
            with open(src, "w") as f:
                f.write(FLOOD_C)
            exe = os.path.join(cls.tmp, "dnsflood")
            p = subprocess.run([cc, "-static", "-O2", "-o", exe, src], capture_output=True,
                               text=True, timeout=120)
            if p.returncode == 0:
                extra.append((exe, "bin/dnsflood"))
                cls.flood = "/bin/dnsflood"
            else:
                cls.flood_why = "cc -static failed: " + p.stderr[-500:]
        else:
            cls.flood_why = "no C compiler for the flood helper"
        # An image's own resolv.conf, pointing somewhere the guest cannot reach: the
        # guest's init replaces it.
        cls.make_class_image("bbdns", APPLETS, files={"etc/resolv.conf": "nameserver 192.0.2.1\n"},
                             host_files=extra)
        cls.sid = cls.create_for_class("--runtime", "qemu", "--image", cls.image,
                                       "--memory", "256M", "--cpus", "1")

    def sh(self, script, timeout=120):
        return self.space("exec", self.sid, "--", "sh", "-c", script, timeout=timeout)

    def dns_denials(self):
        out = self.space_ok("audit", self.sid, "--json")
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [e for e in events if e.get("kind") == "egress.denied"
                and e.get("data", {}).get("via") == "dns"]

    def dns_queries_metric(self):
        r = self.api("GET", "/metrics")
        self.assertEqual(r.status, 200, r)
        for line in r.body.decode().splitlines():
            if line.startswith("space_egress_dns_queries_total "):
                return float(line.split()[1])
        self.fail("no space_egress_dns_queries_total in /metrics")

    def test_1_names_resolve_through_the_stub(self):
        # vminit pointed resolv.conf at the stub (replacing the image's own).
        self.assertEqual(self.exec_ok(self.sid, "cat", "/etc/resolv.conf"),
                         "nameserver 127.0.0.53\noptions edns0\n")
        before = self.dns_queries_metric()
        rc, out, err = self.space("exec", self.sid, "--", "nslookup", "allowed.test")
        self.assertEqual(rc, 0, (out, err))
        self.assertIn("127.0.0.53", out)  # the server it asked
        self.assertRegex(out, r"Name:\s+allowed\.test\s+Address:\s+127\.0\.0\.1")
        # A denied name resolves to the gateway too (whose listeners refuse it: test_2),
        # audited for this sandbox.
        for name in ("denied.test", "nobody.example.org"):
            rc, out, err = self.space("exec", self.sid, "--", "nslookup", name)
            self.assertEqual(rc, 0, (out, err))
            self.assertRegex(out, r"Name:\s+%s\s+Address:\s+127\.0\.0\.1" % re.escape(name))
        # An address literal that is not one (a numeric last label) stays NXDOMAIN.
        rc, out, err = self.space("exec", self.sid, "--", "nslookup", "a.999")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("NXDOMAIN", out + err)
        hosts = {e["data"].get("host") for e in self.dns_denials()}
        self.assertIn("denied.test", hosts)
        self.assertIn("nobody.example.org", hosts)
        self.assertGreater(self.dns_queries_metric(), before)
        # Only the stub is carried: another server address leads nowhere from the guest.
        rc, out, err = self.sh("timeout 8 nslookup allowed.test 10.0.2.3")
        self.assertNotEqual(rc, 0, out)
        self.assertNotIn("Address: 127.0.0.1", out)

    def test_2_wget_by_name(self):
        # Through the proxy variables (the gateway resolves the name).
        out = self.exec_ok(self.sid, "wget", "-q", "-O", "-",
                           "http://allowed.test:%d/proxied" % self.port)
        self.assertEqual(out, "hello from upstream /proxied")
        # Without them: the name resolves through the stub to 127.0.0.1, port 80 in the guest is
        # the agent's, which carries the connection to the gateway's transparent listener.
        # (`timeout`, not wget's -T: busybox 1.35's wget crashes with -T.)
        rc, out, err = self.sh(
            "unset http_proxy HTTP_PROXY; timeout 60 wget -q -O - http://allowed.test/transparent")
        self.assertEqual((rc, out), (0, "hello from upstream /transparent"), err)
        # A denied name resolves to the gateway, whose transparent listener refuses it.
        rc, out, err = self.sh(
            "unset http_proxy HTTP_PROXY; timeout 60 wget -q -O - http://denied.test/")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("403", err)

    def test_3_a_guest_flood_does_not_break_the_daemon(self):
        rss_before = self.daemon.rss()
        # Many resolvers at once: more queries than the agent keeps in flight (64).
        rc, out, err = self.sh(
            "for i in $(seq 1 80); do nslookup n$i.denied.test >/dev/null 2>&1 & done; wait; "
            "echo burst done", timeout=300)
        self.assertEqual(rc, 0, err)
        self.assertIn("burst done", out)
        if self.flood:
            rc, out, err = self.space("exec", self.sid, "--", self.flood, "20000", timeout=300)
            self.assertEqual(rc, 0, (out, err))
            sent, answered = [int(w) for w in out.split()[1::2]]
            print("flood: %s" % out.strip())
            self.assertGreater(sent, 10000, out)
            self.assertGreater(answered, 0, out)
            self.assertLess(answered, sent, out)  # the bad datagrams get nothing
        else:
            print("flood helper skipped: %s" % self.flood_why)
        # spaced is fine: healthy, its memory bounded, the sandbox answering, names resolving.
        self.daemon.wait_healthy(10)
        self.assertLess(self.daemon.rss() - rss_before, 64 * MiB)
        self.assertEqual(self.inspect(self.sid)["state"], "running")
        deadline = time.monotonic() + 30
        while True:
            rc, out, err = self.space("exec", self.sid, "--", "nslookup", "allowed.test")
            if rc == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)  # stale queries of the flood may still hold the agent's slots
        self.assertEqual(rc, 0, (out, err))
        self.assertRegex(out, r"Address:\s+127\.0\.0\.1")
        out = self.exec_ok(self.sid, "wget", "-q", "-O", "-", "http://allowed.test/after")
        self.assertEqual(out, "hello from upstream /after")
        # The gateway's audit of refusals stays bounded under the flood (rate-limited, with the
        # count left out on the next event).
        self.assertLess(len(self.dns_denials()), 400)


if __name__ == "__main__":
    main()
