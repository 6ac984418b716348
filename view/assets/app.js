// curate view: the page. Routes live in the URL hash (#/ rows, #/row/ID, #/stats,
// #/compare, #/task/ID) with filters as its query, so Back and bookmarks work. Every value
// from the data is set as text, never as HTML.
"use strict";

let INFO = null;

// h builds an element: h("div", {class: "x", onclick: f}, child, "text", ...).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    el.appendChild(typeof k === "string" || typeof k === "number" ? document.createTextNode(String(k)) : k);
  }
  return el;
}

const fmt = (n) => Number(n).toLocaleString("en-US");
const yesno = (b, yes, no) => h("span", {class: b ? "ok" : "bad"}, b ? (yes || "yes") : (no || "no"));

async function api(path) {
  const r = await fetch(path, {cache: "no-store"});
  const body = await r.json().catch(() => ({error: `HTTP ${r.status}`}));
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

// apiPost sends body as JSON; a refusal throws an Error carrying the status and the answer.
async function apiPost(path, body) {
  const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body), cache: "no-store"});
  const answer = await r.json().catch(() => ({error: `HTTP ${r.status}`}));
  if (!r.ok) {
    const err = answer.error;
    const e = new Error(typeof err === "string" ? err : (err && err.message) || `HTTP ${r.status}`);
    e.status = r.status;
    e.answer = answer;
    throw e;
  }
  return answer;
}

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  return {parts: path.split("/").filter(Boolean), params: new URLSearchParams(query || "")};
}

function setMain(...kids) {
  const main = document.getElementById("main");
  main.replaceChildren(...kids.filter((k) => k !== null && k !== undefined));
}

function showError(err) {
  setMain(h("div", {class: "error"}, String(err.message || err)));
}

async function loadInfo() {
  INFO = await api("/api/info");
  const nav = document.getElementById("nav");
  const links = [["#/", "Rows", "rows"], ["#/stats", "Stats", "stats"]];
  if (INFO.compare) links.push(["#/compare", INFO.kind === "dataset" ? "By task" : "Compare", "compare"]);
  nav.replaceChildren(...links.map(([href, text, name]) => h("a", {href, "data-nav": name}, text)));
  document.getElementById("source").replaceChildren(
    h("span", {class: "kind"}, INFO.kind),
    " ", INFO.paths.map((p) => p.path).join(", "));
  updateLive();
  const errs = INFO.paths.filter((p) => p.error);
  const banner = document.getElementById("banner");
  banner.hidden = errs.length === 0;
  banner.replaceChildren(...errs.map((p) => h("div", {}, `${p.name}: ${p.error} (rows before it are shown)`)));
}

function updateLive() {
  const live = document.getElementById("live");
  live.replaceChildren(h("span", {id: "rowcount"}, `${fmt(INFO.rows)} rows`),
    INFO.live ? h("span", {class: "livedot", title: "re-read while it grows"}, " live") : "");
}

// Live run and eval dirs: poll the row count; a grown index refreshes the rows table.
let lastRows = -1;
async function pollLive() {
  if (!INFO || !INFO.live) return;
  try {
    const before = INFO.rows;
    await loadInfo();
    if (INFO.rows !== before) {
      const r = route();
      // Not while the user is typing into a filter (the redraw would drop the text), and at
      // the same scroll position.
      const el = document.activeElement;
      const typing = el && el.closest("#main") && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName);
      if (!typing && (r.parts.length === 0 || r.parts[0] === "stats" || r.parts[0] === "compare")) {
        const y = window.scrollY;
        await render();
        window.scrollTo(0, y);
      }
    }
  } catch (e) { /* the server went away; keep the page */ }
}

// ---- rows table ------------------------------------------------------------------------

const TRI = [["", "any"], ["1", "yes"], ["0", "no"]];

