// The official `openai` npm client against `sluice serve`:
//   1. a streamed chat completion and a non-streamed completion at temperature 0 both equal the
//      golden stories260K continuation; errors come back as the client's typed exceptions;
//   2. tool calls, on a second server with the Qwen2.5 template (Hermes `<tool_call>` family):
//      for tool_choice "required" and a named function, parallel_tool_calls false and true, and
//      several seeds at temperature 1, the non-streamed message, the streamed one (delta.tool_calls
//      accumulated by index as OpenAI's docs show) and the client's stream helper agree, and
//      every arguments string parses and validates under its tool's schema; runTools round trips
//      tool results through the template;
//   3. chunk boundaries: one recorded streamed tool-call response, replayed to the client split
//      at every byte position (and at random multi-splits, in 1-byte chunks, and over HTTP),
//      always gives the same message;
//   4. response_format json_schema: the content parses and validates, streamed and not;
//   5. embeddings: `client.embeddings.create` against `sluice serve --embedding` of a tiny random
//      bert (`sluice synth --preset tiny-bert` with the bge vocabulary), float and base64 (which
//      the client decodes) equal, unit norm, usage.
//
// Run by ctest (server_openai_client). Environment:
//   SLUICE_BIN          the sluice executable
//   SLUICE_SHARED       the ../shared directory (absent: skip)
//   SLUICE_NPM_CACHE    where `openai` is installed once and reused
// Exit codes: 0 pass, 1 fail, 77 skip (no npm, no network, no test data); under CI=true what
// would skip fails.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { fail, installPackages, skip, startProcess, stopAll } from './npm_test_util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

const shared = process.env.SLUICE_SHARED || path.join(here, '../../../shared');
const modelPath = path.join(shared, 'testdata/models/stories260K.gguf');
const goldenPath = path.join(shared, 'testdata/models/stories260K.once_upon_a_time.json');
const qwenTemplate = path.join(shared, 'testdata/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja');
for (const p of [modelPath, goldenPath, qwenTemplate]) if (!existsSync(p)) skip(`${p} not present`);
const golden = JSON.parse(readFileSync(goldenPath, 'utf8'));
const sluice = process.env.SLUICE_BIN;
if (!sluice || !existsSync(sluice)) skip('SLUICE_BIN not set or missing');

// Install the client once into the cache directory.
const cache = process.env.SLUICE_NPM_CACHE || path.join(os.tmpdir(), 'sluice-npm-openai');
const { require, version } = installPackages(cache, { openai: 'openai@4' });
const OpenAI = require('openai').default ?? require('openai');
const clientVersion = version('openai');

// Starts `sluice serve` on a free port.
async function startServer(args, model = modelPath) {
  return startProcess(sluice, ['serve', model, '--port', '0', '-t', '1', '--kv-cache-gb', '0.01',
                               '--served-model-name', 'stories260K', '--api-key', 'test-key', ...args]);
}

// ---- 1. The golden continuation, streamed and not; typed errors -------------------------------

async function goldenChecks() {
  const s = await startServer(['-c', '512', '--chat-template', path.join(here, 'plain_chat_template.jinja')]);
  const port = s.port;
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });
  const n = golden.greedy_tokens.length;

  // Streamed chat completion.
  const stream = await client.chat.completions.create({
    model: 'stories260K',
    messages: [{ role: 'user', content: golden.prompt }],
    max_tokens: n,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let chatText = '';
  let chatFinish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      chatText += c.delta?.content ?? '';
      if (c.finish_reason) chatFinish = c.finish_reason;
    }
  }
  if (chatText !== golden.greedy_text) fail(`streamed chat text differs:\n${chatText}\n---\n${golden.greedy_text}`);
  if (chatFinish !== 'length') fail(`streamed chat finish_reason ${chatFinish}`);
  if (!usage || usage.completion_tokens !== n) fail(`streamed usage ${JSON.stringify(usage)}`);

  // Non-streamed completion.
  const completion = await client.completions.create({
    model: 'stories260K',
    prompt: golden.prompt,
    max_tokens: n,
    temperature: 0,
  });
  const text = completion.choices[0].text;
  if (text !== golden.greedy_text) fail(`completion text differs:\n${text}`);
  if (text !== chatText) fail('streamed chat and non-streamed completion differ');
  if (completion.usage.prompt_tokens !== golden.prompt_tokens.length) fail(`usage ${JSON.stringify(completion.usage)}`);

  // The client surfaces our errors as its typed exceptions.
  try {
    await client.completions.create({ model: 'stories260K', prompt: golden.prompt, temperature: 5 });
    fail('temperature 5 was accepted');
  } catch (e) {
    if (!(e instanceof OpenAI.BadRequestError)) fail(`expected BadRequestError, got ${e}`);
  }
  try {
    await new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 })
      .models.list();
    fail('a wrong API key was accepted');
  } catch (e) {
    if (!(e instanceof OpenAI.AuthenticationError)) fail(`expected AuthenticationError, got ${e}`);
  }
  const models = await client.models.list();
  if (models.data[0]?.id !== 'stories260K') fail(`models ${JSON.stringify(models.data)}`);
}

