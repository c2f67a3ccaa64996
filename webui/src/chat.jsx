// The chat: conversations (IndexedDB), streaming answers with markdown, reasoning folded apart,
// stop / regenerate / edit-and-resend, sampling settings, structured output and tool calls.
import { useEffect, useRef, useState } from 'preact/hooks';

import { ApiError, getJson, streamChat } from './api.js';
import { renderMarkdown } from './markdown.js';
import { deleteConversation, exportAll, importAll, listConversations, loadConversation, newConversation, saveConversation } from './store.js';

const SETTINGS = 'sluice.settings';
const CURRENT = 'sluice.currentConversation';
const DEFAULTS = { system: '', temperature: '', top_p: '', min_p: '', max_tokens: '', seed: '', model: '', schema: '', tools: '' };

function loadSettings() {
  try {
    return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(SETTINGS) || '{}') };
  } catch {
    return { ...DEFAULTS };
  }
}

// The request body for `messages` under `settings`; throws on a schema or tools that is not JSON.
export function requestBody(messages, settings) {
  const body = { messages: [] };
  if (settings.system.trim()) body.messages.push({ role: 'system', content: settings.system });
  for (const m of messages) {
    const msg = { role: m.role, content: m.content || '' };
    if (m.tool_calls && m.tool_calls.length) msg.tool_calls = m.tool_calls;
    body.messages.push(msg);
  }
  if (settings.model) body.model = settings.model;
  for (const k of ['temperature', 'top_p', 'min_p']) if (String(settings[k]).trim() !== '') body[k] = Number(settings[k]);
  for (const k of ['max_tokens', 'seed']) if (String(settings[k]).trim() !== '') body[k] = parseInt(settings[k], 10);
  if (settings.schema.trim()) {
    let schema;
    try {
      schema = JSON.parse(settings.schema);
    } catch (e) {
      throw new Error(`the JSON schema is not valid JSON: ${e.message}`);
    }
    body.response_format = { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } };
  }
  if (settings.tools.trim()) {
    let tools;
    try {
      tools = JSON.parse(settings.tools);
    } catch (e) {
      throw new Error(`the tools are not valid JSON: ${e.message}`);
    }
    body.tools = Array.isArray(tools) ? tools : [tools];
  }
  return body;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // Not a secure context (plain http to another host): the old way.
    const t = document.createElement('textarea');
    t.value = text;
    document.body.appendChild(t);
    t.select();
    document.execCommand('copy');
    t.remove();
  }
}

function ToolCalls({ calls }) {
  return (
    <div class="tool-calls">
      {calls.map((c, i) => {
        let args = c.function?.arguments || '';
        try {
          args = JSON.stringify(JSON.parse(args), null, 2);
        } catch {
          // still streaming or not JSON: shown as it is
        }
        return (
          <details class="tool-call" open key={i}>
            <summary>Tool call: <code>{c.function?.name || '?'}</code>{c.id ? ` (${c.id})` : ''}</summary>
            <pre><code>{args}</code></pre>
          </details>
        );
      })}
    </div>
  );
}

function Message({ m, index, last, busy, onEdit, onRegenerate }) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState(m.content);
  const streaming = busy && last && m.role === 'assistant';
  if (m.role === 'user') {
    return (
      <article class="msg user" aria-label="Your message">
        {editing ? (
          <form onSubmit={(e) => { e.preventDefault(); setEditing(false); onEdit(index, draft); }}>
            <label class="sr-only" for={`edit-${index}`}>Edit message</label>
            <textarea id={`edit-${index}`} value={draft} rows={4} onInput={(e) => setDraft(e.target.value)} />
            <div class="row">
              <button type="submit">Send</button>
              <button type="button" class="secondary" onClick={() => setEditing(false)}>Cancel</button>
            </div>
          </form>
        ) : (
          <>
            <div class="user-text">{m.content}</div>
            <div class="msg-actions">
              <button type="button" class="link" disabled={busy} onClick={() => { setDraft(m.content); setEditing(true); }}>Edit</button>
            </div>
          </>
        )}
      </article>
    );
  }
  return (
    <article class="msg assistant" aria-label="Answer" aria-busy={streaming ? 'true' : 'false'}>
      {m.reasoning && (
        <details class="reasoning">
          <summary>{streaming && !m.content ? 'Thinking…' : 'Reasoning'}</summary>
          <div class="reasoning-text">{m.reasoning}</div>
        </details>
      )}
      <div class="markdown" dangerouslySetInnerHTML={{ __html: renderMarkdown(m.content) }} />
      {m.tool_calls && m.tool_calls.length > 0 && <ToolCalls calls={m.tool_calls} />}
      {m.error && <p class="error" role="alert">{m.error}</p>}
      <div class="msg-meta">
        {m.stats && (
          <span class="stats-line">
            {m.stats.tokens !== undefined && `${m.stats.tokens} tokens · `}
            {m.stats.tps !== undefined && `${m.stats.tps.toFixed(1)} tokens/s · `}
            {m.stats.ttft_ms !== undefined && `TTFT ${Math.round(m.stats.ttft_ms)} ms`}
            {m.finish_reason && ` · ${m.finish_reason}`}
          </span>
        )}
        {!streaming && m.content && <button type="button" class="link" onClick={() => copyText(m.content)}>Copy</button>}
        {last && !busy && <button type="button" class="link" onClick={onRegenerate}>Regenerate</button>}
      </div>
    </article>
  );
}

