// A scripted session with the TypeScript SDK v2 (@modelcontextprotocol/client) as client.
//
//   node session-v2.mjs PLAN_JSON stdio COMMAND ARGS...
//   node session-v2.mjs PLAN_JSON http URL
//
// LITMUS_NEGOTIATION=auto connects with version negotiation (a `server/discover` probe;
// over stdio, on a short-lived sibling process); the default is the SDK's, legacy.
// Prints the transcript (plan.mjs) once `client.close()` has returned.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { z } from "zod";
import { ROOTS, normalise, print, readPlan, runPlan } from "./plan.mjs";

// stdout is the transcript's: whatever the SDK logs goes to stderr.
console.log = console.info = console.debug = console.error;

const { plan, kind, target } = readPlan(process.argv.slice(2));
const negotiation = process.env.LITMUS_NEGOTIATION;
const client = new Client(
  { name: "litmus-session-v2", version: "2.0.0" },
  {
    capabilities: { roots: {} },
    ...(negotiation ? { versionNegotiation: { mode: negotiation } } : {}),
  },
);
client.setRequestHandler("roots/list", () => ROOTS);
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(target[0]));
const anyResult = z.looseObject({});
const sdk = {
  callTool: (c, step, options) => c.callTool({ name: step.name, arguments: step.arguments }, options),
  request: (c, method, params, options) => c.request({ method, params }, anyResult, options),
};
await client.connect(transport);
const initialize = {
  protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
  serverInfo: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
};
const transcript = await runPlan(client, plan, sdk);
const closing = Date.now();
await client.close();
if (process.env.LITMUS_TIMING) console.error(`close: ${Date.now() - closing} ms`);
print({ initialize: normalise(initialize), ...transcript });
