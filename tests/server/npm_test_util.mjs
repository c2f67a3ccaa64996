// Shared by the official-client tests (openai_client_test.mjs, agent_clients_test.mjs): skipping
// (never under CI=true), failing, installing npm packages once into a cache folder, and starting
// and stopping `sluice` processes that print "listening on http://127.0.0.1:PORT".
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

export const SKIP = 77;

// Exit 77 (ctest's skip), or fail under CI=true: there tests may not skip for what the project
// installs.
export function skip(why) {
  if (process.env.CI === 'true') {
    console.error(`FAIL (CI=true: tests may not skip): ${why}`);
    process.exit(1);
  }
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

export function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exitCode = 1;
}

// Installs `packages` ({name: spec}) into `cache` unless there; returns a require() rooted there
// and the installed version of each.
export function installPackages(cache, packages) {
  const pkgJson = (name) => path.join(cache, 'node_modules', name, 'package.json');
  const missing = Object.keys(packages).filter((p) => !existsSync(pkgJson(p)));
  if (missing.length) {
    mkdirSync(cache, { recursive: true });
    const npm = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--silent', '--prefix', cache,
                                  ...missing.map((p) => packages[p])], { stdio: 'inherit', timeout: 240000 });
    for (const p of missing) {
      if (npm.error || npm.status !== 0 || !existsSync(pkgJson(p)))
        skip(`cannot npm install ${p} (${npm.error ? npm.error.message : `exit ${npm.status}`})`);
    }
  }
  const require = createRequire(path.join(cache, 'package.json'));
  const version = (name) => JSON.parse(readFileSync(pkgJson(name), 'utf8')).version;
  return { require, version };
}

// Processes started by startProcess, stopped by stopAll.
export const processes = [];

// Runs `sluice argv...`, waits for its "listening on" line and a 200 from /health.
export async function startProcess(sluice, argv) {
  const proc = spawn(sluice, argv, { stdio: ['ignore', 'inherit', 'pipe'] });
  const s = { proc, log: '', exited: new Promise((res) => proc.on('exit', (c) => res(c))) };
  processes.push(s);
  s.port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no 'listening on' line:\n${s.log}`)), 60000);
    proc.stderr.on('data', (d) => {
      s.log += d.toString();
      const m = s.log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`sluice ${argv[0]} exited with ${code}:\n${s.log}`)));
  });
  for (let i = 0; ; ++i) {
    const r = await fetch(`http://127.0.0.1:${s.port}/health`).catch(() => null);
    if (r && r.status === 200) break;
    if (i > 600) throw new Error(`sluice ${argv[0]} never became ready`);
    await new Promise((res) => setTimeout(res, 100));
  }
  return s;
}

// SIGTERM to every process; each must exit 0.
export async function stopAll() {
  for (const s of processes) {
    s.proc.kill('SIGTERM');
    const code = await s.exited;
    if (code !== 0) fail(`sluice exited with ${code} after SIGTERM:\n${s.log}`);
  }
}
