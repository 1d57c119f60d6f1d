"""`space image build` end to end (docs/images.md, "Building from a Dockerfile"): a Dockerfile
like an agent team's (FROM a Debian-like Python + Node image, pip and npm installs from a local
PEP 503 index and a local npm registry that want a token, COPY of the team's tools honouring
.dockerignore, ENV, WORKDIR, USER, CMD) builds with each RUN in a sandbox of the build profile:
the registries are reached only through the egress gateway, which injects the token outside the
sandbox, so no trace of it is in the image. The built image runs from the CLI, both SDKs and the
E2B door; a second build is all cache hits and a changed COPY source reruns that step and those
after it only. Hostile or broken Dockerfiles are refused with their reason and leave nothing
(no image, staging directory, sandbox, mount or cgroup); spaced killed at each build failpoint
leaves nothing either and the build then succeeds; a built image becomes a VM disk.

Fixtures (base images, the package registries): build_fixtures.py. The figures a note quotes
(import and build times, image sizes) are printed.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest
import uuid

import build_fixtures as bf
from e2b_support import E2B_DIR, E2bDoorTestCase
from harness import REPO, SPACE, SpaceTestCase, main, mounted_below, npm_ci, wait_for
from test_oci_import import du_bytes
from vm_image import skip_without_vm

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import space_sandbox  # noqa: E402

TS_SDK = os.path.join(REPO, "sdk", "typescript")
E2B_SDK = pathlib.Path(E2B_DIR, "node_modules", "e2b", "dist", "index.mjs").as_uri()

# Random per run, so finding one anywhere means this run leaked it.
PYPI_TOKEN = "pypi-tok-" + uuid.uuid4().hex
NPM_TOKEN = "npm-tok-" + uuid.uuid4().hex


def registry_config(index):
    """Profiles "test" (no egress) and "build" (the two registries), each registry's token a
    secret of "build" bound to its host and set as `Authorization: Bearer` by the gateway."""
    return {
        "profiles": {
            "test": {},
            "build": {"egress": {"allow": ["pypi.example.test", "npm.example.test"],
                                 "allow_networks": ["127.0.0.2/32"]}},
        },
        "secrets": {
            "PYPI_TOKEN": {"value": PYPI_TOKEN, "hosts": ["pypi.example.test"],
                           "profiles": ["build"], "header": "Authorization",
                           "format": "Bearer {}"},
            "NPM_TOKEN": {"value": NPM_TOKEN, "hosts": ["npm.example.test"],
                          "profiles": ["build"], "header": "Authorization",
                          "format": "Bearer {}"},
        },
        "gateway": {"resolve": dict(index.resolve(),
                                    **{"denied.example.test:80": "%s:%d" % (bf.HOST, index.port),
                                       "denied.example.test:443": "%s:%d" % (bf.HOST,
                                                                             index.port)}),
                    "ca_files": [index.certs["ca"]]},
    }


def write_tree(root, files):
    """Writes {relpath: text} under root (and makes it); returns root."""
    for rel, text in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            fh.write(text)
    return root


def parse_events(out):
    """The NDJSON events `space image build --json` prints (the API's stream)."""
    events = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def steps(events):
    """{step number: (instruction, cached)} of the "step" events."""
    return {e["step"]: (e.get("instruction", ""), e.get("cached"))
            for e in events if e.get("type") == "step"}


def grep_tree(root, needle):
    """Files under root (symlinks not followed) whose bytes contain `needle`."""
    p = subprocess.run(["grep", "-rlF", "-D", "skip", "--", needle, root],
                       capture_output=True, text=True)
    return p.stdout.split()


class BuildCase:
    """What both classes share: running a build and looking at what it leaves."""

    def setUp(self):
        super().setUp()
        self.images_dir = os.path.join(self.daemon.state_dir, "images")

    def name(self, what):
        return "b-%s-%s" % (what, uuid.uuid4().hex[:6])

    def build(self, name, context, *opts, dockerfile=None, timeout=300):
        """`space image build NAME [-f DOCKERFILE] --json OPTS CONTEXT`: (rc, events, stdout,
        stderr, seconds)."""
        args = ["image", "build", name, "--json"]
        if dockerfile:
            args += ["-f", dockerfile]
        t0 = time.monotonic()
        rc, out, err = self.space(*args, *opts, context, timeout=timeout)
        return rc, parse_events(out), out, err, time.monotonic() - t0

    def build_ok(self, name, context, *opts, **kw):
        rc, events, out, err, secs = self.build(name, context, *opts, **kw)
        self.assertEqual(rc, 0, "build of %s failed (rc %d)\nstdout: %s\nstderr: %s" %
                         (name, rc, out[-4000:], err[-4000:]))
        self.assertEqual(events[-1].get("type"), "done", events[-3:])
        return events, secs

    def image_root(self, name):
        """The image's tree in spaced's state directory (images/NAME/rootfs*)."""
        d = os.path.join(self.images_dir, name)
        roots = [os.path.join(d, n) for n in os.listdir(d) if n.startswith("rootfs")]
        self.assertEqual(len(roots), 1, roots)
        self.assertTrue(os.path.isdir(os.path.join(roots[0], "etc")), roots)
        return roots[0]

    def image_names(self):
        return [i.get("name") for i in self.api_list("/v1/images", "images")]

    def staging(self):
        """What a build may only leave while it runs: staging and install directories."""
        try:
            names = os.listdir(self.images_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n.startswith((".build-", ".install-")))

    def image_entries(self):
        """images/ without the build cache (whose entries a failed build may keep)."""
        try:
            names = os.listdir(self.images_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if not n.startswith(".cache-"))


class BusyboxBuildTest(BuildCase, SpaceTestCase):
    """A small busybox base: refusals, a failing RUN, egress off the allowlist, spaced killed
    mid-build, and build-vm of a built image."""

    @classmethod
    def daemon_config(cls):
        cls.index = bf.PackageIndex(os.path.join(cls.tmp, "index"), PYPI_TOKEN,
                                    NPM_TOKEN).start()
        return registry_config(cls.index)

    @classmethod
    def prepare_class(cls):
        cls.base = "bb-base-" + uuid.uuid4().hex[:6]
        tarball = bf.busybox_base(os.path.join(cls.tmp, "busybox.tar.gz"))
        p = subprocess.run([SPACE, "image", "import", cls.base, tarball], capture_output=True,
                           text=True, timeout=120,
                           env=dict(os.environ, SPACE_SOCKET=cls.daemon.socket))
        if p.returncode != 0:
            raise AssertionError("importing the busybox base: %s %s" % (p.stdout, p.stderr))

    @classmethod
    def release_class(cls):
        cls.index.stop()

    def context(self, dockerfile, files=None, name=None):
        root = os.path.join(self.tmp, name or ("ctx-" + uuid.uuid4().hex[:8]))
        write_tree(root, dict({"Dockerfile": dockerfile.replace("BASE", self.base)},
                              **(files or {})))
        return root

    def assert_refused(self, dockerfile, reasons, files=None, setup=None, opts=(), name=None):
        """Building `dockerfile` fails with one of `reasons` in what the CLI prints, and leaves
        no image, staging directory, sandbox, mount, cgroup or process."""
        ctx = self.context(dockerfile, files)
        if setup:
            setup(ctx)
        taken = name is not None
        name = name or self.name("refused")
        before = self.snapshot_host()
        entries = self.image_entries()
        rc, events, out, err, _ = self.build(name, ctx, *opts, timeout=180)
        text = out + err
        self.assertNotEqual(rc, 0, "the build was not refused:\n%s" % text[-3000:])
        self.assertTrue(any(r.lower() in text.lower() for r in reasons),
                        "expected one of %r in:\n%s" % (reasons, text[-3000:]))
        if taken:  # the image of that name is still whole
            self.assertEqual(self.space("run", "--image", name, "--", "true")[0], 0)
        else:
            self.assertNotIn(name, self.image_names())
            self.assertFalse(os.path.exists(os.path.join(self.images_dir, name)))
        self.assertEqual(self.staging(), [])
        self.assertEqual(self.image_entries(), entries)
        self.assertEqual(self.list_ids(), [])
        self.assertEqual(mounted_below(self.daemon.state_dir), [])
        self.assert_no_leaks(before)
        errors = [e for e in events if e.get("type") == "error"]
        print("\n  refused: %s" % (errors[-1]["error"]["message"] if errors else
                                   err.strip().splitlines()[-1] if err.strip() else "?"),
              end="")
        return text, events

    # -- refusals ------------------------------------------------------------------------------

    def test_unknown_instruction(self):
        self.assert_refused("FROM BASE\nRUN true\nFROBNICATE now\n",
                            ["FROBNICATE"])

    def test_multi_stage_refused(self):
        self.assert_refused("FROM BASE AS builder\nRUN true\n", ["multi-stage", "stage"])
        self.assert_refused("FROM BASE\nCOPY --from=builder /a /b\n", ["multi-stage", "--from"])
        self.assert_refused("FROM BASE\nRUN true\nFROM BASE\n", ["multi-stage", "FROM"])

    def test_from_unknown_image_and_host(self):
        missing = "no-such-image-" + uuid.uuid4().hex[:6]
        self.assert_refused("FROM %s\nRUN true\n" % missing, [missing])
        self.assert_refused("FROM host\nRUN true\n", ["host"])

    def test_add_url_refused(self):
        self.assert_refused("FROM BASE\nADD http://denied.example.test/x.tar.gz /opt/\n",
                            ["URL", "http://"])

    def test_copy_outside_context_refused(self):
        secret = os.path.join(self.tmp, "outside-" + uuid.uuid4().hex[:6])
        with open(secret, "w") as fh:
            fh.write("host file outside the context\n")
        self.assert_refused("FROM BASE\nCOPY ../%s /stolen\n" % os.path.basename(secret),
                            ["outside", "context", ".."])
        self.assert_refused("FROM BASE\nCOPY %s /stolen\n" % secret,
                            ["outside", "context", "not found", "no such", "does not exist"])

    def test_context_symlinks_leading_out_refused(self):
        """Context symlinks to /etc/shadow and to /etc: COPY through them is refused (the link
        leads out of the context), whether the link is the source or a directory on its way."""
        def links(ctx):
            os.symlink("/etc/shadow", os.path.join(ctx, "shadow-link"))
            os.symlink("/etc", os.path.join(ctx, "etc-link"))

        for df in ("FROM BASE\nCOPY shadow-link /stolen\n",
                   "FROM BASE\nCOPY etc-link/passwd /stolen\n",
                   "FROM BASE\nCOPY etc-link/ /stolen/\n"):
            with self.subTest(dockerfile=df):
                self.assert_refused(df, ["symlink", "outside", "leads out"], setup=links)
        # Copying the directory that holds them copies the links as links (as Docker does):
        # inside the image they name the image's own files, never the host's.
        ctx = self.context("FROM BASE\nCOPY . /ctx/\n")
        links(ctx)
        name = self.name("links")
        self.build_ok(name, ctx)
        root = self.image_root(name)
        self.assertEqual(os.readlink(os.path.join(root, "ctx", "shadow-link")), "/etc/shadow")
        self.assertEqual(os.readlink(os.path.join(root, "ctx", "etc-link")), "/etc")
        rc, out, err = self.space("run", "--image", name, "--", "sh", "-c",
                                  "cat /ctx/etc-link/passwd; cat /ctx/shadow-link || echo none")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, bf.PASSWD + "none\n")
        wait_for(lambda: self.space("image", "rm", name)[0] == 0, timeout=30,
                 what="image %s removed" % name)

    def test_name_taken_or_bad(self):
        ctx = self.context("FROM BASE\nRUN true\n")
        self.assert_refused("FROM BASE\nRUN true\n", ["exists", "already"],
                            name=self.base)
        for bad in ("Upper-Case", "team/agent", "agent:latest", "x" * 65):
            with self.subTest(name=bad):
                rc, events, out, err, _ = self.build(bad, ctx)
                self.assertNotEqual(rc, 0, (out, err))
                self.assertIn("name", (out + err).lower())
                print("\n  refused %r: %s" % (bad, err.strip()[-200:]), end="")
                self.assertNotIn(bad, self.image_names())
        self.assertEqual(self.staging(), [])
        self.assertEqual(self.list_ids(), [])

    def test_step_timeout(self):
        text, events = self.assert_refused("FROM BASE\nRUN echo started; sleep 60\n",
                                           ["timeout", "longer than"], opts=("--step-timeout",
                                                                             "1s"))
        self.assertIn("step 2/2", text)

    def test_run_that_fails_names_step_and_code(self):
        text, events = self.assert_refused(
            "FROM BASE\nRUN echo first-step-ran\nRUN echo about to fail; exit 3\nRUN true\n",
            ["exit code 3", "exited with 3", "status 3", "code 3"])
        errors = [e for e in events if e.get("type") == "error"]
        message = errors[-1]["error"]["message"] if errors else text
        self.assertTrue(any(w in message for w in ("step 3", "line 3", "about to fail")),
                        "the message does not name the failing step: " + message)
        out = "".join(e.get("data", "") for e in events if e.get("type") == "output")
        self.assertIn("about to fail", out, "the failing step's output was streamed")
        self.assertNotIn(3, [e.get("step") for e in events if e.get("type") == "step_done"])

    def test_egress_off_the_allowlist_fails_the_step(self):
        text, events = self.assert_refused(
            "FROM BASE\nRUN wget -q -O /tmp/x http://denied.example.test/simple/ "
            "&& echo FETCHED\n",
            ["exit code", "exited", "status"])
        output = "".join(e.get("data", "") for e in events if e.get("type") == "output")
        self.assertNotIn("FETCHED", output)
        self.assertIn("403", output, "wget did not report the gateway's refusal")
        self.assertFalse([r for r in self.index.requests if r[0] == "denied.example.test"],
                         "the upstream was reached for a host off the allowlist")

    def test_dockerfile_outside_the_context_and_build_args(self):
        """-f names a Dockerfile outside the context (sent along, never part of the context),
        --build-arg sets an ARG, and .dockerignore keeps files out of COPY ."""
        ctx = self.context("", {".dockerignore": "**/*.secret\n", "app/main.sh": "echo main\n",
                                "app/key.secret": "not for the image\n",
                                "top.secret": "nor this\n"})
        os.unlink(os.path.join(ctx, "Dockerfile"))
        dockerfile = os.path.join(self.tmp, "elsewhere-%s.Dockerfile" % uuid.uuid4().hex[:6])
        with open(dockerfile, "w") as fh:
            fh.write("FROM %s\nARG GREETING=default\nRUN echo \"$GREETING\" > /greeting\n"
                     "COPY . /ctx/\n" % self.base)
        name = self.name("outside-df")
        self.build_ok(name, ctx, "--build-arg", "GREETING=given", dockerfile=dockerfile)
        out = self.space_ok("run", "--image", name, "--", "sh", "-c",
                            "cat /greeting; cd /ctx && find . | sort")
        self.assertEqual(out.splitlines(), ["given", ".", "./.dockerignore", "./app",
                                            "./app/main.sh"])
        wait_for(lambda: self.space("image", "rm", name)[0] == 0, timeout=30,
                 what="image %s removed" % name)

    def test_no_cache_runs_every_step(self):
        ctx = self.context("FROM BASE\nRUN echo once-%s > /m\nRUN cat /m\n" % uuid.uuid4().hex)
        first, second = self.name("nc1"), self.name("nc2")
        events, _ = self.build_ok(first, ctx)
        runs = {n: c for n, (ins, c) in steps(events).items() if ins.startswith("RUN")}
        self.assertEqual(len(runs), 2, steps(events))
        self.assertFalse(any(runs.values()), steps(events))
        events, _ = self.build_ok(second, ctx, "--no-cache")
        runs = {n: c for n, (ins, c) in steps(events).items() if ins.startswith("RUN")}
        self.assertEqual(len(runs), 2, steps(events))
        self.assertFalse(any(runs.values()), "--no-cache took steps from the cache")
        self.assertIn("once-", "".join(e.get("data", "") for e in events
                                       if e.get("type") == "output"))
        # Without --json: Docker's plain progress on stderr, every step a cache hit.
        third = self.name("nc3")
        rc, out, err = self.space("image", "build", third, ctx, timeout=120)
        self.assertEqual(rc, 0, err)
        self.assertEqual(re.findall(r"^Step (\d+)/3 : ", err, re.M), ["1", "2", "3"], err)
        self.assertEqual(err.count("---> cached"), 3, err)
        self.assertFalse([l for l in (err + out).splitlines() if l.startswith("once-")],
                         "a cached step's output was shown again")
        for n in (first, second, third):
            wait_for(lambda: self.space("image", "rm", n)[0] == 0, timeout=30,
                     what="image %s removed" % n)

    # -- crash safety --------------------------------------------------------------------------

    def test_killed_mid_build_leaves_nothing(self):
        """spaced killed at each build failpoint: after a restart no image, staging directory,
        build sandbox, mount or cgroup is left, and the same build then succeeds."""
        for failpoint in ("image.build.after_run", "image.build.after_step",
                          "image.build.after_install"):
            with self.subTest(failpoint=failpoint):
                ctx = self.context("FROM BASE\nRUN echo %s > /marker\nENV DONE=1\n"
                                   % uuid.uuid4().hex)
                name = self.name("killed")
                before = self.snapshot_host()
                entries = self.image_entries()
                self.daemon.stop(signal.SIGTERM)
                self.daemon.extra_env = {"SPACE_FAILPOINTS": failpoint}
                self.daemon.start()
                rc, events, out, err, _ = self.build(name, ctx, timeout=120)
                self.assertNotEqual(rc, 0, (out, err))
                self.assertEqual(self.daemon.proc.wait(60), -signal.SIGKILL,
                                 self.daemon.log_tail())
                self.assertIn("failpoint %s: killing" % failpoint, self.daemon.log_text())
                self.daemon.extra_env = {}
                self.daemon.start()
                wait_for(lambda: self.list_ids() == [], timeout=30, what="no build sandbox")
                self.assertNotIn(name, self.image_names())
                self.assertFalse(os.path.exists(os.path.join(self.images_dir, name)))
                self.assertEqual(self.staging(), [])
                self.assertEqual(self.image_entries(), entries)
                self.assertEqual(mounted_below(self.daemon.state_dir), [])
                self.assert_nothing_left(before)
                events, _ = self.build_ok(name, ctx, timeout=120)
                rc, out, err = self.space("run", "--image", name, "--", "cat", "/marker")
                self.assertEqual(rc, 0, err)
                self.assertEqual(len(out.strip()), 32)
                wait_for(lambda: self.space("image", "rm", name)[0] == 0, timeout=30,
                         what="image %s removed" % name)

    def assert_nothing_left(self, before, timeout=15):
        """assert_no_leaks across a restart of spaced (whose fds are counted anew)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.leaks(before)
            for key in ("daemon_fds", "daemon_namespaces"):
                found.pop(key, None)
            if not found or time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        self.assertEqual(found, {}, "left by the killed build")

    # -- VM disk -------------------------------------------------------------------------------

    def test_build_vm_of_a_built_image(self):
        if not shutil.which("mke2fs"):
            self.skipTest("e2fsprogs is not installed (scripts/install-deps.sh)")
        ctx = self.context("FROM BASE\nRUN echo vm-marker > /etc/marker\nWORKDIR /srv\n"
                           "USER agent\n")
        name = self.name("vm")
        self.build_ok(name, ctx, timeout=120)
        try:
            rc, out, err = self.space("image", "build-vm", name, "--json", timeout=300)
            self.assertEqual(rc, 0, (out, err))
            disk = json.loads(out)
            self.assertTrue(os.path.isfile(disk["path"]), disk)
            fsck = subprocess.run(["e2fsck", "-fn", disk["path"]], capture_output=True,
                                  text=True, timeout=120)
            self.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)
            cat = subprocess.run(["debugfs", "-R", "cat /etc/marker", disk["path"]],
                                 capture_output=True, text=True, timeout=60).stdout
            self.assertIn("vm-marker", cat)
            print("\n  VM disk of the built image: %.1f MiB" % (os.path.getsize(disk["path"])
                                                              / 2**20), end="")
            try:
                skip_without_vm()
            except unittest.SkipTest as e:
                print(" (not booted: %s)" % e, end="")
                return
            sid = self.create("--image", name, "--runtime", "qemu")
            self.assertEqual(self.exec_ok(sid, "cat", "/etc/marker", timeout=180), "vm-marker\n")
            self.assertEqual(self.exec_ok(sid, "id", "-u").strip(), "1000")
        finally:
            for sid in self.list_ids():
                self.space("rm", "--force", sid)
            wait_for(lambda: self.space("image", "rm", name)[0] == 0, timeout=60,
                     what="image %s removed" % name)


APP_DOCKERFILE = """\
# syntax=docker/dockerfile:1
# An agent team's environment: Python and Node packages from the team's registries, its tools.
FROM BASE
ARG PIP_INDEX=https://pypi.example.test/simple
ARG NPM_REGISTRY=https://npm.example.test/
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \\
    NPM_CONFIG_UPDATE_NOTIFIER=false AGENT_MODE=built
