// Reconciliation: billed against metered GPU-hours and bill against ledger cost per provider,
// account and day, with each row's status; the spend no metric saw (blind spots) summed on top.

import { gql } from "../api.js";
import { card, empty, h, table } from "../dom.js";
import { gpuHours, money, number, sumMoney } from "../format.js";
import { cell, moneyCell } from "./common.js";

export const title = "Reconciliation";

const M = "{ amount currency }";
const QUERY = `query Reconciliation($w: TimeWindow!, $tolerance: Float!) {
  reconciliation(window: $w, groupBy: [PROVIDER, ACCOUNT, DAY], tolerancePct: $tolerance) {
    provider account day billedGpuHours meteredGpuHours gpuHoursVariance gpuHoursVariancePct
    billedCost ${M} ledgerCost ${M} costVariance ${M} billingLines status }
}`;

export const STATUSES = {
  MATCHED: "billed and metered agree",
  UNBILLED_USAGE: "metered > billed: billing lag or a mis-mapped resource",
  UNMONITORED_SPEND: "billed > metered: a blind spot (no agent, broken exporter)",
  NO_METRICS: "billed GPU resource never seen in metrics",
  NO_BILLING: "metered cloud GPUs without a billing line (yet)",
  UNKNOWN_INSTANCE_TYPE: "a GPU-looking instance type the catalog does not know",
  UNUSED_COMMITMENT: "unused reservation / savings plan",
  ACCOUNT_ADJUSTMENT: "credits, refunds and tax (not GPU cost)",
};
// Statuses whose billed cost no metric saw.
export const BLIND = ["UNMONITORED_SPEND", "NO_METRICS"];

function badge(status) {
  return h("span", { class: `status s-${status.toLowerCase()}`, title: STATUSES[status] || "" }, status.replaceAll("_", " ").toLowerCase());
}

