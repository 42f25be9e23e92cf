// Charts: horizontal bars and the hour-of-week heatmap as plain HTML (readable, accessible, no
// canvas needed), the trend over time with uPlot (vendored: /static/vendor/uplot).

import { h } from "./dom.js";

export const PALETTE = ["#3867d6", "#20bf6b", "#f7b731", "#eb3b5a", "#8854d0", "#0fb9b1", "#fa8231", "#4b6584"];
const ENVIRONMENT_COLORS = { onprem: "#4b6584", aws: "#fa8231", gcp: "#3867d6", azure: "#0fb9b1" };

export function colorOf(name, index = 0) {
  return ENVIRONMENT_COLORS[name] || PALETTE[index % PALETTE.length];
}

// rows: [{label, parts: [{value, color, title}], text}] — one bar per row, parts stacked.
export function bars(rows, { legend = [] } = {}) {
  const max = Math.max(1e-12, ...rows.map((r) => r.parts.reduce((s, p) => s + Math.max(0, p.value), 0)));
  const list = h(
    "div",
    { class: "bars", role: "list" },
    rows.map((r) =>
      h(
        "div",
        { class: "bar-row", role: "listitem" },
        h("span", { class: "bar-label", title: r.label }, r.label),
        h(
          "span",
          { class: "bar-track" },
          r.parts.map((p) =>
            h("span", {
              class: "bar-part",
              title: p.title || "",
              style: { width: `${(100 * Math.max(0, p.value)) / max}%`, background: p.color },
            }),
          ),
        ),
        h("span", { class: "bar-value" }, r.text),
      ),
    ),
  );
  if (!legend.length) return list;
  const key = h(
    "div",
    { class: "legend" },
    legend.map((l) => h("span", {}, h("i", { style: { background: l.color } }), l.label)),
  );
  return h("div", {}, key, list);
}

// cells[day][hour] = {value (0–100 or null), title}; days Monday first.
export const WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

// Colour of `t` in [0, 1] (null: nothing observed): light yellow → orange → red → deep red.
export function heatColor(t) {
  if (t === null || t === undefined) return "#eef1f5";
  const stops = [
    [255, 247, 214],
    [253, 174, 97],
    [215, 48, 39],
    [120, 10, 30],
  ];
  const x = Math.max(0, Math.min(1, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// The colour scale spans the cells' own range (a fleet busy 45–65 % all week would be one flat
// colour on 0–100), widened to at least 10 points so noise does not look like a pattern.
export function heatRange(cells) {
  const seen = cells.flat().map((c) => c.value).filter((v) => v !== null);
  if (!seen.length) return [0, 100];
  let lo = Math.min(...seen);
  let hi = Math.max(...seen);
  if (hi - lo < 10) {
    const mid = (hi + lo) / 2;
    lo = Math.max(0, mid - 5);
    hi = Math.min(100, lo + 10);
    lo = hi - 10;
  }
  return [Math.floor(lo), Math.ceil(hi)];
}

export function heatmap(cells, format) {
  const [lo, hi] = heatRange(cells);
  const scaled = (v) => (v === null ? null : (v - lo) / (hi - lo || 1));
  const grid = h("div", { class: "heatmap", role: "table", dataset: { chart: "heatmap" } });
  grid.append(h("span", { class: "hm-corner", role: "columnheader" }));
  for (let hour = 0; hour < 24; hour++) {
    grid.append(h("span", { class: "hm-hour", role: "columnheader" }, hour % 3 === 0 ? String(hour).padStart(2, "0") : ""));
  }
  cells.forEach((row, day) => {
    grid.append(h("span", { class: "hm-day", role: "rowheader" }, WEEKDAYS[day]));
    row.forEach((cell, hour) => {
      const t = scaled(cell.value);
      grid.append(
        h(
          "span",
          {
            class: `hm-cell${t !== null && t > 0.55 ? " dark" : ""}`,
            role: "cell",
            title: cell.title,
            dataset: { day: String(day), hour: String(hour), value: cell.value === null ? "" : String(cell.value) },
            style: { background: heatColor(t) },
          },
          cell.value === null ? "" : format(cell.value),
        ),
      );
    });
  });
  const steps = [0, 0.2, 0.4, 0.6, 0.8, 1];
  const scale = h(
    "div",
    { class: "hm-scale", dataset: { low: String(lo), high: String(hi) } },
    `${lo} %`,
    steps.map((t) => h("i", { style: { background: heatColor(t) }, title: `${Math.round(lo + t * (hi - lo))} %` })),
    `${hi} % busy`,
    h("span", { class: "hm-none" }, h("i", { style: { background: heatColor(null) } }), "no GPU observed"),
  );
  return h("div", { class: "heatmap-wrap" }, grid, scale);
}

// A uPlot chart of periods (one slot each, labelled by `labels`): bars for the first series (left
// axis), a line for the second (right axis).
export function trend(container, { labels, bar, line }) {
  if (typeof uPlot === "undefined") {
    container.append(h("p", { class: "empty" }, "The chart library did not load."));
    return null;
  }
  const x = labels.map((_, i) => i);
  const width = Math.max(320, container.clientWidth || 640);
  const fromZero = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];
  const opts = {
    width,
    height: 260,
    padding: [12, 8, 0, 8],
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: false, range: [-0.5, labels.length - 0.5] }, bar: { range: fromZero }, line: { range: fromZero } },
    series: [
      { label: "Period", value: (u, v) => (v === null ? "—" : labels[v] ?? "") },
      {
        label: bar.label,
        scale: "bar",
        fill: "rgba(56, 103, 214, 0.55)",
        stroke: "#3867d6",
        width: 1,
        paths: uPlot.paths.bars({ size: [0.55, 90] }),
        value: (u, v) => (v === null ? "—" : bar.format(v)),
        points: { show: false },
      },
      {
        label: line.label,
        scale: "line",
        stroke: "#eb3b5a",
        width: 2,
        value: (u, v) => (v === null ? "—" : line.format(v)),
        points: { show: true, size: 7, fill: "#eb3b5a" },
      },
    ],
    axes: [
      { splits: () => x, values: (u, ticks) => ticks.map((t) => labels[t] ?? ""), grid: { show: false } },
      { scale: "bar", label: bar.axis, labelSize: 20, size: 70, values: (u, ticks) => ticks.map(bar.tick) },
      { scale: "line", side: 1, label: line.axis, labelSize: 20, size: 70, grid: { show: false }, values: (u, ticks) => ticks.map(line.tick) },
    ],
  };
  return new uPlot(opts, [x, bar.values, line.values], container);
}