function filterPanel(params, facets, labels) {
  const form = h("form", {id: "filters", onsubmit: (e) => { e.preventDefault(); apply(); }});
  const apply = (resetOffset = true) => {
    const p = new URLSearchParams();
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") { if (el.checked) p.append(el.name, el.value); }
      else if (el.value !== "") p.set(el.name, el.value);
    }
    if (!resetOffset && params.get("offset")) p.set("offset", params.get("offset"));
    location.hash = "#/?" + p.toString();
  };
  const group = (title, ...kids) => h("fieldset", {}, h("legend", {}, title), ...kids);
  form.appendChild(group("Search", h("input", {type: "search", name: "q", id: "f-q", value: params.get("q") || "",
    placeholder: "question, SQL, db, key", onchange: () => apply()})));
  const st = INFO.search || {};
  form.appendChild(group("Full text",
    h("input", {type: "search", name: "text", id: "f-text", value: params.get("text") || "",
      placeholder: "words in the messages ( / )", onchange: () => apply()}),
    h("label", {class: "tri"}, "in ", h("select", {name: "in", id: "f-in", onchange: () => apply()},
      ...[["", "all messages"], ["reasoning", "reasoning"], ["sql", "SQL"], ["observation", "observations"]].map(([v, t]) =>
        h("option", {value: v, selected: (params.get("in") || "") === v}, t)))),
    h("p", {class: "hint", id: "search-status"}, st.ready ? "Each word matches the words it begins, in any order." :
      st.error ? "Full-text index failed: " + st.error : `Building the full-text index: ${fmt(st.rows || 0)} of ${fmt(st.total || 0)} rows…`)));
  for (const name of ["sort", "limit"]) {
    if (params.get(name)) form.appendChild(h("input", {type: "hidden", name, value: params.get(name)}));
  }
  for (const name of ["teacher", "dialect", "difficulty", "db_id"]) {
    const values = facets[name] || [];
    if (values.length === 0) continue;
    const chosen = new Set(params.getAll(name));
    const boxes = values.map((f) => h("label", {class: "facet"},
      h("input", {type: "checkbox", name, value: f.value, checked: chosen.has(f.value), onchange: () => apply(),
        "data-facet": name}),
      " ", f.value === "" ? "(none)" : f.value, " ", h("span", {class: "count"}, fmt(f.count))));
    const box = h("div", {class: values.length > 8 ? "facets scroll" : "facets"}, ...boxes);
    form.appendChild(group(name === "db_id" ? "database" : name, box));
  }
  const tri = (name, label, disabled) => h("label", {class: "tri"}, label, " ",
    h("select", {name, id: "f-" + name, disabled, onchange: () => apply()},
      ...TRI.map(([v, t]) => h("option", {value: v, selected: (params.get(name) || "") === v}, t))));
  if (INFO.annotations) {
    // Rows with or without a note, with or without a label (unlabelled: "no").
    form.appendChild(group("Notes", tri("noted", "has a note"), tri("labelled", "labelled")));
  }
  if (labels && labels.length) {
    // A row's annotations: any of the chosen labels (the counts leave this filter out).
    const chosen = new Set(params.getAll("label"));
    form.appendChild(group("labels", h("div", {class: labels.length > 8 ? "facets scroll" : "facets", id: "f-labels"},
      ...labels.map((f) => h("label", {class: "facet"},
        h("input", {type: "checkbox", name: "label", value: f.value, checked: chosen.has(f.value), onchange: () => apply(), "data-facet": "label"}),
        " ", h("span", {class: "tag label"}, f.value), " ", h("span", {class: "count"}, fmt(f.count)))))));
  }
  form.appendChild(group("Outcome",
    tri("converged", "converged"), tri("exec_ok", "final SQL ran"), tri("correct", "correct"),
    tri("unjudged", "unjudged (gold SQL failed)"),
    tri("truncated", "truncated turn", !INFO.trunc_known),
    h("label", {class: "tri"}, "format violations ", h("select", {name: "violations", id: "f-violations", onchange: () => apply()},
      ...[["", "any"], ["none", "none"], ["some", "some"]].map(([v, t]) =>
        h("option", {value: v, selected: (params.get("violations") || "") === v}, t))))));
  if (!INFO.trunc_known) form.appendChild(h("p", {class: "hint"}, "This dataset's rows carry no truncation mark."));
  const num = (name, ph) => h("input", {type: "number", min: "0", name, id: "f-" + name, value: params.get(name) || "",
    placeholder: ph, onchange: () => apply()});
  form.appendChild(group("Turns", h("div", {class: "range"}, num("turns_min", "min"), "–", num("turns_max", "max"))));
  form.appendChild(group(INFO.tokens_name, h("div", {class: "range"}, num("tokens_min", "min"), "–", num("tokens_max", "max"))));
  form.appendChild(h("div", {class: "buttons"}, h("a", {href: "#/", class: "button"}, "Clear filters")));
  if (INFO.kind === "dataset") {
    // The export takes the filters only: every matching row, in dataset order.
    const f = new URLSearchParams(params);
    for (const k of ["sort", "offset", "limit"]) f.delete(k);
    const link = (format, text) => h("a", {href: `/api/export?format=${format}${f.toString() ? "&" + f : ""}`, class: "button",
      id: "export-" + format, download: true}, text);
    form.appendChild(group("Export the matching rows", h("div", {class: "buttons"}, link("parquet", "Parquet"), " ", link("jsonl", "JSONL"))));
  }
  return form;
}

// pager is the paging bar; with setLimit it also offers the page size and a page to jump to.
function pager(total, offset, limit, go, setLimit) {
  const from = total === 0 ? 0 : offset + 1, to = Math.min(offset + limit, total);
  const pages = Math.max(1, Math.ceil(total / limit));
  const extra = !setLimit ? [] : [
    h("label", {}, "page ", h("input", {type: "number", id: "page-jump", min: "1", max: String(pages), value: String(Math.floor(offset / limit) + 1),
      onchange: (e) => { const n = Math.min(pages, Math.max(1, Number(e.target.value) || 1)); go((n - 1) * limit); }}), ` of ${fmt(pages)}`),
    h("label", {}, "rows per page ", h("select", {id: "page-size", onchange: (e) => setLimit(Number(e.target.value))},
      ...[25, 50, 100, 200, 500].map((n) => h("option", {value: String(n), selected: n === limit}, String(n)))))];
  return h("div", {class: "pager"},
    h("button", {disabled: offset === 0, onclick: () => go(Math.max(0, offset - limit)), id: "prev"}, "‹ prev"),
    h("span", {id: "range"}, `${fmt(from)}–${fmt(to)} of ${fmt(total)}`),
    h("button", {disabled: to >= total, onclick: () => go(offset + limit), id: "next"}, "next ›"), ...extra);
}

// The table's columns: header text and the column /api/rows sorts by.
function rowColumns() {
  return [["#", "id"], ["teacher", "teacher"], ["dialect", "dialect"], ["difficulty", "difficulty"], ["database", "db_id"],
    ["question", "question"], ["turns", "turns"], ["converged", "converged"], ["ran", "exec_ok"], ["correct", "correct"],
    ["violations", "format_violations"], [INFO.kind === "dataset" ? "tokens" : "teacher tokens", "tokens"],
    ...(INFO.kind === "dataset" ? [["trainable", "trainable"]] : [])];
}

// sortHeader is a column header that sorts by it: ascending, then descending, then row order.
function sortHeader(params, [text, col]) {
  const cur = params.get("sort") || "";
  const next = cur === col ? "-" + col : cur === "-" + col ? "" : col;
  const p = new URLSearchParams(params);
  p.delete("offset");
  if (next) p.set("sort", next); else p.delete("sort");
  const mark = cur === col ? " ▲" : cur === "-" + col ? " ▼" : "";
  return h("th", {"data-sort": col, class: mark ? "sorted" : "", title: "sort by " + text},
    h("a", {href: "#/?" + p.toString()}, text, mark));
}

