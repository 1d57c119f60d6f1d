"""Snapshots, rollback and restore (issue 6, docs/snapshots.md) through the real CLI and API.

A snapshot holds a sandbox's filesystem changes: contents, modes (setuid too), owners as seen
inside, symlinks, hardlinks, user.* xattrs, empty directories and deleted image files. Rollback
puts a sandbox back in place (same id; no process of before survives); restore makes new,
independent sandboxes of the same profile, never of another one. `space diff --since`,
`exec --snapshot`, paused sandboxes, snapshots that outlive their sandbox, incremental
snapshots of a 1 GiB workspace with 1% changed, a profile's snapshot quota, tampered and truncated store files, a daemon SIGKILLed in the
middle of a snapshot, rolling snapshots and the API's errors. Nothing may be left on the host.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

from harness import (SPACE, SpaceTestCase, cgroup_dirs, main, proc_pids, read_text,
                     wait_for)

SNAP_RE = re.compile(r"\bsnap_[0-9a-f]{24}\b")
UNKNOWN = "unknown snapshot %s; `space snapshots ID` lists a sandbox's snapshots"
MiB = 1 << 20

# Run inside a sandbox: what `stat`, readlink, getxattr and sha256 say of every path below the
# roots given as arguments (the roots included), as JSON {path: {...}}. Mount points below a root
# (the host's read-only binds such as /etc/ssl) and arguments --skip=PATH are left out.
STATE_PY = r"""
import hashlib, json, os, stat, sys
out = {}
skip = [a[7:] for a in sys.argv[1:] if a.startswith("--skip=")]
roots = [a for a in sys.argv[1:] if not a.startswith("--skip=")]
def skipped(p):
    return any(p == s or p.startswith(s + "/") for s in skip)
def add(p):
    st = os.lstat(p)
    m = st.st_mode
    kind = ("dir" if stat.S_ISDIR(m) else "link" if stat.S_ISLNK(m) else
            "file" if stat.S_ISREG(m) else "fifo" if stat.S_ISFIFO(m) else "other")
    d = {"type": kind, "mode": "%o" % stat.S_IMODE(m), "uid": st.st_uid, "gid": st.st_gid,
         "ino": st.st_ino}
    if kind == "link":
        d["target"] = os.readlink(p)
    else:
        d["xattrs"] = {k: os.getxattr(p, k).hex() for k in sorted(os.listxattr(p))
                       if k.startswith("user.")}
    if kind == "file":
        with open(p, "rb") as f:
            d["sha256"] = hashlib.sha256(f.read()).hexdigest()
        d["size"], d["nlink"], d["mtime_ns"] = st.st_size, st.st_nlink, st.st_mtime_ns
    if kind == "dir":
        d["entries"] = sorted(n for n in os.listdir(p) if not skipped(os.path.join(p, n)))
    out[p] = d
for root in roots:
    if not os.path.lexists(root):
        out[root] = None
        continue
    add(root)
    for dp, dns, fns in os.walk(root):
        dns[:] = [n for n in dns if not os.path.ismount(os.path.join(dp, n))
                  and not skipped(os.path.join(dp, n))]
        for n in dns + fns:
            if not skipped(os.path.join(dp, n)):
                add(os.path.join(dp, n))
