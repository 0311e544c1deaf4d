// Talking to `lumen-ex serve` (src/lumen_ex/playground/app.py). Every request is same-origin: the
// token travels in the HttpOnly cookie the first page load set, and the browser adds the Origin
// header the server requires on every request that changes something.

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `the server answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function call(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin", cache: "no-store" };
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
  events: (id) => new EventSource(`/api/checks/${encodeURIComponent(id)}/events`),
};
