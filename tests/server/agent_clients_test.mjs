// The official clients of 2026 agents against `sluice serve`:
//   1. `openai`: responses.create and responses.stream (reasoning items, output text, the typed
//      event sequence), store + retrieve + delete + previous_response_id, function tools with a
//      round trip of function_call_output, and chat completions with reasoning_content;
//   2. `@anthropic-ai/sdk`: messages.create and messages.stream (text, thinking blocks with a
//      budget), a tool_use / tool_result round trip, countTokens, typed errors (x-api-key).
// Two servers over stories260K: one with a template whose generation prompt opens "<think>"
// (reasoning), one with the Qwen2.5 template (Hermes tool calls); then everything again through
// `sluice router` (two replicas of the first: stored responses must stay with their replica).
//
// Run by ctest (server_agent_clients). Environment: SLUICE_BIN, SLUICE_SHARED, SLUICE_NPM_CACHE.
// Exit codes: 0 pass, 1 fail, 77 skip (no npm, no network, no test data) — never skip under
// CI=true: there a missing client or data fails the test.
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { fail, installPackages, skip, startProcess, stopAll } from './npm_test_util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

function check(cond, why) {
  if (!cond) fail(why);
}

const shared = process.env.SLUICE_SHARED || path.join(here, '../../../shared');
const modelPath = path.join(shared, 'testdata/models/stories260K.gguf');
const goldenPath = path.join(shared, 'testdata/models/stories260K.once_upon_a_time.json');
const qwenTemplate = path.join(shared, 'testdata/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja');
for (const p of [modelPath, goldenPath, qwenTemplate]) if (!existsSync(p)) skip(`${p} not present`);
const golden = JSON.parse(readFileSync(goldenPath, 'utf8'));
const sluice = process.env.SLUICE_BIN;
if (!sluice || !existsSync(sluice)) skip('SLUICE_BIN not set or missing');

const cache = process.env.SLUICE_NPM_CACHE || path.join(os.tmpdir(), 'sluice-npm-agents');
const { require, version } = installPackages(cache, { openai: 'openai@4', '@anthropic-ai/sdk': '@anthropic-ai/sdk@1' });
const OpenAI = require('openai').default ?? require('openai');
const Anthropic = require('@anthropic-ai/sdk').default ?? require('@anthropic-ai/sdk');

async function startServer(args) {
  return startProcess(sluice, ['serve', modelPath, '--port', '0', '-t', '1', '--kv-cache-gb', '0.05', '-c', '2048',
                               '--served-model-name', 'stories260K', '--api-key', 'test-key', ...args]);
}

// `sluice router` over running servers, with the same key.
async function startRouter(backends) {
  return startProcess(sluice, ['router', '--port', '0', '--api-key', 'test-key', '--health-interval', '0.5',
                               ...backends.flatMap((b) => ['--backend', `http://127.0.0.1:${b.port}`])]);
}

const n = golden.greedy_tokens.length;
const weatherTool = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
                additionalProperties: false },
};

// ---- 1. openai: Responses, and chat with reasoning ------------------------------------------

