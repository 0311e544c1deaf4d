// The playground page: the exercise list, the README beside the editor, and the result panel.
// The editor's text is the workspace file: saved as you type (debounced) and before every check; a
// change made on disk by another editor is offered for reload, never silently overwritten.
import { ApiError, EventStream, api, takeToken } from "./api.js";
import { makeEditor } from "./editor.js";
import { showMessage, showProgress, showResult } from "./result.js";

const SAVE_DELAY_MS = 400;   // quiet time after the last keystroke before the file is saved
const POLL_MS = 1500;        // how often the file on disk is compared with what the page last saved

const $ = (id) => document.getElementById(id);
const nonce = document.querySelector('meta[name="csp-nonce"]')?.content || "";

const state = {
  exercises: [],
  slug: null,
  base: null,          // digest of the file as the page last loaded or saved it
  dirty: false,        // edits not saved yet
  saving: null,        // the save in flight (a Promise)
  conflict: null,      // {text, digest}: the file changed on disk under us
  check: null,         // {id, source}: the check running
  starting: false,     // a check request in flight
};

const editor = makeEditor($("editor"), { onChange: edited, nonce });

// Ctrl+Enter (or Cmd+Enter) checks, wherever the focus is: caught before the editor sees it, so it
// never also inserts a line break.
document.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !e.altKey && !e.shiftKey) {
    e.preventDefault();
    e.stopPropagation();
    runCheck();
  }
}, { capture: true });

function setSaveState(text) {
  $("save-state").textContent = text;
}

// -- the exercise list ------------------------------------------------------------------------------

function progressText(ex) {
  if (ex.status === "pass") return `passed · ${ex.best_score}/${ex.max_score}`;
  if (ex.status === "not checked") return "not checked yet";
  return `best ${ex.best_score}/${ex.max_score}`;
}

function drawList() {
  const list = $("exercises");
  list.replaceChildren();
  for (const ex of state.exercises) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = `exercise ${ex.status.replace(" ", "-")}`;
    if (ex.slug === state.slug) button.setAttribute("aria-current", "page");
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = `${ex.number}. ${ex.title}`;
    const progress = document.createElement("span");
    progress.className = "progress-text";
    progress.textContent = progressText(ex);
    button.append(title, progress);
    button.addEventListener("click", () => openExercise(ex.slug));
    item.append(button);
    list.append(item);
  }
}

async function refreshList() {
  const data = await api.state();
  state.exercises = data.exercises;
  drawList();
  return data;
}

// -- one exercise -------------------------------------------------------------------------------------

async function openExercise(slug) {
  if (state.check) return;
  if (state.dirty) await save();
  let data;
  try {
    data = await api.exercise(slug);
  } catch (e) {
    showMessage($("result"), `Could not open that exercise: ${e.message}`, "error");
    return;
  }
  state.slug = slug;
  state.base = data.digest;
  state.dirty = false;
  api.open(slug).catch(() => {});   // a POST makes its worker ready: no GET ever starts work
  hideConflict();
  $("readme").innerHTML = data.readme_html;   // rendered by the server with raw HTML escaped (playground/readme.py)
  $("file-name").textContent = data.path;
  $("hints").replaceChildren();
  editor.setText(data.text);
  showMessage($("result"), "Press Check (or Ctrl+Enter) to run the hidden tests.");
  setSaveState("saved");
  history.replaceState(null, "", `#${slug}`);
  drawList();
}

// -- saving -----------------------------------------------------------------------------------------------

let saveTimer = null;

function edited() {
  state.dirty = true;
  setSaveState("editing…");
  clearTimeout(saveTimer);
  saveTimer = setTimeout(() => save(), SAVE_DELAY_MS);
}

async function save({ force = false } = {}) {
  clearTimeout(saveTimer);
  if (state.saving) await state.saving;
  if (!state.dirty && !force) return true;
  if (state.conflict && !force) return false;   // the learner decides first
  const text = editor.text();
  state.dirty = false;
  state.saving = (async () => {
    try {
      const reply = await api.save(state.slug, text, state.base, force);
      state.base = reply.digest;
      if (editor.text() !== text) state.dirty = true;
      setSaveState(state.dirty ? "editing…" : "saved");
      return true;
    } catch (e) {
      state.dirty = true;
      if (e instanceof ApiError && e.status === 409 && e.body && e.body.conflict) {
        showConflict(e.body.conflict);
        return false;
      }
      setSaveState(`not saved: ${e.message}`);
      return false;
    } finally {
      state.saving = null;
    }
  })();
  return state.saving;
}

function showConflict(conflict) {
  state.conflict = conflict;
  $("conflict").hidden = false;
  setSaveState("not saved: the file changed on disk");
}

function hideConflict() {
  state.conflict = null;
  $("conflict").hidden = true;
}

$("reload").addEventListener("click", () => {
  const { text, digest } = state.conflict;
  editor.setText(text);
  state.base = digest;
  state.dirty = false;
  hideConflict();
  setSaveState("reloaded from disk");
});