print(json.dumps(out, sort_keys=True))
"""

# Run inside: the workspace the metadata tests use, under /root/w, and changes to the image.
SETUP_SH = r"""
set -e
mkdir -p /root/w/sub /root/w/emptydir /root/w/owned-dir
printf 'hello snapshot\n' > /root/w/a.txt
chmod 640 /root/w/a.txt
head -c 300000 /dev/urandom > /root/w/sub/random.bin
printf 'owned by 1000\n' > /root/w/owned.txt
chown 1000:1000 /root/w/owned.txt /root/w/owned-dir
chown 1000:1001 /root/w/sub/random.bin
cp /usr/bin/true /root/w/suid
chown 1000:1000 /root/w/suid
chmod 4755 /root/w/suid
cp /usr/bin/true /root/w/sgid
chmod 2711 /root/w/sgid
chmod 1777 /root/w/owned-dir
ln -s a.txt /root/w/rel-link
ln -s /etc/hostname /root/w/abs-link
ln -s /nowhere/at/all /root/w/dangling
ln -s sub /root/w/dir-link
ln /root/w/a.txt /root/w/hard
python3 -c "import os; os.setxattr('/root/w/a.txt', 'user.note', b'v1'); \
os.setxattr('/root/w/sub', 'user.dir', b'\x00\xffbin')"
rm /etc/login.defs
"""


def image_opaque_dir(case, sid):
    """An image directory with files that the sandbox replaces by an empty one of its own (an
    overlay opaque directory), or None if the image has none of the candidates."""
    for d in ("/etc/ld.so.conf.d", "/etc/python3.11"):
        rc, out, _ = case.space("exec", sid, "--", "sh", "-c",
                                "test -d %s && ls -A %s | head -1" % (d, d))
        if rc == 0 and out.strip():
            return d
    return None


class SnapshotCase(SpaceTestCase):
    """Helpers shared by the classes below."""

    def sh(self, sid, script, **kw):
        return self.exec_ok(sid, "sh", "-c", script, **kw)

    def state(self, sid, *roots):
        out = self.exec_ok(sid, "python3", "-c", STATE_PY, *roots)
        return json.loads(out)

    @staticmethod
    def without_inodes(state):
        return {p: ({k: v for k, v in d.items() if k != "ino"} if d else d)
                for p, d in state.items()}

    def snap(self, sid, name=None):
        args = ["snapshot", sid, "--json"] + (["--name", name] if name else [])
        info = json.loads(self.space_ok(*args))
        self.assertRegex(info["id"], r"^snap_[0-9a-f]{24}$")
        self.assertEqual(info["sandbox"], sid)
        return info

    def snapshots(self, sid=None):
        out = self.space_ok("snapshots", *([sid] if sid else []), "--json")
        data = json.loads(out)
        return data["snapshots"] if isinstance(data, dict) else data

    def get_snapshot(self, ref):
        r = self.api("GET", "/v1/snapshots/%s" % ref)
        self.assertEqual(r.status, 200, r)
        return r.json

    def restore(self, ref, *opts):
        out = self.space_ok("restore", ref, *opts).strip()
        sid = out.splitlines()[-1].strip()
        self.assertRegex(sid, r"^sb_[0-9A-Za-z]+$", "space restore printed %r" % out)
        self.known_ids.add(sid)
        self.addCleanup(self._destroy_quietly, sid)
        return sid

    def rollback(self, sid, ref):
        rc, out, err = self.space("rollback", sid, ref, timeout=120)
        self.assertEqual(rc, 0, "rollback %s %s: %s %s" % (sid, ref, out, err))
        return out

    def ps_argv(self, sid):
        procs = json.loads(self.space_ok("ps", sid, "--json"))
        return [" ".join(p.get("argv", [])) for p in procs]

    def state_dir_store(self, profile="test"):
        return os.path.join(self.daemon.state_dir, "snapshots", profile)

    def manifest_path(self, snap_id, profile="test"):
        return os.path.join(self.state_dir_store(profile), "manifests", snap_id + ".json")

    def manifest_entries(self, snap_id, profile="test"):
        """The entries of a stored manifest, parsed from the file (read-only)."""
        with open(self.manifest_path(snap_id, profile)) as f:
            doc = json.load(f)
        return {(e["path"] if isinstance(e["path"], str) else bytes.fromhex(
            e["path"]["hex"]).decode("utf-8", "replace")): e
                for e in doc["manifest"]["entries"]}

    def chunk_path(self, chunk, profile="test"):
        return os.path.join(self.state_dir_store(profile), "chunks", chunk[:2], chunk[2:])

    def leftovers(self):
        """Cgroups and processes of this class's sandboxes still on the host."""
        ids = set(self.known_ids)
        cgs = sorted(d for d in cgroup_dirs() if any(i in d for i in ids))
        procs = []
        for pid in proc_pids():
            cg = read_text("/proc/%d/cgroup" % pid)
            if any(i in cg for i in ids):
                procs.append(pid)
        return cgs, procs

    def assert_no_leftovers(self):
        for sid in self.list_ids():
            self.space("rm", "--force", sid, timeout=60)
        self.assertEqual(self.list_ids(), [])
        try:
            wait_for(lambda: self.leftovers() == ([], []), timeout=15,
                     what="no cgroups or processes of the class's sandboxes")
        except AssertionError:
            self.fail("left on the host (cgroups, pids): %r" % (self.leftovers(),))


