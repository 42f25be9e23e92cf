// Overview: totals, cost and GPU-hours by environment, cost per effective GPU-hour by environment ×
// GPU model, idle cost by project (top N, allocated vs unallocated), and the trend.

import { gql } from "../api.js";
import { bars, colorOf, trend } from "../charts.js";
import { card, empty, h, table } from "../dom.js";
import { gpuHours, money, nanos, number, pct, sumMoney } from "../format.js";
import { FILTER_OPTIONS, cell, filterBar, groupBy, label, ledgerFilter, mainCurrency, moneyCell } from "./common.js";

export const title = "Overview";

const M = "{ amount currency }";
const QUERY = `query Overview($w: TimeWindow!, $f: LedgerFilter, $trend: Granularity!) {
  totalUsage: usage(window: $w, filter: $f) { gpuHours effectiveGpuHours utilizationPct idleGpuHours coveragePct }
  totalCost: cost(window: $w, filter: $f) { cost ${M} idleCost ${M} unallocated }
  envCost: cost(window: $w, filter: $f, groupBy: [ENVIRONMENT]) { environment cost ${M} idleCost ${M} unallocated }
  envUsage: usage(window: $w, filter: $f, groupBy: [ENVIRONMENT]) { environment gpuHours effectiveGpuHours utilizationPct }
  effective: effectiveCost(window: $w, filter: $f, groupBy: [ENVIRONMENT, GPU_MODEL]) {
    environment gpuModel gpuHours effectiveGpuHours cost ${M} costPerGpuHour ${M} costPerEffectiveGpuHour ${M} metric }
  idle: idleWaste(window: $w, filter: $f, groupBy: [PROJECT]) {
    project idleGpuHours idleCost ${M} allocatedIdleCost ${M} unallocatedIdleCost ${M} }
  trendCost: cost(window: $w, filter: $f, granularity: $trend) { periodStart cost ${M} }
  trendUsage: usage(window: $w, filter: $f, granularity: $trend) { periodStart gpuHours effectiveGpuHours }
  ${FILTER_OPTIONS}
}`;

const TOP_DEFAULT = 10;

function kpi(name, heading, valueCell, sub) {
  return h("div", { class: "kpi", dataset: { kpi: name } }, h("span", { class: "kpi-label" }, heading), valueCell, h("span", { class: "kpi-sub" }, sub || ""));
}

function kpiValue(metric, value, text) {
  return h("strong", { dataset: { metric, value: String(value ?? "") }, title: String(value ?? "") }, text);
}

function totals(data) {
  const usage = data.totalUsage[0] || { gpuHours: 0, effectiveGpuHours: 0, utilizationPct: null, idleGpuHours: 0 };
  const cost = sumMoney(data.totalCost.map((r) => r.cost));
  const idle = sumMoney(data.totalCost.map((r) => r.idleCost));
  const moneyText = (m) => [...m].filter(([c]) => c !== "XXX").map(([c, a]) => money(a, c)).join(" + ") || "$0.00";
  const moneyValue = (m) => [...m].filter(([c]) => c !== "XXX").map(([c, a]) => `${c} ${a}`).join("; ");
  return h(
    "div",
    { class: "kpis" },
    kpi("cost", "Cost", kpiValue("cost", moneyValue(cost), moneyText(cost)), "energy, capex share and bills, in the window"),
    kpi("gpu-hours", "GPU-hours", kpiValue("gpuHours", usage.gpuHours, gpuHours(usage.gpuHours)), "time GPUs were present"),
    kpi(
      "effective",
      "Effective GPU-hours",
      kpiValue("effectiveGpuHours", usage.effectiveGpuHours, gpuHours(usage.effectiveGpuHours)),
      `utilization ${pct(usage.utilizationPct)} of observed time`,
    ),
    kpi("idle-cost", "Idle cost", kpiValue("idleCost", moneyValue(idle), moneyText(idle)), `${gpuHours(usage.idleGpuHours)} below the idle threshold`),
  );
}

