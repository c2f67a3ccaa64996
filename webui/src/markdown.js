// Markdown -> HTML for model answers: marked (GFM), highlight.js for code, KaTeX for math
// ($...$, $$...$$, \(...\), \[...\]). Raw HTML in the text is shown as text, never run, and
// links other than http(s)/mailto are dropped.
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import cpp from 'highlight.js/lib/languages/cpp';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import katex from 'katex';
import { Marked } from 'marked';

for (const [name, lang] of Object.entries({ bash, cpp, javascript, json, python, rust, typescript, xml }))
  hljs.registerLanguage(name, lang);
hljs.registerAliases(['sh', 'shell'], { languageName: 'bash' });
hljs.registerAliases(['c', 'c++', 'h'], { languageName: 'cpp' });
hljs.registerAliases(['js'], { languageName: 'javascript' });
hljs.registerAliases(['ts'], { languageName: 'typescript' });
hljs.registerAliases(['py'], { languageName: 'python' });
hljs.registerAliases(['html'], { languageName: 'xml' });

export const escapeHtml = (s) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

function tex(text, displayMode) {
  try {
    return katex.renderToString(text, { displayMode, throwOnError: false, output: 'htmlAndMathml' });
  } catch {
    return `<code>${escapeHtml(text)}</code>`;
  }
}

const math = {
  extensions: [
    {
      name: 'blockMath',
      level: 'block',
      start: (src) => src.match(/\$\$|\\\[/)?.index,
      tokenizer(src) {
        const m = /^(?:\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\])(?:\n|$)/.exec(src);
        if (m) return { type: 'blockMath', raw: m[0], text: (m[1] ?? m[2]).trim() };
      },
      renderer: (t) => `<div class="math">${tex(t.text, true)}</div>`,
    },
    {
      name: 'inlineMath',
      level: 'inline',
      start: (src) => src.match(/\$|\\\(/)?.index,
      tokenizer(src) {
        const m = /^(?:\$\$([^$]+?)\$\$|\$(?!\s)([^$\n]+?)(?<!\s)\$(?!\d)|\\\(([\s\S]+?)\\\))/.exec(src);
        if (m) return { type: 'inlineMath', raw: m[0], text: m[1] ?? m[2] ?? m[3], display: m[1] !== undefined };
      },
      renderer: (t) => tex(t.text, t.display),
    },
  ],
};

const marked = new Marked({ gfm: true, breaks: false });
marked.use(math, {
  renderer: {
    html: ({ text }) => escapeHtml(text),
    code({ text, lang }) {
      const language = (lang || '').split(/\s/)[0].toLowerCase();
      const body = language && hljs.getLanguage(language)
        ? hljs.highlight(text, { language, ignoreIllegals: true }).value
        : escapeHtml(text);
      const label = escapeHtml(language || 'text');
      return `<div class="code"><div class="code-bar"><span>${label}</span>` +
        `<button type="button" class="copy" aria-label="Copy ${label} code">Copy</button></div>` +
        `<pre><code class="hljs">${body}</code></pre></div>`;
    },
    link({ href, title, tokens }) {
      const text = this.parser.parseInline(tokens);
      if (!/^(https?:|mailto:)/i.test(href || '')) return text;
      const t = title ? ` title="${escapeHtml(title)}"` : '';
      return `<a href="${escapeHtml(href)}"${t} target="_blank" rel="noopener noreferrer">${text}</a>`;
    },
    image: ({ text }) => escapeHtml(text || ''),
  },
});

export function renderMarkdown(text) {
  return marked.parse(text || '');
}
