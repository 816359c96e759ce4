// A conformant MCP server for the official conformance suite's server scenarios
// (`conformance server --url URL`), written for fenzi's tests with the official TypeScript SDK's
// low-level Server and its Streamable HTTP transport. It offers what each scenario calls: the
// test_* tools, the test:// resources and template, the test_* prompts, logging/setLevel,
// completion/complete, resource subscriptions, and server-initiated sampling and elicitation sent
// the way a real server sends them, unrelated to the call, so on the standalone GET stream.
//
// Usage: node server.mjs [--port N] [--cert PEM --key PEM]
// Prints `listening on 127.0.0.1:PORT` as its first stdout line (scripts/lib.sh `start`).
//        node server.mjs --stdio
// The same server as a local (stdio) one, for fenzi's bridge (scripts/conformance's bridge leg).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { parseArgs } from 'node:util';

import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest
} from '@modelcontextprotocol/sdk/types.js';

const { values: opts } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    cert: { type: 'string' },
    key: { type: 'string' },
    stdio: { type: 'boolean', default: false }
  }
});

// A 1x1 PNG, and a WAV of 8 silent samples (44-byte header), built here rather than shipped.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
function wav() {
  const samples = 8;
  const b = Buffer.alloc(44 + samples * 2);
  b.write('RIFF', 0);
  b.writeUInt32LE(36 + samples * 2, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20); // PCM
  b.writeUInt16LE(1, 22); // mono
  b.writeUInt32LE(8000, 24);
  b.writeUInt32LE(16000, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(samples * 2, 40);
  return b.toString('base64');
}
const WAV = wav();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A client answers sampling and elicitation in milliseconds here; one unanswered after 5 s was lost
// on the way, and the tool fails then rather than at the SDK's 60 s default.
const ASK = { timeout: 5000 };
const noArgs = { type: 'object', properties: {} };

const TOOLS = [
  { name: 'test_simple_text', description: 'Returns one text block', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Returns one PNG image', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Returns one WAV clip', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'Returns an embedded resource', inputSchema: noArgs },
  { name: 'test_multiple_content_types', description: 'Returns text, image and resource', inputSchema: noArgs },
  { name: 'test_tool_with_logging', description: 'Logs three messages while it runs', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'Reports progress 0, 50, 100 of 100', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'Always fails (isError)', inputSchema: noArgs },
  { name: 'test_reconnection', description: 'Closes its SSE stream mid-call, then answers', inputSchema: noArgs },
  {
    name: 'test_sampling',
    description: 'Asks the client for an LLM completion',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] }
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user for a username and email',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] }
  },
  { name: 'test_elicitation_sep1034_defaults', description: 'Elicits with defaults of every primitive type', inputSchema: noArgs },
  { name: 'test_elicitation_sep1330_enums', description: 'Elicits with the five enum shapes', inputSchema: noArgs },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } }
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false
    }
  }
];

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', description: 'A static text resource', mimeType: 'text/plain' },
  { uri: 'test://static-binary', name: 'static-binary', description: 'A static PNG', mimeType: 'image/png' },
  { uri: 'test://watched-resource', name: 'watched-resource', description: 'A resource to subscribe to', mimeType: 'text/plain' }
];

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two arguments',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true }
    ]
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt embedding a resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }]
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image' }
];

const text = (t) => ({ type: 'text', text: t });

