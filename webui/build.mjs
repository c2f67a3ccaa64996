// Builds the web app into dist/ (committed; `sluice` embeds it at build time: cmake/embed_webui.cmake).
// Deterministic: the same sources and package-lock.json give the same bytes (tests/webui/
// webui_bundle_test.mjs rebuilds and compares). Usage: node build.mjs [OUTDIR]
// SLUICE_WEBUI_NODE_MODULES: a node_modules folder to take the packages from instead of
// webui/node_modules (the test installs them once into the build folder).
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.SLUICE_WEBUI_NODE_MODULES;
const require = createRequire(modules ? path.join(modules, '..', 'package.json') : import.meta.url);
const { build } = require('esbuild');
const out = path.resolve(process.argv[2] || path.join(here, 'dist'));
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

await build({
  entryPoints: { app: path.join(here, 'src/main.jsx') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2020'],
  outdir: out,
  jsx: 'automatic',
  jsxImportSource: 'preact',
  legalComments: 'none',
  // KaTeX's CSS names woff2, woff and ttf for each font; every browser the app targets takes
  // woff2, so only those are shipped (loaded when a formula first needs them).
  loader: { '.woff2': 'file', '.woff': 'empty', '.ttf': 'empty' },
  assetNames: 'fonts/[name]-[hash]',
  charset: 'utf8',
  logLevel: 'warning',
  nodePaths: modules ? [modules] : [],
});
copyFileSync(path.join(here, 'src/index.html'), path.join(out, 'index.html'));
const files = readdirSync(out, { recursive: true }).filter((f) => !f.endsWith('/'));
console.log(`webui: built ${files.length} entries into ${out}`);
