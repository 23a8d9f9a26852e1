// The Rowgate console: one page, Preact with htm (vendored), no build step. It signs in with
// client credentials at /oauth/token and sends the token as a bearer token to the console's
// API (/_/api/), the REST API (tables are browsed and edited with the role's own grants) and
// /realtime/sse.
import { html, render, useState, useEffect, useRef, useCallback } from "./htm-preact-3.1.1.js";

const TOKEN = "rowgate.console.token";

// ---- talking to the server -------------------------------------------------------------------

/** An answer that was not 2xx, with the server's JSON error envelope when it sent one. */
class Failure extends Error {
  constructor(status, body) {
    const text = body && typeof body === "object"
      ? [body.message || body.error_description || body.error, body.details, body.hint].filter(Boolean).join(" — ")
      : String(body || "");
    super(`${status}${body && body.code ? " " + body.code : ""}: ${text || "request failed"}`);
    this.status = status;
    this.body = body;
  }
}

let onSignedOut = () => {};

/** fetch with the session's token; JSON in and out; throws a Failure for a status >= 400. */
async function call(path, { method = "GET", body, headers = {}, text = false } = {}) {
  const sent = { ...headers };
  const token = sessionStorage.getItem(TOKEN);
  if (token) sent.Authorization = `Bearer ${token}`;
  if (body !== undefined && typeof body !== "string") {
    sent["Content-Type"] = "application/json";
    body = JSON.stringify(body);
  }
  const res = await fetch(path, { method, headers: sent, body });
  const raw = await res.text();
  let parsed = raw;
  if (!text && raw && (res.headers.get("content-type") || "").includes("json")) {
    try { parsed = JSON.parse(raw); } catch (_) { /* left as text */ }
  }
  if (res.status === 401 && token) {
    sessionStorage.removeItem(TOKEN);
    onSignedOut("Your session ended (the token expired or its client was revoked). Sign in again.");
  }
  if (res.status >= 400) throw new Failure(res.status, parsed);
  return { status: res.status, headers: res.headers, body: parsed };
}

function useAsync() {
  const [error, setError] = useState(null);
  const run = useCallback(async (work) => {
    setError(null);
    try { return await work(); } catch (e) { setError(e.message); return undefined; }
  }, []);
  return [error, run, setError];
}

const ErrorBox = ({ error }) => error ? html`<div class="error" role="alert">${error}</div>` : null;

// ---- routing by the URL's hash ---------------------------------------------------------------

function useHash() {
  const [hash, setHash] = useState(location.hash || "#/dashboard");
  useEffect(() => {
    const changed = () => setHash(location.hash || "#/dashboard");
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return hash.slice(2).split("/").map(decodeURIComponent);
}

// ---- sign in ---------------------------------------------------------------------------------

function Login({ onSession, message }) {
  const [id, setId] = useState("");
  const [secret, setSecret] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, run] = useAsync();
  const submit = (e) => {
    e.preventDefault();
    setBusy(true);
    run(async () => {
      const form = new URLSearchParams({ grant_type: "client_credentials", client_id: id.trim(), client_secret: secret.trim() });
      const got = await call("/oauth/token", {
        method: "POST", body: form.toString(),
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
      });
      sessionStorage.setItem(TOKEN, got.body.access_token);
      try {
        onSession((await call("/_/api/session")).body);
      } catch (e) {
        sessionStorage.removeItem(TOKEN);
        throw e;
      }
    }).finally(() => setBusy(false));
  };
  return html`<form class="panel login" onSubmit=${submit} aria-label="sign in">
    <h2>Rowgate console</h2>
    <p class="muted">Sign in with the credentials of a client whose role is in <code>console.roles</code>:
      on <code>rowgate serve --demo</code>, <code>rowgate clients add admin --role admin --demo</code>
      in the server's working directory; on another database, the same with the server's
      <code>--config</code> or <code>--db</code> in place of <code>--demo</code>.</p>
    ${message && html`<div class="notice">${message}</div>`}
    <${ErrorBox} error=${error} />
    <label for="client-id">Client id</label>
    <input id="client-id" name="client_id" autocomplete="username" value=${id} onInput=${(e) => setId(e.target.value)} required />
    <label for="client-secret">Client secret</label>
    <input id="client-secret" name="client_secret" type="password" autocomplete="current-password" value=${secret}
      onInput=${(e) => setSecret(e.target.value)} required />
    <p><button class="primary" type="submit" disabled=${busy}>Sign in</button></p>
  </form>`;
}

// ---- dashboard -------------------------------------------------------------------------------

/** Prometheus text → [{name, labels, value}]. */
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({ name: m[1], labels, value: parseFloat(m[3]) });
  }
  return samples;
}