// Keyboard navigation of the rows table: j/k move the selection, Enter opens the row, /
// goes to the full-text search box.
let selected = -1;
function selectRow(i) {
  const trs = [...document.querySelectorAll("#rows tbody tr[data-id]")];
  if (trs.length === 0) return;
  selected = Math.max(0, Math.min(trs.length - 1, i));
  trs.forEach((tr, k) => tr.classList.toggle("sel", k === selected));
  trs[selected].scrollIntoView({block: "nearest"});
}
document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const el = document.activeElement;
  if (el && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName)) {
    if (e.key === "Escape") el.blur();
    return;
  }
  if (!document.querySelector("#rows")) return;
  if (e.key === "j") selectRow(selected + 1);
  else if (e.key === "k") selectRow(selected - 1);
  else if (e.key === "Enter" && selected >= 0) {
    const a = document.querySelectorAll("#rows tbody tr[data-id]")[selected].querySelector("a");
    if (a) location.hash = a.getAttribute("href");
  } else if (e.key === "/") {
    const box = document.querySelector("#f-text");
    if (box) {
      e.preventDefault();
      box.focus();
      box.select();
      // Some input paths (DevTools' key events) still deliver the "/" as a character.
      const at = Date.now();
      box.addEventListener("beforeinput", (ev) => { if (ev.data === "/" && Date.now() - at < 200) ev.preventDefault(); }, {once: true});
    }
  } else return;
  e.preventDefault();
});

async function renderRows(params) {
  const page = await api("/api/rows?" + params.toString());
  const limit = Number(params.get("limit") || 50);
  const go = (off) => { const p = new URLSearchParams(params); p.set("offset", off); location.hash = "#/?" + p.toString(); };
  const setLimit = (n) => {
    const p = new URLSearchParams(params);
    // Keep the first row shown on the new page.
    p.set("offset", Math.floor(Number(params.get("offset") || 0) / n) * n);
    p.set("limit", n);
    location.hash = "#/?" + p.toString();
  };
  const head = rowColumns();
  const hl = params.get("text") ? "?hl=" + encodeURIComponent(params.get("text")) : "";
  selected = -1;
  const rows = page.rows.map((r) => {
    const link = "#/row/" + r.id + hl;
    if (r.error) {
      return h("tr", {class: "rowerr", "data-id": r.id}, h("td", {}, h("a", {href: link}, r.id)),
        h("td", {colspan: head.length - 1}, `cannot read ${r.key || "this row"}: ${r.error}`));
    }
    return h("tr", {"data-id": r.id, onclick: (e) => { if (e.target.tagName !== "A") location.hash = link; }},
      h("td", {}, h("a", {href: link}, r.id)), h("td", {}, r.teacher), h("td", {}, r.dialect), h("td", {}, r.difficulty),
      h("td", {}, r.db_id), h("td", {class: "q"}, r.question, ...(r.labels || []).map((l) => h("span", {class: "tag label"}, l)),
        r.noted ? h("span", {class: "tag", title: "has a note"}, "note") : null), h("td", {class: "n"}, r.turns),
      h("td", {}, yesno(r.converged)), h("td", {}, yesno(r.exec_ok)),
      h("td", {}, yesno(r.correct), r.unjudged ? unjudgedTag() : ""),
      h("td", {class: "n"}, r.format_violations ? h("span", {class: "bad"}, r.format_violations) : "0", r.truncated ? h("span", {class: "tag warn"}, "truncated") : ""),
      h("td", {class: "n"}, fmt(r.tokens)), INFO.kind === "dataset" ? h("td", {class: "n"}, fmt(r.trainable)) : null);
  });
  const table = h("table", {class: "rows", id: "rows"}, h("thead", {}, h("tr", {}, ...head.map((c) => sortHeader(params, c)))),
    h("tbody", {}, ...rows));
  const summary = h("p", {class: "summary", id: "summary"}, `${fmt(page.total)} of ${fmt(page.all)} rows match`);
  const charts = h("details", {id: "charts", open: localStorage.getItem("charts") !== "closed",
    ontoggle: (e) => localStorage.setItem("charts", e.target.open ? "open" : "closed")},
    h("summary", {}, "charts of the matching rows"), h("div", {class: "minicharts", id: "minicharts"}, h("p", {class: "muted"}, "…")));
  setMain(h("div", {class: "layout"}, h("aside", {}, filterPanel(params, page.facets, page.labels)),
    h("section", {class: "content"}, summary, charts, pager(page.total, page.offset, limit, go, setLimit), table,
      page.rows.length === 0 ? h("p", {class: "muted"}, "No rows match these filters.") : "",
      pager(page.total, page.offset, limit, go))));
  await renderCharts(params);
}

// ---- charts of the matching rows ----------------------------------------------------------

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const k of kids) el.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
  return el;
}

// renderCharts draws the charts of /api/charts for the filter params; a bar's click narrows
// the table to it.
async function renderCharts(params) {
  const box = document.getElementById("minicharts");
  if (!box) return;
  const p = new URLSearchParams(params);
  for (const k of ["sort", "offset", "limit"]) p.delete(k);
  let page;
  try { page = await api("/api/charts?" + p.toString()); } catch (e) { box.replaceChildren(h("p", {class: "error"}, String(e.message))); return; }
  box.replaceChildren(...page.charts.map((c) => miniChart(c, params)));
}

