// The queue's page: it reads the JSON API beside it and writes every value
// through textContent, never as HTML.
"use strict";

const refreshEvery = 5000; // ms
let writes = false;

// unprintable matches what idemq's text escapes: C0 and C1 controls, DEL,
// and the format characters (bidi overrides and isolates, zero widths, line
// separators, tags) that would reorder or hide what the page shows.
const unprintable = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]|[\u{e0000}-\u{e007f}]|[\ud800-\udfff]/gu;

// printable returns s with every unprintable character escaped as Go
// writes it in a string literal: \x1b, \u202e, \U000e0001.
function printable(s) {
  return String(s).replace(unprintable, (c) => {
    const n = c.codePointAt(0);
    if (n < 0x80) return "\\x" + n.toString(16).padStart(2, "0");
    if (n <= 0xffff) return "\\u" + n.toString(16).padStart(4, "0");
    return "\\U" + n.toString(16).padStart(8, "0");
  });
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = printable(text);
  if (cls) e.className = cls;
  return e;
}

async function api(path, init) {
  const res = await fetch(path, Object.assign({ headers: { Accept: "application/json" } }, init));
  const body = await res.json().catch(() => ({ error: res.status + " " + res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function params() {
  return new URLSearchParams(window.location.search);
}

function setStatus(text, isError) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

function fmtTime(t) {
  return t ? t.replace("T", " ").replace(/\.\d+/, "") : "-";
}

function fmtAge(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

function last(r) {
  const parts = [];
  if (r.last_class) parts.push(r.last_class);
  if (r.last_status) parts.push(r.last_status);
  return parts.length ? parts.join(" ") : "-";
}

async function loadStats() {
  const st = await api("api/stats");
  const counts = document.getElementById("counts");
  counts.replaceChildren();
  for (const name of ["pending", "in_flight", "done", "failed", "expired"]) {
    const d = el("div", undefined, "count");
    d.id = "count-" + name;
    d.append(el("dt", name), el("dd", st.counts[name] || 0));
    counts.append(d);
  }
  const total = el("div", undefined, "count");
  total.append(el("dt", "total"), el("dd", st.total));
  counts.append(total);
  document.getElementById("oldest").textContent =
    "Oldest pending: " + (st.oldest_pending_seconds > 0 ? fmtAge(st.oldest_pending_seconds) : "-");
  const hz = st.horizon;
  let text = "Horizon at risk: " + hz.at_risk.length + " within " + hz.within +
    " (retention " + hz.retention + ", margin " + hz.margin + ")";
  if (hz.at_risk.length) text += ": " + hz.at_risk.slice(0, 10).join(", ") + (hz.at_risk.length > 10 ? " …" : "") +
    "; soonest " + fmtTime(hz.soonest_deadline);
  document.getElementById("horizon").textContent = text;
}

async function loadRecords() {
  const p = params();
  const q = new URLSearchParams();
  if (p.get("state")) q.set("state", p.get("state"));
  if (p.has("lane") && p.get("lane") !== "") q.set("lane", p.get("lane") === "-" ? "" : p.get("lane"));
  q.set("limit", "200");
  const list = await api("api/records?" + q.toString());
  const body = document.querySelector("#records tbody");
  body.replaceChildren();
  const selected = p.get("id");
  for (const r of list.records) {
    const tr = el("tr");
    tr.dataset.id = r.id;
    tr.dataset.state = r.state;
    tr.dataset.lane = printable(r.lane);
    if (String(r.id) === selected) tr.className = "selected";
    tr.append(
      el("td", r.id, "id"),
      el("td", r.state, "state state-" + r.state),
      el("td", r.outcome === null ? "-" : r.outcome, "outcome"),
      el("td", r.lane === "" ? "-" : r.lane, "lane"),
      el("td", r.attempts, "attempts"),
      el("td", r.method ? r.method + " " + r.url : "(intent lost: damaged)", "request"),
      el("td", last(r), "last"),
      el("td", fmtTime(r.enqueued_at), "enqueued"),
    );
    tr.addEventListener("click", () => select(r.id));
    body.append(tr);
  }
  document.getElementById("more").textContent =
    list.records.length + (list.records.length === 1 ? " record" : " records") + " shown" + (list.next ? " (more after " + list.next + ")" : "");
}

function select(id) {
  const p = params();
  p.set("id", id);
  history.replaceState(null, "", "?" + p.toString());
  refresh();
}

function field(dl, name, value) {
  dl.append(el("dt", name), el("dd", value === undefined || value === null || value === "" ? "-" : value));
}

async function loadDetail() {
  const id = params().get("id");
  const sec = document.getElementById("detail");
  if (!id) {
    sec.hidden = true;
    return;
  }
  const r = await api("api/records/" + encodeURIComponent(id));
  sec.hidden = false;
  document.getElementById("detail-title").textContent = "Record " + r.id;
  const dl = document.getElementById("detail-fields");
  dl.replaceChildren();
  field(dl, "state", r.state);
  field(dl, "outcome", r.outcome);
  field(dl, "lane", r.lane === "" ? "-" : r.lane);
  if (r.method) {
    field(dl, "request", r.method + " " + r.url);
    field(dl, "key", r.key_source === "none" ? "none" : (r.key || "hidden") + " (" + r.key_source + ")");
    if (r.headers) field(dl, "headers", r.headers.join(", "));
    field(dl, "body", r.body_bytes + " bytes (not shown)");
  } else {
    field(dl, "request", "lost: the record was damaged");
  }
  field(dl, "attempts", r.attempts);
  field(dl, "in doubt", r.in_doubt ? "yes" : "no");
  field(dl, "last attempt", fmtTime(r.last_attempt_at));
  field(dl, "last class", r.last_class);
  field(dl, "last status", r.last_status);
  field(dl, "last error", r.last_error);
  field(dl, "enqueued", fmtTime(r.enqueued_at));
  field(dl, "first sent", fmtTime(r.first_sent_at));
  if (r.next_attempt) field(dl, "next attempt", fmtTime(r.next_attempt));
  if (r.settled_at) field(dl, "settled", fmtTime(r.settled_at));
  if (r.reason) field(dl, "reason", r.reason);
  if (r.result) {
    field(dl, "result", r.result.status + " (" + (r.result.content_type ? r.result.content_type + ", " : "") +
      r.result.body_bytes + " bytes" + (r.result.truncated ? ", truncated" : "") + ")");
  }
  if (r.resubmitted_as) field(dl, "resubmitted as", r.resubmitted_as);
  if (r.damaged) field(dl, "damaged", "yes");
  document.getElementById("detail-actions").hidden = !writes;
}

async function act(path, what) {
  if (!window.confirm(what + "?")) return;
  try {
    await api(path, { method: "POST" });
    setStatus(what + ": done", false);
  } catch (e) {
    setStatus(what + ": " + e.message, true);
  }
  refresh();
}

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    await Promise.all([loadStats(), loadRecords(), loadDetail()]);
    setStatus("updated " + new Date().toLocaleTimeString(), false);
  } catch (e) {
    setStatus("error: " + e.message, true);
  } finally {
    busy = false;
  }
}

async function start() {
  const p = params();
  // Set as attributes too, so that the document says which filter it shows.
  const state = document.getElementById("filter-state");
  for (const opt of state.options) {
    if (opt.value === (p.get("state") || "")) opt.setAttribute("selected", "");
  }
  state.value = p.get("state") || "";
  const lane = document.getElementById("filter-lane");
  lane.setAttribute("value", p.get("lane") || "");
  lane.value = p.get("lane") || "";
  document.getElementById("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = params();
    const state = document.getElementById("filter-state").value;
    const lane = document.getElementById("filter-lane").value;
    state ? q.set("state", state) : q.delete("state");
    lane ? q.set("lane", lane) : q.delete("lane");
    history.replaceState(null, "", "?" + q.toString());
    refresh();
  });
  try {
    writes = (await api("api/config")).writes;
  } catch (e) {
    writes = false;
  }
  const reset = document.getElementById("reset-clock");
  reset.hidden = !writes;
  reset.addEventListener("click", () => act("api/reset-clock", "Reset the clock mark"));
  document.getElementById("discard").addEventListener("click", () =>
    act("api/records/" + params().get("id") + "/discard", "Discard record " + params().get("id")));
  document.getElementById("resubmit").addEventListener("click", () =>
    act("api/records/" + params().get("id") + "/resubmit", "Resubmit record " + params().get("id")));
  await refresh();
  window.setInterval(refresh, refreshEvery);
}

start();