$("keep").addEventListener("click", async () => {
  state.base = state.conflict.digest;   // overwrite what is on disk now, knowingly
  hideConflict();
  state.dirty = true;
  await save({ force: true });
});

async function poll() {
  if (state.slug && !state.dirty && !state.saving && !state.conflict && !state.check) {
    try {
      const disk = await api.file(state.slug);
      if (disk.digest !== state.base && !state.dirty && !state.saving) showConflict(disk);
    } catch (e) {
      /* the next poll tries again */
    }
  }
  setTimeout(poll, POLL_MS);
}

// -- checking -------------------------------------------------------------------------------------------

async function runCheck() {
  if (state.check || state.starting || !state.slug) return;
  if (state.conflict) {
    showMessage($("result"), "The file changed on disk: reload it or keep yours before checking.", "error", { ends: true });
    return;
  }
  clearTimeout(saveTimer);
  state.starting = true;
  let started;
  const text = editor.text();
  try {
    if (state.saving) await state.saving;
    started = await api.check(state.slug, text, state.base);   // saves the text, then checks the file
  } catch (e) {
    if (e instanceof ApiError && e.status === 409 && e.body && e.body.conflict) {
      showConflict(e.body.conflict);
      showMessage($("result"), "The file changed on disk: reload it or keep yours before checking.", "error", { ends: true });
      return;
    }
    showMessage($("result"), `The check did not start: ${e.message}`, "error", { ends: true });
    return;
  } finally {
    state.starting = false;
  }
  state.base = started.digest;
  state.dirty = editor.text() !== text;
  setSaveState(state.dirty ? "editing…" : "saved");
  follow(started.check, text);
}

function setChecking(on) {
  $("check").disabled = on;
  $("cancel").hidden = !on;
  $("result").setAttribute("aria-busy", on ? "true" : "false");
}

function follow(id, checked = null) {
  const source = api.events(id);
  state.check = { id, source };
  setChecking(true);
  showProgress($("result"), { done: 0, total: 0 });
  const end = () => {
    source.close();
    state.check = null;
    setChecking(false);
  };
  source.addEventListener("progress", (e) => showProgress($("result"), JSON.parse(e.data)));
  source.addEventListener("result", (e) => {
    end();
    const view = JSON.parse(e.data).view;
    showResult($("result"), view);
    // The first failure's line, in the editor's gutter, while the editor still holds the checked text.
    editor.markLine(view.first && editor.text() === checked ? view.first.line : null);
    refreshList().catch(() => {});
  });
  source.addEventListener("cancelled", () => {
    end();
    showMessage($("result"), "Check cancelled.", "info", { ends: true });
  });
  source.addEventListener("failed", (e) => {
    end();
    showMessage($("result"), JSON.parse(e.data).message, "error", { ends: true });
  });
  source.onerror = () => {
    if (source.readyState === EventStream.CLOSED && state.check && state.check.id === id) {
      end();
      showMessage($("result"), "Lost the connection to lumen-ex serve.", "error", { ends: true });
    }
  };
}

$("check").addEventListener("click", runCheck);
$("cancel").addEventListener("click", () => {
  if (state.check) api.cancel(state.check.id).catch(() => {});
});

// -- hints and the stub -----------------------------------------------------------------------------------

$("hint").addEventListener("click", async () => {
  const hint = await api.hint(state.slug);
  const p = document.createElement("p");
  p.className = "hint";
  const why = hint.because ? ` (for your last check's first failure: ${hint.because})` : "";
  p.textContent = `Hint ${hint.number} of ${hint.total}${why}: ${hint.text}`;
  $("hints").append(p);
});

$("restore").addEventListener("click", () => $("confirm-restore").showModal());
$("confirm-restore").addEventListener("close", async () => {
  if ($("confirm-restore").returnValue !== "restore") return;
  const reply = await api.restore(state.slug);
  editor.setText(reply.text);
  state.base = reply.digest;
  state.dirty = false;
  hideConflict();
  setSaveState("stub restored");
});

// -- start ------------------------------------------------------------------------------------------------

async function start() {
  if (!takeToken()) {
    showMessage($("result"), "Open the link that `lumen-ex serve` printed: it carries this page's key.", "error");
    return;
  }
  const data = await refreshList();
  const label = $("sandbox-label");
  label.textContent = data.sandbox.isolated
    ? `sandbox: ${data.sandbox.name}`
    : data.sandbox.note || "NOT ISOLATED: your code runs with your permissions";
  label.className = data.sandbox.isolated ? "isolated" : "not-isolated";
  const wanted = decodeURIComponent(location.hash.slice(1).split("&")[0]);
  const first = state.exercises.find((ex) => ex.slug === wanted)
    || state.exercises.find((ex) => ex.status !== "pass") || state.exercises[0];
  if (first) await openExercise(first.slug);
  setTimeout(poll, POLL_MS);
  document.body.dataset.ready = "true";   // for tests and for styles: the page has its exercise
}

start().catch((e) => showMessage($("result"), `The page could not start: ${e.message}`, "error"));
