// Shale's console: one page, views by the URL's fragment, data from /api/v1.
// Everything shown is built with DOM nodes and textContent (record bytes are never
// parsed as HTML). Numbers carry data-value with the API's exact figure.
"use strict";

const API = "/api/v1";
let refreshTimer = null;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// Appends the children that are there (a page's optional parts are null when absent).
function fill(el, ...children) {
  el.append(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

async function api(path, options) {
  const res = await fetch(API + path, options);
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { error: "BAD_RESPONSE", message: text }; }
  if (!res.ok) {
    const e = new Error((body && body.message) || res.statusText);
    e.code = body && body.error;
    throw e;
  }
  return body;
}

function send(method, path, body) {
  return api(path, { method, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + units[i];
}

function num(v, field) {
  return h("td", { class: "num", "data-field": field, "data-value": v === null || v === undefined ? "" : v },
    v === null || v === undefined ? "–" : String(v));
}

function duration(ms) {
  if (ms === undefined || ms === null) return "–";
  if (ms < 0) return "forever";
  const s = ms / 1000;
  if (s < 120) return s + " s";
  if (s < 7200) return (s / 60).toFixed(0) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

// A retention bound: time and size per partition, whichever is reached first.
function retention(ms, size, field) {
  const parts = [];
  if (ms !== undefined && ms >= 0) parts.push(duration(ms));
  if (size !== undefined && size >= 0) parts.push(bytes(size) + " per partition");
  return h("td", { "data-field": field, title: "records go when either bound is reached" },
    parts.length ? parts.join(" or ") : "forever");
}

function table(headers, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { class: x.endsWith("#") ? "num" : "" }, x.replace(/#$/, ""))))),
    h("tbody", {}, rows));
}

function card(label, value, id) {
  return h("div", { class: "card", "data-card": id }, h("div", { class: "n", "data-value": value }, String(value)), h("div", { class: "l" }, label));
}

function sizeBar(local, remote, max) {
  const w = (v) => (max > 0 ? (100 * v) / max : 0) + "%";
  return h("div", { class: "bar", title: `local ${bytes(local)}, remote ${bytes(remote)}` },
    h("div", { class: "local", style: `width:${w(local)}` }), h("div", { class: "remote", style: `width:${w(remote)}` }));
}

function legend() {
  return h("div", { class: "legend muted" }, h("span", { style: "background:var(--local)" }), "local disk",
    h("span", { style: "background:var(--remote)" }), "object store");
}

// A chart of series over time: [{name, color, points: [[x, y]]}], y formatted by fmt.
function lineChart(series, fmt, id) {
  const W = 800, H = 220, L = 70, B = 24;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y1 = Math.max(1, ...ys);
  const X = (x) => L + ((x - x0) / Math.max(1, x1 - x0)) * (W - L - 10);
  const Y = (y) => H - B - (y / y1) * (H - B - 10);
  const grid = [0, 0.5, 1].map((f) => [svg("line", { x1: L, x2: W - 10, y1: Y(f * y1), y2: Y(f * y1), stroke: "#e5e7eb" }),
    svg("text", { x: L - 6, y: Y(f * y1) + 4, "text-anchor": "end", "font-size": 11, fill: "#667085" }, fmt(f * y1))]);
  const lines = series.map((s) => svg("polyline", { fill: "none", stroke: s.color, "stroke-width": 2,
    points: s.points.map((p) => `${X(p[0])},${Y(p[1])}`).join(" ") }));
  const keys = series.map((s, i) => svg("text", { x: L + 10 + i * 200, y: 14, "font-size": 12, fill: s.color }, s.name));
  // The time axis: clock times (this browser's) at the start, middle and end.
  const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const axis = [0, 0.5, 1].map((f, i) => svg("text", { x: X(x0 + f * (x1 - x0)), y: H - 6, "font-size": 11, fill: "#667085",
    "text-anchor": ["start", "middle", "end"][i], "data-axis": "time" }, clock(x0 + f * (x1 - x0))));
  return h("div", { class: "chart", "data-chart": id }, svg("svg", { viewBox: `0 0 ${W} ${H}` }, grid, lines, keys, axis));
}

// Horizontal bars: [{label, value}], for lag per partition.
function barChart(items, id) {
  const max = Math.max(1, ...items.map((i) => i.value));
  const W = 800, row = 22, H = items.length * row + 8, L = 160;
  const bars = items.map((it, i) => [
    svg("text", { x: L - 8, y: i * row + 16, "text-anchor": "end", "font-size": 12, fill: "#1d2430" }, it.label),
    svg("rect", { x: L, y: i * row + 4, height: row - 8, width: Math.max(1, ((W - L - 80) * it.value) / max), fill: "#4f46e5", "data-value": it.value }),
    svg("text", { x: L + 6 + ((W - L - 80) * it.value) / max, y: i * row + 16, "font-size": 12, fill: "#667085" }, String(it.value)),
  ]);
  return h("div", { class: "chart", "data-chart": id }, svg("svg", { viewBox: `0 0 ${W} ${H}`, style: `height:${H}px` }, bars));
}

function confirmAction(text) {
  const box = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  box.hidden = false;
  return new Promise((resolve) => {
    const done = (answer) => { box.hidden = true; yes.onclick = no.onclick = null; resolve(answer); };
    const yes = document.getElementById("confirm-yes"), no = document.getElementById("confirm-no");
    yes.onclick = () => done(true);
    no.onclick = () => done(false);
  });
}

function message(kind, text) {
  return h("div", { class: kind, "data-message": kind }, text);
}

// ---- pages ----

async function overview(page) {
  const o = await api("/overview");
  const alive = o.brokers.filter((b) => b.alive).length;
  fill(page, 
    h("h1", {}, "Overview"),
    h("div", { class: "cards" },
      card("brokers alive", `${alive}/${o.brokers.length}`, "brokers"),
      card("controller", o.controller ? o.controller.broker_id : "none", "controller"),
      card("topics", o.topics, "topics"), card("partitions", o.partitions, "partitions"),
      card("under-replicated", o.under_replicated.length, "under_replicated"),
      card("offline", o.offline.length, "offline"),
      card("upload lag", bytes(o.upload_lag_bytes), "upload_lag")),
    h("h2", {}, "Traffic (bytes/s, last minutes)"),
    o.rates.length < 2 ? h("p", { class: "muted", "data-chart": "rates" }, `Collecting: a point every ${o.rate_interval_secs} s.`)
      : lineChart([
        { name: "produce", color: "#3b82f6", points: o.rates.map((r) => [r.time_ms, r.produce_bytes_per_sec]) },
        { name: "fetch", color: "#f59e0b", points: o.rates.map((r) => [r.time_ms, r.fetch_bytes_per_sec]) },
      ], (v) => bytes(v) + "/s", "rates"),
    h("h2", {}, "Brokers"), brokerTable(o.brokers, o.controller),
    h("h2", {}, "Partitions needing attention"),
    o.under_replicated.length + o.offline.length === 0 ? h("p", { class: "ok" }, "Every partition has a leader and a full ISR.")
      : table(["Topic", "Partition", "State"], [
        ...o.offline.map((p) => h("tr", {}, h("td", {}, h("a", { href: `#/topic/${encodeURIComponent(p.topic)}` }, p.topic)), h("td", {}, p.partition), h("td", { class: "bad" }, "offline"))),
        ...o.under_replicated.map((p) => h("tr", {}, h("td", {}, h("a", { href: `#/topic/${encodeURIComponent(p.topic)}` }, p.topic)), h("td", {}, p.partition), h("td", { class: "bad" }, "under-replicated"))),
      ]));
  refreshTimer = setTimeout(route, 5000);
}

function brokerTable(brokers, controller) {
  return table(["Broker", "State", "Lease left (ms)#", "Leader of#", "Replicas#", "Moving#", "Endpoints"], brokers.map((b) =>
    h("tr", { "data-broker": b.broker_id },
      h("td", {}, String(b.broker_id), b.this_broker ? h("span", { class: "muted" }, " (this)") : null,
        controller && controller.broker_id === b.broker_id ? h("span", { class: "muted" }, " controller") : null),
      h("td", { class: b.alive ? "ok" : "bad", "data-field": "alive" }, b.alive ? "alive" : "lease expired"),
      num(b.lease_remaining_ms, "lease_remaining_ms"), num(b.leader_partitions, "leader_partitions"), num(b.replica_partitions, "replica_partitions"),
      h("td", { class: "num", "data-field": "moving_partitions", "data-value": String(b.moving_partitions) },
        String(b.moving_partitions), b.decommissioned ? h("span", { class: "bad" }, " decommissioned") : null),
      h("td", {}, Object.entries(b.endpoints).map(([k, v]) => k === "http" ? h("div", {}, h("a", { href: `http://${v}/` }, `${k} ${v}`)) : h("div", {}, `${k} ${v}`))))));
}

async function brokersPage(page) {
  const c = await api("/cluster");
  fill(page, h("h1", {}, "Brokers"), h("p", { class: "muted" }, `Cluster ${c.cluster_id}`), brokerTable(c.brokers, c.controller));
}

async function topicsPage(page) {
  const { topics } = await api("/topics");
  const max = Math.max(0, ...topics.map((t) => t.local_bytes + t.remote_bytes));
  fill(page, h("h1", {}, "Topics"), legend(),
    table(["Topic", "Partitions#", "Replication#", "Retention", "Local retention", "Tiered", "Local#", "Remote#", "Size"], topics.map((t) =>
      h("tr", { "data-topic": t.name },
        h("td", {}, h("a", { href: `#/topic/${encodeURIComponent(t.name)}` }, t.name)),
        num(t.partition_count, "partition_count"), num(t.replication_factor, "replication_factor"),
        retention(t.retention_ms, t.retention_bytes, "retention"),
        retention(t.local_retention_ms, t.local_retention_bytes, "local_retention"),
        h("td", {}, t.remote_storage_enable ? "yes" : "no"),
        h("td", { class: "num", "data-field": "local_bytes", "data-value": t.local_bytes }, bytes(t.local_bytes)),
        h("td", { class: "num", "data-field": "remote_bytes", "data-value": t.remote_bytes }, bytes(t.remote_bytes)),
        h("td", {}, sizeBar(t.local_bytes, t.remote_bytes, max))))),
    topics.length ? null : h("p", { class: "muted" }, "No topics yet."));
}

function recordRows(records) {
  const show = (v) => (v === null ? h("span", { class: "muted" }, "null")
    : h("pre", { "data-encoding": v.encoding }, v.encoding === "json" ? JSON.stringify(v.data) : v.data));
  return records.map((r) => h("tr", { "data-offset": r.offset },
    num(r.partition, "partition"), num(r.offset, "offset"), h("td", {}, new Date(r.timestamp).toISOString()),
    h("td", { "data-field": "key" }, show(r.key)), h("td", { "data-field": "value" }, show(r.value)),
    h("td", {}, r.headers.map((x) => h("div", {}, `${x.key}: `, x.value ? x.value.data : "null")))));
}

function timeParam(input) {
  if (!input.value) return null;
  const t = Date.parse(input.value);
  return isNaN(t) ? Number(input.value) : t;
}

async function topicPage(page, name) {
  const t = await api(`/topics/${encodeURIComponent(name)}`);
  const maxPart = Math.max(0, ...t.partitions.map((p) => (p.local_bytes || 0) + (p.remote_bytes || 0)));
  fill(page, h("h1", {}, `Topic ${t.name}`),
    h("div", { class: "cards" }, card("partitions", t.partition_count, "partitions"), card("replication", t.replication_factor, "replication"),
      card("local", bytes(t.local_bytes), "local"), card("remote", bytes(t.remote_bytes), "remote"), card("retention", duration(t.retention_ms), "retention")),
    h("h2", {}, "Partitions"),
    legend(),
    table(["Partition#", "Leader#", "ISR", "Log start#", "Local log start#", "High watermark#", "Log end#", "Local#", "Remote#", "Size"], t.partitions.map((p) =>
      h("tr", { "data-partition": p.partition },
        num(p.partition, "partition"), num(p.leader, "leader"), h("td", { "data-field": "isr" }, p.isr.join(",")),
        num(p.log_start_offset, "log_start_offset"), num(p.local_log_start_offset, "local_log_start_offset"),
        num(p.high_watermark, "high_watermark"), num(p.log_end_offset, "log_end_offset"),
        h("td", { class: "num", "data-field": "local_bytes", "data-value": p.local_bytes ?? "" }, bytes(p.local_bytes)),
        h("td", { class: "num", "data-field": "remote_bytes", "data-value": p.remote_bytes ?? "" }, bytes(p.remote_bytes)),
        h("td", {}, sizeBar(p.local_bytes || 0, p.remote_bytes || 0, maxPart))))),
    t.table ? tableSection(t.table) : null,
    h("h2", {}, "Configs"), configEditor(t),
    h("h2", {}, "Records"), recordBrowser(t),
    h("h2", {}, "Find by key"), keySearch(t));
}

// The topic's Iceberg table (iceberg.mode set): where it is, what it holds, and how
// far each partition's records lag behind in it.
function tableSection(tb) {
  if (tb.error) return h("div", {}, h("h2", {}, "Iceberg table"), message("error", tb.error));
  const last = tb.last_commit_ms < 0 ? "never" : new Date(tb.last_commit_ms).toISOString();
  return h("div", { "data-table": tb.location },
    h("h2", {}, "Iceberg table"),
    h("p", { class: "muted" }, tb.location),
    h("div", { class: "cards" }, card("rows", tb.rows, "table_rows"), card("data files", tb.data_files, "table_files"),
      card("bytes", bytes(tb.bytes), "table_bytes"), card("last commit", last, "table_last_commit")),
    table(["Partition#", "Next offset#", "Lag (offsets)#", "Lag (s)#"], tb.partitions.map((p) =>
      h("tr", { "data-table-partition": p.partition },
        num(p.partition, "partition"), num(p.next_offset, "next_offset"), num(p.lag_offsets, "lag_offsets"),
        num((p.lag_ms / 1000).toFixed(1), "lag_seconds")))));
}

function configEditor(t) {
  const status = h("div", {});
  const rows = t.configs.map((c) => {
    const input = h("input", { value: c.value, "data-config": c.name, size: 24 });
    const save = h("button", { type: "button", "data-save": c.name, onclick: async () => {
      status.replaceChildren();
      if (!(await confirmAction(`Set ${c.name} of topic '${t.name}' to '${input.value}'?`))) return;
      try {
        await send("PATCH", `/topics/${encodeURIComponent(t.name)}/configs`, { set: { [c.name]: input.value } });
        status.replaceChildren(message("notice", `${c.name} set to ${input.value}.`));
        setTimeout(route, 800);
      } catch (e) { status.replaceChildren(message("error", `${e.code || "ERROR"}: ${e.message}`)); }
    } }, "Save");
    // Kafka's "no limit" is the largest 64-bit value: say what it means.
    const means = c.value === "9223372036854775807" ? h("span", { class: "muted", "data-means": c.name }, c.name.endsWith(".ms") ? " forever" : " unlimited") : null;
    return h("tr", {}, h("td", {}, c.name), h("td", {}, input, means), h("td", { class: "muted", "data-source": c.name }, c.source), h("td", {}, save));
  });
  return h("div", {}, status, table(["Name", "Value", "Source", ""], rows));
}

function recordBrowser(t) {
  const partition = h("select", { id: "rec-partition" }, t.partitions.map((p) => h("option", { value: p.partition }, `partition ${p.partition}`)));
  const offset = h("input", { id: "rec-offset", placeholder: "log start", size: 10 });
  const time = h("input", { id: "rec-time", placeholder: "2026-12-01T10:00:00Z or ms", size: 26 });
  const format = h("select", { id: "rec-format" }, ["utf8", "json", "hex"].map((f) => h("option", { value: f }, f)));
  const out = h("div", { id: "rec-out" });
  const read = async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ count: "50", format: format.value });
    if (offset.value) q.set("offset", offset.value);
    const ts = timeParam(time);
    if (ts !== null && !offset.value) q.set("timestamp", ts);
    try {
      const r = await api(`/topics/${encodeURIComponent(t.name)}/partitions/${partition.value}/records?${q}`);
      out.replaceChildren(h("p", { class: "muted" }, `${r.records.length} records; next offset ${r.next_offset}, high watermark ${r.high_watermark}.`),
        table(["Partition#", "Offset#", "Time", "Key", "Value", "Headers"], recordRows(r.records), { id: "rec-table" }));
      if (r.records.length) offset.value = r.next_offset;
    } catch (e) { out.replaceChildren(message("error", `${e.code || "ERROR"}: ${e.message}`)); }
  };
  return h("div", {}, h("form", { class: "inline", onsubmit: read },
    h("label", {}, "Partition", partition), h("label", {}, "From offset", offset), h("label", {}, "or from time", time),
    h("label", {}, "Show as", format), h("button", { type: "submit", id: "rec-read" }, "Read")), out);
}

function keySearch(t) {
  const key = h("input", { id: "find-key", placeholder: "key", size: 24 });
  const from = h("input", { id: "find-from", placeholder: "from time", size: 22 });
  const to = h("input", { id: "find-to", placeholder: "to time", size: 22 });
  const out = h("div", { id: "find-out" });
  const find = async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ key: key.value });
    const f = timeParam(from), u = timeParam(to);
    if (f !== null) q.set("from_time", f);
    if (u !== null) q.set("to_time", u);
    try {
      const r = await api(`/topics/${encodeURIComponent(t.name)}/find?${q}`);
      out.replaceChildren(h("p", { class: "muted", id: "find-stats", "data-found": r.records.length },
        `${r.records.length} records${r.truncated ? " (more not shown)" : ""}; ${r.segments_searched} segments searched, ${r.segments_skipped} skipped by their key filter or time, ${r.segments_matched} matched, ${r.segments_without_filter} without a filter; ${r.remote_gets} object-store GETs.`),
        table(["Partition#", "Offset#", "Time", "Key", "Value", "Headers"], recordRows(r.records), { id: "find-table" }));
    } catch (e) { out.replaceChildren(message("error", `${e.code || "ERROR"}: ${e.message}`)); }
  };
  return h("div", {}, h("form", { class: "inline", onsubmit: find },
    h("label", {}, "Key", key), h("label", {}, "From", from), h("label", {}, "To", to), h("button", { type: "submit", id: "find-go" }, "Find")), out);
}