function byEnvironment(data) {
  const costs = groupBy(data.envCost, (r) => r.environment);
  const usage = new Map(data.envUsage.map((r) => [r.environment, r]));
  const envs = [...new Set([...costs.keys(), ...usage.keys()])];
  const currency = mainCurrency(data.envCost.map((r) => r.cost));
  const rows = envs.map((env) => {
    const c = costs.get(env) || [];
    const u = usage.get(env) || {};
    return {
      env,
      cost: c.map((r) => r.cost),
      idle: c.map((r) => r.idleCost),
      usage: u,
      main: Number(sumMoney(c.map((r) => r.cost)).get(currency) || 0),
    };
  });
  rows.sort((a, b) => b.main - a.main);
  const tableRows = rows.map((r) =>
    h(
      "tr",
      { dataset: { key: label(r.env) } },
      h("th", { scope: "row" }, h("i", { class: "swatch", style: { background: colorOf(r.env) } }), label(r.env)),
      moneyCell("cost", r.cost),
      moneyCell("idleCost", r.idle),
      cell("gpuHours", r.usage.gpuHours, gpuHours(r.usage.gpuHours)),
      cell("effectiveGpuHours", r.usage.effectiveGpuHours, gpuHours(r.usage.effectiveGpuHours)),
      cell("utilizationPct", r.usage.utilizationPct, pct(r.usage.utilizationPct)),
    ),
  );
  const chart = h(
    "div",
    { class: "two" },
    h("div", {}, h("h3", {}, `Cost (${currency})`), bars(rows.map((r) => ({ label: label(r.env), parts: [{ value: r.main, color: colorOf(r.env) }], text: money(String(r.main), currency) })))),
    h("div", {}, h("h3", {}, "GPU-hours"), bars(rows.map((r) => ({ label: label(r.env), parts: [{ value: r.usage.gpuHours || 0, color: colorOf(r.env) }], text: gpuHours(r.usage.gpuHours) })))),
  );
  return card(
    "Cost and GPU-hours by environment",
    "Cost includes idle and unallocated time; GPU-hours count MIG slices by their fraction.",
    chart,
    table(
      "environments",
      [{ label: "Environment" }, { label: "Cost", class: "num" }, { label: "of which idle", class: "num" }, { label: "GPU-hours", class: "num" }, { label: "Effective GPU-hours", class: "num" }, { label: "Utilization", class: "num" }],
      tableRows,
    ),
  );
}

function effectiveCost(data) {
  const rows = data.effective.filter((r) => r.cost.currency !== "XXX" || r.gpuHours > 0);
  if (!rows.length) return card("Cost per effective GPU-hour", null, empty("No GPU time in this window."));
  const perEff = (r) => (r.costPerEffectiveGpuHour ? Number(r.costPerEffectiveGpuHour.amount) : 0);
  rows.sort((a, b) => perEff(b) - perEff(a));
  const currency = mainCurrency(rows.map((r) => r.cost));
  const chart = bars(
    rows
      .filter((r) => r.costPerEffectiveGpuHour && r.cost.currency === currency)
      .map((r) => ({
        label: `${label(r.environment)} · ${label(r.gpuModel, "(unknown model)")}`,
        parts: [{ value: perEff(r), color: colorOf(r.environment), title: `${money(r.costPerEffectiveGpuHour.amount, currency)} per effective GPU-hour` }],
        text: money(r.costPerEffectiveGpuHour.amount, currency),
      })),
  );
  const tableRows = rows.map((r) =>
    h(
      "tr",
      { dataset: { key: `${label(r.environment)}|${label(r.gpuModel)}` } },
      h("th", { scope: "row" }, label(r.environment)),
      h("td", {}, label(r.gpuModel, "(unknown model)")),
      cell("gpuHours", r.gpuHours, gpuHours(r.gpuHours)),
      cell("effectiveGpuHours", r.effectiveGpuHours, gpuHours(r.effectiveGpuHours)),
      cell("cost", `${r.cost.currency} ${r.cost.amount}`, money(r.cost.amount, r.cost.currency)),
      cell("costPerGpuHour", r.costPerGpuHour ? `${r.costPerGpuHour.currency} ${r.costPerGpuHour.amount}` : "", r.costPerGpuHour ? money(r.costPerGpuHour.amount, r.costPerGpuHour.currency) : "—"),
      cell(
        "costPerEffectiveGpuHour",
        r.costPerEffectiveGpuHour ? `${r.costPerEffectiveGpuHour.currency} ${r.costPerEffectiveGpuHour.amount}` : "",
        r.costPerEffectiveGpuHour ? money(r.costPerEffectiveGpuHour.amount, r.costPerEffectiveGpuHour.currency) : "—",
        { attrs: { class: "num strong" } },
      ),
    ),
  );
  return card(
    "Cost per effective GPU-hour",
    "What an hour of real GPU work costs: cost ÷ busy GPU-hours (SM activity where measured, else GPU util). A cheap GPU that sits idle is expensive here.",
    h("h3", {}, `${currency} per effective GPU-hour, by environment × GPU model`),
    h("div", { class: "narrow" }, chart),
    table(
      "effective-cost",
      [{ label: "Environment" }, { label: "GPU model" }, { label: "GPU-hours", class: "num" }, { label: "Effective GPU-hours", class: "num" }, { label: "Cost", class: "num" }, { label: "per GPU-hour", class: "num" }, { label: "per effective GPU-hour", class: "num" }],
      tableRows,
    ),
  );
}