RUN python3 -m pip install --index-url "$PIP_INDEX" spacehello \\
    && python3 -c 'import spacehello; print("pip says", spacehello.GREETING)'
WORKDIR /opt/agent
RUN npm install --no-audit --no-fund --registry "$NPM_REGISTRY" spacehello-js
COPY tools/ /opt/agent/tools/
RUN chown -R agent:agent /opt/agent && echo "built-by-$(id -u)" > /opt/agent/stamp
USER agent
RUN touch /opt/agent/made-by-agent && echo "agent step as $(id -u)"
CMD ["python3", "/opt/agent/tools/hello.py"]
"""

APP_FILES = {
    ".dockerignore": "# not for the image\ntools/secret.txt\n**/*.log\n",
    "tools/hello.py": "import spacehello\nprint(spacehello.GREETING, 'via the image CMD')\n",
    "tools/run.sh": "#!/bin/sh\necho tool ran\n",
    "tools/secret.txt": "this file is in .dockerignore\n",
    "tools/debug.log": "so is this one\n",
}


class PyNodeBuildTest(BuildCase, E2bDoorTestCase):
    """The agent team's Dockerfile on a Debian-like Python + Node base, used from every door."""

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()  # the TCP listener and the E2B door
        cls.index = bf.PackageIndex(os.path.join(cls.tmp, "index"), PYPI_TOKEN,
                                    NPM_TOKEN).start()
        cfg.update(registry_config(cls.index))
        return cfg

    @classmethod
    def prepare_class(cls):
        missing = bf.pynode_available()
        if missing:
            raise unittest.SkipTest("the Python + Node base needs host files: " + missing)
        super().prepare_class()
        cls.base = "pynode-" + uuid.uuid4().hex[:6]
        t0 = time.monotonic()
        layout, size = bf.pynode_layout(os.path.join(cls.tmp, "pynode-layout"))
        t1 = time.monotonic()
        p = subprocess.run([SPACE, "image", "import", cls.base, layout], capture_output=True,
                           text=True, timeout=300,
                           env=dict(os.environ, SPACE_SOCKET=cls.daemon.socket))
        if p.returncode != 0:
            raise AssertionError("importing the python+node base: %s %s" % (p.stdout, p.stderr))
        t2 = time.monotonic()
        print("\n[figures] python+node base: layout of %.1f MiB (2 layers) written in %.1f s, "
              "imported in %.1f s" % (size / 2**20, t1 - t0, t2 - t1))
        cls.ctx = os.path.join(cls.tmp, "app")
        write_tree(cls.ctx, dict(APP_FILES, Dockerfile=APP_DOCKERFILE.replace("BASE", cls.base)))
        cls.app = None  # built once, by the first test that needs it
        cls.app_error = None

    @classmethod
    def release_class(cls):
        cls.index.stop()

    def app_image(self):
        """The app image, built once per class (its events and time kept)."""
        cls = type(self)
        if cls.app_error:
            self.fail("the class's build failed earlier:\n" + cls.app_error)
        if cls.app is None:
            name = "agent-app-" + uuid.uuid4().hex[:6]
            before = self.snapshot_host()
            du_before = du_bytes(self.images_dir)
            rc, events, out, err, secs = self.build(
                name, cls.ctx, "--profile", "build", "--secret", "PYPI_TOKEN",
                "--secret", "NPM_TOKEN", timeout=300)
            if rc != 0 or not events or events[-1].get("type") != "done":
                cls.app_error = "rc %d\nstdout: %s\nstderr: %s" % (rc, out[-4000:], err[-4000:])
                self.fail("building the app image failed:\n" + cls.app_error)
            cls.app, cls.app_events, cls.app_secs = name, events, secs
            self.assertEqual(self.staging(), [])
            self.assert_no_leaks(before)  # the steps' sandboxes are gone
            print("\n[figures] first build of the app image: %.1f s, %.1f MiB more on disk "
                  "(the base's files shared)" % (secs, (du_bytes(self.images_dir) - du_before)
                                                  / 2**20), end="")
        return cls.app

    def run_in(self, name, script):
        rc, out, err = self.space("run", "--image", name, "--", "sh", "-c", script, timeout=120)
        self.assertEqual(rc, 0, "in %s: %s\nstdout: %s\nstderr: %s" % (name, script, out, err))
        return out

    # -- the build -----------------------------------------------------------------------------

    def test_build_and_run(self):
        name = self.app_image()
        events = self.app_events
        kinds = [e["type"] for e in events]
        self.assertEqual(kinds[-1], "done")
        st = steps(events)
        self.assertTrue(st, "no step events: %r" % events[:5])
        self.assertFalse(any(c for _, c in st.values() if _.startswith("RUN")),
                         "a RUN step of the first build came from the cache: %r" % st)
        output = "".join(e.get("data", "") for e in events if e.get("type") == "output")
        self.assertIn("Successfully installed spacehello", output)
        self.assertIn("pip says hello from spacehello", output)
        self.assertIn("added 1 package", output)
        self.assertIn("agent step as 1000", output)
        self.assertNotIn(PYPI_TOKEN, output)
        self.assertNotIn(NPM_TOKEN, output)
        # Each step's output came between its "step" and "step_done".
        for e in events:
            if e.get("type") == "output":
                i = events.index(e)
                begun = [x for x in events[:i] if x.get("type") == "step"]
                self.assertEqual(begun[-1]["step"], e["step"])

        # The image from the CLI: its user, workdir, env, packages and files.
        out = self.run_in(name, "id -u; pwd; echo $AGENT_MODE; "
                          "python3 -c 'import spacehello; print(spacehello.__version__)'; "
                          "node -e 'console.log(require(\"spacehello-js\").version)'; "
                          "cat stamp; stat -c %u made-by-agent tools/hello.py; "
                          "sh tools/run.sh; test -e tools/secret.txt || echo no-secret; "
                          "test -e tools/debug.log || echo no-log; echo ${PIP_INDEX:-no-arg}")
        self.assertEqual(out.splitlines(), [
            "1000", "/opt/agent", "built", "1.0", "1.0.0", "built-by-0", "1000", "1000",
            "tool ran", "no-secret", "no-log", "no-arg"])
        rc, out, err = self.space("run", "--image", name, timeout=120)
        self.assertEqual((rc, out), (0, "hello from spacehello via the image CMD\n"), err)
        view = json.loads(self.space_ok("image", "inspect", name))
        self.assertEqual(view.get("format"), "dockerfile", view)
        self.assertEqual(view["config"]["user"], "agent")
        self.assertEqual(view["config"]["working_dir"], "/opt/agent")
        self.assertEqual(view["config"]["cmd"], ["python3", "/opt/agent/tools/hello.py"])
        self.assertIn("AGENT_MODE=built", view["config"]["env"])
        self.assertIn("BASE_MARKER=pynode", view["config"]["env"])

        # The registries saw the tokens (the gateway put them there), and nothing of them is in
        # the image, its config, the build cache or anywhere in spaced's state directory.
        for host in ("pypi.example.test", "npm.example.test"):
            seen = self.index.seen(host)
            self.assertTrue(seen, "%s was never asked" % host)
            self.assertTrue(all(ok for _, ok in seen), "%s got a request without its token: %r"
                            % (host, seen))
        for token in (PYPI_TOKEN, NPM_TOKEN):
            self.assertEqual(grep_tree(self.daemon.state_dir, token), [])
            self.assertNotIn(token, json.dumps(view))
        self.assertEqual(grep_tree(self.images_dir, "space_ph_"), [],
                         "a build sandbox's placeholder was kept")
        # What spaced puts into each sandbox (its CA, trust bundle, Chromium's policy) is not
        # the steps': none of it is in the image.
        root = self.image_root(name)
        self.assertTrue(os.path.isfile(os.path.join(root, "opt", "agent", "made-by-agent")))
        self.assertFalse(os.path.exists(os.path.join(root, "etc", "space")),
                         "the build sandbox's gateway CA went into the image")
        print("\n[figures] app image: %d files, %.1f MiB; images dir %.1f MiB on disk" % (
            view.get("files", 0), view.get("size_bytes", 0) / 2**20,
            du_bytes(self.images_dir) / 2**20), end="")
        self.assertFalse(os.path.exists(os.path.join(root, "etc", "chromium")),
                         "the build sandbox's Chromium policy directories went into the image")

    def test_cached_rebuild_and_changed_copy(self):
        self.app_image()
        # The same Dockerfile and context, another name: every step from the cache.
        again = self.name("again")
        events, secs = self.build_ok(again, self.ctx, "--profile", "build", "--secret",
                                     "PYPI_TOKEN", "--secret", "NPM_TOKEN")
        st = steps(events)
        self.assertTrue(st and all(c for _, c in st.values()), "not all cached: %r" % st)
        self.assertFalse([e for e in events if e.get("type") == "output"])
        print("\n[figures] app build: first %.1f s, cached %.1f s" % (self.app_secs, secs),
              end="")
        self.assertEqual(self.run_in(again, "python3 -c 'import spacehello'; echo ok"), "ok\n")
        # One COPYed file changed: the steps before the COPY come from the cache, the COPY and
        # every step after it run again.
        ctx2 = os.path.join(self.tmp, "app-changed")
        shutil.copytree(self.ctx, ctx2, symlinks=True)
        with open(os.path.join(ctx2, "tools", "run.sh"), "w") as fh:
            fh.write("#!/bin/sh\necho changed tool ran\n")
        changed = self.name("changed")
        events, secs2 = self.build_ok(changed, ctx2, "--profile", "build", "--secret",
                                      "PYPI_TOKEN", "--secret", "NPM_TOKEN")
        st = steps(events)
        copy_at = min(n for n, (ins, _) in st.items() if ins.startswith("COPY"))
        self.assertTrue(all(c for n, (_, c) in st.items() if n < copy_at), st)
        self.assertFalse(any(c for n, (_, c) in st.items() if n >= copy_at), st)
        ran = {e["step"] for e in events if e.get("type") == "output"}
        self.assertTrue(ran and min(ran) > copy_at, "outputs of steps %r" % ran)
        print("; with tools/run.sh changed %.1f s" % secs2, end="")
        self.assertEqual(self.run_in(changed, "sh tools/run.sh"), "changed tool ran\n")
        for n in (again, changed):
            wait_for(lambda: self.space("image", "rm", n)[0] == 0, timeout=30,
                     what="image %s removed" % n)

    def test_secrets_and_allow_are_the_builds(self):
        """The token reaches the registry only when the build grants its secret, and --allow
        narrows the profile: each such build fails in its RUN step, saying why."""
        ctx = os.path.join(self.tmp, "probe-ctx")
        write_tree(ctx, {"Dockerfile": (
            "FROM %s\nRUN python3 -c 'import urllib.request as u; "
            "print(\"status\", u.urlopen(\"https://pypi.example.test/simple/\").status)'\n"
            % self.base)})
        cases = [((), "401"),  # no --secret: the registry wants its token
                 (("--secret", "PYPI_TOKEN", "--allow", "npm.example.test"), "SPACE egress")]
        for opts, why in cases:
            with self.subTest(opts=opts):
                name = self.name("probe")
                rc, events, out, err, _ = self.build(name, ctx, "--profile", "build", *opts,
                                                     "--no-cache")
                self.assertEqual(rc, 125, (out, err))
                output = "".join(e.get("data", "") for e in events if e.get("type") == "output")
                self.assertIn(why, output)
                self.assertNotIn("status 200", output)
                self.assertNotIn(name, self.image_names())
                self.assertEqual(self.staging(), [])
        # Both granted and allowed: the same step gets through.
        name = self.name("probe")
        events, _ = self.build_ok(name, ctx, "--profile", "build", "--secret", "PYPI_TOKEN",
                                  "--no-cache")
        self.assertIn("status 200", "".join(e.get("data", "") for e in events
                                            if e.get("type") == "output"))
        wait_for(lambda: self.space("image", "rm", name)[0] == 0, timeout=30,
                 what="image %s removed" % name)

    # -- the other doors -----------------------------------------------------------------------

    def test_python_sdk(self):
        name = self.app_image()
        client = space_sandbox.Client(socket_path=self.daemon.socket)
        sb = space_sandbox.Sandbox.create(client=client, image=name)
        self.known_ids.add(sb.id)
        try:
            r = sb.commands.run("python3 -c 'import spacehello; print(spacehello.GREETING)'; "
                                "id -u; pwd")
            self.assertEqual((r.exit_code, r.stdout),
                             (0, "hello from spacehello\n1000\n/opt/agent\n"), r.stderr)
        finally:
            sb.kill()

    def test_python_sdk_builds(self):
        if not hasattr(space_sandbox.Client, "build_image"):
            self.fail("the Python SDK has no Client.build_image")
        client = space_sandbox.Client(socket_path=self.daemon.socket)
        ctx = os.path.join(self.tmp, "sdk-ctx")
        write_tree(ctx, {"Dockerfile": "FROM %s\nRUN echo sdk-build | tee /sdk-marker\n"
                                       "ENV FROM_SDK=yes\n" % self.base})
        name = self.name("sdk")
        seen = []
        info = client.build_image(name, ctx, on_event=seen.append)
        kinds = [getattr(e, "type", None) or (e.get("type") if isinstance(e, dict) else None)
                 for e in seen]
        self.assertIn("step", kinds, seen)
        self.assertIn("output", kinds, seen)
        self.assertIn("sdk-build", "".join(e.get("data", "") for e in seen
                                           if e.get("type") == "output"))
        got = getattr(info, "name", None) or (info.get("name") if isinstance(info, dict) else None)
        self.assertEqual(got, name)
        self.assertEqual(self.run_in(name, "cat /sdk-marker; echo $FROM_SDK"), "sdk-build\nyes\n")
        wait_for(lambda: self.space("image", "rm", name)[0] == 0, timeout=30,
                 what="image %s removed" % name)

    def test_typescript_sdk(self):
        name = self.app_image()
        sdk = build_ts_sdk(os.path.join(self.tmp, "ts-sdk"))
        script = os.path.join(self.tmp, "ts-%s.mjs" % uuid.uuid4().hex[:6])
        with open(script, "w") as fh:
            fh.write("""
import { Client, Sandbox } from %s;
const client = new Client({ socketPath: process.env.SPACE_SOCKET });
const sb = await Sandbox.create({ client, image: process.argv[2] });
try {
  const r = await sb.commands.run(
    "node -e 'console.log(require(\\"spacehello-js\\").greeting)'; id -u");
  console.log(JSON.stringify({ id: sb.id, exitCode: r.exitCode, stdout: r.stdout,
                               stderr: r.stderr }));
} finally { await sb.kill(); }
""" % json.dumps(pathlib.Path(sdk).as_uri()))
        p = subprocess.run(["node", script, name], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, SPACE_SOCKET=self.daemon.socket))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.known_ids.add(r["id"])
        self.assertEqual((r["exitCode"], r["stdout"]), (0, "hello from spacehello-js\n1000\n"),
                         r["stderr"])

    def test_e2b_template_is_the_image(self):
        name = self.app_image()
        script = os.path.join(self.tmp, "e2b-%s.mjs" % uuid.uuid4().hex[:6])
        with open(script, "w") as fh:
            fh.write("""
import { Sandbox } from %s;
const sb = await Sandbox.create(process.argv[2], { timeoutMs: 120000 });
try {
  const r = await sb.commands.run("python3 -c 'import spacehello; print(spacehello.__version__)'"
                                  + " && echo $AGENT_MODE", { user: "root" });
  const info = await sb.getInfo();
  console.log(JSON.stringify({ id: sb.sandboxId, template: info.templateId,
                               exitCode: r.exitCode, stdout: r.stdout }));
} finally { await sb.kill(); }
""" % json.dumps(E2B_SDK))
        p = subprocess.run(["node", script, name], capture_output=True, text=True, timeout=180,
                           env=self.e2b_env())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.known_ids.add(r["id"])
        self.assertEqual(r["template"], name)
        self.assertEqual((r["exitCode"], r["stdout"]), (0, "1.0\nbuilt\n"))


def build_ts_sdk(out_dir):
    """The TypeScript SDK compiled into `out_dir` (not the source tree's dist/, which
    test_sdk_typescript.py rebuilds, maybe at the same time); returns its index.js."""
    npm_ci(TS_SDK)
    index = os.path.join(out_dir, "index.js")
    if not os.path.exists(index):
        p = subprocess.run([os.path.join(TS_SDK, "node_modules", ".bin", "tsc"), "-p",
                            "tsconfig.json", "--outDir", out_dir, "--declaration", "false"],
                           cwd=TS_SDK, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError("tsc in %s failed:\n%s%s" % (TS_SDK, p.stdout, p.stderr))
    return index


if __name__ == "__main__":
    main()
