// Training-health dashboard: draws every panel as inline SVG from the DATA object that
// dashboard.py embeds in the page. No libraries, no network: the file works from disk anywhere.
// Titles, axis labels, log scales, role colours and alert markers come from DATA.style, i.e.
// panels.py, the one definition the report's PNGs and the TensorBoard events read too.
"use strict";

const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 270, M = {l: 78, r: 14, t: 10, b: 34};
const RUN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const PANELS = DATA.style.panels, ROLE_COLORS = DATA.style.roles, EVENT_STYLE = DATA.style.events;

function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(f => f * mag).find(s => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) out.push(v);
  return out;
}

function fmt(v) {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e5 || a < 1e-3) return v.toExponential(0).replace("e+", "e");
  return +v.toPrecision(3) + "";
}

// series: [{name, x:[], y:[], color, dash, width, opacity}], markers: [{x, y, color, shape, title}];
// the panel's title, y label and log scale are PANELS[id]'s (opts.suffix is appended to the title)
function chart(id, series, opts) {
  const P = PANELS[id];
  opts = {log: P.log, ylabel: P.ylabel, ...(opts || {})};
  const box = document.getElementById(id);
  box.querySelector("h3").textContent = P.title + (opts.suffix || "");
  const svg = el("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img"}, box);
  const tf = opts.log ? (v => Math.log10(v)) : (v => v);
  let xs = [], ys = [];
  for (const s of series) s.x.forEach((x, i) => {
    const y = s.y[i];
    if (y !== null && isFinite(y) && (!opts.log || y > 0)) { xs.push(x); ys.push(tf(y)); }
  });
  for (const m of opts.markers || []) xs.push(m.x);
  let points = 0;
  if (!xs.length) {
    el("text", {x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#888"}, svg).textContent = opts.empty || "no data";
    box.dataset.points = "0";
    return;
  }
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = ys.length ? [Math.min(...ys), Math.max(...ys)] : [0, 1];
  if (x1 === x0) x1 = x0 + 1;
  const pad = (y1 - y0) * 0.05 || Math.abs(y0) * 0.05 || 1;
  y0 -= pad; y1 += pad;
  const px = x => M.l + (x - x0) / (x1 - x0) * (W - M.l - M.r);
  const py = y => H - M.b - (y - y0) / (y1 - y0) * (H - M.t - M.b);
  el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: "#fff", stroke: "#ccc"}, svg);
  for (const v of niceTicks(x0, x1, 6)) {
    el("line", {x1: px(v), x2: px(v), y1: M.t, y2: H - M.b, stroke: "#eee"}, svg);
    el("text", {x: px(v), y: H - M.b + 14, "text-anchor": "middle", class: "tick"}, svg).textContent = fmt(v);
  }
  const yt = opts.yticks ? opts.yticks.map(t => t[0])
    : opts.log ? niceTicks(Math.floor(y0), Math.ceil(y1), 6).filter(v => Number.isInteger(v) && v >= y0 && v <= y1)
    : niceTicks(y0, y1, 5);
  yt.forEach((v, k) => {
    el("line", {x1: M.l, x2: W - M.r, y1: py(v), y2: py(v), stroke: "#eee"}, svg);
    el("text", {x: M.l - 5, y: py(v) + 4, "text-anchor": "end", class: "tick"}, svg).textContent =
      opts.yticks ? opts.yticks[k][1] : opts.log ? fmt(Math.pow(10, v)) : fmt(v);
  });
  el("text", {x: (W + M.l) / 2, y: H - 4, "text-anchor": "middle", class: "axis"}, svg).textContent = "step";
  el("text", {x: 12, y: (H - M.b) / 2, transform: `rotate(-90 12 ${(H - M.b) / 2})`, "text-anchor": "middle",
              class: "axis"}, svg).textContent = opts.ylabel || "";
  for (const s of series) {
    let d = "", pen = false;
    s.x.forEach((x, i) => {
      const y = s.y[i];
      if (y === null || !isFinite(y) || (opts.log && y <= 0)) { pen = false; return; }
      d += (pen ? "L" : "M") + px(x).toFixed(1) + " " + py(tf(y)).toFixed(1);
      pen = true; points++;
    });
    if (!d) continue;
    const p = el("path", {d, fill: "none", stroke: s.color, "stroke-width": s.width || 1.5,
                          "stroke-dasharray": s.dash || "", opacity: s.opacity || 1}, svg);
    el("title", {}, p).textContent = s.name;
    if (s.dots) s.x.forEach((x, i) => {
      if (s.y[i] !== null && isFinite(s.y[i])) {
        el("circle", {cx: px(x), cy: py(tf(s.y[i])), r: 2.5, fill: s.color}, svg);
      }
    });
  }
  for (const m of opts.markers || []) {
    const yv = m.y !== undefined && m.y !== null && isFinite(m.y) && (!opts.log || m.y > 0) ? py(tf(m.y)) : M.t + 8;
    marker(svg, px(m.x), yv, m.color, m.shape).appendChild(document.createElementNS(NS, "title")).textContent = m.title;
    points++;
  }
  box.dataset.points = String(points);
  const legend = box.querySelector(".legend");
  const named = series.filter(s => s.legend !== false);
  legend.innerHTML = named.slice(0, 12).map(s =>
    `<span><i style="background:${s.color}"></i>${s.name}</span>`).join("") +
    (named.length > 12 ? `<span>+${named.length - 12} more</span>` : "");
}

