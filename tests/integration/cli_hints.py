"""The CLI hints spaced's messages can carry: every backticked `space ...` command in a string
literal of the C++ sources (src/, the CLI itself left out), as the message reads it. The SDKs
rewrite them into their own calls (CLI_HINTS in sdk/python/space_sandbox/errors.py and
sdk/typescript/src/errors.ts); test_sdk_python.py and test_sdk_typescript.py check that each one
found here has an entry there, so that a hint added to spaced fails them until the SDKs phrase it.

A message is the run of adjacent string literals, joined by `+ expression +` (each expression
reads ID): `"`space image rm " + name + "` first"` is "`space image rm ID` first". Comments are
skipped.
"""

import os
import re

from harness import REPO

_RAW = re.compile(r'R"([^(\s]*)\(')


def _tokens(text):
    """C++ source -> [("s", literal contents) | ("x", code between literals)]."""
    out, code, i, n = [], [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "'":  # a character literal: '"' and '`' are no strings
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            code.append(text[i:j + 1])
            i = j + 1
        elif c == "R" and _RAW.match(text, i) and not (text[i - 1:i].isalnum() or
                                                       text[i - 1:i] == "_"):
            m = _RAW.match(text, i)
            end = text.find(")" + m.group(1) + '"', m.end())
            out += [("x", "".join(code)), ("s", text[m.end():end])]
            code, i = [], end + len(m.group(1)) + 2
        elif c == '"':
            j, s = i + 1, []
            while j < n and text[j] != '"':
                s.append(text[j + 1] if text[j] == "\\" else text[j])
                j += 2 if text[j] == "\\" else 1
            out += [("x", "".join(code)), ("s", "".join(s))]
            code, i = [], j + 1
        else:
            code.append(c)
            i += 1
    out.append(("x", "".join(code)))
    return out


def messages(text):
    """The messages (runs of string literals joined by + ... +) of a C++ source."""
    msgs, cur = [], None
    for kind, t in _tokens(text):
        if kind == "s":
            cur = (cur or "") + t
        elif cur is not None:
            between = t.strip()
            if between in ("", "+"):
                continue
            if between.startswith("+") and between.endswith("+") and ";" not in between:
                cur += "ID"
            else:
                msgs.append(cur)
                cur = None
    if cur is not None:
        msgs.append(cur)
    return msgs


def spaced_cli_hints(root=os.path.join(REPO, "src")):
    """{"space ls": ["src/daemon/daemon.cc", ...], ...}: each command between backticks in a
    message of spaced's sources (and space-gateway's, which answers SDKs in a cluster), with the
    files that send it. Left out: the CLI itself, and the E2B door (src/e2b), whose messages go
    to E2B's SDKs, never to SPACE's (docs/e2b.md: they name SPACE's CLI on purpose, as what to
    use instead)."""
    found = {}
    skip = {os.path.join(root, "cli"), os.path.join(root, "e2b")}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if os.path.join(d, x) not in skip)
        for f in sorted(files):
            if not f.endswith((".cc", ".h")):
                continue
            path = os.path.join(d, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                for msg in messages(fh.read()):
                    for command in re.findall(r"`(space [a-z][^`]*)`", msg):
                        found.setdefault(command, []).append(os.path.relpath(path, REPO))
    return found
