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
</style>
</head>
<body>
<header>
  <h1 id="title">msmemscope report</h1>
  <div class="cmd" id="command"></div>
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
  function card(k, v) {
    var c = el("div", { "class": "card" });
    c.appendChild(el("div", { "class": "k" }, k));
    c.appendChild(el("div", { "class": "v" }, v));
    document.getElementById("cards").appendChild(c);
  }
  function stackCell(text) {
    var td = el("td");
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

  function drawChart(dev, idx, box) {
    var canvas = el("canvas", { id: "chart-" + idx, "data-device": dev.label });
    box.appendChild(canvas);
    var tip = el("div", { "class": "tip" });
    box.appendChild(tip);
    var n = dev.t.length, k = dev.cats.length;
    var span = Math.max(1, D.end_ns - D.start_ns);
    var top = Math.max(1, dev.peak) * 1.08;
    // cumulative sums per point
    var cum = [];
    for (var c = 0; c < k; c++) {
      var row = new Float64Array(n);
      for (var i = 0; i < n; i++) row[i] = (c ? cum[c - 1][i] : 0) + Math.max(0, dev.v[c][i]);
      cum.push(row);
    }
    var W, H, L = 78, R = 16, T = 14, B = 34;
    function X(t) { return L + (W - L - R) * (t / span); }
    function Y(b) { return T + (H - T - B) * (1 - b / top); }
    function paint() {
      var dpr = window.devicePixelRatio || 1;
      W = canvas.clientWidth || 900; H = canvas.clientHeight || 340;
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      var g = canvas.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, W, H);
      g.font = "11px system-ui, sans-serif";
      // grid and axes
      var ys = niceBytes(top);
      g.strokeStyle = "#e3e8ee"; g.fillStyle = "#5f6b7a"; g.lineWidth = 1;
      g.textAlign = "right"; g.textBaseline = "middle";
      for (var y = 0; y <= top; y += ys) {
        g.beginPath(); g.moveTo(L, Y(y) + 0.5); g.lineTo(W - R, Y(y) + 0.5); g.stroke();
        g.fillText(human(y), L - 6, Y(y));
      }
      var xs = niceStep(span, 8);
      g.textAlign = "center"; g.textBaseline = "top";
      for (var x = 0; x <= span; x += xs) {
        g.beginPath(); g.moveTo(X(x) + 0.5, T); g.lineTo(X(x) + 0.5, H - B); g.stroke();
        g.fillText(dur(x), X(x), H - B + 6);
      }
      // step marks
      g.strokeStyle = "rgba(95,107,122,.45)"; g.setLineDash([3, 3]);
      var marks = D.marks || [], every = Math.max(1, Math.ceil(marks.length / 40));
      marks.forEach(function (m, j) {
        g.beginPath(); g.moveTo(X(m[0]) + 0.5, T); g.lineTo(X(m[0]) + 0.5, H - B); g.stroke();
        if (j % every === 0) { g.fillStyle = "#5f6b7a"; g.textAlign = "left"; g.fillText(m[1], X(m[0]) + 3, T); }
      });
      g.setLineDash([]);
      // stacked areas, as steps: the value holds until the next point
      for (var c2 = k - 1; c2 >= 0; c2--) {
        if (!n) break;
        g.beginPath();
        g.moveTo(X(dev.t[0]), Y(0));
        for (var i2 = 0; i2 < n; i2++) {
          if (i2) g.lineTo(X(dev.t[i2]), Y(cum[c2][i2 - 1]));
          g.lineTo(X(dev.t[i2]), Y(cum[c2][i2]));
        }
        g.lineTo(X(span), Y(cum[c2][n - 1]));
        g.lineTo(X(span), Y(0));
        g.closePath();
        g.fillStyle = COLORS[c2 % COLORS.length];
        g.globalAlpha = 0.85; g.fill(); g.globalAlpha = 1;
      }
      // peak
      if (dev.peak > 0) {
        var px = X(dev.peak_t), py = Y(dev.peak);
        g.strokeStyle = "#c62828"; g.lineWidth = 1.5; g.setLineDash([5, 3]);
        g.beginPath(); g.moveTo(L, py + 0.5); g.lineTo(W - R, py + 0.5); g.stroke(); g.setLineDash([]);
        g.fillStyle = "#c62828";
        g.beginPath(); g.arc(px, py, 4.5, 0, 2 * Math.PI); g.fill();
        g.font = "bold 12px system-ui, sans-serif";
        var label = "peak " + human(dev.peak) + " at " + dur(dev.peak_t);
        g.textAlign = px > W * 0.7 ? "right" : "left"; g.textBaseline = "bottom";
        g.fillText(label, px + (px > W * 0.7 ? -8 : 8), py - 3);
      }
      g.strokeStyle = "#9aa5b1"; g.lineWidth = 1;
      g.beginPath(); g.moveTo(L + 0.5, T); g.lineTo(L + 0.5, H - B + 0.5); g.lineTo(W - R, H - B + 0.5); g.stroke();
    }
    paint();
    window.addEventListener("resize", paint);
    canvas.addEventListener("mousemove", function (ev) {
      if (!n) return;
      var r = canvas.getBoundingClientRect(), t = (ev.clientX - r.left - L) / (W - L - R) * span;
      var lo = 0, hi = n - 1;
      while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (dev.t[mid] <= t) lo = mid; else hi = mid - 1; }
      var lines = [dur(dev.t[lo]) + "   total " + human(cum[k - 1] ? cum[k - 1][lo] : 0)];
      for (var c3 = k - 1; c3 >= 0; c3--) if (dev.v[c3][lo]) lines.push(dev.cats[c3] + ": " + human(dev.v[c3][lo]));
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      tip.style.left = Math.min(ev.clientX - r.left + 14, r.width - 220) + "px";
      tip.style.top = (ev.clientY - r.top + 10) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    canvas.setAttribute("data-drawn", "true");
    canvas.setAttribute("data-points", String(n));
    canvas.setAttribute("data-series", String(k));
    var legend = el("div", { "class": "legend", id: "legend-" + idx });
    dev.cats.forEach(function (name, c4) {
      var s = el("span");
      s.appendChild(el("span", { "class": "sw", style: "background:" + COLORS[c4 % COLORS.length] }));
      s.appendChild(document.createTextNode(name));
      legend.appendChild(s);
    });
    box.appendChild(legend);
  }

  document.getElementById("title").textContent = "msmemscope report \u2014 pid " + D.pid;
  document.getElementById("command").textContent = D.command || "";
  card("events", num(D.events));
  card("duration", dur(Math.max(0, D.end_ns - D.start_ns)));
  D.devices.forEach(function (d) { card(d.label + " peak / final", human(d.peak) + " / " + human(d.final)); });
  var leaks = D.findings.leaks;
  card("leaks found", leaks ? num(leaks.total) : "\u2014");

  main.appendChild(el("h2", null, "Memory over time"));
  if (!D.devices.length) main.appendChild(el("p", { "class": "empty", id: "no-memory" }, "No allocations were recorded."));
  D.devices.forEach(function (dev, i) {
    var sec = el("section", { id: "device-" + i });
    sec.appendChild(el("h3", null, dev.label + " \u2014 peak " + human(dev.peak) + ", final " + human(dev.final) +
      ", " + num(dev.mallocs) + " allocations, " + num(dev.live) + " blocks live at the end"));
    var box = el("div", { "class": "chartbox" });
    sec.appendChild(box);
    drawChart(dev, i, box);
    sec.appendChild(el("h3", null, "Live at the peak (" + human(dev.peak) + " in " + num(dev.peak_blocks) + " blocks), by site"));
    if (dev.peak_groups > dev.at_peak.length)
      sec.appendChild(el("div", { "class": "note" }, "The " + dev.at_peak.length + " largest of " + num(dev.peak_groups) + " groups."));
    sec.appendChild(table("table-peak-" + i, [
      { title: "Bytes", num: true, get: function (r) { return human(r.bytes); } },
      { title: "Blocks", num: true, get: function (r) { return num(r.count); } },
      { title: "Owner", get: function (r) { return r.cat; } },
      { title: "Stack", get: function (r) { return stackCell(r.stack); } }], dev.at_peak));
    main.appendChild(sec);
  });

  main.appendChild(el("h2", null, "Top allocation sites"));
  main.appendChild(el("div", { "class": "note" }, "By bytes allocated over the whole run; " + num(D.site_count) + " distinct sites."));
  main.appendChild(table("table-sites", [
    { title: "Allocated", num: true, get: function (r) { return human(r.bytes); } },
    { title: "Allocations", num: true, get: function (r) { return num(r.count); } },
    { title: "Live at end", num: true, get: function (r) { return human(r.live_bytes) + " (" + num(r.live_count) + ")"; } },
    { title: "Stack", get: function (r) { return stackCell(r.stack); } }], D.sites));

  var names = Object.keys(D.findings).sort(function (a, b) {
    var o = { leaks: 0, inefficient: 1 };
    return ((a in o ? o[a] : 2) - (b in o ? o[b] : 2)) || (a < b ? -1 : a > b ? 1 : 0);
  });
  ["leaks", "inefficient"].forEach(function (must) {
    if (names.indexOf(must) < 0) {
      main.appendChild(el("h2", null, must === "leaks" ? "Leaks" : "Inefficient memory"));
      main.appendChild(el("p", { "class": "empty", id: "no-" + must }, "None reported (the " + must +
        " analyzer found nothing or did not run: --analysis=" + must + ")."));
    }
  });
  names.forEach(function (name) {
    var f = D.findings[name];
    var title = name === "leaks" ? "Leaks" : name === "inefficient" ? "Inefficient memory" : "Findings: " + name;
    main.appendChild(el("h2", null, title + " (" + num(f.total) + ")"));
    if (f.total > f.rows.length) main.appendChild(el("div", { "class": "note" }, "The first " + num(f.rows.length) + " rows."));
    var cols = f.cols.map(function (c, j) {
      var isNum = f.rows.length > 0 && f.rows.every(function (r) { return /^-?\d+$/.test(r[j]); });
      var isStack = /stack/i.test(c);
      return { title: c, num: isNum && !/id$/.test(c), get: function (r) {
        if (isStack) return stackCell(r[j]);
        if (isNum && (c === "size" || /bytes|size$/.test(c))) return human(Number(r[j]));
        return r[j];
      } };
    });
    main.appendChild(table("table-finding-" + name.replace(/[^A-Za-z0-9_-]/g, "_"), cols, f.rows));
  });
  document.body.setAttribute("data-ready", "1");
})();
</script>
</body>
</html>
)TPL";

}  // namespace msms_html