/** What the dashboard shows of one scrape. */
function snapshot(samples) {
  const workers = {};
  const worker = (pid) => (workers[pid] ||= { pid, requests: 0, errors: 0, open: 0, websockets: 0, rss: 0 });
  const buckets = {};
  const routes = {};
  let restarts = 0;
  let supervisor = null;
  for (const { name, labels, value } of samples) {
    const route = () => {
      const key = `${labels.route}${labels.name ? " " + labels.name : ""}`;
      return (routes[key] ||= { key, requests: 0, errors: 0, seconds: 0, count: 0 });
    };
    switch (name) {
      case "rowgate_requests_total": {
        const failed = /^[45]/.test(labels.status || "");
        worker(labels.pid).requests += value;
        if (failed) worker(labels.pid).errors += value;
        route().requests += value;
        if (failed) route().errors += value;
        break;
      }
      case "rowgate_request_duration_seconds_bucket":
        buckets[labels.le] = (buckets[labels.le] || 0) + value;
        break;
      case "rowgate_request_duration_seconds_sum": route().seconds += value; break;
      case "rowgate_request_duration_seconds_count": route().count += value; break;
      case "rowgate_http_connections_open": worker(labels.pid).open = value; break;
      case "rowgate_realtime_connections": worker(labels.pid).websockets = value; break;
      case "rowgate_process_resident_bytes": worker(labels.pid).rss = value; break;
      case "rowgate_worker_restarts": restarts = Math.max(restarts, value); break;
      case "rowgate_supervisor_workers": supervisor = { ...(supervisor || {}), workers: value }; break;
      case "rowgate_supervisor_resident_bytes": supervisor = { ...(supervisor || {}), rss: value }; break;
      default: break;
    }
  }
  return { at: performance.now(), workers, buckets, routes, restarts, supervisor };
}

/** The q-quantile in seconds of the requests between two scrapes' histograms (null: none). */
function quantile(q, before, after) {
  const les = Object.keys(after).sort((a, b) => parseFloat(a) - parseFloat(b));
  const delta = les.map((le) => Math.max(0, after[le] - (before[le] || 0)));
  const total = delta[delta.length - 1] || 0;
  if (!total) return null;
  const target = q * total;
  let lower = 0;
  let below = 0;
  for (let i = 0; i < les.length; i++) {
    const upper = parseFloat(les[i]);
    if (delta[i] >= target) {
      if (!isFinite(upper)) return lower;
      const inBucket = delta[i] - below;
      return lower + (upper - lower) * (inBucket ? (target - below) / inBucket : 1);
    }
    lower = upper;
    below = delta[i];
  }
  return lower;
}

const POINTS = 90;
const fmt = (n, digits = 0) => (n == null || Number.isNaN(n) ? "–" : n.toLocaleString("en", { maximumFractionDigits: digits }));
const ms = (s) => (s == null ? "–" : s < 0.001 ? `${fmt(s * 1e6)} µs` : `${fmt(s * 1e3, 1)} ms`);
const mb = (b) => `${fmt(b / 1048576, 1)} MB`;

function Chart({ title, series, unit, testid }) {
  const max = Math.max(1e-9, ...series.flatMap((s) => s.values.filter((v) => v != null)));
  const line = (values) => values
    .map((v, i) => `${((i + POINTS - values.length) * 300) / (POINTS - 1)},${v == null ? 100 : 100 - (v / max) * 95}`)
    .join(" ");
  return html`<div class="panel chart" data-testid=${testid}>
    <div class="row"><strong class="grow">${title}</strong><span class="muted mono">max ${unit(max)}</span></div>
    <svg viewBox="0 0 300 100" preserveAspectRatio="none" role="img" aria-label=${title}>
      ${series.map((s, i) => html`<polyline class=${"s" + i} points=${line(s.values)} />`)}
    </svg>
    <div class="legend">${series.map((s, i) => html`<span class=${"s" + i}>■ ${s.name}</span>`)}</div>
  </div>`;
}