async function groupsPage(page) {
  const { groups } = await api("/groups");
  fill(page, h("h1", {}, "Consumer groups"),
    table(["Group", "State", "Members#", "Coordinator#"], groups.map((g) => h("tr", { "data-group": g.group },
      h("td", {}, h("a", { href: `#/group/${encodeURIComponent(g.group)}` }, g.group)), h("td", { "data-field": "state" }, g.state),
      num(g.members, "members"), num(g.coordinator, "coordinator")))),
    groups.length ? null : h("p", { class: "muted" }, "No groups yet."));
}

async function groupPage(page, name) {
  const g = await api(`/groups/${encodeURIComponent(name)}`);
  const status = h("div", {});
  const to = h("select", { id: "reset-to" }, ["earliest", "latest", "offset", "timestamp"].map((x) => h("option", { value: x }, x)));
  const value = h("input", { id: "reset-value", placeholder: "offset or time", size: 22 });
  const topics = [...new Set(g.partitions.map((p) => p.topic))];
  const topic = h("select", { id: "reset-topic" }, h("option", { value: "" }, "every committed partition"), topics.map((x) => h("option", { value: x }, x)));
  const reset = async (ev) => {
    ev.preventDefault();
    const body = { to: to.value };
    if (topic.value) body.topic = topic.value;
    if (to.value === "offset") body.offset = Number(value.value);
    if (to.value === "timestamp") body.timestamp = timeParam(value);
    if (!(await confirmAction(`Reset the offsets of group '${name}' to ${to.value} ${value.value}?`))) return;
    try {
      const r = await send("POST", `/groups/${encodeURIComponent(name)}/reset-offsets`, body);
      status.replaceChildren(message("notice", `Reset ${r.offsets.length} partitions.`));
      setTimeout(route, 800);
    } catch (e) { status.replaceChildren(message("error", `${e.code || "ERROR"}: ${e.message}`)); }
  };
  fill(page, h("h1", {}, `Group ${g.group}`),
    h("div", { class: "cards" }, card("state", g.state, "state"), card("members", g.members.length, "members"),
      card("generation", g.generation, "generation"), card("total lag", g.total_lag, "total_lag")),
    h("h2", {}, "Lag per partition"),
    g.partitions.length ? barChart(g.partitions.map((p) => ({ label: `${p.topic}-${p.partition}`, value: p.lag ?? 0 })), "lag") : null,
    table(["Topic", "Partition#", "Committed#", "High watermark#", "Lag#", "Member"], g.partitions.map((p) =>
      h("tr", { "data-partition": `${p.topic}-${p.partition}` }, h("td", {}, h("a", { href: `#/topic/${encodeURIComponent(p.topic)}` }, p.topic)),
        num(p.partition, "partition"), num(p.committed_offset, "committed_offset"), num(p.high_watermark, "high_watermark"), num(p.lag, "lag"),
        h("td", { class: "muted" }, p.member_id || "")))),
    h("h2", {}, "Members"),
    g.members.length ? table(["Member", "Instance", "Client", "Host", "Assignment"], g.members.map((m) => h("tr", {},
      h("td", {}, m.member_id), h("td", {}, m.group_instance_id || ""), h("td", {}, m.client_id), h("td", {}, m.client_host),
      h("td", {}, m.assignment.map((a) => `${a.topic}: ${a.partitions.join(",")}`).join("; ")))))
      : h("p", { class: "muted", "data-empty": "members" }, "No members: nobody consumes as this group now (its committed offsets stay)."),
    h("h2", {}, "Reset offsets"),
    h("p", { class: "muted" }, "Only while the group has no members."),
    status, h("form", { class: "inline", onsubmit: reset },
      h("label", {}, "To", to), h("label", {}, "Offset or time", value), h("label", {}, "Topic", topic),
      h("button", { type: "submit", id: "reset-go", class: "danger" }, "Reset")));
}

