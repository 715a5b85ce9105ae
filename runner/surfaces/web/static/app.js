// runner serve: the few things the pages do in the browser. Plain JS, no build step.
"use strict";

const page = document.getElementById("run-page");

function flash(text, isError) {
  const el = document.getElementById("flash");
  el.textContent = text;
  el.className = isError ? "error" : "ok";
  el.hidden = false;
}

async function post(url, body) {
  const res = await fetch(url, {
    method: "POST",
    // the HttpOnly session cookie authenticates; the browser adds Origin
    credentials: "same-origin",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body),
  });
  let doc = {};
  try { doc = await res.json(); } catch (e) { doc = {}; }
  if (!res.ok) {
    const err = doc.error || {message: res.statusText};
    flash("error: " + err.message + (err.hint ? "  (hint: " + err.hint + ")" : ""), true);
    throw new Error(err.message);
  }
  return doc;
}

function showPicks(iterations) {
  for (const it of iterations) {
    const tile = document.getElementById("tile-" + it.ordinal);
    if (tile) tile.classList.toggle("picked", !!it.picked);
  }
}

async function refreshPicks(runId) {
  const res = await fetch("/api/runs/" + encodeURIComponent(runId));
  if (res.ok) showPicks((await res.json()).iterations);
}

function parseInput(text) {
  text = text.trim();
  if (!text) return {};
  if (text.startsWith("{")) return JSON.parse(text);
  const out = {};
  for (const line of text.split("\n")) {
    const i = line.indexOf("=");
    if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1);
  }
  return out;
}

const STEP_STATUS = {
  StepStarted: "running", StepRetrying: "retrying", StepPassed: "completed",
  StepFailed: "failed", GateAwaiting: "awaiting_human", StepWaiting: "queued",
};

function copyable(value) {
  const box = el("div", "copyable");
  const btn = el("button", "copy", "copy");
  btn.type = "button";
  box.append(btn, el("pre", null, asText(value)));
  return box;
}

// A status as a person reads it, as the server's status_words (service.py) says it.
const STATUS_WORDS = {awaiting_human: "waiting for review", awaiting_batch: "waiting for a batch"};

function statusWords(status) {
  return STATUS_WORDS[status] || status.replace(/_/g, " ");
}

function showRunStatus(status) {
  const st = document.getElementById("run-status");
  st.textContent = statusWords(status);
  st.title = status;
  st.className = "status status-" + status;
}

function setStatus(cell, status) {
  const [word, ...rest] = status.split(" ");
  const text = [statusWords(word), ...rest].join(" ");
  cell.replaceChildren(el("span", "status status-" + word, text));
}

const elementsDone = new Map();  // step -> elements finished while we watched

function applyEvent(ev) {
  if (ev.type === "RunFinished" && ev.status) {
    showRunStatus(ev.status);
    return;
  }
  if (!ev.step) return;
  let status = STEP_STATUS[ev.type];
  if (ev.type === "StepSkipped") status = ev.reason === "cached" ? "cached" : "skipped";
  if (ev.type === "ForEachEnded") status = ev.status === "ran" ? "completed" : ev.status;
  if (!status) return;
  markNode(ev.step, status);
  const row = document.querySelector('tr[data-step="' + CSS.escape(ev.step) + '"]');
  if (!row) return;
  const isElement = ev.element !== null && ev.element !== undefined;
  if (isElement && !["StepStarted", "StepRetrying", "StepWaiting"].includes(ev.type)) {
    const done = (elementsDone.get(ev.step) || 0) + 1;
    elementsDone.set(ev.step, done);
    const total = row.dataset.elements;
    let count = row.querySelector(".el-count");
    if (!count) { count = el("small", "el-count"); row.cells[0].append(" ", count); }
    count.textContent = done + (total ? " of " + total : "") + " elements";
    if (browsing === ev.step) reloadBrowser();
  }
  setStatus(row.querySelector(".st"), isElement ? status + " [" + ev.element + "]" : status);
  if (ev.attempt) row.querySelector(".attempts").textContent = ev.attempt;
  if (ev.attempts) row.querySelector(".attempts").textContent = ev.attempts;
  if (typeof ev.duration_s === "number") row.querySelector(".duration").textContent = ev.duration_s.toFixed(2) + "s";
  if (ev.reason) row.querySelector(".why").textContent = ev.reason;
  if (ev.where) row.querySelector(".why").textContent = ev.where;
}

