// Connectors: every configured connector's status, watermark, last run and last error.

import { gql } from "../api.js";
import { card, empty, h, table } from "../dom.js";
import { ago, utc } from "../format.js";

export const title = "Connectors";
export const usesWindow = false;

const QUERY = `{ connectors { name type status watermark lastRunAt lastSuccessAt lastError lastRunFindings notice } }`;
const GOOD = new Set(["OK", "RUNNING"]);

export async function render() {
  const { connectors } = await gql(QUERY);
  const now = Date.now();
  const rows = connectors.map((c) =>
    h(
      "tr",
      { dataset: { key: c.name, status: c.status } },
      h("th", { scope: "row" }, c.name),
      h("td", {}, c.type),
      h("td", { dataset: { metric: "status", value: c.status } }, h("span", { class: `status ${GOOD.has(c.status) ? "s-ok" : c.status === "NEVER_RUN" ? "s-idle" : "s-bad"}` }, c.status)),
      h("td", { dataset: { metric: "watermark", value: c.watermark ?? "" } }, utc(c.watermark), h("div", { class: "sub" }, ago(c.watermark, now))),
      h("td", { dataset: { metric: "lastRunAt", value: c.lastRunAt ?? "" } }, utc(c.lastRunAt)),
      h("td", { dataset: { metric: "lastSuccessAt", value: c.lastSuccessAt ?? "" } }, utc(c.lastSuccessAt)),
      h("td", { class: "num", dataset: { metric: "lastRunFindings", value: c.lastRunFindings ?? "" } }, c.lastRunFindings ?? "—"),
      h("td", { class: "error-text", dataset: { metric: "lastError", value: c.lastError ?? "" } }, c.lastError ?? "", c.notice ? h("div", { class: "sub" }, c.notice) : null),
    ),
  );
  const healthy = connectors.filter((c) => GOOD.has(c.status)).length;
  return h(
    "div",
    { class: "page", dataset: { page: "connectors" } },
    card(
      `Connectors (${healthy} of ${connectors.length} healthy)`,
      "Watermark: the ledger holds this connector's data up to here. Findings: rows its last run imported although they break a data-quality rule.",
      connectors.length ? table("connectors", [{ label: "Name" }, { label: "Type" }, { label: "Status" }, { label: "Watermark" }, { label: "Last run" }, { label: "Last success" }, { label: "Findings", class: "num" }, { label: "Last error / notice" }], rows) : empty("No connector is configured."),
    ),
  );
}
