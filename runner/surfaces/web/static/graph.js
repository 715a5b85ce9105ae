// runner serve: the run page's graph (its nodes follow step status). Laid out by dagre (a
// layered, Sugiyama-style layout: static/dagre.min.js, MIT, see dagre.LICENSE.txt), so edges are
// routed between the boxes, never through a step's label. Loaded before app.js, which calls
// markNode and drawGraph.

// -- the graph --------------------------------------------------------------------------------

// What a node's status line says. "mixed": a for_each whose elements ended differently.
function nodeStatus(doc, id) {
  const status = doc.statuses[id] || "pending";
  const counts = (doc.elements || {})[id];
  if (status !== "mixed" || !counts) return status;
  return "mixed: " + Object.entries(counts).map(([s, n]) => n + " " + s).join(", ");
}

function markNode(step, status) {
  const node = document.getElementById("node-" + step);
  if (node) node.className = "node status-" + status.split(" ")[0];
}

function nodeBox(doc, s) {
  const status = doc.statuses[s.id] || "pending";
  const node = el("div", "node status-" + status.split(" ")[0]);
  node.id = "node-" + s.id;
  node.title = nodeStatus(doc, s.id);
  node.append(el("strong", null, s.id), " ", el("small", null, s.uses));
  if (s.for_each) {
    const n = (doc.counts || {})[s.id];
    const badge = el("span", "fe-badge", n == null ? "for each" : "for each: " + n);
    badge.title = "runs once per element of its for_each list" +
      (n == null ? "" : " (" + n + (n === 1 ? " element" : " elements") + " in this run)");
    node.append(" ", badge);
  }
  node.append(el("span", "node-status", nodeStatus(doc, s.id)));
  return node;
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
  const steps = doc.graph.phases.flatMap((ph) => ph.steps);
  if (typeof dagre === "undefined") drawColumns(box, doc);
  else if (steps.length > LAYERED_MAX) drawSummary(box, doc);  // graphbig.js
  else if (doc.graph.edges.length > LAYERED_EDGES) drawColumns(box, doc);
  else drawLayered(box, doc);
}

// Up to LAYERED_MAX steps and LAYERED_EDGES edges are laid out by dagre. More steps are
// summarised (graphbig.js: a layout of thousands of nodes would hold the page for seconds and
// be read by no one); a few steps with more edges keep one column per phase (a layered drawing
// of 30 x 25 all-to-all edges is a wall of lines many screens high).
const LAYERED_MAX = 400;
const LAYERED_EDGES = 300;
const PAD = 16;
const LABEL = 20;  // a phase frame's label, above its steps

function drawLayered(box, doc) {
  const canvas = el("div", "graph-canvas");
  box.replaceChildren(canvas);
  const g = new dagre.graphlib.Graph({compound: true, multigraph: false});
  g.setGraph({rankdir: "LR", nodesep: 18 + LABEL, ranksep: 56, edgesep: 12, marginx: PAD, marginy: PAD + LABEL});
  g.setDefaultEdgeLabel(() => ({}));
  const nodes = new Map();
  const phased = doc.graph.phases.length > 1 || doc.graph.phases.some((ph) => ph.phase);
  for (const ph of doc.graph.phases) {
    const cluster = "phase:" + (ph.phase || "");
    if (phased) g.setNode(cluster, {label: ph.phase || "(no phase)"});
    for (const s of ph.steps) {
      const node = nodeBox(doc, s);
      canvas.append(node);  // measured in place, then moved where the layout puts it
      nodes.set(s.id, node);
      g.setNode(s.id, {width: node.offsetWidth, height: node.offsetHeight});
      if (phased) g.setParent(s.id, cluster);
    }
  }
  for (const [from, to] of doc.graph.edges) {
    if (nodes.has(from) && nodes.has(to)) g.setEdge(from, to);
  }
  dagre.layout(g);
  const size = g.graph();
  canvas.style.width = Math.ceil(size.width) + "px";
  canvas.style.height = Math.ceil(size.height) + "px";
  if (phased) {
    for (const ph of doc.graph.phases) {
      const c = g.node("phase:" + (ph.phase || ""));
      if (!c || !ph.steps.length) continue;
      const frame = el("div", "phase-box");
      frame.append(el("h4", null, ph.phase || "(no phase)"));
      // the frame reaches above its cluster by its label's height: the label is never under a box
      Object.assign(frame.style, {left: (c.x - c.width / 2) + "px", top: (c.y - c.height / 2 - LABEL) + "px",
                                  width: c.width + "px", height: (c.height + LABEL) + "px"});
      canvas.prepend(frame);
    }
  }
  for (const [id, node] of nodes) {
    const n = g.node(id);
    node.style.left = (n.x - n.width / 2) + "px";
    node.style.top = (n.y - n.height / 2) + "px";
  }
  const curves = [];
  for (const e of g.edges()) {
    const pts = g.edge(e).points || [];
    if (pts.length < 2) continue;
    curves.push("M" + pts.map((p) => p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" L"));
  }
  drawPaths(canvas, curves, Math.ceil(size.width), Math.ceil(size.height));
  box.append(edgeCount(curves.length));
}

// The fallback: one column per phase, edges as curves from box to box.
function drawColumns(box, doc) {
  const cols = el("div", "graph-cols");
  for (const ph of doc.graph.phases) {
    const col = el("div", "phase-col");
    col.append(el("h4", null, ph.phase || "(no phase)"));
    for (const s of ph.steps) col.append(nodeBox(doc, s));
    cols.append(col);
  }
  box.replaceChildren(cols);
  const base = box.getBoundingClientRect();
  const rects = new Map();
  for (const node of box.querySelectorAll(".node")) rects.set(node.id.slice(5), node.getBoundingClientRect());
  const curves = [];
  for (const [from, to] of doc.graph.edges) {
    const ra = rects.get(from), rb = rects.get(to);
    if (!ra || !rb) continue;
    const x1 = ra.right - base.left, y1 = ra.top + ra.height / 2 - base.top;
    const x2 = rb.left - base.left, y2 = rb.top + rb.height / 2 - base.top;
    const mid = (x1 + x2) / 2;
    curves.push(`M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`);
  }
  drawPaths(box, curves, box.scrollWidth, box.scrollHeight);
  box.append(edgeCount(curves.length));
}

// Every edge is drawn. Up to EACH_EDGE edges get a path each (hover-able, with an arrowhead), a
// larger graph one path of many curves, which lays out in one go.
const EACH_EDGE = 600;

function drawPaths(where, curves, width, height) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.classList.add("edges");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
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
  const paths = curves.length > EACH_EDGE ? [curves.join(" ")] : curves;
  for (const d of paths) {
    const path = document.createElementNS(NS, "path");
    path.setAttribute("d", d);
    path.classList.add("edge");
    if (paths.length === curves.length) path.setAttribute("marker-end", "url(#arrow)");
    svg.append(path);
  }
  svg.dataset.edges = String(curves.length);
  where.append(svg);  // after the boxes, above them (CSS z-index): an edge is never hidden
}

function edgeCount(n) {
  return el("p", "hint edge-count", n + (n === 1 ? " edge" : " edges") +
    (n > EACH_EDGE ? " (drawn as one layer), without arrowheads: each runs from its" +
      " left end, a step, to its right end, a step that reads it" : ""));
}