function idleByProject(data, params, navigate) {
  const top = Math.max(1, Math.min(100, parseInt(params.get("top") || TOP_DEFAULT, 10) || TOP_DEFAULT));
  const currency = mainCurrency(data.idle.map((r) => r.idleCost));
  const rows = data.idle.filter((r) => r.idleCost.currency === currency);
  rows.sort((a, b) => {
    const d = nanos(b.idleCost.amount) - nanos(a.idleCost.amount);
    return d > 0n ? 1 : d < 0n ? -1 : String(a.project).localeCompare(String(b.project));
  });
  const shown = rows.slice(0, top);
  const rest = rows.slice(top);
  const chart = bars(
    shown.map((r) => ({
      label: label(r.project, "(no project)"),
      parts: [
        { value: Number(r.allocatedIdleCost.amount), color: "#3867d6", title: `allocated idle ${money(r.allocatedIdleCost.amount, currency)}` },
        { value: Number(r.unallocatedIdleCost.amount), color: "#a5b1c2", title: `unallocated idle ${money(r.unallocatedIdleCost.amount, currency)}` },
      ],
      text: money(r.idleCost.amount, currency),
    })),
    { legend: [{ label: "allocated (a job held the GPU, it sat idle)", color: "#3867d6" }, { label: "unallocated (nobody held the GPU)", color: "#a5b1c2" }] },
  );
  const tableRows = shown.map((r) =>
    h(
      "tr",
      { dataset: { key: label(r.project) } },
      h("th", { scope: "row" }, label(r.project, "(no project: unallocated or unlabelled)")),
      cell("idleGpuHours", r.idleGpuHours, gpuHours(r.idleGpuHours)),
      cell("allocatedIdleCost", r.allocatedIdleCost.amount, money(r.allocatedIdleCost.amount, currency)),
      cell("unallocatedIdleCost", r.unallocatedIdleCost.amount, money(r.unallocatedIdleCost.amount, currency)),
      cell("idleCost", r.idleCost.amount, money(r.idleCost.amount, currency), { attrs: { class: "num strong" } }),
    ),
  );
  const picker = h(
    "label",
    { class: "inline" },
    "Show top ",
    h(
      "select",
      { name: "top", onchange: (e) => navigate({ top: e.target.value }) },
      [...new Set([5, 10, 20, 50, top])].sort((a, b) => a - b).map((n) => h("option", { value: String(n), selected: n === top }, String(n))),
    ),
  );
  const more = rest.length
    ? h("p", { class: "note" }, `${rest.length} more project(s) with ${money(sumMoney(rest.map((r) => r.idleCost)).get(currency) || "0", currency)} of idle cost.`)
    : null;
  return card(
    `Idle cost by project (top ${top})`,
    "GPU time below 5 % busy and what it cost. Unallocated idle time (nobody held the GPU) has no project.",
    picker,
    rows.length ? h("div", { class: "two" }, chart, h("div", {}, table("idle", [{ label: "Project" }, { label: "Idle GPU-hours", class: "num" }, { label: "Allocated idle", class: "num" }, { label: "Unallocated idle", class: "num" }, { label: "Idle cost", class: "num" }], tableRows), more)) : empty("No idle time in this window."),
  );
}

