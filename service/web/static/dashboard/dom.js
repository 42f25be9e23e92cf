// A tiny element builder: h("td", {class: "num", dataset: {value: "1"}}, "text", child…).
// Text always goes in as text nodes: nothing the API returns is ever parsed as HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style") Object.assign(el.style, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// A card with a heading, an optional note, and content.
export function card(title, note, ...content) {
  return h("section", { class: "card" }, h("h2", {}, title), note ? h("p", { class: "note" }, note) : null, ...content);
}

// A table: columns [{label, class?}], rows of cells (each cell an element or text).
export function table(name, columns, rows, attrs = {}) {
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.class, scope: "col" }, c.label))));
  return h("div", { class: "scroll" }, h("table", { class: "grid", dataset: { table: name }, ...attrs }, head, h("tbody", {}, rows)));
}

export function empty(text) {
  return h("p", { class: "empty" }, text);
}
