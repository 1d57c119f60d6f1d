"""An agent's loop with SPACE: the model writes code, the sandbox runs it, the results (text and
a plot) go back to the model. The model here is a stub that replays three steps; put your LLM
call in next_step(). Run: PYTHONPATH=sdk/python python3 examples/agent_loop.py [plot.png]"""
import sys

from space_sandbox import Sandbox

STEPS = [  # what a model might answer, one code cell per turn
    "import random\nrandom.seed(7)\ndata = [random.gauss(0, 1) for _ in range(1000)]\nlen(data)",
    "sum(x * x for x in data) / len(data)",
    "import matplotlib.pyplot as plt\nplt.hist(data, bins=30)\nplt.title('1000 draws')",
]


def next_step(history):  # replace with a call to your model, given what the sandbox said
    return STEPS[len(history)] if len(history) < len(STEPS) else None


with Sandbox.create(timeout="10m") as sb:
    history = []
    while (code := next_step(history)) is not None:
        ex = sb.run_code(code, timeout=60)
        said = ex.error.traceback if ex.error else (ex.text or "".join(ex.stdout))
        print(">>> %s\n%s" % (code.splitlines()[-1], said))
        for r in ex.results:
            if r.png:
                out = sys.argv[1] if len(sys.argv) > 1 else "plot.png"
                with open(out, "wb") as f:
                    f.write(r.png)
                print("plot saved to", out)
        history.append((code, said))
