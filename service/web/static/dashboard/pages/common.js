// Pieces the pages share: the ledger filter bar (URL keys = LedgerFilter fields), number cells
// that carry their exact value for anyone checking (data-value), and money per currency.

import { h } from "../dom.js";
import { money, sumMoney } from "../format.js";

export const FILTERS = [
  { key: "environment", label: "Environment", dimension: "ENVIRONMENT" },
  { key: "gpuModel", label: "GPU model", dimension: "GPU_MODEL" },
  { key: "project", label: "Project", dimension: "PROJECT" },
  { key: "team", label: "Team", dimension: "TEAM" },
];

// The LedgerFilter of the URL (null when nothing is filtered).
export function ledgerFilter(params) {
  const filter = {};
  for (const { key } of FILTERS) {
    const values = params.getAll(key).filter(Boolean);
    if (values.length) filter[key] = values;
  }
  return Object.keys(filter).length ? filter : null;
}

// GraphQL fields (aliases opt_<key>) listing each filter's values in the window, unfiltered.
export const FILTER_OPTIONS = FILTERS.map(
  (f) => `opt_${f.key}: usage(window: $w, groupBy: [${f.dimension}]) { ${f.key} }`,
).join("\n");

export function filterBar(params, data, navigate) {
  const selects = FILTERS.map((f) => {
    const chosen = params.get(f.key) || "";
    const values = (data[`opt_${f.key}`] || []).map((r) => r[f.key]).filter((v) => v !== null);
    if (chosen && !values.includes(chosen)) values.push(chosen);
    values.sort();
    return h(
      "label",
      {},
      f.label,
      h(
        "select",
        { name: f.key, onchange: (e) => navigate({ [f.key]: e.target.value || null, after: null }) },
        h("option", { value: "" }, "All"),
        values.map((v) => h("option", { value: v, selected: v === chosen }, v)),
      ),
    );
  });
  return h("div", { class: "filters" }, h("strong", {}, "Filter"), selects);
}

// A table cell showing `text` and carrying `value` (exact) for tooltips and tests.
export function cell(metric, value, text, extra = {}) {
  return h(
    "td",
    { class: "num", dataset: { metric, value: value === null || value === undefined ? "" : String(value) }, title: extra.title, ...extra.attrs },
    text,
  );
}

// Money summed per currency, shown "$1.00 + €2.00"; data-value "USD 1.000000000; EUR …".
export function moneyCell(metric, monies) {
  const totals = sumMoney(monies);
  const parts = [...totals].filter(([c, a]) => !(c === "XXX" && /^0\.0+$/.test(a)));
  const value = parts.map(([c, a]) => `${c} ${a}`).join("; ");
  const text = parts.length ? parts.map(([c, a]) => money(a, c)).join(" + ") : money("0", mainCurrency(monies));
  return cell(metric, value, text, { title: value });
}

// The currency most rows are in (charts draw one currency; tables show every one).
export function mainCurrency(monies) {
  const counts = new Map();
  for (const m of monies) if (m && m.currency !== "XXX") counts.set(m.currency, (counts.get(m.currency) || 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]?.[0] || "USD";
}

// Groups rows by a key function, keeping first-seen order.
export function groupBy(rows, keyOf) {
  const groups = new Map();
  for (const row of rows) {
    const key = keyOf(row);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(row);
  }
  return groups;
}

export const label = (value, none = "(none)") => (value === null || value === undefined ? none : value);
