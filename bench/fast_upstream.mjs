// A fast MCP upstream for the bench: NDJSON JSON-RPC over stdio, no SDK, no dependencies.
//
//     node bench/fast_upstream.mjs [--tools N]
//
// It answers the legacy handshake (initialize; server/discover is "method not found", so a
// dual-era client falls back to initialize), ping, tools/list and tools/call, with the same
// tools the Python mock upstream (tfunnel.testing.mock_upstream) offers the bench: `echo {text}`
// and `slow {seconds}`. `--tools N` adds N-2 more echo-like tools (`tool_3` ...) for the scale
// table. An answer costs tens of microseconds, so a gateway in front of it is the bottleneck.
// Notifications are read and dropped; a cancelled `slow` still answers (as a slow server would).
// It exits when stdin closes (after answering the `slow` calls still pending).

import { createInterface } from "node:readline";

const VERSIONS = new Set(["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]);
const LATEST = "2025-11-25";

function parseCount(argv) {
  const at = argv.indexOf("--tools");
  if (at < 0) return 2;
  const n = Number(argv[at + 1]);
  if (!Number.isInteger(n) || n < 2 || n > 100000) {
    process.stderr.write("fast_upstream: --tools must be an integer from 2 to 100000\n");
    process.exit(2);
  }
  return n;
}

function tool(name, description, properties, required) {
  return { name, description, inputSchema: { type: "object", properties, required } };
}

const count = parseCount(process.argv.slice(2));
const TOOLS = [
  tool("echo", "Echo the text back.", { text: { type: "string" } }, ["text"]),
  tool("slow", "Sleep, then answer.", { seconds: { type: "number", minimum: 0 } }, ["seconds"]),
];
for (let i = 3; i <= count; i++) {
  TOOLS.push(tool(`tool_${i}`, `Echo the text back (tool ${i} of ${count}).`,
    { text: { type: "string", description: "what to echo" } }, ["text"]));
}
const LISTED = JSON.stringify({ tools: TOOLS });

function send(id, body) {
  process.stdout.write(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},${body}}\n`);
}

function error(id, code, message) {
  send(id, `"error":${JSON.stringify({ code, message })}`);
}

function text(id, value, isError = false) {
  send(id, `"result":${JSON.stringify({ content: [{ type: "text", text: value }], isError })}`);
}

function call(id, params) {
  const name = params?.name;
  const args = params?.arguments ?? {};
  if (name === "slow") {
    const seconds = Number(args.seconds);
    if (!(seconds >= 0)) return text(id, "seconds must be a number >= 0", true);
    setTimeout(() => text(id, `slept ${seconds}s`), seconds * 1000);
    return;
  }
  if (name === "echo" || (typeof name === "string" && TOOLS.some((t) => t.name === name))) {
    if (typeof args.text !== "string") return text(id, "text must be a string", true);
    return text(id, args.text);
  }
  error(id, -32602, `Unknown tool: ${name}`);
}

function handle(line) {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return; // not JSON: nothing to answer
  }
  const { id, method, params } = message ?? {};
  if (id === undefined || id === null || typeof method !== "string") return; // a notification or a response
  switch (method) {
    case "initialize": {
      const requested = params?.protocolVersion;
      const result = {
        protocolVersion: VERSIONS.has(requested) ? requested : LATEST,
        capabilities: { tools: { listChanged: false } },
        serverInfo: { name: "fast-upstream", version: "1.0.0" },
      };
      return send(id, `"result":${JSON.stringify(result)}`);
    }
    case "ping":
      return send(id, `"result":{}`);
    case "tools/list":
      return send(id, `"result":${LISTED}`);
    case "tools/call":
      return call(id, params);
    default:
      return error(id, -32601, `Method not found: ${method}`);
  }
}

const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on("line", (line) => {
  if (line) handle(line);
});
// On EOF Node exits by itself once the last pending `slow` has answered.
