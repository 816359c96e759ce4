// The official MCP TypeScript SDK's Streamable HTTP client, on Node's built-in fetch, which before
// Node 24 ignores HTTPS_PROXY: inside `fenzi run` it connects straight to the server's address and
// is caught by the sandbox's transparent path. Lists the tools, calls ALLOWED (must succeed) and
// DENIED (must fail as that call's error). Prints one line per step:
//   tools <names>   called <tool> <text>   refused <tool> <message>
// Usage: node client.mjs URL ALLOWED DENIED
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, allowed, denied] = process.argv.slice(2);
const client = new Client({ name: "fenzi-e2e-node", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const { tools } = await client.listTools();
console.log(`tools ${tools.map((t) => t.name).sort().join(",")}`);
const ok = await client.callTool({ name: allowed, arguments: { text: "hi from node" } });
console.log(`called ${allowed} ${ok.content.map((c) => c.text).join("")}`);
try {
  await client.callTool({ name: denied, arguments: {} });
  console.log(`called ${denied} (it should have been refused)`);
} catch (e) {
  console.log(`refused ${denied} ${String(e.message).split("\n")[0]}`);
}
await client.close();
