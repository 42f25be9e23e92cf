// Utilization: the hour-of-week heatmap (7 × 24, in a chosen IANA time zone, from the API's
// `heatmap`: the database groups the hours, docs/heatmap.md) and per-project SM activity against GPU
// util (jobs that keep a kernel running but leave the SMs idle — launch- or input-bound — show a high
// GPU util and a low SM activity).

import { gql } from "../api.js";
import { bars, heatmap, WEEKDAYS } from "../charts.js";
import { card, empty, h, table } from "../dom.js";
import { gpuHours, number, pct } from "../format.js";
import { FILTER_OPTIONS, cell, filterBar, label, ledgerFilter } from "./common.js";

export const title = "Utilization";

const QUERY = `query Utilization($w: TimeWindow!, $f: LedgerFilter, $tz: String!) {
  heat: heatmap(window: $w, filter: $f, timeZone: $tz) { weekday hour windowHours gpuHours utilizationPct }
  sm: usage(window: $w, filter: $f, groupBy: [PROJECT], metric: SM_ACTIVE) { project gpuHours utilizationPct coveragePct }
  util: usage(window: $w, filter: $f, groupBy: [PROJECT], metric: GPU_UTIL) { project gpuHours utilizationPct coveragePct }
  ${FILTER_OPTIONS}
}`;

// GPU util this many points above SM activity marks a project as likely launch-bound.
const LAUNCH_BOUND_GAP_PCT = 30;

export function validZone(zone) {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

// cells[day][hour] (Monday 0) from the API's 168 cells: utilization = Σ effective ÷ Σ observed
// GPU-hours of the UTC hours that start in that local weekday and hour.
export function hourOfWeek(heat) {
  const cells = Array.from({ length: 7 }, () => Array(24));
  for (const c of heat) {
    const day = c.weekday - 1;
    const value = c.utilizationPct;
    const when = `${WEEKDAYS[day]} ${String(c.hour).padStart(2, "0")}:00–${String((c.hour + 1) % 24).padStart(2, "0")}:00`;
    const title = value === null ? `${when}: no GPU observed` : `${when}: ${pct(value)} busy, ${gpuHours(c.gpuHours)} over ${c.windowHours} hour(s)`;
    cells[day][c.hour] = { value, title };
  }
  return cells;
}

// The zone asked for in the URL, by its canonical IANA name (Intl accepts "europe/berlin", the API
// wants "Europe/Berlin"), if the browser knows it; else UTC and a warning.
function zoneOf(params) {
  const zone = params.get("tz") || "UTC";
  if (!validZone(zone)) return { zone: "UTC", warning: h("p", { class: "warn" }, `"${zone}" is not an IANA time zone; showing UTC.`) };
  return { zone: new Intl.DateTimeFormat("en-US", { timeZone: zone }).resolvedOptions().timeZone, warning: null };
}

function zonePicker(zone, navigate) {
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const input = h("input", {
    name: "tz",
    list: "zones",
    value: zone,
    spellcheck: "false",
    onchange: (e) => navigate({ tz: e.target.value === "UTC" ? null : e.target.value }),
  });
  return h(
    "label",
    { class: "inline" },
    "Time zone ",
    input,
    h("datalist", { id: "zones" }, ["UTC", ...zones].map((z) => h("option", { value: z }))),
  );
}

function heatCard(data, zone, warning, navigate) {
  const cells = hourOfWeek(data.heat);
  return card(
    `Hour-of-week utilization (${zone})`,
    "Busy share of observed GPU time for each weekday and hour, over every week of the window (each device's default metric: SM activity where measured, else GPU util). Hover a cell for its GPU-hours.",
    zonePicker(zone, navigate),
    warning,
    data.heat.some((c) => c.gpuHours > 0) ? heatmap(cells, (v) => number(v, 0)) : empty("No GPU time in this window."),
  );
}

function projectsCard(data) {
  const util = new Map(data.util.map((r) => [r.project, r]));
  const rows = data.sm.map((r) => ({ project: r.project, gpuHours: r.gpuHours, sm: r.utilizationPct, util: (util.get(r.project) || {}).utilizationPct ?? null }));
  rows.sort((a, b) => b.gpuHours - a.gpuHours);
  if (!rows.length) return card("Utilization by project", null, empty("No GPU time in this window."));
  const chart = bars(
    rows.flatMap((r) => [
      { label: label(r.project, "(no project)"), parts: [{ value: r.sm ?? 0, color: "#3867d6", title: `SM activity ${pct(r.sm)}` }], text: `SM ${pct(r.sm)}` },
      { label: "", parts: [{ value: r.util ?? 0, color: "#fa8231", title: `GPU util ${pct(r.util)}` }], text: `util ${pct(r.util)}` },
    ]),
    { legend: [{ label: "SM activity (how much of the GPU's compute was busy)", color: "#3867d6" }, { label: "GPU util (a kernel was running)", color: "#fa8231" }] },
  );
  const tableRows = rows.map((r) => {
    const gap = r.sm !== null && r.util !== null ? r.util - r.sm : null;
    const flag = gap !== null && gap >= LAUNCH_BOUND_GAP_PCT;
    return h(
      "tr",
      { dataset: { key: label(r.project) }, class: flag ? "flag" : "" },
      h("th", { scope: "row" }, label(r.project, "(no project: unallocated or unlabelled)")),
      cell("gpuHours", r.gpuHours, gpuHours(r.gpuHours)),
      cell("smActivePct", r.sm, pct(r.sm)),
      cell("gpuUtilPct", r.util, pct(r.util)),
      cell("gapPct", gap, gap === null ? "—" : `${number(gap, 1)} pts`),
      h("td", {}, flag ? "likely launch- or input-bound" : ""),
    );
  });
  return card(
    "Utilization by project: SM activity vs GPU util",
    `GPU util counts any time a kernel ran; SM activity counts how much of the chip worked. A gap of ${LAUNCH_BOUND_GAP_PCT} points or more marks small kernels, launch overhead or a starved input pipeline. "—": no device of the project reports that metric.`,
    h("div", { class: "two" }, chart, table("projects", [{ label: "Project" }, { label: "GPU-hours", class: "num" }, { label: "SM activity", class: "num" }, { label: "GPU util", class: "num" }, { label: "Gap", class: "num" }, { label: "" }], tableRows)),
  );
}

export async function render({ params, window, navigate }) {
  const { zone, warning } = zoneOf(params);
  const data = await gql(QUERY, { w: window, f: ledgerFilter(params), tz: zone });
  return h("div", { class: "page", dataset: { page: "utilization" } }, filterBar(params, data, navigate), heatCard(data, zone, warning, navigate), projectsCard(data));
}