function follow(runId, after, wasRunning) {
  const live = document.getElementById("live");
  const count = document.getElementById("live-count");
  let n = 0;
  const es = new EventSource("/api/runs/" + encodeURIComponent(runId) + "/events?stream=1&after=" + after);
  es.onmessage = (msg) => {
    live.hidden = false;
    count.textContent = String(++n);
    applyEvent(JSON.parse(msg.data));
  };
  es.addEventListener("end", (msg) => {
    es.close();
    const doc = JSON.parse(msg.data);
    showRunStatus(doc.status);
    // A run that finished while we watched: reload for its iterations, outputs and gates.
    if (wasRunning || n > 0) window.location.reload();
  });
}

// -- live tiles: each image appears as its provider call completes ----------------------------

function followTiles(runId) {
  const section = document.getElementById("iterations");
  const grid = document.getElementById("live-grid");
  const progress = document.getElementById("tile-progress");
  if (!section || !grid || document.querySelector("#grid .tile")) return;
  const shown = new Set();
  async function poll() {
    let doc;
    try {
      const res = await fetch("/api/runs/" + encodeURIComponent(runId) + "/tiles");
      if (!res.ok) return;
      doc = await res.json();
    } catch (e) { return; }
    if (doc.tiles.length) { section.hidden = false; grid.hidden = false; }
    progress.textContent = doc.done + " of " + doc.expected + " generated";
    for (const t of doc.tiles) {
      if (t.status !== "completed" || !t.digest || shown.has(t.ordinal)) continue;
      shown.add(t.ordinal);
      const fig = el("figure", "tile live-tile");
      fig.id = "live-tile-" + t.ordinal;
      fig.dataset.ordinal = String(t.ordinal);
      const img = el("img", "zoom");
      img.src = "/api/objects/" + encodeURIComponent(t.digest);
      img.alt = "iteration " + t.ordinal;
      const cap = el("figcaption");
      cap.append(el("span", "ordinal", "#" + t.ordinal), el("span", "seed", "seed " + (t.seed ?? "-")));
      fig.append(img, cap);
      const after = [...grid.children].find((c) => Number(c.dataset.ordinal) > t.ordinal);
      grid.insertBefore(fig, after || null);
    }
    if (doc.status === "running") setTimeout(poll, 300);
  }
  poll();
}

// -- the run list follows runs starting and finishing ----------------------------------------