// One Server per session, as the SDK's transport serves one session each.
function newServer(transports) {
  const server = new Server(
    { name: 'fenzi-conformance-server', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {}
      }
    }
  );
  const subscriptions = new Set();

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = req.params.arguments ?? {};
    const log = (data) =>
      extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
    switch (req.params.name) {
      case 'test_simple_text':
        return { content: [text('This is a simple text response for testing.')] };
      case 'test_image_content':
        return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
      case 'test_audio_content':
        return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return {
          content: [
            {
              type: 'resource',
              resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' }
            }
          ]
        };
      case 'test_multiple_content_types':
        return {
          content: [
            text('Multiple content types test:'),
            { type: 'image', data: PNG, mimeType: 'image/png' },
            {
              type: 'resource',
              resource: {
                uri: 'test://mixed-content-resource',
                mimeType: 'application/json',
                text: JSON.stringify({ test: 'data', value: 123 })
              }
            }
          ]
        };
      case 'test_tool_with_logging':
        await log('Tool execution started');
        await sleep(50);
        await log('Tool processing data');
        await sleep(50);
        await log('Tool execution completed');
        return { content: [text('Logging tool finished')] };
      case 'test_tool_with_progress': {
        const token = req.params._meta?.progressToken;
        for (const progress of [0, 50, 100]) {
          if (token !== undefined) {
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken: token, progress, total: 100 }
            });
          }
          if (progress < 100) await sleep(50);
        }
        return { content: [text('Progress tool finished')] };
      }
      case 'test_error_handling':
        return { isError: true, content: [text('This tool intentionally returns an error for testing')] };
      case 'test_reconnection':
        // Ends this call's event stream; the answer waits in the event store until the client
        // comes back with Last-Event-ID (SEP-1699 polling).
        await sleep(100);
        extra.closeSSEStream?.();
        await sleep(200);
        return { content: [text('Reconnection test completed')] };
      case 'test_sampling': {
        // Not tied to the call: the SDK sends it on the standalone GET stream.
        const res = await server.request(
          {
            method: 'sampling/createMessage',
            params: { messages: [{ role: 'user', content: text(String(args.prompt)) }], maxTokens: 100 }
          },
          CreateMessageResultSchema,
          ASK
        );
        return { content: [text(`LLM response: ${res.content?.text ?? ''}`)] };
      }
      case 'test_elicitation': {
        const res = await server.request(
          {
            method: 'elicitation/create',
            params: {
              message: String(args.message),
              requestedSchema: {
                type: 'object',
                properties: {
                  username: { type: 'string', description: "User's response" },
                  email: { type: 'string', description: "User's email address" }
                },
                required: ['username', 'email']
              }
            }
          },
          ElicitResultSchema,
          ASK
        );
        return { content: [text(`User response: action=${res.action}, content=${JSON.stringify(res.content ?? {})}`)] };
      }
      case 'test_elicitation_sep1034_defaults':
        return elicitCompleted(server, {
          message: 'Fill in, or keep the defaults',
          requestedSchema: {
            type: 'object',
            properties: {
              name: { type: 'string', default: 'John Doe' },
              age: { type: 'integer', default: 30 },
              score: { type: 'number', default: 95.5 },
              status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
              verified: { type: 'boolean', default: true }
            }
          }
        });
      case 'test_elicitation_sep1330_enums':
        return elicitCompleted(server, {
          message: 'Choose',
          requestedSchema: {
            type: 'object',
            properties: {
              untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
              titledSingle: {
                type: 'string',
                oneOf: [
                  { const: 'value1', title: 'First Option' },
                  { const: 'value2', title: 'Second Option' },
                  { const: 'value3', title: 'Third Option' }
                ]
              },
              legacyEnum: {
                type: 'string',
                enum: ['opt1', 'opt2', 'opt3'],
                enumNames: ['Option One', 'Option Two', 'Option Three']
              },
              untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
              titledMulti: {
                type: 'array',
                items: {
                  anyOf: [
                    { const: 'value1', title: 'First Choice' },
                    { const: 'value2', title: 'Second Choice' },
                    { const: 'value3', title: 'Third Choice' }
                  ]
                }
              }
            }
          }
        });
      case 'json_schema_2020_12_tool':
        return { content: [text(`Hello ${args.name ?? 'nobody'}`)] };
      default:
        throw new McpError(ErrorCode.InvalidParams, `unknown tool ${req.params.name}`);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      { uriTemplate: 'test://template/{id}/data', name: 'template-data', description: 'Data by id', mimeType: 'application/json' }
    ]
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    if (uri === 'test://static-text') {
      return { contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] };
    }
    if (uri === 'test://static-binary') return { contents: [{ uri, mimeType: 'image/png', blob: PNG }] };
    if (uri === 'test://watched-resource') return { contents: [{ uri, mimeType: 'text/plain', text: 'watched' }] };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) {
      const id = m[1];
      return {
        contents: [
          { uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }
        ]
      };
    }
    throw new McpError(ErrorCode.InvalidParams, `no resource ${uri}`);
  });
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    subscriptions.delete(req.params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => {
    const a = req.params.arguments ?? {};
    switch (req.params.name) {
      case 'test_simple_prompt':
        return { messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }] };
      case 'test_prompt_with_arguments':
        return {
          messages: [{ role: 'user', content: text(`Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'`) }]
        };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            {
              role: 'user',
              content: {
                type: 'resource',
                resource: { uri: a.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' }
              }
            },
            { role: 'user', content: text('Please process the embedded resource above.') }
          ]
        };
      case 'test_prompt_with_image':
        return {
          messages: [
            { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
            { role: 'user', content: text('Please analyze the image above.') }
          ]
        };
      default:
        throw new McpError(ErrorCode.InvalidParams, `unknown prompt ${req.params.name}`);
    }
  });

  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const value = req.params.argument?.value ?? '';
    const values = ['paris', 'park', 'party'].filter((v) => v.startsWith(value));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