// ---- Helpers for tool calls and structured output ---------------------------------------------

// The JSON Schema features these tests use: type, enum, properties / required /
// additionalProperties: false, minLength / maxLength (code points), minimum / maximum.
// Returns the problems found (none: valid).
function validate(schema, v, at = '$') {
  const is = {
    object: (x) => x !== null && typeof x === 'object' && !Array.isArray(x),
    string: (x) => typeof x === 'string',
    integer: (x) => Number.isInteger(x),
    number: (x) => typeof x === 'number' && Number.isFinite(x),
  };
  if (schema.enum && !schema.enum.includes(v)) return [`${at}: ${JSON.stringify(v)} is not in the enum`];
  if (schema.type && !is[schema.type](v)) return [`${at}: ${JSON.stringify(v)} is not ${schema.type}`];
  const errors = [];
  if (typeof v === 'string') {
    const n = [...v].length;
    if (schema.minLength !== undefined && n < schema.minLength) errors.push(`${at}: shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && n > schema.maxLength) errors.push(`${at}: longer than ${schema.maxLength}`);
  }
  if (typeof v === 'number') {
    if (schema.minimum !== undefined && v < schema.minimum) errors.push(`${at}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && v > schema.maximum) errors.push(`${at}: above ${schema.maximum}`);
  }
  if (is.object(v)) {
    for (const k of schema.required ?? []) if (!(k in v)) errors.push(`${at}: '${k}' is missing`);
    for (const [k, x] of Object.entries(v)) {
      if (schema.properties?.[k]) errors.push(...validate(schema.properties[k], x, `${at}.${k}`));
      else if (schema.additionalProperties === false) errors.push(`${at}: '${k}' is not declared`);
    }
  }
  return errors;
}

// Problems with a JSON text under a schema: it must parse and validate.
function checkJson(schema, text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return [`does not parse (${e.message}): ${JSON.stringify(text)}`];
  }
  return validate(schema, value).map((e) => `${e} in ${text}`);
}

// A usage object's token counts, without details that depend on the cache state.
function tokenCounts(u) {
  return u && { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens,
                total_tokens: u.total_tokens };
}

// A chat message as the tests compare it: {content, finish, calls: [{id, name, arguments}], usage}.
function fromChoice(choice, usage = null) {
  const m = choice.message;
  if (m.role !== 'assistant') fail(`message role ${m.role}`);
  const calls = (m.tool_calls ?? []).map((c) => {
    if (c.type !== 'function') fail(`tool call type ${c.type}`);
    return { id: c.id, name: c.function.name, arguments: c.function.arguments };
  });
  return { content: m.content ?? null, finish: choice.finish_reason, calls, usage };
}