// The run list follows new and finishing runs: it asks the API which runs there are and in
// what status, and when that changed the page loads again (the server lays the list out:
// grouped, counted, with previews), unless a filter is being typed into.
function followRuns(table) {
  const query = table.dataset.query;
  // A run an unchanged re-apply repeats is folded under it on the page (repeat_of in the API).
  const shown = [...table.querySelectorAll("tr[data-run]")].map((r) => r.dataset.run + ":" + r.dataset.status).sort().join(",");
  async function poll() {
    try {
      const res = await fetch("/api/runs?limit=200" + (query ? "&" + query : ""));
      if (res.ok) {
        const runs = (await res.json()).runs;
        const folded = new Set(runs.map((r) => r.repeat_of).filter(Boolean));
        const now = runs.filter((r) => !folded.has(r.id)).map((r) => r.id + ":" + r.status).sort().join(",");
        const typing = document.activeElement && document.activeElement.closest("form.filters");
        if (now !== shown && !typing) { window.location.reload(); return; }
      }
    } catch (e) { /* the server went away: try again */ }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
}

// -- a step, element by element --------------------------------------------------------------

let browsing = null;
let browseTimer = null;

function block(title, value) {
  const sec = el("section", "block");
  sec.append(el("h4", null, title), copyable(value));
  return sec;
}

function cardBlock(card) {
  const sec = el("section", "block card-view");
  sec.append(el("h4", null, "Card"));
  const meta = el("p", "hint");
  meta.append("hash ", el("code", "card-hash", card.hash));
  if (card.previous_hash && card.previous_hash !== card.hash) {
    meta.append(" (was ", el("code", null, card.previous_hash), ")");
  }
  sec.append(meta, copyable(card.card));
  if (card.block) sec.append(el("h4", null, "Prompt block"), copyable(card.block));
  if (card.drift && card.drift.length) {
    sec.append(el("h4", "drift-title", "Drifted since the previous run: " + card.drift.length + " field(s)"));
    const table = el("table", "drift");
    const head = el("tr");
    head.append(el("th", null, "field"), el("th", null, "before"), el("th", null, "now"));
    table.append(head);
    for (const d of card.drift) {
      const tr = el("tr");
      const old = el("td", "old"); old.append(el("pre", null, asText(d.old)));
      const now = el("td", "new"); now.append(el("pre", null, asText(d.new)));
      tr.append(el("td", "field", d.field), old, now);
      table.append(tr);
    }
    sec.append(table);
  } else if (card.previous_hash) {
    sec.append(el("p", "hint", "unchanged since the previous run"));
  }
  return sec;
}

// Where an element sits in its step's time: the same bar as the step rows' Timeline column.
function timelineBar(span, start, end, status) {
  const whole = span.end - span.start;
  const left = Math.min(Math.max((start - span.start) / whole, 0), 1);
  const width = Math.min(Math.max(((end || span.end) - start) / whole, 0), 1 - left);
  const track = el("span", "track el-track");
  const bar = el("span", "bar status-" + status);
  bar.style.left = (left * 100).toFixed(2) + "%";
  bar.style.width = "max(2px, " + (width * 100).toFixed(2) + "%)";
  track.append(bar);
  return track;
}

function elementView(doc, e, open) {
  const box = el("details", "element");
  box.dataset.status = e.status;
  box.open = open;
  box.dataset.element = e.element === null ? "" : String(e.element);
  const sum = el("summary");
  sum.append(el("strong", null, e.element === null ? doc.step : "#" + e.element), " ");
  if (e.label) sum.append(el("span", "el-label", e.label), " ");
  sum.append(el("span", "status status-" + e.status, e.status),
             " ", el("small", "hint", "attempts " + (e.attempts || 0)),
             " ", el("small", "hint el-duration", e.duration_s == null ? "" : e.duration_s.toFixed(2) + "s"));
  if (doc.span && e.started_at) sum.append(timelineBar(doc.span, e.started_at, e.finished_at, e.status));
  if (e.worker) sum.append(" ", el("small", "hint where", "on " + e.worker));
  box.append(sum);
  if (e.input !== undefined) box.append(readable("Input", e.input));
  if (e.card) box.append(cardBlock(e.card));
  const args = e.arguments || {};
  if (doc.uses === "llm") {
    if (args.system) box.append(block("System prompt", args.system));
    if (args.prompt !== undefined) box.append(block("Rendered prompt", args.prompt));
  } else if (e.arguments !== undefined && !e.card) {
    box.append(readable("Arguments", e.arguments));
  }
  if (e.arguments_error) box.append(el("p", "hint", "arguments: " + e.arguments_error));
  if (e.output !== null && e.output !== undefined && !e.card) {
    const reply = typeof e.output.text === "string" ? e.output.text : e.output;
    box.append(readable(doc.uses === "llm" ? "Model reply" : "Output", reply));
  }
  if (e.verdicts && e.verdicts.length) {
    const sec = el("section", "block verdicts");
    sec.append(el("h4", null, "Checks"));
    const list = el("ol");
    for (const v of e.verdicts) {
      list.append(el("li", "verdict-" + v.verdict,
        "attempt " + (v.attempt ?? "?") + ": " + v.verdict + (v.reason ? " - " + v.reason : "")));
    }
    sec.append(list);
    box.append(sec);
  }
  if (e.report) box.append(readable("Report", e.report));
  if (e.error) box.append(el("p", "error", e.error));
  return box;
}

// Elements come a page at a time (the server evaluates only the page asked for): the next page
// loads when the end of the list scrolls into view, or on "more".
const PAGE = 100;
let browseShown = 0;  // elements on the panel now
let browseTotal = 0;
let browseLoading = null;
let browseQuery = "";  // the element search box: label, #index or status
const browseMore = new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting)) loadMore();
});

