// `space mcp` driven by the official MCP TypeScript SDK client over stdio, against the spaced
// of tests/integration/test_mcp.py ($SPACE_SOCKET, $SPACE_BIN). Run: node --test mcp.test.mjs
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

let client;
let transport;

// The server as docs/mcp.md tells users to configure it, pointed at the test daemon.
function configFromDocs() {
  const doc = readFileSync(new URL("../../docs/mcp.md", import.meta.url), "utf8");
  const block = doc.match(/```json\n([\s\S]*?)```/)[1];
  return JSON.parse(block).mcpServers.space;
}

before(async () => {
  const cfg = configFromDocs();
  assert.equal(cfg.command, "space");
  transport = new StdioClientTransport({
    command: process.env.SPACE_BIN,  // "space", from this build
    args: cfg.args,
    env: { ...cfg.env, SPACE_SOCKET: process.env.SPACE_SOCKET, PATH: process.env.PATH },
    stderr: "inherit",
  });
  client = new Client({ name: "space-mcp-test", version: "1.0.0" });
  await client.connect(transport);
});

after(async () => {
  await client?.close();
});

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");

test("the server introduces itself and lists its tools with annotations", async () => {
  const info = client.getServerVersion();
  assert.equal(info.name, "space");
  assert.match(client.getInstructions() ?? "", /sandbox/);
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const name of ["create_sandbox", "run_command", "run_code", "read_file", "write_file", "list_files",
                      "wait_for_port", "http_request", "snapshot", "list_snapshots", "rollback",
                      "restore_snapshot", "list_sandboxes", "destroy_sandbox"])
    assert.ok(byName[name], `tool ${name}`);
  assert.equal(byName.destroy_sandbox.annotations.destructiveHint, true);
  assert.equal(byName.rollback.annotations.destructiveHint, true);
  assert.equal(byName.read_file.annotations.readOnlyHint, true);
  assert.equal(byName.list_files.annotations.readOnlyHint, true);
  assert.equal(byName.wait_for_port.annotations.readOnlyHint, true);
  assert.deepEqual(byName.http_request.inputSchema.required, ["port"]);
  assert.deepEqual(byName.run_command.inputSchema.required, ["command"]);
});

test("sandboxes, commands, code, files, snapshots", async () => {
  const created = await client.callTool({ name: "create_sandbox", arguments: {} });
  assert.equal(created.isError, false);
  const id = created.structuredContent.sandbox_id;
  assert.match(id, /^sb_/);

  const run = await client.callTool({ name: "run_command",
    arguments: { sandbox_id: id, command: "echo hello; echo oops >&2; exit 3" } });
  assert.equal(run.isError, false);
  assert.equal(run.structuredContent.exit_code, 3);
  assert.equal(run.structuredContent.stdout, "hello\n");
  assert.equal(run.structuredContent.stderr, "oops\n");
  assert.match(text(run), /exit code 3/);

  const code = await client.callTool({ name: "run_code",
    arguments: { code: "import sys\nprint(sum(range(10)))\nprint('e', file=sys.stderr)" } });
  assert.equal(code.structuredContent.stdout, "45\n");
  const js = await client.callTool({ name: "run_code", arguments: { code: "console.log(6*7)", language: "javascript" } });
  assert.equal(js.structuredContent.stdout, "42\n");

  const w = await client.callTool({ name: "write_file",
    arguments: { sandbox_id: id, path: "/root/work/notes.txt", content: "first\n" } });
  assert.equal(w.isError, false);
  const r = await client.callTool({ name: "read_file", arguments: { sandbox_id: id, path: "/root/work/notes.txt" } });
  assert.equal(text(r), "first\n");
  await client.callTool({ name: "write_file",
    arguments: { path: "/root/work/bin", content: Buffer.from([0, 1, 255]).toString("base64"), encoding: "base64" } });
  const b = await client.callTool({ name: "read_file", arguments: { path: "/root/work/bin" } });
  assert.match(text(b), /binary file, 3 bytes, base64\]\nAAH\//);
  const ls = await client.callTool({ name: "list_files", arguments: { path: "/root/work" } });
  assert.deepEqual(ls.structuredContent.entries.map((e) => e.name).sort(), ["bin", "notes.txt"]);

  const snap = await client.callTool({ name: "snapshot", arguments: { sandbox_id: id, name: "mcp-before" } });
  assert.equal(snap.isError, false);
  await client.callTool({ name: "run_command", arguments: { command: "rm -rf /root/work" } });
  const gone = await client.callTool({ name: "read_file", arguments: { path: "/root/work/notes.txt" } });
  assert.equal(gone.isError, true);
  assert.match(text(gone), /not_found/);
  const rb = await client.callTool({ name: "rollback", arguments: { snapshot: "mcp-before" } });
  assert.equal(rb.isError, false);
  assert.equal(text(await client.callTool({ name: "read_file", arguments: { path: "/root/work/notes.txt" } })), "first\n");

  const listed = await client.callTool({ name: "list_sandboxes", arguments: {} });
  assert.deepEqual(listed.structuredContent.sandboxes.map((s) => s.sandbox_id), [id]);
});

test("failures are tool errors the model can read, unknown tools are protocol errors", async () => {
  const slow = await client.callTool({ name: "run_command", arguments: { command: "sleep 30", timeout_seconds: 0.5 } });
  assert.equal(slow.structuredContent.timed_out, true);
  // An id this session did not create is refused before spaced is asked, existing or not.
  const missing = await client.callTool({ name: "run_command", arguments: { sandbox_id: "sb_nothere", command: "true" } });
  assert.equal(missing.isError, true);
  assert.match(text(missing), /permission_denied/);
  assert.match(text(missing), /list_sandboxes/);
  const bad = await client.callTool({ name: "run_command", arguments: {} });
  assert.equal(bad.isError, true);
  assert.match(text(bad), /"command" is required/);
  const lang = await client.callTool({ name: "run_code", arguments: { code: "x", language: "cobol" } });
  assert.equal(lang.isError, true);
  await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), /unknown tool/);
});

test("destroy_sandbox", async () => {
  const created = await client.callTool({ name: "create_sandbox", arguments: { memory: "128M" } });
  const id = created.structuredContent.sandbox_id;
  const d = await client.callTool({ name: "destroy_sandbox", arguments: { sandbox_id: id } });
  assert.equal(d.isError, false);
  const after = await client.callTool({ name: "run_command", arguments: { sandbox_id: id, command: "true" } });
  assert.equal(after.isError, true);
  // spaced's hint names a tool, not the CLI.
  assert.match(text(after), /create_sandbox makes a new one/);
  assert.doesNotMatch(text(after), /`space /);
});
