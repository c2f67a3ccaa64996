// The web app in a real browser: playwright-core (npm) drives Debian's chromium headless against
// `sluice serve` on stories260K, one browser for every case:
//   chat: a streamed answer with its stats; stop mid-stream; regenerate; the conversation found
//   again after a reload; edit and resend; rename, export, delete, import; a 4xx shown as the
//   server's message; a schema-constrained answer that parses; a server that goes away
//   mid-stream (a proxy cuts the stream) shows an error and keeps the conversation; reasoning,
//   code, math and tool calls rendered (a canned stream); the dashboard's charts move while a
//   load runs; `sluice router`'s app (a chat through it, its backend table); a phone-sized
//   viewport; the API-key prompt of a server with --api-key.
// Screenshots (chat, chat-rich, dashboard, chat-phone) go to SLUICE_WEBUI_ARTIFACTS. Reports the
// first render time on loopback (not asserted).
//
// Run by ctest (webui_browser). Environment:
//   SLUICE_BIN, SLUICE_SHARED   the sluice executable, the ../shared folder
//   SLUICE_NPM_CACHE            where playwright-core is installed once
//   SLUICE_WEBUI_ARTIFACTS      where screenshots go
//   SLUICE_CHROMIUM             the browser (default: Debian's /usr/lib/chromium/chromium)
// Exit codes: 0 pass, 1 fail, 77 skip (no browser, npm, network or test data); under CI=true
// what would skip fails.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { fail, installPackages, skip, startProcess, stopAll } from '../server/npm_test_util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const t0 = Date.now();
const shared = process.env.SLUICE_SHARED || path.join(here, '../../../shared');
const modelPath = path.join(shared, 'testdata/models/stories260K.gguf');
if (!existsSync(modelPath)) skip(`${modelPath} not present`);
const sluice = process.env.SLUICE_BIN;
if (!sluice || !existsSync(sluice)) skip('SLUICE_BIN not set or missing');
const chromiumPath = process.env.SLUICE_CHROMIUM ||
  ['/usr/lib/chromium/chromium', '/usr/bin/chromium'].find((p) => existsSync(p));
if (!chromiumPath) skip('no chromium (scripts/bootstrap installs Debian\'s)');
const artifacts = process.env.SLUICE_WEBUI_ARTIFACTS || path.join(os.tmpdir(), 'sluice-webui-artifacts');
mkdirSync(artifacts, { recursive: true });

const cache = process.env.SLUICE_NPM_CACHE || path.join(os.tmpdir(), 'sluice-npm-playwright');
const { require, version } = installPackages(cache, { 'playwright-core': 'playwright-core@1.65.1' });
const { chromium } = require('playwright-core');

const template = path.join(here, '../server/plain_chat_template.jinja');
const serverArgs = ['-t', '1', '--kv-cache-gb', '0.01', '-c', '1024', '--chat-template', template];
const server = await startProcess(sluice, ['serve', modelPath, '--port', '0', ...serverArgs]);
const keyed = await startProcess(sluice, ['serve', modelPath, '--port', '0', '--api-key', 'webui-key', ...serverArgs]);