async function fetchElements(step, offset, limit) {
  const res = await fetch("/api/runs/" + encodeURIComponent(page.dataset.run) + "/steps/" +
                          encodeURIComponent(step) + "/elements?" + (browseQuery ? "q=" + encodeURIComponent(browseQuery) + "&" : "") +
                          "offset=" + offset + "&limit=" + limit);
  const doc = await res.json();
  if (!res.ok) throw new Error(doc.error ? doc.error.message : res.statusText);
  return doc;
}

function moreButton() {
  const box = el("p", "more-elements");
  box.id = "more-elements";
  const btn = el("button", "more", "more");
  btn.type = "button";
  btn.id = "more-elements-button";
  box.append(el("span", "hint", "showing " + browseShown + " of " + browseTotal + " elements "), btn);
  return box;
}

function showPage(doc, body, open, first) {
  document.getElementById("more-elements")?.remove();
  browseTotal = doc.total;
  body.append(...doc.elements.map((e, i) => elementView(doc, e,
    open.size ? open.has(e.element === null ? "" : String(e.element)) : first && i === 0)));
  browseShown += doc.elements.length;
  document.getElementById("browser-count").textContent =
    doc.for_each ? (doc.query ? doc.total + " of " + doc.all + " elements match" : doc.total + " elements") +
      (browseShown < doc.total ? ", " + browseShown + " shown" : "") : "";
  document.getElementById("browser-search").hidden = !doc.for_each;
  if (browseShown < doc.total) {
    const more = moreButton();
    body.append(more);
    browseMore.observe(more);
  }
}

async function loadMore() {
  if (!browsing || browseLoading || browseShown >= browseTotal) return;
  const step = browsing;
  browseLoading = fetchElements(step, browseShown, PAGE);
  try {
    const doc = await browseLoading;
    if (browsing === step) showPage(doc, document.getElementById("browser-body"), new Set(), false);
  } catch (err) {
    flash("elements: " + err.message, true);
  } finally {
    browseLoading = null;
  }
}

async function browse(step, keep) {
  const again = keep && browsing === step;
  if (browsing !== step) {  // another step: its own search starts empty
    browseQuery = "";
    document.getElementById("browser-search").value = "";
  }
  browsing = step;
  const panel = document.getElementById("browser");
  const body = document.getElementById("browser-body");
  document.getElementById("browser-step").textContent = step;
  panel.hidden = false;
  const open = again ? new Set([...body.querySelectorAll("details.element[open]")].map((d) => d.dataset.element)) : new Set();
  // a live reload fetches again the elements on the panel (whole pages), a new step its first page
  const want = again ? Math.max(PAGE, Math.ceil(browseShown / PAGE) * PAGE) : PAGE;
  const docs = [];
  try {
    for (let offset = 0; offset < want; offset += PAGE) {
      const doc = await fetchElements(step, offset, PAGE);
      docs.push(doc);
      if (offset + PAGE >= doc.total) break;
    }
  } catch (err) {
    body.replaceChildren(el("p", "error", err.message));
    return;
  }
  if (browsing !== step) return;
  body.replaceChildren();
  browseShown = 0;
  docs.forEach((doc, i) => showPage(doc, body, open, i === 0));
  if (docs[0].pipeline_error) body.prepend(el("p", "hint", docs[0].pipeline_error));
  if (!again) panel.scrollIntoView({block: "start"});
}

function reloadBrowser() {
  clearTimeout(browseTimer);
  browseTimer = setTimeout(() => { if (browsing) browse(browsing, true); }, 250);
}

// -- full-size images and the keyboard ------------------------------------------------------