async function openaiChecks(think, tools) {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${think.port}/v1`, apiKey: 'test-key', maxRetries: 0 });

  // The think template opens the reasoning: all of a short answer is reasoning.
  const r = await client.responses.create({ model: 'stories260K', input: golden.prompt, max_output_tokens: n,
                                            temperature: 0 });
  check(r.object === 'response' && r.id.startsWith('resp_'), `response ${JSON.stringify(r).slice(0, 200)}`);
  check(r.status === 'incomplete' && r.incomplete_details?.reason === 'max_output_tokens', `status ${r.status}`);
  check(r.output.length === 1 && r.output[0].type === 'reasoning', `output ${JSON.stringify(r.output)}`);
  const reasoning = r.output[0].content?.[0]?.text ?? '';
  check(reasoning.length > 0 && reasoning === reasoning.trim(), `reasoning ${JSON.stringify(reasoning)}`);
  check(r.usage.output_tokens === n && r.usage.input_tokens > 0, `usage ${JSON.stringify(r.usage)}`);

  // Chat completions carry it as reasoning_content.
  const chat = await client.chat.completions.create({ model: 'stories260K', temperature: 0, max_tokens: n,
                                                      messages: [{ role: 'user', content: golden.prompt }] });
  check(chat.choices[0].message.reasoning_content === reasoning, `chat reasoning ${JSON.stringify(chat.choices[0].message)}`);
  check(chat.choices[0].message.content === '', 'chat content not empty');
  let streamedReasoning = '';
  for await (const chunk of await client.chat.completions.create({
    model: 'stories260K', temperature: 0, max_tokens: n, stream: true, messages: [{ role: 'user', content: golden.prompt }],
  })) {
    streamedReasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
  }
  check(streamedReasoning === reasoning, `streamed chat reasoning ${JSON.stringify(streamedReasoning)}`);

  // Thinking off (the template closes it): the answer is text; streamed == not streamed.
  const off = { model: 'stories260K', input: [{ role: 'user', content: golden.prompt }], max_output_tokens: 24,
                temperature: 0, chat_template_kwargs: { enable_thinking: false } };
  const whole = await client.responses.create(off);
  check(whole.output.length === 1 && whole.output[0].type === 'message', `output ${JSON.stringify(whole.output)}`);
  check(whole.output_text.length > 0, 'no output_text');
  const stream = client.responses.stream(off);
  const types = [];
  let deltas = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  }
  const final = await stream.finalResponse();
  const finalText = final.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((c) => c.text).join('');
  check(finalText === whole.output_text && deltas === whole.output_text,
        `streamed ${JSON.stringify(deltas)} / final ${JSON.stringify(finalText)} vs ${JSON.stringify(whole.output_text)}`);
  for (const t of ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
                   'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
                   'response.output_item.done', 'response.incomplete']) {
    check(types.includes(t), `no ${t} event in ${types.join(',')}`);
  }
  check(types[0] === 'response.created' && types[types.length - 1] === 'response.incomplete', `order ${types.join(',')}`);

  // A reasoning budget closes the thinking: reasoning, then the answer.
  const budgeted = await client.responses.create({ model: 'stories260K', input: golden.prompt, max_output_tokens: 40,
                                                   temperature: 0, reasoning_budget: 4 });
  check(budgeted.output.map((o) => o.type).join(',') === 'reasoning,message', `budget output ${JSON.stringify(budgeted.output)}`);

  // The store: retrieve, continue, delete.
  const got = await client.responses.retrieve(whole.id);
  check(got.id === whole.id && got.output_text === whole.output_text, 'retrieve');
  const next = await client.responses.create({ model: 'stories260K', input: 'And then', previous_response_id: whole.id,
                                               max_output_tokens: 4, temperature: 0,
                                               chat_template_kwargs: { enable_thinking: false } });
  check(next.previous_response_id === whole.id, 'previous_response_id not echoed');
  check(next.usage.input_tokens > whole.usage.input_tokens, 'the previous conversation was not in the prompt');
  await client.responses.del(whole.id);
  try {
    await client.responses.retrieve(whole.id);
    fail('a deleted response was retrieved');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `deleted: ${e}`);
  }
  try {
    await client.responses.create({ model: 'stories260K', input: 'x', previous_response_id: 'resp_nope' });
    fail('an unknown previous_response_id was accepted');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `unknown previous: ${e}`);
  }

  // Function tools on the Hermes-template server: a forced call, streamed and not, then its output.
  const tc = new OpenAI({ baseURL: `http://127.0.0.1:${tools.port}/v1`, apiKey: 'test-key', maxRetries: 0 });
  const req = { model: 'stories260K', input: 'Weather in Paris?', tools: [{ type: 'function', ...weatherTool }],
                tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_output_tokens: 300 };
  const called = await tc.responses.create(req);
  const fc = called.output.find((o) => o.type === 'function_call');
  check(fc && fc.name === 'get_weather' && fc.call_id, `no function_call in ${JSON.stringify(called.output)}`);
  const args = JSON.parse(fc.arguments);
  check(typeof args.city === 'string', `arguments ${fc.arguments}`);
  const callStream = tc.responses.stream(req);
  let argDeltas = '';
  for await (const ev of callStream) if (ev.type === 'response.function_call_arguments.delta') argDeltas += ev.delta;
  const callFinal = await callStream.finalResponse();
  const sfc = callFinal.output.find((o) => o.type === 'function_call');
  check(sfc && sfc.arguments === fc.arguments && argDeltas === fc.arguments, `streamed call ${JSON.stringify(sfc)} / ${argDeltas}`);
  const after = await tc.responses.create({
    model: 'stories260K', temperature: 0, max_output_tokens: 8, tools: [{ type: 'function', ...weatherTool }],
    input: [{ role: 'user', content: 'Weather in Paris?' }, { type: 'function_call', call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
            { type: 'function_call_output', call_id: fc.call_id, output: '{"temperature": 21}' }],
  });
  check(after.status === 'completed' || after.status === 'incomplete', `after tool output: ${after.status}`);
}

// ---- 2. @anthropic-ai/sdk: Messages ---------------------------------------------------------

async function anthropicChecks(think, tools) {
  const client = new Anthropic({ baseURL: `http://127.0.0.1:${tools.port}`, apiKey: 'test-key', maxRetries: 0 });
  const req = { model: 'stories260K', max_tokens: 16, temperature: 0, messages: [{ role: 'user', content: golden.prompt }] };
  const m = await client.messages.create(req);
  check(m.type === 'message' && m.role === 'assistant' && m.content[0]?.type === 'text', `message ${JSON.stringify(m)}`);
  check(m.stop_reason === 'max_tokens' && m.usage.output_tokens === 16, `stop ${m.stop_reason} usage ${JSON.stringify(m.usage)}`);
  const stream = client.messages.stream(req);
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  check(final.content[0].text === m.content[0].text && text === m.content[0].text,
        `streamed ${JSON.stringify(text)} vs ${JSON.stringify(m.content[0].text)}`);
  check(final.stop_reason === 'max_tokens', `streamed stop ${final.stop_reason}`);
  const count = await client.messages.countTokens({ model: 'stories260K', messages: req.messages });
  check(count.input_tokens === m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0),
        `countTokens ${count.input_tokens} vs ${JSON.stringify(m.usage)}`);

  // A stop sequence.
  const stopped = await client.messages.create({ ...req, max_tokens: 60, stop_sequences: ['Lily'] });
  if (stopped.stop_reason === 'stop_sequence') check(stopped.stop_sequence === 'Lily', 'stop_sequence');

  // Tool use round trip.
  const tool = { name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters };
  const use = await client.messages.create({ model: 'stories260K', max_tokens: 300, temperature: 0, tools: [tool],
                                             tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const block = use.content.find((b) => b.type === 'tool_use');
  check(use.stop_reason === 'tool_use' && block && block.name === 'get_weather' && typeof block.input.city === 'string',
        `tool_use ${JSON.stringify(use)}`);
  const useStream = client.messages.stream({ model: 'stories260K', max_tokens: 300, temperature: 0, tools: [tool],
                                             tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const useFinal = await useStream.finalMessage();
  const sblock = useFinal.content.find((b) => b.type === 'tool_use');
  check(sblock && JSON.stringify(sblock.input) === JSON.stringify(block.input), `streamed tool_use ${JSON.stringify(useFinal)}`);
  const reply = await client.messages.create({
    model: 'stories260K', max_tokens: 8, temperature: 0, tools: [tool],
    messages: [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: use.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: block.id, content: '21 degrees' }] }],
  });
  check(reply.type === 'message', 'tool_result round trip');

  // Thinking with a budget on the think-template server.
  const tc = new Anthropic({ baseURL: `http://127.0.0.1:${think.port}`, apiKey: 'test-key', maxRetries: 0 });
  const thought = await tc.messages.create({ model: 'stories260K', max_tokens: 40, temperature: 0,
                                             thinking: { type: 'enabled', budget_tokens: 4 },
                                             messages: [{ role: 'user', content: golden.prompt }] });
  check(thought.content.map((b) => b.type).join(',') === 'thinking,text', `thinking ${JSON.stringify(thought.content)}`);
  const thoughtStream = tc.messages.stream({ model: 'stories260K', max_tokens: 40, temperature: 0,
                                             thinking: { type: 'enabled', budget_tokens: 4 },
                                             messages: [{ role: 'user', content: golden.prompt }] });
  const thoughtFinal = await thoughtStream.finalMessage();
  check(JSON.stringify(thoughtFinal.content.map((b) => [b.type, b.thinking ?? b.text])) ===
        JSON.stringify(thought.content.map((b) => [b.type, b.thinking ?? b.text])), 'streamed thinking differs');

  // Typed errors in Anthropic's shape.
  const bad = new Anthropic({ baseURL: `http://127.0.0.1:${tools.port}`, apiKey: 'wrong', maxRetries: 0 });
  try {
    await bad.messages.create(req);
    fail('a wrong x-api-key was accepted');
  } catch (e) {
    check(e instanceof Anthropic.AuthenticationError && e.error?.type === 'error', `auth error ${e}`);
  }
  try {
    await client.messages.create({ ...req, temperature: 3 });
    fail('temperature 3 was accepted');
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error', `bad request ${e}`);
  }
}

// ---- Main -----------------------------------------------------------------------------------

const started = Date.now();
try {
  const think = await startServer(['--chat-template', path.join(here, 'think_chat_template.jinja')]);
  const tools = await startServer(['--chat-template', qwenTemplate]);
  await openaiChecks(think, tools);
  await anthropicChecks(think, tools);
  // The same through `sluice router`: two replicas of the thinking server (a stored response
  // and its continuation must reach the replica that made it), one of the tools server.
  const think2 = await startServer(['--chat-template', path.join(here, 'think_chat_template.jinja')]);
  const routedThink = await startRouter([think, think2]);
  const routedTools = await startRouter([tools]);
  await openaiChecks(routedThink, routedTools);
  await anthropicChecks(routedThink, routedTools);
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await stopAll();
}
if (!process.exitCode) {
  console.log(`PASS: openai ${version('openai')} Responses + reasoning, @anthropic-ai/sdk ` +
              `${version('@anthropic-ai/sdk')} Messages, against sluice serve and sluice router ` +
              `(${((Date.now() - started) / 1000).toFixed(1)} s)`);
}