function Settings({ settings, setSettings, models }) {
  const field = (key, label, attrs = {}) => (
    <label class="field">
      <span>{label}</span>
      <input value={settings[key]} onInput={(e) => setSettings({ ...settings, [key]: e.target.value })} {...attrs} />
    </label>
  );
  return (
    <details class="settings">
      <summary>Settings</summary>
      {models.length > 1 && (
        <label class="field">
          <span>Model</span>
          <select value={settings.model} onChange={(e) => setSettings({ ...settings, model: e.target.value })}>
            {models.map((m) => <option key={m} value={m}>{m}</option>)}
          </select>
        </label>
      )}
      <label class="field wide">
        <span>System prompt</span>
        <textarea rows={3} value={settings.system} onInput={(e) => setSettings({ ...settings, system: e.target.value })} />
      </label>
      <div class="grid">
        {field('temperature', 'Temperature', { type: 'number', step: '0.05', min: '0', max: '2', placeholder: '1' })}
        {field('top_p', 'Top-p', { type: 'number', step: '0.05', min: '0', max: '1', placeholder: '1' })}
        {field('min_p', 'Min-p', { type: 'number', step: '0.01', min: '0', max: '1', placeholder: '0' })}
        {field('max_tokens', 'Max tokens', { type: 'number', min: '1', placeholder: 'until the context is full' })}
        {field('seed', 'Seed', { type: 'number', placeholder: 'random' })}
      </div>
      <label class="field wide">
        <span>Structured output: JSON schema (empty: free text)</span>
        <textarea id="schema" rows={3} spellcheck={false} value={settings.schema} placeholder='{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}' onInput={(e) => setSettings({ ...settings, schema: e.target.value })} />
      </label>
      <label class="field wide">
        <span>Tools: OpenAI function tools as JSON (empty: none)</span>
        <textarea rows={3} spellcheck={false} value={settings.tools} placeholder='[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]' onInput={(e) => setSettings({ ...settings, tools: e.target.value })} />
      </label>
      <button type="button" class="secondary" onClick={() => setSettings({ ...DEFAULTS, model: settings.model })}>Reset settings</button>
    </details>
  );
}