function marker(svg, x, y, color, shape) {
  const g = el("g", {}, svg), s = 6;
  const shapes = {
    triangle: `M${x} ${y - s}L${x + s} ${y + s}L${x - s} ${y + s}Z`,
    down: `M${x - s} ${y - s}L${x + s} ${y - s}L${x} ${y + s}Z`,
    up: `M${x} ${y - s}L${x + s} ${y + s}L${x - s} ${y + s}Z`,
    square: `M${x - s} ${y - s}h${2 * s}v${2 * s}h${-2 * s}Z`,
    cross: `M${x - s} ${y - s}L${x + s} ${y + s}M${x + s} ${y - s}L${x - s} ${y + s}`};
  if (shapes[shape]) el("path", {d: shapes[shape], fill: color, stroke: color, "stroke-width": 2.5}, g);
  else el("circle", {cx: x, cy: y, r: s, fill: color}, g);
  return g;
}

function runColor(i) { return RUN_COLORS[i % RUN_COLORS.length]; }

function draw() {
  const runs = DATA.runs, many = runs.length > 1;
  const S = (key, opts) => runs.map((r, i) => ({name: r.label, x: r.steps.step, y: r.steps[key],
                                               color: runColor(i), ...(opts || {})}));
  const ev = (r, i, kinds, key) => r.events.filter(e => kinds.includes(e.kind)).map(e => {
    const j = r.steps.step.indexOf(e.step);
    return {x: e.step, y: j >= 0 && key ? r.steps[key][j] : null, color: (EVENT_STYLE[e.kind] || ["#000"])[0],
            shape: (EVENT_STYLE[e.kind] || [0, "circle"])[1],
            title: `${r.label} step ${e.step} ${e.kind}: ${e.message}`};
  });
  chart("p-loss", runs.flatMap((r, i) => [
    {name: `${r.label} train`, x: r.steps.step, y: r.steps.loss, color: runColor(i), width: 1, opacity: 0.8},
    {name: `${r.label} val`, x: r.val.step, y: r.val.loss, color: runColor(i), dash: "4 3", dots: true}]),
    {markers: runs.flatMap((r, i) => ev(r, i, ["nonfinite", "plateau"], null))});
  chart("p-grad", S("grad_norm"),
    {markers: runs.flatMap((r, i) => ev(r, i, ["grad_spike", "nonfinite"], "grad_norm"))});
  chart("p-param", S("param_norm"));
  chart("p-update", runs.flatMap((r, i) => [
    {name: r.label, x: r.steps.step, y: r.steps.update_ratio, color: runColor(i), width: 1.8},
    ...Object.entries(r.layers).filter(([k, v]) => v.update_ratio).map(([k, v]) =>
      ({name: `${r.label} ${k}`, x: v.step, y: v.update_ratio, color: runColor(i), width: 0.6, opacity: 0.35,
        legend: false}))]));
  for (const [id, key] of [["p-scale", "scale"], ["p-amax", "amax"]]) {
    chart(id, runs.flatMap((r, i) => Object.entries(r.scales).map(([k, v]) => ({
      name: `${many ? r.label + " " : ""}${k}`, x: v.step, y: v[key], color: ROLE_COLORS[v.role] || "#555",
      width: 0.9, opacity: 0.7, dash: i ? "5 3" : "", legend: false}))).concat(
      Object.entries(ROLE_COLORS).map(([k, c]) => ({name: k, x: [], y: [], color: c}))),
      {suffix: many ? "; dash: run" : "", empty: "no FP8 tensors in these runs",
       markers: runs.flatMap((r, i) => ev(r, i, ["scale_drop", "scale_rise"], null))});
  }
  chart("p-act", runs.flatMap((r, i) =>
    Object.entries(r.layers).filter(([k, v]) => v.act_amax).map(([k, v], j) => ({
      name: `${many ? r.label + " " : ""}${k}`, x: v.step, y: v.act_amax,
      color: many ? runColor(i) : RUN_COLORS[j % RUN_COLORS.length], width: 1.2}))));
  chart("p-speed", S("tokens_per_s", {width: 1}));
  chart("p-mem", runs.flatMap((r, i) => Object.entries(r.memory).map(([k, v], j) => ({
    name: `${r.label} ${k}`, x: v.step, y: v.mib, color: runColor(i), dash: ["", "4 3", "1 3", "8 3"][j % 4]}))));
  chart("p-lr", runs.flatMap((r, i) => [
    {name: `${r.label} lr`, x: r.steps.step, y: r.steps.lr, color: runColor(i)},
    {name: `${r.label} loss scale`, x: r.steps.step, y: r.steps.loss_scale, color: runColor(i), dash: "4 3",
     legend: r.steps.loss_scale.some(v => v !== null)}]));
  timeline(runs);
  document.body.dataset.ready = "1";
}

