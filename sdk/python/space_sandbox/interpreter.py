"""SPACE's code interpreter, run inside a sandbox by the SDKs (sandbox.run_code): a stateful
Python context whose variables survive between runs.

    python3 interpreter.py serve SOCKET   the context: executes code sent to SOCKET, one run at
                                          a time, in one global namespace (started detached)
    python3 interpreter.py run SOCKET [TIMEOUT]
                                          one run: the code on stdin, the events on stdout as
                                          JSON lines; on TIMEOUT seconds interrupts the run
                                          (KeyboardInterrupt in the context, which lives on)

Events: {"type": "stdout"|"stderr", "text"}, {"type": "result", "data": {mime: value},
"is_main": bool} (the last expression's value, is_main, and rich displays: matplotlib figures as
image/png, objects with _repr_html_/_repr_png_/_repr_svg_/_repr_json_/_repr_markdown_),
{"type": "error", "name", "value", "traceback"}, and last {"type": "end", "execution_count"}
(the runs this context has had, this one included).

A run's request may carry "env" ({"NAME": "value"}), set in the context for that run only; `run`
takes it from the variable SPACE_INTERPRETER_ENV (JSON). `serve` works in SPACE_INTERPRETER_CWD
if set (made if missing). SIGINT or SIGTERM to `run` interrupts the context's run
(KeyboardInterrupt) and ends `run`: how spaced's E2B door (src/e2b/interpreter.cc, which embeds
this file) stops a run whose client went away.

Standard library only; this file is the one copy, the TypeScript SDK ships it too.
"""

import ast
import base64
import io
import json
import os
import signal
import socket
import sys
import time
import traceback

MIME_METHODS = (("text/html", "_repr_html_"), ("image/png", "_repr_png_"),
                ("image/svg+xml", "_repr_svg_"), ("image/jpeg", "_repr_jpeg_"),
                ("application/json", "_repr_json_"), ("text/markdown", "_repr_markdown_"),
                ("text/latex", "_repr_latex_"))


def rich(value):
    data = {"text/plain": repr(value)}
    for mime, method in MIME_METHODS:
        fn = getattr(value, method, None)
        if fn is None or isinstance(value, type):
            continue
        try:
            out = fn()
        except Exception:  # noqa: BLE001 - a broken repr is not the run's error
            continue
        if out is None:
            continue
        if isinstance(out, bytes):
            out = base64.b64encode(out).decode()
        elif not isinstance(out, str):
            out = json.dumps(out) if mime == "application/json" else str(out)
        data[mime] = out
    return data


class Stream(io.TextIOBase):
    def __init__(self, send, name):
        self.send, self.name = send, name

    def writable(self):
        return True

    def write(self, s):
        if s:
            self.send({"type": self.name, "text": s})
        return len(s)

    def flush(self):
        pass


def figures(send):
    """Open matplotlib figures become image/png results (and are closed)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        send({"type": "result", "is_main": False,
              "data": {"text/plain": repr(fig), "image/png": base64.b64encode(buf.getvalue()).decode()}})
    plt.close("all")


def execute(code, namespace, send):
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Stream(send, "stdout"), Stream(send, "stderr")
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), namespace)
        value = eval(compile(last, "<cell>", "eval"), namespace) if last is not None else None
        figures(send)
        if value is not None:
            namespace["_"] = value
            send({"type": "result", "is_main": True, "data": rich(value)})
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt (timeouts) too
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        # Drop this file's own frames: the user's code starts at <cell>.
        tb = [t for t in tb if __file__ not in t]
        send({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": "".join(tb)})
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = out, err


def set_env(env):
    """Sets a run's own variables; returns what restore_env puts back."""
    saved = {}
    if isinstance(env, dict):
        for k, v in env.items():
            if (isinstance(k, str) and isinstance(v, str) and k and "=" not in k
                    and "\0" not in k + v):
                saved.setdefault(k, os.environ.get(k))
                os.environ[k] = v
    return saved


