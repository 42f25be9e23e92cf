// Devices: the inventory a page at a time (keyset paging: `after` in the URL), searchable, with each
// device's last sample, connector, and its coverage in the window (usage grouped by device).

import { gql } from "../api.js";
import { card, empty, h, table } from "../dom.js";
import { ago, gpuHours, pct, utc } from "../format.js";
import { cell } from "./common.js";

export const title = "Devices";

export const PAGE_SIZES = [25, 50, 100];
const DEVICE_FIELDS = "deviceId source environment provider account region cluster node instanceType gpuModel migProfile gpuFraction firstSeen lastSeen";
const DEVICES = `query Devices($search: String, $filter: DeviceFilter, $first: Int!, $after: String) {
  devices(search: $search, filter: $filter, first: $first, after: $after) {
    totalCount pageInfo { hasNextPage hasPreviousPage endCursor }
    edges { cursor node { ${DEVICE_FIELDS} } } }
}`;
const COVERAGE = `query Coverage($w: TimeWindow!, $f: LedgerFilter) {
  usage(window: $w, filter: $f, groupBy: [DEVICE]) { device gpuHours coveragePct utilizationPct }
}`;
const ENVIRONMENTS = ["onprem", "aws", "gcp", "azure"];

// The DeviceFilter of the URL: the environment picked here, and the GPU model the ledger pages share.
export function deviceFilter(params) {
  const filter = {};
  if (params.get("environment")) filter.environment = [params.get("environment")];
  if (params.getAll("gpuModel").length) filter.gpuModel = params.getAll("gpuModel");
  return Object.keys(filter).length ? filter : null;
}

export async function render({ params, window, navigate }) {
  const size = PAGE_SIZES.includes(Number(params.get("size"))) ? Number(params.get("size")) : PAGE_SIZES[0];
  const after = params.get("after") || null;
  const page = (await gql(DEVICES, { search: (params.get("q") || "").trim() || null, filter: deviceFilter(params), first: size, after })).devices;
  const ids = page.edges.map((e) => e.node.deviceId);
  const coverage = ids.length ? (await gql(COVERAGE, { w: window, f: { device: ids } })).usage : [];
  const byDevice = new Map(coverage.map((r) => [r.device, r]));
  const now = Date.now();
  const rows = page.edges.map(({ node: d }) => {
    const u = byDevice.get(d.deviceId);
    return h(
      "tr",
      { dataset: { key: d.deviceId } },
      h("th", { scope: "row", class: "mono" }, d.deviceId, d.migProfile ? h("span", { class: "tag" }, `MIG ${d.migProfile}`) : null),
      h("td", {}, d.environment),
      h("td", {}, [d.provider, d.account, d.region].filter(Boolean).join(" · ") || "—"),
      h("td", {}, d.node ?? "—"),
      h("td", {}, d.gpuModel ?? "—", d.instanceType ? h("div", { class: "sub" }, d.instanceType) : null),
      h("td", { dataset: { metric: "source", value: d.source } }, d.source),
      h("td", { dataset: { metric: "lastSeen", value: d.lastSeen }, title: d.lastSeen }, utc(d.lastSeen), h("div", { class: "sub" }, ago(d.lastSeen, now))),
      cell("gpuHours", u ? u.gpuHours : "", u ? gpuHours(u.gpuHours) : "—"),
      cell("coveragePct", u ? u.coveragePct : "", u ? pct(u.coveragePct) : "—", { title: "observed ÷ present time of its metric in the window" }),
    );
  });
  const search = h(
    "form",
    {
      class: "row",
      role: "search",
      onsubmit: (e) => {
        e.preventDefault();
        const form = new FormData(e.target);
        navigate({ q: form.get("q").trim() || null, environment: form.get("environment") || null, after: null });
      },
    },
    h("label", { class: "inline" }, "Search ", h("input", { type: "search", name: "q", value: params.get("q") || "", placeholder: "device id, node, instance, region…", size: "32" })),
    h(
      "label",
      { class: "inline" },
      "Environment ",
      h("select", { name: "environment" }, h("option", { value: "" }, "All"), ENVIRONMENTS.map((e) => h("option", { value: e, selected: params.get("environment") === e }, e))),
    ),
    h("button", { type: "submit" }, "Search"),
  );
  const sizes = h(
    "label",
    { class: "inline" },
    "Rows per page ",
    h("select", { name: "size", onchange: (e) => navigate({ size: e.target.value === String(PAGE_SIZES[0]) ? null : e.target.value, after: null }) }, PAGE_SIZES.map((n) => h("option", { value: String(n), selected: n === size }, String(n)))),
  );
  const pager = h(
    "div",
    { class: "pager" },
    h("span", { dataset: { metric: "totalCount", value: String(page.totalCount) } }, `${page.totalCount.toLocaleString("en-US")} device(s)`),
    h("button", { type: "button", disabled: !after, onclick: () => history.back() }, "← Previous"),
    h("button", { type: "button", disabled: !after, onclick: () => navigate({ after: null }) }, "First page"),
    h("button", { type: "button", name: "next", disabled: !page.pageInfo.hasNextPage, onclick: () => navigate({ after: page.pageInfo.endCursor }) }, "Next →"),
    sizes,
  );
  return h(
    "div",
    { class: "page", dataset: { page: "devices" } },
    card(
      "GPUs and MIG instances",
      "Every device any connector reported, by device id. Coverage: how much of the device's present time in the window its utilization metric was observed.",
      search,
      rows.length ? table("devices", [{ label: "Device" }, { label: "Env." }, { label: "Provider · account · region" }, { label: "Node" }, { label: "GPU model" }, { label: "Connector" }, { label: "Last seen" }, { label: "GPU-hours", class: "num" }, { label: "Coverage", class: "num" }], rows, { class: "grid compact" }) : empty("No device matches."),
      pager,
    ),
  );
}
