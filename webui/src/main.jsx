// The sluice web app: a chat and a live dashboard, served by `sluice serve` and `sluice router`
// at / from assets compiled into the binary (no network beyond the server itself).
import 'katex/dist/katex.min.css';
import 'uplot/dist/uPlot.min.css';
import './style.css';

import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

import { apiKey, setApiKey } from './api.js';
import { Chat } from './chat.jsx';
import { Dashboard } from './dashboard.jsx';

function KeyDialog({ onDone, onCancel }) {
  const [key, setKey] = useState(apiKey());
  const input = useRef(null);
  useEffect(() => input.current?.focus(), []);
  return (
    <div class="modal-backdrop">
      <form class="modal" role="dialog" aria-modal="true" aria-labelledby="key-title"
        onSubmit={(e) => { e.preventDefault(); setApiKey(key.trim()); onDone(); }}
        onKeyDown={(e) => { if (e.key === 'Escape') onCancel(); }}>
        <h2 id="key-title">API key</h2>
        <p>This server was started with <code>--api-key</code>. The key is kept in this browser only.</p>
        <label class="field wide">
          <span>Key</span>
          <input id="api-key" ref={input} type="password" autocomplete="off" value={key} onInput={(e) => setKey(e.target.value)} />
        </label>
        <div class="row">
          <button type="submit" class="primary">Save</button>
          <button type="button" class="secondary" onClick={onCancel}>Cancel</button>
        </div>
      </form>
    </div>
  );
}

function App() {
  const [view, setView] = useState(location.hash === '#/dashboard' ? 'dashboard' : 'chat');
  const [askKey, setAskKey] = useState(false);
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    const onHash = () => setView(location.hash === '#/dashboard' ? 'dashboard' : 'chat');
    window.addEventListener('hashchange', onHash);
    return () => window.removeEventListener('hashchange', onHash);
  }, []);
  useEffect(() => {
    // Time from navigation start to the first render, for the browser test's report.
    window.sluiceFirstRenderMs = performance.now();
  }, []);
  return (
    <>
      <a class="skip" href="#prompt">Skip to the message box</a>
      <header class="top">
        <span class="brand">sluice</span>
        <nav aria-label="Views">
          <a href="#/chat" aria-current={view === 'chat' ? 'page' : undefined}>Chat</a>
          <a href="#/dashboard" aria-current={view === 'dashboard' ? 'page' : undefined}>Dashboard</a>
        </nav>
        <button type="button" class="secondary" onClick={() => setAskKey(true)}>API key</button>
      </header>
      {view === 'chat' ? <Chat key={generation} onAuthError={() => setAskKey(true)} /> : <Dashboard />}
      {askKey && <KeyDialog onDone={() => { setAskKey(false); setGeneration(generation + 1); }} onCancel={() => setAskKey(false)} />}
    </>
  );
}

const root = document.getElementById('app');
root.textContent = ''; // the "Loading" line
render(<App />, root);