// Accumulates a streamed chat completion the way OpenAI's docs show: delta.content concatenated;
// delta.tool_calls[i] by index, id and name from the first chunk of an index, arguments
// concatenated. Also checks the chunk shapes OpenAI sends.
async function accumulate(stream, where) {
  let content = null;
  let finish = null;
  let usage = null;
  let role = null;
  const calls = [];
  for await (const chunk of stream) {
    if (chunk.object !== 'chat.completion.chunk') fail(`${where}: chunk object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.index !== 0) fail(`${where}: choice index ${c.index}`);
      const d = c.delta ?? {};
      if (d.role) role = d.role;
      if (d.content) content = (content ?? '') + d.content;
      for (const tc of d.tool_calls ?? []) {
        if (tc.index === calls.length) {
          if (!tc.id || tc.type !== 'function' || !tc.function?.name) {
            fail(`${where}: the first chunk of call ${tc.index} lacks id, type or name: ${JSON.stringify(tc)}`);
          }
          calls.push({ id: tc.id, name: tc.function?.name, arguments: tc.function?.arguments ?? '' });
        } else if (Number.isInteger(tc.index) && tc.index >= 0 && tc.index < calls.length) {
          if (tc.id || tc.type || tc.function?.name) fail(`${where}: a later chunk of call ${tc.index} repeats its head`);
          calls[tc.index].arguments += tc.function?.arguments ?? '';
        } else {
          fail(`${where}: tool call index ${tc.index} after ${calls.length} calls`);
        }
      }
      if (c.finish_reason) {
        if (finish) fail(`${where}: two finish_reasons`);
        finish = c.finish_reason;
      }
    }
  }
  if (role !== 'assistant') fail(`${where}: streamed role ${role}`);
  return { content, finish, calls, usage };
}

// The client's own stream helper: its accumulated final message, and its tool-call done events.
// (openai@4 calls it client.beta.chat.completions.stream; openai@5 client.chat.completions.stream.)
async function viaHelper(client, params) {
  const api = client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions;
  const runner = api.stream(params);
  const done = [];
  runner.on('tool_calls.function.arguments.done', (e) => done.push(e));
  const completion = await runner.finalChatCompletion();
  return { message: fromChoice(completion.choices[0], completion.usage ?? null), done, completion };
}

// The parts compared across transports (ids are per response: not compared).
const comparable = (m) => JSON.stringify({ content: m.content, finish: m.finish,
                                           calls: m.calls.map((c) => [c.name, c.arguments]) });

// A message of forced tool calls: names among `names`, unique non-empty ids, arguments valid
// under their tool's parameters; one call finishing with "tool_calls" when not parallel.
function checkCalls(m, names, parallel, where) {
  if (m.calls.length === 0) return fail(`${where}: no tool calls: ${JSON.stringify(m)}`);
  if (!parallel && (m.calls.length !== 1 || m.finish !== 'tool_calls')) {
    fail(`${where}: parallel_tool_calls false gave ${m.calls.length} calls, finish ${m.finish}`);
  }
  if (parallel && m.finish !== 'tool_calls' && m.finish !== 'length') fail(`${where}: finish ${m.finish}`);
  if (m.finish === 'tool_calls' && m.content !== null) fail(`${where}: content ${JSON.stringify(m.content)}`);
  const ids = new Set(m.calls.map((c) => c.id));
  if (ids.size !== m.calls.length || [...ids].some((id) => typeof id !== 'string' || id === '')) {
    fail(`${where}: ids ${JSON.stringify([...ids])}`);
  }
  m.calls.forEach((c, i) => {
    if (!names.includes(c.name)) return fail(`${where}: call ${i} names '${c.name}'`);
    // A generation cut by max_tokens may end inside its last call's arguments (the server then
    // keeps that call, arguments so far, and also returns its text from <tool_call> as content).
    const cut = m.finish === 'length' && i === m.calls.length - 1;
    let complete = true;
    try { JSON.parse(c.arguments); } catch { complete = false; }
    if (cut && !complete) return;
    const errors = checkJson(TOOLS.find((t) => t.function.name === c.name).function.parameters, c.arguments);
    if (errors.length) fail(`${where}: call ${i} (${c.name}): ${errors.join('; ')}`);
  });
}

const MODEL = 'stories260K';
const TOOLS = [
  { type: 'function', function: {
    name: 'get_weather', description: 'The current weather in a city.',
    parameters: { type: 'object',
                  properties: { city: { type: 'string', minLength: 1, maxLength: 12 },
                                unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
                  required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: {
    name: 'set_alarm', description: 'Set an alarm.',
    parameters: { type: 'object',
                  properties: { hour: { type: 'integer', minimum: 0, maximum: 23 },
                                minute: { type: 'integer', minimum: 0, maximum: 59 },
                                label: { type: 'string', maxLength: 8 } },
                  required: ['hour', 'minute'], additionalProperties: false } } },
];
// Strict tools make the client's helpers parse arguments (and refuse a "length" finish).
const strict = (tools) => tools.map((t) => ({ ...t, function: { ...t.function, strict: true } }));
const MESSAGES = [{ role: 'user', content: 'Wake me at seven and tell me the weather in Paris.' }];

async function structuredChecks() {
  const s = await startServer(['-c', '2048', '--chat-template', qwenTemplate]);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${s.port}/v1`, apiKey: 'test-key', maxRetries: 0,
                              timeout: 60000 });
  await toolCallChecks(client);
  await runToolsChecks(client);
  await chunkBoundaryChecks(client, s.port);
  await jsonSchemaChecks(client);
}

