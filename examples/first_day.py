"""An agent developer's first day with SPACE, end to end: upload a project, see its test fail,
patch it, rerun, snapshot, lose everything to an `rm -rf`, roll back, plot with the code
interpreter, serve a port, extend the lifetime. Run (spaced running, as root or with $SPACE_API):
PYTHONPATH=sdk/python python3 examples/first_day.py [OUT_DIR]"""
import os, sys, tempfile, urllib.request

from space_sandbox import Sandbox

out = sys.argv[1] if len(sys.argv) > 1 else "."
project = tempfile.mkdtemp()  # the agent's work: a function with a bug and its test
open(os.path.join(project, "calc.py"), "w").write("def add(a, b):\n    return a - b\n")
open(os.path.join(project, "test_calc.py"), "w").write(
    "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")

with Sandbox.create(timeout="10m") as sb:
    sb.files.upload_dir(project, "/root/project")
    # -B: no .pyc, which would hide a patch made within the second of the first run
    test = lambda: sb.commands.run("python3 -B -m unittest -q", cwd="/root/project")
    print("tests:", test().exit_code)                                  # 1: the bug
    sb.files.write("/root/project/calc.py", "def add(a, b):\n    return a + b\n")
    print("tests after the patch:", test().exit_code)                  # 0
    sb.snapshot(name="before-cleanup")
    sb.commands.run("rm -rf /root/project")
    print("after rm -rf:", sb.files.exists("/root/project"))           # False
    sb.rollback("before-cleanup")
    print("after rollback:", test().exit_code)                         # 0

    ex = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])")
    open(os.path.join(out, "plot.png"), "wb").write(ex.results[0].png)
    print("plot:", os.path.join(out, "plot.png"))

    sb.commands.run("cd /root/project && python3 -m http.server 8000", background=True)
    sb.wait_for_port(8000, timeout=30)
    print("served:", urllib.request.urlopen(sb.get_url(8000) + "/calc.py").read().decode()
          .splitlines()[1].strip())                                    # return a + b
    sb.set_timeout("30m")                                              # more time, from now
