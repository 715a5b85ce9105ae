// runner serve: the run page's graph (its nodes follow step status; its edges are drawn once
// the boxes are laid out). Loaded before app.js, which calls markNode and drawEdges.

// -- the graph --------------------------------------------------------------------------------

function markNode(step, status) {
  const node = document.getElementById("node-" + step);
  if (node) node.className = "node status-" + status;
}

async function drawGraph(runId) {
  const box = document.getElementById("graph");
  const res = await fetch("/api/runs/" + encodeURIComponent(runId) + "/graph");
  const doc = await res.json();
  if (!res.ok || !doc.graph) {
    const why = typeof doc.error === "string" ? doc.error : (doc.error && doc.error.message);
    box.replaceChildren(el("p", "hint", why || "no graph"));
    return;
  }
  const cols = el("div", "graph-cols");
  for (const ph of doc.graph.phases) {
    const col = el("div", "phase-col");
    col.append(el("h4", null, ph.phase || "(no phase)"));
    for (const s of ph.steps) {
      const node = el("div", "node status-" + (doc.statuses[s.id] || "pending").split(" ")[0]);
      node.id = "node-" + s.id;
      node.title = (doc.statuses[s.id] || "pending");
      node.append(el("strong", null, s.id), " ", el("small", null, s.uses));
      if (s.for_each) {
        const badge = el("span", "fe-badge", "for each");
        badge.title = "runs once per element of its for_each list";
        node.append(" ", badge);
      }
      node.append(el("span", "node-status", doc.statuses[s.id] || "pending"));
      col.append(node);
    }
    cols.append(col);
  }
  box.replaceChildren(cols);
  drawEdges(box, doc.graph.edges);
}

// Every edge is drawn. Node boxes are measured once (not twice per edge); up to EACH_EDGE edges
// get a path each (hover-able), a larger graph one path of many curves, which lays out in one go.
const EACH_EDGE = 600;

function drawEdges(box, edges) {
  const base = box.getBoundingClientRect();
  const rects = new Map();
  for (const node of box.querySelectorAll(".node")) rects.set(node.id.slice(5), node.getBoundingClientRect());
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.classList.add("edges");
  svg.setAttribute("width", String(box.scrollWidth));
  svg.setAttribute("height", String(box.scrollHeight));
  // an arrowhead at each edge's end: the direction data flows
  const defs = document.createElementNS(NS, "defs");
  const marker = document.createElementNS(NS, "marker");
  for (const [k, v] of Object.entries({id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
    markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse"})) marker.setAttribute(k, v);
  const head = document.createElementNS(NS, "path");
  head.setAttribute("d", "M0,0 L10,5 L0,10 z");
  head.classList.add("arrowhead");
  marker.append(head);
  defs.append(marker);
  svg.append(defs);
  const curves = [];
  for (const [from, to] of edges) {
    const ra = rects.get(from), rb = rects.get(to);
    if (!ra || !rb) continue;
    const x1 = ra.right - base.left, y1 = ra.top + ra.height / 2 - base.top;
    const x2 = rb.left - base.left, y2 = rb.top + rb.height / 2 - base.top;
    const mid = (x1 + x2) / 2;
    curves.push(`M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`);
  }
  const paths = curves.length > EACH_EDGE ? [curves.join(" ")] : curves;
  for (const d of paths) {
    const path = document.createElementNS(NS, "path");
    path.setAttribute("d", d);
    path.classList.add("edge");
    if (paths.length === curves.length) path.setAttribute("marker-end", "url(#arrow)");
    svg.append(path);
  }
  svg.dataset.edges = String(curves.length);
  box.append(svg);  // after the boxes, above them (CSS z-index): an edge is never hidden
  box.append(el("p", "hint edge-count", curves.length + (curves.length === 1 ? " edge" : " edges") +
    (curves.length > EACH_EDGE ? " (drawn as one layer), without arrowheads: each runs from its" +
      " left end, a step, to its right end, a step that reads it" : "")));
}
