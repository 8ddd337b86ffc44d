// The page of the html sink: inline CSS and script, no network. @TITLE@ and
// @DATA@ (a JSON object, '<' escaped) are filled in by html_sink.cpp.
#pragma once

namespace msms_html {

inline constexpr const char* kReportTemplate = R"TPL(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>
:root { --fg:#1d232b; --muted:#5f6b7a; --line:#d8dee6; --bg:#f6f8fa; --accent:#c62828; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif; color:var(--fg); background:#fff; }
header { padding:18px 28px 10px; border-bottom:1px solid var(--line); background:var(--bg); }
header h1 { margin:0 0 4px; font-size:20px; }
header .cmd { font-family:ui-monospace,Menlo,Consolas,monospace; color:var(--muted); word-break:break-all; }
main { padding:10px 28px 40px; max-width:1500px; }
h2 { font-size:17px; margin:26px 0 8px; border-bottom:1px solid var(--line); padding-bottom:4px; }
h3 { font-size:15px; margin:18px 0 6px; }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin-top:10px; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px 12px; min-width:150px; }
.card .k { color:var(--muted); font-size:12px; }
.card .v { font-size:17px; font-weight:600; }
.chartbox { position:relative; border:1px solid var(--line); border-radius:6px; padding:6px; }
canvas { width:100%; height:340px; display:block; }
.legend { display:flex; flex-wrap:wrap; gap:4px 14px; margin:6px 2px; font-size:12px; }
.legend span.sw { display:inline-block; width:11px; height:11px; border-radius:2px; margin-right:5px; vertical-align:-1px; }
.tip { position:absolute; pointer-events:none; background:rgba(29,35,43,.92); color:#fff; font-size:12px; padding:6px 8px; border-radius:4px; display:none; white-space:pre; z-index:2; }
table { border-collapse:collapse; width:100%; margin:4px 0 8px; font-size:13px; }
th, td { border-bottom:1px solid var(--line); padding:4px 8px; text-align:left; vertical-align:top; }
th { background:var(--bg); font-weight:600; position:sticky; top:0; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
pre { margin:0; font:12px/1.35 ui-monospace,Menlo,Consolas,monospace; white-space:pre-wrap; word-break:break-all; }
details summary { cursor:pointer; }
.note { color:var(--muted); font-size:12.5px; margin:2px 0 8px; }
.empty { color:var(--muted); font-style:italic; }
.scroll { max-height:520px; overflow:auto; border:1px solid var(--line); border-radius:6px; }
.canvaswrap { position:relative; }
.band { position:absolute; top:0; bottom:0; background:rgba(59,111,182,.18); border-left:1px solid #3b6fb6; border-right:1px solid #3b6fb6; display:none; pointer-events:none; }
.viewbar { display:flex; flex-wrap:wrap; align-items:center; gap:6px 8px; margin:6px 0 10px; }
.viewbar button { font:12.5px system-ui,sans-serif; padding:3px 10px; border:1px solid var(--line); border-radius:4px; background:#fff; cursor:pointer; }
.viewbar button.on { background:#1d232b; color:#fff; border-color:#1d232b; }
.viewbar .note { margin:0 0 0 6px; }
.viewbar select { font:12.5px system-ui,sans-serif; padding:2px 4px; }
canvas.flame { height:200px; cursor:pointer; }
td.stack { min-width:34em; }
td.stack pre { white-space:pre; word-break:normal; overflow-x:auto; max-width:70em; }
table[id^="table-finding-"] td { white-space:nowrap; }
table[id^="table-finding-"] td.text { white-space:pre-line; min-width:22em; max-width:32em; overflow-wrap:anywhere; }
table[id^="table-finding-"] td.lines { white-space:pre-line; }
.viewbar label { font-size:12.5px; }
.liveat h3 { margin-top:10px; }
.card.oom { border-color:#c62828; background:#fdecea; }
.failed { margin:8px 0 0; padding:6px 10px; border-left:4px solid #c62828; background:#fdecea; color:#b71c1c; }
.card.oom .v { color:#b71c1c; }
#oom h2 { color:#b71c1c; }
</style>
</head>
<body>
<header>
  <h1 id="title">msmemscope report</h1>
  <div class="cmd" id="command"></div>
  <div id="plugin-failures"></div>
  <div class="cards" id="cards"></div>
</header>
<main id="main"></main>
<script type="application/json" id="msms-data">@DATA@</script>
<script>
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("msms-data").textContent);
  var COLORS = ["#3b6fb6", "#e08a1e", "#3a9a5b", "#c6463f", "#7d5bb4", "#8c6a4f", "#d16aa8", "#6b7785",
                "#a8a833", "#2aa3b3", "#f2b134", "#4c9be8"];
  var main = document.getElementById("main");

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function human(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], v = Math.abs(b), i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    var s = (b < 0 ? "-" : "") + (i === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2));
    return s + " " + u[i];
  }
  function dur(ns) {
    if (ns >= 60e9) return (ns / 60e9).toFixed(1) + " min";
    if (ns >= 1e9) return (ns / 1e9).toFixed(ns >= 10e9 ? 1 : 2) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(ns >= 10e6 ? 1 : 2) + " ms";
    if (ns >= 1e3) return (ns / 1e3).toFixed(1) + " \u00b5s";
    return ns + " ns";
  }
  function num(n) { return Number(n).toLocaleString("en-US"); }
  // An option as this run's user sets it: the command line's
  // "--analysis=leaks" or, in a Python API session (D.api: a plain
  // `python3 script.py` with msmemscope.config(), no command line),
  // config()'s analysis="leaks", as the host's messages say it
  // (framework/host/api_words.h).
  function opt(name, value) {
    if (!D.api) return "--" + name + (value === undefined ? "" : "=" + value);
    if (name === "plugin-option") {
      var eq = value.indexOf("=");
      return "plugin_options={\"" + value.slice(0, eq) + "\": \"" + value.slice(eq + 1) + "\"}";
    }
    var key = name.replace(/-/g, "_");
    return value === undefined ? "'" + key + "'" : key + "=\"" + value + "\"";
  }
  // What stopped the plugin `name` in this run (the host's plugin_failure
  // rows: it failed, or was left out after it crashed), or "" if it did not.
  function failure(name) {
    var f = (D.plugin_failures || []).filter(function (x) { return x.plugin === name; })[0];
    return f ? f.what : "";
  }
  // "The leaks analysis did not run (--analysis=leaks)." or, when it failed,
  // "The leaks analysis failed (WHAT): ..." in a view that would show its answer.
  function notRun(name) {
    var why = failure(name);
    if (why) return "The " + name + " analysis failed (" + why + "), so it gave no answer";
    // listed, but the leaks analyzer is off when steps are selected
    if (name === "leaks" && D.leaks_off === "steps") return "The leaks analysis did not run (it is off with " + opt("steps") + ")";
    return "The " + name + " analysis did not run (" + opt("analysis", name) + ")";
  }
  function card(k, v, id) {
    var c = el("div", id ? { "class": "card", id: id } : { "class": "card" });
    c.appendChild(el("div", { "class": "k" }, k));
    c.appendChild(el("div", { "class": "v" }, v));
    document.getElementById("cards").appendChild(c);
  }
  function stackCell(text) {
    var td = el("td", { "class": "stack" });
    var lines = String(text || "").split("\n");
    if (lines.length <= 4) { td.appendChild(el("pre", null, text)); return td; }
    var det = el("details"), sum = el("summary");
    sum.appendChild(el("pre", { style: "display:inline" }, lines.slice(0, 3).join("\n") + "\n\u2026 " + (lines.length - 3) + " more frames"));
    det.appendChild(sum);
    det.appendChild(el("pre", null, lines.slice(3).join("\n")));
    td.appendChild(det);
    return td;
  }
  // cols: [{title, num, get(row) -> text | Node}]
  function table(id, cols, rows) {
    var t = el("table", { id: id, "data-rows": rows.length });
    var tr = el("tr");
    cols.forEach(function (c) { tr.appendChild(el("th", c.num ? { "class": "num" } : null, c.title)); });
    var thead = el("thead"); thead.appendChild(tr); t.appendChild(thead);
    var tb = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr");
      cols.forEach(function (c) {
        var v = c.get(r);
        if (v instanceof Node) row.appendChild(v);
        else row.appendChild(el("td", c.num ? { "class": "num" } : null, v));
      });
      tb.appendChild(row);
    });
    t.appendChild(tb);
    var box = el("div", { "class": "scroll" });
    box.appendChild(t);
    return box;
  }
  function niceStep(max, n) {
    var raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    var s = m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10;
    return s * p;
  }
  function niceBytes(max) {
    // ticks on powers of 1024 times 1, 2, 5
    var unit = 1;
    while (max / unit >= 1024 && unit < Math.pow(1024, 4)) unit *= 1024;
    return niceStep(max / unit, 5) * unit;
  }

  // ------------------------------------------------------------ time view
  // One view of time for every chart: drag to select a range (zooms to it;
  // the tables follow it), shift+drag or the arrows to pan, ctrl+wheel or
  // the buttons to zoom, a click lists what was live then.
  var SPAN = Math.max(1, D.end_ns - D.start_ns);
  var V = { t0: 0, t1: SPAN };
  var charts = [];
  var frames = D.frames || [], paths = D.site_paths || [], pyn = D.site_py || [];
  function siteText(s) {
    var p = paths[s] || [], k = pyn[s] || 0, out = [];
    for (var i = k - 1; i >= 0; i--) out.push(frames[p[i]]);
    for (var j = p.length - 1; j >= k; j--) out.push(frames[p[j]]);
    return out.join("\n");
  }
  function zoomed() { return V.t0 > 0 || V.t1 < SPAN; }
  function setView(t0, t1) {
    var w = Math.max(1000, t1 - t0);  // at least 1 us
    if (w >= SPAN) { t0 = 0; t1 = SPAN; } else {
      if (t0 < 0) t0 = 0;
      t1 = t0 + w;
      if (t1 > SPAN) { t1 = SPAN; t0 = SPAN - w; }
    }
    V.t0 = t0; V.t1 = t1;
    charts.forEach(function (c) { c.paint(); });
    followView();
  }
  function stepRange() {
    var m = D.marks || [];
    if (!m.length) return null;
    var a = m[0][0], b = SPAN;
    var pad = (b - a) * 0.03;
    return [Math.max(0, a - pad), b];
  }

  // The value of each category at time t (the last point at or before t).
  function indexAt(dev, t) {
    var lo = 0, hi = dev.t.length - 1;
    if (hi < 0 || dev.t[0] > t) return -1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (dev.t[mid] <= t) lo = mid; else hi = mid - 1; }
    return lo;
  }
  function liveAt(dev, t) {
    var groups = {}, n = 0, bytes = 0;
    dev.lives.forEach(function (l) {
      if (l[0] <= t && (l[1] < 0 || l[1] > t)) {
        var k = l[3] + ":" + l[4], g = groups[k] || (groups[k] = { site: l[3], cat: l[4], bytes: 0, count: 0 });
        g.bytes += l[2]; g.count++; n++; bytes += l[2];
      }
    });
    var rows = Object.keys(groups).map(function (k) { return groups[k]; });
    rows.sort(function (a, b) { return b.bytes - a.bytes; });
    return { rows: rows, blocks: n, bytes: bytes };
  }
  // The highest total within [a, b] and its time.
  function peakIn(dev, a, b) {
    var best = -1, bt = a, i0 = indexAt(dev, a), k = dev.cats.length;
    function total(i) { var s = 0; for (var c = 0; c < k; c++) s += Math.max(0, dev.v[c][i]); return s; }
    if (i0 >= 0) { best = total(i0); bt = a; }
    for (var i = Math.max(0, i0 + 1); i < dev.t.length && dev.t[i] <= b; i++) {
      var s = total(i);
      if (s > best) { best = s; bt = dev.t[i]; }
    }
    return { bytes: Math.max(0, best), t: bt };
  }
  function livesNote(dev) {
    return dev.lives_min > 0 ? " (from the " + num(dev.lives.length) + " largest blocks, each \u2265 " + human(dev.lives_min) + ")" : "";
  }

  // Out-of-memory failures (the oom analyzer's, at every failed allocation):
  // the ones listed, on the charts of their device.
  var OOM = D.oom || { failures: 0, devices: [], listed: [] };
  function oomText(f) {
    return (f.func || "an allocation") + " of " + human(f.req_size) + " (" + num(f.req_size) + " bytes) failed";
  }
  function drawChart(dev, idx, box, liveBox) {
    var fails = OOM.listed.filter(function (f) { return f.device === dev.device; });
    var failCount = OOM.devices.reduce(function (n, d) { return d.device === dev.device ? d.count : n; }, 0);
    var wrap = el("div", { "class": "canvaswrap" });
    var canvas = el("canvas", { id: "chart-" + idx, "data-device": dev.label });
    wrap.appendChild(canvas);
    var band = el("div", { "class": "band" });
    wrap.appendChild(band);
    box.appendChild(wrap);
    var tip = el("div", { "class": "tip" });
    box.appendChild(tip);
    var n = dev.t.length, k = dev.cats.length;
    var top = Math.max(1, dev.peak) * 1.08;
    var cum = [];
    for (var c = 0; c < k; c++) {
      var row = new Float64Array(n);
      for (var i = 0; i < n; i++) row[i] = (c ? cum[c - 1][i] : 0) + Math.max(0, dev.v[c][i]);
      cum.push(row);
    }
    var W, H, L = 78, R = 16, T = 30, B = 34, clickT = null;
    function X(t) { return L + (W - L - R) * ((t - V.t0) / (V.t1 - V.t0)); }
    function TX(x) { return V.t0 + (x - L) / (W - L - R) * (V.t1 - V.t0); }
    function Y(b) { return T + (H - T - B) * (1 - b / top); }
    function paint() {
      var dpr = window.devicePixelRatio || 1;
      W = canvas.clientWidth || 900; H = canvas.clientHeight || 340;
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      var g = canvas.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, W, H);
      g.font = "11px system-ui, sans-serif";
      var ys = niceBytes(top);
      g.strokeStyle = "#e3e8ee"; g.fillStyle = "#5f6b7a"; g.lineWidth = 1;
      g.textAlign = "right"; g.textBaseline = "middle";
      for (var y = 0; y <= top; y += ys) {
        g.beginPath(); g.moveTo(L, Y(y) + 0.5); g.lineTo(W - R, Y(y) + 0.5); g.stroke();
        g.fillText(human(y), L - 6, Y(y));
      }
      var w = V.t1 - V.t0, xs = niceStep(w, 8);
      g.textAlign = "center"; g.textBaseline = "top";
      for (var x = Math.ceil(V.t0 / xs) * xs; x <= V.t1; x += xs) {
        g.beginPath(); g.moveTo(X(x) + 0.5, T); g.lineTo(X(x) + 0.5, H - B); g.stroke();
        g.fillText(dur(x), X(x), H - B + 6);
      }
      g.save();
      g.beginPath(); g.rect(L, 0, W - L - R, H); g.clip();
      // stacked areas, as steps: the value holds until the next point
      var i0 = Math.max(0, indexAt(dev, V.t0)), i1 = n - 1;
      while (i1 > i0 && dev.t[i1 - 1] > V.t1) i1--;
      for (var c2 = k - 1; c2 >= 0; c2--) {
        if (!n) break;
        g.beginPath();
        g.moveTo(X(Math.max(dev.t[i0], V.t0 - w)), Y(0));
        for (var i2 = i0; i2 <= i1; i2++) {
          if (i2 > i0) g.lineTo(X(dev.t[i2]), Y(cum[c2][i2 - 1]));
          g.lineTo(X(Math.max(dev.t[i2], V.t0 - w)), Y(cum[c2][i2]));
        }
        var endT = i1 === n - 1 ? SPAN : dev.t[i1 + 1];
        g.lineTo(X(Math.min(endT, V.t1 + w)), Y(cum[c2][i1]));
        g.lineTo(X(Math.min(endT, V.t1 + w)), Y(0));
        g.closePath();
        g.fillStyle = COLORS[c2 % COLORS.length];
        g.globalAlpha = 0.85; g.fill(); g.globalAlpha = 1;
      }
      // collection off (stop() .. the next start()), and under --steps the
      // spans outside the selected steps: nothing was recorded there, the
      // level drawn through it is the last one before
      function shade(spans, label) {
        (spans || []).forEach(function (o) {
          if (o[1] < V.t0 || o[0] > V.t1) return;
          var ox0 = X(Math.max(o[0], V.t0)), ox1 = X(Math.min(o[1], V.t1));
          g.fillStyle = "rgba(240,242,245,.82)";
          g.fillRect(ox0, T, Math.max(1, ox1 - ox0), H - B - T);
          g.font = "11px system-ui, sans-serif"; g.fillStyle = "#5f6b7a";
          g.textAlign = "center"; g.textBaseline = "top";
          if (ox1 - ox0 > g.measureText(label).width + 8) g.fillText(label, (ox0 + ox1) / 2, T + 4);
        });
      }
      shade(D.off, "collection off");
      shade(D.uncollected, "not collected (--steps)");
      // peak marker and its label (placed first: step labels keep clear of it)
      var boxes = [];
      if (dev.peak > 0 && dev.peak_t >= V.t0 && dev.peak_t <= V.t1) {
        var px = X(dev.peak_t), py = Y(dev.peak);
        g.strokeStyle = "#c62828"; g.lineWidth = 1.5; g.setLineDash([5, 3]);
        g.beginPath(); g.moveTo(L, py + 0.5); g.lineTo(W - R, py + 0.5); g.stroke(); g.setLineDash([]);
        g.fillStyle = "#c62828";
        g.beginPath(); g.arc(px, py, 4.5, 0, 2 * Math.PI); g.fill();
        g.font = "bold 12px system-ui, sans-serif";
        var label = "peak " + human(dev.peak) + " at " + dur(dev.peak_t);
        var lw = g.measureText(label).width, right = px > L + (W - L - R) * 0.7;
        var lx = right ? px - 8 - lw : px + 8;
        lx = Math.max(L + 2, Math.min(lx, W - R - lw - 2));
        var ly = Math.max(T + 14, py - 3);
        g.textAlign = "left"; g.textBaseline = "bottom";
        g.fillText(label, lx, ly);
        boxes.push({ x0: lx - 3, x1: lx + lw + 3, y0: ly - 14, y1: ly + 1, peak: true });
      }
      // step marks: a line each; labels where they fit (greedy, left to
      // right, never over one another or over the peak label)
      g.font = "11px system-ui, sans-serif";
      g.strokeStyle = "rgba(95,107,122,.45)"; g.setLineDash([3, 3]); g.lineWidth = 1;
      var marks = D.marks || [], shown = 0, lastEnd = -1e9;
      marks.forEach(function (m) {
        if (m[0] < V.t0 || m[0] > V.t1) return;
        var mx = X(m[0]);
        g.beginPath(); g.moveTo(mx + 0.5, T - 14); g.lineTo(mx + 0.5, H - B); g.stroke();
        var tw = g.measureText(m[1]).width, bx = { x0: mx + 2, x1: mx + 5 + tw, y0: T - 16, y1: T - 3 };
        if (bx.x1 > W - 2) { bx.x0 = mx - 5 - tw; bx.x1 = mx - 2; }  // at the right edge: left of its line
        if (bx.x0 < lastEnd + 6 || bx.x0 < 2) return;
        if (boxes.some(function (b) { return b.x0 < bx.x1 && bx.x0 < b.x1 && b.y0 < bx.y1 && bx.y0 < b.y1; })) return;
        g.fillStyle = "#5f6b7a"; g.textAlign = "left"; g.textBaseline = "bottom";
        g.fillText(m[1], bx.x0 + 1, T - 3);
        boxes.push(bx); lastEnd = bx.x1; shown++;
      });
      g.setLineDash([]);
      // out-of-memory failures: a red line each, "out of memory" by the first shown
      var oomShown = 0;
      g.strokeStyle = "#b71c1c"; g.fillStyle = "#b71c1c"; g.lineWidth = 1.5;
      fails.forEach(function (f) {
        if (f.t < V.t0 || f.t > V.t1) return;
        var fx = X(f.t);
        g.beginPath(); g.moveTo(fx + 0.5, T); g.lineTo(fx + 0.5, H - B); g.stroke();
        g.beginPath(); g.moveTo(fx - 5, T - 9); g.lineTo(fx + 6, T - 9); g.lineTo(fx + 0.5, T - 1); g.closePath(); g.fill();
        if (!oomShown) {  // beside the line, clear of the peak's label
          g.font = "bold 11px system-ui, sans-serif";
          var ol = "out of memory" + (failCount > 1 ? " (" + num(failCount) + ")" : "");
          var ow = g.measureText(ol).width, spots = [];
          [T + 4, T + 22, T + 40].forEach(function (oy) {
            if (fx + 8 + ow <= W - R) spots.push({ x0: fx + 6, x1: fx + 10 + ow, y0: oy - 1, y1: oy + 13 });
            if (fx - 8 - ow >= L) spots.push({ x0: fx - 10 - ow, x1: fx - 6, y0: oy - 1, y1: oy + 13 });
          });
          var spot = spots.filter(function (q) {
            return !boxes.some(function (b) { return b.x0 < q.x1 && q.x0 < b.x1 && b.y0 < q.y1 && q.y0 < b.y1; });
          })[0] || spots[0];
          if (spot) {
            g.textAlign = "left"; g.textBaseline = "top";
            g.fillText(ol, spot.x0 + 2, spot.y0 + 1);
            boxes.push({ x0: spot.x0, x1: spot.x1, y0: spot.y0, y1: spot.y1, oom: true });
            canvas.setAttribute("data-oom-label", ol);
          }
        }
        oomShown++;
      });
      // the clicked time
      if (clickT !== null && clickT >= V.t0 && clickT <= V.t1) {
        g.strokeStyle = "#1d232b"; g.lineWidth = 1.2;
        g.beginPath(); g.moveTo(X(clickT) + 0.5, T); g.lineTo(X(clickT) + 0.5, H - B); g.stroke();
      }
      g.restore();
      g.strokeStyle = "#9aa5b1"; g.lineWidth = 1;
      g.beginPath(); g.moveTo(L + 0.5, T); g.lineTo(L + 0.5, H - B + 0.5); g.lineTo(W - R, H - B + 0.5); g.stroke();
      canvas.setAttribute("data-step-labels", String(shown));
      canvas.setAttribute("data-label-boxes", JSON.stringify(boxes.map(function (b) {
        return [Math.round(b.x0), Math.round(b.y0), Math.round(b.x1), Math.round(b.y1), b.peak ? 1 : b.oom ? 2 : 0];
      })));
      canvas.setAttribute("data-view", Math.round(V.t0) + "," + Math.round(V.t1));
      canvas.setAttribute("data-oom-marks", String(oomShown));
    }
    function showLiveAt(t) {
      clickT = t;
      paint();
      liveBox.innerHTML = "";
      var la = liveAt(dev, t), i = indexAt(dev, t), parts = [];
      if (i >= 0) for (var c = k - 1; c >= 0; c--) if (dev.v[c][i]) parts.push(dev.cats[c] + " " + human(dev.v[c][i]));
      liveBox.appendChild(el("h3", null, "Live at " + dur(t) + ": " + human(la.bytes) + " in " + num(la.blocks) +
        " blocks" + livesNote(dev)));
      if (parts.length) liveBox.appendChild(el("div", { "class": "note" }, "By owner: " + parts.join(", ")));
      liveBox.appendChild(table("table-liveat-" + idx, [
        { title: "Bytes", num: true, get: function (r) { return human(r.bytes); } },
        { title: "Blocks", num: true, get: function (r) { return num(r.count); } },
        { title: "Owner", get: function (r) { return dev.cats[r.cat]; } },
        { title: "Stack", get: function (r) { return stackCell(siteText(r.site)); } }], la.rows.slice(0, 100)));
      liveBox.setAttribute("data-t", String(Math.round(t)));
    }
    // (the first paint comes once the section is in the page: it needs the width)
    window.addEventListener("resize", paint);
    var drag = null;
    canvas.addEventListener("mousedown", function (ev) {
      var r = canvas.getBoundingClientRect();
      drag = { x: ev.clientX - r.left, pan: ev.shiftKey, v0: V.t0, v1: V.t1, moved: false };
      ev.preventDefault();
    });
    window.addEventListener("mousemove", function (ev) {
      if (!drag) return;
      var r = canvas.getBoundingClientRect(), x = ev.clientX - r.left;
      if (Math.abs(x - drag.x) > 3) drag.moved = true;
      if (drag.pan) {
        var dt = (x - drag.x) / (W - L - R) * (drag.v1 - drag.v0);
        setView(drag.v0 - dt, drag.v1 - dt);
      } else if (drag.moved) {
        band.style.display = "block";
        band.style.left = Math.max(L, Math.min(x, drag.x)) + "px";
        band.style.width = Math.abs(x - drag.x) + "px";
      }
    });
    window.addEventListener("mouseup", function (ev) {
      if (!drag) return;
      var r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, d0 = drag;
      drag = null;
      band.style.display = "none";
      if (d0.pan) return;
      if (!d0.moved) { if (x >= L && x <= W - R) showLiveAt(TX(x)); return; }
      var a = TX(Math.max(L, Math.min(x, d0.x))), b = TX(Math.min(W - R, Math.max(x, d0.x)));
      if (b > a) setView(a, b);
    });
    canvas.addEventListener("wheel", function (ev) {
      if (!ev.ctrlKey) return;
      ev.preventDefault();
      var r = canvas.getBoundingClientRect(), t = TX(ev.clientX - r.left), f = ev.deltaY > 0 ? 1.5 : 1 / 1.5;
      setView(t - (t - V.t0) * f, t + (V.t1 - t) * f);
    }, { passive: false });
    canvas.addEventListener("mousemove", function (ev) {
      if (!n || drag) return;
      var r = canvas.getBoundingClientRect(), t = TX(ev.clientX - r.left);
      var lo = Math.max(0, indexAt(dev, t));
      var mx = ev.clientX - r.left, near = fails.filter(function (f) {
        return f.t >= V.t0 && f.t <= V.t1 && Math.abs(X(f.t) - mx) <= 4;
      });
      if (near.length) {
        var ol = near.slice(0, 5).map(function (f) {
          return "out of memory at " + dur(f.t) + ": " + oomText(f) + " on " + f.device +
            " with " + human(f.allocated) + " allocated";
        });
        if (near.length > 5) ol.push("\u2026 and " + (near.length - 5) + " more here");
        tip.textContent = ol.join("\n");
        tip.setAttribute("data-oom", String(near.length));
        tip.style.display = "block";
        tip.style.left = Math.max(0, Math.min(mx + 14, r.width - 520)) + "px";
        tip.style.top = (ev.clientY - r.top + 10) + "px";
        return;
      }
      tip.removeAttribute("data-oom");
      var lines = [dur(t) + "   total " + human(cum[k - 1] ? cum[k - 1][lo] : 0)];
      for (var c3 = k - 1; c3 >= 0; c3--) if (dev.v[c3][lo]) lines.push(dev.cats[c3] + ": " + human(dev.v[c3][lo]));
      lines.push("drag: zoom to a range \u00b7 click: what was live");
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      tip.style.left = Math.min(ev.clientX - r.left + 14, r.width - 240) + "px";
      tip.style.top = (ev.clientY - r.top + 10) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    canvas.setAttribute("data-drawn", "true");
    canvas.setAttribute("data-points", String(n));
    canvas.setAttribute("data-series", String(k));
    // the legend: every owner of this device, with its bytes at the peak
    var legend = el("div", { "class": "legend", id: "legend-" + idx });
    var pi = indexAt(dev, dev.peak_t);
    dev.cats.forEach(function (name, c4) {
      var s = el("span", { "data-owner": name });
      s.appendChild(el("span", { "class": "sw", style: "background:" + COLORS[c4 % COLORS.length] }));
      s.appendChild(document.createTextNode(name + (pi >= 0 ? " (" + human(Math.max(0, dev.v[c4][pi])) + " at the peak)" : "")));
      legend.appendChild(s);
    });
    box.appendChild(legend);
    // where failure i is drawn (client x), and the tooltip, for #msms-oom-hover
    var oomAt = function (i) { return canvas.getBoundingClientRect().left + X(fails[i].t); };
    var api = { paint: paint, showLiveAt: showLiveAt, canvas: canvas, dev: dev, fails: fails, oomAt: oomAt, tip: tip };
    charts.push(api);
    return api;
  }

  document.getElementById("title").textContent = "msmemscope report \u2014 pid " + D.pid;
  document.getElementById("command").textContent = D.command || "";
  (D.plugin_failures || []).forEach(function (f) {
    document.getElementById("plugin-failures").appendChild(el("p", { "class": "failed" },
      "Plugin '" + f.plugin + "' (" + f.kind + ") failed: " + f.what + ". This page is without what it would have added."));
  });
  // the dump's rows, as the CSV or db of the same run has them; the
  // console's "events" counts what the program sent (a free of a block
  // allocated before collection is received, not written; START_TRACE and
  // the end's FREE of each block still allocated are the profiler's rows;
  // events the analyses asked for beyond --events are not written)
  card("rows", num(D.rows), "card-rows");
  card("duration", dur(Math.max(0, D.end_ns - D.start_ns)));
  D.devices.forEach(function (d) { card(d.label + " peak / final", human(d.peak) + " / " + human(d.final)); });
  // the leak analysis's own count: blocks (a row of host blocks reported
  // by site counts its blocks), never rows
  if (D.leaks_ran) card("leaked blocks (leaks analysis)", num(D.leak_total[0]) + " \u00b7 " + human(D.leak_total[1]), "card-leaks");
  else card("leaks", failure("leaks") ? "not judged: the analysis failed" :
            D.leaks_off === "steps" ? "not analysed (off with " + opt("steps") + ")" :
            "not analysed (" + opt("analysis", "leaks") + ")", "card-leaks");
  if (OOM.failures) {
    card("out-of-memory failures", num(OOM.failures) + " \u00b7 " + OOM.devices.map(function (d) {
      return d.device + " " + num(d.count); }).join(", "), "card-oom");
    document.getElementById("card-oom").className = "card oom";
  }

  // The failed allocations: how many per device, the first ones with their
  // call and stack, and what the oom analysis listed live at them (its
  // OOM_DETAIL rows). Nothing when no allocation failed.
  // The memory a failure ran into, as its OOM_Snapshot row has it: the
  // device's (its driver's numbers) or, on cpu, the process's binding bound.
  var LIMIT_NAMES = { RLIMIT_AS: "the address-space limit (RLIMIT_AS)", RLIMIT_DATA: "the data limit (RLIMIT_DATA)",
    cgroup: "the memory cgroup's limit", machine: "the machine's memory" };
  function memoryThen(r) {
    if (r.limit === "unknown") return "(not known: no memory limit could be read)";
    if (!r.total) return "(not known)";
    return human(r.free) + " of " + human(r.total) + ", " + (LIMIT_NAMES[r.limit] || (r.limit ? r.limit :
      "the device's memory"));
  }
  (function () {
    if (!OOM.failures) return;
    var sec = el("section", { id: "oom" });
    main.appendChild(sec);
    sec.appendChild(el("h2", { id: "oom-title" }, "Out of memory: " + num(OOM.failures) +
      (OOM.failures === 1 ? " allocation failed" : " allocations failed")));
    var charted = {};
    D.devices.forEach(function (d) { charted[d.device] = true; });
    var ul = el("ul", { id: "oom-devices" });
    OOM.devices.forEach(function (d) {
      ul.appendChild(el("li", { "data-device": d.device }, "device " + d.device + ": " + num(d.count) +
        (d.count === 1 ? " failure at " + dur(d.first_t) : " failures, the first at " + dur(d.first_t) + ", the last at " +
        dur(d.last_t)) + (charted[d.device] ? " (red on its charts below; hover for the call)" : " (no allocation recorded on it)")));
    });
    sec.appendChild(ul);
    var L = OOM.listed, shown = L.slice(0, 100);
    if (L.length < OOM.failures)
      sec.appendChild(el("p", { "class": "note", id: "oom-unlisted" }, "The charts mark the first " + num(L.length) +
        " failures of the run."));
    sec.appendChild(el("h3", null, shown.length < OOM.failures ? "The first " + num(shown.length) + " failures" :
      OOM.failures === 1 ? "The failure" : "The failures"));
    sec.appendChild(table("table-oom", [
      { title: "Time", num: true, get: function (r) { return dur(r.t); } },
      { title: "Device", get: function (r) { return r.device; } },
      { title: "Call", get: function (r) { return r.func || "(not known)"; } },
      { title: "Requested", num: true, get: function (r) { return human(r.req_size) + " (" + num(r.req_size) + " B)"; } },
      { title: "Allocated then", num: true, get: function (r) { return human(r.allocated); } },
      { title: "Free then", get: memoryThen },
      { title: "Stack", get: function (r, i) {
        // (a failure's stacks are taken whatever --call-stack says, as
        // upstream's: none where they could not be, or in a dump without them)
        return r.stack ? stackCell(r.stack) : el("td", { "class": "empty" }, L.indexOf(r) >= OOM.stacks ? "(not kept)" :
          "(no stack)"); } }], shown));
    var dumps = L.filter(function (f) { return f.details && (f.top.length || f.recent.length); });
    if (!OOM.analysis) {
      sec.appendChild(el("p", { "class": "note", id: "oom-no-details" }, "The oom analysis did not run: " +
        opt("analysis", "oom") + " lists the largest and the most recent blocks live at each failure."));
      return;
    }
    if (!dumps.length) {
      sec.appendChild(el("p", { "class": "note", id: "oom-no-details" }, "The oom analysis listed no block live at these failures."));
      return;
    }
    var seen = {};
    dumps.forEach(function (f, n) {
      var open = !seen[f.device];
      seen[f.device] = true;
      var box = open ? el("div", { "class": "oom-dump" }) : el("details", { "class": "oom-dump" });
      var title = "Live on " + f.device + " at the failure at " + dur(f.t) + " (" + oomText(f) + "), as the oom analysis listed them";
      box.appendChild(open ? el("h3", null, title) : el("summary", null, title));
      function blocks(kind, rows, what) {
        box.appendChild(el("div", { "class": "note" }, rows.length ? "The " + num(rows.length) + " " + what + ":" :
          "No " + what + "."));
        if (!rows.length) return;
        box.appendChild(table("table-oom-" + kind + "-" + n, [
          { title: "Bytes", num: true, get: function (r) { return human(r.size) + " (" + num(r.size) + " B)"; } },
          { title: "Pool", get: function (r) { return r.pool; } },
          { title: "Address", get: function (r) { return r.ptr; } },
          { title: "Allocated at", num: true, get: function (r) { return dur(r.t); } },
          { title: "Step", num: true, get: function (r) { return r.step; } },
          { title: "Stack", get: function (r) { return stackCell(r.stack); } }], rows));
      }
      blocks("top", f.top, "largest blocks live");
      blocks("recent", f.recent, "most recently allocated blocks live");
      sec.appendChild(box);
    });
    var without = L.filter(function (f) { return !f.details; }).length;
    if (without)
      sec.appendChild(el("p", { "class": "note", id: "oom-interval" }, "The oom analysis lists the blocks at most once per " +
        "second per device (" + opt("plugin-option", "oom.interval_ms=N") + "): not at " + num(without) + " of these failures."));
    if (dumps.length < L.length - without)
      sec.appendChild(el("p", { "class": "note" }, "The blocks of the first " + num(dumps.length) + " listings are shown; " +
        "the OOM_DETAIL rows have them all."));
  })();

  main.appendChild(el("h2", null, "Memory over time"));
  if ((D.off || []).length)
    main.appendChild(el("p", { "class": "note", id: "collection-off" }, "Shaded: collection was off (" +
      D.off.length + " span(s) between msmemscope.stop() and the next start()): nothing was recorded there."));
  if ((D.uncollected || []).length)
    main.appendChild(el("p", { "class": "note", id: "steps-uncollected" }, "Shaded: not collected (--steps=" +
      D.steps_selected.join(",") + " keeps the events of those steps only): nothing was recorded there, and the level " +
      "drawn through it is the one before. A selected step starts from the blocks live at its start (shadow rows: " +
      "allocated earlier, no stack), so its peak and final are the program's."));
  if (!D.devices.length) main.appendChild(el("p", { "class": "empty", id: "no-memory" }, "No allocations were recorded."));
  var bar = el("div", { "class": "viewbar", id: "viewbar" });
  var viewLabel = el("span", { id: "view-label" });
  function button(id, text, fn) { var b = el("button", { id: id, type: "button" }, text); b.addEventListener("click", fn); bar.appendChild(b); return b; }
  if (D.devices.length) {
    bar.appendChild(viewLabel);
    button("zoom-reset", "Whole run", function () { setView(0, SPAN); });
    if (stepRange()) button("zoom-steps", "Zoom to the steps", function () { var r = stepRange(); setView(r[0], r[1]); });
    button("zoom-out", "Zoom out", function () { var w = V.t1 - V.t0, c = (V.t0 + V.t1) / 2; setView(c - w, c + w); });
    button("pan-left", "\u25c0", function () { var w = V.t1 - V.t0; setView(V.t0 - w / 3, V.t1 - w / 3); });
    button("pan-right", "\u25b6", function () { var w = V.t1 - V.t0; setView(V.t0 + w / 3, V.t1 + w / 3); });
    bar.appendChild(el("span", { "class": "note" }, "Drag on a chart to zoom to a range (the tables follow), shift+drag to pan, ctrl+wheel to zoom, click for what was live."));
    main.appendChild(bar);
  }
  var peakTables = [];
  D.devices.forEach(function (dev, i) {
    var sec = el("section", { id: "device-" + i });
    sec.appendChild(el("h3", null, dev.label + " \u2014 peak " + human(dev.peak) + ", final " + human(dev.final) +
      ", " + num(dev.mallocs) + " allocations, " + num(dev.live) + " blocks live at the end"));
    var box = el("div", { "class": "chartbox" });
    sec.appendChild(box);
    var liveBox = el("div", { "class": "liveat", id: "live-at-" + i });
    var chart = drawChart(dev, i, box, liveBox);
    sec.appendChild(liveBox);
    var peakBox = el("div", { id: "peak-box-" + i });
    sec.appendChild(peakBox);
    peakTables.push({ dev: dev, i: i, box: peakBox });
    main.appendChild(sec);
    chart.paint();
  });

  function peakTable(p) {
    var dev = p.dev, i = p.i, box = p.box, rows, title, note = null;
    box.innerHTML = "";
    if (!zoomed()) {
      title = "Live at the peak (" + human(dev.peak) + " in " + num(dev.peak_blocks) + " blocks), by site";
      if (dev.peak_groups > dev.at_peak.length) note = "The " + dev.at_peak.length + " largest of " + num(dev.peak_groups) + " groups.";
      rows = dev.at_peak;
    } else {
      var pk = peakIn(dev, V.t0, V.t1), la = liveAt(dev, pk.t);
      title = "Live at the highest point of the selected range (" + human(pk.bytes) + " at " + dur(pk.t) + "), by site" + livesNote(dev);
      rows = la.rows.slice(0, 100).map(function (r) { return { bytes: r.bytes, count: r.count, cat: dev.cats[r.cat], stack: siteText(r.site) }; });
    }
    box.appendChild(el("h3", null, title));
    if (note) box.appendChild(el("div", { "class": "note" }, note));
    box.appendChild(table("table-peak-" + i, [
      { title: "Bytes", num: true, get: function (r) { return human(r.bytes); } },
      { title: "Blocks", num: true, get: function (r) { return num(r.count); } },
      { title: "Owner", get: function (r) { return r.cat; } },
      { title: "Stack", get: function (r) { return stackCell(r.stack); } }], rows));
  }

  main.appendChild(el("h2", null, "Top allocation sites"));
  var sitesBox = el("div", { id: "sites-box" });
  main.appendChild(sitesBox);
  function sitesTable() {
    sitesBox.innerHTML = "";
    var rows;
    if (!zoomed()) {
      sitesBox.appendChild(el("div", { "class": "note" }, "By bytes allocated over the whole run; " + num(D.site_count) + " distinct sites."));
      rows = D.sites;
    } else {
      var by = {};
      D.devices.forEach(function (dev) {
        dev.lives.forEach(function (l) {
          if (l[0] < V.t0 || l[0] > V.t1) return;
          var g = by[l[3]] || (by[l[3]] = { site: l[3], bytes: 0, count: 0, live_bytes: 0, live_count: 0 });
          g.bytes += l[2]; g.count++;
          if (l[1] < 0 || l[1] > V.t1) { g.live_bytes += l[2]; g.live_count++; }
        });
      });
      rows = Object.keys(by).map(function (k) { var g = by[k]; g.stack = siteText(g.site); return g; });
      rows.sort(function (a, b) { return b.bytes - a.bytes; });
      rows = rows.slice(0, 100);
      var sampled = D.devices.some(function (d) { return d.lives_min > 0; });
      sitesBox.appendChild(el("div", { "class": "note" }, "By bytes allocated in the selected range " + dur(V.t0) + " \u2013 " +
        dur(V.t1) + (sampled ? " (from the largest blocks of each device)" : "") + "; live at its end in the third column."));
    }
    sitesBox.appendChild(table("table-sites", [
      { title: "Allocated", num: true, get: function (r) { return human(r.bytes); } },
      { title: "Allocations", num: true, get: function (r) { return num(r.count); } },
      { title: zoomed() ? "Live at range end" : "Live at end", num: true, get: function (r) { return human(r.live_bytes) + " (" + num(r.live_count) + ")"; } },
      { title: "Stack", get: function (r) { return stackCell(r.stack); } }], rows));
  }
  function followView() {
    viewLabel.textContent = zoomed() ? "Showing " + dur(V.t0) + " \u2013 " + dur(V.t1) + " of " + dur(SPAN) + " " : "Whole run (" + dur(SPAN) + ") ";
    peakTables.forEach(peakTable);
    sitesTable();
    document.body.setAttribute("data-view", Math.round(V.t0) + "," + Math.round(V.t1));
  }
  followView();

  // ------------------------------------------------------------ flame graph
  // An icicle of call stacks (root on top, the outermost frame first): the
  // width of a frame is the bytes of the allocations made under it.
  // "Leaked" is the leaks analysis's blocks; without it, what it is: the
  // blocks live at the end.
  var MEASURES = [["peak", "Live at the peak", 2], ["leaked", D.leaks_ran ? "Leaked (leaks analysis)" : "Live at the end", 3],
                  ["total", "Allocated in total", 1]];
  // The page opens on the device with the most memory that has a stack at its peak.
  var flame = { dev: 0, measure: "peak", root: null, fold: true };
  D.devices.forEach(function (d, i) { if ((d.attributed || 0) > (D.devices[flame.dev].attributed || 0)) flame.dev = i; });
  // Frames that only pass the call on (nn.Module's __call__, decorators):
  // folded into their caller unless the box is unticked.
  var WRAPPERS = [/\/torch\/nn\/modules\/module\.py\(\d+\): (_call_impl|_wrapped_call_impl|__call__)$/,
                  /\/torch\/(autograd\/grad_mode|utils\/_contextlib)\.py\(\d+\): decorate_context$/,
                  /\/torch\/optim\/optimizer\.py\(\d+\): (wrapper|profile_hook_step)$/,
                  /^<frozen importlib\._bootstrap>\(\d+\): _call_with_frames_removed$/];
  function isWrapper(nm) { for (var i = 0; i < WRAPPERS.length; i++) if (WRAPPERS[i].test(nm)) return true; return false; }
  // A frame's label: file names without their folders ("functional.py(3292): mse_loss");
  // the full text is in the tooltip.
  function shortFrame(nm) { return String(nm).replace(/(?:\/[^\s\/()]+)*\/([^\s\/()]+)/g, "$1"); }
  var KINDS = { step: "outlived their step", exit: "still allocated at the end", mark: "not freed by the third mark" };
  function leakNote(dev) {
    if (!D.leaks_ran) return notRun("leaks") + ": these are the blocks live at the end of " +
      "collection (at exit, or at stop() with the Python API), not necessarily leaks. ";
    var k = dev.leak_kinds || {}, parts = Object.keys(k).map(function (n) {
      return num(k[n][0]) + " " + (KINDS[n] || n) + " (" + human(k[n][1]) + ")";
    });
    return "The " + num(dev.leak_blocks || 0) + " blocks the leaks analysis reported on this device" +
      (parts.length ? ": " + parts.join(", ") : "") + ". ";
  }
  function flameTree(dev, col) {
    var root = { name: "all", value: 0, kids: {}, n: 0 };
    flame.folded = 0;
    dev.flame.forEach(function (f) {
      var v = f[col];
      if (!v) return;
      var node = root, p = paths[f[0]] || [];
      root.value += v;
      for (var i = 0; i < p.length; i++) {
        var nm = frames[p[i]];
        if (flame.fold && isWrapper(nm)) { flame.folded++; continue; }
        node = node.kids[nm] || (node.kids[nm] = { name: nm, value: 0, kids: {}, parent: node });
        node.value += v;
      }
    });
    var rest = dev.flame_rest[col - 1];
    if (rest) {
      root.value += rest;
      root.kids["(smaller sites)"] = { name: "(smaller sites)", value: rest, kids: {}, parent: root };
    }
    return root;
  }
  if (D.devices.length) {
    main.appendChild(el("h2", null, "Allocation flame graph"));
    var fbar = el("div", { "class": "viewbar", id: "flame-bar" });
    var sel = el("select", { id: "flame-device" });
    D.devices.forEach(function (d, i) { var o = el("option", { value: String(i) }, d.label); sel.appendChild(o); });
    sel.value = String(flame.dev);
    sel.addEventListener("change", function () { flame.dev = Number(sel.value); flame.root = null; drawFlame(); });
    fbar.appendChild(sel);
    MEASURES.forEach(function (m) {
      var b = el("button", { id: "flame-" + m[0], type: "button", "data-measure": m[0] }, m[1]);
      b.addEventListener("click", function () { flame.measure = m[0]; flame.root = null; drawFlame(); });
      fbar.appendChild(b);
    });
    var flab = el("label", { title: "nn.Module.__call__/_call_impl, torch.no_grad and optimizer decorators" });
    var fold = el("input", { type: "checkbox", id: "flame-fold", checked: "checked" });
    fold.addEventListener("change", function () { flame.fold = fold.checked; flame.root = null; drawFlame(); });
    flab.appendChild(fold);
    flab.appendChild(document.createTextNode(" fold wrapper frames"));
    fbar.appendChild(flab);
    var fnote = el("span", { "class": "note", id: "flame-note" });
    fbar.appendChild(fnote);
    main.appendChild(fbar);
    var fbox = el("div", { "class": "chartbox" });
    var fcanvas = el("canvas", { id: "flame", "class": "flame" });
    fbox.appendChild(fcanvas);
    var ftip = el("div", { "class": "tip" });
    fbox.appendChild(ftip);
    main.appendChild(fbox);
    var rects = [];
    var drawFlame = function () {
      var dev = D.devices[flame.dev], m = MEASURES.filter(function (x) { return x[0] === flame.measure; })[0];
      var tree = flameTree(dev, m[2]);
      var root = flame.root || tree;
      Array.prototype.forEach.call(fbar.querySelectorAll("button"), function (b) {
        b.className = b.getAttribute("data-measure") === flame.measure ? "on" : "";
      });
      var depth = 0;
      (function walk(nd, d) { depth = Math.max(depth, d); for (var k2 in nd.kids) walk(nd.kids[k2], d + 1); })(root, 1);
      var RH = 18, W2 = fcanvas.clientWidth || 1200, H2 = Math.max(60, Math.min(depth, 80) * RH + 4);
      fcanvas.style.height = H2 + "px";
      var dpr = window.devicePixelRatio || 1;
      fcanvas.width = Math.round(W2 * dpr); fcanvas.height = Math.round(H2 * dpr);
      var g = fcanvas.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, W2, H2);
      g.font = "11px ui-monospace, Menlo, Consolas, monospace"; g.textBaseline = "middle";
      rects = [];
      var count = 0;
      function hue(s) { var h = 0; for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0; return h; }
      function draw(nd, x, w, d) {
        if (w < 0.5 || d > 80) return;
        var y = (d - 1) * RH, h = hue(nd.name);
        g.fillStyle = nd === root && nd.name === "all" ? "#c9d1da" : "hsl(" + (10 + h % 40) + "," + (60 + h % 25) + "%," + (58 + h % 14) + "%)";
        g.fillRect(x, y, Math.max(0.5, w - 1), RH - 1);
        rects.push({ x: x, y: y, w: w, nd: nd });
        count++;
        if (w > 36) {
          var label = (nd.name === "all" && !nd.parent ? nd.name : shortFrame(nd.name)) + (nd === root ? " \u2014 " + human(nd.value) : "");
          var fit = Math.floor((w - 6) / 6.6);
          g.fillStyle = "#1d232b";
          g.fillText(label.length > fit ? label.slice(0, Math.max(1, fit - 1)) + "\u2026" : label, x + 3, y + RH / 2);
        }
        var kids = Object.keys(nd.kids).map(function (k3) { return nd.kids[k3]; }).sort(function (a, b) { return b.value - a.value; });
        var cx = x;
        kids.forEach(function (kd) { var kw = w * kd.value / nd.value; draw(kd, cx, kw, d + 1); cx += kw; });
      }
      if (root.value > 0) draw(root, 0, W2, 1);
      else {
        g.fillStyle = "#5f6b7a";
        g.fillText(m[0] !== "leaked" ? "Nothing to show on this device." : D.leaks_ran ?
          "The leaks analysis reported no block on this device." : "No block was live at the end on this device.", 8, 14);
      }
      fcanvas.setAttribute("data-measure", m[0]);
      fcanvas.setAttribute("data-device", dev.label);
      fcanvas.setAttribute("data-total", String(tree.value));
      fcanvas.setAttribute("data-root", root.name);
      fcanvas.setAttribute("data-nodes", String(count));
      fcanvas.setAttribute("data-folded", String(flame.folded));
      fnote.textContent = (m[0] === "leaked" ? leakNote(dev) : "") + human(tree.value) +
        " in total. Click a frame to zoom into it, the top bar to zoom out; hover for the full path.";
    };
    fcanvas.addEventListener("click", function (ev) {
      var r = fcanvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      for (var i = rects.length - 1; i >= 0; i--) {
        var q = rects[i];
        if (x >= q.x && x < q.x + q.w && y >= q.y && y < q.y + 18) {
          flame.root = q.nd === (flame.root || null) ? (q.nd.parent || null) : q.nd;
          if (flame.root && !flame.root.parent) flame.root = null;
          drawFlame();
          return;
        }
      }
    });
    fcanvas.addEventListener("mousemove", function (ev) {
      var r = fcanvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      for (var i = rects.length - 1; i >= 0; i--) {
        var q = rects[i];
        if (x >= q.x && x < q.x + q.w && y >= q.y && y < q.y + 18) {
          var rootv = (flame.root || q.nd).value;
          var p = q.nd, tot = p; while (tot.parent) tot = tot.parent;
          ftip.textContent = q.nd.name + "\n" + human(q.nd.value) + " (" + (100 * q.nd.value / Math.max(1, tot.value)).toFixed(1) + "% of all)";
          ftip.style.display = "block";
          ftip.style.left = Math.min(x + 14, r.width - 320) + "px";
          ftip.style.top = (y + 12) + "px";
          return;
        }
      }
      ftip.style.display = "none";
    });
    fcanvas.addEventListener("mouseleave", function () { ftip.style.display = "none"; });
    window.addEventListener("resize", drawFlame);
    // #msms-flame=MEASURE opens the flame graph on that measure (peak, leaked, total)
    var fm = /msms-flame=(peak|leaked|total)/.exec(location.hash || "");
    if (fm) flame.measure = fm[1];
    drawFlame();
  }

  var names = Object.keys(D.findings).sort(function (a, b) {
    return ((a === "leaks" ? 0 : 1) - (b === "leaks" ? 0 : 1)) || (a < b ? -1 : a > b ? 1 : 0);
  });
  if (names.indexOf("leaks") < 0) {
    main.appendChild(el("h2", null, "Leaks"));
    main.appendChild(el("p", { "class": "empty", id: "no-leaks" }, D.leaks_ran ?
      "The leaks analysis reported no leak." : notRun("leaks") + "."));
  }
  // A process whose image ended with blocks live (exec, or _exit after fork,
  // as DataLoader workers end): what it held went with it, judged by no one.
  var imageEnded = function () {
    if (!D.leaks_ran || !D.image_ended || !D.image_ended[0]) return;
    main.appendChild(el("p", { "class": "note", id: "image-ended" },
      "Not judged: what the process held when its image ended (" + D.image_ended[0] + " block(s), " +
      human(D.image_ended[1]) + ": an exec, or _exit after fork) went with it; its step leaks are judged as " +
      "any process's."));
  };
  // The blocks there when collection started (deferred mode) and still
  // allocated at the end: not judged, in no leak total (the leak analysis's
  // leaks_not_judged rows, one per device), said apart.
  var notJudged = function () {
    var f = D.findings.leaks_not_judged;
    if (!f) return;
    function v(r, n) { var j = f.cols.indexOf(n); return j < 0 ? "" : r[j]; }
    f.rows.forEach(function (r) {
      main.appendChild(el("p", { "class": "note not-judged" },
        "Not judged on device " + v(r, "device") + ": " + num(Number(v(r, "blocks"))) + " block(s), " +
        human(Number(v(r, "bytes"))) + " " + v(r, "why") + "."));
    });
  };
  if (names.indexOf("leaks") < 0) { imageEnded(); notJudged(); }
  // The leaks table in a few columns, the stack last and wide enough to read:
  // where (device, pool), what (kind, step), blocks, bytes, address, the
  // operator and the program's line (or the site), the stack.
  function leakCols(f) {
    function v(r, n) { var j = f.cols.indexOf(n); return j < 0 ? "" : r[j]; }
    function join(parts, sep) { return parts.filter(function (x) { return x; }).join(sep); }
    return [
      { title: "Device", get: function (r) { return join([v(r, "device"), v(r, "pool")], " "); } },
      { title: "Kind", get: function (r) {
        var k = v(r, "kind"), st = v(r, "step"), l = v(r, "lasted_steps");
        if (k === "exit") return "live at the end";
        return join([k === "step" ? "" : k, st ? "step " + st : "", l ? "lasted " + l + " steps" : ""], ", ");
      } },
      { title: "Blocks", num: true, get: function (r) { return num(v(r, "count") || 1); } },
      { title: "Bytes", num: true, get: function (r) { return human(Number(v(r, "size") || 0)); } },
      { title: "Address", get: function (r) { return el("td", { "class": "lines" }, join([v(r, "ptr") || v(r, "addr"), v(r, "event_id") ? "event " + v(r, "event_id") :
        v(r, "allocation_id") ? "allocation " + v(r, "allocation_id") : ""], "\n")); } },
      { title: "Allocated by", get: function (r) {
        return el("td", { "class": "text" }, join([v(r, "operator"), v(r, "python_site") ? "called from " + v(r, "python_site") : "",
          v(r, "site"), v(r, "kernel") && !v(r, "lasted_steps") ? "kernel " + v(r, "kernel") : ""], "\n"));
      } },
      { title: "Stack", get: function (r) { return stackCell(v(r, "stack")); } }];
  }
  function findingTable(name) {
    var f = D.findings[name];
    var title = name === "leaks" ? "Leaks" : "Findings: " + name;
    if (name === "leaks")  // blocks and bytes as the analysis counts them; a row may be a site of many blocks
      main.appendChild(el("h2", null, title + ": " + num(D.leak_total[0]) + " blocks, " + human(D.leak_total[1]) +
        " (" + num(f.total) + " rows)"));
    else main.appendChild(el("h2", null, title + " (" + num(f.total) + ")"));
    if (f.total > f.rows.length) main.appendChild(el("div", { "class": "note" }, "The first " + num(f.rows.length) + " rows."));
    var used = f.cols.map(function (c, j) { return f.rows.some(function (r) { return r[j] !== ""; }); });
    var cols = f.cols.map(function (c, j) {
      var isNum = f.rows.length > 0 && f.rows.every(function (r) { return /^-?\d+$/.test(r[j]); });
      var isStack = /stack/i.test(c);
      // long texts (operators, sites) wrap in a column of their own width; short ones never wrap
      var isText = !isStack && f.rows.some(function (r) { return r[j].length > 24; });
      return { title: c, num: isNum && !/id$/.test(c), get: function (r) {
        if (isStack) return stackCell(r[j]);
        if (isText) return el("td", { "class": "text" }, r[j]);
        if (isNum && (c === "size" || /bytes|size$/.test(c))) return human(Number(r[j]));
        return r[j];
      } };
    });
    if (name === "leaks") cols = leakCols(f);
    else cols = cols.filter(function (c, j) { return used[j]; });
    var tbox = table("table-finding-" + name.replace(/[^A-Za-z0-9_-]/g, "_"), cols, f.rows);
    main.appendChild(tbox);
  }
  if (names.indexOf("leaks") >= 0) { findingTable("leaks"); imageEnded(); notJudged(); }
  // Inefficient memory: what the inefficient analysis marked, each block
  // once in the total and once in each of its kinds (a block allocated early
  // and freed late is in both rows), per device; the largest blocks with
  // their site.
  (function () {
    var IE = D.inefficient || { ran: false, blocks: 0, bytes: 0, kinds: {}, devices: [], largest: [] };
    if (!IE.blocks) {
      main.appendChild(el("h2", { id: "inefficient-title" }, "Inefficient memory"));
      main.appendChild(el("p", { "class": "empty", id: "no-inefficient" }, IE.ran && !failure("inefficient") ?
        "The inefficient analysis marked no block." : notRun("inefficient") + "."));
      return;
    }
    main.appendChild(el("h2", { id: "inefficient-title" }, "Inefficient memory: " + num(IE.blocks) + " blocks, " + human(IE.bytes)));
    main.appendChild(el("div", { "class": "note" }, "Blocks the inefficient analysis marked: early_allocation (an operator " +
      "freed memory between the block's allocation and its first use), late_deallocation (one allocated between its last " +
      "use and its free), temporary_idleness (unused for long between two uses). A block counts once in the total and " +
      "once in each of its kinds."));
    var KDESC = ["early_allocation", "late_deallocation", "temporary_idleness"];
    var krows = [];
    IE.devices.forEach(function (d) {
      krows.push({ device: d.label, kind: "all kinds", blocks: d.blocks, bytes: d.bytes });
      Object.keys(d.kinds).sort(function (a, b) {
        var x = KDESC.indexOf(a), y = KDESC.indexOf(b);
        return (x < 0 ? 9 : x) - (y < 0 ? 9 : y) || (a < b ? -1 : a > b ? 1 : 0);
      }).forEach(function (k) {
        krows.push({ device: d.label, kind: k, blocks: d.kinds[k][0], bytes: d.kinds[k][1] });
      });
    });
    main.appendChild(table("table-inefficient-kinds", [
      { title: "Device", get: function (r) { return r.device; } },
      { title: "Kind", get: function (r) { return r.kind; } },
      { title: "Blocks", num: true, get: function (r) { return num(r.blocks); } },
      { title: "Bytes", num: true, get: function (r) { return human(r.bytes); } }], krows));
    main.appendChild(el("h3", null, IE.largest.length < IE.blocks ? "The " + num(IE.largest.length) +
      " largest marked blocks (of " + num(IE.blocks) + ")" : "The marked blocks, largest first"));
    main.appendChild(table("table-inefficient-blocks", [
      { title: "Device", get: function (r) { return r.device; } },
      { title: "Kinds", get: function (r) { return el("td", { "class": "lines" }, r.kinds.split(",").join("\n")); } },
      { title: "Bytes", num: true, get: function (r) { return human(r.size); } },
      { title: "Event", get: function (r) { return "MALLOC " + r.event_id; } },
      { title: "Allocated at", get: function (r) { return stackCell(r.stack); } }], IE.largest));
  })();
  names.forEach(function (name) { if (name !== "leaks" && name !== "leaks_not_judged") findingTable(name); });
  // Test mode (#msms-test=CHART,FROM,TO with FROM/TO fractions of the plot
  // width): drags over that chart as a user would, clicks the middle of the
  // new view, switches the flame graph through its measures and writes what
  // the page showed into #msms-test-result (for headless --dump-dom).
  var tm = /msms-test=(\d+),([\d.]+),([\d.]+)/.exec(location.hash || "");
  if (tm && charts[Number(tm[1])]) {
    var res = { before: {}, after: {} };
    var snap = function (into) {
      into.view = document.body.getAttribute("data-view");
      into.charts = charts.map(function (c) {
        return { labels: Number(c.canvas.getAttribute("data-step-labels")),
                 boxes: JSON.parse(c.canvas.getAttribute("data-label-boxes")) };
      });
      into.legends = D.devices.map(function (d, i) {
        return Array.prototype.map.call(document.querySelectorAll("#legend-" + i + " [data-owner]"), function (e) { return e.getAttribute("data-owner"); });
      });
      into.peak_owners = D.devices.map(function (d, i) {
        return Array.prototype.map.call(document.querySelectorAll("#table-peak-" + i + " tbody tr td:nth-child(3)"), function (e) { return e.textContent; });
      });
      into.peak_titles = D.devices.map(function (d, i) { return document.querySelector("#peak-box-" + i + " h3").textContent; });
      into.sites = Number(document.getElementById("table-sites").getAttribute("data-rows"));
      into.sites_note = document.querySelector("#sites-box .note").textContent;
    };
    snap(res.before);
    var c = charts[Number(tm[1])], r = c.canvas.getBoundingClientRect(), L0 = 78, R0 = 16;
    var px = function (f) { return r.left + L0 + (r.width - L0 - R0) * f; }, y = r.top + r.height / 2;
    var fire = function (target, type, x, extra) {
      var e = new MouseEvent(type, Object.assign({ clientX: x, clientY: y, bubbles: true }, extra || {}));
      target.dispatchEvent(e);
    };
    fire(c.canvas, "mousedown", px(Number(tm[2])));
    fire(window, "mousemove", px((Number(tm[2]) + Number(tm[3])) / 2));
    fire(window, "mousemove", px(Number(tm[3])));
    fire(window, "mouseup", px(Number(tm[3])));
    snap(res.after);
    fire(c.canvas, "mousedown", px(0.5));
    fire(window, "mouseup", px(0.5));
    var lb = document.getElementById("live-at-" + tm[1]);
    res.live_at = { t: Number(lb.getAttribute("data-t")), title: lb.querySelector("h3").textContent,
                    rows: Number(document.getElementById("table-liveat-" + tm[1]).getAttribute("data-rows")) };
    res.flame = {};
    var fc = document.getElementById("flame");
    D.devices.forEach(function (d, i) {
      var sel2 = document.getElementById("flame-device");
      sel2.value = String(i); sel2.dispatchEvent(new Event("change"));
      var per = {};
      MEASURES.forEach(function (m) {
        document.getElementById("flame-" + m[0]).click();
        per[m[0]] = { total: Number(fc.getAttribute("data-total")), nodes: Number(fc.getAttribute("data-nodes")) };
      });
      res.flame[d.label] = per;
    });
    var sel3 = document.getElementById("flame-device");
    sel3.value = tm[1]; sel3.dispatchEvent(new Event("change"));
    document.getElementById("flame-peak").click();
    // zoom into the widest frame under the root, as a click would
    var fr = fc.getBoundingClientRect();
    fire(fc, "click", fr.left + 5, { clientY: fr.top + 18 + 9 });
    res.flame_zoom = fc.getAttribute("data-root");
    var out = el("pre", { id: "msms-test-result" }, JSON.stringify(res));
    document.body.appendChild(out);
  }
  // #msms-oom-hover: the pointer over each chart's out-of-memory marks in
  // turn; what the tooltip said goes into #msms-oom-hover (headless --dump-dom)
  if (/msms-oom-hover/.test(location.hash || "")) {
    var hov = charts.map(function (c) {
      var r = c.canvas.getBoundingClientRect();
      return { device: c.dev.label, tips: c.fails.map(function (f, i) {
        c.canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: c.oomAt(i), clientY: r.top + r.height / 2, bubbles: true }));
        return c.tip.textContent;
      }) };
    });
    document.body.appendChild(el("pre", { id: "msms-oom-hover" }, JSON.stringify(hov)));
  }
  document.body.setAttribute("data-ready", "1");
})();
</script>
</body>
</html>
)TPL";

}  // namespace msms_html