// The login form, shown for any view while the listener wants a user.
function loginPage(page) {
  const user = h("input", { id: "login-user", autocomplete: "username", required: true });
  const password = h("input", { id: "login-password", type: "password", autocomplete: "current-password" });
  const status = h("div", { id: "login-status" });
  const submit = async (ev) => {
    ev.preventDefault();
    try {
      await send("POST", "/login", { user: user.value, password: password.value });
      await showCaller();
      showCluster();
      route();
    } catch (e) { status.replaceChildren(message("error", `${e.code || "ERROR"}: ${e.message}`)); }
  };
  fill(page, h("h1", {}, "Log in"), h("p", { class: "muted" }, "This console needs a Shale user (as made by shale user create)."),
    status, h("form", { class: "inline", id: "login-form", onsubmit: submit },
      h("label", {}, "User", user), h("label", {}, "Password", password), h("button", { type: "submit", id: "login-go" }, "Log in")));
}

const ACL_FIELDS = {
  resource_type: ["TOPIC", "GROUP", "CLUSTER"],
  pattern_type: ["LITERAL", "PREFIXED"],
  operation: ["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "CLUSTER_ACTION", "IDEMPOTENT_WRITE", "ALL"],
  permission: ["ALLOW", "DENY"],
};

async function aclsPage(page) {
  const { acls, authorization_enabled } = await api("/acls");
  const status = h("div", { id: "acl-status" });
  const choice = (name) => h("select", { id: `acl-${name}` }, ACL_FIELDS[name].map((x) => h("option", { value: x }, x)));
  const f = { resource_type: choice("resource_type"), resource_name: h("input", { id: "acl-resource_name", placeholder: "logs. or kafka-cluster", size: 18 }),
    pattern_type: choice("pattern_type"), principal: h("input", { id: "acl-principal", placeholder: "User:alice", size: 18 }),
    host: h("input", { id: "acl-host", value: "*", size: 10 }), operation: choice("operation"), permission: choice("permission") };
  const fail = (e) => status.replaceChildren(message("error", `${e.code || "ERROR"}: ${e.message}`));
  const add = async (ev) => {
    ev.preventDefault();
    const body = Object.fromEntries(Object.entries(f).map(([k, el]) => [k, el.value]));
    if (body.resource_type === "CLUSTER" && !body.resource_name) body.resource_name = "kafka-cluster";
    try { await send("POST", "/acls", body); route(); } catch (e) { fail(e); }
  };
  const remove = async (a) => {
    if (!(await confirmAction(`Remove ${a.permission} ${a.operation} on ${a.resource_type} ${a.resource_name} for ${a.principal}?`))) return;
    try { await send("POST", "/acls/delete", a); route(); } catch (e) { fail(e); }
  };
  const key = (a) => [a.principal, a.permission, a.operation, a.resource_type, a.pattern_type, a.resource_name, a.host].join("|");
  fill(page, h("h1", {}, "ACLs"),
    h("p", { class: "muted" }, "Who may do what, as Kafka's ACLs: DENY wins; super users may do everything."),
    authorization_enabled ? null : message("notice", "Authorization is off ([authorization] enable = false): every operation is allowed, "
      + "and these bindings take effect only once it is on."),
    status,
    table(["Principal", "Permission", "Operation", "Resource", "Pattern", "Name", "Host", ""], acls.map((a) => h("tr", { "data-acl": key(a) },
      h("td", {}, a.principal), h("td", { class: a.permission === "DENY" ? "bad" : "ok" }, a.permission), h("td", {}, a.operation),
      h("td", {}, a.resource_type), h("td", {}, a.pattern_type), h("td", {}, a.resource_name), h("td", {}, a.host),
      h("td", {}, h("button", { type: "button", class: "secondary", "data-remove": key(a), onclick: () => remove(a) }, "Remove"))))),
    acls.length ? null : h("p", { class: "muted" }, "No bindings."),
    h("h2", {}, "Add a binding"),
    h("form", { class: "inline", id: "acl-form", onsubmit: add },
      h("label", {}, "Principal", f.principal), h("label", {}, "Permission", f.permission), h("label", {}, "Operation", f.operation),
      h("label", {}, "Resource", f.resource_type), h("label", {}, "Pattern", f.pattern_type), h("label", {}, "Name", f.resource_name),
      h("label", {}, "Host", f.host), h("button", { type: "submit", id: "acl-add" }, "Add")));
}

// Who is logged in, and a way out, in the header.
async function showCaller() {
  const who = await api("/whoami").catch(() => null);
  const box = document.getElementById("caller");
  if (!who || !who.login_required || !who.principal) { box.replaceChildren(); return who; }
  const out = async () => { await send("POST", "/logout", {}); box.replaceChildren(); route(); };
  box.replaceChildren(h("span", { id: "principal" }, who.principal), " ", h("button", { type: "button", class: "secondary", id: "logout", onclick: out }, "Log out"));
  return who;
}

async function route() {
  clearTimeout(refreshTimer);
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ""));
  const [view, ...rest] = hash.split("/");
  const arg = rest.join("/");
  const pages = { "": ["overview", overview], topics: ["topics", topicsPage], topic: ["topic", topicPage],
    groups: ["groups", groupsPage], group: ["group", groupPage], brokers: ["brokers", brokersPage], acls: ["acls", aclsPage] };
  const [id, render] = pages[view] || ["overview", overview];
  const page = h("main", { id: "page", "data-page": "loading" });
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === id || a.dataset.nav === id + "s"));
  let shown = id;
  try {
    await render(page, arg);
  } catch (e) {
    if (e.code === "UNAUTHENTICATED") {
      shown = "login";
      page.replaceChildren();
      loginPage(page);
    } else {
      page.replaceChildren(h("h1", {}, "Error"), message("error", `${e.code || "ERROR"}: ${e.message}`));
    }
  }
  page.dataset.page = shown;
  document.getElementById("page").replaceWith(page);
  document.title = `Shale · ${id}${arg ? " " + arg : ""}`;
}

function showCluster() {
  api("/cluster").then((c) => { document.getElementById("cluster").textContent = `cluster ${c.cluster_id} · broker ${c.this_broker}`; }).catch(() => {});
}

showCluster();
showCaller();
window.addEventListener("hashchange", route);
route();