function Dashboard() {
  const [error, run] = useAsync();
  const [view, setView] = useState(null);
  const history = useRef({ last: null, rate: [], errors: [], p50: [], p99: [] });
  useEffect(() => {
    let stopped = false;
    const tick = async () => {
      const got = await run(() => call("/_/api/metrics", { text: true }));
      if (stopped || !got) return;
      const now = snapshot(parseMetrics(got.body));
      const h = history.current;
      const prev = h.last;
      const rates = {};
      let rate = null;
      let errorRate = null;
      if (prev) {
        const dt = (now.at - prev.at) / 1000;
        rate = 0;
        errorRate = 0;
        for (const [pid, w] of Object.entries(now.workers)) {
          const before = prev.workers[pid] || { requests: w.requests, errors: w.errors };
          const done = w.requests >= before.requests ? w.requests - before.requests : w.requests;
          const failed = w.errors >= before.errors ? w.errors - before.errors : w.errors;
          rates[pid] = done / dt;
          rate += done / dt;
          errorRate += failed / dt;
        }
        const push = (list, v) => { list.push(v); if (list.length > POINTS) list.shift(); };
        push(h.rate, rate);
        push(h.errors, errorRate);
        push(h.p50, quantile(0.5, prev.buckets, now.buckets));
        push(h.p99, quantile(0.99, prev.buckets, now.buckets));
      }
      h.last = now;
      setView({ now, rates, rate, errorRate, p50: h.p50[h.p50.length - 1], p99: h.p99[h.p99.length - 1] });
    };
    tick();
    const timer = setInterval(tick, 2000);
    return () => { stopped = true; clearInterval(timer); };
  }, []);
  if (!view) return html`<${ErrorBox} error=${error} /><p class="muted">Reading the statistics…</p>`;
  const { now, rates } = view;
  const h = history.current;
  const workers = Object.values(now.workers);
  const sum = (k) => workers.reduce((a, w) => a + w[k], 0);
  const routes = Object.values(now.routes).sort((a, b) => b.requests - a.requests).slice(0, 15);
  return html`<h2>Dashboard</h2>
    <${ErrorBox} error=${error} />
    <div class="tiles">
      <div class="tile"><div class="v" data-testid="rate">${fmt(view.rate, 1)}</div><div class="k">requests/s</div></div>
      <div class="tile"><div class="v" data-testid="p50">${ms(view.p50)}</div><div class="k">latency p50</div></div>
      <div class="tile"><div class="v" data-testid="p99">${ms(view.p99)}</div><div class="k">latency p99</div></div>
      <div class="tile"><div class="v">${fmt(view.errorRate, 1)}</div><div class="k">errors/s (4xx, 5xx)</div></div>
      <div class="tile"><div class="v">${fmt(sum("open"))}</div><div class="k">open connections</div></div>
      <div class="tile"><div class="v">${fmt(sum("websockets"))}</div><div class="k">realtime connections</div></div>
      <div class="tile"><div class="v">${fmt(workers.length)}</div><div class="k">workers</div></div>
      <div class="tile"><div class="v">${fmt(now.restarts)}</div><div class="k">restarts</div></div>
    </div>
    <div class="charts">
      <${Chart} testid="chart-rate" title="Requests per second" unit=${(v) => fmt(v, 1)}
        series=${[{ name: "requests/s", values: h.rate }, { name: "errors/s", values: h.errors }]} />
      <${Chart} testid="chart-latency" title="Latency" unit=${ms}
        series=${[{ name: "p50", values: h.p50 }, { name: "p99", values: h.p99 }]} />
    </div>
    <h3>Workers</h3>
    <div class="panel scroll"><table class="grid" data-testid="workers">
      <thead><tr><th>pid</th><th>requests/s</th><th>requests</th><th>errors</th><th>open connections</th><th>realtime</th><th>memory</th></tr></thead>
      <tbody>${workers.map((w) => html`<tr>
        <td class="mono">${w.pid}</td><td class="num">${fmt(rates[w.pid], 1)}</td><td class="num">${fmt(w.requests)}</td>
        <td class="num">${fmt(w.errors)}</td><td class="num">${fmt(w.open)}</td><td class="num">${fmt(w.websockets)}</td>
        <td class="num">${mb(w.rss)}</td></tr>`)}
        ${now.supervisor && html`<tr class="muted"><td>supervisor</td><td></td><td></td><td></td><td></td><td></td>
          <td class="num">${mb(now.supervisor.rss || 0)}</td></tr>`}
      </tbody></table></div>
    <h3>Routes</h3>
    <div class="panel scroll"><table class="grid">
      <thead><tr><th>route</th><th>requests</th><th>errors</th><th>mean</th></tr></thead>
      <tbody>${routes.map((r) => html`<tr><td class="mono">${r.key}</td><td class="num">${fmt(r.requests)}</td>
        <td class="num">${fmt(r.errors)}</td><td class="num">${ms(r.count ? r.seconds / r.count : null)}</td></tr>`)}</tbody>
    </table></div>`;
}

// ---- tables, views and duality views ---------------------------------------------------------

const PAGE = 25;

/** A column's input text → the JSON value sent. */
function typed(column, text) {
  if (text === "" && column.nullable) return null;
  if (column.json_type === "integer" || column.json_type === "number") {
    const n = Number(text);
    return text.trim() !== "" && !Number.isNaN(n) ? n : text;
  }
  if (column.json_type === "boolean") return text === "true" ? true : text === "false" ? false : text;
  return text;
}

const shown = (v) => (v == null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));

/** `?pk=eq.v&…` naming one row by its key. */
const keyFilter = (table, row) => table.key.map((k) => `${encodeURIComponent(k)}=eq.${encodeURIComponent(shown(row[k]))}`).join("&");