class SnapshotTest(SnapshotCase):

    # -- rollback ---------------------------------------------------------------------------------

    def test_rollback_restores_files_metadata_and_stops_processes(self):
        before_host = self.snapshot_host()
        sid = self.create()
        self.sh(sid, SETUP_SH)
        opaque = image_opaque_dir(self, sid)
        if opaque:  # replace an image directory by a sandbox-made one: overlay "opaque"
            self.sh(sid, "rm -rf %s && mkdir %s && echo mine > %s/mine" % (opaque, opaque, opaque))
        # /etc/space: the gateway's CA; space.json: Chromium's policy naming it (rewritten too)
        roots = ["/root/w", "/etc", "--skip=/etc/space",
                 "--skip=/etc/chromium/policies/managed/space.json"]
        st0 = self.state(sid, *roots)
        self.assertEqual(st0["/root/w/a.txt"]["xattrs"], {"user.note": b"v1".hex()},
                         "the kernel keeps user.* xattrs on the writable layer")
        self.assertEqual(st0["/root/w/suid"]["mode"], "4755")
        self.assertNotIn("/etc/login.defs", st0)
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1001")
        self.assertTrue(any("sleep 1001" in a for a in self.ps_argv(sid)))

        info = self.snap(sid, "before-change")
        self.assertEqual((info["kind"], info["name"], info["profile"]),
                         ("manual", "before-change", "test"))
        self.assertEqual((info["contents"], info["processes"]), ("filesystem", "restarted"))
        self.assertGreaterEqual(info["files"], 10)
        self.assertEqual(self.inspect(sid)["state"], "running")

        # Change everything the snapshot holds.
        self.sh(sid, r"""set -e
            printf 'changed\n' > /root/w/a.txt          # also changes the hardlink
            chmod 600 /root/w/a.txt
            chown 0:0 /root/w/suid /root/w/owned.txt
            chmod 755 /root/w/sgid
            rm /root/w/rel-link /root/w/abs-link
            ln -s sub/random.bin /root/w/rel-link
            rm /root/w/hard && cp /root/w/a.txt /root/w/hard
            rmdir /root/w/emptydir
            rm -rf /root/w/sub
            python3 -c "import os; os.setxattr('/root/w/owned.txt', 'user.new', b'x'); \
os.removexattr('/root/w/a.txt', 'user.note')"
            echo 'new' > /root/w/added.txt
            mkdir /root/w/added-dir
            echo 'image file made again' > /etc/login.defs
            echo 'added' > /etc/added-after
            echo 'tmp file' > /tmp/added-after
            rm /etc/shells""")
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1002")

        out = self.rollback(sid, "before-change")
        m = re.fullmatch(r"rolled back (\S+) to (snap_[0-9a-f]{24}); the state before is snapshot "
                         r"(snap_[0-9a-f]{24}); processes were restarted\n", out)
        self.assertTrue(m, "rollback printed %r" % out)
        self.assertEqual((m.group(1), m.group(2)), (sid, info["id"]))
        saved = m.group(3)
        info_after = self.inspect(sid)
        self.assertEqual((info_after["id"], info_after["state"]), (sid, "running"))

        st1 = self.state(sid, *roots)
        self.assertEqual(self.without_inodes(st1), self.without_inodes(st0))
        self.assertEqual(st1["/root/w/a.txt"]["ino"], st1["/root/w/hard"]["ino"],
                         "the hardlink is one inode again")
        self.assertEqual(st1["/root/w/a.txt"]["nlink"], 2)
        self.assertEqual(self.exec_ok(sid, "cat", "/root/w/rel-link"), "hello snapshot\n")
        for gone in ("/tmp/added-after", "/etc/login.defs"):
            rc, _, _ = self.space("exec", sid, "--", "test", "-e", gone)
            self.assertEqual(rc, 1, "%s exists after the rollback" % gone)
        self.assertEqual(self.exec_ok(sid, "stat", "-c", "%u:%g %a", "/root/w/suid"),
                         "1000:1000 4755\n")
        if opaque:
            self.assertEqual(self.exec_ok(sid, "ls", "-A", opaque), "mine\n",
                             "the image's files came back under a replaced directory")
        argv = self.ps_argv(sid)
        self.assertFalse([a for a in argv if "sleep 100" in a],
                         "processes of before the rollback survived it: %r" % argv)
        self.assertEqual(self.exec_ok(sid, "echo", "alive"), "alive\n")

        # The state before the rollback was kept, as kind "rollback"; rolling back to it
        # brings the changed files back.
        saved_info = self.get_snapshot(saved)
        self.assertEqual((saved_info["kind"], saved_info["sandbox"]), ("rollback", sid))
        self.assertIn(saved, [s["id"] for s in self.snapshots(sid)])
        self.rollback(sid, saved)
        self.assertEqual(self.exec_ok(sid, "cat", "/root/w/added.txt", "/etc/login.defs"),
                         "new\nimage file made again\n")
        self.assertEqual(self.exec_ok(sid, "stat", "-c", "%u:%g %a", "/root/w/suid"),
                         "0:0 755\n")
        self.space_ok("rm", sid)
        self.assert_no_leaks(before_host)

    # -- restore ----------------------------------------------------------------------------------

    def test_restore_forks_independent_sandboxes_of_the_same_profile(self):
        src = self.create("--env", "FROM_SOURCE=1")
        self.sh(src, SETUP_SH)
        # A restore gets a new gateway CA, and Chromium's policy names it.
        roots = ["/root/w", "/etc", "--skip=/etc/space",
                 "--skip=/etc/chromium/policies/managed/space.json"]
        st0 = self.state(src, *roots)
        info = self.snap(src)
        src_info = self.inspect(src)

        forks = [self.restore(info["id"]), self.restore(info["id"], "--profile", "test")]
        self.assertEqual(len({src} | set(forks)), 3, "restore makes new ids")
        for sid in forks:
            i = self.inspect(sid)
            self.assertEqual((i["state"], i["profile"]), ("running", "test"))
            if "image" in src_info:
                self.assertEqual(i.get("image"), src_info["image"])
            st = self.state(sid, *roots)
            self.assertEqual(self.without_inodes(st), self.without_inodes(st0),
                             "files, modes, owners (as seen inside), links, xattrs of %s" % sid)
            self.assertEqual(st["/root/w/a.txt"]["ino"], st["/root/w/hard"]["ino"])
        # A new uid range: the agents run as different host uids.
        host_uids = set()
        for sid in [src] + forks:
            uid_map = read_text("/proc/%d/uid_map" % self.agent_pid(sid)).split()
            host_uids.add(uid_map[1])
        self.assertEqual(len(host_uids), 3, "uid ranges of source and forks: %r" % host_uids)

        # Independent: a write in one shows nowhere else.
        self.sh(forks[0], "echo one > /root/w/only-in-fork0; rm /root/w/a.txt")
        self.sh(forks[1], "echo two > /root/w/only-in-fork1")
        for sid, absent in ((src, "only-in-fork0"), (src, "only-in-fork1"),
                            (forks[1], "only-in-fork0"), (forks[0], "only-in-fork1")):
            rc, _, _ = self.space("exec", sid, "--", "test", "-e", "/root/w/" + absent)
            self.assertEqual(rc, 1, "%s sees %s" % (sid, absent))
        self.assertEqual(self.exec_ok(forks[1], "cat", "/root/w/a.txt"), "hello snapshot\n")

        # --json prints the new sandbox.
        j = json.loads(self.space_ok("restore", info["id"], "--json"))
        self.known_ids.add(j["id"])
        self.addCleanup(self._destroy_quietly, j["id"])
        self.assertEqual((j["state"], j["profile"]), ("running", "test"))

    def test_restore_and_rollback_never_cross_profiles(self):
        src = self.create()
        self.sh(src, "echo test-data > /root/t")
        info = self.snap(src)
        ids_before = set(self.list_ids())

        rc, out, err = self.space("restore", info["id"], "--profile", "live")
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("another profile", err)
        self.assertTrue(err.startswith("space: "), err)
        r = self.api("POST", "/v1/snapshots/%s/restore" % info["id"], {"profile": "live"})
        err_obj = self.assert_api_error(r, 403, 403, code="permission_denied")
        self.assertIn("another profile", err_obj["message"])
        self.assertEqual(set(self.list_ids()), ids_before, "a refused restore made a sandbox")

        live = self.create("--profile", "live")
        self.sh(live, "echo live-data > /root/l")
        rc, out, err = self.space("rollback", live, info["id"])
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("another profile", err)
        r = self.api("POST", "/v1/sandboxes/%s/rollback" % live, {"snapshot": info["id"]})
        self.assert_api_error(r, 403, 403, code="permission_denied")
        self.assertEqual(self.exec_ok(live, "cat", "/root/l"), "live-data\n")
        rc, _, _ = self.space("exec", live, "--", "test", "-e", "/root/t")
        self.assertEqual(rc, 1)
        # The live sandbox's own snapshot restores into live, and not into test.
        linfo = self.snap(live)
        self.assertEqual(linfo["profile"], "live")
        rc, out, err = self.space("restore", linfo["id"], "--profile", "test")
        self.assertEqual(rc, 125, (out, err))
        rc, out, err = self.space("rollback", src, linfo["id"])
        self.assertEqual(rc, 125, (out, err))
        self.assertEqual(self.exec_ok(src, "cat", "/root/t"), "test-data\n")

    # -- diff, exec --snapshot ------------------------------------------------------------------------

    def test_diff_since_snapshot(self):
        sid = self.create()
        self.sh(sid, "mkdir -p /root/d && echo 1 > /root/d/keep && echo 2 > /root/d/change && "
                     "echo 3 > /root/d/delete")
        info = self.snap(sid, "diff-base")
        self.sh(sid, "echo 22 > /root/d/change; rm /root/d/delete; echo 4 > /root/d/add; "
                     "rm /etc/shells")
        for ref in (info["id"], "diff-base"):
            d = json.loads(self.space_ok("diff", sid, "--since", ref, "--json"))
            self.assertIn("/root/d/add", d["added"])
            self.assertIn("/root/d/change", d["changed"])
            self.assertIn("/root/d/delete", d["deleted"])
            self.assertIn("/etc/shells", d["deleted"])
            everything = d["added"] + d["changed"] + d["deleted"]
            self.assertNotIn("/root/d/keep", everything)
            self.assertEqual(len(everything), len(set(everything)), d)
        text = self.space_ok("diff", sid, "--since", info["id"])
        self.assertIn("A /root/d/add\n", text)
        self.assertIn("C /root/d/change\n", text)
        self.assertIn("D /root/d/delete\n", text)
        r = self.api("GET", "/v1/sandboxes/%s/diff?since=%s" % (sid, info["id"]))
        self.assertEqual(r.status, 200, r)
        self.assertIn("/root/d/add", r.json["added"])
        # Without --since: against creation, so /root/d/keep is added too.
        d = json.loads(self.space_ok("diff", sid, "--json"))
        self.assertIn("/root/d/keep", d["added"])

    def test_exec_snapshot_and_rollback_to_it(self):
        sid = self.create()
        self.sh(sid, "echo precious > /root/keep")
        rc, out, err = self.space("exec", sid, "--snapshot", "--", "sh", "-c",
                                  "rm /root/keep; echo oops > /root/added; echo done")
        self.assertEqual((rc, out), (0, "done\n"), err)
        m = re.search(r"^space: snapshot (snap_[0-9a-f]{24}) taken before this command$", err,
                      re.M)
        self.assertTrue(m, "no snapshot line on stderr: %r" % err)
        snap = self.get_snapshot(m.group(1))
        self.assertEqual((snap["kind"], snap["sandbox"]), ("exec", sid))
        self.assertIn(m.group(1), [s["id"] for s in self.snapshots(sid) if s["kind"] == "exec"])
        self.rollback(sid, m.group(1))
        self.assertEqual(self.exec_ok(sid, "cat", "/root/keep"), "precious\n")
        rc, _, _ = self.space("exec", sid, "--", "test", "-e", "/root/added")
        self.assertEqual(rc, 1)
        # The API: the "started" event carries the snapshot; a detached exec's 202 body too.
        r, events = self.api_exec(sid, ["true"], snapshot=True)
        self.assertEqual(r.status, 200, r)
        started = [e for e in events if e.get("type", e.get("event")) == "started"]
        self.assertTrue(started and SNAP_RE.fullmatch(started[0].get("snapshot", "")), events)
        r = self.api("POST", "/v1/sandboxes/%s/exec" % sid,
                     {"cmd": ["sleep", "1"], "detach": True, "snapshot": True})
        self.assertEqual(r.status, 202, r)
        self.assertRegex(r.json.get("snapshot", ""), SNAP_RE)

    # -- paused, destroyed --------------------------------------------------------------------------

    def test_paused_stays_paused_and_snapshots_outlive_their_sandbox(self):
        sid = self.create()
        self.sh(sid, "echo kept > /root/kept")
        self.space_ok("pause", sid)
        info = self.snap(sid, "paused-one")
        self.assertEqual(self.inspect(sid)["state"], "paused", "a snapshot thawed it")
        self.space_ok("resume", sid)
        self.assertEqual(self.exec_ok(sid, "echo", "ok"), "ok\n")
        self.space_ok("rm", sid)

        listed = self.snapshots(sid)
        self.assertIn(info["id"], [s["id"] for s in listed])
        self.assertIn(info["id"], [s["id"] for s in self.snapshots()])
        table = self.space_ok("snapshots", sid)
        self.assertEqual(table.splitlines()[0].split(),
                         ["ID", "NAME", "KIND", "CREATED", "FILES", "SIZE", "NEW", "EXPIRES"])
        self.assertIn(info["id"], table)
        r = self.api("POST", "/v1/sandboxes/%s/snapshots" % sid, {})
        self.assert_api_error(r, 409, 409)
        new = self.restore("paused-one")
        self.assertEqual(self.exec_ok(new, "cat", "/root/kept"), "kept\n")
        self.assertEqual(self.inspect(new)["state"], "running")

    # -- incremental --------------------------------------------------------------------------------

    def test_incremental_snapshot_of_a_1gib_workspace(self):
        """A 1 GiB workspace with 1% changed: the next snapshot reads and stores about the
        change (unchanged files are only stat'ed: reused_files), and restores all of it."""
        sid = self.create("--memory", "2G", "--disk", "2G")
        t0 = time.monotonic()
        self.sh(sid, "mkdir /root/big && for i in $(seq 1 128); do "
                     "head -c 8388608 /dev/urandom > /root/big/f$i; done", timeout=180)
        t_write = time.monotonic() - t0
        t0 = time.monotonic()
        first = self.snap(sid)
        t_first = time.monotonic() - t0
        self.assertGreaterEqual(first["logical_bytes"], 1024 * MiB)
        self.assertGreaterEqual(first["new_bytes"], 1000 * MiB, "random bytes do not compress")
        # Rewrite 1% of the workspace: 1 MiB in the middle of 10 files (10 MiB of 1 GiB).
        self.sh(sid, "for i in $(seq 1 10); do head -c 1048576 /dev/urandom | "
                     "dd of=/root/big/f$((i * 12)) bs=1M seek=3 conv=notrunc status=none; done")
        t0 = time.monotonic()
        second = self.snap(sid)
        t_second = time.monotonic() - t0
        sys.stderr.write(
            "\n  1 GiB workspace: written in %.1fs; first snapshot %.2fs (%d new bytes), "
            "second after 1%% changed %.2fs (%d new bytes, %d files reused)\n" %
            (t_write, t_first, first["new_bytes"], t_second, second["new_bytes"],
             second["reused_files"]))
        self.assertEqual(second["parent"], first["id"])
        # Space proportional to the change: each rewritten MiB stores the 1-3 chunks it touches.
        self.assertGreaterEqual(second["new_bytes"], 10 * MiB * 0.9, "the change was stored")
        self.assertLess(second["new_bytes"], 50 * MiB)
        # Time proportional to the change: only the 10 changed files were read.
        self.assertGreaterEqual(second["reused_files"], 118)
        # The incremental one restores the whole workspace, changed files included.
        want = self.exec_ok(sid, "sh", "-c", "cat /root/big/f* | sha256sum", timeout=120)
        self.space_ok("rm", sid)
        new = self.restore(second["id"])
        self.assertEqual(self.exec_ok(new, "sh", "-c", "cat /root/big/f* | sha256sum",
                                      timeout=120), want)

    # -- rolling snapshots --------------------------------------------------------------------------

    def test_rolling_snapshots(self):
        sid = self.create("--snapshot-every", "2s")
        self.space_ok("exec", sid, "--detach", "--", "sh", "-c",
                      "i=0; while [ $i -lt 12 ]; do i=$((i+1)); echo $i > /root/tick; "
                      "sleep 0.5; done")

        def scheduled():
            return [s for s in self.snapshots(sid) if s["kind"] == "scheduled"]
        found = wait_for(lambda: len(scheduled()) >= 2 and scheduled(), timeout=9,
                         interval=0.5, what="two scheduled snapshots of a sandbox that changes")
        self.assertTrue(all(s["sandbox"] == sid for s in found))
        # The writer stops after ~6 s; once idle, another 5 s (2.5 periods) must not add a
        # snapshot per period of an unchanged workspace (one may still catch the last write).
        wait_for(lambda: self.exec_ok(sid, "cat", "/root/tick") == "12\n", timeout=10,
                 what="the writer to finish")
        time.sleep(2.2)
        n_idle = len(scheduled())
        time.sleep(5)
        n_after = len(scheduled())
        sys.stderr.write("\n  rolling every 2s: %d scheduled while writing+settling, %d after 5s "
                         "idle\n" % (n_idle, n_after))
        self.assertLessEqual(n_after - n_idle, 1,
                             "scheduled snapshots of an unchanged sandbox are duplicated")
        r = self.api("POST", "/v1/sandboxes", {"snapshot_every": "0"})
        self.assertEqual(r.status, 201, r)
        self.addCleanup(self._destroy_quietly, r.json["id"])
        r = self.api("POST", "/v1/sandboxes", {"snapshot_every": "soon"})
        self.assert_api_error(r, 400, 400)

    # -- errors -------------------------------------------------------------------------------------

    def test_errors(self):
        sid = self.create()
        bogus = "snap_" + "0" * 24
        for args in (("rollback", sid, bogus), ("restore", bogus), ("snapshot", "rm", bogus),
                     ("diff", sid, "--since", bogus)):
            rc, out, err = self.space(*args)
            self.assertEqual(rc, 125, (args, out, err))
            self.assertIn(UNKNOWN % bogus, err, args)
        r = self.api("GET", "/v1/snapshots/%s" % bogus)
        e = self.assert_api_error(r, 404, 404)
        self.assertEqual(e["message"], UNKNOWN % bogus)
        r = self.api("GET", "/v1/snapshots/no-such-name")
        self.assert_api_error(r, 404, 404)
        long_ref = "x" * 300
        r = self.api("POST", "/v1/snapshots/%s/restore" % long_ref, {})
        e = self.assert_api_error(r, 400, 404)
        self.assertLess(len(e["message"]), 250, "the reference is cut in the message")

        for bad in ("bad name", "snap_x", "-dash", ".dot", "x" * 65, "a/b", "", "ü"):
            r = self.api("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": bad})
            self.assert_api_error(r, 400, 400)
        rc, out, err = self.space("snapshot", sid, "--name", "bad name")
        self.assertEqual(rc, 125, (out, err))
        self.assertEqual(self.snapshots(sid), [], "a refused name made a snapshot")
        r = self.api("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": 5})
        self.assert_api_error(r, 400, 400)

        # A name belongs to its sandbox: taken twice in one sandbox is a 409; the same name in
        # another sandbox is that sandbox's own snapshot.
        other = self.create()
        mine = self.snap(sid, "dup.name-1")
        r = self.api("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": "dup.name-1"})
        e = self.assert_api_error(r, 409, 409)
        self.assertIn("sandbox %s already has a snapshot named" % sid, e["message"])
        self.sh(other, "echo theirs > /root/whose")
        theirs = self.snap(other, "dup.name-1")
        self.assertNotEqual(mine["id"], theirs["id"])
        self.sh(sid, "echo mine > /root/whose")
        # Rollback by name resolves within the sandbox: each gets its own files back.
        self.space_ok("rollback", other, "dup.name-1")
        self.assertEqual(self.sh(other, "cat /root/whose"), "theirs\n")
        # A name only another sandbox has is refused, saying whose it is and to give the id.
        third = self.create()
        rc, out, err = self.space("rollback", third, "dup.name-1")
        self.assertEqual(rc, 125, (out, err))
        self.snap(sid, "only-mine")
        r = self.api("POST", "/v1/sandboxes/%s/rollback" % third, {"snapshot": "only-mine"})
        e = self.assert_api_error(r, 404, 404)
        self.assertIn("belongs to its sandbox", e["message"])
        self.assertIn(sid, e["message"])
        # By id, another sandbox's snapshot of the same profile and image is allowed.
        r = self.api("POST", "/v1/sandboxes/%s/rollback" % third, {"snapshot": theirs["id"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sh(third, "cat /root/whose"), "theirs\n")
        # Without a sandbox (get, restore, rm) a name must be unique: two give a 400 naming both.
        r = self.api("GET", "/v1/snapshots/dup.name-1")
        e = self.assert_api_error(r, 400, 400)
        self.assertIn(mine["id"], e["message"])
        self.assertIn(theirs["id"], e["message"])
        r = self.api("GET", "/v1/snapshots/only-mine")
        self.assertEqual(r.status, 200, r)

        r = self.api("POST", "/v1/sandboxes/sb_nosuchsandbox/snapshots", {})
        self.assert_api_error(r, 404, 404)
        r = self.api("POST", "/v1/sandboxes/%s/rollback" % sid, {})
        self.assert_api_error(r, 400, 400)

        # Deleting: by name; then it is unknown.
        s = self.snap(sid, "to-delete")
        self.space_ok("snapshot", "rm", "to-delete")
        r = self.api("GET", "/v1/snapshots/%s" % s["id"])
        self.assert_api_error(r, 404, 404)
        r = self.api("DELETE", "/v1/snapshots/%s" % s["id"])
        self.assert_api_error(r, 404, 404)
        self.assertFalse(os.path.exists(self.manifest_path(s["id"])))

    def test_zz_no_leftovers(self):
        """Last (by name): every sandbox of the class removed, nothing of them on the host."""
        self.assert_no_leftovers()


class SnapshotQuotaTest(SnapshotCase):
    """A profile's snapshot_quota bounds its store: a snapshot that would pass it is refused
    (429, a message saying how to free space) and leaves nothing in the store."""

    @classmethod
    def daemon_config(cls):
        return {"profiles": {"test": {"snapshot_quota": "4M"}, "live": {}}}

    def store_bytes(self):
        total = 0
        for root, _, files in os.walk(os.path.join(self.state_dir_store(), "chunks")):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total

    def test_quota_refuses_and_leaves_nothing(self):
        sid = self.create()
        small = self.snap(sid, "small")  # the trust store and little else: under 4 MiB
        self.sh(sid, "head -c 8000000 /dev/urandom > /root/big.bin")
        rc, out, err = self.space("snapshot", sid)
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("quota", err)
        self.assertIn("space snapshot rm", err)
        r = self.api("POST", "/v1/sandboxes/%s/snapshots" % sid, {})
        self.assert_api_error(r, 429, 429)
        self.assertEqual([s["id"] for s in self.snapshots(sid)], [small["id"]])
        self.assertEqual(sorted(os.listdir(os.path.join(self.state_dir_store(), "manifests"))),
                         [small["id"] + ".json"])
        self.assertLess(self.store_bytes(), 4 * MiB, "the refused snapshot's chunks were kept")
        # Freeing space makes room again.
        self.sh(sid, "rm /root/big.bin && head -c 1000000 /dev/urandom > /root/ok.bin")
        self.space_ok("snapshot", "rm", "small")
        second = self.snap(sid, "fits")
        self.assertGreater(second["new_bytes"], 900000)
        # The sandbox was thawed after every attempt.
        self.assertEqual(self.exec_ok(sid, "echo", "alive"), "alive\n")

    def test_zz_no_leftovers(self):
        self.assert_no_leftovers()


class SnapshotTamperTest(SnapshotCase):
    """Store files changed behind the daemon's back: refused with a clear error naming the
    snapshot, before anything of the sandbox is destroyed."""

    def refused(self, sid, ref, snap_id, marker):
        ids = set(self.list_ids())
        for args in (("rollback", sid, ref), ("restore", ref)):
            rc, out, err = self.space(*args, timeout=120)
            self.assertEqual(rc, 125, (args, out, err))
            self.assertIn(snap_id, err, "the error names the snapshot: %r" % err)
            self.assertTrue(err.startswith("space: "), err)
        r = self.api("POST", "/v1/sandboxes/%s/rollback" % sid, {"snapshot": ref}, timeout=120)
        e = self.assert_api_error(r, 502, 502)
        self.assertIn(snap_id, e["message"])
        r = self.api("POST", "/v1/snapshots/%s/restore" % ref, {}, timeout=120)
        self.assert_api_error(r, 502, 502)
        self.assertEqual(set(self.list_ids()), ids, "a refused restore left a sandbox")
        # The sandbox is untouched: running, its files of after the snapshot still there.
        self.assertEqual(self.inspect(sid)["state"], "running")
        self.assertEqual(self.exec_ok(sid, "cat", "/root/after"), marker)
        self.assertTrue(any("sleep 1003" in a for a in self.ps_argv(sid)),
                        "a refused rollback stopped the sandbox's processes")

    def test_tampered_manifest_and_chunks(self):
        sid = self.create()
        self.sh(sid, "head -c 3000000 /dev/urandom > /root/data.bin && echo v1 > /root/small")
        want = self.exec_ok(sid, "sha256sum", "/root/data.bin")
        info = self.snap(sid, "tamper-me")
        snap = info["id"]
        self.sh(sid, "echo after-the-snapshot > /root/after; rm /root/data.bin")
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1003")
        marker = "after-the-snapshot\n"

        path = self.manifest_path(snap)
        self.assertTrue(os.path.isfile(path), "no manifest at %s" % path)
        entries = self.manifest_entries(snap)
        chunks = entries["root/data.bin"]["chunks"]
        self.assertGreaterEqual(len(chunks), 1)
        chunk = self.chunk_path(chunks[len(chunks) // 2])
        self.assertTrue(os.path.isfile(chunk), chunk)

        def flip(p, at=None):
            with open(p, "rb") as f:
                orig = f.read()
            data = bytearray(orig)
            i = len(data) // 2 if at is None else at
            data[i] ^= 0x01
            with open(p, "wb") as f:
                f.write(data)
            return orig

        def put(p, data):
            with open(p, "wb") as f:
                f.write(data)

        # 1. A manifest byte flipped: inside a digit of created_at or a mode, the JSON still
        # parses, only the MAC can tell.
        with open(path, "rb") as f:
            text = f.read()
        at = text.find(b'"mode":') + len(b'"mode":')
        orig = flip(path, at)
        self.refused(sid, snap, snap, marker)
        put(path, orig)
        # 2. A flip in the middle of the manifest (may break the JSON instead).
        orig = flip(path)
        self.refused(sid, "tamper-me", snap, marker)
        put(path, orig)
        # 3. A chunk byte flipped.
        orig = flip(chunk)
        self.refused(sid, snap, snap, marker)
        put(chunk, orig)
        # 4. A chunk truncated (to half, then to nothing).
        for size in (len(orig) // 2, 0):
            put(chunk, orig[:size])
            self.refused(sid, snap, snap, marker)
        put(chunk, orig)
        # 5. A chunk missing.
        os.rename(chunk, chunk + ".away")
        self.refused(sid, snap, snap, marker)
        os.rename(chunk + ".away", chunk)

        # Intact again: the same snapshot restores and rolls back (so the refusals above were
        # about the damage, not the snapshot).
        new = self.restore(snap)
        self.assertEqual(self.exec_ok(new, "sha256sum", "/root/data.bin"), want)
        self.rollback(sid, snap)
        self.assertEqual(self.exec_ok(sid, "sha256sum", "/root/data.bin"), want)
        rc, _, _ = self.space("exec", sid, "--", "test", "-e", "/root/after")
        self.assertEqual(rc, 1)

    def test_zz_no_leftovers(self):
        self.assert_no_leftovers()


class SnapshotCrashTest(SnapshotCase):
    """spaced SIGKILLed in the middle of a snapshot of a 300 MB workspace."""

    def test_daemon_killed_during_snapshot(self):
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None  # the daemon's pid changes
        sid = self.create("--memory", "1G", "--disk", "1G")
        self.sh(sid, "echo before-crash > /root/marker")
        good = self.snap(sid, "good")
        self.sh(sid, "mkdir /root/big && for i in $(seq 1 30); do "
                     "head -c 10485760 /dev/urandom > /root/big/f$i; done", timeout=120)
        self.space_ok("exec", sid, "--detach", "--", "sh", "-c",
                      "while true; do date +%s%N > /root/tick; sleep 0.1; done")
        chunks_dir = os.path.join(self.state_dir_store(), "chunks")

        def chunk_files():
            return {os.path.join(dp, n) for dp, _, fns in os.walk(chunks_dir) for n in fns}
        chunks_before = chunk_files()
        tick = "/proc/%d/fd/6/upper/root/tick" % self.agent_pid(sid)
        p = subprocess.Popen([SPACE, "snapshot", sid, "--json"], env=self.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Kill it once the snapshot has stored its first new chunks (~0.3 s in).
        t0 = time.monotonic()
        wait_for(lambda: len(chunk_files() - chunks_before) >= 2 or p.poll() is not None,
                 timeout=20, interval=0.02, what="the snapshot to store chunks")
        t_kill = time.monotonic()
        self.daemon.stop(signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            self.fail("space snapshot hung after the daemon died")
        finished = p.returncode == 0
        sys.stderr.write("\n  killed %.2fs into the snapshot, %d new chunk files; client: rc %d "
                         "%r\n" % (t_kill - t0, len(chunk_files() - chunks_before),
                                   p.returncode, (out + err)[-160:]))
        self.assertFalse(finished, "the snapshot finished before the kill: make the workspace "
                                   "larger")
        self.assertEqual(p.returncode, 125, err)
        # The daemon died with the sandbox frozen: its writer does not advance.
        t1 = read_text(tick)
        time.sleep(0.5)
        self.assertEqual(read_text(tick), t1, "the sandbox was not frozen during the snapshot")

        self.daemon.start()
        self.assertIn(sid, self.list_ids())
        self.assertEqual(self.inspect(sid)["state"], "running")
        # Thawed: the writer loop advances again.
        t1 = self.exec_ok(sid, "cat", "/root/tick", timeout=20)
        wait_for(lambda: self.exec_ok(sid, "cat", "/root/tick") != t1, timeout=10,
                 what="the sandbox's processes to run again (thawed)")

        listed = self.snapshots(sid)
        ids = [s["id"] for s in listed]
        self.assertIn(good["id"], ids)
        self.assertEqual(ids, [good["id"]], "a partial snapshot is listed: %r" % listed)
        # No manifest on disk that the daemon does not list (nothing half-written is sealed).
        on_disk = {n[:-5] for n in os.listdir(os.path.join(self.state_dir_store(), "manifests"))
                   if n.endswith(".json")}
        self.assertEqual(on_disk, set(ids))

        new = self.restore("good")
        self.assertEqual(self.exec_ok(new, "cat", "/root/marker"), "before-crash\n")
        rc, _, _ = self.space("exec", new, "--", "test", "-e", "/root/big")
        self.assertEqual(rc, 1)
        self.rollback(sid, "good")
        self.assertEqual(self.exec_ok(sid, "cat", "/root/marker"), "before-crash\n")
        rc, _, _ = self.space("exec", sid, "--", "test", "-e", "/root/big")
        self.assertEqual(rc, 1)
        # And the next snapshot works.
        self.snap(sid)
        self.space_ok("rm", sid)
        self.space_ok("rm", new)
        self.assert_no_leaks(before)

    def test_zz_no_leftovers(self):
        self.assert_no_leftovers()


if __name__ == "__main__":
    main()
