"""What the CLI prints of sandbox-controlled text (src/cli/output.h): process argv in
`space ps`, file paths in `space diff`, exec'd command lines in `space audit`, each plain and
with --json. Plain output shows terminal escapes, CR/LF, other controls, C1 and bidi/invisible
characters as visible escapes (one row per process, one line per file or event); --json carries
the same strings, spelled with \\uXXXX escapes instead of raw control or bidi bytes."""

import json

from harness import SpaceTestCase, main, wait_for

# (what the sandbox writes, how the CLI shows it)
PAYLOADS = [
    ("ok\r\nFORGED 0 0 S exit 0", "ok\\r\\nFORGED 0 0 S exit 0"),
    ("\x1b[2K\x1b[1A\x1b[31mred", "\\x1b[2K\\x1b[1A\\x1b[31mred"),
    ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),
    ("\u009b2J\u0085nel", "\\u{009b}2J\\u{0085}nel"),
    ("abc\u202egnp.exe\u2066x\u2069\u200f", "abc\\u{202e}gnp.exe\\u{2066}x\\u{2069}\\u{200f}"),
    ("sep\u2028zw\u200b\ufeff", "sep\\u{2028}zw\\u{200b}\\u{feff}"),
    ("del\x7f back\\slash", "del\\x7f back\\\\slash"),
    ("\u65e5\u672c \U0001F600", "\u65e5\u672c \U0001F600"),  # ordinary UTF-8 stays
]

SLEEP = "import time; time.sleep(600)"

HAZARDS = set(chr(c) for c in list(range(0x00, 0x20)) + list(range(0x7F, 0xA0)) +
              list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)) +
              [0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x061C, 0x2028, 0x2029, 0xFEFF]) - {"\n"}


class CliOutputTest(SpaceTestCase):

    def assert_inert(self, text, what):
        bad = sorted(set(text) & HAZARDS)
        self.assertEqual(bad, [], "%s printed raw %r:\n%s" % (what, bad, text[-3000:]))

    def test_ps_diff_audit_escape_sandbox_text(self):
        sid = self.create()
        args = [raw for raw, _ in PAYLOADS]
        script = ("import os, sys\n"
                  "os.makedirs('/root/forge', exist_ok=True)\n"
                  "for a in sys.argv[1:]:\n"
                  "    open('/root/forge/' + a, 'w').close()\n"
                  "os.execv('/usr/bin/python3', ['python3', '-c', %r] + sys.argv[1:])\n" % SLEEP)
        self.space_ok("exec", sid, "--detach", "--", "python3", "-c", script, *args)

        def sleeper():
            procs = json.loads(self.space_ok("ps", sid, "--json"))
            return [p for p in procs if p["argv"][:3] == ["python3", "-c", SLEEP]]
        wait_for(sleeper, timeout=10, what="the payload process in `space ps --json`")
        self.assertEqual(sleeper()[0]["argv"][3:], args)
        self.assert_inert(self.space_ok("ps", sid, "--json"), "space ps --json")

        out = self.space_ok("ps", sid)
        self.assert_inert(out, "space ps")
        row = [l for l in out.splitlines() if "python3 -c %s " % SLEEP in l]
        self.assertEqual(len(row), 1, out)
        self.assertTrue(row[0].endswith(" ".join(shown for _, shown in PAYLOADS)), row[0])

        out = self.space_ok("diff", sid)
        self.assert_inert(out, "space diff")
        for _, shown in PAYLOADS:
            self.assertIn("A /root/forge/%s\n" % shown, out)
        diff = json.loads(self.space_ok("diff", sid, "--json"))
        self.assert_inert(self.space_ok("diff", sid, "--json"), "space diff --json")
        for raw, _ in PAYLOADS:
            self.assertIn("/root/forge/" + raw, diff["added"])

        out = self.space_ok("audit", sid)
        self.assert_inert(out, "space audit")
        line = [l for l in out.splitlines()
                if "proc.exec" in l and "argv: python3 -c '%s'" % SLEEP in l]
        self.assertEqual(len(line), 1, out[-3000:])
        for _, shown in PAYLOADS:
            if " " in shown or "\\" in shown:
                shown = "'%s'" % shown
            self.assertIn(" " + shown, line[0])
        lines = self.space_ok("audit", sid, "--json")
        self.assert_inert(lines, "space audit --json")
        execs = [json.loads(l)["data"] for l in lines.splitlines()]
        self.assertTrue(any((e.get("argv") or [])[3:] == args for e in execs))


if __name__ == "__main__":
    main()
