#!/usr/bin/python3
"""A stand-in for Firecracker's jailer and Firecracker, for the firecracker runtime's
orchestration tests on hosts without KVM (firecracker_runtime_test.cc). It is NOT a VMM and
proves nothing about isolation: it lets the tests drive SPACE's side of the protocol for real
(the jail directory, the jailer's command line, the API sequence, vsock, templates, snapshot
files, cleanup) against a process that behaves as Firecracker documents.

Invoked as the jailer (`--id ... --exec-file ... --uid U --gid G --chroot-base-dir B ...
-- --api-sock /api.sock ...`), it does what the jailer does that SPACE relies on: works in
B/<exec file name>/<id>/root (without chroot: in-jail paths are taken relative to it), chowns
it to U:G, drops to U:G and becomes "Firecracker" in the same process. As Firecracker it serves
the REST API on the API socket, checks each request's method and path, logs it (one JSON line
each, to B/../fake-calls.log), and:
  - InstanceStart / snapshot load: starts the "guest", the real space-agent
    (--channel-listen unix:agent.listen), whose path comes from fake.json beside this script;
  - PUT /vsock (or a load): listens on uds_path for Firecracker's host-side protocol:
    "CONNECT <port>\\n" -> connects to the agent, answers "OK <n>\\n" and splices, or hangs up
    while the agent does not listen yet;
  - PATCH /vm Paused/Resumed: SIGSTOP/SIGCONT to the agent;
  - snapshot create: writes the VM state (the configuration as JSON) and a memory file (Full:
    1 MiB of a pattern; Diff: one 4 KiB page at 512 KiB in an otherwise empty file of the same
    size); snapshot load reads the state back.
fake.json may also say {"fail_at": "<method> <path>"}: that request is answered 400 with a
fault_message, as Firecracker refuses a bad request."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MEM_SIZE = 1 << 20


def parse_jailer(argv):
    opts, rest = {}, []
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            rest = argv[i + 1:]
            break
        opts.setdefault(argv[i].lstrip("-"), []).append(argv[i + 1])
        i += 2
    return opts, rest


class Vmm:
    def __init__(self, log, fake):
        self.log = log
        self.fake = fake
        self.config = {}
        self.agent = None
        self.state = "Not started"
        self.vsock_path = None

    def note(self, method, path, body):
        self.log.write(json.dumps({"method": method, "path": path, "body": body}) + "\n")
        self.log.flush()

    def start_guest(self):
        if os.path.exists("agent.listen"):
            os.unlink("agent.listen")
        self.agent = subprocess.Popen([self.fake["agent"], "--channel-listen", "unix:agent.listen"],
                                      stdin=subprocess.DEVNULL)
        self.state = "Running"

    def serve_vsock(self, path):
        if self.vsock_path:
            return
        self.vsock_path = path
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(8)
        threading.Thread(target=self.vsock_loop, args=(srv,), daemon=True).start()

    def vsock_loop(self, srv):
        while True:
            c, _ = srv.accept()
            threading.Thread(target=self.vsock_conn, args=(c,), daemon=True).start()

    def vsock_conn(self, c):
        line = b""
        while not line.endswith(b"\n") and len(line) < 64:
            b = c.recv(1)
            if not b:
                c.close()
                return
            line += b
        g = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if not line.startswith(b"CONNECT ") or self.state != "Running":
                raise OSError("refused")
            g.connect("agent.listen")
        except OSError:
            c.close()  # nothing listens in the guest (yet): Firecracker hangs up
            g.close()
            return
        c.sendall(b"OK 1073741824\n")

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        threading.Thread(target=pump, args=(c, g), daemon=True).start()
        threading.Thread(target=pump, args=(g, c), daemon=True).start()

    def handle(self, method, path, body):
        """-> (status, body dict or None)"""
        self.note(method, path, body)
        if self.fake.get("fail_at") == "%s %s" % (method, path):
            return 400, {"fault_message": "stand-in refuses %s %s" % (method, path)}
        rel = lambda p: p.lstrip("/")  # noqa: E731 - in-jail path, relative to the jail root
        if method == "GET" and path == "/":
            return 200, {"id": "fake", "state": self.state, "vmm_version": "1.16.0",
                         "app_name": "Firecracker"}
        if method == "PUT" and path in ("/machine-config", "/boot-source", "/entropy", "/balloon"):
            self.config[path] = body
            return 204, None
        if method in ("PUT", "PATCH") and path.startswith("/drives/"):
            if method == "PUT" and not os.path.exists(rel(body["path_on_host"])):
                return 400, {"fault_message": "no file " + body["path_on_host"]}
            self.config.setdefault("drives", {})[path] = body
            return 204, None
        if method == "PUT" and path == "/vsock":
            self.config["/vsock"] = body
            self.serve_vsock(rel(body["uds_path"]))
            return 204, None
        if method == "PUT" and path == "/actions" and body == {"action_type": "InstanceStart"}:
            for p in ("/machine-config", "/boot-source"):
                if p not in self.config:
                    return 400, {"fault_message": "missing " + p}
            self.start_guest()
            return 204, None
        if method == "PATCH" and path == "/vm":
            if self.agent:
                self.agent.send_signal(signal.SIGSTOP if body["state"] == "Paused" else signal.SIGCONT)
            self.state = "Paused" if body["state"] == "Paused" else "Running"
            return 204, None
        if method == "PUT" and path == "/snapshot/create":
            if self.state != "Paused":
                return 400, {"fault_message": "the microVM must be paused"}
            with open(rel(body["snapshot_path"]), "w") as f:
                json.dump(self.config, f)
            with open(rel(body["mem_file_path"]), "wb") as f:
                if body.get("snapshot_type") == "Diff":
                    f.truncate(MEM_SIZE)
                    f.seek(512 << 10)
                    f.write(b"D" * 4096)
                else:
                    f.write(b"F" * MEM_SIZE)
            return 204, None
        if method == "PUT" and path == "/snapshot/load":
            with open(rel(body["snapshot_path"])) as f:
                self.config = json.load(f)
            backend = body["mem_backend"]
            with open(rel(backend["backend_path"]), "rb") as f:
                if len(f.read()) != MEM_SIZE:
                    return 400, {"fault_message": "memory file of the wrong size"}
            for d in self.config.get("drives", {}).values():
                if not os.path.exists(rel(d["path_on_host"])):
                    return 400, {"fault_message": "no file " + d["path_on_host"]}
            self.serve_vsock(rel(self.config["/vsock"]["uds_path"]))
            self.start_guest()
            if not body.get("resume_vm"):
                self.state = "Paused"
            return 204, None
        return 400, {"fault_message": "stand-in does not know %s %s" % (method, path)}


def serve_api(vmm, path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=api_conn, args=(vmm, c), daemon=True).start()


def api_conn(vmm, c):
    f = c.makefile("rb")
    while True:
        line = f.readline()
        if not line:
            return
        method, target, _ = line.decode().split(" ", 2)
        length = 0
        while True:
            h = f.readline().decode()
            if h in ("\r\n", "\n", ""):
                break
            k, v = h.split(":", 1)
            if k.strip().lower() == "content-length":
                length = int(v)
        body = json.loads(f.read(length)) if length else None
        status, out = vmm.handle(method, target, body)
        data = json.dumps(out).encode() if out is not None else b""
        reason = {200: "OK", 204: "No Content", 400: "Bad Request"}[status]
        head = "HTTP/1.1 %d %s\r\nServer: Firecracker API\r\n" % (status, reason)
        if data:
            head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
        c.sendall(head.encode() + b"\r\n" + data)


def main():
    if "--version" in sys.argv:
        print("Firecracker v1.16.0")
        return
    opts, fc_args = parse_jailer(sys.argv[1:])
    exec_file = opts["exec-file"][0]
    with open(os.path.join(os.path.dirname(exec_file), "fake.json")) as f:
        fake = json.load(f)
    base = opts["chroot-base-dir"][0]
    root = os.path.join(base, os.path.basename(exec_file), opts["id"][0], "root")
    os.makedirs(root, exist_ok=True)
    uid, gid = int(opts["uid"][0]), int(opts["gid"][0])
    os.chown(root, uid, gid)
    log = open(os.path.join(base, "..", "fake-calls.log"), "a")
    log.write(json.dumps({"jailer": sys.argv[1:]}) + "\n")
    log.flush()
    os.chdir(root)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    api = fc_args[fc_args.index("--api-sock") + 1].lstrip("/")
    vmm = Vmm(log, fake)
    threading.Thread(target=serve_api, args=(vmm, api), daemon=True).start()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