// A pass-through proxy in front of `server` that can slow chat streams down (to stop one
// mid-way) or cut them after some chunks (a server that goes away).
const proxyMode = { delayMs: 0, cutAfter: 0 };
const proxy = http.createServer((req, res) => {
  const up = http.request({ host: '127.0.0.1', port: server.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    const isStream = req.url.startsWith('/v1/chat/completions') && /event-stream/.test(ur.headers['content-type'] || '');
    if (!isStream) return ur.pipe(res);
    // Event by event (a TCP read may hold several), each after delayMs.
    let n = 0;
    let buf = '';
    let queue = Promise.resolve();
    ur.setEncoding('utf8');
    ur.on('data', (chunk) => {
      buf += chunk;
      const events = buf.split('\n\n');
      buf = events.pop();
      for (const ev of events) {
        queue = queue.then(async () => {
          if (res.destroyed) return;
          if (proxyMode.delayMs) await new Promise((r) => setTimeout(r, proxyMode.delayMs));
          if (proxyMode.cutAfter && ++n > proxyMode.cutAfter) {
            res.destroy();
            ur.destroy();
            return;
          }
          res.write(`${ev}\n\n`);
        });
      }
    });
    ur.on('end', () => queue.then(() => res.end()));
  });
  up.on('error', () => res.destroy());
  req.pipe(up);
});
await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${proxy.address().port}`;

const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox', '--disable-gpu'] });
const report = [];
let page;

async function check(name, fn) {
  const t = Date.now();
  try {
    await fn();
    report.push(`ok   ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)`);
  } catch (e) {
    fail(`${name}: ${e.stack || e}`);
    report.push(`FAIL ${name}`);
    if (page) await page.screenshot({ path: path.join(artifacts, `failure-${name.replace(/\W+/g, '_')}.png`) }).catch(() => {});
  }
}

const lastAnswer = () => page.locator('.msg.assistant').last();
const sendButton = () => page.locator('.composer button[type=submit]');
async function send(text) {
  runsSeen = await runs();
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}
// Answers finished so far in this page (the app counts them in data-runs); waitIdle waits for
// the next one and the Send button.
let runsSeen = 0;
const runs = async () => Number(await page.locator('main.conversation').getAttribute('data-runs'));
async function waitIdle() {
  const want = runsSeen + 1;
  await page.waitForFunction((n) => Number(document.querySelector('main.conversation')?.dataset.runs) >= n, want, { timeout: 30000 });
  await sendButton().waitFor({ timeout: 5000 });
  runsSeen = await runs();
}
async function openSettings() {
  if (!(await page.locator('details.settings').getAttribute('open') !== null)) await page.click('details.settings > summary');
}
// Answers of 48 tokens at most: a conversation of several turns stays inside the context.
async function setMaxTokens(v) {
  await openSettings();
  await page.getByLabel('Max tokens').fill(v);
  await page.click('details.settings > summary');
}
async function newChat() {
  await page.click('text=New chat');
}

try {
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on('pageerror', (e) => fail(`page error: ${e.stack || e}`));
  let firstRenderMs, warmRenderMs;
  await check('loads and renders', async () => {
    const r = await page.goto(`${base}/`);
    if (r.status() !== 200) throw new Error(`GET / answered ${r.status()}`);
    await page.locator('#prompt').waitFor();
    firstRenderMs = await page.evaluate(() => window.sluiceFirstRenderMs);
    // Again with the browser up (the first load also starts the renderer process).
    await page.reload();
    await page.locator('#prompt').waitFor();
    warmRenderMs = await page.evaluate(() => window.sluiceFirstRenderMs);
  });

  await check('send: the answer streams in', async () => {
    await setMaxTokens('48');
    proxyMode.delayMs = 10;
    await send('Once upon a time');
    // Seen mid-stream: text already there while Stop is still offered.
    await page.locator('.composer button.danger').waitFor({ timeout: 10000 });
    await lastAnswer().locator('.markdown :is(p, li, pre)').first().waitFor({ timeout: 10000 });
    await waitIdle();
    const text = await lastAnswer().locator('.markdown').innerText();
    if (text.trim().length < 10) throw new Error(`short answer: ${JSON.stringify(text)}`);
    const stats = await lastAnswer().locator('.stats-line').innerText();
    if (!/tokens\/s/.test(stats) || !/TTFT \d+ ms/.test(stats)) throw new Error(`no tokens/s or TTFT: ${stats}`);
    if ((await page.locator('.msg.user .user-text').innerText()).trim() !== 'Once upon a time') throw new Error('the user message is not shown');
  });

  await check('stop mid-stream', async () => {
    proxyMode.delayMs = 100;
    await send('Once upon a time, a dog');
    await lastAnswer().locator('.markdown :is(p, li, pre)').first().waitFor({ timeout: 10000 });
    await page.click('.composer button.danger');
    await waitIdle();
    const meta = await lastAnswer().locator('.msg-meta').innerText();
    if (!/stopped/.test(meta)) throw new Error(`not marked stopped: ${meta}`);
    proxyMode.delayMs = 0;
  });

  await check('regenerate', async () => {
    const before = await page.locator('.msg').count();
    runsSeen = await runs();
    await lastAnswer().locator('button', { hasText: 'Regenerate' }).click();
    await waitIdle();
    const after = await page.locator('.msg').count();
    if (after !== before) throw new Error(`regenerate changed the message count ${before} -> ${after}`);
    const meta = await lastAnswer().locator('.msg-meta').innerText();
    if (/stopped/.test(meta)) throw new Error('the regenerated answer is still the stopped one');
    if (!(await lastAnswer().locator('.markdown').innerText()).trim()) throw new Error('empty regenerated answer');
    await page.screenshot({ path: path.join(artifacts, 'chat.png') });
  });

  await check('reload: the conversation is kept', async () => {
    await page.reload();
    // Listed, and reopened as it was open.
    await page.locator('.conv-list .conv-open', { hasText: 'Once upon a time' }).waitFor({ timeout: 10000 });
    await page.locator('.msg.user').nth(1).waitFor({ timeout: 5000 });
    const n = await page.locator('.msg.user').count();
    if (n !== 2) throw new Error(`${n} user messages after reload, want 2`);
  });

  await check('edit and resend', async () => {
    const before = await page.locator('.msg').count();
    if (before < 4) throw new Error(`want 2 turns to edit the first, have ${before} messages`);
    await page.locator('.msg.user').first().locator('button', { hasText: 'Edit' }).click();
    await page.fill('#edit-0', 'Once upon a time, a cat');
    runsSeen = await runs();
    await page.locator('.msg.user').first().locator('button[type=submit]').click();
    await waitIdle();
    const n = await page.locator('.msg').count();
    if (n !== 2) throw new Error(`${n} messages after editing the first, want 2`);
    if ((await page.locator('.msg.user .user-text').innerText()).trim() !== 'Once upon a time, a cat') throw new Error('the edit was not sent');
  });

  await check('rename, export, delete, import', async () => {
    page.once('dialog', (d) => d.accept('Cat story'));
    await page.locator('.conv-list li.current button[aria-label^="Rename"]').click();
    await page.locator('.conv-list .conv-open', { hasText: 'Cat story' }).waitFor({ timeout: 5000 });
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Export')]);
    const file = path.join(artifacts, 'conversations.json');
    await download.saveAs(file);
    const exported = JSON.parse(readFileSync(file, 'utf8'));
    const cat = exported.conversations.find((c) => c.title === 'Cat story');
    if (!cat || cat.messages.length !== 2) throw new Error('the export lacks the renamed conversation');
    page.once('dialog', (d) => d.accept());
    await page.locator('.conv-list li.current button[aria-label^="Delete"]').click();
    await page.locator('.conv-list .conv-open', { hasText: 'Cat story' }).waitFor({ state: 'detached', timeout: 5000 });
    await page.setInputFiles('.sidebar input[type=file]', file);
    await page.locator('.conv-list .conv-open', { hasText: 'Cat story' }).waitFor({ timeout: 5000 });
  });

  await check('a 4xx is shown with its message', async () => {
    await newChat();
    await openSettings();
    await setMaxTokens('100000');
    await send('Hello');
    await waitIdle();
    const err = await lastAnswer().locator('.error').innerText({ timeout: 5000 });
    if (!/max_tokens|context/i.test(err)) throw new Error(`error text is not the server's: ${err}`);
    await setMaxTokens('48');
  });

  await check('schema-constrained answer parses', async () => {
    await newChat();
    await openSettings();
    const schema = { type: 'object', properties: { happy: { type: 'boolean' }, mood: { enum: ['sun', 'rain'] } }, required: ['happy', 'mood'], additionalProperties: false };
    await page.fill('#schema', JSON.stringify(schema));
    await setMaxTokens('64');
    await page.locator('.msg').first().waitFor({ state: 'detached' });
    await send('Is the dog happy?');
    await waitIdle();
    const text = await lastAnswer().locator('.markdown').innerText();
    const v = JSON.parse(text);
    if (typeof v.happy !== 'boolean' || !['sun', 'rain'].includes(v.mood)) throw new Error(`does not match the schema: ${text}`);
    await openSettings();
    await page.fill('#schema', '');
    await setMaxTokens('48');
  });

  await check('server gone mid-stream: error shown, conversation kept', async () => {
    await newChat();
    proxyMode.delayMs = 20;
    proxyMode.cutAfter = 6;
    await send('Once upon a time there was');
    await waitIdle();
    proxyMode.delayMs = 0;
    proxyMode.cutAfter = 0;
    const err = await lastAnswer().locator('.error').innerText({ timeout: 5000 });
    if (!err) throw new Error('no error shown');
    await page.reload();
    const item = page.locator('.conv-list .conv-open', { hasText: 'Once upon a time there was' });
    await item.click({ timeout: 10000 });
    await lastAnswer().locator('.error').waitFor({ timeout: 5000 });
  });

  // stories260K writes neither reasoning, code, math nor tool calls: one recorded-style stream
  // (the server's chunk shapes, docs/server.md) is served to the page in place of the server's.
  await check('reasoning, markdown, code, math and tool calls render', async () => {
    await newChat();
    const chunk = (delta, extra = {}) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;
    const answer = 'Here:\n\n```python\nprint(\"hi\")\n```\n\nand $e^{i\\pi} + 1 = 0$. <img src=x onerror=alert(1)>';
    const body = chunk({ role: 'assistant', content: '' }) + chunk({ reasoning_content: 'Let me think.' }) +
      chunk({ content: answer }) +
      chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":' } }] }) +
      chunk({ tool_calls: [{ index: 0, function: { arguments: ' "Oslo"}' } }] }) +
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 20, total_tokens: 23 } })}\n\ndata: [DONE]\n\n`;
    await page.route('**/v1/chat/completions', (route) => route.fulfill({ status: 200, contentType: 'text/event-stream', body }));
    try {
      await send('Show me everything');
      await waitIdle();
    } finally {
      await page.unroute('**/v1/chat/completions');
    }
    const a = lastAnswer();
    if (await a.locator('details.reasoning').getAttribute('open') !== null) throw new Error('the reasoning is not folded');
    if (!(await a.locator('details.reasoning').innerText()).includes('Reasoning')) throw new Error('no reasoning summary');
    if ((await a.locator('.reasoning-text').textContent()) !== 'Let me think.') throw new Error('reasoning text');
    if (!(await a.locator('.code pre code .hljs-built_in, .code pre code .hljs-string').count())) throw new Error('code is not highlighted');
    if (!(await a.locator('.code button.copy').count())) throw new Error('no copy button on the code');
    if (!(await a.locator('.katex').count())) throw new Error('math is not rendered');
    if (await a.locator('.markdown img').count()) throw new Error('raw HTML from the model became an element');
    const tool = await a.locator('.tool-call').innerText();
    if (!tool.includes('get_weather') || !tool.includes('"city": "Oslo"')) throw new Error(`tool call view: ${tool}`);
    await page.screenshot({ path: path.join(artifacts, 'chat-rich.png') });
  });

  await check('dashboard charts move under load', async () => {
    await page.goto(`${base}/#/dashboard`);
    await page.locator('#chart-tokens').waitFor();
    let loading = true;
    const load = (async () => {
      while (loading) {
        await Promise.all(Array.from({ length: 4 }, () => fetch(`http://127.0.0.1:${server.port}/v1/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, ignore_eos: true }),
        }).then((r) => r.text())));
      }
    })();
    try {
      await page.waitForFunction(() => {
        const out = parseFloat(document.querySelector('#stat-tok-out')?.textContent);
        const pts = Number(document.querySelector('#chart-tokens')?.dataset.points);
        return out > 0 && pts >= 3;
      }, null, { timeout: 20000 });
    } finally {
      loading = false;
      await load;
    }
    await page.screenshot({ path: path.join(artifacts, 'dashboard.png') });
  });

  await check('router: chat through it, its dashboard lists the backend', async () => {
    const router = await startProcess(sluice, ['router', '--backend', `http://127.0.0.1:${server.port}`, '--port', '0', '--health-interval', '0.2']);
    await page.goto(`http://127.0.0.1:${router.port}/#/chat`);
    await send('Once upon a time');
    await waitIdle();
    if (await lastAnswer().locator('.error').count()) throw new Error(await lastAnswer().locator('.error').innerText());
    await page.goto(`http://127.0.0.1:${router.port}/#/dashboard`);
    await page.locator('h1', { hasText: 'Router dashboard' }).waitFor({ timeout: 10000 });
    const row = page.locator('tbody tr', { hasText: `127.0.0.1:${server.port}` });
    await row.locator('td.ok').waitFor({ timeout: 10000 });
    await page.waitForFunction(() => /%/.test(document.querySelector('tbody tr td:nth-child(7)')?.textContent || ''), null, { timeout: 10000 });
    await page.screenshot({ path: path.join(artifacts, 'dashboard-router.png') });
  });

  await check('phone-sized viewport', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}/#/chat`);
    await page.locator('#prompt').waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (overflow > 0) throw new Error(`the page is ${overflow} px wider than the phone`);
    await page.click('.side-toggle');
    await page.locator('.sidebar .conv-open').first().waitFor();
    await page.click('.side-close');
    await page.screenshot({ path: path.join(artifacts, 'chat-phone.png') });
  });

  await check('API key prompt', async () => {
    const p2 = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page = p2;
    await p2.goto(`http://127.0.0.1:${keyed.port}/`);
    await p2.locator('#api-key').waitFor({ timeout: 10000 });
    await p2.fill('#api-key', 'webui-key');
    await p2.press('#api-key', 'Enter');
    await send('Once upon a time');
    await waitIdle();
    if (await lastAnswer().locator('.error').count()) throw new Error(await lastAnswer().locator('.error').innerText());
    if ((await lastAnswer().locator('.markdown').innerText()).trim().length < 10) throw new Error('no answer with the key');
  });

  console.log(report.join('\n'));
  console.log(`webui browser test: playwright-core ${version('playwright-core')}, ${chromiumPath}; first render ${firstRenderMs?.toFixed(0)} ms on loopback (a reload: ${warmRenderMs?.toFixed(0)} ms); ${((Date.now() - t0) / 1000).toFixed(1)} s in all; screenshots in ${artifacts}`);
} finally {
  await browser.close();
  proxy.close();
  await stopAll();
}
