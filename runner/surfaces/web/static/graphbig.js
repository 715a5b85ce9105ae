// runner serve: the graph of a large pipeline (more than LAYERED_MAX steps or LAYERED_EDGES
// edges: graph.js), summarised so it stays readable. One box per group of steps (its phase; for
// a pipeline without phases, its depth in the graph, in at most BANDS bands) saying how many
// steps it holds, how they ended and which need attention, with the edges between groups
// counted, laid out by dagre; and any step, found by name (or clicked), drawn with its
// neighbours (what it reads and what reads it) as the small graph of graph.js. Loaded after
// graph.js, before app.js.

const BANDS = 12;
const NEAR_MAX = 40;  // neighbours shown on each side of a step; the rest are counted
const ATTENTION = ["failed", "rejected", "awaiting_human", "running", "retrying", "mixed", "partial"];

// Each step's group, in order: phases when the pipeline has them, else depth bands.
function groupsOf(doc) {
  const steps = doc.graph.phases.flatMap((ph) => ph.steps.map((s) => Object.assign({phase: ph.phase}, s)));
  const group = new Map();
  const order = [];
  if (doc.graph.phases.length > 1) {
    for (const ph of doc.graph.phases) {
      const name = ph.phase || "(no phase)";
      order.push(name);
      for (const s of ph.steps) group.set(s.id, name);
    }
    return {steps, group, order};
  }
  const ids = new Set(steps.map((s) => s.id));
  const succ = new Map(steps.map((s) => [s.id, []]));
  const indeg = new Map(steps.map((s) => [s.id, 0]));
  for (const [a, b] of doc.graph.edges) {
    if (!ids.has(a) || !ids.has(b)) continue;
    succ.get(a).push(b);
    indeg.set(b, indeg.get(b) + 1);
  }
  const depth = new Map(steps.map((s) => [s.id, 0]));
  const queue = steps.filter((s) => indeg.get(s.id) === 0).map((s) => s.id);
  for (let i = 0; i < queue.length; i++) {  // Kahn's order: each step after what it reads
    const a = queue[i];
    for (const b of succ.get(a)) {
      depth.set(b, Math.max(depth.get(b), depth.get(a) + 1));
      indeg.set(b, indeg.get(b) - 1);
      if (indeg.get(b) === 0) queue.push(b);
    }
  }
  const deepest = Math.max(0, ...depth.values());
  const per = Math.ceil((deepest + 1) / BANDS);
  const bandName = (band) => {
    const lo = band * per + 1, hi = Math.min(deepest + 1, (band + 1) * per);
    return lo === hi ? "depth " + lo : "depth " + lo + "-" + hi;
  };
  for (let band = 0; band * per <= deepest; band++) order.push(bandName(band));
  for (const s of steps) group.set(s.id, bandName(Math.floor(depth.get(s.id) / per)));
  return {steps, group, order};
}

function countText(counts) {
  return Object.entries(counts).sort((a, b) => b[1] - a[1]).map(([s, n]) => n + " " + s).join(", ");
}

