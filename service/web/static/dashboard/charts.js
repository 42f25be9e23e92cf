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

export function heatColor(value) {
  if (value === null || value === undefined) return "#eef1f5";
  const t = Math.max(0, Math.min(1, value / 100));
  // light yellow → orange → deep red
  const stops = [
    [255, 247, 214],
    [253, 174, 97],
    [215, 48, 39],
    [120, 10, 30],
  ];
  const x = t * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

export function heatmap(cells, format) {
  const grid = h("div", { class: "heatmap", role: "table", dataset: { chart: "heatmap" } });
  grid.append(h("span", { class: "hm-corner", role: "columnheader" }));
  for (let hour = 0; hour < 24; hour++) {
    grid.append(h("span", { class: "hm-hour", role: "columnheader" }, hour % 3 === 0 ? String(hour).padStart(2, "0") : ""));
  }
  cells.forEach((row, day) => {
    grid.append(h("span", { class: "hm-day", role: "rowheader" }, WEEKDAYS[day]));
    row.forEach((cell, hour) => {
      const dark = cell.value !== null && cell.value > 55;
      grid.append(
        h(
          "span",
          {
            class: `hm-cell${dark ? " dark" : ""}`,
            role: "cell",
            title: cell.title,
            dataset: { day: String(day), hour: String(hour), value: cell.value === null ? "" : String(cell.value) },
            style: { background: heatColor(cell.value) },
          },
          cell.value === null ? "" : format(cell.value),
        ),
      );
    });
  });
  const scale = h(
    "div",
    { class: "hm-scale" },
    "0 %",
    [0, 20, 40, 60, 80, 100].map((v) => h("i", { style: { background: heatColor(v) }, title: `${v} %` })),
    "100 %",
    h("span", { class: "hm-none" }, h("i", { style: { background: heatColor(null) } }), "no GPU present"),
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