function miniChart(c, params) {
  const W = 260, H = 90, n = Math.max(1, c.bars.length), bw = W / n;
  // An all-zero chart still has an axis of one row.
  const top = Math.max(1, ...c.bars.map((b) => b.count));
  const facet = ["teacher", "dialect", "difficulty"].includes(c.name);
  // Unjudged rows (their gold SQL gave no result) count as wrong in EX: the bars say so.
  const unjudged = c.bars.reduce((n, b) => n + (b.unjudged || 0), 0);
  const g = svg("svg", {viewBox: `0 0 ${W} ${H + 14}`, width: W, height: H + 14, class: "minichart-svg"});
  c.bars.forEach((b, i) => {
    const bh = Math.round((b.count / top) * H);
    const ex = b.count ? (100 * b.correct / b.count).toFixed(1) : "0.0";
    const r = svg("rect", {x: (i * bw + 1).toFixed(1), y: H - bh, width: Math.max(1, bw - 2).toFixed(1), height: Math.max(bh, b.count ? 1 : 0),
      class: "bar" + (b.filter ? " link" : ""), "data-label": b.label, "data-count": b.count},
      svg("title", {}, `${b.label}: ${fmt(b.count)} rows, ${fmt(b.correct)} correct (EX ${ex}%)` +
        (b.unjudged ? `, ${fmt(b.unjudged)} unjudged: their gold SQL failed (counted as wrong)` : "")));
    if (b.filter) {
      r.addEventListener("click", () => {
        const q = new URLSearchParams(params);
        q.delete("offset");
        for (const [k, v] of new URLSearchParams(b.filter)) q.delete(k);
        for (const [k, v] of new URLSearchParams(b.filter)) q.append(k, v);
        location.hash = "#/?" + q.toString();
      });
    }
    g.appendChild(r);
    if (facet && bw > 30) g.appendChild(svg("text", {x: (i * bw + bw / 2).toFixed(1), y: H + 11, class: "barlabel"}, `${b.label} ${ex}%${b.unjudged ? "*" : ""}`));
  });
  if (!facet && c.bars.length) {
    g.appendChild(svg("text", {x: 0, y: H + 11, class: "barlabel start"}, c.bars[0].label.split("–")[0]));
    g.appendChild(svg("text", {x: W, y: H + 11, class: "barlabel end"}, c.bars[c.bars.length - 1].label.split("–").pop()));
  }
  return h("figure", {class: "minichart", "data-chart": c.name}, h("figcaption", {}, c.title, " ", h("span", {class: "muted small"}, `(max ${fmt(top)})`),
    facet && unjudged ? h("span", {class: "muted small unjudged", title: "rows whose gold SQL gave no result: EX counts them as wrong"},
      ` · ${fmt(unjudged)} unjudged${bw > 30 ? " (*)" : ""}`) : null), g);
}

// ---- trajectory page ---------------------------------------------------------------------

function sqlBlock(sql, cls) {
  return h("pre", {class: "sql " + (cls || "")}, highlightSQL(sql || ""));
}

function observationBlock(o) {
  if (!o) return null;
  if (o.kind === "table") {
    return h("div", {class: "obs"}, h("table", {class: "obs-table"},
      h("thead", {}, h("tr", {}, ...o.columns.map((c) => h("th", {}, c)))),
      h("tbody", {}, ...o.rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {class: c === "NULL" ? "null" : ""}, c)))))),
      h("div", {class: "obs-footer"}, o.footer));
  }
  const cls = {empty: "obs-empty", error: "obs-error", timeout: "obs-error", refused: "obs-error", format: "obs-error"}[o.kind] || "obs-text";
  return h("div", {class: "obs"}, h("pre", {class: cls}, o.text),
    o.kind === "empty" && o.columns ? h("div", {class: "obs-footer"}, "columns: " + o.columns.join(", ")) : null);
}

function turnCard(t, kind) {
  const badges = [];
  if (t.format_violation) badges.push(h("span", {class: "tag bad"}, "format violation"));
  if (t.truncated) badges.push(h("span", {class: "tag warn"}, "truncated" + (t.finish_reason ? ` (${t.finish_reason})` : "")));
  if (t.outcome) badges.push(h("span", {class: "tag " + (t.outcome === "ok" ? "good" : "bad")}, "exec " + t.outcome));
  const tokens = [];
  if (t.trainable >= 0) tokens.push(`${fmt(t.trainable)} trainable student tokens`);
  if (t.completion_tokens || t.prompt_tokens) {
    tokens.push(`${kind === "eval" ? "policy" : "teacher"}: ${fmt(t.prompt_tokens)} prompt, ${fmt(t.completion_tokens)} completion` +
      (t.reasoning_tokens ? ` (${fmt(t.reasoning_tokens)} reasoning)` : ""));
  }
  if (t.latency_ms) tokens.push(`${t.latency_ms.toFixed(0)} ms`);
  const think = t.think ? h("details", {class: "think"},
    h("summary", {}, "think", t.think_source ? h("span", {class: "tag", title: "Where the think block of the training text comes from (curate build --think): the endpoint's separate reasoning field, or the <think> block the model wrote in its content"}, t.think_source === "field" ? "from the reasoning field" : "inline in the content") : "",
      h("span", {class: "preview"}, " " + t.think.slice(0, 120).replace(/\s+/g, " ") + (t.think.length > 120 ? "…" : ""))),
    h("pre", {class: "think-text"}, t.think)) : h("p", {class: "muted"}, "no reasoning");
  return h("article", {class: "turn", "data-turn": t.index},
    h("header", {}, h("h3", {}, `Turn ${t.index}`), ...badges, h("span", {class: "tokens"}, tokens.join(" · "))),
    think,
    t.sql ? sqlBlock(t.sql, "turn-sql") : h("pre", {class: "reply-raw"}, t.reply.trim() ? t.reply :
      t.reply ? `(whitespace only: ${fmt(t.reply.length)} characters, ${fmt(t.reply.split("\n").length - 1)} of them newlines)` : "(empty reply)"),
    h("details", {class: "raw"}, h("summary", {}, "reply as stored"), h("pre", {}, t.reply)),
    t.observation ? h("div", {class: "obs-wrap"}, h("h4", {}, "observation"), observationBlock(t.observation)) :
      (t.observation_absent ? h("p", {class: "muted small"}, t.observation_absent) : null));
}

function metaLine(d) {
  const chips = [["teacher", d.teacher], ["model", d.model], ["dialect", d.dialect], ["database", d.db_id],
    ["task", d.task_id], ["difficulty", d.difficulty], ["sample", d.sample], ["source", d.source]];
  return h("dl", {class: "meta"}, ...chips.filter(([, v]) => v !== "" && v !== undefined).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]));
}

// sqlFormatted says whether the row page shows final and gold SQL formatted (the default) or
// as written; the choice is kept in the browser.
const sqlFormatted = () => localStorage.getItem("sqlfmt") !== "raw";