function drawSummary(box, doc) {
  const {steps, group, order} = groupsOf(doc);
  const info = new Map(order.map((name) => [name, {name, steps: [], statuses: {}, inside: 0}]));
  for (const s of steps) {
    const g = info.get(group.get(s.id));
    const status = doc.statuses[s.id] || "pending";
    g.steps.push(s);
    g.statuses[status] = (g.statuses[status] || 0) + 1;
  }
  const links = new Map();
  for (const [a, b] of doc.graph.edges) {
    const ga = group.get(a), gb = group.get(b);
    if (!ga || !gb) continue;
    if (ga === gb) { info.get(ga).inside++; continue; }
    const key = ga + "\n" + gb;
    links.set(key, (links.get(key) || 0) + 1);
  }
  const head = el("p", "hint graph-summary-note",
    steps.length + " steps and " + doc.graph.edges.length + " edges: too many to draw one by one, " +
    "so each box is a group of steps (" + (doc.graph.phases.length > 1 ? "a phase" : "their depth in the graph") +
    ") and each arrow counts the edges between two groups. Find a step to draw it with its neighbours.");
  const canvas = el("div", "graph-canvas graph-summary");
  const finder = el("div", "graph-finder");
  const input = el("input");
  input.id = "graph-find";
  input.type = "search";
  input.placeholder = "find a step by name";
  input.setAttribute("list", "graph-step-ids");
  const ids = el("datalist");
  ids.id = "graph-step-ids";
  for (const s of steps) { const o = el("option"); o.value = s.id; ids.append(o); }
  const near = el("div", "graph-near");
  near.id = "graph-near";
  const listed = el("div", "graph-group-steps");  // a group's steps, when asked for
  listed.id = "graph-group-steps";
  finder.append(el("label", null, "Step "), input, ids);
  box.replaceChildren(head, canvas, listed, finder, near);

  const g = new dagre.graphlib.Graph({multigraph: false});
  // a few groups read left to right; a long line of them (depth bands) top to bottom, as a
  // page scrolls, rather than screens wide
  const across = order.length <= 5;
  g.setGraph({rankdir: across ? "LR" : "TB", nodesep: 28, ranksep: across ? 90 : 48,
              marginx: PAD, marginy: PAD});
  g.setDefaultEdgeLabel(() => ({}));
  const boxes = new Map();
  for (const name of order) {
    const gi = info.get(name);
    if (!gi.steps.length) continue;
    const worst = ATTENTION.find((s) => gi.statuses[s]) ||
      (Object.keys(gi.statuses).length === 1 ? Object.keys(gi.statuses)[0] : "mixed");
    const node = el("div", "node group-node status-" + worst);
    node.dataset.group = name;
    node.append(el("strong", null, name), " ",
      el("small", "group-size", gi.steps.length + (gi.steps.length === 1 ? " step" : " steps")),
      el("span", "node-status", countText(gi.statuses)));
    const needing = gi.steps.filter((s) => ATTENTION.includes(doc.statuses[s.id]));
    if (needing.length) {
      const list = el("span", "group-attention");
      for (const s of needing.slice(0, 5)) list.append(chip(s.id, input, doc));
      if (needing.length > 5) list.append(" +" + (needing.length - 5) + " more");
      node.append(list);
    }
    const open = el("button", "group-open", "list its steps");
    open.type = "button";
    open.addEventListener("click", () => {
      const chips = el("div", "chips");
      for (const s of gi.steps) chips.append(chip(s.id, input, doc));
      listed.replaceChildren(el("h4", null, name + ": " + gi.steps.length + " steps"), chips);
    });
    node.append(open);
    canvas.append(node);
    boxes.set(name, node);
    g.setNode(name, {width: node.offsetWidth, height: node.offsetHeight});
  }
  for (const key of links.keys()) {
    const [a, b] = key.split("\n");
    if (boxes.has(a) && boxes.has(b)) g.setEdge(a, b);
  }
  dagre.layout(g);
  const size = g.graph();
  canvas.style.width = Math.ceil(size.width) + "px";
  canvas.style.height = Math.ceil(size.height) + "px";
  for (const [name, node] of boxes) {
    const n = g.node(name);
    node.style.left = (n.x - n.width / 2) + "px";
    node.style.top = (n.y - n.height / 2) + "px";
  }
  const curves = [];
  for (const e of g.edges()) {
    const pts = g.edge(e).points || [];
    if (pts.length < 2) continue;
    curves.push("M" + pts.map((p) => p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" L"));
    const mid = pts[Math.floor(pts.length / 2)];
    const n = links.get(e.v + "\n" + e.w);
    const label = el("span", "group-link", n + (n === 1 ? " edge" : " edges"));
    label.dataset.from = e.v;
    label.dataset.to = e.w;
    Object.assign(label.style, {left: mid.x + "px", top: mid.y + "px"});
    canvas.append(label);
  }
  drawPaths(canvas, curves, Math.ceil(size.width), Math.ceil(size.height));
  input.addEventListener("input", () => {
    if (group.has(input.value)) drawNear(near, doc, input.value);
  });
}

function chip(id, input, doc) {
  const b = el("button", "step-chip status-" + ((doc.statuses[id] || "pending").split(" ")[0]), id);
  b.type = "button";
  b.addEventListener("click", () => {
    input.value = id;
    drawNear(document.getElementById("graph-near"), doc, id);
    input.scrollIntoView({block: "nearest"});
  });
  return b;
}

// One step with what it reads and what reads it, laid out as graph.js lays a small pipeline.
function drawNear(where, doc, id) {
  const ins = [], outs = [];
  for (const [a, b] of doc.graph.edges) {
    if (b === id) ins.push(a);
    if (a === id) outs.push(b);
  }
  const keep = new Set([id, ...ins.slice(0, NEAR_MAX), ...outs.slice(0, NEAR_MAX)]);
  const steps = doc.graph.phases.flatMap((ph) => ph.steps).filter((s) => keep.has(s.id));
  const edges = doc.graph.edges.filter(([a, b]) => keep.has(a) && keep.has(b) && (a === id || b === id));
  const title = el("h4", "near-title", id + ": reads " + ins.length + ", read by " + outs.length +
    (ins.length > NEAR_MAX || outs.length > NEAR_MAX ? " (the first " + NEAR_MAX + " of each drawn)" : ""));
  const graph = el("div", "near-graph");
  where.replaceChildren(title, graph);
  drawLayered(graph, Object.assign({}, doc, {graph: {phases: [{phase: "", steps}], edges}}));
  const focus = graph.querySelector("#node-" + CSS.escape(id));
  if (focus) focus.classList.add("focus");
}