// ---- 2. Tool calls: non-streamed == streamed == the client's stream helper --------------------

async function toolCallChecks(client) {
  const choices = [['required', 'required', TOOLS.map((t) => t.function.name)],
                   ['named set_alarm', { type: 'function', function: { name: 'set_alarm' } }, ['set_alarm']]];
  for (const [label, tool_choice, names] of choices) {
    for (const parallel of [false, true]) {
      for (const seed of [1, 2, 3]) {
        const where = `tool_choice ${label}, parallel_tool_calls ${parallel}, seed ${seed}`;
        // A parallel generation may run into max_tokens, which strict tools make the helper refuse.
        const params = { model: MODEL, messages: MESSAGES, tools: parallel ? TOOLS : strict(TOOLS), tool_choice,
                         parallel_tool_calls: parallel, temperature: 1, seed, max_tokens: 400 };
        const whole = await client.chat.completions.create(params);
        const m = fromChoice(whole.choices[0], whole.usage);
        checkCalls(m, names, parallel, `${where} (non-streamed)`);

        const streamed = await accumulate(
          await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }),
          `${where} (streamed)`);
        checkCalls(streamed, names, parallel, `${where} (streamed)`);
        if (comparable(streamed) !== comparable(m)) {
          fail(`${where}: streamed differs from non-streamed:\n${JSON.stringify(streamed)}\n${JSON.stringify(m)}`);
        }
        // The token counts must agree; prompt_tokens_details.cached_tokens need not (the second
        // request of the pair finds the first one's prompt in the prefix cache).
        if (JSON.stringify(tokenCounts(streamed.usage)) !== JSON.stringify(tokenCounts(m.usage))) {
          fail(`${where}: usage ${JSON.stringify(streamed.usage)} vs ${JSON.stringify(m.usage)}`);
        }

        const helper = await viaHelper(client, params);
        checkCalls(helper.message, names, parallel, `${where} (stream helper)`);
        if (comparable(helper.message) !== comparable(m)) {
          fail(`${where}: the stream helper differs:\n${JSON.stringify(helper.message)}\n${JSON.stringify(m)}`);
        }
        // One done event per finished call, with its arguments (parsed when the tool is strict).
        const finished = m.calls.filter((c, i) => m.finish !== 'length' || i < m.calls.length - 1);
        if (!finished.every((c, i) => helper.done[i]?.name === c.name && helper.done[i]?.arguments === c.arguments)) {
          fail(`${where}: helper done events ${JSON.stringify(helper.done)}`);
        }
        if (!parallel) {
          for (const c of helper.completion.choices[0].message.tool_calls) {
            if (JSON.stringify(c.function.parsed_arguments) !== JSON.stringify(JSON.parse(c.function.arguments))) {
              fail(`${where}: parsed_arguments ${JSON.stringify(c.function.parsed_arguments)}`);
            }
          }
        }
      }
    }
  }
}

