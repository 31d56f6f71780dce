// svgchart: the dashboard's small SVG line and scatter charts (no dependencies).
// svgChart(opts) returns an <svg> element. opts: title, xLabel, yLabel, width, height,
// xInteger (integer ticks), xMin/xMax/yMin/yMax (fixed ranges), series: [{name, color, points:
// [[x, y, step]], line (default true), dots, dashed, width, opacity}], hlines: [{y, label, color}],
// (the legend is drawn below the plot, so it never covers data),
// attrs: extra attributes of the <svg>. Every point drawn with dots gets data-x / data-y
// attributes so tests can read what is on the chart.
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  // niceStep is 1, 2 or 5 × 10^k, so that span/step is at most about n.
  function niceStep(span, n) {
    const raw = span / Math.max(1, n);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }

  function ticks(lo, hi, n, integer) {
    if (!(hi > lo)) { hi = lo + 1; }
    let step = niceStep(hi - lo, n);
    if (integer) step = Math.max(1, Math.round(step));
    const out = [];
    for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
    return { values: out, step: step };
  }

  function fmt(v, step, integer) {
    if (integer) return String(Math.round(v));
    const d = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
    return v.toFixed(d);
  }

  function svgChart(o) {
    // The legend goes below the plot, wrapped into rows, so it never covers data; the chart
    // grows by its height and the plot keeps its size.
    const W = o.width || 420;
    const named = o.series.filter(s => s.name && !s.noLegend);
    const legend = [];
    let lx = 0, rows = named.length ? 1 : 0;
    for (const s of named) {
      const w = 24 + 5.6 * s.name.length;
      if (lx > 0 && lx + w > W - 64) { rows++; lx = 0; }
      legend.push({ s, x: lx, row: rows - 1 });
      lx += w + 10;
    }
    const legendH = rows * 13 + (rows ? 4 : 0);
    const H = (o.height || 250) + legendH;
    const m = { l: 52, r: 12, t: 24, b: 38 + legendH };
    const svg = el("svg", Object.assign({ viewBox: "0 0 " + W + " " + H, role: "img" }, o.attrs || {}));
    el("title", {}, svg).textContent = o.title;
    const all = [];
    for (const s of o.series) for (const p of s.points) if (isFinite(p[1])) all.push(p);
    for (const h of o.hlines || []) all.push([NaN, h.y]);
    let xs = all.map(p => p[0]).filter(isFinite), ys = all.map(p => p[1]);
    let x0 = o.xMin != null ? o.xMin : Math.min(...xs), x1 = o.xMax != null ? o.xMax : Math.max(...xs);
    let y0 = o.yMin != null ? o.yMin : Math.min(...ys), y1 = o.yMax != null ? o.yMax : Math.max(...ys);
    if (!isFinite(x0) || !isFinite(x1)) { x0 = 0; x1 = 1; }
    if (!isFinite(y0) || !isFinite(y1)) { y0 = 0; y1 = 1; }
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) {
      if (o.yMin != null) y1 = y0 + (o.yInteger ? 1 : Math.abs(y0) * 0.2 || 1);
      else { const pad = Math.abs(y0) * 0.1 || 0.5; y0 -= pad; y1 += pad; }
    }
    if (o.yMin == null && o.yMax == null) { const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad; if (y0 < 0 && Math.min(...ys) >= 0) y0 = 0; }
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const X = v => m.l + (v - x0) / (x1 - x0) * pw;
    const Y = v => m.t + ph - (v - y0) / (y1 - y0) * ph;
    el("text", { x: m.l, y: 15, "font-size": 12.5, "font-weight": 600, fill: "#222" }, svg).textContent = o.title;
    const axes = el("g", { class: "axes", "font-size": 10, fill: "#555" }, svg);
    const xt = ticks(x0, x1, 6, o.xInteger), yt = ticks(y0, y1, 5, o.yInteger);
    for (const v of xt.values) {
      el("line", { x1: X(v), x2: X(v), y1: m.t, y2: m.t + ph, stroke: "#eceef1" }, axes);
      el("text", { x: X(v), y: m.t + ph + 13, "text-anchor": "middle", class: "xtick" }, axes).textContent = fmt(v, xt.step, o.xInteger);
    }
    for (const v of yt.values) {
      el("line", { x1: m.l, x2: m.l + pw, y1: Y(v), y2: Y(v), stroke: "#eceef1" }, axes);
      el("text", { x: m.l - 5, y: Y(v) + 3.5, "text-anchor": "end", class: "ytick" }, axes).textContent = fmt(v, yt.step, o.yInteger);
    }
    el("rect", { x: m.l, y: m.t, width: pw, height: ph, fill: "none", stroke: "#b9c0c8" }, axes);
    el("text", { x: m.l + pw / 2, y: m.t + ph + 32, "text-anchor": "middle", "font-size": 11, fill: "#333" }, axes).textContent = o.xLabel;
    el("text", { transform: "translate(12," + (m.t + ph / 2) + ") rotate(-90)", "text-anchor": "middle", "font-size": 11, fill: "#333" }, axes).textContent = o.yLabel;
    const plot = el("g", { class: "plot" }, svg);
    if (o.empty && !o.series.some(s => s.points.length && !s.noLegend)) {
      el("text", { x: m.l + pw / 2, y: m.t + ph / 2, "text-anchor": "middle", "font-size": 12, fill: "#889" }, plot).textContent = o.empty;
    }
    for (const h of o.hlines || []) {
      el("line", { x1: m.l, x2: m.l + pw, y1: Y(h.y), y2: Y(h.y), stroke: h.color || "#888", "stroke-dasharray": "4 3" }, plot);
      el("text", { x: m.l + pw - 3, y: Y(h.y) - 3, "text-anchor": "end", "font-size": 10, fill: h.color || "#666" }, plot).textContent = h.label;
    }
    for (const s of o.series) {
      const g = el("g", { class: "series", "data-series": s.name }, plot);
      const pts = s.points.filter(p => isFinite(p[1]));
      if (s.line !== false && pts.length > 1) {
        el("polyline", {
          points: pts.map(p => X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(" "), fill: "none",
          stroke: s.color, "stroke-width": s.width || 1.8, "stroke-dasharray": s.dashed ? "5 3" : "none", opacity: s.opacity || 1,
        }, g);
      }
      if (s.dots) {
        for (const p of pts) {
          el("circle", { cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: s.radius || 2.2, fill: p[3] || s.color,
            opacity: s.opacity || 1, class: "pt", "data-x": p[0], "data-y": p[1] }, g);
        }
      }
    }
    const lg = el("g", { class: "legend", "font-size": 10 }, svg);
    for (const it of legend) {
      const y = m.t + ph + 38 + 9 + it.row * 13, x = m.l + it.x;
      el("line", { x1: x, x2: x + 16, y1: y - 3, y2: y - 3, stroke: it.s.color, "stroke-width": 2.5, "stroke-dasharray": it.s.dashed ? "4 2" : "none" }, lg);
      el("text", { x: x + 20, y: y, fill: "#333" }, lg).textContent = it.s.name;
    }
    return svg;
  }
  window.svgChart = svgChart;
})();
