// Conversations in the browser's IndexedDB (database "sluice-webui", store "conversations"),
// one record per conversation: {id, title, created, updated, messages: [...]}.
import { createStore, del, get, set, values } from 'idb-keyval';

const db = createStore('sluice-webui', 'conversations');

export async function listConversations() {
  const all = await values(db);
  return all.sort((a, b) => b.updated - a.updated);
}

export const loadConversation = (id) => get(id, db);
export const saveConversation = (c) => set(c.id, c, db);
export const deleteConversation = (id) => del(id, db);

export function newConversation() {
  const now = Date.now();
  const id = `c${now.toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  return { id, title: 'New chat', created: now, updated: now, messages: [] };
}

// Export: {"sluice_conversations": 1, "conversations": [...]}; import takes the same (or a
// bare list) and keeps the ids, so importing twice overwrites rather than duplicates.
export async function exportAll() {
  return { sluice_conversations: 1, conversations: await listConversations() };
}

export async function importAll(json) {
  const list = Array.isArray(json) ? json : json && json.conversations;
  if (!Array.isArray(list)) throw new Error('not a sluice conversations file (no "conversations" list)');
  let n = 0;
  for (const c of list) {
    if (!c || typeof c.id !== 'string' || !Array.isArray(c.messages)) continue;
    await saveConversation({ title: 'Imported chat', created: Date.now(), updated: Date.now(), ...c });
    ++n;
  }
  return n;
}