function RowEditor({ table, row, onDone, onCancel, prefix }) {
  const isNew = row === null;
  const may = (op) => table.ops.includes(op);
  const [values, setValues] = useState(() => Object.fromEntries(table.columns.map((c) => [c.name, isNew ? "" : shown(row[c.name])])));
  const [confirming, setConfirming] = useState(false);
  const [error, run] = useAsync();
  const url = `${prefix}/${encodeURIComponent(table.name)}`;
  const save = (e) => {
    e.preventDefault();
    run(async () => {
      const body = {};
      for (const c of table.columns) {
        if (!c.writable) continue;
        if (isNew ? values[c.name] !== "" : values[c.name] !== shown(row[c.name])) body[c.name] = typed(c, values[c.name]);
      }
      if (isNew) {
        await call(url, { method: "POST", body, headers: { Prefer: "return=representation" } });
      } else if (Object.keys(body).length) {
        await call(`${url}?${keyFilter(table, row)}`, { method: "PATCH", body, headers: { Prefer: "return=representation" } });
      }
      onDone(isNew ? "Row added." : "Row saved.");
    });
  };
  const remove = () => run(async () => {
    await call(`${url}?${keyFilter(table, row)}`, { method: "DELETE" });
    onDone("Row deleted.");
  });
  const editable = isNew ? may("insert") : may("update") && table.key.length > 0;
  return html`<div class="panel" data-testid="editor">
    <h3>${isNew ? `New row in ${table.name}` : `Row of ${table.name}`}</h3>
    <${ErrorBox} error=${error} />
    <form class="edit" onSubmit=${save}>
      ${table.columns.map((c) => html`<label>${c.name} <span class="mono">${c.type}${c.key ? " · key" : ""}</span>
        <input name=${c.name} value=${values[c.name]} disabled=${!editable || !c.writable}
          placeholder=${isNew && c.nullable ? "null" : ""}
          onInput=${(e) => setValues({ ...values, [c.name]: e.target.value })} /></label>`)}
      <div class="row">
        ${editable && html`<button class="primary" type="submit">${isNew ? "Insert" : "Save"}</button>`}
        <button type="button" onClick=${onCancel}>Close</button>
        <span class="grow"></span>
        ${!isNew && may("delete") && table.key.length > 0 && (confirming
          ? html`<button type="button" class="danger" onClick=${remove}>Confirm delete</button>`
          : html`<button type="button" class="danger" onClick=${() => setConfirming(true)}>Delete</button>`)}
      </div>
    </form>
  </div>`;
}

function DocumentEditor({ table, doc, onDone, onCancel, prefix }) {
  const isNew = doc === null;
  const [text, setText] = useState(() => JSON.stringify(isNew ? {} : doc, null, 2));
  const [confirming, setConfirming] = useState(false);
  const [error, run] = useAsync();
  const url = `${prefix}/${encodeURIComponent(table.name)}`;
  const etag = doc && doc._metadata && doc._metadata.etag;
  const ifMatch = etag ? { "If-Match": `"${etag}"` } : {};
  const save = () => run(async () => {
    let body;
    try { body = JSON.parse(text); } catch (e) { throw new Error(`not JSON: ${e.message}`); }
    if (isNew) await call(url, { method: "POST", body });
    else await call(`${url}/${encodeURIComponent(doc._id)}`, { method: "PUT", body, headers: ifMatch });
    onDone(isNew ? "Document added." : "Document saved.");
  });
  const remove = () => run(async () => {
    await call(`${url}/${encodeURIComponent(doc._id)}`, { method: "DELETE", headers: ifMatch });
    onDone("Document deleted.");
  });
  return html`<div class="panel" data-testid="editor">
    <h3>${isNew ? `New document in ${table.name}` : `Document ${doc._id} of ${table.name}`}</h3>
    <p class="muted">Saved with <code>If-Match</code>: a document changed since it was read is refused (412).</p>
    <${ErrorBox} error=${error} />
    <textarea aria-label="document" value=${text} onInput=${(e) => setText(e.target.value)}></textarea>
    <div class="row">
      <button class="primary" onClick=${save}>${isNew ? "Insert" : "Save"}</button>
      <button onClick=${onCancel}>Close</button><span class="grow"></span>
      ${!isNew && (confirming
        ? html`<button class="danger" onClick=${remove}>Confirm delete</button>`
        : html`<button class="danger" onClick=${() => setConfirming(true)}>Delete</button>`)}
    </div>
  </div>`;
}