def restore_env(saved):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def serve(path):
    os.environ.setdefault("MPLBACKEND", "Agg")  # figures without a display
    # Debian's matplotlib reads its defaults from /etc/matplotlibrc, which an image with a bare
    # /etc (the host image) lacks; the same file is in its data directory.
    for rc in ("/usr/share/matplotlib/mpl-data/matplotlibrc",):
        if not os.path.exists("/etc/matplotlibrc") and os.path.exists(rc):
            os.environ.setdefault("MATPLOTLIBRC", rc)
    cwd = os.environ.pop("SPACE_INTERPRETER_CWD", "")  # the context's directory, made if missing
    if cwd:
        os.makedirs(cwd, exist_ok=True)
        os.chdir(cwd)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(8)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with open(path + ".pid", "w") as f:
        f.write(str(os.getpid()))
    count = 0
    while True:
        try:
            conn, _ = srv.accept()
            with conn, conn.makefile("rwb") as f:
                try:
                    req = json.loads(f.readline())
                except (ValueError, OSError):
                    continue

                def send(ev, f=f):
                    try:
                        f.write(json.dumps(ev).encode() + b"\n")
                        f.flush()
                    except OSError:
                        pass

                send({"type": "started", "pid": os.getpid()})
                count += 1
                saved = {}
                try:
                    saved = set_env(req.get("env"))
                    execute(req.get("code", ""), namespace, send)
                except KeyboardInterrupt:  # an interrupt that came between runs
                    pass
                finally:
                    restore_env(saved)
                send({"type": "end", "execution_count": count})
        # The client went away mid-run (its end could not be sent), or an interrupt came late,
        # after the run: the context lives on.
        except (OSError, KeyboardInterrupt):
            pass


def ended(path):
    """Whether the context's process is known to have ended (its pid file names no process)."""
    try:
        with open(path + ".pid") as f:
            os.kill(int(f.read()), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        pass
    return False


def run(path, timeout):
    code = sys.stdin.read()
    deadline = time.monotonic() + timeout if timeout > 0 else None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connected = False
    for _ in range(200):  # the context may still be starting
        try:
            s.connect(path)
            connected = True
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if ended(path):
                break
            time.sleep(0.05)
    if not connected:
        sys.stdout.write(json.dumps({"type": "error", "name": "ContextError",
                                     "value": "the code context is not running (its process "
                                              "ended); create a new one", "traceback": ""}) + "\n")
        sys.stdout.write(json.dumps({"type": "end"}) + "\n")
        return
    req = {"code": code}
    try:
        env = json.loads(os.environ.get("SPACE_INTERPRETER_ENV") or "null")
    except ValueError:
        env = None
    if isinstance(env, dict):
        req["env"] = env
    server = {}

    def stop(signum, frame):  # the caller went away: interrupt the context's run, and end
        if server.get("pid"):
            try:
                os.kill(server["pid"], signal.SIGINT)
            except OSError:
                pass
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    s.sendall(json.dumps(req).encode() + b"\n")
    interrupted = False
    server_pid = None
    pending = b""
    while True:
        if deadline is not None and not interrupted:
            s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except (socket.timeout, TimeoutError):
            interrupted = True
            s.settimeout(None)
            if server_pid:
                os.kill(server_pid, signal.SIGINT)  # KeyboardInterrupt in the run
            sys.stdout.write(json.dumps({"type": "stderr", "text": "interrupted: the run took "
                                         "longer than %gs\n" % timeout}) + "\n")
            sys.stdout.flush()
            continue
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            ev = json.loads(line)
            if ev.get("type") == "started":
                server_pid = server["pid"] = ev.get("pid")
                continue
            sys.stdout.write(line.decode() + "\n")
            sys.stdout.flush()
            if ev.get("type") == "end":
                return


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        sys.exit("usage: interpreter.py serve SOCKET | run SOCKET [TIMEOUT]")