export async function render({ params, window, navigate }) {
  const tolerance = Math.max(0, Math.min(100, parseFloat(params.get("tolerance") || "5") || 5));
  const data = await gql(QUERY, { w: window, tolerance });
  const all = data.reconciliation;
  const chosen = params.get("status");
  const rows = chosen ? all.filter((r) => r.status === chosen) : all;
  const counts = new Map();
  for (const r of all) counts.set(r.status, (counts.get(r.status) || 0) + 1);
  const blind = all.filter((r) => BLIND.includes(r.status));
  const blindSpend = sumMoney(blind.map((r) => r.billedCost));
  const billed = sumMoney(all.map((r) => r.billedCost));
  const ledger = sumMoney(all.map((r) => r.ledgerCost));
  const show = (m) => [...m].map(([c, a]) => money(a, c)).join(" + ") || "$0.00";
  const value = (m) => [...m].map(([c, a]) => `${c} ${a}`).join("; ");
  const summary = h(
    "div",
    { class: "kpis" },
    h("div", { class: "kpi", dataset: { kpi: "billed" } }, h("span", { class: "kpi-label" }, "Billed cost"), h("strong", { dataset: { metric: "billedCost", value: value(billed) } }, show(billed)), h("span", { class: "kpi-sub" }, "effective cost on the bills")),
    h("div", { class: "kpi", dataset: { kpi: "ledger" } }, h("span", { class: "kpi-label" }, "Ledger cost"), h("strong", { dataset: { metric: "ledgerCost", value: value(ledger) } }, show(ledger)), h("span", { class: "kpi-sub" }, "cost of the metered GPU time")),
    h("div", { class: "kpi", dataset: { kpi: "unmonitored" } }, h("span", { class: "kpi-label" }, "Unmonitored spend"), h("strong", { dataset: { metric: "unmonitoredSpend", value: value(blindSpend) } }, show(blindSpend)), h("span", { class: "kpi-sub" }, `billed in ${blind.length} row(s) marked unmonitored spend or no metrics`)),
  );
  const chips = h(
    "div",
    { class: "chips", role: "group", "aria-label": "Status filter" },
    h("button", { type: "button", class: chosen ? "" : "on", onclick: () => navigate({ status: null }) }, `All (${all.length})`),
    [...counts].map(([status, n]) => h("button", { type: "button", class: status === chosen ? "on" : "", dataset: { status }, title: STATUSES[status] || "", onclick: () => navigate({ status }) }, badge(status), ` ${n}`)),
  );
  const tableRows = rows.map((r) =>
    h(
      "tr",
      { dataset: { key: `${r.provider}|${r.account}|${r.day}`, status: r.status } },
      h("th", { scope: "row" }, r.provider ?? "—"),
      h("td", {}, r.account ?? "—"),
      h("td", { class: "nowrap" }, r.day ?? "—"),
      cell("billedGpuHours", r.billedGpuHours, gpuHours(r.billedGpuHours)),
      cell("meteredGpuHours", r.meteredGpuHours, gpuHours(r.meteredGpuHours)),
      cell("gpuHoursVariancePct", r.gpuHoursVariancePct, r.gpuHoursVariancePct === null ? "—" : `${number(r.gpuHoursVariancePct, 1)} %`),
      moneyCell("billedCost", [r.billedCost]),
      moneyCell("ledgerCost", [r.ledgerCost]),
      moneyCell("costVariance", [r.costVariance]),
      h("td", {}, badge(r.status)),
    ),
  );
  const providers = [...new Set(all.map((r) => r.provider))];
  const providerRows = providers.map((p) => {
    const mine = all.filter((r) => r.provider === p);
    const sum = (f) => mine.reduce((s, r) => s + r[f], 0);
    return h(
      "tr",
      { dataset: { key: p ?? "" } },
      h("th", { scope: "row" }, p ?? "—"),
      cell("billedGpuHours", sum("billedGpuHours"), gpuHours(sum("billedGpuHours"))),
      cell("meteredGpuHours", sum("meteredGpuHours"), gpuHours(sum("meteredGpuHours"))),
      moneyCell("billedCost", mine.map((r) => r.billedCost)),
      moneyCell("ledgerCost", mine.map((r) => r.ledgerCost)),
      h("td", {}, [...new Set(mine.map((r) => r.status))].map((s) => [badge(s), " "])),
    );
  });
  const noBills = all.length > 0 && all.every((r) => r.billingLines === 0);
  const tolerancePicker = h(
    "label",
    { class: "inline" },
    "Matched within ",
    h("input", { type: "number", name: "tolerance", min: "0", max: "100", step: "0.5", value: String(tolerance), onchange: (e) => navigate({ tolerance: e.target.value === "5" ? null : e.target.value }) }),
    " % of billed GPU-hours",
  );
  return h(
    "div",
    { class: "page", dataset: { page: "reconciliation" } },
    summary,
    noBills
      ? h("p", { class: "banner info" }, "No billing line in this window: every metered cloud GPU shows NO BILLING. Configure a billing connector (aws_cur, gcp_billing, azure_cost or focus) to check the bills against the metrics.")
      : null,
    providers.length
      ? card("By provider", null, table("providers", [{ label: "Provider" }, { label: "Billed GPU-h", class: "num" }, { label: "Metered GPU-h", class: "num" }, { label: "Billed cost", class: "num" }, { label: "Ledger cost", class: "num" }, { label: "Statuses" }], providerRows))
      : null,
    card(
      "Billed vs metered, per provider, account and day",
      "Cloud bills against the GPU-hours the metrics saw. A bill counts on the day its line starts; bills arrive a day or more late, so the last days often show no billing.",
      h("div", { class: "row" }, tolerancePicker, chips),
      all.length ? table("reconciliation", [{ label: "Provider" }, { label: "Account" }, { label: "Day (UTC)" }, { label: "Billed GPU-h", class: "num" }, { label: "Metered GPU-h", class: "num" }, { label: "Variance", class: "num" }, { label: "Billed cost", class: "num" }, { label: "Ledger cost", class: "num" }, { label: "Ledger − billed", class: "num" }, { label: "Status" }], tableRows) : empty("No cloud GPU time or bills in this window."),
    ),
  );
}