function outcomeBlock(d) {
  const tok = [];
  if (d.kind === "dataset") tok.push(`${fmt(d.num_tokens)} tokens, ${fmt(d.num_trainable_tokens)} trainable (stored)`);
  if (d.teacher_prompt_tokens || d.teacher_completion_tokens) tok.push(`teacher ${fmt(d.teacher_prompt_tokens)} prompt + ${fmt(d.teacher_completion_tokens)} completion tokens`);
  return h("section", {class: "outcome", id: "outcome"},
    h("h3", {}, "Judged outcome"),
    h("p", {}, "correct: ", yesno(d.correct), " · converged: ", yesno(d.converged), " · final SQL ran: ", yesno(d.exec_ok),
      " · format violations: ", String(d.format_violations), " · turns: ", String(d.turns.length)),
    d.gold_error ? h("p", {class: "warn", id: "unjudged"}, "unjudged: the gold SQL gave no result, so the answer could not be judged (correct is no whatever it returns): ",
      h("code", {}, d.gold_error)) : null,
    d.gold_dialect && d.gold_dialect !== d.dialect ? h("p", {class: "muted small", id: "gold-dialect"},
      `judged against the gold SQL's result on ${d.gold_dialect} (it failed on ${d.dialect})`) : null,
    tok.length ? h("p", {class: "muted"}, tok.join(" · ")) : null,
    h("h4", {}, "final SQL ", h("button", {type: "button", class: "small", id: "sql-format",
      title: "formatted: each clause on its own line, subqueries indented; only white space differs from the SQL as written",
      onclick: () => { localStorage.setItem("sqlfmt", sqlFormatted() ? "raw" : "formatted"); document.getElementById("outcome").replaceWith(outcomeBlock(d)); }},
      sqlFormatted() ? "show as written" : "show formatted")),
    d.final_sql ? sqlBlock(sqlFormatted() ? d.final_sql_formatted : d.final_sql, "final-sql") : h("p", {class: "muted"}, "none"),
    h("h4", {}, "gold SQL"), d.gold_sql ? sqlBlock(sqlFormatted() ? d.gold_sql_formatted : d.gold_sql, "gold-sql") : h("p", {class: "muted"}, d.gold_error || "none"),
    d.final_sql && d.gold_sql ? [h("h4", {}, "final SQL against gold"), sqlDiff(d.final_sql, d.gold_sql)] : null,
    resultsBlock(d));
}

// resultsBlock shows the final SQL's result beside the gold SQL's, both run by the viewer on
// the task's database (GET /api/results; kept by the server, so a re-render asks again cheaply).
function resultsBlock(d) {
  const box = h("div", {class: "results-pair", id: "results"}, h("p", {class: "muted small"}, "running the final and gold SQL…"));
  const col = (title, v, id) => h("div", {class: "result-col", id},
    h("h4", {}, title, v.engine ? h("span", {class: "muted small"}, ` ${v.engine} · ${fmt(v.total)} row${v.total === 1 ? "" : "s"} · ${v.duration_ms.toFixed(1)} ms${v.cached ? " · kept" : ""}`) : null),
    v.absent ? h("p", {class: "muted small absent"}, v.absent) : observationBlock(v.observation));
  api(`/api/results?id=${d.id}`).then((r) => {
    box.replaceChildren(col("final SQL's result", r.final, "result-final"), col("gold result", r.gold, "result-gold"),
      ...r.notes.map((n) => h("p", {class: "note"}, n)));
  }).catch((e) => box.replaceChildren(h("p", {class: "error", id: "results-error"}, "results: " + e.message)));
  return [h("h4", {}, "results on the task's database"), box];
}

// sqlDiff shows how the final SQL differs from the gold, word by word (case and white space
// aside): words only in the final SQL struck out, words only in the gold underlined.
function sqlDiff(final, gold) {
  const toks = (s) => s.match(/'(?:[^']|'')*'|"[^"]*"|`[^`]*`|[\p{L}\p{N}_.]+|\S/gu) || [];
  const a = toks(final), b = toks(gold);
  const key = (t) => /^['"`]/.test(t) ? t : t.toLowerCase();
  if (a.length * b.length > 4e6) return h("p", {class: "muted"}, "too long to compare");
  // Longest common subsequence over the words.
  const L = Array.from({length: a.length + 1}, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      L[i][j] = key(a[i]) === key(b[j]) ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0, same = true;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && key(a[i]) === key(b[j])) { out.push(a[i++] + " "); j++; }
    else if (j >= b.length || (i < a.length && L[i + 1][j] >= L[i][j + 1])) { out.push(h("del", {title: "only in the final SQL"}, a[i++])); out.push(" "); same = false; }
    else { out.push(h("ins", {title: "only in the gold SQL"}, b[j++])); out.push(" "); same = false; }
  }
  return h("div", {class: "sql-diff-wrap"}, same ? h("p", {class: "ok small sql-same"}, "the same words as the gold") : null,
    h("pre", {class: "sql-diff"}, ...out));
}

function trajectoryBody(d) {
  if (d.error) return h("div", {class: "error", id: "row-error"}, `This row cannot be read: ${d.error}`);
  return h("div", {class: "trajectory"},
    h("h2", {class: "question"}, d.question),
    d.evidence ? h("p", {class: "evidence"}, h("b", {}, "Evidence: "), d.evidence) : null,
    metaLine(d),
    d.annotation && INFO.annotations ? annotationPanel(d) : null,
    ...d.notes.map((n) => h("p", {class: "note"}, n)),
    h("details", {class: "system"}, h("summary", {}, `system prompt (${fmt(d.system.length)} characters)`), h("pre", {}, d.system)),
    h("details", {class: "user"}, h("summary", {}, "user prompt"), h("pre", {}, d.user)),
    h("div", {class: "turns"}, ...d.turns.map((t) => turnCard(t, d.kind))),
    outcomeBlock(d));
}