function showFull(src) {
  const box = document.getElementById("lightbox");
  if (!box) return;
  box.querySelector("img").src = src;
  box.hidden = false;
}

function tiles() {
  return [...document.querySelectorAll("#grid .tile")];
}

function moveFocus(key) {
  const all = tiles();
  if (!all.length) return;
  let i = all.indexOf(document.activeElement);
  if (i < 0) { all[0].focus(); return; }
  const perRow = all.filter((t) => t.offsetTop === all[0].offsetTop).length || 1;
  const step = {ArrowRight: 1, ArrowLeft: -1, ArrowDown: perRow, ArrowUp: -perRow}[key];
  i = Math.max(0, Math.min(all.length - 1, i + step));
  all[i].focus();
}

function onKey(e) {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const box = document.getElementById("lightbox");
  if (e.key === "Escape" && box && !box.hidden) { box.hidden = true; return; }
  if (e.target.closest("input, textarea, select, [contenteditable]")) return;
  if (e.key.startsWith("Arrow") && tiles().length) {
    e.preventDefault();
    moveFocus(e.key);
  } else if (/^[1-9]$/.test(e.key)) {
    const btn = document.querySelector("#tile-" + e.key + " button.pick");
    if (btn) { e.preventDefault(); btn.click(); }
  } else if (e.key === "Enter" && document.activeElement?.classList.contains("tile")) {
    const img = document.activeElement.querySelector("img");
    if (img) showFull(img.src);
  } else if (e.key === "a" || e.key === "r") {
    const cards = document.querySelectorAll(".gate .decide-form button.decide");
    const decision = e.key === "a" ? "approve" : "reject";
    const btn = [...cards].find((b) => b.dataset.decision === decision);
    if (!btn) return;
    const gate = btn.closest(".gate").dataset.gate;
    e.preventDefault();
    if (window.confirm((decision === "approve" ? "Approve" : "Reject") + " gate '" + gate + "'?")) btn.click();
  }
}

// -- what a decision did, in words -------------------------------------------------------------

function decidedText(doc) {
  const d = doc.decision;
  return d.decision + " by " + d.by + " (round " + d.round + "): " + (doc.message || "") +
    (doc.resumed ? "" : " Continue with: runner resume " + doc.run_id);
}

// Step outputs load when opened: a 2,000-step run page stays small.
document.addEventListener("toggle", async (e) => {
  const box = e.target;
  if (!page || !(box instanceof HTMLDetailsElement)) return;
  // An output opens in a row of its own under its step, as wide as the table (the Output
  // column alone is too narrow to read JSON in).
  const wide = box.classList.contains("lazy-out") ? document.getElementById("out-" + box.dataset.step) : null;
  if (wide) wide.hidden = !box.open;
  if (!box.open) return;
  if (box.id === "graph-box" && !box.dataset.loaded) {
    box.dataset.loaded = "1";
    drawGraph(page.dataset.run);
    return;
  }
  if (!box.classList.contains("lazy-out") || box.dataset.loaded) return;
  box.dataset.loaded = "1";
  const pre = box.querySelector("pre");
  // The copy button and the output's row are added here, not in the page: 2,000 rows stay light.
  const row = box.closest("tr");
  const outRow = el("tr", "out-row");
  outRow.id = "out-" + box.dataset.step;
  const cell = el("td");
  cell.colSpan = row.children.length;
  const wrap = el("div", "copyable");
  const copy = el("button", "copy", "copy");
  copy.type = "button";
  pre.remove();
  wrap.append(copy, pre);
  cell.append(wrap);
  outRow.append(cell);
  row.after(outRow);
  try {
    const res = await fetch("/api/runs/" + encodeURIComponent(page.dataset.run) + "/steps/" +
                            encodeURIComponent(box.dataset.step) + "/output");
    const doc = await res.json();
    const out = doc.output;
    pre.textContent = res.ok ? (out && typeof out.text === "string" ? out.text : asText(out)) : doc.error.message;
  } catch (err) {
    pre.textContent = "could not load the output: " + err;
  }
}, true);