function timeline(runs) {
  const kinds = Object.keys(EVENT_STYLE);
  const series = [], markers = [];
  runs.forEach((r, i) => r.events.forEach(e => {
    const style = EVENT_STYLE[e.kind] || ["#000", "circle"];
    markers.push({x: e.step, y: kinds.indexOf(e.kind) + 1 + i * 0.15, color: style[0], shape: style[1],
                  title: `${r.label} step ${e.step} ${e.kind}: ${e.message}` + (e.action ? ` -> ${e.action}` : "")});
  }));
  const steps = runs.flatMap(r => r.steps.step);
  series.push({name: "", x: [Math.min(...steps), Math.max(...steps)], y: [0.5, kinds.length + 0.5], color: "none",
               legend: false});
  chart("p-events", series,
        {markers, yticks: kinds.map((k, j) => [j + 1, k.replace("loss_scale_backoff", "fp16 backoff")])});
  const box = document.getElementById("p-events");
  box.querySelector(".legend").innerHTML = kinds.map(k =>
    `<span><i style="background:${EVENT_STYLE[k][0]}"></i>${k}</span>`).join("");
  const rows = runs.flatMap(r => r.events.map(e =>
    `<tr><td>${r.label}</td><td>${e.step}</td><td>${e.kind}</td><td>${e.message}</td><td>${e.action || ""}</td></tr>`));
  document.getElementById("events").innerHTML = rows.length ?
    "<table><tr><th>run</th><th>step</th><th>alert</th><th>what it saw and means</th><th>action</th></tr>" +
    rows.join("") + "</table>"
    : "<p>No alerts.</p>";
}

draw();