function Rows({ table, prefix }) {
  const [filter, setFilter] = useState("");
  const [applied, setApplied] = useState("");
  const [order, setOrder] = useState(null);
  const [offset, setOffset] = useState(0);
  const [page, setPage] = useState(null);
  const [editing, setEditing] = useState(undefined);
  const [notice, setNotice] = useState(null);
  const [error, run] = useAsync();
  const [reload, setReload] = useState(0);
  const duality = table.kind === "duality";
  useEffect(() => { setFilter(""); setApplied(""); setOrder(null); setOffset(0); setEditing(undefined); setNotice(null); }, [table.name]);
  useEffect(() => {
    const query = new URLSearchParams(applied);
    if (order) query.set("order", `${order.column}.${order.dir}`);
    query.set("limit", PAGE);
    query.set("offset", offset);
    run(async () => {
      const got = await call(`${prefix}/${encodeURIComponent(table.name)}?${query}`, { headers: { Prefer: "count=exact" } });
      const range = got.headers.get("content-range") || "";
      const total = range.includes("/") ? parseInt(range.split("/")[1], 10) : null;
      setPage({ rows: got.body, total });
      return true;
    }).then((ok) => { if (!ok) setPage({ rows: [], total: null }); });
  }, [table.name, applied, order, offset, reload]);
  const done = (message) => { setEditing(undefined); setNotice(message); setReload((n) => n + 1); };
  const columns = duality ? ["_id", "document"] : table.columns.map((c) => c.name);
  const sort = (column) => {
    if (duality) return;
    setOrder(order && order.column === column && order.dir === "asc" ? { column, dir: "desc" } : { column, dir: "asc" });
    setOffset(0);
  };
  const Editor = duality ? DocumentEditor : RowEditor;
  const rows = (page && page.rows) || [];
  const last = page && page.total != null ? Math.min(offset + rows.length, page.total) : offset + rows.length;
  return html`<div>
    <div class="row mb">
      <h2 class="grow flush">${table.name} <span class="pill">${table.kind}</span></h2>
      ${table.ops.includes("insert") && html`<button onClick=${() => setEditing(null)}>New ${duality ? "document" : "row"}</button>`}
    </div>
    <form class="row mb" onSubmit=${(e) => { e.preventDefault(); setOffset(0); setApplied(filter); }}>
      <input class="grow" aria-label="filter" placeholder="filter, as in the REST API: points=gt.100&name=like.M*"
        value=${filter} onInput=${(e) => setFilter(e.target.value)} />
      <button type="submit">Filter</button>
    </form>
    ${notice && html`<div class="notice" data-testid="notice">${notice}</div>`}
    <${ErrorBox} error=${error} />
    ${editing !== undefined && html`<${Editor} key=${editing ? JSON.stringify(editing) : "new"} table=${table} prefix=${prefix}
      row=${editing} doc=${editing} onDone=${done} onCancel=${() => setEditing(undefined)} />`}
    <div class="panel scroll"><table class="grid" data-testid="rows">
      <thead><tr>${columns.map((c) => html`<th class=${duality ? "" : "sortable"} onClick=${() => sort(c)}>${c}${order && order.column === c ? (order.dir === "asc" ? " ▲" : " ▼") : ""}</th>`)}</tr></thead>
      <tbody>${rows.map((row) => html`<tr class="pick" onClick=${() => { setNotice(null); setEditing(row); }}>
        ${duality
          ? html`<td class="mono">${shown(row._id)}</td><td class="mono">${JSON.stringify(row)}</td>`
          : columns.map((c) => html`<td class=${typeof row[c] === "number" ? "num" : ""}>${shown(row[c])}</td>`)}
      </tr>`)}</tbody>
    </table></div>
    <div class="row">
      <span class="muted grow">${rows.length ? `${offset + 1}–${last}` : "no rows"}${page && page.total != null ? ` of ${fmt(page.total)}` : ""}</span>
      <button disabled=${offset === 0} onClick=${() => setOffset(Math.max(0, offset - PAGE))}>Previous</button>
      <button disabled=${rows.length < PAGE || (page && page.total != null && last >= page.total)} onClick=${() => setOffset(offset + PAGE)}>Next</button>
    </div>
  </div>`;
}