async function elicitCompleted(server, params) {
  const res = await server.request({ method: 'elicitation/create', params }, ElicitResultSchema, ASK);
  return { content: [text(`Elicitation completed: action=${res.action}, content=${JSON.stringify(res.content ?? {})}`)] };
}

// Events kept for replay (SEP-1699): a client that lost a stream resumes with Last-Event-ID.
function eventStore() {
  const events = new Map();
  return {
    async storeEvent(streamId, message) {
      const id = `${streamId}_${randomUUID()}`;
      events.set(id, { streamId, message });
      return id;
    },
    async getStreamIdForEventId(id) {
      return events.get(id)?.streamId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const last = events.get(lastEventId);
      if (!last) return '';
      let after = false;
      for (const [id, ev] of events) {
        if (id === lastEventId) after = true;
        else if (after && ev.streamId === last.streamId) await send(id, ev.message);
      }
      return last.streamId;
    }
  };
}

// DNS rebinding protection: a loopback server answers only requests whose Host (and Origin, when
// sent) name loopback.
const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);
function loopbackName(authority) {
  if (!authority) return false;
  const host = authority.startsWith('[') ? authority.slice(0, authority.indexOf(']') + 1) : authority.split(':')[0];
  return LOOPBACK.has(host.toLowerCase());
}

const transports = new Map();

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://placeholder');
  if (url.pathname !== '/mcp') {
    res.writeHead(404).end();
    return;
  }
  let origin = null;
  try {
    origin = req.headers.origin ? new URL(req.headers.origin).host : null;
  } catch {
    origin = 'invalid';
  }
  if (!loopbackName(req.headers.host) || (origin !== null && !loopbackName(origin))) {
    res.writeHead(403, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Host or Origin not allowed' }, id: null }));
    return;
  }
  const sid = req.headers['mcp-session-id'];
  if (req.method === 'POST') {
    let body;
    try {
      body = await readJson(req);
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null }));
      return;
    }
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport && !sid && isInitializeRequest(body)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: eventStore(),
        retryInterval: 500,
        onsessioninitialized: (id) => transports.set(id, transport)
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await newServer(transports).connect(transport);
    }
    if (!transport) {
      res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session' }, id: null }));
      return;
    }
    await transport.handleRequest(req, res, body);
    return;
  }
  const transport = sid ? transports.get(sid) : undefined;
  if (!transport) {
    res.writeHead(sid ? 404 : 400).end();
    return;
  }
  await transport.handleRequest(req, res);
}

if (opts.stdio) {
  // One client, one session, on stdin and stdout; the HTTP part below is not started.
  await newServer(transports).connect(new StdioServerTransport());
  process.stdin.on('end', () => process.exit(0));
}

const listener = (req, res) =>
  handle(req, res).catch((e) => {
    console.error('request failed:', e);
    if (!res.headersSent) res.writeHead(500).end();
  });
const srv = opts.cert
  ? https.createServer({ cert: readFileSync(opts.cert), key: readFileSync(opts.key) }, listener)
  : http.createServer(listener);
if (!opts.stdio) {
  srv.listen(Number(opts.port), '127.0.0.1', () => {
    console.log(`listening on 127.0.0.1:${srv.address().port}`);
  });
}
process.on('SIGTERM', () => process.exit(0));
