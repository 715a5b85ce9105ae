// runner serve: values as a person reads them (loaded before app.js, which uses these).
// Plain JS, no build step.
"use strict";

// Every value shown comes from data (model replies, file names, reviewer input): it is only
// ever set as text (textContent, attribute values), never parsed as HTML.
function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function asText(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

// A value as a person reads it: text as text (markdown rendered into elements, never parsed as
// HTML), images as images, objects and lists folded below their first level. The copy button
// copies the value itself (text, or JSON).
function readable(title, value) {
  const sec = el("section", "block readable");
  sec.append(el("h4", null, title));
  const box = el("div", "copyable");
  const btn = el("button", "copy", "copy");
  btn.type = "button";
  const raw = el("pre", "raw-value", asText(value));
  raw.hidden = true;  // what the copy button copies
  box.append(btn, raw, view(value, null, 0));
  sec.append(box);
  return sec;
}

const DIGEST = /^[0-9a-f]{64}$/;
const IMAGE_KEYS = new Set(["raw", "final", "image", "reference", "references"]);

function view(value, key, depth) {
  if (typeof value === "string") {
    if (key !== null && IMAGE_KEYS.has(key) && DIGEST.test(value)) return picture(value);
    return value.includes("\n") || value.length > 80 ? markdown(value) : el("span", "text-value", value);
  }
  if (value === null || typeof value !== "object") return el("code", "scalar", JSON.stringify(value));
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  if (Array.isArray(value) && value.length && value.every((v) => typeof v === "string" && DIGEST.test(v)) &&
      IMAGE_KEYS.has(key)) {
    const row = el("div", "pictures");
    row.append(...value.map(picture));
    return row;
  }
  const list = el("dl", "fields");
  for (const [k, v] of entries) {
    const sub = Array.isArray(value) ? key : k;
    list.append(el("dt", null, k));
    const dd = el("dd");
    if (v !== null && typeof v === "object" && !hasPictures(v) && !(IMAGE_KEYS.has(sub) && Array.isArray(v) && v.length)) {
      // folded; what is inside is built when first opened (a large output stays light)
      const fold = el("details", "fold");
      const n = Array.isArray(v) ? v.length + (v.length === 1 ? " item" : " items")
                                 : Object.keys(v).length + (Object.keys(v).length === 1 ? " field" : " fields");
      fold.append(el("summary", "hint", Array.isArray(v) ? "[" + n + "]" : "{" + n + "}"));
      fold.addEventListener("toggle", () => {
        if (fold.open && fold.children.length === 1) fold.append(view(v, sub, depth + 1));
      });
      dd.append(fold);
    } else {
      dd.append(view(v, sub, depth + 1));
    }
    list.append(dd);
  }
  return list;
}

function hasPictures(v) {
  if (v === null || typeof v !== "object") return false;
  return Object.entries(v).some(([k, x]) =>
    (IMAGE_KEYS.has(k) && typeof x === "string" && DIGEST.test(x)) || (Array.isArray(v) && hasPictures(x)));
}

function picture(digest) {
  const img = el("img", "zoom picture");
  img.src = "/api/objects/" + encodeURIComponent(digest);
  img.alt = "image " + digest.slice(0, 12);
  img.loading = "lazy";
  img.title = digest.slice(0, 12) + ": click for full size";
  return img;
}

// Markdown for reading, built from elements that hold text: headings, lists, fenced code,
// paragraphs, **bold**, *emphasis* and `code`. A tag in the text stays text.
function markdown(text) {
  const root = el("div", "md");
  const lines = text.split("\n");
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) { const p = el("p"); inline(p, para.join("\n")); root.append(p); }
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (/^\s*```/.test(line)) {
      flush(); list = null;
      const code = [];
      for (i++; i < lines.length && !/^\s*```/.test(lines[i]); i++) code.push(lines[i]);
      root.append(el("pre", "md-code", code.join("\n")));
      continue;
    }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    if (h) {
      flush(); list = null;
      const node = el("h" + Math.min(6, h[1].length + 3), "md-h");
      inline(node, h[2]);
      root.append(node);
      continue;
    }
    const li = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/.exec(line);
    if (li) {
      flush();
      const tag = li[1] ? "OL" : "UL";
      if (!list || list.tagName !== tag) { list = el(tag.toLowerCase()); root.append(list); }
      const item = el("li");
      inline(item, li[2]);
      list.append(item);
      continue;
    }
    if (!line.trim()) { flush(); list = null; continue; }
    list = null;
    para.push(line);
  }
  flush();
  return root;
}

function inline(node, text) {
  const re = /(\*\*[^*\n]+\*\*|`[^`\n]+`|\*[^*\s][^*\n]*\*)/g;
  let last = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    node.append(text.slice(last, m.index));
    const t = m[0];
    if (t.startsWith("**")) node.append(el("strong", null, t.slice(2, -2)));
    else if (t.startsWith("`")) node.append(el("code", null, t.slice(1, -1)));
    else node.append(el("em", null, t.slice(1, -1)));
    last = m.index + t.length;
  }
  node.append(text.slice(last));
}
