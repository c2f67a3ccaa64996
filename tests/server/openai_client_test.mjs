// The official `openai` npm client against `sluice serve`: a streamed chat completion and a
// non-streamed completion at temperature 0 both equal the golden stories260K continuation.
//
// Run by ctest (server_openai_client). Environment:
//   SLUICE_BIN          the sluice executable
//   SLUICE_SHARED       the ../shared directory (absent: skip)
//   SLUICE_NPM_CACHE    where `openai` is installed once and reused
// Exit codes: 0 pass, 1 fail, 77 skip (no npm, no network, no test data).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SKIP = 77;
const here = path.dirname(fileURLToPath(import.meta.url));

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exitCode = 1;
}

const shared = process.env.SLUICE_SHARED || path.join(here, '../../../shared');
const modelPath = path.join(shared, 'testdata/models/stories260K.gguf');
const goldenPath = path.join(shared, 'testdata/models/stories260K.once_upon_a_time.json');
if (!existsSync(modelPath) || !existsSync(goldenPath)) skip(`${modelPath} not present`);
const golden = JSON.parse(readFileSync(goldenPath, 'utf8'));
const sluice = process.env.SLUICE_BIN;
if (!sluice || !existsSync(sluice)) skip('SLUICE_BIN not set or missing');

// Install the client once into the cache directory.
const cache = process.env.SLUICE_NPM_CACHE || path.join(os.tmpdir(), 'sluice-npm-openai');
const pkgDir = path.join(cache, 'node_modules', 'openai');
if (!existsSync(path.join(pkgDir, 'package.json'))) {
  mkdirSync(cache, { recursive: true });
  const npm = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--silent', '--prefix', cache, 'openai@4'],
                        { stdio: 'inherit', timeout: 180000 });
  if (npm.error || npm.status !== 0 || !existsSync(path.join(pkgDir, 'package.json'))) {
    skip(`cannot npm install openai (${npm.error ? npm.error.message : `exit ${npm.status}`})`);
  }
}
const require = createRequire(path.join(cache, 'package.json'));
const OpenAI = require('openai').default ?? require('openai');

// Start the server on a free port; it prints "listening on http://127.0.0.1:PORT".
const server = spawn(sluice, ['serve', modelPath, '--port', '0', '-c', '512', '-t', '1', '--kv-cache-gb', '0.01',
                              '--served-model-name', 'stories260K', '--api-key', 'test-key',
                              '--chat-template', path.join(here, 'plain_chat_template.jinja')],
                     { stdio: ['ignore', 'inherit', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`no 'listening on' line:\n${log}`)), 60000);
  server.stderr.on('data', (d) => {
    log += d.toString();
    const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  server.on('exit', (code) => reject(new Error(`sluice serve exited with ${code}:\n${log}`)));
});
for (let i = 0; ; ++i) {
  const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
  if (r && r.status === 200) break;
  if (i > 600) throw new Error('server never became ready');
  await new Promise((res) => setTimeout(res, 100));
}

try {
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
} catch (e) {
  fail(e.stack || String(e));
} finally {
  server.kill('SIGTERM');
  const code = await new Promise((res) => server.on('exit', (c) => res(c)));
  if (code !== 0) fail(`sluice serve exited with ${code} after SIGTERM:\n${log}`);
}
if (!process.exitCode) console.log('PASS: openai client streamed chat == completion == golden');
