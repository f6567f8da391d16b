// A scripted session with the TypeScript SDK v1 (@modelcontextprotocol/sdk) as client.
//
//   node session-v1.mjs PLAN_JSON stdio COMMAND ARGS...
//   node session-v1.mjs PLAN_JSON http URL
//
// Prints the transcript (plan.mjs) once `client.close()` has returned: over stdio that
// closes the server's stdin, waits up to 2 s, then sends SIGTERM, as SDK v1 does.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { ROOTS, normalise, print, readPlan, runPlan } from "./plan.mjs";

// stdout is the transcript's: whatever the SDK logs goes to stderr.
console.log = console.info = console.debug = console.error;

const { plan, kind, target } = readPlan(process.argv.slice(2));
const client = new Client({ name: "litmus-session-v1", version: "1.0.0" }, { capabilities: { roots: {} } });
client.setRequestHandler(ListRootsRequestSchema, () => ROOTS);
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(target[0]));
const SCHEMAS = { "tools/call": CreateTaskResultSchema, "tasks/result": CallToolResultSchema };
const sdk = {
  callTool: (c, step, options) =>
    c.callTool({ name: step.name, arguments: step.arguments }, CallToolResultSchema, options),
  request: (c, method, params, options) => c.request({ method, params }, SCHEMAS[method], options),
};
await client.connect(transport);
const initialize = {
  protocolVersion: transport.protocolVersion ?? null,
  serverInfo: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
};
const transcript = await runPlan(client, plan, sdk);
const closing = Date.now();
await client.close();
if (process.env.LITMUS_TIMING) console.error(`close: ${Date.now() - closing} ms`);
print({ initialize: normalise(initialize), ...transcript });