// runTools: each round's calls go to local functions with parsed arguments, and their results
// come back as tool messages, rendered by the template in the next round.
async function runToolsChecks(client) {
  const api = client.chat.completions.runTools ? client.chat.completions : client.beta.chat.completions;
  if (!api.runTools) return console.log('note: this openai client has no runTools');
  for (const stream of [false, true]) {
    const where = `runTools (stream ${stream})`;
    const called = [];
    const tools = TOOLS.map((t) => ({ type: 'function', function: {
      ...t.function, parse: JSON.parse,
      function: (args) => { called.push([t.function.name, args]); return { ok: true, n: called.length }; } } }));
    const runner = api.runTools(
      { model: MODEL, messages: MESSAGES, tools, tool_choice: 'required', parallel_tool_calls: false,
        temperature: 1, seed: 7, max_tokens: 400, stream }, { maxChatCompletions: 3 });
    await runner.done();
    const completions = runner.allChatCompletions();
    if (completions.length !== 3) fail(`${where}: ${completions.length} completions`);
    if (called.length !== 3) fail(`${where}: functions called ${called.length} times`);
    for (const [name, args] of called) {
      const errors = validate(TOOLS.find((t) => t.function.name === name).function.parameters, args);
      if (errors.length) fail(`${where}: ${name}(${JSON.stringify(args)}): ${errors.join('; ')}`);
    }
    const roles = runner.messages.map((m) => m.role).join(',');
    if (roles !== 'user,assistant,tool,assistant,tool,assistant,tool') fail(`${where}: messages ${roles}`);
  }
}

// ---- 3. Chunk boundaries ----------------------------------------------------------------------

