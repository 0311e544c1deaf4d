// The result panel: a view of the result record, made by the server (src/lumen_ex/feedback/web.py)
// and drawn here. Every piece of text goes in through textContent, never as HTML, so what a learner's
// code printed (a <script> tag included) stays text. Pictures are data: URLs of PNGs the server has
// checked and re-encoded.

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function shapeTable(item) {
  const table = el("table", { class: "shape" });
  table.append(el("caption", { text: "shape: expected over yours (^ where they differ)" }));
  for (const row of item.rows) {
    const tr = el("tr", { class: row.label === "yours" || row.part === "yours" ? "yours" : "expected" });
    tr.append(el("th", { scope: "row", text: row.label }));
    for (const cell of row.cells) tr.append(el("td", { class: cell.bad ? "bad" : "", text: cell.text }));
    table.append(tr);
  }
  return table;
}

// Two texts one above the other (a model's text under the reference's), the first difference marked.
function texts(item) {
  const figure = el("figure", { class: "texts" });
  figure.append(el("pre", { class: "prompt" }, el("span", { class: "label", text: "prompt".padEnd(9) }),
                   document.createTextNode(item.prompt)));
  for (const row of item.rows) {
    for (const [label, part] of [["yours", row.yours], ["expected", row.expected]]) {
      const pre = el("pre", { class: label }, el("span", { class: "label", text: label.padEnd(9) }));
      if (Number.isInteger(row.marked)) {
        pre.append(document.createTextNode(part.slice(0, row.marked)),
                   el("mark", { text: part.slice(row.marked, row.marked + 1) || " " }),
                   document.createTextNode(part.slice(row.marked + 1)));
      } else {
        pre.append(document.createTextNode(part));
      }
      figure.append(pre);
    }
  }
  figure.append(el("figcaption", { text: item.caption }));
  return figure;
}

function line(item) {
  switch (item.kind) {
    case "shape":
      return shapeTable(item);
    case "texts":
      return texts(item);
    case "picture": {
      const figure = el("figure", { class: "picture" });
      const caption = el("figcaption", { text: item.caption });
      if (item.legend) caption.append(el("span", { class: "legend", text: item.legend }));
      figure.append(el("img", { src: item.src, alt: `${item.caption}. ${item.legend || ""}` }), caption);
      return figure;
    }
    case "code":
      return el("pre", { class: "code" }, el("code", { text: item.text }));
    default: {
      const p = el("p", { class: `line ${item.kind}` });
      if (item.label) p.append(el("strong", { text: `${item.label}: ` }));
      p.append(document.createTextNode(item.text));
      return p;
    }
  }
}

function printed(output, summaryText) {
  const details = el("details", { class: "printed" });
  details.append(el("summary", { text: summaryText }), el("pre", { text: output }));
  return details;
}

export function showProgress(region, progress) {
  region.dataset.state = "running";
  let box = region.querySelector(".progress");
  if (!box) {
    region.replaceChildren();
    box = el("div", { class: "progress" });
    box.append(el("progress", { max: "1", value: "0", "aria-label": "tests run" }), el("p", { class: "now" }),
               el("p", { class: "early-failure", role: "status" }));
    region.append(box);
  }
  const bar = box.querySelector("progress");
  bar.max = Math.max(progress.total || 1, 1);
  bar.value = progress.done || 0;
  box.querySelector(".now").textContent =
    progress.total ? `${progress.done} of ${progress.total} tests run${progress.name ? ` · last: ${progress.name}` : ""}`
                   : "starting the check…";
  // The first test that failed, as soon as it is known; the result that follows explains it.
  box.querySelector(".early-failure").textContent =
    progress.first_failed ? `✗ failing so far: ${progress.first_failed} (${progress.failed} failed; the rest follows)` : "";
}

// The region says what it shows (data-state: running, result, message) and how many checks have
// ended (data-ended), for tests and for styles.
function ended(region, state) {
  region.dataset.state = state;
  region.dataset.ended = String(Number(region.dataset.ended || 0) + 1);
}

export function showMessage(region, text, kind = "info", { ends = false } = {}) {
  region.replaceChildren(el("p", { class: `message ${kind}`, text }));
  if (ends) ended(region, "message");
  else region.dataset.state = "message";
}

export function showResult(region, view) {
  const out = [];
  const head = el("div", { class: `headline ${view.status}` });
  head.append(el("h2", { text: view.headline }), el("p", { class: "summary", text: view.summary }));
  out.push(head);
  if (!view.sandbox.isolated) {
    out.push(el("p", { class: "warning", role: "note", text: view.sandbox.note || "NOT ISOLATED: this check ran without a sandbox." }));
  }
  for (const warning of view.warnings || []) out.push(el("p", { class: "warning", text: warning }));
  if (view.first) {
    const box = el("section", { class: `first ${view.first.status}`, "aria-label": "first failure" });
    box.append(el("h3", { text: view.first.title }));
    // The words first (what is wrong, the named mistake, what to try), then the picture: on a laptop
    // screen all of it shows without scrolling.
    const pictures = view.first.lines.filter((item) => item.kind === "picture");
    for (const item of view.first.lines) if (item.kind !== "picture") box.append(line(item));
    for (const item of pictures) box.append(line(item));
    if (view.first.output) box.append(printed(view.first.output, "your code printed"));
    out.push(box);
  }
  out.push(el("p", { class: "identity", text: view.identity }));   // after the failure: it stays in view
  const table = el("table", { class: "tests" });
  table.append(el("caption", { text: "every test" }));
  const header = el("tr");
  for (const name of ["", "test", "score", "why"]) header.append(el("th", { scope: "col", text: name }));
  table.append(el("thead", {}, header));
  const body = el("tbody");
  for (const test of view.tests) {
    const tr = el("tr", { class: test.status });
    tr.append(el("td", { class: "mark", text: test.mark, title: test.status }));
    const name = el("td");
    name.append(el("span", { class: "group", text: `${test.group} ` }), document.createTextNode(test.name));
    if (test.output) name.append(printed(test.output, "printed"));
    tr.append(name, el("td", { class: "score", text: test.score }), el("td", { class: "why", text: test.why }));
    body.append(tr);
  }
  table.append(body);
  out.push(table);
  out.push(el("p", { class: "next", text: view.next }));
  region.replaceChildren(...out);
  ended(region, "result");
}
