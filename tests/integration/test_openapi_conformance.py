"""api/openapi.yaml against the real spaced: every documented operation is called (its success
and the errors clients meet: malformed ids, unknown ids, paused sandboxes, bad bodies, missing
images), and every answer is checked against the spec: the status is one the operation lists,
the Content-Type one that status documents, and the body validates against its schema (each
line of an NDJSON or JSON Lines stream). A status, content type or body the spec does not
describe fails the test, as does an operation the walk did not reach.

(tests/unit/api/openapi_test.cc checks the other direction: the spec's (method, path) pairs are
exactly the router's.)

Validation uses PyYAML and jsonschema (Debian: python3-yaml, python3-jsonschema), with the
OpenAPI 3.0 dialect mapped onto JSON Schema draft 4 (`nullable`, `format: byte/binary`).
"""

import base64
import copy
import io
import json
import os
import re
import tarfile
import time
import unittest

from harness import REPO, SpaceTestCase, http_request

try:
    import jsonschema
    import yaml
except ImportError as e:  # pragma: no cover - install-deps installs both
    raise SystemExit("test_openapi_conformance needs python3-yaml and python3-jsonschema "
                     "(scripts/install-deps.sh): %s" % e)

SPEC_PATH = os.path.join(REPO, "api", "openapi.yaml")