document.addEventListener("click", async (e) => {
  const copy = e.target.closest("button.copy");
  if (copy) {
    const text = copy.parentElement.querySelector("pre").textContent;
    try { await navigator.clipboard.writeText(text); flash("copied " + text.length + " characters", false); }
    catch (err) { flash("could not copy: " + err, true); }
    return;
  }
  const img = e.target.closest("img.zoom");
  if (img) { showFull(img.src); return; }
  const box = e.target.closest("#lightbox");
  if (box) box.hidden = true;
});
document.addEventListener("keydown", onKey);

// The element search asks the server (it knows every element, not only the page shown).
let searchTimer = null;
document.getElementById("browser-search")?.addEventListener("input", (e) => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    browseQuery = e.target.value.trim();
    if (browsing) browse(browsing, true);
  }, 200);
});

const runsTable = document.getElementById("runs");
if (runsTable && runsTable.dataset.query !== undefined) followRuns(runsTable);

// A gate's text to review (a draft) reads as rendered markdown; the copy button keeps the text.
for (const pre of document.querySelectorAll("pre.md-source")) {
  pre.hidden = true;
  pre.after(markdown(pre.textContent));
}

if (page) {
  const runId = page.dataset.run;
  follow(runId, page.dataset.lastEvent || "0", page.dataset.status === "running");
  if (page.dataset.status === "running") followTiles(runId);

  document.addEventListener("click", async (e) => {
    const btn = e.target.closest("button");
    if (!btn || btn.classList.contains("copy")) return;
    try {
      if (btn.classList.contains("pick")) {
        const doc = await post("/api/runs/" + runId + "/pick", {which: btn.dataset.which});
        await refreshPicks(runId);
        flash("picked #" + doc.picked.ordinal, false);
      } else if (btn.id === "export-all" || btn.id === "export-picked" || btn.classList.contains("export-one")) {
        const body = {to: document.getElementById("export-to").value,
                      raw: document.getElementById("export-raw").checked,
                      overwrite: document.getElementById("export-overwrite").checked,
                      picked: btn.id === "export-picked"};
        if (btn.dataset.iteration) body.iteration = btn.dataset.iteration;
        const doc = await post("/api/runs/" + runId + "/export", body);
        flash("wrote " + doc.files.length + " file(s): " + doc.files.join(", "), false);
      } else if (btn.classList.contains("iterate-go")) {
        const box = btn.closest("details");
        let vars = {};
        try { vars = parseInput(box.querySelector(".iterate-vars").value); }
        catch (err) { flash("template vars: " + err.message, true); return; }
        const doc = await post("/api/runs/" + runId + "/iterate", {
          iteration: btn.dataset.iteration,
          prompt_append: box.querySelector(".prompt-append").value,
          n: parseInt(box.querySelector(".iterate-n").value, 10) || 4,
          vars: vars,
        });
        window.location.href = "/runs/" + encodeURIComponent(doc.run_id || doc.run.id);
      } else if (btn.classList.contains("browse")) {
        await browse(btn.dataset.step);
      } else if (btn.id === "more-elements-button") {
        await loadMore();
      } else if (btn.id === "browser-close") {
        browsing = null;
        document.getElementById("browser").hidden = true;
      } else if (btn.classList.contains("decide")) {
        const card = btn.closest(".gate");
        let input = {};
        try { input = parseInput(card.querySelector(".gate-input").value); }
        catch (err) { flash("input: " + err.message, true); return; }
        const doc = await post("/api/runs/" + runId + "/gates/" + encodeURIComponent(card.dataset.gate) + "/decide", {
          decision: btn.dataset.decision,
          input: input,
          comment: card.querySelector(".gate-comment").value,
          by: card.querySelector(".gate-by").value,
        });
        card.querySelector(".decide-form").replaceChildren();
        card.append(el("p", "decided", decidedText(doc)));
        flash(decidedText(doc), false);
        if (doc.resumed) {
          showRunStatus("running");
          follow(runId, page.dataset.lastEvent || "0", true);
        }
      }
    } catch (err) {
      // flash() has shown the server's message already
    }
  });
}