// annotationPanel edits the row's labels and note, saved beside the dataset (annotations.jsonl).
function annotationPanel(d) {
  let an = d.annotation;
  let labels = [...an.labels];
  const chips = h("span", {id: "annot-labels"});
  // The dataset's labels so far, offered as the input's suggestions.
  const known = h("datalist", {id: "annot-known"});
  api("/api/rows?limit=1").then((p) => known.replaceChildren(...(p.labels || []).map((f) => h("option", {value: f.value})))).catch(() => {});
  const input = h("input", {type: "text", id: "annot-label-input", list: "annot-known", placeholder: "add a label (Enter)", size: "18",
    onkeydown: (e) => {
      if (e.key === "Enter" || e.key === ",") { e.preventDefault(); addLabel(input.value); input.value = ""; }
    }});
  const note = h("textarea", {id: "annot-note", rows: "3", placeholder: "a note on this row (Ctrl+Enter saves)",
    onkeydown: (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); save(); } }});
  note.value = an.note;
  const status = h("span", {class: "muted small", id: "annot-status"}, an.rev ? `saved ${an.updated.replace("T", " ").replace("Z", " UTC")}` : "");
  const drawChips = () => chips.replaceChildren(...labels.map((l) => h("span", {class: "tag label", "data-label": l}, l, " ",
    h("button", {type: "button", class: "chip-x", title: "remove " + l, onclick: () => { labels = labels.filter((x) => x !== l); drawChips(); }}, "×"))));
  const addLabel = (text) => {
    for (const l of text.split(",").map((x) => x.trim()).filter(Boolean)) if (!labels.includes(l)) labels.push(l);
    drawChips();
  };
  const save = async () => {
    if (input.value.trim()) { addLabel(input.value); input.value = ""; }
    status.textContent = "saving…";
    status.className = "muted small";
    try {
      an = await apiPost("/api/annotate", {id: d.id, labels, note: note.value, rev: an.rev});
      status.textContent = `saved ${an.updated.replace("T", " ").replace("Z", " UTC")}`;
      status.className = "ok small";
    } catch (e) {
      if (e.status === 409 && e.answer.annotation) {
        // Another tab or viewer saved first: show what is stored now.
        an = e.answer.annotation;
        labels = [...(an.labels || [])];
        note.value = an.note || "";
        drawChips();
      }
      status.textContent = e.status === 409 ? "changed meanwhile in another tab or viewer: its version is shown; edit and save again" : "not saved: " + e.message;
      status.className = "bad small";
    }
  };
  drawChips();
  return h("section", {class: "annot", id: "annot"},
    h("div", {class: "annot-row"}, h("b", {}, "labels "), chips, " ", input, known),
    note,
    h("div", {class: "annot-row"}, h("button", {type: "button", id: "annot-save", onclick: save}, "Save note and labels"), " ", status));
}

async function renderRow(id, params) {
  const tab = params.get("tab") || "turns";
  const d = await api("/api/row?id=" + encodeURIComponent(id));
  const tabs = h("div", {class: "tabs"},
    h("a", {href: `#/row/${id}`, class: tab === "turns" ? "active" : "", id: "tab-turns"}, "Turns"),
    h("a", {href: `#/row/${id}?tab=mask`, class: tab === "mask" ? "active" : "", id: "tab-mask"}, "Loss mask"),
    h("span", {class: "spacer"}),
    Number(id) > 0 ? h("a", {href: `#/row/${Number(id) - 1}${tab === "mask" ? "?tab=mask" : ""}`}, "‹ previous row") : null,
    Number(id) + 1 < INFO.rows ? h("a", {href: `#/row/${Number(id) + 1}${tab === "mask" ? "?tab=mask" : ""}`}, "next row ›") : null,
    h("a", {href: "#/", onclick: (e) => { if (history.length > 1) { e.preventDefault(); history.back(); } }}, "back to rows"));
  const title = h("h1", {class: "rowtitle"}, `Row ${id}`, h("span", {class: "key"}, d.key || ""));
  if (tab === "mask") {
    setMain(title, tabs, await maskBody(id, d));
  } else {
    const body = trajectoryBody(d);
    const words = queryWords(params.get("hl") || "");
    let bar = null;
    if (words.length) {
      const n = highlight(body.querySelector(".turns"), words) + highlight(body.querySelector("#outcome"), words);
      for (const m of body.querySelectorAll("details mark.hit")) {
        for (let el = m.closest("details"); el; el = el.parentElement.closest("details")) el.open = true;
      }
      bar = h("p", {class: "hl-bar", id: "hl-count"}, `${fmt(n)} ${n === 1 ? "match" : "matches"} of ${words.join(", ")} highlighted`);
    }
    setMain(title, tabs, bar, body);
  }
}

// ---- full-text match highlighting ------------------------------------------------------------

const CJK = "\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}";

// queryWords splits a full-text query as the server's index does: runs of letters, digits and
// '_', lowercased, each CJK character on its own.
function queryWords(text) {
  const out = [];
  for (const w of text.toLowerCase().match(new RegExp(`[${CJK}]|(?:(?![${CJK}])[\\p{L}\\p{N}_])+`, "gu")) || []) {
    if (!out.includes(w)) out.push(w);
  }
  return out;
}

