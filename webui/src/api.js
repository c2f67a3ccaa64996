// The server's HTTP API as the app uses it: the API key, JSON calls, and the SSE stream of a
// chat completion. Errors are thrown as ApiError with the server's own message.

const KEY = 'sluice.apiKey';

export function apiKey() {
  return localStorage.getItem(KEY) || '';
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// The message of an error answer: OpenAI's {"error": {"message"}}, else the status line.
async function errorOf(res) {
  let text = '';
  try {
    text = await res.text();
    const body = JSON.parse(text);
    if (body && body.error) return new ApiError(body.error.message || String(body.error), res.status);
  } catch {
    // not JSON: fall through
  }
  return new ApiError(`${res.status} ${res.statusText}${text ? `: ${text.slice(0, 300)}` : ''}`, res.status);
}

export async function getJson(path) {
  let res;
  try {
    res = await fetch(path, { headers: headers() });
  } catch (e) {
    throw new ApiError(`cannot reach the server (${e.message})`);
  }
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

export async function getText(path) {
  const res = await fetch(path, { headers: headers(), cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return res.text();
}

// Streams POST /v1/chat/completions. `onChunk(chunk)` gets every parsed chunk; resolves when
// [DONE] arrives. Throws ApiError on an error status, an error event, or a stream that ends
// without [DONE] (the server went away). An abort through `signal` rejects with AbortError.
export async function streamChat(body, { signal, onChunk }) {
  let res;
  try {
    res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers({ 'Content-Type': 'application/json' }),
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
      signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(`cannot reach the server (${e.message})`);
  }
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    let r;
    try {
      r = await reader.read();
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(`the connection broke mid-answer (${e.message})`);
    }
    if (r.done) break;
    buf += decoder.decode(r.value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(chunk.error.message || 'the generation failed');
        onChunk(chunk);
      }
    }
  }
  throw new ApiError('the server closed the stream before the answer was complete');
}
