"""Forges and hides lines in the operator's terminal through text the sandbox controls: a
long-running process whose argv holds terminal escapes (CSI erase-line and cursor-up, SGR
colour, OSC 8 hyperlink, OSC 52 clipboard write, the C1 CSI U+009B and NEL U+0085), CR LF
followed by a forged row, Unicode bidi overrides and isolates (U+202E, U+2066..U+2069,
U+200F, U+061C), zero-width characters and U+2028, other C0 controls and DEL, and bytes that
are not UTF-8; files (and a FIFO) named the same way; and the exec of that argv, which the
audit log records. Then runs the real `space ps`, `space diff`, `space audit` (each plain and
with --json) and a `space cp` of the files' directory, and looks in what they print for a raw
ESC, C1 control, other control character, bidi or invisible format character, or a line that
starts with the forged row.
Blocked by: the CLI escapes every piece of sandbox-controlled text it prints (escape_text in
src/cli/output.h: controls and bytes that are not UTF-8 as hex escapes, C1, bidi and invisible
characters as code point escapes, a backslash doubled); --json output writes controls, C1,
bidi and invisible characters as JSON escapes, never as raw bytes.
space-attack: sandbox=host-fresh timeout=120
"""
import os
import time

from hostside import SANDBOX, WORK, broken, escaped, finish, note, space

MARK = "FORGED-%d" % os.getpid()

# What the sandbox puts in argv and file names, as Python source (ASCII): each a different way
# to forge, hide or recolour output. MARK only ever follows a line break, so a line of output
# that starts with it is a forged line.
PAYLOADS = [
    r"'ok\r\n' + MARK + '  0  0  S  exit 0'",                  # a forged row after CR LF
    r"'\x1b[2K\x1b[1A\x1b[31mred\x1b[0m'",                   # erase line, cursor up, colour
    r"'\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\'",  # OSC 8 hyperlink
    r"'\x1b]52;c;ZXZpbA==\x07'",                              # OSC 52: write the clipboard
    r"'\u009b2J\u0085' + MARK + ' nel'",                      # C1 CSI, NEL before a forged row
    r"'abc\u202egnp.exe\u2066x\u2069\u200f\u061c\u200b\ufeff'",  # bidi override, isolates
    r"'sep\u2028' + MARK + ' ls'",                            # U+2028 LINE SEPARATOR
    r"'bell\x07bs\x08\x08del\x7f\x0b\x0c'",                   # other C0 controls and DEL
]
PY_LIST = "[" + ", ".join(PAYLOADS) + "]"

# Invalid UTF-8 (a lone C1-range byte, 0xff, a truncated sequence) only fits in names and argv
# as bytes.
BYTES = r"[b'raw\x9b2Jbyte', b'\xff\xfe', b'cut\xe2\x80']"


def py(script, detach=False):
    """Runs a Python script in the sandbox (argv straight through, no shell quoting)."""
    extra = ["--detach"] if detach else []
    rc, out, err = space("exec", SANDBOX, *extra, "--", "python3", "-c",
                         "MARK = %r\nPAYLOADS = %s + %s\n%s" % (MARK, PY_LIST, BYTES, script))
    if rc != 0:
        broken("setup in %s failed (rc %d): %r %r" % (SANDBOX, rc, out[-300:], err[-300:]))


# 1. A process that stays, its argv full of payloads (its exec is in the audit log too).
py("import os\n"
   "args = [a if isinstance(a, bytes) else a.encode() for a in PAYLOADS]\n"
   "os.execv(b'/usr/bin/python3', [b'python3', b'-c', b'import time; time.sleep(600)'] + args)\n",
   detach=True)

# 2. Files (and a FIFO) named with the same payloads: `space diff` lists them, `space cp` of
# their directory skips the FIFO by name.
py("import os\n"
   "names = [(a if isinstance(a, bytes) else a.encode()).replace(b'/', b'_') for a in PAYLOADS]\n"
   "os.makedirs(b'/root/forge', exist_ok=True)\n"
   "for n in names:\n"
   "    open(b'/root/forge/' + n, 'wb').close()\n"
   "os.mkfifo(b'/root/forge/fifo' + names[0])\n")

BIDI = set(chr(c) for c in list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)) +
           [0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x061C, 0x2028, 0x2029, 0xFEFF])


def check(what, data):
    """Every way `data` (what a command printed) could act on a terminal."""
    text = data.decode("utf-8", "surrogateescape")
    found = []
    if "\x1b" in text:
        found.append("a raw ESC")
    if any("\x80" <= ch <= "\x9f" or "\udc80" <= ch <= "\udc9f" for ch in text):
        found.append("a raw C1 control")
    if any((ch < " " and ch not in "\n\t") or ch == "\x7f" for ch in text):
        found.append("a raw control character")
    if any(ch in BIDI for ch in text):
        found.append("a raw bidi/invisible format character")
    breaks = text
    for sep in ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"):
        breaks = breaks.replace(sep, "\n")
    if any(line.lstrip().startswith(MARK) for line in breaks.split("\n")):
        found.append("a forged line")
    if found:
        escaped("`space %s` printed %s" % (what, ", ".join(found)))
    return not found


for _ in range(50):  # the detached exec may not have reached execv yet
    rc, out, err = space("ps", SANDBOX)
    if MARK in out.decode("utf-8", "replace"):
        break
    time.sleep(0.2)
if MARK not in out.decode("utf-8", "replace"):
    broken("`space ps` never showed the payload process (rc %d): %r" % (rc, err[-200:]))
checks = {"ps": out + err}
for args in (["ps", "--json"], ["diff"], ["diff", "--json"], ["audit"], ["audit", "--json"]):
    rc, out, err = space(*args[:1], SANDBOX, *args[1:])
    checks[" ".join(args)] = out + err  # an error message is checked like any output
    if rc != 0:
        note("`space %s` failed (rc %d): %r" % (" ".join(args), rc, err[-200:]))
# What a runtime does not have (diff of a microVM is 501, its exec audit is the agent's) is not
# tested there; say so instead of passing silently.
if "/root/forge" not in checks["diff"].decode("utf-8", "replace"):
    note("`space diff` does not list the payload files: not tested here")
if MARK not in checks["audit"].decode("utf-8", "replace"):
    note("`space audit` does not show the payload exec: not tested here")
rc, out, err = space("cp", "%s:/root/forge" % SANDBOX, os.path.join(WORK, "forge"))
checks["cp"] = out + err
if b"skipping" in err:
    note("`space cp` named the FIFO it skipped")

clean = [what for what, data in checks.items() if check(what, data)]
note("no raw control, C1, bidi or forged line in `space %s`" % "`, `space ".join(clean))
finish()