// highlight wraps each place in root's text where a word of the text begins with one of words
// in <mark class="hit">, and returns how many.
function highlight(root, words) {
  if (!root || words.length === 0) return 0;
  const esc = (w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const re = new RegExp(words.map((w) => new RegExp(`[${CJK}]`, "u").test(w) ? esc(w) :
    `(?<![\\p{L}\\p{N}_](?<![${CJK}]))${esc(w)}`).join("|"), "giu");
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let n = 0;
  for (const node of nodes) {
    const text = node.nodeValue;
    let last = 0, m;
    const frag = document.createDocumentFragment();
    re.lastIndex = 0;
    while ((m = re.exec(text))) {
      if (m[0] === "") { re.lastIndex++; continue; }
      frag.append(text.slice(last, m.index), h("mark", {class: "hit"}, m[0]));
      last = m.index + m[0].length;
      n++;
    }
    if (last > 0) {
      frag.append(text.slice(last));
      node.replaceWith(frag);
    }
  }
  return n;
}

// ---- loss mask -------------------------------------------------------------------------

async function maskBody(id, d) {
  const m = await api("/api/mask?id=" + encodeURIComponent(id));
  if (m.error) return h("div", {class: "error", id: "mask-error"}, m.error);
  // The system turn (schema and rules, no loss, often most of the tokens) is folded; the
  // tokens stay in the page, so every token of the rendering is there to inspect.
  const pre = h("pre", {class: "mask", id: "mask"});
  const sysBody = h("span", {class: "sys-body"});
  const sysFold = h("details", {class: "sys-fold", id: "mask-system"}, h("summary", {}, ""), sysBody);
  pre.appendChild(sysFold);
  let target = sysBody, starts = 0, sysTokens = 0, alt = 0;
  for (const [s, e, span] of m.tokens) {
    const text = m.text.slice(s, e);
    const special = text === "<|im_start|>" || text === "<|im_end|>";
    if (text === "<|im_start|>" && ++starts === 2) target = pre;
    if (target === sysBody) sysTokens++;
    const cls = "tok " + (span >= 0 ? "on" : "off") + (alt++ % 2 ? " b" : " a") + (special ? " special" : "") + (s === e ? " partial" : "");
    target.appendChild(h("span", {class: cls, "data-span": span}, text));
  }
  sysFold.firstChild.textContent = `system turn: ${fmt(sysTokens)} tokens, no loss (show)`;
  const agree = m.has_stored ? (m.tokens.length === m.stored_tokens && m.trainable === m.stored_trainable) : null;
  const counts = h("p", {class: "mask-counts", id: "mask-counts"},
    `${fmt(m.tokens.length)} tokens, ${fmt(m.trainable)} trainable in ${m.spans} assistant spans`,
    m.tokenizer ? ` (tokenizer ${m.tokenizer})` : "",
    m.has_stored ? h("span", {class: agree ? "ok" : "bad"}, agree ? " — matches the row's num_tokens / num_trainable_tokens" :
      ` — the row stores ${fmt(m.stored_tokens)} / ${fmt(m.stored_trainable)}: built with another tokenizer?`) : "");
  return h("div", {class: "maskview"},
    h("p", {class: "legend"}, h("span", {class: "tok on a"}, "trainable token"), " ", h("span", {class: "tok off a"}, "no loss"), " ",
      h("span", {class: "tok off a special"}, "<|special|>"),
      " — the rendered chat template exactly as curate build tokenises it; token boundaries alternate in shade."),
    counts, pre);
}

// ---- stats -----------------------------------------------------------------------------

function statsTable(t) {
  return h("div", {class: "stats-table"}, h("h3", {}, t.title),
    !t.rows || t.rows.length === 0 ? h("p", {class: "muted"}, "(none)") :
      h("table", {class: "stats"}, h("thead", {}, h("tr", {}, ...t.header.map((x) => h("th", {}, x)))),
        h("tbody", {}, ...t.rows.map((r) => h("tr", {}, ...r.map((c, i) => h("td", {class: i ? "n" : ""}, c)))))));
}

async function renderStats() {
  const page = await api("/api/stats");
  setMain(h("div", {class: "statspage"}, ...page.sections.map((s) => h("section", {class: "stats-section"},
    h("h2", {}, s.title), s.error ? h("div", {class: "error"}, s.error) : null,
    h("div", {class: "charts"}, ...s.charts.map((c) => h("figure", {}, h("img", {src: c.url, alt: c.title, loading: "lazy"})))),
    ...s.tables.map(statsTable)))));
}

// ---- compare ---------------------------------------------------------------------------

// unjudgedTag marks a row or a compare cell whose gold SQL gave no result (rundir.Outcome.Unjudged).
function unjudgedTag() {
  return h("span", {class: "tag warn", title: "its gold SQL gave no result, so it could not be judged"}, "unjudged");
}

// cellOutcome says how a present compare cell came out: correct, wrong, or unjudged (never
// "wrong" where the gold SQL gave no result).
function cellOutcome(c) {
  return c.unjudged ? unjudgedTag() : yesno(c.correct, "✓ correct", "✗ wrong");
}

async function renderCompare(params) {
  const page = await api("/api/compare?" + params.toString());
  const form = h("form", {id: "compare-filters", class: "inline", onsubmit: (e) => { e.preventDefault(); apply(); }});
  const apply = () => {
    const p = new URLSearchParams();
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") { if (el.checked) p.set(el.name, "1"); }
      else if (el.value !== "") p.set(el.name, el.value);
    }
    location.hash = "#/compare?" + p.toString();
  };
  const polSelect = (name, label) => h("label", {}, label, " ", h("select", {name, id: "c-" + name, onchange: apply},
    h("option", {value: ""}, "any policy"),
    ...page.policies.map((p, i) => h("option", {value: String(i), selected: params.get(name) === String(i)}, p))));
  form.append(polSelect("good", "correct:"), " ", polSelect("bad", "wrong:"), " ",
    h("label", {}, h("input", {type: "checkbox", name: "differ", id: "c-differ", checked: params.get("differ") === "1", onchange: apply}), " outcomes differ"), " ",
    h("label", {}, h("input", {type: "checkbox", name: "allwrong", id: "c-allwrong", checked: params.get("allwrong") === "1", onchange: apply}), " all wrong"), " ",
    h("label", {}, h("input", {type: "checkbox", name: "sqldiffer", id: "c-sqldiffer", checked: params.get("sqldiffer") === "1", onchange: apply}), " final SQL differs"), " ",
    page.rows.some((r) => r.dialect) || params.get("dialect") ? h("label", {}, "dialect ", h("input", {type: "search", name: "dialect", id: "c-dialect", size: "8",
      value: params.get("dialect") || "", onchange: apply})) : "", " ",
    h("label", {}, "difficulty ", h("select", {name: "difficulty", id: "c-difficulty", onchange: apply}, h("option", {value: ""}, "any"),
      ...page.difficulties.map((d) => h("option", {value: d, selected: params.get("difficulty") === d}, d || "(none)")))), " ",
    h("input", {type: "search", name: "q", value: params.get("q") || "", placeholder: "question or db", onchange: apply}));
  const who = INFO.kind === "dataset" ? "teachers" : "policies";
  const presets = h("p", {class: "presets"}, "Quick filters: ",
    h("a", {href: "#/compare?allwrong=1", class: "button small", id: "preset-allwrong"}, `all ${who} wrong`),
    h("a", {href: "#/compare?differ=1", class: "button small", id: "preset-differ"}, `${who} disagree`),
    ...page.policies.flatMap((p, i) => page.policies.map((q, j) => i === j ? null :
      h("a", {href: `#/compare?good=${i}&bad=${j}`, class: "button small"}, `${p} correct, ${q} wrong`))).filter(Boolean));
  const limit = Number(params.get("limit") || 50);
  const go = (off) => { const p = new URLSearchParams(params); p.set("offset", off); location.hash = "#/compare?" + p.toString(); };
  const dialects = page.rows.some((r) => r.dialect);
  const table = h("table", {class: "rows compare", id: "compare"},
    h("thead", {}, h("tr", {}, h("th", {}, "task"), dialects ? h("th", {}, "dialect") : null, h("th", {}, "difficulty"), h("th", {}, "database"),
      h("th", {}, "question"), h("th", {}, "agreement"), ...page.policies.map((p) => h("th", {}, p)))),
    h("tbody", {}, ...page.rows.map((r) => h("tr", {"data-key": r.key, onclick: () => { location.hash = "#/task/" + encodeURIComponent(r.key); }},
      h("td", {}, h("a", {href: "#/task/" + encodeURIComponent(r.key)}, r.task_id)), dialects ? h("td", {}, r.dialect) : null,
      h("td", {}, r.difficulty), h("td", {}, r.db_id), h("td", {class: "q"}, r.question, ...(r.labels || []).map((l) => h("span", {class: "tag label"}, l)),
        r.noted ? h("span", {class: "tag", title: "has a note"}, "note") : null), agreementCell(r),
      ...r.cells.map((c) => h("td", {class: "cell"}, !c.present ? h("span", {class: "muted"}, "—") :
        [cellOutcome(c), h("span", {class: "small muted"}, ` ${c.turns} turns`),
          c.format_violations ? h("span", {class: "small bad"}, ` ${c.format_violations} viol.`) : ""]))))));
  setMain(h("section", {class: "content wide"}, h("h2", {}, INFO.kind === "dataset" ? "Teachers task by task" : "Compare policies task by task"), form, presets,
    h("p", {class: "summary", id: "summary"}, `${fmt(page.total)} of ${fmt(page.all)} tasks match`,
      page.unjudged ? h("span", {class: "unjudged", title: "tasks with an unjudged result (its gold SQL gave no result): neither correct nor wrong to the filters"},
        `; ${fmt(page.unjudged)} unjudged`) : null),
    pager(page.total, page.offset, limit, go), table));
}

