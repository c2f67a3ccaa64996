// The committed web app bundle (webui/dist) equals a fresh build of webui/src with the packages
// of webui/package-lock.json, byte for byte; and its gzipped size stays under 1 MB.
//
// Run by ctest (webui_bundle). Environment:
//   SLUICE_NPM_CACHE   where `npm ci` installs webui's lock once (redone when the lock changes)
// Exit codes: 0 pass, 1 fail, 77 skip (no npm or no network); under CI=true what would skip fails.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

import { fail, skip } from '../server/npm_test_util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const webui = path.join(here, '../../webui');
const cache = process.env.SLUICE_NPM_CACHE || path.join(os.tmpdir(), 'sluice-npm-webui');
const t0 = Date.now();

// npm ci into the cache unless it already holds this exact lock.
const lock = readFileSync(path.join(webui, 'package-lock.json'), 'utf8');
const stamp = path.join(cache, 'installed-lock.json');
if (!existsSync(stamp) || readFileSync(stamp, 'utf8') !== lock) {
  rmSync(cache, { recursive: true, force: true });
  mkdirSync(cache, { recursive: true });
  copyFileSync(path.join(webui, 'package.json'), path.join(cache, 'package.json'));
  writeFileSync(path.join(cache, 'package-lock.json'), lock);
  const npm = spawnSync('npm', ['ci', '--no-audit', '--no-fund', '--silent'], { cwd: cache, stdio: 'inherit', timeout: 240000 });
  if (npm.error || npm.status !== 0) skip(`cannot npm ci webui's packages (${npm.error ? npm.error.message : `exit ${npm.status}`})`);
  writeFileSync(stamp, lock);
}

const out = path.join(cache, 'dist');
const build = spawnSync(process.execPath, [path.join(webui, 'build.mjs'), out], {
  stdio: 'inherit',
  env: { ...process.env, SLUICE_WEBUI_NODE_MODULES: path.join(cache, 'node_modules') },
});
if (build.status !== 0) {
  fail(`node webui/build.mjs failed (exit ${build.status})`);
  process.exit(1);
}

const list = (dir) => readdirSync(dir, { recursive: true, withFileTypes: true })
  .filter((e) => e.isFile())
  .map((e) => path.relative(dir, path.join(e.parentPath ?? e.path, e.name)))
  .sort();
const committed = list(path.join(webui, 'dist'));
const fresh = list(out);
if (JSON.stringify(committed) !== JSON.stringify(fresh)) {
  fail(`webui/dist's files differ from a fresh build:\n  committed: ${committed.join(' ')}\n  fresh:     ${fresh.join(' ')}`);
}
let gz = 0;
let raw = 0;
for (const f of fresh) {
  const a = readFileSync(path.join(out, f));
  raw += a.length;
  gz += /\.(html|js|css|json|svg)$/.test(f) ? gzipSync(a, { level: 9 }).length : a.length;
  const p = path.join(webui, 'dist', f);
  if (existsSync(p) && !a.equals(readFileSync(p))) fail(`webui/dist/${f} differs from a fresh build`);
}
if (process.exitCode) console.error('rebuild it: cd webui && npm ci && npm run build, then commit webui/dist');
console.log(`webui bundle: ${fresh.length} files, ${(raw / 1024).toFixed(0)} KiB, ${(gz / 1024).toFixed(0)} KiB gzipped (text gzipped, fonts as they are); ${((Date.now() - t0) / 1000).toFixed(1)} s`);
if (gz >= 1 << 20) fail(`the bundle is ${gz} bytes gzipped; keep it under 1 MiB`);
