// Talking to `lumen-ex serve` (src/lumen_ex/playground/app.py). Every request is same-origin and
// carries the token in an `Authorization: token ...` header, the event stream included (read with
// fetch, since an EventSource cannot send a header); the browser adds the Origin header the server
// requires on every request that changes something. The token comes in the printed link's fragment
// (`/#token=...`, never sent to a server) and is kept in sessionStorage: this origin's (scheme, host
// and port) and this tab's alone, so no page of another local port can read it or spoil it
// (src/lumen_ex/playground/security.py).

const TOKEN_KEY = "lumen-ex-token";

// Take the token out of the fragment (keeping the rest: `#token=...&attention` opens attention) and
// out of the address bar and the history.
export function takeToken() {
  const parts = location.hash.replace(/^#/, "").split("&").filter(Boolean);
  const found = parts.find((p) => p.startsWith("token="));
  if (found) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(found.slice(6)));
    const rest = parts.filter((p) => p !== found).join("&");
    history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function authorised(headers = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { ...headers, Authorization: `token ${token}` } : headers;
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `the server answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function call(method, path, body) {
  const init = { method, headers: authorised(), credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try {
    data = await response.json();
  } catch (e) {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const api = {
  state: () => call("GET", "/api/state"),
  exercise: (slug) => call("GET", `/api/exercises/${encodeURIComponent(slug)}`),
  file: (slug) => call("GET", `/api/exercises/${encodeURIComponent(slug)}/file`),
  save: (slug, text, base, force = false) =>
    call("PUT", `/api/exercises/${encodeURIComponent(slug)}/file`, { text, base, force }),
  check: (slug, text, base) => call("POST", `/api/exercises/${encodeURIComponent(slug)}/check`, { text, base }),
  cancel: (id) => call("POST", `/api/checks/${encodeURIComponent(id)}/cancel`, {}),
  hint: (slug) => call("POST", `/api/exercises/${encodeURIComponent(slug)}/hint`, {}),
  restore: (slug) => call("POST", `/api/exercises/${encodeURIComponent(slug)}/restore`, {}),
  open: (slug) => call("POST", `/api/exercises/${encodeURIComponent(slug)}/open`, {}),
  events: (id) => new EventStream(`/api/checks/${encodeURIComponent(id)}/events`),
};

// Server-sent events read with fetch (so that the token travels in a header): the part of
// EventSource the page uses. readyState: 0 connecting, 1 open, 2 closed.
export class EventStream {
  static CLOSED = 2;

  constructor(url) {
    this.readyState = 0;
    this.onerror = null;
    this.listeners = {};
    this.controller = new AbortController();
    this.run(url).catch(() => this.fail());
  }

  addEventListener(name, handler) {
    (this.listeners[name] = this.listeners[name] || []).push(handler);
  }

  close() {
    this.readyState = EventStream.CLOSED;
    this.controller.abort();
  }

  fail() {
    if (this.readyState === EventStream.CLOSED) return;
    this.readyState = EventStream.CLOSED;
    if (this.onerror) this.onerror(new Event("error"));
  }

  async run(url) {
    const response = await fetch(url, { headers: authorised({ Accept: "text/event-stream" }), credentials: "omit",
                                        cache: "no-store", signal: this.controller.signal });
    if (!response.ok || !response.body) throw new ApiError(response.status, null);
    this.readyState = 1;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = pending.indexOf("\n\n")) >= 0) {
        this.dispatch(pending.slice(0, cut));
        pending = pending.slice(cut + 2);
      }
    }
    this.fail();   // the stream ended: as EventSource, an error unless the page closed it first
  }

  dispatch(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (!data.length) return;      // a comment (": still checking")
    const event = { type: name, data: data.join("\n") };
    for (const handler of this.listeners[name] || []) handler(event);
  }
}
