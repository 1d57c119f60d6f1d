"""Files in a sandbox: ``sandbox.files.read/write/list/remove/...``."""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from typing import IO, Iterable, Iterator, List, Optional, Union

from .client import Client

Data = Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]


@dataclass
class EntryInfo:
    """A file, directory or symlink inside the sandbox."""

    path: str
    name: str
    type: str  # file, dir, symlink, other
    mode: int
    size: int
    mtime: Optional[int] = None
    target: Optional[str] = None  # symlinks only

    @classmethod
    def from_api(cls, j: dict, parent: Optional[str] = None) -> "EntryInfo":
        if parent is not None:  # a listing's entry: its name in `parent`
            path = parent.rstrip("/") + "/" + j["name"]
        else:
            path = j["path"]
        return cls(path=path, name=path.rstrip("/").rsplit("/", 1)[-1] or "/", type=j["type"],
                   mode=int(j.get("mode", 0)), size=int(j.get("size", 0)), mtime=j.get("mtime"),
                   target=j.get("target"))


def _chunks(f: IO[bytes], size: int = 1 << 16) -> Iterator[bytes]:
    while True:
        b = f.read(size)
        if not b:
            return
        yield b


class Files:
    """``sandbox.files``. Paths are absolute paths inside the sandbox."""

    def __init__(self, sandbox_id: str, client: Client) -> None:
        self._id = sandbox_id
        self._client = client
        self._path = "/v1/sandboxes/%s/files" % sandbox_id

    def read(self, path: str, *, format: str = "text") -> Union[str, bytes, Iterator[bytes]]:
        """A file's content: ``format="text"`` (str, UTF-8), ``"bytes"``, or ``"stream"`` (an
        iterator of chunks, for large files)."""
        if format not in ("text", "bytes", "stream"):
            raise ValueError('format must be "text", "bytes" or "stream"')
        r = self._client.request("GET", self._path, query={"path": path}, stream=True,
                                 timeout=None)
        if r.headers.get("x-space-file-type") == "dir":
            r.close()
            raise IsADirectoryError("%s is a directory in sandbox %s: use list() or "
                                    "download_dir()" % (path, self._id))
        if format == "stream":
            return r.iter_chunks()
        data = r.read()
        return data.decode("utf-8") if format == "text" else data

    def read_bytes(self, path: str) -> bytes:
        return self.read(path, format="bytes")  # type: ignore[return-value]

    def write(self, path: str, data: Data, *, mode: int = 0o644) -> None:
        """Writes a file (its parent directories are created): ``data`` is str (UTF-8), bytes, a
        binary file object or an iterable of bytes chunks (streamed)."""
        body: Union[bytes, Iterable[bytes]]
        if isinstance(data, str):
            body = data.encode()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            body = _chunks(data)  # type: ignore[arg-type]
        else:
            body = data  # type: ignore[assignment]
        self._client.request("PUT", self._path,
                             query={"path": path, "mode": "%o" % (mode & 0o7777), "parents": True},
                             body=body, content_type="application/octet-stream", timeout=None)

    def list(self, path: str) -> List[EntryInfo]:
        """The entries of directory ``path`` (not recursive), sorted by name."""
        j = self._client.call("GET", self._path, query={"path": path, "list": True})
        return sorted((EntryInfo.from_api(e, path) for e in j["entries"]), key=lambda e: e.name)

    def stat(self, path: str) -> EntryInfo:
        j = self._client.call("GET", self._path, query={"path": path, "stat": True})
        return EntryInfo.from_api(j)

    def exists(self, path: str) -> bool:
        from .errors import NotFoundError
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or a directory tree with ``recursive=True``."""
        self._client.request("DELETE", self._path, query={"path": path, "recursive": recursive})

    def make_dir(self, path: str, *, mode: int = 0o755) -> None:
        """Creates directory ``path`` and its parents (no error if it exists)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(".")
            info.type = tarfile.DIRTYPE
            info.mode = mode & 0o7777
            tar.addfile(info)
        self._client.request("PUT", self._path, query={"path": path}, body=buf.getvalue(),
                             content_type="application/x-tar")

    def upload_dir(self, local_dir: str, path: str) -> None:
        """Copies local directory ``local_dir``'s contents into ``path`` (a tar stream)."""
        if not os.path.isdir(local_dir):
            raise NotADirectoryError(local_dir)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(local_dir, arcname=".")
        self._client.request("PUT", self._path, query={"path": path}, body=buf.getvalue(),
                             content_type="application/x-tar", timeout=None)

    def download_dir(self, path: str, local_dir: str) -> None:
        """Copies directory ``path`` of the sandbox into ``local_dir`` (created if missing).
        Members that would land outside ``local_dir`` are refused."""
        r = self._client.request("GET", self._path, query={"path": path}, stream=True, timeout=None)
        if r.headers.get("x-space-file-type") != "dir":
            r.close()
            raise NotADirectoryError("%s is not a directory in sandbox %s" % (path, self._id))
        data = r.read()
        os.makedirs(local_dir, exist_ok=True)
        root = os.path.realpath(local_dir)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for m in tar.getmembers():
                dest = os.path.realpath(os.path.join(root, m.name))
                if dest != root and not dest.startswith(root + os.sep):
                    raise ValueError("refusing tar member %r outside %s" % (m.name, local_dir))
                if m.issym() or m.islnk():
                    link = os.path.realpath(os.path.join(os.path.dirname(dest), m.linkname))
                    if link != root and not link.startswith(root + os.sep):
                        raise ValueError("refusing link %r -> %r" % (m.name, m.linkname))
                if m.isdev():
                    raise ValueError("refusing device %r" % m.name)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(root, filter="data")
            else:
                tar.extractall(root)