export function Chat({ onAuthError }) {
  const [convs, setConvs] = useState([]);
  const [conv, setConv] = useState(newConversation());
  const [input, setInput] = useState('');
  const [attachments, setAttachments] = useState([]);
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState('');
  const [settings, setSettingsState] = useState(loadSettings);
  const [models, setModels] = useState([]);
  const [sideOpen, setSideOpen] = useState(false);
  const [runs, setRuns] = useState(0); // answers finished (data-runs: what tests wait on)
  const abort = useRef(null);
  const bottom = useRef(null);
  const convRef = useRef(conv);
  convRef.current = conv;

  const setSettings = (s) => {
    setSettingsState(s);
    localStorage.setItem(SETTINGS, JSON.stringify(s));
  };
  const refreshList = async () => setConvs(await listConversations());

  useEffect(() => {
    refreshList();
    // Reopen the conversation that was open (a reload, a new API key).
    const open = localStorage.getItem(CURRENT);
    if (open) loadConversation(open).then((c) => { if (c && !convRef.current.messages.length) setConv(c); });
    getJson('/v1/models').then((r) => {
      const ids = (r.data || []).map((m) => m.id);
      setModels(ids);
      if (ids.length && !ids.includes(settings.model)) setSettings({ ...settings, model: ids.length > 1 ? ids[0] : '' });
    }).catch((e) => {
      if (e.status === 401) onAuthError();
      else setNotice(e.message);
    });
  }, []);
  useEffect(() => {
    bottom.current?.scrollIntoView({ block: 'end' });
  }, [conv]);
  useEffect(() => {
    if (conv.messages.length) localStorage.setItem(CURRENT, conv.id);
  }, [conv.id, conv.messages.length]);

  const persist = async (c) => {
    await saveConversation(c);
    await refreshList();
  };

  // Sends `messages` (ending with the user's turn) and streams the answer into a new message.
  const run = async (base, messages) => {
    let body;
    try {
      body = requestBody(messages, settings);
    } catch (e) {
      setNotice(e.message);
      return;
    }
    setNotice('');
    const answer = { role: 'assistant', content: '', reasoning: '', tool_calls: [], stats: {} };
    let c = { ...base, messages: [...messages, answer], updated: Date.now() };
    if (c.title === 'New chat' && messages.length) c.title = messages[0].content.slice(0, 48) || 'New chat';
    setConv(c);
    await persist(c);
    const controller = new AbortController();
    abort.current = controller;
    setBusy(true);
    const t0 = performance.now();
    let tFirst;
    const update = () => {
      const m = { ...answer, stats: { ...answer.stats } };
      if (answer.tool_calls) m.tool_calls = [...answer.tool_calls];
      c = { ...c, messages: [...messages, m] };
      setConv(c);
    };
    try {
      await streamChat(body, {
        signal: controller.signal,
        onChunk(chunk) {
          if (chunk.usage) answer.stats.tokens = chunk.usage.completion_tokens;
          for (const ch of chunk.choices || []) {
            const d = ch.delta || {};
            const piece = (d.content || '') + (d.reasoning_content || '');
            if (piece && tFirst === undefined) {
              tFirst = performance.now();
              answer.stats.ttft_ms = tFirst - t0;
            }
            if (d.content) answer.content += d.content;
            if (d.reasoning_content) answer.reasoning += d.reasoning_content;
            for (const tc of d.tool_calls || []) {
              const at = tc.index ?? answer.tool_calls.length;
              const cur = answer.tool_calls[at] || { id: '', type: 'function', function: { name: '', arguments: '' } };
              answer.tool_calls[at] = {
                ...cur,
                id: tc.id || cur.id,
                function: { name: cur.function.name + (tc.function?.name || ''), arguments: cur.function.arguments + (tc.function?.arguments || '') },
              };
            }
            if (ch.finish_reason) answer.finish_reason = ch.finish_reason;
          }
          update();
        },
      });
    } catch (e) {
      if (e.name === 'AbortError') answer.finish_reason = 'stopped';
      else {
        answer.error = e.message;
        if (e instanceof ApiError && e.status === 401) onAuthError();
      }
    }
    const tEnd = performance.now();
    if (answer.stats.tokens !== undefined && tFirst !== undefined && tEnd > tFirst && answer.stats.tokens > 1)
      answer.stats.tps = (answer.stats.tokens - 1) / ((tEnd - tFirst) / 1000);
    if (!answer.tool_calls.length) delete answer.tool_calls;
    update();
    abort.current = null;
    try {
      await persist({ ...c, updated: Date.now() });
    } catch (e) {
      setNotice(`cannot save the conversation in this browser: ${e.message}`);
    }
    setBusy(false);
    setRuns((n) => n + 1);
  };

  const send = async () => {
    if (busy) return;
    let text = input;
    for (const a of attachments) text += `${text ? '\n\n' : ''}\`\`\`${a.name}\n${a.text}\n\`\`\``;
    if (!text.trim()) return;
    setInput('');
    setAttachments([]);
    await run(convRef.current, [...convRef.current.messages, { role: 'user', content: text }]);
  };
  const stop = () => abort.current?.abort();
  const regenerate = () => {
    const msgs = convRef.current.messages;
    const at = msgs.length && msgs[msgs.length - 1].role === 'assistant' ? msgs.length - 1 : msgs.length;
    run(convRef.current, msgs.slice(0, at));
  };
  const edit = (index, text) => run(convRef.current, [...convRef.current.messages.slice(0, index), { role: 'user', content: text }]);

  const open = async (id) => {
    if (busy) return;
    const c = await loadConversation(id);
    if (c) setConv(c);
    setSideOpen(false);
  };
  const rename = async (c) => {
    const title = prompt('New name for the conversation', c.title);
    if (title === null || !title.trim()) return;
    const updated = { ...(await loadConversation(c.id)), title: title.trim() };
    await persist(updated);
    if (conv.id === c.id) setConv(updated);
  };
  const remove = async (c) => {
    if (!confirm(`Delete "${c.title}"?`)) return;
    await deleteConversation(c.id);
    await refreshList();
    if (conv.id === c.id) setConv(newConversation());
  };
  const doExport = async () => {
    const blob = new Blob([JSON.stringify(await exportAll(), null, 2)], { type: 'application/json' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = 'sluice-conversations.json';
    a.click();
    URL.revokeObjectURL(a.href);
  };
  const doImport = async (e) => {
    const f = e.target.files[0];
    e.target.value = '';
    if (!f) return;
    try {
      const n = await importAll(JSON.parse(await f.text()));
      setNotice(`imported ${n} conversation${n === 1 ? '' : 's'}`);
      await refreshList();
    } catch (err) {
      setNotice(`cannot import ${f.name}: ${err.message}`);
    }
  };
  const attach = async (e) => {
    const files = [...e.target.files];
    e.target.value = '';
    const read = [];
    for (const f of files) {
      if (f.size > 1 << 20) {
        setNotice(`${f.name} is over 1 MiB; attach text files only`);
        continue;
      }
      read.push({ name: f.name, text: await f.text() });
    }
    setAttachments([...attachments, ...read]);
  };
  const onKeyDown = (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  };
  const onMessagesClick = (e) => {
    const b = e.target.closest && e.target.closest('button.copy');
    if (!b) return;
    copyText(b.closest('.code').querySelector('code').innerText);
    b.textContent = 'Copied';
    setTimeout(() => { b.textContent = 'Copy'; }, 1200);
  };

  return (
    <div class={`chat ${sideOpen ? 'side-open' : ''}`}>
      <nav class="sidebar" aria-label="Conversations">
        <div class="row">
          <button type="button" class="primary grow" onClick={() => { if (!busy) { setConv(newConversation()); setSideOpen(false); } }}>New chat</button>
          <button type="button" class="secondary side-close" aria-label="Close the conversation list" onClick={() => setSideOpen(false)}>✕</button>
        </div>
        <ul class="conv-list">
          {convs.map((c) => (
            <li key={c.id} class={c.id === conv.id ? 'current' : ''}>
              <button type="button" class="conv-open" aria-current={c.id === conv.id ? 'page' : undefined} onClick={() => open(c.id)}>{c.title}</button>
              <button type="button" class="icon" aria-label={`Rename ${c.title}`} title="Rename" onClick={() => rename(c)}>✎</button>
              <button type="button" class="icon" aria-label={`Delete ${c.title}`} title="Delete" onClick={() => remove(c)}>✕</button>
            </li>
          ))}
        </ul>
        <div class="row">
          <button type="button" class="secondary" onClick={doExport}>Export</button>
          <label class="button secondary">Import<input type="file" accept="application/json,.json" class="sr-only" onChange={doImport} /></label>
        </div>
      </nav>
      <main class="conversation" aria-label="Chat" data-runs={runs}>
        <div class="conv-head">
          <button type="button" class="secondary side-toggle" aria-expanded={sideOpen ? 'true' : 'false'} onClick={() => setSideOpen(!sideOpen)}>Chats</button>
          <h1 class="conv-title">{conv.title}</h1>
        </div>
        <Settings settings={settings} setSettings={setSettings} models={models} />
        <div class="messages" aria-live="polite" onClick={onMessagesClick}>
          {conv.messages.length === 0 && <p class="empty">Ask anything. Enter sends, Shift+Enter starts a new line.</p>}
          {conv.messages.map((m, i) => (
            <Message key={i} m={m} index={i} last={i === conv.messages.length - 1} busy={busy} onEdit={edit} onRegenerate={regenerate} />
          ))}
          <div ref={bottom} />
        </div>
        {notice && <p class="notice" role="status">{notice}</p>}
        <form class="composer" onSubmit={(e) => { e.preventDefault(); send(); }}>
          {attachments.length > 0 && (
            <ul class="attachments" aria-label="Attached files">
              {attachments.map((a, i) => (
                <li key={i}>{a.name} <button type="button" class="icon" aria-label={`Remove ${a.name}`} onClick={() => setAttachments(attachments.filter((_, j) => j !== i))}>✕</button></li>
              ))}
            </ul>
          )}
          <label class="sr-only" for="prompt">Message</label>
          <textarea id="prompt" rows={3} value={input} placeholder="Message (Enter sends, Shift+Enter: new line)" onInput={(e) => setInput(e.target.value)} onKeyDown={onKeyDown} />
          <div class="row">
            <label class="button secondary">Attach text file<input type="file" multiple class="sr-only" onChange={attach} /></label>
            <span class="spacer" />
            {busy
              ? <button type="button" class="danger" onClick={stop}>Stop</button>
              : <button type="submit" class="primary">Send</button>}
          </div>
        </form>
      </main>
    </div>
  );
}
