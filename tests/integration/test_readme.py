"""The README's quick tour of the CLI, pasted into bash as is (with `set -e`) against a real
spaced, in a scratch directory: every line must work, and what it prints must be what the
comments say."""

import os
import re
import subprocess
import tempfile

from harness import BUILD_DIR, REPO, SpaceTestCase, main


class ReadmeTourTest(SpaceTestCase):
    def test_quick_tour_runs_as_pasted(self):
        with open(os.path.join(REPO, "README.md")) as f:
            text = f.read()
        section = text[text.index("## A quick tour of the CLI"):]
        tour = re.search(r"```\n(.*?)```", section, re.S).group(1)
        self.assertIn("space run -- python3", tour)
        with tempfile.TemporaryDirectory() as work:
            env = dict(self.env(), PATH=BUILD_DIR + os.pathsep + os.environ["PATH"])
            env.pop("SPACE_API", None)
            p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", tour], cwd=work, env=env,
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (p.stdout[-3000:],
                                                                         p.stderr[-3000:]))
            out = p.stdout
            for expected in ("hello\n", "42\n", "data\n", "V\n/tmp\n", "nobody\n", "hi from Linux\n",
                             "D /root/project", "started\n", "exit 137\n",
                             "built\nprint(42)\n"):
                self.assertIn(expected, out)
            self.assertTrue(os.path.exists(os.path.join(work, "notes.txt")))
            self.assertRegex(out, r"now expires at 20")
            self.assertIn("events, hash chain intact", out)  # audit --verify


if __name__ == "__main__":
    main()
