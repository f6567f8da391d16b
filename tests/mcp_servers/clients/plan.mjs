// The scripted session both TypeScript clients run (session-v1.mjs, session-v2.mjs).
//
// A plan is a JSON list of steps; each step's outcome goes into the transcript, which
// is printed as one JSON document on stdout once the client has closed cleanly. The
// transcript keeps what the client *received*, normalised: `_meta`, request ids, task
// ids and timestamps are dropped, so that a direct session and a proxied one compare
// equal when the proxy is transparent. Steps:
//
//   {"op": "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" | "ping"}
//   {"op": "call", "name": N, "arguments": A}       a tools/call (errors are outcomes too)
//   {"op": "read", "uri": U}                        resources/read
//   {"op": "prompt", "name": N, "arguments": A}     prompts/get
//   {"op": "progress", "name": N, "arguments": A}   a call with a progress token
//   {"op": "cancel", "name": N, "arguments": A}     a call cancelled at its first progress
//   {"op": "task", "name": N, "arguments": A}       a task-augmented call, then tasks/result
//
// The Python SDK's twin is session_py.py; the three must agree on this format.

const DROPPED = new Set(["_meta", "taskId", "createdAt", "lastUpdatedAt", "requestId"]);

export function normalise(value) {
  if (Array.isArray(value)) return value.map(normalise);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) {
      if (!DROPPED.has(key) && value[key] !== undefined) out[key] = normalise(value[key]);
    }
    return out;
  }
  return value;
}

function failure(err) {
  // A JSON-RPC error keeps its code and message; anything else is the client's own.
  if (err && typeof err.code === "number") return { error: { code: err.code, message: err.message } };
  return { error: { client: String(err && err.name) } };
}

export function readPlan(argv) {
  // argv: PLAN_JSON (stdio|http) TARGET...
  const [planText, kind, ...target] = argv;
  if (!planText || !["stdio", "http"].includes(kind) || target.length === 0) {
    console.error("usage: session-vN.mjs PLAN_JSON stdio COMMAND ARGS... | http URL");
    process.exit(2);
  }
  return { plan: JSON.parse(planText), kind, target };
}

// `sdk` gives what differs between v1 and v2: request(method, params, options) sends a
// raw request and resolves to its result, passthrough.
export async function runPlan(client, plan, sdk) {
  const steps = [];
  for (const step of plan) {
    const started = Date.now();
    try {
      steps.push({ op: step.op, ...(await runStep(client, step, sdk)) });
    } catch (err) {
      steps.push({ op: step.op, ...failure(err) });
    }
    if (process.env.LITMUS_TIMING) console.error(`${step.op}: ${Date.now() - started} ms`);
  }
  return { steps: normalise(steps) };
}

async function runStep(client, step, sdk) {
  const options = { timeout: 30000 };
  switch (step.op) {
    case "tools/list":
      return { result: await client.listTools() };
    case "resources/list":
      return { result: await client.listResources() };
    case "resources/templates/list":
      return { result: await client.listResourceTemplates() };
    case "prompts/list":
      return { result: await client.listPrompts() };
    case "ping":
      return { result: await client.ping() };
    case "call":
      return { result: await sdk.callTool(client, step, options) };
    case "read":
      return { result: await client.readResource({ uri: step.uri }) };
    case "prompt":
      return { result: await client.getPrompt({ name: step.name, arguments: step.arguments }) };
    case "progress": {
      const seen = [];
      const onprogress = (p) => seen.push(p.progress);
      const result = await sdk.callTool(client, step, { ...options, onprogress });
      // Whether progress came, not how much: an SDK may drop a notification that
      // arrives just before its call's answer (TS SDK v1 and v2 both do, direct too).
      return { result, progressed: seen.length > 0 };
    }
    case "cancel": {
      const controller = new AbortController();
      const onprogress = () => controller.abort("enough");
      try {
        await sdk.callTool(client, step, { ...options, onprogress, signal: controller.signal });
        return { cancelled: false };
      } catch (err) {
        return { cancelled: controller.signal.aborted };
      }
    }
    case "task": {
      const params = { name: step.name, arguments: step.arguments, task: { ttl: 60000 } };
      const created = await sdk.request(client, "tools/call", params, options);
      const result = await sdk.request(client, "tasks/result", { taskId: created.task.taskId }, options);
      return { created: { status: created.task.status }, result };
    }
    default:
      throw new Error(`unknown step ${step.op}`);
  }
}

// What servers ask of the client: one root (LITMUS_ROOT, a folder), and nothing else.
const ROOT = process.env.LITMUS_ROOT || "/tmp";
export const ROOTS = { roots: [{ uri: `file://${ROOT}`, name: "root" }] };

export function print(transcript) {
  process.stdout.write(JSON.stringify(transcript) + "\n");
}
