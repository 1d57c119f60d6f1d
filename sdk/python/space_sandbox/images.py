"""Images: list, inspect, remove, and build from a Dockerfile (docs/images.md).

    from space_sandbox import Space

    image = Space().build_image("agent-env", context="./agent", build_args={"PIP": "24.0"},
                                on_event=lambda e: print(e))
    print(image["size_bytes"])

A build sends the context directory as a tar made as it goes (what ``.dockerignore`` at its root
leaves out is not sent, by Docker's rules; the Dockerfile and ``.dockerignore`` always are),
runs each RUN step in a sandbox of the build profile and streams the steps' progress back; the
build may take many minutes, so the stream has no time limit.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets as _secrets
import stat
import tarfile
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .client import Client, transport_error
from .errors import InvalidArgumentError, error_for

_IMAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_BLOCK = 512
_CHUNK = 1 << 20


def _image_segment(name: Any) -> str:
    if not isinstance(name, str) or not _IMAGE_NAME.fullmatch(name):
        raise InvalidArgumentError("bad image name %s: use letters, digits, '_', '-' and '.', "
                                   "starting with a letter or digit" % json.dumps(name,
                                                                                 default=repr)[:80],
                                   code="invalid_argument")
    return name


class DockerIgnore:
    """A ``.dockerignore``, matched as Docker does: patterns relative to the context root,
    ``*``, ``?``, ``[a-z]``/``[^a-z]``, ``**`` (any number of directories), ``!`` exceptions,
    ``#`` comments; a pattern matching a directory matches what is under it; the last matching
    pattern decides."""

    def __init__(self, text: str = "") -> None:
        self._patterns: List[Tuple[List[Tuple[str, Any]], bool]] = []
        for n, line in enumerate(text.split("\n"), 1):
            if n == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if line.startswith("#"):
                continue
            line = line.strip()
            if not line:
                continue
            exception = line.startswith("!")
            if exception:
                line = line[1:].strip()
                if not line:
                    raise InvalidArgumentError(".dockerignore line %d: \"!\" needs a pattern "
                                               "after it" % n, code="invalid_argument")
            pattern = _clean(line)
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern[1:]
            self._patterns.append((_compile(pattern, n), exception))
        self.has_exceptions = any(e for _, e in self._patterns)

    def excluded(self, path: str) -> bool:
        """Whether ``path`` (relative to the context, '/'-separated) is left out."""
        excluded = False
        parts = path.split("/")
        for tokens, exception in self._patterns:
            if exception != excluded:
                continue
            match = any(_match(tokens, "/".join(parts[:i]))
                        for i in range(len(parts), 0, -1))
            if match:
                excluded = not exception
        return excluded


def _clean(path: str) -> str:
    rooted = path.startswith("/")
    out: List[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not rooted:
                out.append(part)
            continue
        out.append(part)
    s = ("/" if rooted else "") + "/".join(out)
    return s or "."


def _compile(text: str, line: int) -> List[Tuple[str, Any]]:
    def bad(why: str) -> InvalidArgumentError:
        return InvalidArgumentError(".dockerignore line %d: %s in %r" % (line, why, text[:200]),
                                    code="invalid_argument")
    tokens: List[Tuple[str, Any]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch == "*":
            if i < len(text) and text[i] == "*":
                i += 1
                if i < len(text) and text[i] == "/":
                    i += 1
                tokens.append(("rest", None) if i == len(text) else ("dirs", None))
            else:
                tokens.append(("star", None))
        elif ch == "?":
            tokens.append(("one", None))
        elif ch == "\\":
            if i == len(text):
                raise bad("a '\\' at the end escapes nothing")
            tokens.append(("char", text[i]))
            i += 1
        elif ch == "[":
            negated = i < len(text) and text[i] == "^"
            if negated:
                i += 1
            chars: set = set()
            closed = False
            while i < len(text):
                lo = text[i]
                i += 1
                if lo == "]":
                    closed = True
                    break
                if lo == "\\":
                    if i == len(text):
                        break
                    lo = text[i]
                    i += 1
                hi = lo
                if i + 1 < len(text) and text[i] == "-" and text[i + 1] != "]":
                    hi = text[i + 1]
                    i += 2
                    if hi == "\\":
                        if i == len(text):
                            break
                        hi = text[i]
                        i += 1
                    if hi < lo:
                        raise bad("a range that runs backwards")
                chars.update(chr(c) for c in range(ord(lo), ord(hi) + 1))
            if not closed:
                raise bad("a '[' without its ']'")
            if not chars:
                raise bad("an empty set \"[]\"")
            tokens.append(("set", (frozenset(chars), negated)))
        else:
            tokens.append(("char", ch))
    return tokens


def _match(tokens: List[Tuple[str, Any]], path: str) -> bool:
    # nxt[j]: the tokens after the current one match path[j:]. One row per token, from the end
    # (a table, not backtracking: no pattern makes a match slow).
    n = len(path)
    nxt = [False] * n + [True]
    for kind, arg in reversed(tokens):
        row = [False] * (n + 1)
        if kind == "rest":
            row = [True] * (n + 1)
        elif kind == "char":
            for j in range(n):
                row[j] = path[j] == arg and nxt[j + 1]
        elif kind == "one":
            for j in range(n):
                row[j] = path[j] != "/" and nxt[j + 1]
        elif kind == "set":
            chars, negated = arg
            for j in range(n):
                row[j] = path[j] != "/" and ((path[j] in chars) != negated) and nxt[j + 1]
        elif kind == "star":
            row[n] = nxt[n]
            for j in range(n - 1, -1, -1):
                row[j] = nxt[j] or (path[j] != "/" and row[j + 1])
        elif kind == "dirs":  # nothing, or anything that ends with '/'
            after_slash = False
            row[n] = nxt[n]
            for j in range(n - 1, -1, -1):
                after_slash = after_slash or (path[j] == "/" and nxt[j + 1])
                row[j] = nxt[j] or after_slash
        nxt = row
    return nxt[0]


def _header(name: str, st: os.stat_result, kind: bytes, size: int = 0,
            linkname: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    info.size = size
    info.linkname = linkname
    info.uid = info.gid = 0  # files of a build context belong to root, as docker build's do
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _file_entry(name: str, full: str, st: os.stat_result) -> Iterator[bytes]:
    yield _header(name, st, tarfile.REGTYPE, st.st_size)
    left = st.st_size
    with open(full, "rb") as f:
        while left > 0:
            data = f.read(min(_CHUNK, left)) or b"\0" * min(_CHUNK, left)  # a file that shrank
            left -= len(data)
            yield data
    if st.st_size % _BLOCK:
        yield b"\0" * (_BLOCK - st.st_size % _BLOCK)


def context_tar(context: str, dockerfile: str, outside: Optional[str] = None,
                ignore: Optional[DockerIgnore] = None) -> Iterator[bytes]:
    """The build context ``context`` as a tar stream: what ``ignore`` leaves out is not sent
    (the Dockerfile ``dockerfile`` and ``.dockerignore`` always are), then the local file
    ``outside`` (a Dockerfile from outside the context) as ``dockerfile``."""
    ignore = ignore or DockerIgnore()

    written = set()  # excluded directories written after all, for something under them

    def walk(rel: str, pending: List[Tuple[str, os.stat_result]]) -> Iterator[bytes]:
        full_dir = os.path.join(context, rel) if rel else context
        for name in sorted(os.listdir(full_dir)):
            r = rel + "/" + name if rel else name
            full = os.path.join(context, r)
            st = os.lstat(full)
            is_dir = stat.S_ISDIR(st.st_mode)
            keep = (r == ".dockerignore" or (outside is None and r == dockerfile)
                    or not ignore.excluded(r))
            if not keep:
                holds_dockerfile = outside is None and dockerfile.startswith(r + "/")
                if is_dir and (ignore.has_exceptions or holds_dockerfile):
                    yield from walk(r, pending + [(r, st)])
                continue
            for p, pst in pending:
                if p not in written:
                    written.add(p)
                    yield _header(p + "/", pst, tarfile.DIRTYPE)
            if is_dir:
                yield _header(r + "/", st, tarfile.DIRTYPE)
                yield from walk(r, [])
            elif stat.S_ISLNK(st.st_mode):
                yield _header(r, st, tarfile.SYMTYPE, linkname=os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                yield from _file_entry(r, full, st)
            # sockets, FIFOs, devices: skipped

    yield from walk("", [])
    if outside is not None:
        yield from _file_entry(dockerfile, outside, os.stat(outside))
    yield b"\0" * (2 * _BLOCK)


def _batched(chunks: Iterator[bytes], size: int = _CHUNK) -> Iterator[bytes]:
    buf: List[bytes] = []
    n = 0
    for c in chunks:
        buf.append(c)
        n += len(c)
        if n >= size:
            yield b"".join(buf)
            buf, n = [], 0
    if buf:
        yield b"".join(buf)


def prepare_context(context: str, dockerfile: str) -> Tuple[str, Optional[str], DockerIgnore]:
    """(the Dockerfile's name in the tar, its local path when it lies outside the context, the
    context's .dockerignore). ``dockerfile`` is relative to ``context`` (absolute: as is)."""
    if not os.path.isdir(context):
        raise InvalidArgumentError("the build context %s is not a directory" % context,
                                   code="invalid_argument")
    root = os.path.realpath(context)
    local = dockerfile if os.path.isabs(dockerfile) else os.path.join(context, dockerfile)
    if not os.path.isfile(local):
        raise error_for("not_found", "no Dockerfile at %s" % local)
    real = os.path.realpath(local)
    rel = os.path.relpath(real, root)
    outside: Optional[str] = None
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.islink(local) \
            or os.pardir in dockerfile.split("/"):
        name = ".dockerfile." + _secrets.token_hex(8)
        outside = real
    else:
        name = rel.replace(os.sep, "/")
    ignore = DockerIgnore()
    ignore_file = os.path.join(root, ".dockerignore")
    if os.path.isfile(ignore_file):
        with open(ignore_file, "rb") as f:
            ignore = DockerIgnore(f.read().decode("utf-8", "surrogateescape"))
    return name, outside, ignore


class Space:
    """The daemon's own resources (images), as opposed to one sandbox's::

        space = Space()              # or Space(Client(api_url=..., token=...))
        space.list_images()
    """

    def __init__(self, client: Optional[Client] = None) -> None:
        self._client = client or Client()

    def list_images(self) -> List[Dict[str, Any]]:
        """Every image, the built-in ``host`` included, as GET /v1/images shows them."""
        return self._client.call("GET", "/v1/images")["images"]

    def get_image(self, name: str) -> Dict[str, Any]:
        """One image: its format, digest, size and config (``NotFoundError`` if none)."""
        return self._client.call("GET", "/v1/images/" + _image_segment(name))

    def remove_image(self, name: str) -> None:
        """Removes an image (``ConflictError`` while a sandbox uses it)."""
        self._client.request("DELETE", "/v1/images/" + _image_segment(name))

    def build_image(self, name: str, context: str = ".", dockerfile: str = "Dockerfile",
                    build_args: Optional[Dict[str, str]] = None, profile: Optional[str] = None,
                    secrets: Optional[Iterable[str]] = None, allow: Optional[Iterable[str]] = None,
                    no_cache: bool = False, step_timeout: Union[None, float, str] = None,
                    on_event: Optional[Callable[[Dict[str, Any]], None]] = None
                    ) -> Dict[str, Any]:
        """Builds image ``name`` from the Dockerfile ``dockerfile`` (relative to ``context``,
        or absolute; one outside the context is sent along with it) and the build context
        directory ``context``, and returns the image (as :meth:`get_image` would).

        Each RUN runs in a sandbox of ``profile`` (default: "build" where spaced has one, else
        "test"): its egress allowlist, narrowed by ``allow``; ``secrets`` are the credential
        names the gateway may inject into its requests. ``build_args`` are the ARGs' values;
        ``no_cache`` runs every step again; ``step_timeout`` limits each RUN (seconds or
        "10m"). ``on_event`` gets every event of the build as it comes (a dict: "warning",
        "step", "output", "step_done", "done"; see docs/images.md). A failed build raises the
        :mod:`errors` class of its code, with spaced's message (it names the failing step)."""
        name = _image_segment(name)
        tar_name, outside, ignore = prepare_context(context, dockerfile)
        query: Dict[str, Any] = {"dockerfile": tar_name}
        if profile is not None:
            query["profile"] = profile
        if no_cache:
            query["no_cache"] = True
        if step_timeout is not None:
            query["step_timeout"] = step_timeout
        if build_args:
            for k, v in build_args.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise InvalidArgumentError("build_args must map names to strings, got %r: %r"
                                               % (k, v), code="invalid_argument")
            query["build_args"] = json.dumps(build_args, separators=(",", ":"))
        for key, items in (("secrets", secrets), ("allow", allow)):
            if items is None:
                continue
            items = [items] if isinstance(items, str) else list(items)
            for item in items:
                if not isinstance(item, str) or not item or "," in item:
                    raise InvalidArgumentError("bad %s entry %r: one name each, without commas"
                                               % (key, item), code="invalid_argument")
            if items:
                query[key] = ",".join(items)
        body = _batched(context_tar(context, tar_name, outside, ignore))
        # No time limit: a build's steps may run for many minutes without a line.
        r = self._client.request("POST", "/v1/images/%s/build" % name, query=query, body=body,
                                 content_type="application/x-tar", timeout=None, stream=True)
        try:
            for raw in r.iter_lines():
                if not raw.strip():
                    continue
                try:
                    ev = json.loads(raw)
                except ValueError:
                    raise error_for("protocol_error", "spaced sent a build event that is not "
                                    "JSON: %r" % raw[:200]) from None
                if on_event is not None:
                    on_event(ev)
                if ev.get("type") == "done":
                    return ev.get("image", {})
                if ev.get("type") == "error":
                    err = ev.get("error") or {}
                    raise error_for(err.get("code", "internal"),
                                    err.get("message", "the build failed"))
        except (OSError, http.client.HTTPException) as e:
            raise transport_error(e, self._client.where(), "reading the build's events") from e
        finally:
            r.close()
        raise error_for("protocol_error", "spaced ended the build of %s without a result; see "
                        "its log" % name)
