// The page --live-http serves at "/": self-contained (inline style and
// script, no other request than /live.json every second).
#pragma once

namespace msms {
namespace live {

inline const char* const kLivePage = R"MSMSPAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>msmemscope live</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.05em;margin:1.1em 0 .3em}
table{border-collapse:collapse;margin:.2em 0} td,th{padding:.15em .7em;border-bottom:1px solid #ddd;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums} .muted{color:#777} .state{font-weight:bold}
.grow{color:#b00} .shrink{color:#070} section.proc{border-top:2px solid #888;margin-top:1em}
code{font-size:.9em} p.failed{color:#b00;font-weight:bold}
</style></head><body>
<h1>msmemscope live</h1>
<div id="status" class="muted">waiting for the first snapshot&hellip;</div>
<div id="procs"></div>
<script>
"use strict";
function human(b){var u=["B","KiB","MiB","GiB","TiB"],v=b,i=0;while(Math.abs(v)>=1024&&i<4){v/=1024;i++;}
 return i?v.toFixed(1)+" "+u[i]:b+" B";}
function el(tag,attrs,text){var e=document.createElement(tag);if(attrs)for(var k in attrs)e.setAttribute(k,attrs[k]);
 if(text!==undefined)e.textContent=text;return e;}
function table(head,rows){var t=el("table"),tr=el("tr");head.forEach(function(h){tr.appendChild(el("th",h[1]?{"class":"num"}:null,h[0]));});
 t.appendChild(tr);rows.forEach(function(r){t.appendChild(r);});return t;}
function bytesCell(cls,b){return el("td",{"class":"num "+cls,"data-bytes":String(b)},human(b)+" ("+b+" B)");}
function render(d){
 var root=document.getElementById("procs");root.textContent="";
 document.getElementById("status").textContent=(d.running?"running":"the run has ended")+" \u2014 "+d.processes.length+" process(es), updated "+new Date().toLocaleTimeString();
 d.processes.forEach(function(p){
  var s=el("section",{"class":"proc","data-pid":String(p.pid)});
  s.appendChild(el("h2",null,"pid "+p.pid+" ("+p.command+") \u2014 step "+p.step+", "+p.events+" events"+(p.finished?(p.ended?" [finished: "+p.ended+"]":" [finished]"):p.interrupted?" [not finished: msmemscope was interrupted]":" [running]")));
  (p.plugin_failures||[]).forEach(function(f){s.appendChild(el("p",{"class":"failed"},f.text));});
  s.appendChild(el("h2",null,"Memory per device and pool"));
  s.appendChild(table([["pool"],["live",1],["peak",1]],p.pools.map(function(x){var tr=el("tr",{"class":"pool","data-pool":x.pool});
   tr.appendChild(el("td",{"class":"name"},x.pool));tr.appendChild(bytesCell("live",x.live_bytes));tr.appendChild(bytesCell("peak",x.peak_bytes));return tr;})));
  s.appendChild(el("h2",null,"Growth per step (last "+p.steps.length+" step ends)"));
  s.appendChild(table([["step"],["live at its end",1],["change",1]],p.steps.map(function(x){var tr=el("tr",{"class":"step","data-step":String(x.step)});
   tr.appendChild(el("td",null,String(x.step)));tr.appendChild(bytesCell("live",x.live_bytes));
   var g=el("td",{"class":"num growth "+(x.growth_bytes>0?"grow":x.growth_bytes<0?"shrink":""),"data-bytes":String(x.growth_bytes)},(x.growth_bytes>0?"+":"")+x.growth_bytes+" B");
   tr.appendChild(g);return tr;})));
  s.appendChild(el("h2",null,"Top allocation sites by live bytes"));
  s.appendChild(table([["live",1],["blocks",1],["pool"],["site"],["operator"],["Python line"]],p.top_sites.map(function(x){var tr=el("tr",{"class":"site"});
   tr.appendChild(bytesCell("live",x.live_bytes));tr.appendChild(el("td",{"class":"num blocks","data-count":String(x.live_blocks)},String(x.live_blocks)));
   tr.appendChild(el("td",null,x.pool));var c=el("td",{"class":"where"});c.appendChild(el("code",null,x.site));tr.appendChild(c);
   tr.appendChild(el("td",{"class":"op"},x.operator));tr.appendChild(el("td",{"class":"py"},x.python));return tr;})));
  s.appendChild(el("h2",null,"Leak suspects"));
  var ls=p.leak_suspects,ul=el("ul",{"class":"suspects"});
  ls.step_warnings.forEach(function(w){ul.appendChild(el("li",{"class":"warning"},w));});
  if(ls.leak_analysis.runs===false)ul.appendChild(el("li",{"class":"muted"},"the leak analysis does not run: "+ls.leak_analysis.not_running+"; nothing here is judged"));
  else if(!ls.step_warnings.length&&!ls.leak_analysis.reported)ul.appendChild(el("li",{"class":"muted"},"none found by the step analysis so far"));
  s.appendChild(ul);
  if(ls.leak_analysis.reported){var la=ls.leak_analysis;
   s.appendChild(el("p",{"class":"leaks","data-bytes":String(la.bytes),"data-blocks":String(la.blocks)},"leak analysis at the end: "+la.blocks+" block(s), "+la.bytes+" B in "+la.findings+" finding(s)"));
   s.appendChild(table([["device"],["pool"],["kind"],["bytes",1],["blocks",1],["site"],["operator"]],la.rows.map(function(x){var tr=el("tr",{"class":"leak"});
    [x.device,x.pool,x.kind].forEach(function(v){tr.appendChild(el("td",null,v));});tr.appendChild(bytesCell("bytes",x.bytes));
    tr.appendChild(el("td",{"class":"num"},String(x.blocks)));tr.appendChild(el("td",null,x.site));tr.appendChild(el("td",null,x.operator||""));return tr;})));
   var rest=la.not_in_rows;if(rest&&(rest.blocks||rest.bytes))s.appendChild(el("p",{"class":"muted"},"... and "+rest.blocks+" more block(s), "+rest.bytes+" B, at further sites"));}
  root.appendChild(s);});
 document.body.setAttribute("data-updated","1");
}
var running=true;
function poll(){fetch("/live.json",{cache:"no-store"}).then(function(r){return r.json();}).then(function(d){render(d);running=d.running;})
 .catch(function(){document.getElementById("status").textContent="the run has ended (the server is gone); the last view stays";running=false;})
 .then(function(){if(running)setTimeout(poll,1000);});}
poll();
</script></body></html>
)MSMSPAGE";

}  // namespace live
}  // namespace msms
