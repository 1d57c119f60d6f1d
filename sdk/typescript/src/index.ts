// TypeScript SDK for SPACE (Node 20+, no runtime dependencies).
//
//   import { Sandbox } from "space-sandbox";
//   const sb = await Sandbox.create({ timeoutMs: 600_000 });
//   try {
//     await sb.files.write("/root/hello.py", "print(6 * 7)\n");
//     console.log((await sb.commands.run("python3 /root/hello.py")).stdout);  // 42
//   } finally {
//     await sb.destroy();
//   }

export { Client, DEFAULT_SOCKET } from "./client.js";
export type { ClientOptions, Body } from "./client.js";
export { Commands, CommandHandle } from "./commands.js";
export type { Cmd, CommandResult, RunOptions } from "./commands.js";
export { Execution, Result } from "./code.js";
export type { CodeContext, ExecutionError, RunCodeOptions } from "./code.js";
export { Files } from "./files.js";
export type { EntryInfo } from "./files.js";
export { TarError } from "./tar.js";
export type { TarDirOptions, TarFilter } from "./tar.js";
export { PortForward } from "./ports.js";
export { Pty, PtyHandle } from "./pty.js";
export type { PtyCreateOptions } from "./pty.js";
export { Sandbox } from "./sandbox.js";
export { DockerIgnore, Space } from "./images.js";
export type { BuildEvent, BuildOptions, ImageInfo } from "./images.js";
export type { CreateOptions, SandboxInfo, SnapshotInfo } from "./sandbox.js";
export * from "./errors.js";
