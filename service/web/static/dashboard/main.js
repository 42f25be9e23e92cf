// The dashboard shell: the page, window and filters live in the URL (?page=…&start=…&end=…), so a
// view can be shared by its address; each page module asks /graphql and draws what it gets.

import { ApiError, anonymousRead, setToken, token } from "./api.js";
import { h } from "./dom.js";
import * as connectors from "./pages/connectors.js";
import * as devices from "./pages/devices.js";
import * as overview from "./pages/overview.js";
import * as reconciliation from "./pages/reconciliation.js";
import * as utilization from "./pages/utilization.js";

const PAGES = { overview, utilization, reconciliation, devices, connectors };
const DAY_MS = 86400000;
const PRESETS = [7, 30, 90];
// What a page link keeps of the current address: the window and the ledger filters.
const SHARED = ["start", "end", "environment", "gpuModel", "project", "team"];

function linkTo(pageName, params) {
  const next = new URLSearchParams({ page: pageName });
  for (const key of SHARED) params.getAll(key).forEach((v) => next.append(key, v));
  return `?${next}`;
}

function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

function validDay(text) {
  return /^\d{4}-\d{2}-\d{2}$/.test(text || "") && !Number.isNaN(Date.parse(`${text}T00:00:00Z`));
}

// The URL's state, with defaults filled in: the last 30 UTC days up to the end of today.
export function currentParams() {
  const params = new URLSearchParams(location.search);
  if (!PAGES[params.get("page")]) params.set("page", "overview");
  let end = params.get("end");
  let start = params.get("start");
  if (!validDay(end)) end = isoDay(new Date(Date.now() + DAY_MS));
  if (!validDay(start) || Date.parse(start) >= Date.parse(end)) {
    start = isoDay(new Date(Date.parse(end) - 30 * DAY_MS));
  }
  params.set("start", start);
  params.set("end", end);
  return params;
}

// The GraphQL TimeWindow of the URL's whole UTC days [start, end).
export function windowOf(params) {
  return { start: `${params.get("start")}T00:00:00Z`, end: `${params.get("end")}T00:00:00Z` };
}

// Changes the URL (one history entry) and redraws. `changes`: {key: value | [values] | null}.
export function navigate(changes, { replace = false } = {}) {
  const params = currentParams();
  for (const [key, value] of Object.entries(changes)) {
    params.delete(key);
    if (Array.isArray(value)) value.filter((v) => v !== "").forEach((v) => params.append(key, v));
    else if (value !== null && value !== undefined && value !== "") params.set(key, value);
  }
  const url = `${location.pathname}?${params}`;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  render();
}

function banner(text, kind = "error") {
  const el = document.getElementById("banner");
  el.replaceChildren();
  el.hidden = !text;
  el.className = `banner ${kind}`;
  if (text) el.append(text);
}

function showTokenForm(open) {
  const form = document.getElementById("token-form");
  form.hidden = !open;
  document.getElementById("token-toggle").setAttribute("aria-expanded", String(open));
  if (open) document.getElementById("token-input").focus();
}

function windowControls(params) {
  const days = Math.round((Date.parse(params.get("end")) - Date.parse(params.get("start"))) / DAY_MS);
  const presets = h(
    "span",
    { class: "presets", role: "group", "aria-label": "Window presets" },
    PRESETS.map((n) =>
      h(
        "button",
        {
          type: "button",
          class: days === n ? "on" : "",
          onclick: () => {
            const end = new Date(Date.now() + DAY_MS);
            navigate({ start: isoDay(new Date(end.getTime() - n * DAY_MS)), end: isoDay(end), after: null });
          },
        },
        `Last ${n} days`,
      ),
    ),
  );
  const dateInput = (name, label) =>
    h(
      "label",
      {},
      label,
      h("input", {
        type: "date",
        name,
        value: params.get(name),
        onchange: (e) => validDay(e.target.value) && navigate({ [name]: e.target.value, after: null }),
      }),
    );
  return h(
    "div",
    { class: "window" },
    h("strong", {}, "Window (UTC days)"),
    dateInput("start", "from"),
    dateInput("end", "to (exclusive)"),
    presets,
  );
}

let generation = 0;

export async function render() {
  const mine = ++generation;
  const params = currentParams();
  if (location.search !== `?${params}`) history.replaceState(null, "", `${location.pathname}?${params}`);
  const name = params.get("page");
  const page = PAGES[name];
  document.title = `GPU Ledger · ${page.title}`;
  for (const link of document.querySelectorAll("#nav a")) {
    const here = link.dataset.page === name;
    link.classList.toggle("on", here);
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
    link.href = linkTo(link.dataset.page, params);
  }
  const controls = document.getElementById("controls");
  controls.replaceChildren(page.usesWindow === false ? "" : windowControls(params));
  const content = document.getElementById("content");
  content.dataset.state = "loading";
  content.replaceChildren(h("h1", {}, page.title), h("p", { class: "loading" }, "Loading…"));
  banner("");
  if (!anonymousRead() && !token()) {
    content.replaceChildren(
      h("h1", {}, page.title),
      h("p", { class: "signin" }, "This service needs a token to show its numbers: paste one above (Token)."),
    );
    content.dataset.state = "needs-token";
    showTokenForm(true);
    return;
  }
  try {
    const view = await page.render({ params, window: windowOf(params), navigate, controls });
    if (mine !== generation) return;
    content.replaceChildren(h("h1", {}, page.title), view);
    content.dataset.state = "ready";
    if (page.afterMount) page.afterMount(view);
  } catch (exc) {
    if (mine !== generation) return;
    if (!(exc instanceof ApiError)) {
      content.replaceChildren(h("h1", {}, page.title));
      content.dataset.state = "error";
      banner(`This page failed to draw: ${exc.message}`);
      throw exc;
    }
    content.replaceChildren(h("h1", {}, page.title));
    content.dataset.state = "error";
    if (exc.needsToken) {
      banner(`The service refused the request: ${exc.message}. Paste a valid token (Token).`);
      showTokenForm(true);
    } else if (exc.forbidden) {
      banner(`Your token may not read this page: ${exc.message}`);
    } else {
      banner(exc.message);
    }
  }
}

function wire() {
  document.getElementById("nav").addEventListener("click", (e) => {
    const link = e.target.closest("a[data-page]");
    if (!link || e.ctrlKey || e.metaKey || e.shiftKey) return;
    e.preventDefault();
    history.pushState(null, "", linkTo(link.dataset.page, currentParams()));
    render();
  });
  document.getElementById("token-toggle").addEventListener("click", () => {
    showTokenForm(document.getElementById("token-form").hidden);
  });
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("token-input");
    setToken(input.value.trim());
    input.value = "";
    showTokenForm(false);
    render();
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    setToken("");
    render();
  });
  window.addEventListener("popstate", render);
}

wire();
render();