function trendCard(data, params, navigate) {
  const granularity = params.get("trend") === "day" ? "day" : "week";
  const currency = mainCurrency(data.trendCost.map((r) => r.cost));
  const costs = groupBy(data.trendCost, (r) => r.periodStart);
  const usage = new Map(data.trendUsage.map((r) => [r.periodStart, r]));
  const periods = [...new Set([...costs.keys(), ...usage.keys()])].sort();
  const cost = periods.map((p) => Number(sumMoney((costs.get(p) || []).map((r) => r.cost)).get(currency) || 0));
  const hours = periods.map((p) => (usage.get(p) || {}).gpuHours ?? 0);
  const chartBox = h("div", { class: "chart", dataset: { chart: "trend" } });
  const tableRows = periods.map((p) =>
    h(
      "tr",
      { dataset: { key: p } },
      h("th", { scope: "row" }, `${granularity === "week" ? "week of " : ""}${p.slice(0, 10)}`),
      moneyCell("cost", (costs.get(p) || []).map((r) => r.cost)),
      cell("gpuHours", (usage.get(p) || {}).gpuHours, gpuHours((usage.get(p) || {}).gpuHours)),
      cell("effectiveGpuHours", (usage.get(p) || {}).effectiveGpuHours, gpuHours((usage.get(p) || {}).effectiveGpuHours)),
    ),
  );
  const toggle = h(
    "span",
    { class: "presets", role: "group", "aria-label": "Trend periods" },
    ["week", "day"].map((g) => h("button", { type: "button", class: g === granularity ? "on" : "", onclick: () => navigate({ trend: g === "week" ? null : g }) }, g === "week" ? "Weekly" : "Daily")),
  );
  const view = card(
    `${granularity === "week" ? "Weekly" : "Daily"} trend`,
    `Cost (bars, ${currency}) and GPU-hours (line) per ${granularity === "week" ? "ISO week (Monday 00:00 UTC; the first and last may be partial)" : "UTC day"}.`,
    toggle,
    periods.length ? chartBox : empty("No periods in this window."),
    periods.length ? h("details", {}, h("summary", {}, "As a table"), table("trend", [{ label: "Period" }, { label: "Cost", class: "num" }, { label: "GPU-hours", class: "num" }, { label: "Effective GPU-hours", class: "num" }], tableRows)) : null,
  );
  view.drawChart = () =>
    periods.length &&
    trend(chartBox, {
      labels: periods.map((p) => (granularity === "week" ? `week of ${p.slice(5, 10)}` : p.slice(5, 10))),
      bar: { label: "Cost", axis: currency, values: cost, format: (v) => money(String(v), currency), tick: (v) => number(v, 0) },
      line: { label: "GPU-hours", axis: "GPU-hours", values: hours, format: (v) => gpuHours(v), tick: (v) => number(v, 0) },
    });
  return view;
}

export async function render({ params, window, navigate }) {
  const granularity = params.get("trend") === "day" ? "DAY" : "WEEK";
  const data = await gql(QUERY, { w: window, f: ledgerFilter(params), trend: granularity });
  const trendView = trendCard(data, params, navigate);
  const view = h(
    "div",
    { class: "page", dataset: { page: "overview" } },
    filterBar(params, data, navigate),
    totals(data),
    byEnvironment(data),
    effectiveCost(data),
    idleByProject(data, params, navigate),
    trendView,
  );
  view.trend = trendView;
  return view;
}

export function afterMount(view) {
  view.trend.drawChart();
}
