"""Python SDK for SPACE (standard library only).

    from space_sandbox import Sandbox

    with Sandbox.create(timeout="10m") as sb:
        sb.files.write("/root/hello.py", "print(6 * 7)")
        print(sb.commands.run("python3 /root/hello.py").stdout)   # 42
"""

from .client import Client
from .code import CodeContext, Execution, ExecutionError, Result
from .commands import CommandHandle, CommandResult, Commands
from .errors import (AlreadyExistsError, AuthenticationError, CommandExitError, ConflictError,
                     DaemonRestartError, InternalError, InvalidArgumentError, NotFoundError,
                     PayloadTooLargeError, PermissionDeniedError, ProtocolError,
                     ResourceExhaustedError, SpaceError, SpaceTimeoutError, UnavailableError,
                     UnimplementedError)
from .files import EntryInfo, Files
from .images import DockerIgnore, Space
from .ports import PortForward
from .pty import Pty, PtyHandle
from .sandbox import Sandbox, SandboxInfo, SnapshotInfo

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "SandboxInfo", "SnapshotInfo", "Client", "Commands", "CommandResult",
    "CommandHandle", "Files", "EntryInfo", "SpaceError", "InvalidArgumentError", "NotFoundError",
    "AlreadyExistsError", "ConflictError", "AuthenticationError", "PermissionDeniedError",
    "PayloadTooLargeError", "ResourceExhaustedError", "UnimplementedError", "ProtocolError",
    "UnavailableError", "DaemonRestartError", "SpaceTimeoutError", "InternalError",
    "CommandExitError", "CodeContext", "Execution", "ExecutionError", "Result", "Pty", "PtyHandle",
    "PortForward", "Space", "DockerIgnore",
]