// One streamed response is recorded, then replayed to the client through its `fetch` option as a
// body whose chunks are exactly the given parts (a ReadableStream keeps chunk boundaries), split
// at every byte position, at random multi-splits and in 1-byte chunks; then a few times over a
// real local HTTP server writing the parts with pauses. The response is kept short (a named
// function with one enum parameter, max_tokens 128: about 5 KB of SSE) so that every position
// stays within a few seconds: each split goes through the docs' accumulation, every 8th and the
// random ones also through the stream helper (same SSE decoder, its own accumulation).
async function chunkBoundaryChecks(client, port) {
  const UNIT = { type: 'function', function: {
    name: 'pick_unit', parameters: { type: 'object', properties: { unit: { type: 'string', enum: ['°C', '°F'] } },
                                     required: ['unit'], additionalProperties: false } } };
  const params = { model: MODEL, messages: [{ role: 'user', content: 'Celsius or fahrenheit?' }], tools: [UNIT],
                   tool_choice: { type: 'function', function: { name: 'pick_unit' } }, parallel_tool_calls: false,
                   temperature: 1, seed: 4, max_tokens: 128 };
  const where = 'chunk boundaries';
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer test-key' },
    body: JSON.stringify({ ...params, stream: true, stream_options: { include_usage: true } }) });
  const raw = new Uint8Array(await res.arrayBuffer());
  if (res.status !== 200) return fail(`${where}: status ${res.status}: ${new TextDecoder().decode(raw)}`);

  const whole = await client.chat.completions.create(params);
  const m = fromChoice(whole.choices[0], whole.usage);
  const checkOne = (x, w) => {
    if (x.calls.length !== 1 || x.finish !== 'tool_calls') return fail(`${w}: ${JSON.stringify(x)}`);
    const errors = checkJson(UNIT.function.parameters, x.calls[0].arguments);
    if (errors.length) fail(`${w}: ${errors.join('; ')}`);
  };
  checkOne(m, `${where} (non-streamed)`);

  let parts = [raw];
  const replay = new OpenAI({
    baseURL: 'http://replay.invalid/v1', apiKey: 'x', maxRetries: 0,
    fetch: async () => new Response(new ReadableStream({
      start(c) {
        for (const p of parts) c.enqueue(p);
        c.close();
      },
    }), { status: 200, headers: { 'content-type': 'text/event-stream' } }),
  });
  const reference = await accumulate(await replay.chat.completions.create({ ...params, stream: true }), where);
  checkOne(reference, `${where} (recorded)`);
  if (comparable(reference) !== comparable(m)) {
    fail(`${where}: the recorded stream differs from non-streamed:\n${JSON.stringify(reference)}\n${JSON.stringify(m)}`);
  }
  const expected = JSON.stringify(reference);
  const expectedHelper = JSON.stringify((await viaHelper(replay, params)).message);
  if (comparable(JSON.parse(expectedHelper)) !== comparable(reference)) fail(`${where}: the helper differs: ${expectedHelper}`);

  let bad = 0;
  const tryParts = async (label, withHelper = true) => {
    parts = label.parts;
    const got = JSON.stringify(await accumulate(await replay.chat.completions.create({ ...params, stream: true }),
                                                `${where} ${label.name}`));
    if (got !== expected && bad++ < 5) fail(`${where}: ${label.name}: ${got}\n  expected ${expected}`);
    if (!withHelper) return;
    const helper = JSON.stringify((await viaHelper(replay, params)).message);
    if (helper !== expectedHelper && bad++ < 5) fail(`${where}: ${label.name} (helper): ${helper}\n  expected ${expectedHelper}`);
  };
  for (let k = 1; k < raw.length; ++k) {
    await tryParts({ name: `split at byte ${k}`, parts: [raw.subarray(0, k), raw.subarray(k)] }, k % 8 === 0);
  }
  // A seeded generator for the random splits (mulberry32).
  let state = 0x5eed;
  const random = () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const randomParts = (maxCuts) => {
    const cuts = new Set();
    const n = 1 + Math.floor(random() * maxCuts);
    while (cuts.size < Math.min(n, raw.length - 1)) cuts.add(1 + Math.floor(random() * (raw.length - 1)));
    const at = [0, ...[...cuts].sort((a, b) => a - b), raw.length];
    return at.slice(1).map((end, i) => raw.subarray(at[i], end));
  };
  for (let r = 0; r < 40; ++r) await tryParts({ name: `random split ${r}`, parts: randomParts(200) });
  await tryParts({ name: '1-byte chunks', parts: Array.from(raw, (_, i) => raw.subarray(i, i + 1)) });

  // The same over HTTP: a local server writes the recorded bytes in random parts, with pauses.
  const fake = http.createServer(async (req, res) => {
    req.resume();
    await new Promise((r) => req.on('end', r));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const p of parts) {
      res.write(p);
      await new Promise((r) => setTimeout(r, 1));
    }
    res.end();
  });
  await new Promise((r) => fake.listen(0, '127.0.0.1', r));
  try {
    const viaHttp = new OpenAI({ baseURL: `http://127.0.0.1:${fake.address().port}/v1`, apiKey: 'x', maxRetries: 0,
                                 timeout: 30000 });
    for (let r = 0; r < 5; ++r) {
      parts = randomParts(30);
      const got = JSON.stringify(await accumulate(await viaHttp.chat.completions.create({ ...params, stream: true }),
                                                  `${where} over HTTP ${r}`));
      if (got !== expected) fail(`${where}: over HTTP ${r}: ${got}\n  expected ${expected}`);
    }
  } finally {
    fake.closeAllConnections?.();
    await new Promise((r) => fake.close(r));
  }
  if (![...raw].some((b) => b >= 0x80)) console.log(`note: ${where}: the recorded response is all ASCII`);
  console.log(`${where}: ${raw.length} bytes split at every position, 40 random splits, 1-byte chunks, 5 over HTTP`);
}

// ---- 4. response_format json_schema -----------------------------------------------------------

async function jsonSchemaChecks(client) {
  const PERSON = { type: 'object',
                   properties: { name: { type: 'string', minLength: 1, maxLength: 10 },
                                 age: { type: 'integer', minimum: 0, maximum: 120 },
                                 mood: { type: 'string', enum: ['happy', 'sad', 'sleepy'] } },
                   required: ['name', 'age', 'mood'], additionalProperties: false };
  for (const seed of [1, 2, 3]) {
    const where = `response_format json_schema, seed ${seed}`;
    const params = { model: MODEL, messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
                     response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } },
                     temperature: 1, seed, max_tokens: 400 };
    const whole = await client.chat.completions.create(params);
    const m = fromChoice(whole.choices[0], whole.usage);
    const streamed = await accumulate(await client.chat.completions.create({ ...params, stream: true }), where);
    const helper = (await viaHelper(client, params)).message;
    for (const [label, x] of [['non-streamed', m], ['streamed', streamed], ['stream helper', helper]]) {
      if (x.finish !== 'stop' || x.calls.length !== 0 || typeof x.content !== 'string') {
        fail(`${where} (${label}): ${JSON.stringify(x)}`);
        continue;
      }
      const errors = checkJson(PERSON, x.content);
      if (errors.length) fail(`${where} (${label}): ${errors.join('; ')}`);
      if (x.content !== m.content) fail(`${where} (${label}): ${JSON.stringify(x.content)} vs ${JSON.stringify(m.content)}`);
    }
  }
}

