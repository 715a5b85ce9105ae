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
  StepFailed: "failed", GateAwaiting: "awaiting_human",
};

function setStatus(cell, status) {
  cell.innerHTML = "";
  const span = document.createElement("span");
  span.className = "status status-" + status;
  span.textContent = status;
  cell.appendChild(span);
}

function applyEvent(ev) {
  if (ev.type === "RunFinished" && ev.status) {
    const st = document.getElementById("run-status");
    st.textContent = ev.status;
    st.className = "status status-" + ev.status;
    return;
  }
  if (!ev.step) return;
  const row = document.querySelector('tr[data-step="' + CSS.escape(ev.step) + '"]');
  if (!row) return;
  let status = STEP_STATUS[ev.type];
  if (ev.type === "StepSkipped") status = ev.reason === "cached" ? "cached" : "skipped";
  if (!status) return;
  if (ev.element !== null && ev.element !== undefined) status += " [" + ev.element + "]";
  setStatus(row.querySelector(".st"), status);
  if (ev.attempt) row.querySelector(".attempts").textContent = ev.attempt;
  if (ev.attempts) row.querySelector(".attempts").textContent = ev.attempts;
  if (typeof ev.duration_s === "number") row.querySelector(".duration").textContent = ev.duration_s.toFixed(2) + "s";
  if (ev.reason) row.querySelector(".why").textContent = ev.reason;
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
    document.getElementById("run-status").textContent = doc.status;
    // A run that finished while we watched: reload for its iterations, outputs and gates.
    if (wasRunning || n > 0) window.location.reload();
  });
}

// Step outputs load when opened: a 2,000-step run page stays small.
document.addEventListener("toggle", async (e) => {
  const box = e.target;
  if (!page || !(box instanceof HTMLDetailsElement) || !box.open) return;
  if (!box.classList.contains("lazy-out") || box.dataset.loaded) return;
  box.dataset.loaded = "1";
  const pre = box.querySelector("pre");
  try {
    const res = await fetch("/api/runs/" + encodeURIComponent(page.dataset.run) + "/steps/" +
                            encodeURIComponent(box.dataset.step) + "/output");
    const doc = await res.json();
    const text = res.ok ? JSON.stringify(doc.output, null, 2) : doc.error.message;
    pre.textContent = text.length > 4000 ? text.slice(0, 3999) + "…" : text;
  } catch (err) {
    pre.textContent = "could not load the output: " + err;
  }
}, true);

if (page) {
  const runId = page.dataset.run;
  follow(runId, page.dataset.lastEvent || "0", page.dataset.status === "running");

  document.addEventListener("click", async (e) => {
    const btn = e.target.closest("button");
    if (!btn) return;
    try {
      if (btn.classList.contains("pick")) {
        const doc = await post("/api/runs/" + runId + "/pick", {which: btn.dataset.which});
        await refreshPicks(runId);
        flash("picked #" + doc.picked.ordinal, false);
      } else if (btn.id === "export-all" || btn.classList.contains("export-one")) {
        const body = {to: document.getElementById("export-to").value,
                      raw: document.getElementById("export-raw").checked};
        if (btn.dataset.iteration) body.iteration = btn.dataset.iteration;
        const doc = await post("/api/runs/" + runId + "/export", body);
        flash("wrote " + doc.files.length + " file(s): " + doc.files.join(", "), false);
      } else if (btn.classList.contains("iterate-go")) {
        const box = btn.closest("details");
        const doc = await post("/api/runs/" + runId + "/iterate", {
          iteration: btn.dataset.iteration,
          prompt_append: box.querySelector(".prompt-append").value,
          n: parseInt(box.querySelector(".iterate-n").value, 10) || 4,
        });
        window.location.href = "/runs/" + encodeURIComponent(doc.run_id || doc.run.id);
      } else if (btn.classList.contains("decide")) {
        const card = btn.closest(".gate");
        const doc = await post("/api/runs/" + runId + "/gates/" + encodeURIComponent(card.dataset.gate) + "/decide", {
          decision: btn.dataset.decision,
          input: parseInput(card.querySelector(".gate-input").value),
          comment: card.querySelector(".gate-comment").value,
          by: card.querySelector(".gate-by").value,
        });
        card.querySelector(".decide-form").innerHTML = "";
        const p = document.createElement("p");
        p.className = "decided";
        p.textContent = doc.decision.decision + " by " + doc.decision.by +
          " (round " + doc.decision.round + ")" +
          (doc.resumed ? "; the run continues" : "; continue with: runner resume " + doc.run_id);
        card.appendChild(p);
        if (doc.resumed) {
          setStatus(document.getElementById("run-status"), "running");
          follow(runId, page.dataset.lastEvent || "0", true);
        }
      }
    } catch (err) {
      // flash() has shown the server's message already
    }
  });
}
