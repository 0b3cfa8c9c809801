"""The HTML, CSS and JavaScript of ``accelrt memory viz`` (see :mod:`accelrt.memory.viz`).

One self-contained page: the data sits in a ``<script type="application/json">`` block with
every ``<`` escaped (so no string from a snapshot can end the script), is read with
``JSON.parse`` and shown with ``textContent`` only. The timeline is drawn on a canvas with
precomputed levels of detail (the design and measured speed are in docs/memory_viz.md).
"""

from __future__ import annotations

import html
import json
from typing import Any

from ._files import terminal_safe

__all__ = ["render"]


def render(title: str, data: dict[str, Any]) -> str:
    """The page for ``data`` (built by :func:`accelrt.memory.viz.trace_html`).

    Example::

        >>> from accelrt.memory.tools._viz_page import render
        >>> page = render("<t>", {"devices": []})
        >>> "&lt;t&gt;" in page and "<t>" not in page
        True
    """
    blob = json.dumps(data, separators=(",", ":"), ensure_ascii=True).replace("<", "\\u003c")
    title = html.escape(terminal_safe(title, one_line=True))   # always encodes to UTF-8
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", blob)


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
*{box-sizing:border-box}
body{font:13px/1.4 system-ui,sans-serif;margin:0;padding:8px 12px;color:#222}
h1{font-size:1.15em;margin:0 0 4px} h2{font-size:1.02em;margin:10px 0 4px}
.bar-ctl{display:flex;flex-wrap:wrap;gap:4px 10px;align-items:center;margin:4px 0}
.bar-ctl label{white-space:nowrap}
button,select{font:inherit;padding:1px 6px}
button.oom{color:#b00020;border-color:#b00020}
#tlwrap{position:relative;border:1px solid #ccc;background:#fcfcfc}
#tl{display:block;width:100%;cursor:crosshair;touch-action:none}
#tip{position:absolute;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #888;
 padding:3px 6px;font:12px/1.3 monospace;white-space:pre;display:none;max-width:70%;overflow:hidden;z-index:2}
.legend{font-size:12px;color:#444} .legend>span{white-space:nowrap}
.k{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px;vertical-align:-1px}
.panes{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:0 16px}
@media (max-width:900px){.panes{grid-template-columns:minmax(0,1fr)}}
pre{background:#f4f4f4;padding:6px;overflow:auto;margin:0;font-size:12px;max-height:22em;white-space:pre}
#stack{user-select:text}
table{border-collapse:collapse;width:100%;font-size:12px}
td,th{padding:1px 6px;text-align:right;border-bottom:1px solid #eee;white-space:nowrap}
td:first-child,th:first-child{text-align:left;white-space:normal;word-break:break-all}
.grow{color:#b00020} .shrink{color:#2a7a2a}
#segs{max-height:28em;overflow:auto}
details.seg{margin:1px 0} details.seg summary{display:flex;gap:8px;align-items:center;cursor:pointer}
.lbl{font:11px monospace;white-space:nowrap;flex:0 1 22em;min-width:0;overflow:hidden;text-overflow:ellipsis}
.barbox{flex:1 1 auto;min-width:60px}
.sbar{position:relative;height:13px;border:1px solid #999;background:#eee;overflow:hidden}
.sbar div{position:absolute;top:0;height:100%}
.muted{color:#666}
</style></head><body>
<h1>__TITLE__</h1>
<div class="bar-ctl">
 <label>Device <select id="device"></select></label>
 <span><button id="zin" title="zoom in (+)">+</button> <button id="zout" title="zoom out (-)">&minus;</button>
 <button id="zfit" title="show the whole trace (0)">Fit</button></span>
 <label>Detail <select id="detail" title="how many of the largest allocations are drawn one by one"></select></label>
 <button id="peak">Peak</button><button id="end">End</button><span id="ooms"></span>
</div>
<div id="tlwrap"><canvas id="tl" tabindex="0" aria-label="memory timeline"></canvas><div id="tip"></div></div>
<div class="legend" id="legend"><span><span class="k" style="background:#3b75af;height:2px;margin-left:0"></span>active</span>
<span><span class="k" style="background:#888;height:2px"></span>reserved</span>
<span><span class="k" style="background:linear-gradient(90deg,#4e79a7,#f28e2b,#e15759,#59a14f)"></span>largest allocations</span>
<span><span class="k" style="background:#c4d5e7"></span>smaller ones, summed</span>
<span><span class="k" style="background:#d62728;width:2px"></span>OOM</span>
<span class="muted">&nbsp; wheel: zoom, drag: pan, click: select a moment and an allocation</span></div>
<p id="caption" class="muted"></p>
<div class="panes">
<section><h2>Allocation <button id="copy" title="copy the stack">Copy</button></h2>
<pre id="stack">Click an allocation in the timeline or a block below.</pre></section>
<section><h2 id="statehead">Allocator state</h2><p id="statesum"></p><div id="segs"></div></section>
</div>
<section><h2 id="lochead">Memory by code location</h2><table id="byloc"></table></section>
<section id="cmpsec" hidden><h2 id="cmphead"></h2><table id="cmp"></table></section>
<details><summary>Segment summary (text)</summary><pre id="segsum"></pre></details>
<script id="data" type="application/json">__DATA__</script>
<script>
(function(){
"use strict";
var D=JSON.parse(document.getElementById("data").textContent);
function $(id){return document.getElementById(id);}
function mk(tag,text,cls){var e=document.createElement(tag);if(text!=null)e.textContent=String(text);if(cls)e.className=cls;return e;}
var UNITS=["B","KiB","MiB","GiB","TiB","PiB"];
function fmt(n){var i=0;n=+n;var s=n<0?"-":"";n=Math.abs(n);
 while(n>=1024&&i<UNITS.length-1){n/=1024;i++;}return s+n.toFixed(1)+" "+UNITS[i];}
function tick(n){var i=0;while(n>=1024&&i<UNITS.length-1){n/=1024;i++;}
 return (Math.abs(n-Math.round(n))<1e-9?String(Math.round(n)):n.toFixed(1))+" "+UNITS[i];}
function hex(a){return "0x"+Math.max(0,a).toString(16);}
function nice(v){if(!(v>0))return 1;var p=Math.pow(10,Math.floor(Math.log10(v))),m=v/p;
 return (m<=1?1:m<=2?2:m<=5?5:10)*p;}
var PAL=["#4e79a7","#f28e2b","#e15759","#76b7b2","#59a14f","#edc948","#b07aa1","#ff9da7","#9c755f","#86bcb6"];
var STATE_COLOR={active_allocated:"#3b75af",active_pending_free:"#ef8636",inactive:"#cccccc"};
var STATE_NAME={active_allocated:"allocated",active_pending_free:"freed, waiting on a stream",inactive:"free"};
var DETAILS=[100,300,1000,3000,10000,30000,1e9];
var S={di:0,m:null,view:[0,1],moment:0,sel:null,detail:1000,perf:{first:null,draws:[]}};
var models={};

function loc(stack){return stack<0?"(no stack recorded)":D.frames[D.loc[stack]];}

// ---------------------------------------------------------------- model of one device
function buildModel(di){
 var d=D.devices[di],A=d.allocs,n=A.start.length,E=d.entries,last=Math.max(0,E-1),i,k;
 var opKind=new Int8Array(E),opRec=new Int32Array(E),segDelta=new Float64Array(E);
 for(k=0;k<n;k++){if(A.start[k]>=0){opKind[A.start[k]]=1;opRec[A.start[k]]=k;}
  if(A.end[k]>=0){opKind[A.end[k]]=2;opRec[A.end[k]]=k;}}
 var res0=0;d.segments.forEach(function(s){res0+=s.total;});
 d.segev.forEach(function(e){var dl=e[1]>0?e[3]:-e[3];res0-=dl;if(e[0]<E){opKind[e[0]]=3;segDelta[e[0]]+=dl;}});
 var act=0,P=1;for(k=0;k<n;k++)if(A.start[k]<0)act+=A.size[k];
 for(i=0;i<E;i++)if(opKind[i])P++;
 var X=new Float64Array(P),ACT=new Float64Array(P),RES=new Float64Array(P),res=res0,p=1,peak=0;
 X[0]=0;ACT[0]=act;RES[0]=res;
 for(i=0;i<E;i++){var o=opKind[i];if(!o)continue;
  if(o==1)act+=A.size[opRec[i]];else if(o==2)act-=A.size[opRec[i]];else res+=segDelta[i];
  X[p]=i;ACT[p]=act;RES[p]=res;if(act>ACT[peak])peak=p;p++;}
 var order=new Int32Array(n);for(k=0;k<n;k++)order[k]=k;
 order.sort(function(a,b){return A.size[b]-A.size[a]||a-b;});
 return {d:d,A:A,n:n,E:E,last:last,opKind:opKind,opRec:opRec,X:X,ACT:ACT,RES:RES,P:P,
  peakEntry:E?X[peak]:0,peakBytes:ACT[peak],order:order,layoutN:-1};
}

// Stack the N largest allocations bottom-up in allocation order (a band drops when one
// below it is freed); KEPT is the height of that stack at each point of the series.
function layout(m,N){
 var tl=performance.now(),A=m.A,n=m.n,kept=new Uint8Array(n),list=[],k,i;N=Math.min(N,n);
 for(k=0;k<N;k++)kept[m.order[k]]=1;
 for(k=0;k<n;k++)if(kept[k])list.push(k);
 var steps=new Array(n),stack=[],ksum=0,KEPT=new Float64Array(m.P),p=1;
 for(k=0;k<n;k++)if(kept[k]&&A.start[k]<0){steps[k]=[0,ksum];stack.push(k);ksum+=A.size[k];}
 KEPT[0]=ksum;
 for(i=0;i<m.E;i++){var o=m.opKind[i];if(!o)continue;k=m.opRec[i];
  if(o==1&&kept[k]){steps[k]=[i,ksum];stack.push(k);ksum+=A.size[k];}
  else if(o==2&&kept[k]){var pos=stack.lastIndexOf(k),sz=A.size[k];stack.splice(pos,1);ksum-=sz;
   for(var j=pos;j<stack.length;j++){var st=steps[stack[j]];st.push(i,st[st.length-1]-sz);}}
  KEPT[p++]=ksum;}
 m.kept=kept;m.list=list;m.steps=steps;m.KEPT=KEPT;m.layoutN=N;
 // levels of detail: groups of 4 points keep the highest active/reserved, the lowest stack
 var lv=[{x:m.X,act:m.ACT,res:m.RES,kept:KEPT}],cur=lv[0];
 while(cur.x.length>512){var L=Math.ceil(cur.x.length/4),nx=new Float64Array(L),na=new Float64Array(L),
  nr=new Float64Array(L),nk=new Float64Array(L);
  for(var g=0;g<L;g++){var a=g*4,b=Math.min(a+4,cur.x.length),ma=-Infinity,mr=-Infinity,mk2=Infinity;
   for(var q=a;q<b;q++){if(cur.act[q]>ma)ma=cur.act[q];if(cur.res[q]>mr)mr=cur.res[q];if(cur.kept[q]<mk2)mk2=cur.kept[q];}
   nx[g]=cur.x[a];na[g]=ma;nr[g]=mr;nk[g]=mk2;}
  cur={x:nx,act:na,res:nr,kept:nk};lv.push(cur);}
 m.levels=lv;S.perf.layout=performance.now()-tl;
 var ns=0;list.forEach(function(k){ns+=steps[k].length/2;});m.nsteps=ns;
}
function endOf(m,k){var e=m.A.end[k];return e<0?m.last+1:e;}
function bsearch(arr,v){var lo=0,hi=arr.length-1;if(hi<0||arr[0]>v)return -1;
 while(lo<hi){var mid=(lo+hi+1)>>1;if(arr[mid]<=v)lo=mid;else hi=mid-1;}return lo;}
function stepAt(st,x){var lo=0,hi=st.length/2-1;while(lo<hi){var mid=(lo+hi+1)>>1;if(st[2*mid]<=x)lo=mid;else hi=mid-1;}return lo;}
function bottomAt(st,x){return st[2*stepAt(st,x)+1];}

// ---------------------------------------------------------------- allocator state at an entry
function stateAt(m,t){
 var d=m.d,A=m.A,segs=d.segments.map(function(s){return {address:s.address,total:s.total,src:s};}),k,i;
 function cut(a,sz){var out=[];segs.forEach(function(s){var e=s.address+s.total;
  if(e<=a||s.address>=a+sz){out.push(s);return;}
  if(s.address<a)out.push({address:s.address,total:a-s.address,src:s.src});
  if(e>a+sz)out.push({address:a+sz,total:e-a-sz,src:s.src});});segs=out;}
 for(i=d.segev.length-1;i>=0;i--){var ev=d.segev[i];if(ev[0]<=t)break;
  if(ev[1]>0)cut(ev[2],ev[3]);else segs.push({address:ev[2],total:ev[3],src:null});}
 segs.sort(function(a,b){return a.address-b.address;});
 segs.forEach(function(s){s.blocks=[];});
 var starts=segs.map(function(s){return s.address;}),loose=[];
 for(k=0;k<m.n;k++){if(A.start[k]>t||(A.end[k]>=0&&A.end[k]<=t))continue;
  var b={address:A.addr[k],size:A.bsize[k],rec:k,state:(A.freq[k]>=0&&A.freq[k]<=t)?"active_pending_free":"active_allocated"};
  var j=bsearch(starts,b.address);
  if(j>=0&&b.address<segs[j].address+segs[j].total)segs[j].blocks.push(b);else loose.push(b);}
 var out={segments:[],allocated:0,pending:0,reserved:0,nblocks:0,loose:loose};
 segs.forEach(function(s){s.blocks.sort(function(a,b){return a.address-b.address;});
  var bl=[],off=s.address;
  s.blocks.forEach(function(b){if(b.address>off)bl.push({address:off,size:b.address-off,state:"inactive",rec:-1});
   bl.push(b);off=Math.max(off,b.address+b.size);
   if(b.state=="active_allocated")out.allocated+=b.size;else out.pending+=b.size;out.nblocks++;});
  if(off<s.address+s.total)bl.push({address:off,size:s.address+s.total-off,state:"inactive",rec:-1});
  out.reserved+=s.total;
  out.segments.push({address:s.address,total:s.total,blocks:bl,src:s.src});});
 loose.forEach(function(b){if(b.state=="active_allocated")out.allocated+=b.size;else out.pending+=b.size;out.nblocks++;});
 return out;
}

// ---------------------------------------------------------------- canvas timeline
var cv=$("tl"),ctx=cv.getContext("2d"),tip=$("tip");
var PAD={l:64,r:10,t:8,b:26},W=0,H=0,dpr=1;
function size(){var w=$("tlwrap").clientWidth;dpr=window.devicePixelRatio||1;
 H=Math.round(Math.min(330,Math.max(190,window.innerHeight*0.38)));W=w;
 cv.width=Math.round(w*dpr);cv.height=Math.round(H*dpr);cv.style.height=H+"px";}
function pw(){return Math.max(10,W-PAD.l-PAD.r);}
function XP(x){return PAD.l+(x-S.view[0])/(S.view[1]-S.view[0])*pw();}
function XE(px){return S.view[0]+(px-PAD.l)/pw()*(S.view[1]-S.view[0]);}
var ymax=1;
function YP(v){return H-PAD.b-(H-PAD.b-PAD.t)*v/ymax;}
function YB(py){return (H-PAD.b-py)/(H-PAD.b-PAD.t)*ymax;}
function level(m){var lv=m.levels,i0=Math.max(0,bsearch(m.X,S.view[0])),i1=Math.max(0,bsearch(m.X,S.view[1]));
 var cnt=i1-i0+1,li=0;while(li<lv.length-1&&cnt/Math.pow(4,li)>pw()*1.5)li++;return lv[li];}
function draw(){
 var t0=performance.now(),m=S.m;
 ctx.setTransform(dpr,0,0,dpr,0,0);ctx.clearRect(0,0,W,H);ctx.font="11px system-ui,sans-serif";
 if(!m.E){ctx.fillStyle="#666";ctx.fillText("No trace recorded for this device (call record_memory_history() before dump_snapshot()); the state below is the snapshot's.",PAD.l,H/2);S.perf.draws.push(performance.now()-t0);return;}
 var v0=S.view[0],v1=S.view[1],lv=level(m),a=Math.max(0,bsearch(lv.x,v0)),b=Math.max(0,bsearch(lv.x,v1)),j;
 ymax=1;for(j=a;j<=b;j++){if(lv.res[j]>ymax)ymax=lv.res[j];if(lv.act[j]>ymax)ymax=lv.act[j];}
 var u=1;while(ymax/u>=1024&&u<Math.pow(1024,5))u*=1024;var ys=nice(ymax/u/4)*u;ymax=Math.ceil(ymax/ys)*ys;
 ctx.strokeStyle="#e4e4e4";ctx.fillStyle="#444";ctx.textAlign="right";ctx.lineWidth=1;
 for(var yv=0;yv<=ymax+1e-9;yv+=ys){var py=Math.round(YP(yv))+.5;ctx.beginPath();ctx.moveTo(PAD.l,py);ctx.lineTo(W-PAD.r,py);ctx.stroke();ctx.fillText(tick(yv),PAD.l-4,py+4);}
 var xs=nice((v1-v0)/Math.max(2,pw()/90));ctx.textAlign="center";
 for(var xv=Math.ceil(v0/xs)*xs;xv<=v1;xv+=xs){var px=XP(xv);ctx.fillText(String(Math.round(xv)),px,H-PAD.b+14);ctx.fillRect(px,H-PAD.b,1,4);}
 ctx.fillText("trace entry",W-PAD.r-30,H-3);
 ctx.save();ctx.beginPath();ctx.rect(PAD.l,PAD.t-2,pw(),H-PAD.b-PAD.t+2);ctx.clip();
 var A=m.A,yscale=(H-PAD.b-PAD.t)/ymax,drawn=0;
 for(var li=0;li<m.list.length;li++){var k=m.list[li],s=Math.max(0,A.start[k]),e=endOf(m,k);
  if(e<v0||s>v1)continue;var h=A.size[k]*yscale;if(h<0.35&&!(S.sel&&S.sel.rec===k))continue;
  var st=m.steps[k],hh=Math.max(h,0.5),px0=null,py0=0;ctx.fillStyle=PAL[k%PAL.length];ctx.beginPath();
  // steps closer than a pixel are drawn as one rectangle (at the first one's height)
  for(var q=2*stepAt(st,v0);q<st.length;q+=2){if(st[q]>v1)break;var xa=XP(Math.max(st[q],v0));
   if(px0===null||xa-px0>=1){if(px0!==null)ctx.rect(px0,py0,Math.max(0.5,xa-px0),hh);px0=xa;py0=YP(st[q+1]+A.size[k]);}}
  if(px0!==null)ctx.rect(px0,py0,Math.max(0.5,XP(Math.min(e,v1+1))-px0),hh);
  ctx.fill();drawn++;}
 // smaller allocations: between the band stack and the active line
 ctx.fillStyle="rgba(59,117,175,.30)";ctx.beginPath();
 var s0=Math.max(0,a-1);ctx.moveTo(XP(lv.x[s0]),YP(lv.kept[s0]));
 for(j=s0;j<=b;j++){var nx=j+1<lv.x.length?lv.x[j+1]:m.last+1;ctx.lineTo(XP(lv.x[j]),YP(lv.act[j]));ctx.lineTo(XP(Math.min(nx,v1+1)),YP(lv.act[j]));if(nx>v1+1)break;}
 for(var jj=Math.min(j,b);jj>=s0;jj--){var nx2=jj+1<lv.x.length?lv.x[jj+1]:m.last+1;ctx.lineTo(XP(Math.min(nx2,v1+1)),YP(lv.kept[jj]));ctx.lineTo(XP(lv.x[jj]),YP(lv.kept[jj]));}
 ctx.closePath();ctx.fill();
 function line(arr,color,w){ctx.strokeStyle=color;ctx.lineWidth=w;ctx.beginPath();ctx.moveTo(XP(lv.x[s0]),YP(arr[s0]));
  for(var j2=s0+1;j2<=Math.min(b+1,lv.x.length-1);j2++){var px2=XP(lv.x[j2]);ctx.lineTo(px2,YP(arr[j2-1]));ctx.lineTo(px2,YP(arr[j2]));}
  ctx.lineTo(XP(Math.max(v1,m.last)+1),YP(arr[Math.min(b+1,lv.x.length-1)]));ctx.stroke();}
 line(lv.res,"#888",1.5);line(lv.act,"#3b75af",1.2);
 ctx.strokeStyle="#d62728";ctx.fillStyle="#d62728";ctx.lineWidth=1.5;
 m.d.ooms.forEach(function(o){if(o[0]<v0||o[0]>v1)return;var px3=Math.round(XP(o[0]))+.5;
  ctx.beginPath();ctx.moveTo(px3,PAD.t);ctx.lineTo(px3,H-PAD.b);ctx.stroke();
  ctx.beginPath();ctx.moveTo(px3-5,PAD.t);ctx.lineTo(px3+5,PAD.t);ctx.lineTo(px3,PAD.t+8);ctx.fill();});
 if(S.sel&&S.sel.rec!=null){var k2=S.sel.rec,st2=m.kept[k2]?m.steps[k2]:null;
  if(st2){ctx.strokeStyle="#000";ctx.lineWidth=2;for(var q2=0;q2<st2.length;q2+=2){var xe=q2+2<st2.length?st2[q2+2]:endOf(m,k2);
   ctx.strokeRect(XP(st2[q2]),YP(st2[q2+1]+A.size[k2]),XP(xe)-XP(st2[q2]),Math.max(1,A.size[k2]*yscale));}}}
 var pm=XP(S.moment);ctx.setLineDash([4,3]);ctx.strokeStyle="#111";ctx.lineWidth=1;ctx.beginPath();ctx.moveTo(pm,PAD.t);ctx.lineTo(pm,H-PAD.b);ctx.stroke();ctx.setLineDash([]);
 ctx.restore();
 ctx.strokeStyle="#888";ctx.lineWidth=1;ctx.beginPath();ctx.moveTo(PAD.l+.5,PAD.t);ctx.lineTo(PAD.l+.5,H-PAD.b+.5);ctx.lineTo(W-PAD.r,H-PAD.b+.5);ctx.stroke();
 S.drawnBands=drawn;S.perf.draws.push(performance.now()-t0);
}
var pending=false;function redraw(){if(!pending){pending=true;requestAnimationFrame(function(){pending=false;draw();});}}

function hit(px,py){var m=S.m;if(!m.E||px<PAD.l||px>W-PAD.r||py<PAD.t||py>H-PAD.b)return null;
 var x=XE(px),y=YB(py),A=m.A;
 for(var li=m.list.length-1;li>=0;li--){var k=m.list[li];if(Math.max(0,A.start[k])>x||endOf(m,k)<=x)continue;
  var bot=bottomAt(m.steps[k],x);if(y>=bot&&y<bot+A.size[k])return {rec:k};}
 var j=bsearch(m.X,x);if(j>=0&&y>=m.KEPT[j]&&y<m.ACT[j])return {small:m.n-m.list.length};
 return null;}

// ---------------------------------------------------------------- panes
function frameLines(stack){if(stack<0)return ["(no stack recorded: record_memory_history(stacks=\"python\") records one)"];
 var fr=D.stacks[stack],user=[],lib=[];fr.forEach(function(f){(D.user[f]?user:lib).push("  "+D.frames[f]);});
 var out=[];out.push("Your code ("+user.length+" frames, innermost first):");out=out.concat(user.length?user:["  (none)"]);
 if(lib.length){out.push("Libraries, runtime and native code ("+lib.length+" frames):");out=out.concat(lib);}return out;}
function recText(k){var m=S.m,A=m.A,s=A.start[k],e=A.end[k],f=A.freq[k];
 return fmt(A.size[k])+" at "+hex(A.addr[k])+", "+(s<0?"allocated before the trace began":"allocated at entry "+s)+", "+
  (e<0?(f>=0?"free requested at entry "+f+", still pending":"still allocated at the end"):
   (f>=0&&f!=e?"free requested at entry "+f+", freed at entry "+e:"freed at entry "+e));}
function showSel(){var m=S.m,lines;
 if(!S.sel)lines=["Click an allocation in the timeline or a block below."];
 else if(S.sel.rec!=null){lines=["Allocation: "+recText(S.sel.rec)].concat(frameLines(m.A.stack[S.sel.rec]));}
 else {var o=m.d.ooms[S.sel.oom];lines=["Out of memory at entry "+o[0]+": "+fmt(o[1])+" requested, "+fmt(o[2])+
  " free on the device"].concat(frameLines(o[3]));}
 $("stack").textContent=lines.join("\n");}
function select(sel){S.sel=sel;showSel();redraw();}

function renderState(){var m=S.m,t=S.moment,st=stateAt(m,t),box=$("segs");
 S.state=st;box.textContent="";
 $("statehead").textContent="Allocator state at entry "+t+(m.E&&t==m.peakEntry?" (peak)":"")+(t>=m.last?" (end: the snapshot)":"");
 $("statesum").textContent=st.segments.length+" segments, "+fmt(st.reserved)+" reserved, "+fmt(st.allocated)+" allocated in "+
  st.nblocks+" blocks"+(st.pending?", "+fmt(st.pending)+" freed but waiting on a stream":"")+
  (st.loose.length?"; "+st.loose.length+" blocks outside any known segment":"");
 var maxT=1;st.segments.forEach(function(s){if(s.total>maxT)maxT=s.total;});
 st.segments.slice(0,1000).forEach(function(s){
  var det=mk("details",null,"seg"),sum=mk("summary"),src=s.src||{};det.dataset.address=String(s.address);
  var al=0;s.blocks.forEach(function(b){if(b.state!="inactive")al+=b.size;});
  var lbl=mk("span",hex(s.address)+" "+fmt(s.total)+" "+(src.type||"")+(src.expandable?" expandable":"")+(src.stream?" stream "+src.stream:"")+" ("+fmt(al)+" used)","lbl");
  lbl.title=lbl.textContent+", "+s.blocks.length+" blocks";
  var bb=mk("div",null,"barbox"),bar=mk("div",null,"sbar");bar.style.width=Math.max(3,100*Math.sqrt(s.total/maxT))+"%";
  var run=null,off=0,pxw=600*Math.sqrt(s.total/maxT);
  function cell(r){var c=mk("div");c.style.left=(100*r.off/s.total)+"%";c.style.width=(100*r.size/s.total)+"%";
   c.style.background=STATE_COLOR[r.state]||"#c33";if(r.size/s.total*pxw>=4)c.style.borderRight="1px solid #fff";
   c.title=r.count>1?r.count+" "+STATE_NAME[r.state]+" blocks, "+fmt(r.size):STATE_NAME[r.state]+" "+fmt(r.size)+(r.rec>=0?"\n"+loc(S.m.A.stack[r.rec]):"");
   if(r.rec>=0&&r.count==1)c.addEventListener("click",function(ev){ev.preventDefault();select({rec:r.rec});});bar.appendChild(c);}
  s.blocks.forEach(function(b){var narrow=b.size/s.total*pxw<3;
   if(run&&run.narrow&&narrow&&run.state==b.state){run.size+=b.size;run.count++;}
   else{if(run)cell(run);run={off:b.address-s.address,size:b.size,state:b.state,count:1,rec:b.rec,narrow:narrow};}});
  if(run)cell(run);bb.appendChild(bar);sum.appendChild(lbl);sum.appendChild(bb);det.appendChild(sum);
  det.addEventListener("toggle",function(){if(!det.open||det.querySelector("table"))return;
   var tb=mk("table");tb.appendChild(row(["block","size","state","code location"],"th"));
   s.blocks.slice(0,2000).forEach(function(b){var r=row([hex(b.address),fmt(b.size),STATE_NAME[b.state],b.rec>=0?loc(S.m.A.stack[b.rec]):""]);
    if(b.rec>=0){r.style.cursor="pointer";r.addEventListener("click",function(){select({rec:b.rec});});}tb.appendChild(r);});
   det.appendChild(tb);});
  box.appendChild(det);});
 if(st.segments.length>1000)box.appendChild(mk("p","… and "+(st.segments.length-1000)+" more segments","muted"));
}
function row(cells,tag){var tr=mk("tr");cells.forEach(function(c){var td=mk(tag||"td",c);tr.appendChild(td);});return tr;}
function renderByLoc(){var m=S.m,t=S.moment,A=m.A,per={},tot=0,k;
 for(k=0;k<m.n;k++){if(A.start[k]>t||(A.end[k]>=0&&A.end[k]<=t))continue;var l=loc(A.stack[k]);
  var r=per[l]||(per[l]=[0,0]);r[0]+=A.size[k];r[1]++;tot+=A.size[k];}
 var rows=Object.keys(per).map(function(l){return [l,per[l][0],per[l][1]];}).sort(function(a,b){return b[1]-a[1]||(a[0]<b[0]?-1:1);});
 $("lochead").textContent="Memory by code location at entry "+t+(m.E&&t==m.peakEntry?" (peak)":"")+": "+fmt(tot)+" in "+rows.length+" locations";
 var tb=$("byloc");tb.textContent="";tb.appendChild(row(["code location (innermost frame of your code)","held","allocations","share"],"th"));
 rows.slice(0,40).forEach(function(r){tb.appendChild(row([r[0],fmt(r[1]),String(r[2]),(tot?100*r[1]/tot:0).toFixed(1)+"%"]));});
 if(rows.length>40)tb.appendChild(row(["… "+(rows.length-40)+" more locations","","",""]));}
function renderCompare(){if(!D.compare)return;var c=D.compare,rows=c.devices[String(S.m.d.device)]||[],ta=0,tb2=0;
 $("cmpsec").hidden=false;rows.forEach(function(r){ta+=r[1];tb2+=r[3];});
 $("cmphead").textContent="What grew from "+c.a+" to "+c.b+" on device "+S.m.d.device+" (memory allocated when each snapshot was taken, by code location): "+fmt(ta)+" → "+fmt(tb2);
 var tb=$("cmp");tb.textContent="";tb.appendChild(row(["code location",c.a,c.b,"growth"],"th"));
 rows.slice(0,60).forEach(function(r){var g=r[3]-r[1],tr=row([r[0],fmt(r[1])+" ("+r[2]+")",fmt(r[3])+" ("+r[4]+")",(g>0?"+":"")+fmt(g)]);
  tr.lastChild.className=g>0?"grow":g<0?"shrink":"";tb.appendChild(tr);});
 if(rows.length>60)tb.appendChild(row(["… "+(rows.length-60)+" more locations","","",""]));}

function setMoment(t,keepView){var m=S.m;t=Math.max(0,Math.min(m.last,Math.round(t)));S.moment=t;
 if(!keepView&&(t<S.view[0]||t>S.view[1])){var sp=S.view[1]-S.view[0];setView(t-sp/2,t+sp/2);}
 renderState();renderByLoc();redraw();}
function setView(a,b){var m=S.m,full=m.last+1,sp=Math.max(Math.min(8,full),Math.min(full,b-a));
 a=Math.max(0,Math.min(a,full-sp));S.view=[a,a+sp];redraw();}
function zoom(f,px){var c=px==null?(S.view[0]+S.view[1])/2:XE(px),a=S.view[0],b=S.view[1];
 setView(c-(c-a)*f,c+(b-c)*f);}

function setDevice(di){S.di=di;var m=models[di]||(models[di]=buildModel(di));S.m=m;
 if(m.layoutN!==Math.min(S.detail,m.n))layout(m,S.detail);
 S.view=[0,m.last+1];S.sel=null;showSel();
 var box=$("ooms");box.textContent="";
 m.d.ooms.forEach(function(o,j){if(j>=20)return;var b=mk("button","OOM "+(j+1)+" @"+o[0],"oom");b.title=fmt(o[1])+" requested, "+fmt(o[2])+" free";
  b.addEventListener("click",function(){setMoment(o[0]);select({oom:j});});box.appendChild(b);});
 if(m.d.ooms.length>20){var sel=mk("select");m.d.ooms.forEach(function(o,j){var op=mk("option","OOM "+(j+1)+" @"+o[0]);op.value=String(j);sel.appendChild(op);});
  sel.addEventListener("change",function(){var j=+sel.value;setMoment(m.d.ooms[j][0]);select({oom:j});});box.appendChild(sel);}
 $("peak").disabled=!m.E;
 caption();renderCompare();setMoment(m.E?m.peakEntry:m.last,true);}
function caption(){var m=S.m;
 $("caption").textContent="device "+m.d.device+": "+m.E+" trace entries, "+m.n+" allocations ("+Math.min(m.n,m.layoutN)+" largest drawn one by one), peak active "+
  fmt(m.peakBytes)+" at entry "+m.peakEntry+", peak reserved "+fmt(Math.max.apply(null,[0].concat(Array.prototype.slice.call(m.levels[m.levels.length-1].res))))+", "+m.d.ooms.length+(m.d.ooms.length==1?" OOM":" OOMs");}

// ---------------------------------------------------------------- controls
D.devices.forEach(function(d,i){var o=mk("option","device "+d.device+" ("+d.entries+" entries)");o.value=String(i);$("device").appendChild(o);});
DETAILS.forEach(function(n){var o=mk("option",n>=1e9?"all allocations":n+" largest");o.value=String(n);if(n==S.detail)o.selected=true;$("detail").appendChild(o);});
$("device").addEventListener("change",function(){setDevice(+this.value);});
$("detail").addEventListener("change",function(){S.detail=+this.value;layout(S.m,S.detail);caption();redraw();});
$("zin").addEventListener("click",function(){zoom(0.5);});
$("zout").addEventListener("click",function(){zoom(2);});
$("zfit").addEventListener("click",function(){setView(0,S.m.last+1);});
$("peak").addEventListener("click",function(){setMoment(S.m.peakEntry);});
$("end").addEventListener("click",function(){setMoment(S.m.last);});
$("copy").addEventListener("click",function(){var text=$("stack").textContent,btn=this;
 function done(){btn.textContent="Copied";setTimeout(function(){btn.textContent="Copy";},1200);}
 function fallback(){var r=document.createRange();r.selectNodeContents($("stack"));var s=window.getSelection();s.removeAllRanges();s.addRange(r);
  try{document.execCommand("copy");}catch(e){}done();}
 if(navigator.clipboard&&navigator.clipboard.writeText)navigator.clipboard.writeText(text).then(done,fallback);else fallback();});
var drag=null;
cv.addEventListener("wheel",function(ev){ev.preventDefault();var r=cv.getBoundingClientRect();
 if(ev.shiftKey||Math.abs(ev.deltaX)>Math.abs(ev.deltaY)){var sp=S.view[1]-S.view[0];setView(S.view[0]+(ev.deltaX||ev.deltaY)/pw()*sp,S.view[1]+(ev.deltaX||ev.deltaY)/pw()*sp);return;}
 zoom(Math.exp(Math.max(-3,Math.min(3,ev.deltaY*0.002))),ev.clientX-r.left);},{passive:false});
cv.addEventListener("pointerdown",function(ev){var r=cv.getBoundingClientRect();drag={x:ev.clientX,y:ev.clientY,v:S.view.slice(),moved:false,r:r};
 if(cv.setPointerCapture)try{cv.setPointerCapture(ev.pointerId);}catch(e){}});
cv.addEventListener("pointermove",function(ev){var r=cv.getBoundingClientRect();
 if(drag){var dx=ev.clientX-drag.x;if(Math.abs(dx)>3||Math.abs(ev.clientY-drag.y)>3)drag.moved=true;
  if(drag.moved){var sp=drag.v[1]-drag.v[0];setView(drag.v[0]-dx/pw()*sp,drag.v[1]-dx/pw()*sp);tip.style.display="none";}return;}
 var h=hit(ev.clientX-r.left,ev.clientY-r.top);
 if(!h){tip.style.display="none";return;}
 var A=S.m.A;tip.textContent=h.rec!=null?recText(h.rec)+"\n"+loc(A.stack[h.rec])+"\n(click for the full stack)":h.small+" smaller allocations (raise Detail to draw them one by one)";
 tip.style.display="block";var x=ev.clientX-r.left+12;if(x+tip.offsetWidth>W)x=Math.max(0,ev.clientX-r.left-tip.offsetWidth-12);
 tip.style.left=x+"px";tip.style.top=Math.max(0,ev.clientY-r.top-tip.offsetHeight-8)+"px";});
cv.addEventListener("pointerleave",function(){tip.style.display="none";});
cv.addEventListener("pointerup",function(ev){var d=drag;drag=null;if(!d||d.moved)return;var r=cv.getBoundingClientRect(),px=ev.clientX-r.left,py=ev.clientY-r.top;
 if(px<PAD.l||px>W-PAD.r)return;var h=hit(px,py);setMoment(XE(px),true);if(h&&h.rec!=null)select({rec:h.rec});});
cv.addEventListener("keydown",function(ev){var sp=S.view[1]-S.view[0];
 if(ev.key=="+"||ev.key=="=")zoom(0.5);else if(ev.key=="-")zoom(2);else if(ev.key=="0")setView(0,S.m.last+1);
 else if(ev.key=="ArrowLeft")setView(S.view[0]-sp/4,S.view[1]-sp/4);else if(ev.key=="ArrowRight")setView(S.view[0]+sp/4,S.view[1]+sp/4);else return;ev.preventDefault();});
var rt=null;window.addEventListener("resize",function(){clearTimeout(rt);rt=setTimeout(function(){size();draw();},60);});
$("segsum").textContent=D.segsum;
window.__viz={S:S,setView:setView,zoom:zoom,setMoment:setMoment,setDevice:setDevice,stateAt:function(t){return stateAt(S.m,t);},
 draw:draw,XP:function(x){return XP(x);},YP:function(y){return YP(y);}};
if(!D.devices.length){$("caption").textContent="The snapshot has no devices.";return;}
size();setDevice(0);draw();
S.perf.first=performance.now();
})();
</script></body></html>
"""