// agreementCell says how many present policies are right (unjudged ones count as not correct,
// and are named) and how many final SQLs they wrote.
function agreementCell(r) {
  const present = r.cells.filter((c) => c.present).length;
  const judged = present - (r.unjudged || 0);
  return h("td", {class: "agree small"}, h("span", {class: r.correct === present ? "ok" : r.correct === 0 && judged > 0 ? "bad" : "warn"},
    `${r.correct}/${present} correct`), r.unjudged ? ` · ${r.unjudged} unjudged` : "",
    ` · ${r.distinct_sql === 1 ? "same SQL" : `${r.distinct_sql} different SQL`}`);
}

async function renderTask(id) {
  const page = await api("/api/task?id=" + encodeURIComponent(id));
  const t = page.task;
  const cols = page.policies.map((p, i) => {
    const d = page.details[i], c = t.cells[i];
    return h("div", {class: "policy-col", "data-policy": p},
      h("h3", {}, p, " ", c.present ? cellOutcome(c) : h("span", {class: "muted"}, "no trajectory")),
      d ? h("div", {}, d.id !== undefined ? h("p", {}, h("a", {href: "#/row/" + d.id}, "open as a row")) : null,
        d.error ? h("div", {class: "error"}, d.error) : h("div", {class: "turns"}, ...d.turns.map((tv) => turnCard(tv, d.kind))),
        d.error ? null : h("h4", {}, "final SQL"), d.error ? null : sqlBlock(d.final_sql || "", "final-sql"),
        d.error || !d.final_sql || !d.gold_sql ? null : [h("h4", {}, "against gold"), sqlDiff(d.final_sql, d.gold_sql)]) : null);
  });
  const gold = page.details.find((d) => d && d.gold_sql);
  setMain(h("section", {class: "content wide"},
    h("p", {}, h("a", {href: "#/compare"}, INFO.kind === "dataset" ? "‹ by task" : "‹ compare")),
    h("h2", {class: "question"}, t.question),
    h("dl", {class: "meta"}, h("dt", {}, "task"), h("dd", {}, t.task_id), t.dialect ? [h("dt", {}, "dialect"), h("dd", {}, t.dialect)] : null,
      h("dt", {}, "database"), h("dd", {}, t.db_id), h("dt", {}, "difficulty"), h("dd", {}, t.difficulty),
      h("dt", {}, "agreement"), h("dd", {id: "task-agreement"}, agreementCell(t).textContent)),
    gold ? h("div", {}, h("h4", {}, "gold SQL"), sqlBlock(gold.gold_sql, "gold-sql")) : null,
    h("div", {class: "side-by-side", id: "side-by-side"}, ...cols)));
}

// ---- router ----------------------------------------------------------------------------

async function render() {
  const began = performance.now();
  const r = route();
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", (r.parts[0] || "rows") === a.dataset.nav ||
      (r.parts[0] === "row" && a.dataset.nav === "rows") || (r.parts[0] === "task" && a.dataset.nav === "compare"));
  }
  try {
    if (r.parts.length === 0) await renderRows(r.params);
    else if (r.parts[0] === "row") await renderRow(r.parts[1], r.params);
    else if (r.parts[0] === "stats") await renderStats();
    else if (r.parts[0] === "compare") await renderCompare(r.params);
    else if (r.parts[0] === "task") await renderTask(decodeURIComponent(r.parts.slice(1).join("/")));
    else showError(new Error("no such page: " + location.hash));
  } catch (e) {
    showError(e);
  }
  // How long the page took (BenchmarkPage reads them): since its render began, and since the
  // document's navigation began.
  document.body.dataset.renderMs = (performance.now() - began).toFixed(1);
  document.body.dataset.loadMs = performance.now().toFixed(1);
  document.body.dataset.ready = location.hash || "#/";
}

window.addEventListener("hashchange", () => { document.body.dataset.ready = ""; render(); window.scrollTo(0, 0); });
(async () => {
  try {
    await loadInfo();
  } catch (e) {
    showError(e);
    return;
  }
  await render();
  setInterval(pollLive, 3000);
})();