def to_json_schema(node):
    """OpenAPI 3.0 schema -> JSON Schema draft 4: `nullable: true` adds null to the type (and to
    enum, oneOf, allOf via anyOf); OpenAPI-only keywords are dropped."""
    if isinstance(node, list):
        return [to_json_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items()
           if k not in ("nullable", "example", "x-space-op", "discriminator", "xml",
                        "externalDocs", "deprecated", "readOnly", "writeOnly")}
    if out.get("format") in ("byte", "binary", "date-time"):
        out.pop("format")
    if node.get("nullable"):
        if "type" in out:
            t = out["type"]
            out["type"] = (t if isinstance(t, list) else [t]) + ["null"]
            if "enum" in out:
                out["enum"] = list(out["enum"]) + [None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


class Spec:
    def __init__(self, path):
        with open(path) as f:
            self.raw = yaml.safe_load(f)
        self.doc = to_json_schema(copy.deepcopy(self.raw))
        self.resolver = jsonschema.RefResolver.from_schema(self.doc)
        self.ops = {}  # (METHOD, template) -> operation
        for template, item in self.raw["paths"].items():
            for method, op in item.items():
                if method in ("get", "put", "post", "delete", "patch", "head"):
                    self.ops[(method.upper(), template)] = op

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            assert ref.startswith("#/"), ref
            cur = self.raw
            for part in ref[2:].split("/"):
                cur = cur[part]
            node = cur
        return node

    def validate(self, schema, value, where):
        schema = to_json_schema(schema)
        v = jsonschema.Draft4Validator(schema, resolver=self.resolver)
        errors = sorted(v.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            raise AssertionError("%s: %s at %s (body: %s)" % (
                where, e.message, "/".join(str(p) for p in e.path) or "(top)",
                json.dumps(value)[:400]))


class OpenApiConformanceTest(SpaceTestCase):
    @classmethod
    def prepare_class(cls):
        cls.spec = Spec(SPEC_PATH)
        cls.reached = {}    # (METHOD, template) -> set of statuses seen
        cls.problems = []

    # -- calling and checking -----------------------------------------------------------------

    def hit(self, method, template, path, body=None, headers=None, expect=None, timeout=120):
        """Calls the API and checks the answer against operation (method, template)."""
        r = http_request(self.daemon.socket, method, path, body=body, headers=headers,
                         timeout=timeout)
        key = (method, template)
        self.assertIn(key, self.spec.ops, "not an operation of the spec: %s %s" % key)
        self.reached.setdefault(key, set()).add(r.status)
        where = "%s %s -> %d" % (method, path, r.status)
        if expect is not None:
            self.assertEqual(r.status, expect, "%s: %s" % (where, r.body[:300]))
        try:
            self.check(self.spec.ops[key], r, where)
        except AssertionError as e:
            self.problems.append(str(e))
        return r

    def check(self, op, r, where):
        responses = op.get("responses", {})
        doc = responses.get(str(r.status)) or responses.get("default")
        if doc is None:
            raise AssertionError("%s: status %d is not documented (documented: %s); body: %s" % (
                where, r.status, ", ".join(sorted(responses)), r.body[:200]))
        doc = self.spec.deref(doc)
        content = doc.get("content")
        ctype = (r.headers.get("Content-Type") or r.headers.get("content-type") or "")
        ctype = ctype.split(";")[0].strip()
        if not content:
            if r.body:
                raise AssertionError("%s: a body (%s, %d bytes) where the spec documents none"
                                     % (where, ctype, len(r.body)))
            return
        media = {k.split(";")[0].strip(): v for k, v in content.items()}
        if ctype not in media:
            raise AssertionError("%s: Content-Type %r is not documented (documented: %s)"
                                 % (where, ctype, ", ".join(content)))
        schema = media[ctype].get("schema")
        if schema is None:
            return
        if ctype == "application/json":
            self.spec.validate(schema, json.loads(r.body), where)
        elif ctype in ("application/x-ndjson", "application/jsonl"):
            for line in r.body.splitlines():
                if line.strip():
                    self.spec.validate(schema, json.loads(line), where + " (a line)")

    # -- the walk -----------------------------------------------------------------------------

    def test_every_operation_answers_as_documented(self):
        S, SID = "/v1/sandboxes", "/v1/sandboxes/{id}"
        self.hit("GET", "/v1/health", "/v1/health", expect=200)
        self.hit("GET", "/v1/doctor", "/v1/doctor", expect=200)
        self.hit("GET", "/metrics", "/metrics", expect=200)
        node = self.hit("GET", "/v1/node", "/v1/node", expect=200).json
        self.assertEqual(node["name"], "")  # a single host: no node name
        self.hit("POST", "/v1/node/drain", "/v1/node/drain?exit=maybe", expect=400)
        self.hit("POST", "/v1/node/drain", "/v1/node/drain", {"bogus": 1}, expect=400)
        # What any route may answer before its handler runs: a target that is not well-formed
        # (400) and a request header over 16 KiB (413).
        self.hit("GET", "/v1/health", "/v1/health?x=%zz", expect=400)
        self.hit("GET", "/v1/health", "/v1/health", None, {"X-Big": "a" * (17 << 10)}, expect=413)

        # Sandboxes.
        sid = self.hit("POST", S, S, {"memory": "128M", "env": {"A": "1"}}, expect=201).json["id"]
        self.known_ids.add(sid)
        self.hit("POST", S, S, {"memory": "1X"}, expect=400)
        self.hit("POST", S, S, {"memory": "1E"}, expect=400)
        self.hit("POST", S, S, {"cpus": 4096}, expect=400)
        self.hit("POST", S, S, {"bogus": 1}, expect=400)
        self.hit("POST", S, S, {"image": "no-such-image"})
        self.hit("POST", S, S, "{not json", headers={"Content-Type": "application/json"})
        self.hit("GET", S, S, expect=200)
        base = "%s/%s" % (S, sid)
        self.hit("GET", SID, base, expect=200)
        self.hit("GET", SID, S + "/sb_nothere", expect=404)
        self.hit("GET", SID, S + "/-bad", expect=400)
        self.hit("POST", SID + "/timeout", base + "/timeout", {"timeout": "1h"}, expect=200)
        PT = SID + "/ports/{port}"  # the 101 itself: test_ports.py (http.client cannot tunnel)
        self.hit("POST", PT, base + "/ports/8080", expect=400)  # no Upgrade header
        self.hit("POST", PT, base + "/ports/70000", None, {"Connection": "Upgrade", "Upgrade": "tcp"},
                 expect=400)
        self.hit("POST", PT, base + "/ports/9", None, {"Connection": "Upgrade", "Upgrade": "tcp"},
                 expect=503)  # nothing listens
        self.hit("POST", SID + "/timeout", base + "/timeout", {"timeout": -1}, expect=400)
        self.hit("POST", S, S, {"idle_timeout": "10m"}, expect=201)

        # Exec: streamed, detached, bad, unknown.
        E = SID + "/exec"
        self.hit("POST", E, base + "/exec", {"cmd": ["sh", "-c", "echo o; echo e >&2; exit 2"]},
                 expect=200)
        self.hit("POST", E, base + "/exec", {"cmd": ["/no/such"]}, expect=200)
        self.hit("POST", E, base + "/exec", {"cmd": ["sleep", "60"], "detach": True}, expect=202)
        self.hit("POST", E, base + "/exec", {"cmd": []}, expect=400)
        # A terminal (the 101 itself: test_terminal.py; http.client cannot speak it).
        self.hit("POST", E, base + "/exec", {"cmd": ["true"], "detach": True},
                 {"Connection": "Upgrade", "Upgrade": "space-terminal"}, expect=400)
        self.hit("POST", E, base + "/exec", {"cmd": ["true"], "tty": True, "rows": 5000},
                 expect=400)
        self.hit("POST", E, base + "/exec", {"cmd": ["tty"], "tty": True}, expect=200)
        self.hit("POST", E, S + "/sb_nothere/exec", {"cmd": ["true"]}, expect=404)
        self.hit("POST", E, S + "/-bad/exec", {"cmd": ["true"]}, expect=400)

        # Processes.
        P, PP = SID + "/processes", SID + "/processes/{pid}"
        # "started" (the 202) comes once the child is forked; its argv is sleep's once its
        # execve is through, which a loaded host may take a moment for.
        sleeper = None
        for _ in range(50):
            procs = self.hit("GET", P, base + "/processes", expect=200).json["processes"]
            found = [p["pid"] for p in procs if (p.get("argv") or [None])[0] == "sleep"]
            if found:
                sleeper = found[0]
                break
            time.sleep(0.1)
        self.assertIsNotNone(sleeper, "the detached sleep is not in %r" % procs)
        self.hit("DELETE", PP, "%s/processes/%d?signal=0" % (base, sleeper))
        self.hit("DELETE", PP, "%s/processes/%d?signal=99" % (base, sleeper), expect=400)
        # Detached commands: logs (kept, followed) and wait.
        L, W = PP + "/logs", PP + "/wait"
        self.hit("GET", W, "%s/processes/%d/wait?timeout=0.1" % (base, sleeper), expect=200)
        self.hit("GET", L, "%s/processes/%d/logs" % (base, sleeper), expect=200)
        self.hit("DELETE", PP, "%s/processes/%d" % (base, sleeper), expect=204)
        self.hit("GET", W, "%s/processes/%d/wait" % (base, sleeper), expect=200)
        talker = self.hit("POST", E, base + "/exec", {
            "cmd": ["sh", "-c", "echo o; echo e >&2; exit 3"], "detach": True},
            expect=202).json["pid"]
        self.hit("GET", L, "%s/processes/%d/logs?follow=true" % (base, talker), expect=200)
        self.hit("GET", W, "%s/processes/%d/wait?timeout=30" % (base, talker), expect=200)
        self.hit("GET", W, "%s/processes/%d/wait?timeout=soon" % (base, talker), expect=400)
        self.hit("GET", L, "%s/processes/%d/logs?follow=maybe" % (base, talker), expect=400)
        self.hit("GET", L, "%s/processes/1/logs" % base, expect=404)
        self.hit("GET", W, "%s/processes/0/wait" % base, expect=400)
        self.hit("GET", W, S + "/sb_nothere/processes/5/wait", expect=404)
        self.hit("DELETE", PP, "%s/processes/4000000" % base)
        self.hit("GET", P, S + "/sb_nothere/processes", expect=404)

        # Files.
        F = SID + "/files"
        octet = {"Content-Type": "application/octet-stream"}
        self.hit("PUT", F, base + "/files?path=/root/d/a.txt&mode=0640&parents=true", b"hello", octet,
                 expect=204)
        self.hit("PUT", F, base + "/files?path=relative", b"x", octet, expect=400)
        self.hit("PUT", F, S + "/sb_nothere/files?path=/x", b"x", octet, expect=404)
        tar_buf = io.BytesIO()
        with tarfile.open(fileobj=tar_buf, mode="w") as t:
            info = tarfile.TarInfo("b.txt")
            info.size = 2
            t.addfile(info, io.BytesIO(b"hi"))
        self.hit("PUT", F, base + "/files?path=/root/d", tar_buf.getvalue(),
                 {"Content-Type": "application/x-tar"}, expect=204)
        self.hit("GET", F, base + "/files?path=/root/d/a.txt", expect=200)
        self.hit("GET", F, base + "/files?path=/root/d", expect=200)
        self.hit("GET", F, base + "/files?path=/root/d/a.txt&stat=true", expect=200)
        self.hit("GET", F, base + "/files?path=/root/d&list=true", expect=200)
        self.hit("GET", F, base + "/files?path=/root/d/a.txt&list=true", expect=400)
        self.hit("GET", F, base + "/files?path=/root/nothing", expect=404)
        self.hit("GET", F, base + "/files", expect=400)
        self.hit("DELETE", F, base + "/files?path=/root/d/b.txt", expect=204)
        self.hit("DELETE", F, base + "/files?path=/root/nothing", expect=404)
        self.hit("DELETE", F, base + "/files?path=/root/d", expect=400)

        # Diff, audit.
        self.hit("GET", SID + "/diff", base + "/diff", expect=200)
        self.hit("GET", SID + "/diff", S + "/sb_nothere/diff", expect=404)
        A = SID + "/audit"
        self.hit("GET", A, base + "/audit", expect=200)
        self.hit("GET", A, base + "/audit?format=jsonl", expect=200)
        self.hit("GET", A, base + "/audit?verify=true", expect=200)
        self.hit("GET", A, base + "/audit?limit=-1", expect=400)
        self.hit("GET", A, S + "/sb_nothere/audit", expect=404)

        # Paused: what still works and what is refused.
        self.hit("POST", SID + "/pause", base + "/pause", expect=200)
        self.hit("POST", SID + "/pause", base + "/pause")
        self.hit("POST", E, base + "/exec", {"cmd": ["true"]}, expect=409)
        self.hit("GET", P, base + "/processes")
        self.hit("GET", F, base + "/files?path=/root/d/a.txt")
        self.hit("PUT", F, base + "/files?path=/root/p.txt", b"x", octet)
        self.hit("DELETE", F, base + "/files?path=/root/d/a.txt")
        self.hit("DELETE", PP, "%s/processes/1" % base)
        self.hit("DELETE", PP, "%s/processes/2" % base, expect=409)  # paused: resume first
        self.hit("GET", SID + "/diff", base + "/diff")
        self.hit("POST", SID + "/snapshots", base + "/snapshots", expect=201)
        self.hit("POST", SID + "/resume", base + "/resume", expect=200)
        self.hit("POST", SID + "/resume", base + "/resume")
        self.hit("POST", SID + "/pause", S + "/sb_nothere/pause", expect=404)

        # Snapshots.
        SN = SID + "/snapshots"
        snap = self.hit("POST", SN, base + "/snapshots", {"name": "conf-one"}, expect=201).json
        self.hit("POST", SN, base + "/snapshots", {"name": "conf-one"}, expect=409)
        self.hit("POST", SN, base + "/snapshots", {"name": "snap_bad"}, expect=400)
        self.hit("POST", SN, base + "/snapshots", expect=201)
        self.hit("GET", SN, base + "/snapshots", expect=200)
        self.hit("GET", "/v1/snapshots", "/v1/snapshots", expect=200)
        one = "/v1/snapshots/{snap}"
        self.hit("GET", one, "/v1/snapshots/" + snap["id"], expect=200)
        self.hit("GET", one, "/v1/snapshots/conf-one", expect=200)
        self.hit("GET", one, "/v1/snapshots/nothing", expect=404)
        R = SID + "/rollback"
        self.hit("POST", R, base + "/rollback", {"snapshot": "conf-one"}, expect=200)
        self.hit("POST", R, base + "/rollback", {"snapshot": "nothing"}, expect=404)
        self.hit("POST", R, base + "/rollback", {}, expect=400)
        RS = "/v1/snapshots/{snap}/restore"
        restored = self.hit("POST", RS, "/v1/snapshots/conf-one/restore", expect=201).json["id"]
        self.known_ids.add(restored)
        self.hit("POST", RS, "/v1/snapshots/nothing/restore", expect=404)
        self.hit("DELETE", "/v1/sandboxes/{id}", "%s/%s" % (S, restored), expect=204)
        self.hit("DELETE", one, "/v1/snapshots/conf-one", expect=204)
        self.hit("DELETE", one, "/v1/snapshots/conf-one", expect=404)

        # Images.
        I = "/v1/images/{name}"
        self.hit("GET", "/v1/images", "/v1/images", expect=200)
        rootfs = io.BytesIO()
        with tarfile.open(fileobj=rootfs, mode="w") as t:
            for d in ("bin", "etc", "root", "tmp"):
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                t.addfile(info)
        self.hit("PUT", I, "/v1/images/conf-img", rootfs.getvalue(),
                 {"Content-Type": "application/x-tar"}, expect=201)
        self.hit("PUT", I, "/v1/images/conf-img", rootfs.getvalue(),
                 {"Content-Type": "application/x-tar"}, expect=409)
        self.hit("POST", S, S, {"runtime": "qemu", "image": "conf-img"}, expect=409)  # no VM disk
        self.hit("GET", I, "/v1/images/conf-img", expect=200)
        self.hit("GET", I, "/v1/images/host", expect=200)
        self.hit("GET", I, "/v1/images/nothing", expect=404)
        self.hit("PUT", I, "/v1/images/conf-bad", b"not a tar",
                 {"Content-Type": "application/x-tar"}, expect=400)
        self.hit("POST", I + "/vm", "/v1/images/nothing/vm", expect=404)
        # Builds (the builds themselves: test_image_build.py). Refused parameters, then a build
        # of a Dockerfile without RUN steps (FROM the image just imported): a stream ending with
        # the image.
        B, TAR = I + "/build", {"Content-Type": "application/x-tar"}
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as t:
            dockerfile = b"FROM conf-img\nENV CONF=1\nWORKDIR /srv\n"
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            t.addfile(info, io.BytesIO(dockerfile))
        context = context.getvalue()
        self.hit("POST", B, "/v1/images/conf-built/build?dockerfile=..%2FDockerfile", context,
                 TAR, expect=400)
        self.hit("POST", B, "/v1/images/conf-built/build?step_timeout=0", context, TAR,
                 expect=400)
        self.hit("POST", B, "/v1/images/conf-built/build?build_args=%5B%5D", context, TAR,
                 expect=400)
        self.hit("POST", B, "/v1/images/conf-img/build", context, TAR, expect=409)  # imported
        built = self.hit("POST", B, "/v1/images/conf-built/build", context, TAR)
        if built.status == 200:
            last = json.loads(built.body.strip().splitlines()[-1])
            self.assertEqual(last["type"], "done", built.body[-500:])
            self.assertEqual(last["image"]["format"], "dockerfile")
            self.hit("DELETE", I, "/v1/images/conf-built", expect=204)
        self.hit("POST", I + "/vm", "/v1/images/host/vm")
        self.hit("DELETE", I, "/v1/images/conf-img", expect=204)
        self.hit("DELETE", I, "/v1/images/conf-img", expect=404)

        # Tokens.
        T = "/v1/tokens"
        tok = self.hit("POST", T, T, {"name": "conf", "profiles": ["test"], "ops": ["read"],
                                      "ttl": "1h"}, expect=201).json
        self.hit("POST", T, T, {"name": "conf"}, expect=400)
        self.hit("GET", T, T, expect=200)
        self.hit("DELETE", T + "/{id}", "%s/%s" % (T, tok["id"]), expect=204)
        self.hit("DELETE", T + "/{id}", T + "/000000000000", expect=404)
        # A revoked token, and a malformed one.
        self.hit("POST", S, S, {}, {"Authorization": "Bearer " + tok["token"]}, expect=401)
        self.hit("GET", S, S, None, {"Authorization": "Bearer nonsense"}, expect=401)

        # Destroy, and what a destroyed sandbox answers.
        self.hit("DELETE", SID, base, expect=204)
        self.hit("DELETE", SID, base, expect=409)  # its record stays: "was destroyed"
        self.hit("POST", E, base + "/exec", {"cmd": ["true"]}, expect=409)
        self.hit("GET", F, base + "/files?path=/root", expect=409)
        self.hit("DELETE", PP, "%s/processes/2" % base, expect=409)
        self.hit("GET", SID, base, expect=200)
        self.hit("GET", A, base + "/audit", expect=200)
        self.hit("GET", SN, base + "/snapshots", expect=200)

        # Every operation with a malformed and with an unknown (well-formed) path parameter.
        bad = {"id": "-bad", "snap": "-bad", "name": "-bad", "pid": "0", "port": "0"}
        unknown = {"id": "sb_000000000000", "snap": "snap_000000000000000000000000",
                   "name": "no-such-image", "pid": "4000000", "port": "8080"}
        for (method, template), op in sorted(self.spec.ops.items()):
            if "{" not in template:
                continue
            body, headers = None, None
            if method in ("POST", "PUT"):
                body, headers = b"{}", {"Content-Type": "application/json"}
                if template.endswith("/exec"):
                    body = b'{"cmd": ["true"]}'
            for values in (bad, unknown):
                path = template
                for k, v in values.items():
                    path = path.replace("{%s}" % k, v)
                if template.endswith("/files"):
                    path += "?path=/tmp"
                if template.endswith("/rollback"):
                    body = b'{"snapshot": "nothing"}'
                self.hit(method, template, path, body, headers)

        # Last, since a drained spaced takes no more sandboxes: every sandbox is snapshotted
        # and destroyed (no shared store here), and spaced keeps running (no exit).
        report = self.hit("POST", "/v1/node/drain", "/v1/node/drain", {}, expect=200).json
        self.assertEqual(report["left_running"], 0, report)
        self.assertTrue(all(s["destroyed"] for s in report["sandboxes"]), report)
        self.hit("POST", S, S, {}, expect=503)

        missing = sorted("%s %s" % k for k in self.spec.ops if k not in self.reached)
        self.assertEqual(missing, [], "operations the walk never called")
        self.assertEqual(self.problems, [], "\n" + "\n".join(self.problems))


if __name__ == "__main__":
    unittest.main()