// ---- 5. Embeddings ----------------------------------------------------------------------------

async function embeddingChecks() {
  const vocab = path.join(shared, 'testdata/tokenizer/ggml-vocab-bert-bge.gguf');
  if (!existsSync(vocab)) return fail(`${vocab} not present`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-embed-'));
  try {
    const model = path.join(dir, 'tiny-bert.gguf');
    const synth = spawnSync(sluice, ['synth', '--preset', 'tiny-bert', '--vocab-from', vocab, '--type', 'f32',
                                     '-o', model], { stdio: 'inherit' });
    if (synth.status !== 0) return fail(`sluice synth tiny-bert exited with ${synth.status}`);
    const s = await startServer(['--embedding'], model);
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${s.port}/v1`, apiKey: 'test-key', maxRetries: 0 });
    const input = ['hello world', 'the quick brown fox'];
    const f = await client.embeddings.create({ model: 'stories260K', input, encoding_format: 'float' });
    // No encoding_format: the client asks for base64 and decodes it itself; an explicit base64
    // comes back as the string, decoded here (little-endian f32).
    const d = await client.embeddings.create({ model: 'stories260K', input });
    const b = await client.embeddings.create({ model: 'stories260K', input, encoding_format: 'base64' });
    if (f.data.length !== 2 || d.data.length !== 2 || b.data.length !== 2) fail('embeddings: item counts');
    for (let i = 0; i < 2; ++i) {
      const x = f.data[i].embedding, y = d.data[i].embedding;
      if (!Array.isArray(x) || x.length !== 128) fail(`embeddings: float item ${i} is not 128 numbers`);
      if (typeof b.data[i].embedding !== 'string') fail('embeddings: explicit base64 is not a string');
      const buf = Buffer.from(b.data[i].embedding, 'base64');
      const z = Array.from({ length: buf.length / 4 }, (_, k) => buf.readFloatLE(4 * k));
      const norm = Math.sqrt(x.reduce((a, v) => a + v * v, 0));
      if (Math.abs(norm - 1) > 1e-5) fail(`embeddings: item ${i} has norm ${norm}`);
      if (y.length !== x.length || z.length !== x.length) fail(`embeddings: item ${i} lengths differ`);
      for (let k = 0; k < x.length; ++k) {
        if (Math.fround(x[k]) !== Math.fround(y[k]) || Math.fround(x[k]) !== z[k]) {
          fail(`embeddings: item ${i}[${k}]: float ${x[k]}, client-decoded ${y[k]}, base64 ${z[k]}`);
          break;
        }
      }
    }
    if (!f.usage || f.usage.prompt_tokens !== f.usage.total_tokens || f.usage.prompt_tokens < 8) {
      fail(`embeddings usage ${JSON.stringify(f.usage)}`);
    }
    // A generation route answers 400 on an embedding model: the client's typed error.
    try {
      await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'hi' }] });
      fail('embedding server answered a chat completion');
    } catch (e) {
      if (!(e instanceof OpenAI.BadRequestError)) fail(`chat on an embedding server: ${e}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- Main -----------------------------------------------------------------------------------

const started = Date.now();
try {
  await goldenChecks();
  await structuredChecks();
  await embeddingChecks();
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await stopAll();
}
if (!process.exitCode) {
  console.log(`PASS: openai ${clientVersion}: streamed chat == completion == golden; tool calls, ` +
              `chunk boundaries, json_schema and embeddings (${((Date.now() - started) / 1000).toFixed(1)} s)`);
}
