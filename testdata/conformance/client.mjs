// A conformant MCP client for the official conformance suite's client scenarios
// (`conformance client --command "node client.mjs"`), written for fenzi's tests with the official
// TypeScript SDK. The runner appends its test server's URL and names the scenario in
// MCP_CONFORMANCE_SCENARIO (and, for some, credentials in MCP_CONFORMANCE_CONTEXT). The client
// connects, lists the tools, calls what the scenario offers, answers elicitation (accepting the
// defaults) and sampling, and signs in with OAuth the way MCP authorization defines (protected
// resource metadata, authorization server metadata, dynamic registration or a client ID metadata
// document, PKCE, step-up on 403 insufficient_scope), with the SDK's `auth()` doing each step.
// There is no browser: the authorization endpoint of the suite's server answers at once with a
// redirect carrying the code, which the client reads.
//
// Usage: MCP_CONFORMANCE_SCENARIO=NAME node client.mjs SERVER_URL
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, extractWWWAuthenticateParams, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { ClientCredentialsProvider, PrivateKeyJwtProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

// The suite checks that a client uses this URL as its client_id where the server accepts client
// ID metadata documents (basic-cimd).
const CLIENT_METADATA_URL = 'https://conformance-test.local/client-metadata.json';
const REDIRECT = 'http://localhost:3000/callback';
// Sign-in attempts per request before giving up (scope-retry-limit checks a client stops).
const MAX_SIGN_INS = 3;

// The runner names its servers `localhost`. fenzi's policy reaches loopback only by address (it
// refuses `localhost` in a url), so, as a user would, the client reaches `localhost` at 127.0.0.1;
// it does so in the direct runs too, so that both compare the same client. URLs the SDK reasons
// about (the resource, the issuer) keep the name.
function loopbackFetch(input, init) {
  const url = new URL(input instanceof Request ? input.url : input);
  if (url.hostname !== 'localhost') return fetch(input, init);
  url.hostname = '127.0.0.1';
  return fetch(input instanceof Request ? new Request(url, input) : url, init);
}

const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? '';
const serverUrl = process.argv[process.argv.length - 1];
const context = process.env.MCP_CONFORMANCE_CONTEXT ? JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT) : {};

// An OAuthClientProvider that keeps everything in memory and, having no browser, follows the
// authorization URL itself and reads the code from the redirect.
class HeadlessProvider {
  constructor({ clientInformation, useMetadataUrl } = {}) {
    this._client = clientInformation;
    this._useMetadataUrl = useMetadataUrl;
    this._tokens = undefined;
    this._verifier = undefined;
    this.code = undefined;
  }
  get redirectUrl() {
    return REDIRECT;
  }
  get clientMetadata() {
    return { client_name: 'fenzi-conformance-client', redirect_uris: [REDIRECT] };
  }
  get clientMetadataUrl() {
    return this._useMetadataUrl ? CLIENT_METADATA_URL : undefined;
  }
  clientInformation() {
    return this._client;
  }
  saveClientInformation(info) {
    this._client = info;
  }
  tokens() {
    return this._tokens;
  }
  saveTokens(tokens) {
    this._tokens = tokens;
  }
  saveCodeVerifier(v) {
    this._verifier = v;
  }
  codeVerifier() {
    if (!this._verifier) throw new Error('no PKCE verifier saved');
    return this._verifier;
  }
  async redirectToAuthorization(url) {
    const res = await loopbackFetch(url, { redirect: 'manual' });
    const location = res.headers.get('location');
    const code = location ? new URL(location).searchParams.get('code') : null;
    if (!code) throw new Error(`authorization endpoint answered ${res.status} without a code`);
    this.code = code;
  }
}

// A fetch that adds the bearer token, and on 401 (or 403 insufficient_scope) signs in with the
// scope and metadata the server named, then retries; it gives up after MAX_SIGN_INS sign-ins.
function signingFetch(provider, resourceUrl) {
  let signIns = 0;
  return async (input, init) => {
    const send = () => {
      const headers = new Headers(init?.headers);
      const t = provider.tokens();
      if (t) headers.set('Authorization', `Bearer ${t.access_token}`);
      return loopbackFetch(input, { ...init, headers });
    };
    let res = await send();
    while (res.status === 401 || res.status === 403) {
      if (res.status === 403 && !/insufficient_scope/.test(res.headers.get('www-authenticate') ?? '')) break;
      if (signIns >= MAX_SIGN_INS) throw new UnauthorizedError(`gave up after ${signIns} sign-ins`);
      signIns += 1;
      const { resourceMetadataUrl, scope } = extractWWWAuthenticateParams(res);
      const opts = { serverUrl: resourceUrl, resourceMetadataUrl, scope, fetchFn: loopbackFetch };
      let result = await auth(provider, opts);
      if (result === 'REDIRECT') result = await auth(provider, { ...opts, authorizationCode: provider.code });
      if (result !== 'AUTHORIZED') throw new UnauthorizedError(`sign-in ended with ${result}`);
      res = await send();
    }
    return res;
  };
}

async function session(transportOptions, capabilities = {}, setup = () => {}) {
  const client = new Client({ name: 'fenzi-conformance-client', version: '1.0.0' }, { capabilities });
  setup(client);
  const transport = new StreamableHTTPClientTransport(new URL(serverUrl), { fetch: loopbackFetch, ...transportOptions });
  await client.connect(transport);
  return { client, transport };
}

// Lists the tools and calls each one the scenario's server offers, with the arguments it needs.
async function callAll(client) {
  const { tools } = await client.listTools();
  for (const tool of tools) {
    const args = {};
    for (const [name, schema] of Object.entries(tool.inputSchema?.properties ?? {})) {
      args[name] = schema.type === 'number' || schema.type === 'integer' ? 2 : 'x';
    }
    await client.callTool({ name: tool.name, arguments: args });
  }
}

async function main() {
  let s;
  if (scenario === 'initialize') {
    s = await session({});
    await s.client.listTools();
  } else if (scenario === 'tools_call' || scenario === 'sse-retry') {
    s = await session({});
    await callAll(s.client);
  } else if (scenario.startsWith('elicitation')) {
    s = await session({}, { elicitation: { form: { applyDefaults: true } } }, (client) =>
      // Accept with nothing filled in: the SDK applies the schema's defaults.
      client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: {} }))
    );
    await callAll(s.client);
  } else if (scenario === 'auth/client-credentials-basic') {
    s = await session({
      authProvider: new ClientCredentialsProvider({ clientId: context.client_id, clientSecret: context.client_secret })
    });
    await s.client.listTools();
  } else if (scenario === 'auth/client-credentials-jwt') {
    s = await session({
      authProvider: new PrivateKeyJwtProvider({
        clientId: context.client_id,
        privateKey: context.private_key_pem,
        algorithm: context.signing_algorithm || 'ES256'
      })
    });
    await s.client.listTools();
  } else if (scenario.startsWith('auth/')) {
    const provider =
      scenario === 'auth/pre-registration'
        ? new HeadlessProvider({
            clientInformation: { client_id: context.client_id, client_secret: context.client_secret, redirect_uris: [REDIRECT] }
          })
        : new HeadlessProvider({ useMetadataUrl: true });
    s = await session({ fetch: signingFetch(provider, new URL(serverUrl)) });
    await callAll(s.client);
  } else {
    throw new Error(`no handler for scenario '${scenario}'`);
  }
  await s.transport.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`client: ${scenario}: ${e?.stack ?? e}`);
    process.exit(1);
  }
);