function Data({ session, name }) {
  const tables = session.tables;
  const table = tables.find((t) => t.name === name);
  return html`<div class="data">
    <nav class="tables panel" aria-label="tables">
      ${tables.length === 0 && html`<span class="muted">Your role has no grant on any table.</span>`}
      ${tables.map((t) => html`<a href=${"#/data/" + encodeURIComponent(t.name)} class=${t === table ? "on" : ""}>${t.name}<span class="kind">${t.kind}</span></a>`)}
    </nav>
    <div>${table
      ? html`<${Rows} table=${table} prefix=${session.rest_prefix} />`
      : html`<p class="muted">Pick a table. Reads and writes go through the REST API with your role's grants.</p>`}</div>
  </div>`;
}

// ---- OAuth clients ---------------------------------------------------------------------------

function Clients() {
  const [clients, setClients] = useState([]);
  const [issued, setIssued] = useState(null);
  const [confirm, setConfirm] = useState(null);
  const [form, setForm] = useState({ name: "", role: "", ttl_s: "" });
  const [error, run] = useAsync();
  const load = () => run(async () => setClients((await call("/_/api/clients")).body));
  useEffect(() => { load(); }, []);
  const add = (e) => {
    e.preventDefault();
    run(async () => {
      const body = { name: form.name, role: form.role };
      if (form.ttl_s) body.ttl_s = Number(form.ttl_s);
      setIssued({ ...(await call("/_/api/clients", { method: "POST", body })).body, what: "added" });
      setForm({ name: "", role: "", ttl_s: "" });
      await load();
    });
  };
  const act = (name, action) => run(async () => {
    setConfirm(null);
    const got = (await call(`/_/api/clients/${encodeURIComponent(name)}/${action}`, { method: "POST" })).body;
    setIssued(got.client_secret ? { ...got, what: "rotated" } : null);
    await load();
  });
  const ask = (name, action) => (confirm && confirm.name === name && confirm.action === action
    ? html`<button class="danger" onClick=${() => act(name, action)}>Confirm ${action}</button>`
    : html`<button class=${action === "rotate" ? "" : "danger"} onClick=${() => setConfirm({ name, action })}>${action}</button>`);
  const date = (s) => new Date(s * 1000).toISOString().slice(0, 16).replace("T", " ");
  return html`<h2>OAuth clients</h2>
    <${ErrorBox} error=${error} />
    ${issued && html`<div class="secret" data-testid="secret">
      <strong>Client ${issued.name} ${issued.what}. Copy the secret now: it is not shown again.</strong>
      <div>client_id <code data-testid="issued-id">${issued.client_id}</code></div>
      <div>client_secret <code data-testid="issued-secret">${issued.client_secret}</code></div>
      <button onClick=${() => setIssued(null)}>Done</button></div>`}
    <form class="panel row" onSubmit=${add} aria-label="add a client">
      <input aria-label="name" placeholder="name" value=${form.name} onInput=${(e) => setForm({ ...form, name: e.target.value })} required />
      <input aria-label="role" placeholder="role" value=${form.role} onInput=${(e) => setForm({ ...form, role: e.target.value })} required />
      <input aria-label="token lifetime in seconds" placeholder="token lifetime (s)" type="number" min="1"
        value=${form.ttl_s} onInput=${(e) => setForm({ ...form, ttl_s: e.target.value })} />
      <button class="primary" type="submit">Add client</button>
    </form>
    <p class="muted">Rotate issues a new secret and keeps the old one working; retire then ends the old secret and its
      tokens; revoke ends every secret and token of the client. Servers see changes within <code>auth.clients_poll_ms</code>.</p>
    <div class="panel scroll"><table class="grid" data-testid="clients">
      <thead><tr><th>name</th><th>role</th><th>client id</th><th>secret</th><th>created</th><th>state</th><th></th></tr></thead>
      <tbody>${clients.map((c) => html`<tr>
        <td>${c.name}</td><td>${c.role}</td><td class="mono">${c.client_id}</td>
        <td>gen ${c.secret_gen}${c.prev_gen != null ? ` (gen ${c.prev_gen} still works)` : ""}</td>
        <td class="mono">${date(c.created_s)}</td>
        <td>${c.revoked ? html`<span class="bad">revoked</span>` : html`<span class="good">active</span>`}</td>
        <td><div class="row">${!c.revoked && html`${ask(c.name, "rotate")}${c.prev_gen != null && ask(c.name, "retire")}${ask(c.name, "revoke")}`}</div></td>
      </tr>`)}</tbody>
    </table></div>`;
}

// ---- people's accounts -----------------------------------------------------------------------

function Users() {
  const [list, setList] = useState({ users: [], total: 0, per_page: 50 });
  const [filter, setFilter] = useState("");
  const [page, setPage] = useState(1);
  const [form, setForm] = useState({ email: "", password: "" });
  const [notice, setNotice] = useState(null);
  const [confirm, setConfirm] = useState(null);
  const [error, run] = useAsync();
  const load = (p = page, f = filter) => run(async () => {
    const query = new URLSearchParams({ page: String(p), filter: f });
    setList((await call(`/_/api/users?${query}`)).body);
  });
  useEffect(() => { load(); }, []);
  const search = (e) => { e.preventDefault(); setPage(1); load(1, filter); };
  const add = (e) => {
    e.preventDefault();
    run(async () => {
      const made = (await call("/_/api/users", { method: "POST", body: form })).body;
      setNotice(`Account ${made.email} added.`);
      setForm({ email: "", password: "" });
      await load();
    });
  };
  const words = { ban: "Ban", unban: "Lift ban", "sign-out": "Sign out everywhere" };
  const act = (user, action) => run(async () => {
    setConfirm(null);
    await call(`/_/api/users/${user.id}/${action}`, { method: "POST" });
    setNotice({ ban: `${user.email} is banned.`, unban: `${user.email} may sign in again.`,
      "sign-out": `${user.email} is signed out everywhere.` }[action]);
    await load();
  });
  const ask = (user, action) => (confirm && confirm.id === user.id && confirm.action === action
    ? html`<button class="danger" onClick=${() => act(user, action)}>Confirm</button>`
    : html`<button class=${action === "unban" ? "" : "danger"} onClick=${() => setConfirm({ id: user.id, action })}>${words[action]}</button>`);
  const [open, setOpen] = useState(null);
  const showSessions = (user) => run(async () => {
    const got = (await call(`/_/api/users/${user.id}/sessions`)).body;
    setOpen({ user, sessions: got.sessions });
  });
  const endSession = (user, session) => run(async () => {
    await call(`/_/api/users/${user.id}/sessions/${session.id}`, { method: "DELETE" });
    setNotice(`A session of ${user.email} ended.`);
    await showSessions(user);
  });
  const when = (t) => (t ? t.slice(0, 16).replace("T", " ") : "never");
  const pages = Math.max(1, Math.ceil(list.total / list.per_page));
  const go = (p) => { setPage(p); load(p); };
  return html`<h2>Users</h2>
    <${ErrorBox} error=${error} />
    ${notice && html`<div class="notice" data-testid="users-notice">${notice}</div>`}
    <form class="panel row" onSubmit=${search} aria-label="search users">
      <input aria-label="search by email" placeholder="email contains…" value=${filter} onInput=${(e) => setFilter(e.target.value)} />
      <button type="submit">Search</button>
    </form>
    <form class="panel row" onSubmit=${add} aria-label="add a user">
      <input aria-label="email" type="email" placeholder="email" value=${form.email} onInput=${(e) => setForm({ ...form, email: e.target.value })} required />
      <input aria-label="password" type="password" placeholder="password" value=${form.password} onInput=${(e) => setForm({ ...form, password: e.target.value })} required />
      <button class="primary" type="submit">Add user</button>
    </form>
    <p class="muted">${list.total} account${list.total === 1 ? "" : "s"}. A ban lasts until it is lifted and ends every
      session; signing out everywhere ends the sessions (their access tokens run out within <code>accounts.jwt_exp_s</code>).</p>
    <div class="panel scroll"><table class="grid" data-testid="users">
      <thead><tr><th>email</th><th>created</th><th>last sign-in</th><th>state</th><th></th></tr></thead>
      <tbody>${list.users.map((u) => html`<tr>
        <td>${u.email}</td><td class="mono">${when(u.created_at)}</td><td class="mono">${when(u.last_sign_in_at)}</td>
        <td>${u.banned_until ? html`<span class="bad">banned</span>`
          : u.email_confirmed_at ? html`<span class="good">confirmed</span>` : html`<span>unconfirmed</span>`}</td>
        <td><div class="row"><button onClick=${() => showSessions(u)}>Sessions</button>
          ${u.banned_until ? ask(u, "unban") : ask(u, "ban")}${ask(u, "sign-out")}</div></td>
      </tr>`)}</tbody>
    </table></div>
    ${open && html`<div class="panel scroll"><h3>Sessions of ${open.user.email}</h3>
      <table class="grid" data-testid="sessions">
        <thead><tr><th>began</th><th>last refreshed</th><th>how</th><th>from</th><th>client</th><th></th></tr></thead>
        <tbody>${open.sessions.map((x) => html`<tr>
          <td class="mono">${when(x.created_at)}</td><td class="mono">${when(x.updated_at)}</td><td>${x.method || ""}</td>
          <td class="mono">${x.ip || ""}</td><td>${x.user_agent || ""}</td>
          <td><button class="danger" onClick=${() => endSession(open.user, x)}>End</button></td>
        </tr>`)}</tbody>
      </table>
      ${open.sessions.length === 0 && html`<p class="muted">No session.</p>`}
      <button onClick=${() => setOpen(null)}>Close</button></div>`}
    ${pages > 1 && html`<div class="row"><button disabled=${page <= 1} onClick=${() => go(page - 1)}>Previous</button>
      <span>page ${page} of ${pages}</span><button disabled=${page >= pages} onClick=${() => go(page + 1)}>Next</button></div>`}`;
}

// ---- configuration ---------------------------------------------------------------------------

function Config() {
  const [got, setGot] = useState(null);
  const [error, run] = useAsync();
  useEffect(() => { run(async () => setGot((await call("/_/api/config")).body)); }, []);
  if (!got) return html`<${ErrorBox} error=${error} />`;
  const { config, findings, resources } = got;
  const list = (v) => (Array.isArray(v) ? v.join(", ") : v == null ? "" : String(v));
  return html`<h2>Configuration</h2>
    <${ErrorBox} error=${error} />
    <h3>config check</h3>
    <div class="panel" data-testid="findings">${findings.length === 0
      ? html`<span class="good">No findings: the grants, realtime tables and duality views fit the schema.</span>`
      : findings.map((f) => html`<div class=${f.severity === "error" ? "bad" : "warn"}>${f.severity}: ${f.text}</div>`)}</div>
    <h3>Grants</h3>
    <div class="panel scroll"><table class="grid" data-testid="grants">
      <thead><tr><th>role</th><th>tables</th><th>ops</th><th>functions</th><th>read columns</th><th>write columns</th><th>row filter</th></tr></thead>
      <tbody>${config.grants.map((g) => html`<tr><td>${g.role}</td><td>${list(g.tables)}</td><td>${list(g.ops)}</td>
        <td>${list(g.functions)}</td><td>${list(g.read_columns)}</td><td>${list(g.write_columns)}</td><td class="mono">${list(g.filter)}</td></tr>`)}</tbody>
    </table></div>
    <h3>Custom resources</h3>
    <div class="panel scroll"><table class="grid">
      <thead><tr><th>path</th><th>methods</th><th>roles</th><th>parameters</th></tr></thead>
      <tbody>${resources.map((r) => html`<tr><td class="mono">${r.function ? `rpc/${r.function}` : r.path}</td>
        <td>${list(r.methods)}</td><td>${r.roles ? list(r.roles) : html`<span class="warn">none</span>`}</td><td>${list(r.params)}</td></tr>`)}</tbody>
    </table></div>
    <details class="panel"><summary>The whole effective configuration</summary>
      <pre class="mono">${JSON.stringify(config, null, 2)}</pre></details>`;
}

// ---- realtime inspector ----------------------------------------------------------------------

function Realtime({ session }) {
  const tables = session.tables.filter((t) => t.realtime && t.ops.includes("select"));
  const [table, setTable] = useState(tables.length ? tables[0].name : "");
  const [filter, setFilter] = useState("");
  const [events, setEvents] = useState([]);
  const [state, setState] = useState("stopped");
  const feed = useRef(null);
  const stop = () => { if (feed.current) feed.current.close(); feed.current = null; setState("stopped"); };
  useEffect(() => stop, []);
  const start = (e) => {
    e.preventDefault();
    stop();
    setEvents([]);
    const query = new URLSearchParams({ table, access_token: sessionStorage.getItem(TOKEN) || "" });
    if (filter) query.set("filter", filter);
    const source = new EventSource(`/realtime/sse?${query}`);
    feed.current = source;
    setState("connecting");
    const add = (m) => setEvents((list) => [JSON.parse(m.data), ...list].slice(0, 200));
    source.addEventListener("subscribed", (m) => { setState("live"); add(m); });
    source.addEventListener("resync", add);
    source.addEventListener("close", (m) => { add(m); stop(); });
    source.onmessage = add;
    source.onerror = () => setState(source.readyState === EventSource.CLOSED ? "refused (see the log)" : "reconnecting");
  };
  return html`<h2>Realtime inspector</h2>
    ${tables.length === 0 && html`<div class="notice">No table your role may read is in <code>realtime.tables</code>.</div>`}
    <form class="panel row" onSubmit=${start}>
      <select aria-label="table" value=${table} onChange=${(e) => setTable(e.target.value)}>
        ${tables.map((t) => html`<option value=${t.name}>${t.name}</option>`)}</select>
      <input class="grow" aria-label="filter" placeholder="filter: points=gt.100" value=${filter} onInput=${(e) => setFilter(e.target.value)} />
      <button class="primary" type="submit" disabled=${!table}>Subscribe</button>
      <button type="button" onClick=${stop} disabled=${state === "stopped"}>Stop</button>
      <span class="pill" data-testid="feed-state">${state}</span>
    </form>
    <div class="panel events"><div class="log" data-testid="events">
      ${events.length === 0 && html`<span class="muted">Events appear here as they are committed.</span>`}
      ${events.map((ev) => html`<div>${ev.type === "event" ? `#${ev.id} ${ev.op} ${JSON.stringify(ev.key)} ${JSON.stringify(ev.row || ev.old || {})}` : JSON.stringify(ev)}</div>`)}
    </div></div>`;
}

// ---- access log ------------------------------------------------------------------------------

function Log({ session }) {
  const [q, setQ] = useState("");
  const [got, setGot] = useState(null);
  const [follow, setFollow] = useState(true);
  const [error, run] = useAsync();
  useEffect(() => {
    let stopped = false;
    const load = () => run(async () => {
      const body = (await call(`/_/api/requests?${new URLSearchParams({ q, limit: 300 })}`)).body;
      if (!stopped) setGot(body);
    });
    const delay = setTimeout(load, 250);
    const timer = follow ? setInterval(load, 3000) : null;
    return () => { stopped = true; clearTimeout(delay); if (timer) clearInterval(timer); };
  }, [q, follow]);
  return html`<h2>Recent requests</h2>
    <${ErrorBox} error=${error} />
    ${!session.access_log && html`<div class="notice">The access log is off: set <code>[access_log] format = "json"</code>
      (or <code>"logfmt"</code>) in the configuration. Each worker keeps its last <code>access_log.recent</code> lines for this view.</div>`}
    <div class="panel row">
      <input class="grow" aria-label="filter lines" placeholder="lines containing… (a path, a status, a role, a request id)"
        value=${q} onInput=${(e) => setQ(e.target.value)} />
      <label><input type="checkbox" checked=${follow} onChange=${(e) => setFollow(e.target.checked)} /> follow</label>
    </div>
    <div class="panel"><div class="log" data-testid="log-lines">
      ${got && got.lines.length === 0 && html`<span class="muted">No lines.</span>`}
      ${got && got.lines.map((line) => html`<div>${line}</div>`)}
    </div></div>`;
}

// ---- the page --------------------------------------------------------------------------------

const SECTIONS = [
  ["dashboard", "Dashboard"], ["data", "Data"], ["clients", "Clients"], ["users", "Users"],
  ["config", "Configuration"], ["realtime", "Realtime"], ["log", "Log"],
];

function App() {
  const [session, setSession] = useState(null);
  const [checking, setChecking] = useState(!!sessionStorage.getItem(TOKEN));
  const [message, setMessage] = useState(null);
  const [section, ...rest] = useHash();
  useEffect(() => {
    onSignedOut = (why) => { setSession(null); setMessage(why); };
    if (sessionStorage.getItem(TOKEN)) {
      call("/_/api/session").then((got) => setSession(got.body))
        .catch(() => sessionStorage.removeItem(TOKEN)).finally(() => setChecking(false));
    }
  }, []);
  if (checking) return null;
  if (!session) return html`<${Login} message=${message} onSession=${(s) => { setMessage(null); setSession(s); }} />`;
  const signOut = () => { sessionStorage.removeItem(TOKEN); setSession(null); setMessage("Signed out."); };
  const page = {
    dashboard: () => html`<${Dashboard} />`,
    data: () => html`<${Data} session=${session} name=${rest[0]} />`,
    clients: () => html`<${Clients} />`,
    users: () => html`<${Users} />`,
    config: () => html`<${Config} />`,
    realtime: () => html`<${Realtime} session=${session} />`,
    log: () => html`<${Log} session=${session} />`,
  }[section] || (() => html`<p>No such page. <a href="#/dashboard">Dashboard</a></p>`);
  return html`<header class="top">
      <span class="brand">Rowgate</span>
      <nav>${SECTIONS.filter(([id]) => id !== "users" || session.accounts).map(([id, label]) => html`<a href=${"#/" + id} class=${id === section ? "on" : ""}>${label}</a>`)}</nav>
      <span class="who"><span data-testid="who">${session.client || session.client_id} · ${session.role}</span>
        <span>${session.database} · v${session.version}</span>
        <button onClick=${signOut}>Sign out</button></span>
    </header>
    <main>${page()}</main>`;
}

render(html`<${App} />`, document.getElementById("app"));
