/* stepscope HTML report. Vanilla JS, no network, no eval, no HTML parsing: every string that comes
 * from the trace is rendered with textContent, an attribute value, or canvas fillText.
 *
 * Sections of this file:
 *   1. utilities (DOM builder, formatting)          5. timeline (canvas, LOD, interaction)
 *   2. data (JSON + binary timeline decode)          6. tables and the drill-down sections
 *   3. charts (SVG stacked bars, line charts)        7. boot
 *   4. overview and findings
 */
'use strict';
(function () {

// ============================================================================================
// 1. utilities
// ============================================================================================
const SVGNS = 'http://www.w3.org/2000/svg';

/** h('div', {class: 'x', text: 'y', onclick: fn}, child...) - never parses HTML. */
function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  for (const c of children) append(e, c);
  return e;
}
function s(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  setAttrs(e, attrs);
  for (const c of children) append(e, c);
  return e;
}
function setAttrs(e, attrs) {
  if (!attrs) return;
  for (const k of Object.keys(attrs)) {
    const v = attrs[k];
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = String(v);
    else if (k === 'class') e.setAttribute('class', v);
    else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else if (k === 'style' && typeof v === 'object') Object.assign(e.style, v);
    else e.setAttribute(k, String(v));
  }
}
function append(e, ...cs) {
  for (const c of cs) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) { append(e, ...c); continue; }
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}
function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
function body(id) { return document.querySelector('#' + id + ' > .body'); }

function num(x, d) { return x === null || x === undefined || !isFinite(x) ? '–' : Number(x).toFixed(d); }
function fmtUs(us) {
  if (us === null || us === undefined || !isFinite(us)) return '–';
  const a = Math.abs(us);
  if (a < 1) return (us * 1000).toFixed(0) + ' ns';
  if (a < 1000) return us.toFixed(a < 10 ? 2 : 1) + ' µs';
  if (a < 1e6) return (us / 1000).toFixed(a < 1e4 ? 3 : 2) + ' ms';
  return (us / 1e6).toFixed(3) + ' s';
}
function fmtMs(ms) { return ms === null || ms === undefined ? '–' : fmtUs(ms * 1000); }
function fmtNs(ns) { return ns === null || ns === undefined ? '–' : fmtUs(ns / 1000); }
function fmtBytes(b) {
  if (b === null || b === undefined || !isFinite(b)) return '–';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0, v = Math.abs(b);
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return (b < 0 ? '-' : '') + (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + u[i];
}
function pct(x, d) { return x === null || x === undefined || !isFinite(x) ? '–' : (100 * x).toFixed(d === undefined ? 0 : d) + '%'; }
function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }
function lowerBound(arr, x, lo, hi) { while (lo < hi) { const m = (lo + hi) >>> 1; if (arr[m] < x) lo = m + 1; else hi = m; } return lo; }
function upperBound(arr, x, lo, hi) { while (lo < hi) { const m = (lo + hi) >>> 1; if (arr[m] <= x) lo = m + 1; else hi = m; } return lo; }
function niceStep(x) {
  const p = Math.pow(10, Math.floor(Math.log10(x))), f = x / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

const CATS = ['compute', 'communication', 'copies', 'input_wait', 'sync', 'launch', 'host', 'idle'];
const CAT_LABEL = {
  compute: 'GPU compute', communication: 'exposed comm', copies: 'exposed copies', input_wait: 'input wait',
  sync: 'sync', launch: 'launch', host: 'host work', idle: 'idle (unattributed)',
};
const CAT_HELP = {
  compute: 'a non-communication kernel is running on a GPU of the rank',
  communication: 'only collective kernels run: communication not hidden behind compute',
  copies: 'only memcpy/memset run: copies not hidden behind compute',
  input_wait: 'GPU idle while the host waits for the next batch',
  sync: 'GPU idle while a host thread is blocked in a sync or blocking copy',
  launch: 'GPU idle while the host is launching kernels (launch calls and their ops; a run ' +
    'without recorded ops: also waits of at most 100 µs for the next launch)',
  host: 'GPU idle while the host runs other framework ops / Python (a run without recorded ' +
    'ops: the rest of the GPU idle time, Python the capture did not record)',
  idle: 'GPU idle and nothing known on the host',
};
function catColor(c) { return cssVar('--c-' + c); }

// shared tooltip
const tip = h('div', {class: 'tip', id: 'tip', role: 'tooltip'});
function showTip(ev, lines) {
  clear(tip);
  lines.forEach((l, i) => append(tip, i === 0 ? h('b', {text: l}) : h('div', {text: l})));
  tip.style.display = 'block';
  const pad = 14, r = tip.getBoundingClientRect();
  let x = ev.clientX + pad, y = ev.clientY + pad;
  if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - pad;
  if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - pad;
  tip.style.left = Math.max(4, x) + 'px';
  tip.style.top = Math.max(4, y) + 'px';
}
function hideTip() { tip.style.display = 'none'; }

// ============================================================================================
// 2. data
// ============================================================================================
const SCRIPT_START = performance.now();
const DATA = JSON.parse(document.getElementById('stepscope-data').textContent);
const R = DATA.report, U = DATA.ui, TM = DATA.timeline;
// each rank's clock offset applied on the timeline's shared axis (model/clocks.py), and how
// many rank groups start open (the others fold to their header row: a page of 64 ranks opens
// with 8 groups drawn; click a rank's header to open or fold it)
const CLOCK = (TM && TM.clock) || {reason: '', offsets: []};
const CLOCK_US = Object.fromEntries((CLOCK.offsets || []).map(o => [o.rank, o.offset_us]));
const OPEN_RANKS = 8;
function fmtOffset(us) { return (us >= 0 ? '+' : '−') + fmtMs(Math.abs(us) / 1e3); }
function clockText() {
  const offs = CLOCK.offsets || [];
  if (!offs.length) return '';
  const shown = offs.slice(0, 4).map(o => 'rank ' + o.rank + ' ' + fmtOffset(o.offset_us));
  const more = offs.length > 4 ? ` and ${offs.length - 4} more` : '';
  return 'clocks aligned: ' + shown.join(', ') + more;
}
const RANKS = R.run.ranks.map(r => r.rank);
const MULTI = RANKS.length > 1;
const ESC = 0xFFFFFFFF;
const CTORS = {uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, float64: Float64Array, int32: Int32Array};

function base64Bytes(b64) {
  if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(b64);
  const bin = atob(b64), n = bin.length, out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
}

async function inflate(bytes) {
  if (TM.encoding !== 'zlib') return bytes.buffer;
  if (typeof DecompressionStream !== 'function') throw new Error('this browser cannot decompress the timeline (no DecompressionStream); use a current Chrome, Edge, Firefox or Safari');
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
  return await new Response(stream).arrayBuffer();
}

/** The timeline's events as typed arrays (see timeline_data.py for the layout). */
class Events {
  constructor(meta, buf) {
    const A = {};
    for (const name of Object.keys(meta.arrays)) {
      const [dtype, off, n] = meta.arrays[name];
      A[name] = new CTORS[dtype](buf, off, n);
    }
    this.meta = meta;
    this.strings = meta.strings;
    const n = this.n = meta.events;
    this.kind = A.kind; this.name = A.name;
    this.laneOff = A.lane_off;
    this.nLanes = Math.max(0, A.lane_off.length - 1);
    this.start = new Float64Array(n); this.dur = new Float64Array(n);
    this.row = new Uint32Array(n); this.color = new Uint8Array(n);
    this.laneMaxDur = new Float64Array(this.nLanes);
    this.laneTrack = new Int32Array(this.nLanes).fill(-1);
    this.extra = A;
    this.kinds = meta.kinds;
    this.K = {}; meta.kinds.forEach((k, i) => { this.K[k] = i; });
    const dt = A.dt, du = A.dur, bigDt = A.big_dt, bigDur = A.big_dur;
    let bi = 0, bj = 0;
    const counts = new Uint32Array(meta.kinds.length);
    for (let l = 0; l < this.nLanes; l++) {
      let prev = 0, maxd = 0;
      for (let i = this.laneOff[l], e = this.laneOff[l + 1]; i < e; i++) {
        let d = dt[i]; if (d === ESC) d = bigDt[bi++];
        prev += d;
        this.start[i] = prev / 1000;
        let x = du[i]; if (x === ESC) x = bigDur[bj++];
        const us = x / 1000;
        this.dur[i] = us; if (us > maxd) maxd = us;
        this.row[i] = counts[this.kind[i]]++;
      }
      this.laneMaxDur[l] = maxd;
    }
    this.endUs = Math.max(meta.end_us, 1);
    this.tracks = meta.tracks;
    this.tracks.forEach((t, ti) => { for (let l = t.lane0; l < t.lane0 + t.lanes; l++) this.laneTrack[l] = ti; });
    this.trackEvents = this.tracks.map(t => t.lanes ? this.laneOff[t.lane0 + t.lanes] - this.laneOff[t.lane0] : 0);
    this.classes = meta.kernel_classes;
    this.cfgCols = {}; meta.kernel_configs.columns.forEach((c, i) => { this.cfgCols[c] = i; });
    this.palette = makePalette();
    this.assignColors();
    this.nbins = 4096;
    this.binUs = this.endUs / this.nbins;
    this.binCache = new Map();
    this.corrMap = null;
  }
  str(i) { return this.strings[this.name[i]]; }
  kindOf(i) { return this.kinds[this.kind[i]]; }
  end(i) { return this.start[i] + this.dur[i]; }
  laneOf(i) { return upperBound(this.laneOff, i, 0, this.laneOff.length) - 1; }
  trackOf(i) { return this.tracks[this.laneTrack[this.laneOf(i)]]; }
  kernelClass(i) { return this.classes[String(this.name[i])] || {category: 'other'}; }
  assignColors() {
    const P = this.palette.index, K = this.K, A = this.extra;
    const catIdx = {}, nameCat = new Map();
    for (const k of Object.keys(P)) if (k.startsWith('k:')) catIdx[k.slice(2)] = P[k];
    const copyIdx = this.meta.copy_kinds.map(c => P['c:' + c] !== undefined ? P['c:' + c] : P['c:unknown']);
    const apiIdx = this.meta.api_kinds.map(c => P['a:' + c] !== undefined ? P['a:' + c] : P['a:other']);
    const byKind = this.kinds.map(k => P[k] !== undefined ? P[k] : P.other);
    for (let i = 0; i < this.n; i++) {
      const k = this.kind[i];
      let c;
      if (k === K.kernel) {
        const nm = this.name[i];
        c = nameCat.get(nm);
        if (c === undefined) {
          const cl = this.classes[String(nm)];
          const cat = cl ? cl.category : 'other';
          c = catIdx[cat] !== undefined ? catIdx[cat] : catIdx.other;
          nameCat.set(nm, c);
        }
      } else if (k === K.memcpy) c = copyIdx[A.c_kind[this.row[i]]];
      else if (k === K.api) c = apiIdx[A.a_kind[this.row[i]]];
      else if (k === K.step) c = this.str(i).endsWith('(not steady)') ? P['step:warm'] : (this.row[i] % 2 ? P['step:b'] : P.step);
      else c = byKind[k];
      this.color[i] = c;
    }
  }
  /** Busy µs and dominant colour per bin of a lane, for drawing when zoomed out (cached). */
  bins(l) {
    let b = this.binCache.get(l);
    if (b) return b;
    const nb = this.nbins, w = this.binUs, busy = new Float32Array(nb), best = new Float32Array(nb), col = new Uint8Array(nb);
    for (let i = this.laneOff[l], e = this.laneOff[l + 1]; i < e; i++) {
      const s0 = this.start[i], s1 = s0 + this.dur[i];
      const b0 = Math.min(nb - 1, Math.floor(s0 / w)), b1 = Math.min(nb - 1, Math.floor(s1 / w));
      for (let k = b0; k <= b1; k++) {
        const ov = Math.min(s1, (k + 1) * w) - Math.max(s0, k * w);
        const o = ov > 0 ? ov : 1e-9;
        busy[k] += o;
        if (o > best[k]) { best[k] = o; col[k] = this.color[i]; }
      }
    }
    b = {busy, col};
    this.binCache.set(l, b);
    return b;
  }
  /** Events sharing a correlation id with event i on the same rank (API call <-> GPU work). */
  correlated(i) {
    const key = this.corrKey(i);
    if (!key) return [];
    if (!this.corrMap) {
      this.corrMap = new Map();
      for (let j = 0; j < this.n; j++) {
        const kk = this.corrKey(j);
        if (!kk) continue;
        const list = this.corrMap.get(kk);
        if (list) list.push(j); else this.corrMap.set(kk, [j]);
      }
    }
    return (this.corrMap.get(key) || []).filter(j => j !== i);
  }
  corr(i) {
    const k = this.kind[i], K = this.K, A = this.extra, r = this.row[i];
    if (k === K.kernel) return A.k_corr[r];
    if (k === K.memcpy) return A.c_corr[r];
    if (k === K.memset) return A.m_corr[r];
    if (k === K.api) return A.a_corr[r];
    return 0;
  }
  corrKey(i) {
    const c = this.corr(i);
    if (!c) return 0;
    return this.tracks[this.laneTrack[this.laneOf(i)]].rank * 4294967296 + c;
  }
  /** Event in lane l covering time t (or null). */
  at(l, t, tol) {
    const o0 = this.laneOff[l], o1 = this.laneOff[l + 1];
    let i = upperBound(this.start, t + tol, o0, o1) - 1, best = -1, bestD = Infinity;
    const lim = t - this.laneMaxDur[l] - tol;
    for (let n = 0; i >= o0 && n < 256 && this.start[i] >= lim; i--, n++) {
      const a = this.start[i], b = a + this.dur[i];
      const d = t < a ? a - t : t > b ? t - b : 0;
      if (d <= tol && d < bestD) { best = i; bestD = d; if (d === 0) break; }
    }
    return best < 0 ? null : best;
  }
  /** Names of the events enclosing event i on its track (outermost first). */
  ancestors(i) {
    const l = this.laneOf(i), tr = this.tracks[this.laneTrack[l]], out = [];
    const t = this.start[i] + 1e-6;
    for (let k = tr.lane0; k < l; k++) {
      const j = this.at(k, t, 0);
      if (j !== null) out.push(j);
    }
    return out;
  }
}

function makePalette() {
  const dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
  const entries = [
    ['k:gemm', '#3b6fd8', 'GEMM'], ['k:conv', '#2f5fb8', 'conv'], ['k:attention', '#5b4fd6', 'attention'],
    ['k:elementwise', '#1f9e8f', 'elementwise'], ['k:reduction', '#3aa655', 'reduction'],
    ['k:softmax', '#58b368', 'softmax'], ['k:normalization', '#6fae3c', 'normalization'],
    ['k:optimizer', '#8aa62a', 'optimizer'], ['k:embedding', '#8f7bd0', 'embedding'],
    ['k:sort', '#b07cc6', 'sort'], ['k:memory', '#9b8f5e', 'memory kernel'],
    ['k:communication', '#c23fb5', 'communication'], ['k:other', '#7c8aa0', 'other kernel'],
    ['c:HtoD', '#e08a00', 'copy HtoD'], ['c:DtoH', '#e0601a', 'copy DtoH'], ['c:DtoD', '#c9a400', 'copy DtoD'],
    ['c:PtoP', '#d0457f', 'copy PtoP'], ['c:HtoH', '#a07a3a', 'copy HtoH'], ['c:unknown', '#a08a6a', 'copy'],
    ['memset', '#9c7b28', 'memset'],
    ['a:launch', '#5b93e6', 'launch call'], ['a:graph_launch', '#4a7fd0', 'graph launch'],
    ['a:sync', '#d63a3a', 'sync call'], ['a:memcpy', '#dd8d1a', 'copy call'], ['a:memset', '#b88c2c', 'memset call'],
    ['a:alloc', '#8d6fc9', 'alloc/free'], ['a:free', '#8d6fc9', null], ['a:event', '#7f8da3', 'event/stream call'],
    ['a:stream', '#7f8da3', null], ['a:other', '#8e99a8', 'other API'],
    ['op', dark ? '#7b64c8' : '#9a86e0', 'framework op'], ['python', dark ? '#4f4a70' : '#cbc3ea', 'Python frame'],
    ['annotation', '#2a9fd6', 'annotation'], ['nvtx', '#16a37f', 'NVTX range'],
    ['gpu_annotation', '#6f8196', 'GPU annotation'], ['profiler_step', '#5f6f82', 'profiler step'],
    ['input_wait', '#d9342b', 'input wait'], ['step', '#23867a', 'step'], ['step:b', '#2fa595', null],
    ['step:warm', '#9aa3ad', 'step (not steady)'], ['gpu_sync', '#cc4444', 'GPU sync'],
    ['stack', dark ? '#3f6b52' : '#9fcfb0', 'sampled stack'], ['other', '#8e99a8', null],
  ];
  const index = {}, colors = [], text = [], labels = [];
  entries.forEach(([k, c, label], i) => {
    index[k] = i; colors.push(c); labels.push(label);
    const r = parseInt(c.slice(1, 3), 16), g = parseInt(c.slice(3, 5), 16), b = parseInt(c.slice(5, 7), 16);
    text.push(0.299 * r + 0.587 * g + 0.114 * b > 150 ? '#111' : '#fff');
  });
  return {index, colors, text, labels, keys: entries.map(e => e[0])};
}

// ============================================================================================
// 3. charts (SVG)
// ============================================================================================
function yTicks(max, n) {
  const step = niceStep(max / (n || 4) || 1);
  const out = [0];
  while (out[out.length - 1] < max * 0.9999) out.push(out.length * step);
  return out;
}

/** Stacked bars: items [{label, parts: {cat: value}, dim, onclick, tip: []}]. */
function stackedBars(container, items, opts) {
  const W = Math.max(320, container.clientWidth || 900), H = opts.height || 230;
  const m = {l: 54, r: 8, t: 10, b: 34};
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  const totals = items.map(it => CATS.reduce((a, c) => a + (it.parts[c] || 0), 0));
  const max = Math.max(1e-9, ...totals);
  const ticks = yTicks(max, 4), top = ticks[ticks.length - 1] || max;
  const svg = s('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.aria || 'chart'});
  for (const v of ticks) {
    const y = m.t + ph - v / top * ph;
    svg.appendChild(s('line', {x1: m.l, x2: W - m.r, y1: y, y2: y, class: v ? 'grid' : 'axis'}));
    svg.appendChild(s('text', {x: m.l - 6, y: y + 4, 'text-anchor': 'end', text: opts.fmtY ? opts.fmtY(v) : num(v, 1)}));
  }
  const n = items.length, slot = pw / Math.max(n, 1), bw = Math.max(1, Math.min(48, slot * 0.78));
  const every = Math.max(1, Math.ceil(n / Math.max(1, pw / 40)));
  items.forEach((it, i) => {
    const x = m.l + i * slot + (slot - bw) / 2;
    let y = m.t + ph;
    const g = s('g', {class: 'bar', opacity: it.dim ? 0.45 : 1, 'data-index': i});
    for (const c of CATS) {
      const v = it.parts[c] || 0;
      if (v <= 0) continue;
      const hh = v / top * ph;
      y -= hh;
      g.appendChild(s('rect', {x, y, width: bw, height: Math.max(hh, 0.5), fill: catColor(c)}));
    }
    const hit = s('rect', {x: m.l + i * slot, y: m.t, width: slot, height: ph, fill: 'transparent', class: 'hit', 'data-index': i});
    hit.addEventListener('mousemove', e => showTip(e, it.tip));
    hit.addEventListener('mouseleave', hideTip);
    if (it.onclick) { hit.style.cursor = 'pointer'; hit.addEventListener('click', it.onclick); }
    svg.appendChild(g); svg.appendChild(hit);
    if (i % every === 0) svg.appendChild(s('text', {x: x + bw / 2, y: H - m.b + 14, 'text-anchor': 'middle', text: it.label}));
  });
  if (opts.xlabel) svg.appendChild(s('text', {x: m.l + pw / 2, y: H - 4, 'text-anchor': 'middle', text: opts.xlabel}));
  clear(container).appendChild(svg);
  return svg;
}

/** Line chart: t (µs), series [{name, values, color, step}], hover shows values. */
function lineChart(container, t, series, opts) {
  const W = Math.max(300, container.clientWidth || 600), H = opts.height || 170;
  const m = {l: 64, r: 10, t: 10, b: 26};
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  const t0 = opts.t0 !== undefined ? opts.t0 : (t.length ? t[0] : 0);
  const t1 = opts.t1 !== undefined ? opts.t1 : (t.length ? t[t.length - 1] : 1);
  let max = opts.max || 0;
  for (const sr of series) for (const v of sr.values) if (v > max) max = v;
  const ticks = yTicks(max || 1, 3), top = ticks[ticks.length - 1] || 1;
  const X = v => m.l + (v - t0) / Math.max(t1 - t0, 1e-9) * pw, Y = v => m.t + ph - v / top * ph;
  const svg = s('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.aria || 'chart'});
  for (const v of ticks) {
    svg.appendChild(s('line', {x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: v ? 'grid' : 'axis'}));
    svg.appendChild(s('text', {x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end', text: opts.fmtY(v)}));
  }
  const xt = niceStep((t1 - t0) / 5 || 1);
  for (let v = Math.ceil(t0 / xt) * xt; v <= t1; v += xt) svg.appendChild(s('text', {x: X(v), y: H - 8, 'text-anchor': 'middle', text: fmtUs(v)}));
  for (const sr of series) {
    let d = '';
    for (let i = 0; i < t.length; i++) {
      const x = X(t[i]).toFixed(1), y = Y(sr.values[i]).toFixed(1);
      if (i === 0) d += `M${x},${y}`;
      else d += sr.step ? `H${x}V${y}` : `L${x},${y}`;
    }
    if (t.length) svg.appendChild(s('path', {d, fill: 'none', stroke: sr.color, 'stroke-width': 1.5}));
  }
  const rule = s('line', {y1: m.t, y2: m.t + ph, stroke: 'currentColor', opacity: 0, 'stroke-width': 1});
  svg.appendChild(rule);
  const hit = s('rect', {x: m.l, y: m.t, width: pw, height: ph, fill: 'transparent'});
  hit.addEventListener('mousemove', e => {
    const r = svg.getBoundingClientRect(), tv = t0 + (e.clientX - r.left - m.l) / pw * (t1 - t0);
    let i = upperBound(t, tv, 0, t.length) - 1; if (i < 0) i = 0;
    rule.setAttribute('x1', X(t[i])); rule.setAttribute('x2', X(t[i])); rule.setAttribute('opacity', 0.4);
    showTip(e, [fmtUs(t[i])].concat(series.map(sr => sr.name + ': ' + opts.fmtY(sr.values[i]))));
  });
  hit.addEventListener('mouseleave', () => { hideTip(); rule.setAttribute('opacity', 0); });
  if (opts.onclick) {
    hit.style.cursor = 'pointer';
    hit.addEventListener('click', e => {
      const r = svg.getBoundingClientRect();
      opts.onclick(t0 + (e.clientX - r.left - m.l) / pw * (t1 - t0));
    });
  }
  svg.appendChild(hit);
  clear(container).appendChild(svg);
}

// a run without GPU records: every category is host time (analysis/breakdown.py)
const HOST_CAT = {
  input_wait: ['input wait', 'the host waits for the next batch'],
  sync: ['sync', 'a host thread is blocked in a sync or blocking copy'],
  launch: ['launch', 'the host is in a launch call or the op issuing it'],
  host: ['host ops', 'the host runs framework ops / Python functions / annotations'],
  idle: ['host, nothing recorded', 'host time with no recorded event: on a CPU-only program, typically the model\'s own compute'],
};

function breakdownBar(parts, hostOnly) {
  const label = c => hostOnly && HOST_CAT[c] ? HOST_CAT[c][0] : CAT_LABEL[c];
  const help = c => hostOnly && HOST_CAT[c] ? HOST_CAT[c][1] : CAT_HELP[c];
  const total = CATS.reduce((a, c) => a + (parts[c] || 0), 0);
  const bar = h('div', {class: 'bar', role: 'img', 'aria-label': 'average step-time breakdown'});
  const legend = h('div', {class: 'legend'});
  for (const c of CATS) {
    const v = parts[c] || 0;
    if (v <= 0 || total <= 0) continue;
    const seg = h('div', {style: {width: (100 * v / total) + '%', background: catColor(c)}});
    seg.addEventListener('mousemove', e => showTip(e, [label(c), fmtMs(v) + ' per step (' + pct(v / total, 1) + ')', help(c)]));
    seg.addEventListener('mouseleave', hideTip);
    bar.appendChild(seg);
    legend.appendChild(h('span', {title: help(c)}, h('span', {class: 'sw', style: {background: catColor(c)}}),
      label(c) + ' ', h('b', {text: fmtMs(v)}), ' (' + pct(v / total, 0) + ')'));
  }
  return [bar, legend];
}

// ============================================================================================
// 4. overview and findings
// ============================================================================================
let TIMELINE = null;  // set at boot; links from other sections open it

function openTimeline(startUs, endUs, opts) {
  const sec = document.getElementById('timeline');
  if (sec) sec.scrollIntoView({block: 'start'});
  if (TIMELINE) TIMELINE.showRange(startUs, endUs, opts || {});
}

function card(k, v, sub, extra, title) {
  return h('div', {class: 'card', title: title || null}, h('div', {class: 'k', text: k}), h('div', {class: v.length > 18 ? 'v long' : 'v', text: v}),
    sub ? h('div', {class: 's', text: sub}) : null, extra || null);
}

function deviceSummary() {
  const devs = new Map();
  for (const d of R.run.devices) {
    const key = [d.name || 'GPU', d.compute_major, d.compute_minor, d.sm_count, d.total_memory].join('|');
    const e = devs.get(key) || {d, n: 0};
    e.n++; devs.set(key, e);
  }
  if (!devs.size) return ['no GPU properties in the trace', ''];
  const parts = [...devs.values()].map(({d, n}) => (n > 1 ? n + '× ' : '') + (d.name || 'GPU'));
  const d0 = [...devs.values()][0].d;
  const sub = [d0.compute_major !== null && d0.compute_major !== undefined ? `CC ${d0.compute_major}.${d0.compute_minor}` : null,
    d0.sm_count ? d0.sm_count + ' SMs' : null, d0.total_memory ? fmtBytes(d0.total_memory) : null,
    d0.nvlink_links ? `NVLink ${d0.nvlink_links} links` + (d0.nvlink_gbs ? ` ${Math.round(d0.nvlink_gbs)} GB/s` : '') : null,
    d0.pcie_gbs ? `PCIe ${Math.round(d0.pcie_gbs)} GB/s` : null].filter(Boolean).join(', ');
  // the host NUMA node of each GPU, when the run says (stepscope record)
  const numa = R.run.devices.filter(d => d.numa_node !== null && d.numa_node !== undefined)
    .map(d => (d.rank !== undefined && d.rank !== null ? `rank ${d.rank} ` : '') + `cuda:${d.device} node ${d.numa_node}`);
  return [parts.join(', '), numa.length ? sub + '; NUMA ' + [...new Set(numa)].join(', ') : sub];
}

function overheadText() {
  const o = U.overhead || {};
  const ranks = Object.keys(o).filter(k => /^rank\d+$/.test(k) && o[k] && typeof o[k] === 'object');
  if (ranks.length) {  // a captured run: what each process measured of itself
    const pick = key => ranks.map(k => o[k][key]).filter(x => typeof x === 'number');
    const why = ranks.map(k => o[k].step_time_ratio_after_unmeasurable).filter(x => typeof x === 'string' && x);
    if (why.length) {
      return ['not measurable', 'the capture\'s cost on this run: ' + why[0],
        'The window\'s median step is compared with the steps right after it; that only measures the capture when the program\'s steps are alike. ' +
        'The capture\'s cost measured side by side with torch.profiler is in docs/benchmarks.md.'];
    }
    // only the steps right after the window measure the capture: those before it are the
    // program's warm-up (hooks and samplers on), and a ratio under 1 is no cost at all
    const after = pick('step_time_ratio_in_window_vs_after');
    const shares = pick('sampler_threads_cpu_share');
    const samplers = shares.length ? 'sampler threads ' + pct(Math.max(...shares), 1) + ' of a core' : null;
    const bench = 'The capture\'s cost measured side by side with torch.profiler is in docs/benchmarks.md.';
    if (!after.length) {
      return ['not measured', ['fewer than 3 steps ran after the window to compare with', samplers].filter(Boolean).join('; '),
        'The capture\'s cost is the window\'s median step over the steps right after it; the steps before the window are warm-up steps and say nothing of it. ' + bench];
    }
    const worst = Math.max(...after);
    const worstRank = ranks.find(k => o[k].step_time_ratio_in_window_vs_after === worst);
    const ci = worstRank ? o[worstRank].step_time_ratio_after_ci90 : null;
    const x = 'x' + num(worst, 2) + (Array.isArray(ci) && ci.length === 2 ? ' (90% CI ' + num(ci[0], 2) + '–' + num(ci[1], 2) + ')' : '');
    const vs = 'step time in the window vs the steps right after it (capture off: samplers stopped, CUPTI detached)' + (ranks.length > 1 ? ' (worst rank)' : '');
    const v = worst >= 1 ? x : 'none measurable';
    const sub = [worst >= 1 ? vs : 'steps in the window were not slower than those right after it: ' + x, samplers].filter(Boolean).join('; ');
    return [v, sub, 'Measured on this run: the window\'s median step over the median of up to 10 steps after it. ' + bench];
  }
  const keys = Object.keys(o);
  if (keys.length) {
    const p = o.overhead_pct !== undefined ? o.overhead_pct : o.pct;
    const v = p !== undefined ? num(p, 1) + '%' : 'measured';
    return [v, keys.filter(k => typeof o[k] !== 'object').map(k => k + ': ' + o[k]).join(', ')];
  }
  const ht = R.host_trust || {};
  const step = R.summary.step_ms ? R.summary.step_ms.mean : 0;
  if (ht.note) return ['not measured', 'imported trace; the profiler\'s own host cost is estimated at ' + fmtMs(ht.est_inflation_ms) +
    ' per step' + (step ? ' (' + pct(ht.est_inflation_ms / step) + ')' : '') + ': host-side findings have ' + ht.confidence + ' confidence', ht.note];
  return ['not measured', 'imported trace: the profiler\'s own cost is not known; host-side findings assume it is small'];
}

function gpuBusyCard(sm) {
  // per rank over the devices it used, or pooled over ranks with each rank's figure: never a
  // sum over ranks divided by one rank's wall (analysis/summary.py)
  if (!sm.devices_used) {
    const notes = [...new Set(R.ranks.map(r => r.gpu_note).filter(Boolean))];
    return card('GPU busy', 'none recorded', notes[0] || 'no GPU activity in this run', null, notes.join('\n') || null);
  }
  const rs = R.ranks.filter(r => r.devices_used);
  if (R.ranks.length === 1) {
    const r = R.ranks[0];
    const on = r.devices_used > 1 ? ` × ${r.devices_used} GPUs` : '';
    return card('GPU busy', num(sm.gpu_busy_pct, 1) + '%', `${fmtMs(r.gpu_busy_in_steps_ms)} of ${fmtMs(r.wall_ms)}${on} of step time`);
  }
  const per = rs.map(r => 'rank ' + r.rank + ' ' + num(r.gpu_busy_pct, 1) + '%');
  const pcts = rs.map(r => r.gpu_busy_pct);
  const sub = per.length <= 4 ? per.join(' · ') : `ranks ${num(Math.min(...pcts), 1)}–${num(Math.max(...pcts), 1)}%`;
  return card('GPU busy', num(sm.gpu_busy_pct, 1) + '%', sub, null,
    `${fmtMs(sm.gpu_busy_in_steps_ms)} busy of ${fmtMs(sm.gpu_time_ms)} of GPU time in the steps, over ${R.ranks.length} ranks (step time × GPUs used, per rank).\n` + per.join('\n'));
}

function inputCard() {
  // the TF Profiler's input-pipeline tiers (analysis/input.py); nothing when no waits were recorded
  const v = R.input_pipeline;
  if (!v) return null;
  const tiers = `>${num(v.highly_above_pct, 0)}% highly, ${num(v.moderately_from_pct, 0)}–${num(v.highly_above_pct, 0)}% moderately input-bound`;
  return card('Input pipeline', v.text, num(v.input_bound_pct, 1) + '% of the step waiting for input' + (MULTI ? ' (rank ' + v.rank + ')' : ''), null, tiers);
}

function stepsCard(sm) {
  const detail = sm.step_detail || '';
  const how = detail.replace(/^\d+:?\s*/, '') || 'from ' + sm.step_source;
  return card('Steps', String(sm.steps), (sm.steps ? `${sm.steady_steps} steady · ` : '') + how, null, detail || null);
}

function renderOverview() {
  const el = clear(body('overview'));
  const sm = R.summary, st = sm.step_ms;
  const run = R.run;
  el.appendChild(h('div', {class: 'runline'},
    h('span', {text: U.title}), ' · ', run.source + (run.tool ? ' (' + run.tool + ')' : ''), ' · ',
    RANKS.length + ' rank' + (RANKS.length > 1 ? 's' : ''),
    run.ending && run.ending.text ? h('b', {class: 'warnnote', id: 'run-ending',
      text: ' · ' + (run.ending.cut_short ? 'PARTIAL: ' : '') + run.ending.text}) : (run.partial ? h('b', {class: 'warnnote', text: ' · PARTIAL run'}) : null),
    clockText() ? h('span', {id: 'clock-offsets', title: CLOCK.reason + '\n' + (CLOCK.offsets || []).map(o => 'rank ' + o.rank + ': ' + fmtOffset(o.offset_us) + ' added to its times').join('\n'), text: ' · ' + clockText()}) : null,
    ' · ', h('span', {class: 'mono', text: run.path})));
  const [dev, devSub] = deviceSummary();
  const prec = U.precision_ms || {};
  const precTotal = Object.values(prec).reduce((a, b) => a + b, 0);
  const precBar = h('div', {class: 'bar', style: {height: '10px', marginTop: '6px'}});
  const precColors = {fp32: '#d97706', tf32: '#0ea5e9', bf16: '#16a34a', fp16: '#22c55e', 'fp16/bf16': '#16a34a', fp8: '#7c3aed', int8: '#db2777', unknown: '#94a3b8'};
  const precParts = Object.entries(prec).sort((a, b) => b[1] - a[1]);
  for (const [p, v] of precParts) {
    const seg = h('div', {style: {width: (100 * v / (precTotal || 1)) + '%', background: precColors[p] || '#94a3b8'}});
    seg.addEventListener('mousemove', e => showTip(e, [p, fmtMs(v) + ' of matmul kernel time (' + pct(v / precTotal, 1) + ')']));
    seg.addEventListener('mouseleave', hideTip);
    precBar.appendChild(seg);
  }
  const [ovV, ovS, ovTitle] = overheadText();
  el.appendChild(h('div', {class: 'cards', id: 'cards'},
    card('Device', dev, devSub),
    stepsCard(sm),
    card('Step time (median)', st ? fmtMs(st.median) : '–', st ? `mean ${fmtMs(st.mean)} · p95 ${fmtMs(st.p95)} · cv ${num(st.cv, 2)}` : 'no steps'),
    gpuBusyCard(sm),
    card('Est. SM efficiency', pct(sm.est_sm_efficiency), 'duration-weighted min(1, blocks / SMs)' + (U.mean_occupancy !== null ? ' · mean theor. occupancy ' + pct(U.mean_occupancy) : '')),
    card('Tensor cores', pct(sm.tensor_core_share), `of ${fmtMs(sm.kernel_time_ms)} kernel time (${sm.kernels} kernels)`),
    card('Precision mix', precParts.length ? precParts.slice(0, 2).map(([p, v]) => p + ' ' + pct(v / precTotal)).join(' · ') : '–',
      precParts.length ? 'of GEMM / conv / attention time' : 'no matmul kernels', precParts.length ? precBar : null),
    card('Capture overhead', ovV, ovS, null, ovTitle),
    inputCard()));

  const hostOnly = sm.devices_used === 0;
  el.appendChild(h('h3', {text: 'Where a step\'s time goes (mean of steady steps)' + (hostOnly ? ': all host time, no GPU activity recorded' : '')}));
  el.appendChild(h('div', {}, ...breakdownBar(R.breakdown, hostOnly)));

  el.appendChild(h('h3', {text: 'Step time per step'}));
  const ctl = h('div', {class: 'tablebar'});
  const chart = h('div', {class: 'chart', id: 'step-chart'});
  let rank = RANKS[0];
  if (MULTI) {
    const sel = h('select', {'aria-label': 'rank'}, ...RANKS.map(r => h('option', {value: r, text: 'rank ' + r})));
    sel.addEventListener('change', () => { rank = Number(sel.value); draw(); });
    ctl.appendChild(h('label', {}, 'Rank ', sel));
  }
  ctl.appendChild(h('span', {class: 'note', text: 'Stacked by breakdown category; faded bars are steps left out of the steady-state means. Hover for numbers, click to open the step in the timeline.'}));
  el.appendChild(ctl);
  el.appendChild(chart);
  const lab = c => hostOnly && HOST_CAT[c] ? HOST_CAT[c][0] : CAT_LABEL[c];
  el.appendChild(h('div', {class: 'legend'}, ...CATS.map(c => h('span', {title: hostOnly && HOST_CAT[c] ? HOST_CAT[c][1] : CAT_HELP[c]}, h('span', {class: 'sw', style: {background: catColor(c)}}), lab(c)))));
  const draw = () => {
    const steps = U.steps.filter(x => x.rank === rank);
    if (!steps.length) { clear(chart).appendChild(h('p', {class: 'note', text: 'No steps were found in this run.'})); return; }
    stackedBars(chart, steps.map(x => ({
      label: String(x.number), parts: x.breakdown, dim: !x.steady,
      onclick: () => openTimeline(x.start_us, x.end_us, {rank: x.rank}),
      tip: ['Step ' + x.number + (x.steady ? '' : ' (not steady' + (x.note ? ': ' + x.note : '') + ')'),
        'wall ' + fmtMs(x.wall_ms) + (hostOnly ? ' · no GPU activity recorded' : ' · GPU busy ' + fmtMs(x.gpu_busy_ms))]
        .concat(CATS.filter(c => x.breakdown[c] > 0).map(c => lab(c) + ': ' + fmtMs(x.breakdown[c]) + ' (' + pct(x.breakdown[c] / x.wall_ms, 1) + ')')),
    })), {fmtY: v => num(v, v < 10 ? 1 : 0) + ' ms', xlabel: 'step', aria: 'per-step time breakdown'});
  };
  draw();
  window.addEventListener('resize', debounce(draw, 150));
}

function debounce(fn, ms) { let t = 0; return () => { clearTimeout(t); t = setTimeout(fn, ms); }; }

// step indexes as runs: "0-845" rather than 846 numbers; "3, 7, 10-12" where they are scattered
function stepRanges(steps) {
  const xs = steps.slice().sort((a, b) => a - b), out = [];
  for (let i = 0; i < xs.length;) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
    out.push(j > i + 1 ? xs[i] + '-' + xs[j] : (j === i + 1 ? xs[i] + ', ' + xs[j] : String(xs[i])));
    i = j + 1;
  }
  return out.length > 12 ? out.slice(0, 12).join(', ') + ', … (' + xs.length + ' steps)' : out.join(', ');
}
const FRAMEWORKS = [['pytorch', 'PyTorch'], ['tensorflow', 'TensorFlow'], ['jax', 'JAX'], ['cuda', 'CUDA']];
// the fix shown first: in the program's framework (run.frameworks), PyTorch where it does not say
const FW_TAB = {pytorch: 'pytorch', jax: 'jax', tensorflow: 'tensorflow', cupy: 'cuda', triton: 'cuda', numba: 'cuda'};
let preferredFw = FW_TAB[((R.run || {}).frameworks || [])[0]] || 'pytorch';

// remedies: each fix replayed on the step model; the plan replays them together (advisor/remedies.py)
function renderRemedies() {
  const el = clear(body('remedies'));
  const rs = R.remedies || [], plan = R.plan, sm = R.step_model;
  if (sm) el.appendChild(h('p', {class: 'note', text: 'Step model' + (MULTI ? ' of rank ' + sm.rank : '') + ': the step replays in ' + fmtMs(sm.replayed_ms) + ' against ' + fmtMs(sm.measured_ms) + ' measured (' + (sm.error_pct >= 0 ? '+' : '') + num(sm.error_pct, 1) + '%). Each remedy below is replayed alone: their savings overlap and do not add up.'}));
  if (!rs.length) { el.appendChild(h('p', {text: sm ? 'No remedy applies.' : 'No step model: the run has no steady steps with GPU work.'})); return; }
  // calibrated to the untraced step (the user's, report --untraced-step-ms, or record's after its window), or not reached
  const cal = sm ? sm.calibration : null;
  if (plan) el.appendChild(h('p', {class: 'plan'}, h('b', {text: 'Plan: '}), plan.remedy_ids.join(' + ') + (plan.remedy_ids.length > 1 ? ' together: ' : ': ') + fmtMs(plan.baseline_ms) + (cal && cal.reached ? ' (the untraced step ' + cal.source + ')' : '') + ' → ' + fmtMs(plan.predicted_step_ms) + ' per step (−' + num(plan.est_saving_pct, 1) + '%)'));
  if (cal && !cal.reached) el.appendChild(h('p', {class: 'note', text: 'Not calibrated: the untraced step ' + cal.source + ' (' + fmtMs(cal.untraced_step_ms) + ') is out of the step model\'s reach (' + fmtMs(cal.min_ms) + '–' + fmtMs(cal.max_ms) + ').'}));
  // the pair that saves the most together (plan.subsets: each subset one replay), where the plan applies more
  const pairs = plan && plan.remedy_ids.length > 2 ? (plan.subsets || []).filter(s => s.remedy_ids.length === 2) : [];
  const pair = pairs.reduce((a, b) => (a && a.est_saving_ms >= b.est_saving_ms ? a : b), null);
  if (pair) el.appendChild(h('p', {class: 'plan pair'}, h('b', {text: 'Best pair: '}), pair.remedy_ids.join(' + ') + ' together: → ' + fmtMs(pair.predicted_step_ms) + ' per step (−' + num(pair.est_saving_pct, 1) + '%)'));
  rs.forEach((r, i) => {
    const box = h('div', {class: 'finding remedy', 'data-id': r.id});
    box.appendChild(h('div', {class: 'head'},
      h('span', {class: 'title', text: (i + 1) + '. ' + r.title}),
      h('span', {class: 'saving', text: '→ ' + fmtMs(r.predicted_step_ms) + ' / step (−' + num(r.est_saving_pct, 1) + '%)'})));
    const lines = [...(r.evidence || [])];
    if (r.options && r.options.length > 1) lines.push('options: ' + r.options.map(o => o.title + ' → ' + fmtMs(o.predicted_step_ms)).join('; '));
    if (r.finding_ids && r.finding_ids.length) lines.push('answers: ' + r.finding_ids.join(', '));
    (r.assumptions || []).forEach(a => lines.push('assumes: ' + a));
    box.appendChild(h('ul', {}, ...lines.map(x => h('li', {text: x}))));
    el.appendChild(box);
  });
}

function renderFindings() {
  const el = clear(body('findings'));
  const fs = R.findings || [];
  if (!fs.length) el.appendChild(h('p', {text: 'No findings above the reporting thresholds: nothing costs more than 1% of a step by the rules\' estimates.'}));
  else el.appendChild(h('p', {class: 'note', text: 'Ranked by estimated saving per step. Each estimate is its symptom\'s own and says how it was made; the estimates overlap, the savings of the fixes beside them are replayed on the step model. "confidence" is lowered where host timings are inflated by the profiler.'}));
  const panes = [];
  fs.forEach((f, i) => {
    const w = U.where[i];
    // the remedies that answer it, replayed on the step model: their overlap-free savings
    const fx = (R.remedies || []).filter(r => (r.finding_ids || []).includes(f.id)).slice(0, 3);
    const box = h('div', {class: 'finding ' + f.severity, id: 'finding-' + i, 'data-id': f.id});
    box.appendChild(h('div', {class: 'head'},
      h('span', {class: 'sev ' + f.severity, text: f.severity}),
      h('span', {class: 'title', text: (i + 1) + '. ' + f.title}),
      h('span', {class: 'saving', text: (f.est_saving_ms > 0 ? '−' + fmtMs(f.est_saving_ms) + ' / step (' + num(f.est_saving_pct, 1) + '%)' : (f.est_kernel_saving_pct !== null && f.est_kernel_saving_pct !== undefined ? '' : 'saving not estimated')) + (f.est_kernel_saving_pct !== null && f.est_kernel_saving_pct !== undefined ? (f.est_saving_ms > 0 ? ' · ' : '') + '−' + num(f.est_kernel_saving_pct, 0) + '% of the kernel' : '') + (fx.length ? ' · as ' + (fx.length > 1 ? 'fixes' : 'a fix') + ', replayed: ' + fx.map(r => r.title.split(' (')[0] + ' −' + fmtMs(r.est_saving_ms) + ' (' + num(r.est_saving_pct, 1) + '%)').join(', ') : '')})));
    if (f.evidence && f.evidence.length) box.appendChild(h('ul', {}, ...f.evidence.map(e => h('li', {text: e}))));
    const fws = FRAMEWORKS.filter(([k]) => f.fix && f.fix[k]);
    if (fws.length) {
      const tabs = h('div', {class: 'tabs', role: 'tablist'});
      const pre = h('pre', {class: 'fix'});
      const select = k => {
        for (const b of tabs.children) b.classList.toggle('on', b.dataset.fw === k);
        pre.textContent = f.fix[k];
      };
      for (const [k, label] of fws) {
        const b = h('button', {type: 'button', role: 'tab', 'data-fw': k, text: label});
        b.addEventListener('click', () => { preferredFw = k; panes.forEach(p => p(k)); });
        tabs.appendChild(b);
      }
      const choose = k => select(fws.some(x => x[0] === k) ? k : fws[0][0]);
      panes.push(choose);
      choose(preferredFw);
      box.appendChild(tabs); box.appendChild(pre);
    }
    const meta = h('div', {class: 'meta'});
    meta.appendChild(h('div', {}, h('b', {text: 'Estimate: '}), f.method + ' (confidence ' + f.confidence + ')'));
    if (f.note) meta.appendChild(h('div', {}, h('b', {text: 'Note: '}), f.note));
    const wh = f.where || {};
    const bits = [];
    if (wh.rank !== null && wh.rank !== undefined && MULTI) bits.push('rank ' + wh.rank);
    if (wh.steps && wh.steps.length) bits.push('steps ' + stepRanges(wh.steps));
    const short = x => x.length > 90 ? x.slice(0, 89) + '…' : x;
    if (wh.kernels && wh.kernels.length) bits.push('kernels: ' + wh.kernels.map(short).join(' · '));
    if (wh.call_sites && wh.call_sites.length) bits.push('call sites: ' + wh.call_sites.join(' · '));
    if (bits.length) meta.appendChild(h('div', {}, h('b', {text: 'Where: '}), bits.join('; ')));
    const links = h('div', {});
    if (w) {
      links.appendChild(h('button', {type: 'button', class: 'link', 'data-finding': i, text: 'Show in timeline (' + fmtUs(w.end_us - w.start_us) + ' at ' + fmtUs(w.start_us) + ')',
        onclick: () => openTimeline(w.start_us, w.end_us, {rank: w.rank, search: w.kernel || ''})}));
    }
    links.appendChild(h('span', {class: 'muted', text: '  rule ' + f.id + ' · docs: ' + f.docs}));
    meta.appendChild(links);
    box.appendChild(meta);
    el.appendChild(box);
  });
  const sk = R.skipped_rules || [];
  if (sk.length) {
    el.appendChild(h('details', {}, h('summary', {class: 'note', text: sk.length + ' rule(s) could not run on this run'}),
      h('ul', {}, ...sk.map(x => h('li', {}, h('code', {text: x.id}), ': ' + x.reason)))));
  }
}

// ============================================================================================
// 5. timeline
// ============================================================================================
const KIND_LABEL = {
  kernel: 'kernel', memcpy: 'copy', memset: 'memset', api: 'API call', op: 'framework op', python: 'Python frame',
  annotation: 'annotation', nvtx: 'NVTX range', gpu_annotation: 'GPU annotation', profiler_step: 'profiler step',
  input_wait: 'input wait', step: 'step', gpu_sync: 'GPU sync', stack: 'sampled stack',
};
const STACK_TIP_FRAMES = 12;  // innermost frames of a sampled stack shown in the tooltip

class Timeline {
  constructor(root, ev) {
    this.ev = ev;
    this.gutter = 220; this.axisH = 24; this.laneH = 14; this.streamLaneH = 18; this.counterH = 44; this.memberH = 30;
    this.view = {s: 0, e: ev.endUs};
    this.scrollY = 0;
    this.sel = null;          // [a, b] µs, measured range
    this.band = null;         // highlighted range from a link
    this.hover = null;        // event index
    this.selected = null;     // event index
    this.search = ''; this.match = null;
    this.frames = [];         // draw times, ms
    this.mode = 'pan';
    this.collapsed = new Set();
    this.closedRanks = new Set(MULTI ? RANKS.slice(OPEN_RANKS) : []);  // rank groups folded
    this.openGroups = new Set();  // summary counters (indices into TM.counters) shown expanded
    this.defaultCollapse();
    this.build(root);
    this.layout();
    this.resize();
    new ResizeObserver(() => { this.resize(); this.render(); }).observe(this.wrap);
    if (window.matchMedia) window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      this.ev.palette = makePalette(); this.ev.assignColors(); this.ev.binCache.clear(); this.render();
    });
  }

  defaultCollapse() {
    // host threads with little activity start collapsed to one lane; click a label to expand
    const maxByRank = {};
    this.ev.tracks.forEach((t, i) => {
      if (t.type === 'thread') maxByRank[t.rank] = Math.max(maxByRank[t.rank] || 0, this.ev.trackEvents[i]);
    });
    this.ev.tracks.forEach((t, i) => {
      if (t.type === 'thread' && t.lanes > 1 && this.ev.trackEvents[i] < 0.05 * maxByRank[t.rank]) this.collapsed.add(i);
    });
  }

  build(root) {
    const bar = h('div', {class: 'tl-toolbar'});
    this.btnPan = h('button', {type: 'button', class: 'on', text: 'Pan', title: 'drag to pan (both axes)'});
    this.btnSel = h('button', {type: 'button', text: 'Select', title: 'drag to measure a range (or shift-drag in pan mode)'});
    this.btnPan.addEventListener('click', () => this.setMode('pan'));
    this.btnSel.addEventListener('click', () => this.setMode('select'));
    const reset = h('button', {type: 'button', text: 'Reset zoom', onclick: () => { this.view = {s: 0, e: this.ev.endUs}; this.render(); }});
    this.btnZoomSel = h('button', {type: 'button', text: 'Zoom to selection', disabled: true, onclick: () => {
      if (this.sel) { this.view = {s: this.sel[0], e: this.sel[1]}; this.render(); }
    }});
    this.searchBox = h('input', {type: 'search', placeholder: 'highlight names containing…', 'aria-label': 'highlight events by name'});
    this.searchBox.addEventListener('input', () => this.setSearch(this.searchBox.value));
    const next = h('button', {type: 'button', text: 'Next match', onclick: () => this.nextMatch()});
    this.matchInfo = h('span', {class: 'muted'});
    append(bar, this.btnPan, this.btnSel, reset, this.btnZoomSel, this.searchBox, next, this.matchInfo,
      h('span', {class: 'muted', text: 'wheel: zoom · shift+wheel: pan · drag: pan · shift+drag: measure · W/A/S/D keys · wheel over labels: scroll'}));
    this.wrap = h('div', {class: 'tl-wrap'});
    this.canvas = h('canvas', {tabindex: 0, 'aria-label': 'timeline of host threads, GPU streams and counters', id: 'tl-canvas'});
    this.wrap.appendChild(this.canvas);
    this.info = h('div', {class: 'tl-info', id: 'tl-info'});
    this.details = h('div', {class: 'details', id: 'tl-details'}, h('span', {class: 'muted', text: 'Click an event for its full record.'}));
    const legend = h('div', {class: 'tl-legend'});
    const P = this.ev.palette, seen = new Set();
    const present = new Set(this.ev.color);
    P.keys.forEach((k, i) => {
      if (!P.labels[i] || seen.has(P.labels[i]) || !present.has(i)) return;
      seen.add(P.labels[i]);
      legend.appendChild(h('span', {}, h('span', {class: 'sw', style: {background: P.colors[i], display: 'inline-block', width: '10px', height: '10px', borderRadius: '2px', marginRight: '4px'}}), P.labels[i]));
    });
    append(root, bar, this.wrap, this.info, legend, this.details);
    this.ctx = this.canvas.getContext('2d', {alpha: false});
    this.bindEvents();
  }

  setMode(m) {
    this.mode = m;
    this.btnPan.classList.toggle('on', m === 'pan');
    this.btnSel.classList.toggle('on', m === 'select');
  }

  layout() {
    const rows = [];
    let y = 0, lastRank = null;
    this.ev.tracks.forEach((t, ti) => {
      if (MULTI && t.rank !== lastRank) { rows.push({kind: 'rank', rank: t.rank, y, h: 20}); y += 20; }
      lastRank = t.rank;
      if (MULTI && this.closedRanks.has(t.rank)) return;  // a folded rank: its header only
      if (t.type === 'counter') {
        // folded sample groups: a summary row, its member rows only while it is expanded
        const c = TM.counters[t.counter], role = c.role || 'single';
        if (role === 'member' && !this.openGroups.has(c.parent)) return;
        const hh = role === 'member' ? this.memberH : this.counterH;
        rows.push({kind: 'counter', t, ti, y, h: hh, role}); y += hh; return;
      }
      if (!t.lanes) return;
      const lh = t.type === 'stream' ? this.streamLaneH : this.laneH;
      const shown = this.collapsed.has(ti) ? 1 : t.lanes;
      const hh = shown * lh + 6;
      rows.push({kind: 'track', t, ti, y, h: hh, lh, shown});
      y += hh;
    });
    this.rows = rows;
    this.totalH = y;
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(400, this.wrap.clientWidth);
    const want = Math.min(this.totalH + this.axisH + 2, Math.max(380, Math.round(window.innerHeight * 0.68)));
    this.W = w; this.H = want; this.dpr = dpr;
    this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(want * dpr);
    this.canvas.style.height = want + 'px';
    this.plotW = w - this.gutter;
    this.acc = new Float32Array(this.plotW + 2); this.accBest = new Float32Array(this.plotW + 2); this.accCol = new Int16Array(this.plotW + 2);
    this.clampScroll();
  }

  clampScroll() { this.scrollY = Math.max(0, Math.min(this.scrollY, this.totalH - (this.H - this.axisH))); }
  clampView() {
    const span = Math.max(0.01, Math.min(this.view.e - this.view.s, this.ev.endUs * 1.2));
    let s0 = this.view.s;
    s0 = Math.max(-0.1 * this.ev.endUs, Math.min(s0, this.ev.endUs * 1.1 - span));
    this.view = {s: s0, e: s0 + span};
  }
  tOf(x) { return this.view.s + (x - this.gutter) / this.plotW * (this.view.e - this.view.s); }
  xOf(t) { return this.gutter + (t - this.view.s) / (this.view.e - this.view.s) * this.plotW; }

  render() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    const t0 = performance.now();
    this.clampView();
    const ctx = this.ctx, dpr = this.dpr, W = this.W, H = this.H;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const bg = cssVar('--panel'), fg = cssVar('--fg'), muted = cssVar('--muted'), border = cssVar('--border'), panel2 = cssVar('--panel2');
    ctx.fillStyle = bg; ctx.fillRect(0, 0, W, H);
    ctx.font = '11px ' + cssVar('--sans');
    if (!this.charW) this.charW = ctx.measureText('abcdefghijklmnopqrstuvwxyz').width / 26 * 1.02;
    const P = this.ev.palette, nP = P.colors.length;
    if (!this.batches) this.batches = Array.from({length: nP * 2}, () => []);
    for (const b of this.batches) b.length = 0;
    this.labels = [];
    const top = this.axisH, y0 = top - this.scrollY;
    // plot area rows
    ctx.save();
    ctx.beginPath(); ctx.rect(this.gutter, top, this.plotW, H - top); ctx.clip();
    for (const row of this.rows) {
      const y = y0 + row.y;
      if (y + row.h < top || y > H) continue;
      if (row.kind === 'rank') { ctx.fillStyle = panel2; ctx.fillRect(this.gutter, y, this.plotW, row.h); continue; }
      if (row.kind === 'counter') { this.drawCounter(row, y); continue; }
      for (let k = 0; k < row.shown; k++) {
        const ly = y + 3 + k * row.lh;
        if (ly + row.lh < top || ly > H) continue;
        this.drawLane(row.t.lane0 + k, ly, row.lh - 2);
      }
    }
    for (let c = 0; c < this.batches.length; c++) {
      const b = this.batches[c];
      if (!b.length) continue;
      ctx.fillStyle = P.colors[c % nP];
      ctx.globalAlpha = c >= nP ? 0.22 : 1;
      ctx.beginPath();
      for (let i = 0; i < b.length; i += 4) ctx.rect(b[i], b[i + 1], b[i + 2], b[i + 3]);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    for (const [x, y, w, i, hh] of this.labels) {
      const n = Math.floor((w - 6) / this.charW);
      if (n < 3) continue;
      const name = this.ev.str(i);
      ctx.fillStyle = P.text[this.ev.color[i]];
      ctx.fillText(name.length > n ? name.slice(0, n - 1) + '…' : name, x + 3, y + hh / 2 + 4);
    }
    // separators, overlays
    ctx.strokeStyle = border; ctx.lineWidth = 1;
    ctx.beginPath();
    for (const row of this.rows) { const y = Math.round(y0 + row.y + row.h) + 0.5; if (y > top && y < H) { ctx.moveTo(this.gutter, y); ctx.lineTo(W, y); } }
    ctx.stroke();
    const overlay = (r, color, edge) => {
      const a = this.xOf(r[0]), b = this.xOf(r[1]);
      ctx.fillStyle = color; ctx.fillRect(a, top, Math.max(1, b - a), H - top);
      ctx.strokeStyle = edge; ctx.beginPath(); ctx.moveTo(a + 0.5, top); ctx.lineTo(a + 0.5, H); ctx.moveTo(b - 0.5, top); ctx.lineTo(b - 0.5, H); ctx.stroke();
    };
    if (this.band) overlay(this.band, cssVar('--hl'), cssVar('--accent'));
    if (this.sel) overlay(this.sel, cssVar('--sel'), '#d4a106');
    for (const [i, color, wdt] of [[this.hover, fg, 1], [this.selected, cssVar('--accent'), 2]]) {
      if (i === null) continue;
      const box = this.eventBox(i);
      if (!box) continue;
      ctx.strokeStyle = color; ctx.lineWidth = wdt;
      ctx.strokeRect(box.x - 0.5, box.y - 0.5, Math.max(2, box.w) + 1, box.h + 1);
    }
    ctx.lineWidth = 1;
    ctx.restore();
    this.drawGutter(y0, top, fg, muted, border, panel2, bg);
    this.drawAxis(fg, muted, border, panel2);
    // vertical scroll indicator
    const visH = H - top;
    if (this.totalH > visH) {
      const th = Math.max(20, visH * visH / this.totalH), ty = top + this.scrollY / (this.totalH - visH) * (visH - th);
      ctx.fillStyle = muted; ctx.globalAlpha = 0.45; ctx.fillRect(W - 5, ty, 4, th); ctx.globalAlpha = 1;
    }
    const ms = performance.now() - t0;
    this.frames.push(ms); if (this.frames.length > 500) this.frames.shift();
    this.drawn = (this.drawn || 0) + 1;
    this.updateInfo();
  }

  drawLane(l, y, hh) {
    const ev = this.ev, o0 = ev.laneOff[l], o1 = ev.laneOff[l + 1];
    if (o0 === o1) return;
    const vs = this.view.s, ve = this.view.e, W = this.plotW, pxUs = (ve - vs) / W, gx = this.gutter;
    if (pxUs >= ev.binUs && o1 - o0 > 4 * W) { this.drawBins(l, y, hh, pxUs); return; }
    const st = ev.start, du = ev.dur, col = ev.color, nP = ev.palette.colors.length;
    const match = this.match, nm = ev.name;
    const acc = this.acc, best = this.accBest, accCol = this.accCol;
    let lo = W, hi = -1;
    let i = lowerBound(st, vs - ev.laneMaxDur[l], o0, o1);
    const iEnd = lowerBound(st, ve, i, o1);
    for (; i < iEnd; i++) {
      const a = st[i], b = a + du[i];
      if (b < vs) continue;
      const xs = (a - vs) / pxUs, xe = (b - vs) / pxUs, w = xe - xs;
      const c = col[i] + (match && !match[nm[i]] ? nP : 0);
      if (w >= 1) {
        const x1 = xs < -2 ? -2 : xs, x2 = xe > W + 2 ? W + 2 : xe;
        this.batches[c].push(gx + x1, y, x2 - x1, hh);
        if (x2 - x1 > 40 && c < nP) this.labels.push([gx + x1, y, x2 - x1, i, hh]);
      } else {
        let p = xs | 0; if (p < 0) p = 0; if (p >= W) p = W - 1;
        acc[p] += w;
        if (w >= best[p]) { best[p] = w; accCol[p] = c; }
        if (p < lo) lo = p; if (p > hi) hi = p;
      }
    }
    this.flushColumns(lo, hi, y, hh, 1);
  }

  flushColumns(lo, hi, y, hh, scale) {
    const acc = this.acc, best = this.accBest, accCol = this.accCol, gx = this.gutter;
    let runX = -1, runC = -1, runH = 0, runEnd = -1;
    const emit = () => { if (runX >= 0) this.batches[runC].push(gx + runX, y + hh - runH, runEnd - runX, runH); };
    for (let p = lo; p <= hi; p++) {
      const v = acc[p];
      if (v <= 0) continue;
      const frac = Math.min(1, v * scale);
      const ph = Math.max(2, Math.round(frac * hh));
      const c = accCol[p];
      if (c === runC && ph === runH && p === runEnd) runEnd = p + 1;
      else { emit(); runX = p; runC = c; runH = ph; runEnd = p + 1; }
      acc[p] = 0; best[p] = 0;
    }
    emit();
  }

  drawBins(l, y, hh, pxUs) {
    const ev = this.ev, {busy, col} = ev.bins(l), nb = ev.nbins, bw = ev.binUs, W = this.plotW;
    const vs = this.view.s, acc = this.acc, best = this.accBest, accCol = this.accCol;
    let lo = W, hi = -1;
    const p0 = Math.max(0, Math.floor((0 - vs) / pxUs)), p1 = Math.min(W - 1, Math.ceil((ev.endUs - vs) / pxUs));
    for (let p = p0; p <= p1; p++) {
      const ta = vs + p * pxUs;
      let b0 = Math.floor(ta / bw), b1 = Math.floor((ta + pxUs) / bw);
      if (b1 <= b0) b1 = b0 + 1;
      if (b0 < 0) b0 = 0; if (b1 > nb) b1 = nb;
      let sum = 0, bb = -1, bv = 0;
      for (let k = b0; k < b1; k++) { const v = busy[k]; sum += v; if (v > bv) { bv = v; bb = k; } }
      if (sum <= 0) continue;
      acc[p] = sum / ((b1 - b0) * bw); accCol[p] = col[bb];
      if (p < lo) lo = p; if (p > hi) hi = p;
    }
    this.flushColumns(lo, hi, y, hh, 1);
  }

  drawCounter(row, y) {
    const c = TM.counters[row.t.counter], ctx = this.ctx, t = c.t_us, names = Object.keys(c.series);
    let max = 0;
    for (const n of names) for (const v of c.series[n]) if (v > max) max = v;
    if (max <= 0) return;
    const colors = ['#2a9fd6', '#e08a00', '#16a37f', '#c23fb5'];
    const vs = this.view.s, ve = this.view.e, hh = row.h - 8, base = y + row.h - 4;
    const i0 = Math.max(0, upperBound(t, vs, 0, t.length) - 1), i1 = Math.min(t.length, lowerBound(t, ve, 0, t.length) + 1);
    names.forEach((n, si) => {
      const v = c.series[n];
      ctx.strokeStyle = colors[si % colors.length]; ctx.lineWidth = 1.25; ctx.beginPath();
      let lastX = -1e9, started = false;
      for (let i = i0; i < i1; i++) {
        if (v[i] === null) { started = false; continue; }  // a summary part not sampled yet
        const x = this.xOf(t[i]), yy = base - v[i] / max * hh;
        if (!started) { ctx.moveTo(x, yy); started = true; }
        else if (c.kind === 'memory') { ctx.lineTo(x, base - v[i - 1] / max * hh); ctx.lineTo(x, yy); }
        else if (x - lastX >= 0.5 || i === i1 - 1) ctx.lineTo(x, yy);
        lastX = x;
      }
      if (c.kind === 'memory' && started && i1 > 0) ctx.lineTo(this.gutter + this.plotW, base - v[i1 - 1] / max * hh);
      ctx.stroke();
    });
    ctx.lineWidth = 1;
    row.max = max;
  }

  drawGutter(y0, top, fg, muted, border, panel2, bg) {
    const ctx = this.ctx, g = this.gutter, H = this.H;
    ctx.fillStyle = panel2; ctx.fillRect(0, top, g, H - top);
    ctx.save(); ctx.beginPath(); ctx.rect(0, top, g, H - top); ctx.clip();
    for (const row of this.rows) {
      const y = y0 + row.y;
      if (y + row.h < top || y > H) continue;
      if (row.kind === 'rank') {
        const off = CLOCK_US[row.rank];
        ctx.fillStyle = fg; ctx.font = 'bold 12px ' + cssVar('--sans');
        ctx.fillText((this.closedRanks.has(row.rank) ? '▸ ' : '▾ ') + 'Rank ' + row.rank + (off !== undefined ? ' · clock ' + fmtOffset(off) : ''), 8, y + 14);
        continue;
      }
      const t = row.t;
      ctx.font = '12px ' + cssVar('--sans'); ctx.fillStyle = fg;
      let label = t.label;
      const summary = row.role === 'summary', indent = row.role === 'member' || t.type === 'stacks' ? 12 : 0;
      const expandable = (row.kind === 'track' && t.lanes > 1) || summary;
      const open = summary ? this.openGroups.has(t.counter) : !this.collapsed.has(row.ti);
      const prefix = expandable ? (open ? '▾ ' : '▸ ') : '  ';
      const maxCh = Math.floor((g - 14 - indent) / 6.6);
      if ((prefix + label).length > maxCh) label = label.slice(0, maxCh - prefix.length - 1) + '…';
      if (indent) ctx.fillStyle = muted;
      ctx.fillText(prefix + label, 6 + indent, y + 14);
      ctx.font = '10.5px ' + cssVar('--sans'); ctx.fillStyle = muted;
      let sub = '';
      if (row.kind === 'counter') {
        const c = TM.counters[t.counter];
        const keys = Object.keys(c.series);
        const names = keys.length === 1 && t.label.endsWith(keys[0]) ? '' : keys.join(' / ');
        sub = [summary ? c.members.length + ' lanes' : '', row.max ? 'max ' + (c.unit === 'B' ? fmtBytes(row.max) : num(row.max, 1) + (c.unit ? ' ' + c.unit : '')) : '', names].filter(x => x).join(' · ');
      } else if (row.h >= 28) {
        sub = (t.type === 'thread' && t.tid !== undefined ? 'tid ' + t.tid + ' · ' : '') +
          this.ev.trackEvents[row.ti].toLocaleString() + (t.type === 'stacks' ? ' stacks' : ' events') + (t.lanes > 1 ? ' · ' + t.lanes + ' levels' : '');
      }
      const subCh = Math.floor((g - 24 - indent) / 5.6);
      if (sub.length > subCh) sub = sub.slice(0, subCh - 1) + '…';
      if (sub) ctx.fillText(sub, 18 + indent, y + 27);
      ctx.strokeStyle = border; ctx.beginPath(); ctx.moveTo(0, Math.round(y + row.h) + 0.5); ctx.lineTo(g, Math.round(y + row.h) + 0.5); ctx.stroke();
    }
    ctx.restore();
    ctx.strokeStyle = border; ctx.beginPath(); ctx.moveTo(g + 0.5, 0); ctx.lineTo(g + 0.5, H); ctx.stroke();
  }

  drawAxis(fg, muted, border, panel2) {
    const ctx = this.ctx, top = this.axisH, W = this.W;
    ctx.fillStyle = panel2; ctx.fillRect(0, 0, W, top);
    ctx.strokeStyle = border; ctx.beginPath(); ctx.moveTo(0, top - 0.5); ctx.lineTo(W, top - 0.5); ctx.stroke();
    const span = this.view.e - this.view.s, step = niceStep(span / Math.max(2, this.plotW / 110));
    ctx.font = '11px ' + cssVar('--sans'); ctx.fillStyle = muted; ctx.strokeStyle = muted;
    ctx.beginPath();
    for (let t = Math.ceil(this.view.s / step) * step; t <= this.view.e; t += step) {
      const x = Math.round(this.xOf(t)) + 0.5;
      ctx.moveTo(x, top - 6); ctx.lineTo(x, top);
      ctx.fillText(fmtUs(t), x + 3, top - 9);
    }
    ctx.stroke();
    ctx.fillStyle = fg; ctx.fillText('view ' + fmtUs(span), 8, top - 9);
  }

  /** Screen box (canvas CSS px) of event i, or null when not on screen. */
  eventBox(i) {
    const l = this.ev.laneOf(i), ti = this.ev.laneTrack[l];
    const row = this.rows.find(r => r.kind === 'track' && r.ti === ti);
    if (!row) return null;
    const k = l - row.t.lane0;
    if (k >= row.shown) return null;
    const y = this.axisH - this.scrollY + row.y + 3 + k * row.lh;
    const x = this.xOf(this.ev.start[i]), x2 = this.xOf(this.ev.end(i));
    return {x, y, w: x2 - x, h: row.lh - 2, row, lane: l};
  }

  /** What is under canvas point (x, y): {row, lane} and the event index if any. */
  hit(x, y) {
    const yy = y - this.axisH + this.scrollY;
    if (y < this.axisH) return null;
    const row = this.rows.find(r => yy >= r.y && yy < r.y + r.h);
    if (!row) return null;
    if (row.kind !== 'track') return {row, event: null};
    const k = Math.floor((yy - row.y - 3) / row.lh);
    if (k < 0 || k >= row.shown || x < this.gutter) return {row, event: null};
    const tol = 3 * (this.view.e - this.view.s) / this.plotW;
    return {row, lane: row.t.lane0 + k, event: this.ev.at(row.t.lane0 + k, this.tOf(x), tol)};
  }

  bindEvents() {
    const cv = this.canvas;
    const pos = e => { const r = cv.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
    const pointers = new Map();
    let drag = null, pinch = null;
    cv.addEventListener('pointerdown', e => {
      cv.focus();
      const [x, y] = pos(e);
      pointers.set(e.pointerId, [x, y]);
      cv.setPointerCapture(e.pointerId);
      if (pointers.size === 2) {
        const [a, b] = [...pointers.values()];
        pinch = {d: Math.abs(a[0] - b[0]) || 1, view: {...this.view}, t: this.tOf((a[0] + b[0]) / 2)};
        drag = null; return;
      }
      const select = (this.mode === 'select' || e.shiftKey) && x >= this.gutter;
      drag = {x, y, moved: false, select, view: {...this.view}, scrollY: this.scrollY, t: this.tOf(x)};
      cv.classList.add(select ? 'selecting' : 'dragging');
    });
    cv.addEventListener('pointermove', e => {
      const [x, y] = pos(e);
      if (pointers.has(e.pointerId)) pointers.set(e.pointerId, [x, y]);
      if (pinch && pointers.size === 2) {
        const [a, b] = [...pointers.values()];
        const f = pinch.d / (Math.abs(a[0] - b[0]) || 1);
        this.zoomAround(pinch.t, f, pinch.view); return;
      }
      if (drag) {
        if (Math.abs(x - drag.x) + Math.abs(y - drag.y) > 3) drag.moved = true;
        if (!drag.moved) return;
        if (drag.select) {
          const t = this.tOf(x);
          this.sel = [Math.min(drag.t, t), Math.max(drag.t, t)];
        } else {
          const dt = (x - drag.x) / this.plotW * (drag.view.e - drag.view.s);
          this.view = {s: drag.view.s - dt, e: drag.view.e - dt};
          this.scrollY = drag.scrollY - (y - drag.y); this.clampScroll();
        }
        hideTip(); this.render(); return;
      }
      this.onHover(e, x, y);
    });
    const end = e => {
      pointers.delete(e.pointerId);
      if (pointers.size < 2) pinch = null;
      if (!drag) return;
      cv.classList.remove('dragging', 'selecting');
      const [x, y] = pos(e);
      if (!drag.moved) this.onClick(x, y);
      else if (drag.select) { this.btnZoomSel.disabled = !this.sel; this.measure(); }
      drag = null;
      this.render();
    };
    cv.addEventListener('pointerup', end);
    cv.addEventListener('pointercancel', end);
    cv.addEventListener('pointerleave', () => { if (!drag) { this.hover = null; hideTip(); this.render(); } });
    cv.addEventListener('wheel', e => {
      e.preventDefault();
      const [x] = pos(e);
      const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? this.H : 1;
      const dx = e.deltaX * unit, dy = e.deltaY * unit;
      if (x < this.gutter || e.altKey) { this.scrollY += dy; this.clampScroll(); }
      else if (e.shiftKey || Math.abs(dx) > Math.abs(dy)) {
        const d = (e.shiftKey && !dx ? dy : dx) / this.plotW * (this.view.e - this.view.s);
        this.view = {s: this.view.s + d, e: this.view.e + d};
      } else this.zoomAround(this.tOf(x), Math.exp(dy * (e.ctrlKey ? 0.01 : 0.0022)));
      hideTip(); this.render();
    }, {passive: false});
    cv.addEventListener('dblclick', e => {
      const [x, y] = pos(e), hit = this.hit(x, y);
      if (hit && hit.event !== null) this.focusEvent(hit.event, true);
    });
    cv.addEventListener('keydown', e => {
      const span = this.view.e - this.view.s, c = (this.view.s + this.view.e) / 2;
      const k = e.key.toLowerCase();
      if (k === 'w' || k === '+' || k === '=') this.zoomAround(c, 0.7);
      else if (k === 's' || k === '-') this.zoomAround(c, 1 / 0.7);
      else if (k === 'a' || e.key === 'ArrowLeft') this.view = {s: this.view.s - span * 0.2, e: this.view.e - span * 0.2};
      else if (k === 'd' || e.key === 'ArrowRight') this.view = {s: this.view.s + span * 0.2, e: this.view.e + span * 0.2};
      else if (e.key === 'ArrowDown') { this.scrollY += 40; this.clampScroll(); }
      else if (e.key === 'ArrowUp') { this.scrollY -= 40; this.clampScroll(); }
      else if (k === '0' || e.key === 'Home') this.view = {s: 0, e: this.ev.endUs};
      else if (e.key === 'Escape') { this.sel = null; this.band = null; this.selected = null; this.btnZoomSel.disabled = true; }
      else return;
      e.preventDefault(); this.render();
    });
  }

  zoomAround(t, f, from) {
    const v = from || this.view;
    const span = Math.max(0.01, Math.min((v.e - v.s) * f, this.ev.endUs * 1.2));
    const a = (t - v.s) / (v.e - v.s);
    this.view = {s: t - a * span, e: t - a * span + span};
  }

  onHover(e, x, y) {
    const hit = this.hit(x, y);
    const i = hit ? hit.event : null;
    if (hit && hit.row.kind === 'counter' && x >= this.gutter) {
      const c = TM.counters[hit.row.t.counter], t = this.tOf(x);
      const k = Math.max(0, upperBound(c.t_us, t, 0, c.t_us.length) - 1);
      const f = v => c.unit === 'B' ? fmtBytes(v) : num(v, 2) + (c.unit ? ' ' + c.unit : '');
      const lines = [c.label + ' at ' + fmtUs(c.t_us[k] || 0)].concat(Object.keys(c.series).map(n => n + ': ' + f(c.series[n][k])));
      if (c.role === 'summary') lines.push((this.openGroups.has(hit.row.t.counter) ? 'click to fold the ' : 'click to show the ') + c.members.length + ' lanes');
      showTip(e, lines);
      if (this.hover !== null) { this.hover = null; this.render(); }
      return;
    }
    if (i !== this.hover) { this.hover = i; this.render(); }
    if (i === null) { hideTip(); return; }
    showTip(e, this.summaryLines(i));
  }

  summaryLines(i) {
    const ev = this.ev, k = ev.kindOf(i), nm = ev.str(i), out = [nm.length > 240 ? nm.slice(0, 239) + '…' : nm];
    out.push(KIND_LABEL[k] + ' · ' + fmtUs(ev.dur[i]) + ' · at ' + fmtUs(ev.start[i]));
    const r = ev.row[i], A = ev.extra;
    if (k === 'kernel') {
      const cfg = TM.kernel_configs.rows[A.k_cfg[r]], C = ev.cfgCols, cl = ev.kernelClass(i);
      if (cfg) out.push(`grid (${cfg[C.grid_x]}, ${cfg[C.grid_y]}, ${cfg[C.grid_z]}) · block (${cfg[C.block_x]}, ${cfg[C.block_y]}, ${cfg[C.block_z]})` +
        (cfg[C.occupancy] !== null ? ' · occupancy ' + pct(cfg[C.occupancy]) : ''));
      out.push(cl.category + (cl.precision ? ' · ' + cl.precision : '') + (cl.tensor_cores ? ' · tensor cores' : ''));
    } else if (k === 'memcpy') {
      const b = A.c_bytes[r];
      out.push(fmtBytes(b) + ' · ' + num(b / (ev.dur[i] * 1000), 1) + ' GB/s · ' + TM.memory_kinds[A.c_src[r]] + ' → ' + TM.memory_kinds[A.c_dst[r]]);
    } else if (k === 'memset') out.push(fmtBytes(A.m_bytes[r]));
    else if (k === 'stack') {
      const n = A.s_n[r], frames = ev.strings[A.s_stack[r]].split('\n');
      out[1] = 'sampled stack' + (n > 1 ? ' · ' + n + ' samples in a row' : '') + ' · at ' + fmtUs(ev.start[i]) + ' · spans ' + fmtUs(ev.dur[i]);
      if (frames.length > STACK_TIP_FRAMES) out.push('… ' + (frames.length - STACK_TIP_FRAMES) + ' outer frames');
      for (const f of frames.slice(-STACK_TIP_FRAMES)) out.push(f.length > 160 ? '…' + f.slice(-159) : f);
    }
    const tr = ev.trackOf(i);
    out.push(tr.label + (MULTI ? ' · rank ' + tr.rank : ''));
    return out;
  }

  onClick(x, y) {
    const hit = this.hit(x, y);
    if (!hit) return;
    if (hit.row.kind === 'counter' && hit.row.role === 'summary') { this.toggleGroup(hit.row.t.counter); return; }
    if (hit.row.kind === 'rank') { this.toggleRank(hit.row.rank); return; }
    if (x < this.gutter && hit.row.kind === 'track' && hit.row.t.lanes > 1) {
      if (this.collapsed.has(hit.row.ti)) this.collapsed.delete(hit.row.ti); else this.collapsed.add(hit.row.ti);
      this.layout(); this.resize(); this.render(); return;
    }
    this.selected = hit.event;
    this.showDetails(hit.event);
  }

  /** Open or fold a rank's group of tracks. */
  toggleRank(rank, open) {
    if (open === undefined) open = this.closedRanks.has(rank);
    if (open) this.closedRanks.delete(rank); else this.closedRanks.add(rank);
    this.layout(); this.resize(); this.render();
  }

  /** Expand or fold a summary counter's member lanes. */
  toggleGroup(ci) {
    if (this.openGroups.has(ci)) this.openGroups.delete(ci); else this.openGroups.add(ci);
    hideTip(); this.layout(); this.resize(); this.render();
  }

  showDetails(i) {
    const d = clear(this.details);
    if (i === null || i === undefined) { d.appendChild(h('span', {class: 'muted', text: 'Click an event for its full record.'})); return; }
    const ev = this.ev, k = ev.kindOf(i), r = ev.row[i], A = ev.extra, tr = ev.trackOf(i);
    const kv = [];
    const add = (a, b) => kv.push(h('div', {text: a}), b instanceof Node ? h('div', {}, b) : h('div', {text: b}));
    d.appendChild(h('div', {class: 'name', text: ev.str(i)}));
    add('kind', KIND_LABEL[k]);
    add('start', fmtUs(ev.start[i]) + ' after the run start');
    add('duration', fmtUs(ev.dur[i]) + ' (' + Math.round(ev.dur[i] * 1000).toLocaleString() + ' ns)');
    add('track', tr.label + (MULTI ? ' · rank ' + tr.rank : '') + (tr.pid !== undefined ? ' · pid ' + tr.pid : '') + (tr.tid !== undefined ? ' · tid ' + tr.tid : ''));
    if (k === 'kernel') {
      const cfg = TM.kernel_configs.rows[A.k_cfg[r]], C = ev.cfgCols, cl = ev.kernelClass(i);
      if (cfg) {
        const v = c => cfg[C[c]];
        const blocks = v('grid_x') * v('grid_y') * v('grid_z'), threads = v('block_x') * v('block_y') * v('block_z');
        add('grid', `(${v('grid_x')}, ${v('grid_y')}, ${v('grid_z')}) = ${blocks.toLocaleString()} blocks`);
        add('block', `(${v('block_x')}, ${v('block_y')}, ${v('block_z')}) = ${threads} threads`);
        add('registers / thread', v('registers') < 0 ? '–' : String(v('registers')));
        add('shared memory / block', v('shared_memory') < 0 ? '–' : fmtBytes(v('shared_memory')) +
          (v('static_smem') >= 0 || v('dynamic_smem') >= 0 ? ` (static ${fmtBytes(Math.max(0, v('static_smem')))}, dynamic ${fmtBytes(Math.max(0, v('dynamic_smem')))})` : ''));
        add('theoretical occupancy', v('occupancy') === null ? '–' : pct(v('occupancy')) + (v('occupancy_limiter') ? ' (limited by ' + v('occupancy_limiter') + ')' : '') +
          (v('active_blocks_per_sm') !== null ? ' · ' + v('active_blocks_per_sm') + ' blocks/SM' : ''));
        if (v('source_occupancy_pct') !== null) add('est. achieved occupancy (trace)', num(v('source_occupancy_pct'), 1) + '%');
        add('SM coverage', v('sm_coverage') === null ? '–' : pct(v('sm_coverage')));
        add('waves', v('waves') === null ? '–' : num(v('waves'), 2));
      }
      add('category', cl.category + (cl.precision ? ' · ' + cl.precision : '') + (cl.tensor_cores === true ? ' · tensor cores' : cl.tensor_cores === false ? ' · no tensor cores' : ''));
      add('device / stream', tr.device + ' / ' + tr.stream);
    } else if (k === 'memcpy') {
      const b = A.c_bytes[r];
      add('direction', TM.copy_kinds[A.c_kind[r]]);
      add('bytes', fmtBytes(b) + ' (' + b.toLocaleString() + ' B)');
      add('bandwidth', num(b / (ev.dur[i] * 1000), 2) + ' GB/s');
      add('host memory', TM.memory_kinds[A.c_src[r]] + ' → ' + TM.memory_kinds[A.c_dst[r]] +
        ([A.c_src[r], A.c_dst[r]].some(x => TM.memory_kinds[x] === 'pageable') ? ' (pageable: staged by the driver, blocks the host)' : ''));
      add('device / stream', tr.device + ' / ' + tr.stream);
    } else if (k === 'memset') {
      add('bytes', fmtBytes(A.m_bytes[r]));
    } else if (k === 'api') {
      add('API kind', TM.api_kinds[A.a_kind[r]]);
    } else if (k === 'stack') {
      add('samples', A.s_n[r] + (A.s_n[r] > 1 ? ' in a row with this stack' : '') + ' (a sample lasts until the next one)');
      add('stack (innermost last)', h('div', {class: 'stack', text: ev.strings[A.s_stack[r]]}));
    } else if (k === 'step') {
      const st = U.steps.find(x => x.rank === tr.rank && Math.abs(x.start_us - ev.start[i]) < 0.01);
      if (st) {
        add('wall', fmtMs(st.wall_ms) + (st.steady ? ' (steady)' : ' (not steady' + (st.note ? ': ' + st.note : '') + ')'));
        add('GPU busy', fmtMs(st.gpu_busy_ms));
        for (const c of CATS) if (st.breakdown[c] > 0) add(CAT_LABEL[c], fmtMs(st.breakdown[c]) + ' (' + pct(st.breakdown[c] / st.wall_ms, 1) + ')');
      }
    }
    const corr = ev.corr(i);
    if (corr) {
      add('correlation', String(corr));
      const links = ev.correlated(i);
      for (const j of links.slice(0, 8)) {
        const label = ev.kindOf(j) === 'api' ? 'launched by' : 'GPU work';
        add(label, h('button', {type: 'button', class: 'link', text: ev.str(j) + ' (' + fmtUs(ev.dur[j]) + ')', onclick: () => this.focusEvent(j, false)}));
        if (ev.kindOf(j) === 'api') {
          const anc = ev.ancestors(j).filter(a => ev.kindOf(a) === 'op');
          if (anc.length) add('issued from', anc.map(a => ev.str(a)).join(' › '));
        }
      }
      if (!links.length) add('linked', 'no event with this correlation id in the trace');
    }
    if (tr.type === 'thread') {
      const anc = ev.ancestors(i);
      if (anc.length) add('inside', h('span', {}, ...anc.slice(-6).flatMap((a, n) => [n ? ' › ' : '',
        h('button', {type: 'button', class: 'link', text: ev.str(a), onclick: () => this.focusEvent(a, false)})])));
    }
    d.appendChild(h('div', {class: 'kv'}, ...kv));
  }

  /** Select event i, bring it into view (zooming to it when asked or when it is off screen). */
  focusEvent(i, zoom) {
    const ev = this.ev, a = ev.start[i], b = ev.end(i), span = this.view.e - this.view.s;
    if (zoom || b - a > span || a < this.view.s || b > this.view.e) {
      const w = Math.max((b - a) * 3, zoom ? 1 : Math.min(span, Math.max((b - a) * 40, 50)));
      const c = (a + b) / 2;
      this.view = {s: c - w / 2, e: c + w / 2};
    }
    const box = this.eventBox(i);
    if (box) {
      const visH = this.H - this.axisH;
      const yy = box.row.y + 3 + (box.lane - box.row.t.lane0) * box.row.lh;
      if (yy < this.scrollY || yy > this.scrollY + visH - 30) { this.scrollY = yy - visH / 3; this.clampScroll(); }
    }
    this.selected = i;
    this.showDetails(i);
    const r = this.canvas.getBoundingClientRect();
    if (r.top < 0 || r.bottom > window.innerHeight) this.canvas.scrollIntoView({block: 'nearest'});
    this.render();
  }

  /** Open a time range (from a finding, a step, a table row), highlighted, rank's tracks in view. */
  showRange(a, b, opts) {
    const pad = Math.max((b - a) * 0.05, 1);
    this.view = {s: a - pad, e: b + pad};
    this.band = [a, b];
    if (opts.rank !== undefined && opts.rank !== null) {
      if (this.closedRanks.has(opts.rank)) this.toggleRank(opts.rank, true);
      const row = this.rows.find(r => r.t && r.t.rank === opts.rank);
      if (row) { this.scrollY = row.y - (MULTI ? 20 : 0); this.clampScroll(); }
    }
    if (opts.search !== undefined) { this.searchBox.value = opts.search; this.setSearch(opts.search); }
    this.render();
  }

  setSearch(q) {
    this.search = q.trim().toLowerCase();
    if (!this.search) { this.match = null; this.matchInfo.textContent = ''; this.render(); return; }
    const strs = this.ev.strings, m = new Uint8Array(strs.length);
    for (let i = 0; i < strs.length; i++) if (strs[i].toLowerCase().includes(this.search)) m[i] = 1;
    this.match = m;
    let n = 0;
    for (let i = 0, nm = this.ev.name; i < this.ev.n; i++) n += m[nm[i]];
    this.matchInfo.textContent = n.toLocaleString() + ' matching events';
    this.render();
  }

  nextMatch() {
    if (!this.match) return;
    const ev = this.ev, c = this.selected !== null ? ev.start[this.selected] : this.view.s;
    let best = -1, bestT = Infinity, first = -1, firstT = Infinity;
    for (let i = 0; i < ev.n; i++) {
      if (!this.match[ev.name[i]]) continue;
      const t = ev.start[i];
      if (t > c + 1e-9 && t < bestT) { best = i; bestT = t; }
      if (t < firstT) { first = i; firstT = t; }
    }
    const j = best >= 0 ? best : first;
    if (j >= 0) this.focusEvent(j, false);
  }

  /** Numbers for the measured range: length, GPU busy per stream, events that start in it. */
  measure() {
    if (!this.sel) { this.selInfo = ''; return; }
    const [a, b] = this.sel, ev = this.ev, parts = ['selection ' + fmtUs(b - a) + ' (' + fmtUs(a) + ' – ' + fmtUs(b) + ')'];
    let kernels = 0;
    ev.tracks.forEach(t => {
      if (t.type !== 'stream') return;
      let busy = 0;
      for (let l = t.lane0; l < t.lane0 + t.lanes; l++) {
        const o0 = ev.laneOff[l], o1 = ev.laneOff[l + 1];
        let i = lowerBound(ev.start, a - ev.laneMaxDur[l], o0, o1);
        for (; i < o1 && ev.start[i] < b; i++) {
          const ov = Math.min(b, ev.end(i)) - Math.max(a, ev.start[i]);
          if (ov > 0 && l === t.lane0) busy += ov;
          if (ev.kind[i] === ev.K.kernel && ev.start[i] >= a) kernels++;
        }
      }
      if (busy > 0) parts.push(t.label + (MULTI ? ' (rank ' + t.rank + ')' : '') + ' busy ' + pct(busy / (b - a), 1));
    });
    parts.push(kernels.toLocaleString() + ' kernels start in it');
    this.selInfo = parts.join(' · ');
  }

  updateInfo() {
    const span = this.view.e - this.view.s;
    const txt = [(this.selInfo && this.sel ? this.selInfo : 'view ' + fmtUs(this.view.s) + ' – ' + fmtUs(this.view.e) + ' (' + fmtUs(span) + ')'),
      this.ev.n.toLocaleString() + ' events' + (TM.dropped ? ' (' + TM.dropped.toLocaleString() + ' short host events left out)' : '')];
    if (this.infoText !== txt.join('|')) {
      this.infoText = txt.join('|');
      clear(this.info);
      for (const t of txt) this.info.appendChild(h('span', {text: t}));
    }
  }

  /** For tests: a visible event of the given kind, as a point in page coordinates. */
  locate(kind) {
    const K = this.ev.K[kind], rect = this.canvas.getBoundingClientRect();
    for (const row of this.rows) {
      if (row.kind !== 'track') continue;
      for (let k = 0; k < row.shown; k++) {
        const l = row.t.lane0 + k, o0 = this.ev.laneOff[l], o1 = this.ev.laneOff[l + 1];
        for (let i = lowerBound(this.ev.start, this.view.s, o0, o1); i < o1 && this.ev.start[i] < this.view.e; i++) {
          if (this.ev.kind[i] !== K) continue;
          const box = this.eventBox(i);
          if (!box || box.y < this.axisH || box.y + box.h > this.H) continue;
          const x0 = Math.max(box.x, this.gutter), x1 = Math.min(box.x + box.w, this.W);  // its visible part
          if (x1 - x0 < 4) continue;
          return {x: rect.left + (x0 + x1) / 2, y: rect.top + box.y + box.h / 2, name: this.ev.str(i), index: i};
        }
      }
    }
    return null;
  }
}

// ============================================================================================
// 6. tables and drill-down sections
// ============================================================================================
/** A sortable, filterable table. columns: [{key, label, fmt, text, title}], rows: objects. */
function dataTable(container, columns, rows, opts) {
  opts = opts || {};
  const limitStep = opts.limit || 300;
  let limit = limitStep, sortKey = opts.sort || null, desc = opts.desc !== false, filter = '';
  const bar = h('div', {class: 'tablebar'});
  const input = h('input', {type: 'search', placeholder: opts.placeholder || 'filter…', 'aria-label': 'filter rows'});
  input.addEventListener('input', () => { filter = input.value.trim().toLowerCase(); limit = limitStep; draw(); });
  const count = h('span', {class: 'muted'});
  append(bar, opts.filter === false ? null : input, opts.controls || null, count);
  const wrap = h('div', {class: 'tablewrap'});
  const table = h('table', {});
  const thead = h('thead', {}), tbody = h('tbody', {});
  const tr = h('tr', {});
  const ths = columns.map(c => {
    const th = h('th', {class: c.text ? 'text' : '', text: c.label, title: c.title || ''});
    th.addEventListener('click', () => { if (sortKey === c.key) desc = !desc; else { sortKey = c.key; desc = !c.text; } draw(); });
    tr.appendChild(th);
    return th;
  });
  thead.appendChild(tr); table.appendChild(thead); table.appendChild(tbody); wrap.appendChild(table);
  const more = h('button', {type: 'button', text: 'show more', onclick: () => { limit += limitStep * 4; draw(); }});
  append(container, bar, wrap, more);
  const textKeys = columns.filter(c => c.text).map(c => c.key);
  const state = {extraFilter: null};
  function draw() {
    let rs = rows;
    if (filter) rs = rs.filter(r => textKeys.some(k => String(r[k] === null || r[k] === undefined ? '' : r[k]).toLowerCase().includes(filter)));
    if (state.extraFilter) rs = rs.filter(state.extraFilter);
    if (sortKey) {
      const col = columns.find(c => c.key === sortKey), val = col.sortval || (r => r[sortKey]);
      rs = rs.slice().sort((a, b) => {
        const x = val(a), y = val(b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * (desc ? -1 : 1);
      });
    }
    ths.forEach((th, i) => { th.classList.toggle('sorted-asc', columns[i].key === sortKey && !desc); th.classList.toggle('sorted-desc', columns[i].key === sortKey && desc); });
    clear(tbody);
    for (const r of rs.slice(0, limit)) {
      const row = h('tr', {class: opts.onrow ? 'clickable' : ''});
      for (const c of columns) {
        const v = r[c.key];
        const txt = c.fmt ? c.fmt(v, r) : (v === null || v === undefined ? '–' : String(v));
        row.appendChild(h('td', {class: (c.text ? 'text' : '') + (c.name ? ' name' : ''), text: txt, title: c.name ? String(v) : null}));
      }
      if (opts.onrow) row.addEventListener('click', () => opts.onrow(r));
      tbody.appendChild(row);
    }
    count.textContent = Math.min(limit, rs.length).toLocaleString() + ' of ' + rs.length.toLocaleString() + ' rows' + (opts.note ? ' · ' + opts.note : '');
    more.style.display = rs.length > limit ? '' : 'none';
  }
  draw();
  state.redraw = draw;
  return state;
}

function kv(pairs) {
  return h('div', {class: 'kv'}, ...pairs.flatMap(([k, v]) => [h('div', {text: k}), h('div', {text: v})]));
}

/** Roofline: achieved FLOP/s against FLOP per DRAM byte, log-log, under the device's peaks. */
function rooflineChart(container, points, roof) {
  const W = Math.max(360, Math.min(760, container.clientWidth || 640)), H = 300;
  const m = {l: 64, r: 12, t: 12, b: 40};
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  const xs = points.map(p => p.intensity), ys = points.map(p => p.gflops);
  const peakF = roof.peak_fp32_gflops || Math.max(...ys) * 2, bw = roof.peak_dram_gbs;
  const x0 = Math.pow(10, Math.floor(Math.log10(Math.min(0.01, ...xs))));
  const x1 = Math.pow(10, Math.ceil(Math.log10(Math.max(1000, ...xs))));
  const y0 = Math.pow(10, Math.floor(Math.log10(Math.max(1e-3, Math.min(1, ...ys)))));
  const y1 = Math.pow(10, Math.ceil(Math.log10(Math.max(peakF, ...ys) * 1.5)));
  const X = v => m.l + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * pw;
  const Y = v => m.t + ph - (Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0)) * ph;
  const svg = s('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'roofline', class: 'roofline'});
  for (let v = y0; v <= y1 * 1.0001; v *= 10) {
    svg.appendChild(s('line', {x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: 'grid'}));
    svg.appendChild(s('text', {x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end', text: v >= 1000 ? (v / 1000) + ' TF' : v + ' GF'}));
  }
  for (let v = x0; v <= x1 * 1.0001; v *= 10) svg.appendChild(s('text', {x: X(v), y: H - m.b + 14, 'text-anchor': 'middle', text: v >= 1e4 ? '1e' + Math.round(Math.log10(v)) : String(v)}));
  svg.appendChild(s('text', {x: m.l + pw / 2, y: H - 6, 'text-anchor': 'middle', text: 'FLOP per DRAM byte (arithmetic intensity)'}));
  if (bw) {  // memory roof up to the ridge, then the compute roof
    const ridge = peakF / bw;
    const a = Math.max(x0, y0 / bw);
    svg.appendChild(s('path', {d: `M${X(a)},${Y(a * bw)}L${X(Math.min(ridge, x1))},${Y(Math.min(ridge, x1) * bw)}`, fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5, class: 'roof'}));
    svg.appendChild(s('text', {x: X(a) + 4, y: Y(a * bw) - 6, text: `DRAM ${num(bw, 0)} GB/s`, class: 'rooflabel'}));
  }
  if (roof.peak_fp32_gflops) {
    const from = bw ? Math.max(x0, peakF / bw) : x0;
    svg.appendChild(s('path', {d: `M${X(from)},${Y(peakF)}H${X(x1)}`, fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5, class: 'roof'}));
    svg.appendChild(s('text', {x: W - m.r - 4, y: Y(peakF) - 6, 'text-anchor': 'end', text: `FP32 FMA ${num(peakF / 1000, 1)} TFLOP/s`, class: 'rooflabel'}));
  }
  for (const p of points) {
    const c = s('circle', {cx: X(p.intensity), cy: Y(p.gflops), r: 5, class: p.findings.some(f => f.est_kernel_saving_pct !== null) ? 'pt bad' : 'pt'});
    c.addEventListener('mousemove', e => showTip(e, [p.name, `${num(p.gflops, 0)} GFLOP/s at ${num(p.intensity, 2)} FLOP/B`, ...p.findings.map(f => f.title)]));
    c.addEventListener('mouseleave', hideTip);
    svg.appendChild(c);
  }
  container.appendChild(svg);
}

function renderProfiled(el) {
  const kp = R.kernel_profiles;
  if (!kp || !kp.kernels.length) return;
  el.appendChild(h('h3', {text: 'Inside the kernels (Nsight Compute)'}));
  el.appendChild(h('p', {class: 'note', text: 'One launch of each kernel profiled by Nsight Compute (its counters, under ncu\'s clock control). ms/step: the run\'s time in that kernel per steady step (matched by name and launch configuration). Each finding estimates the share of the kernel\'s time a fix saves, from a speed-of-light model (see docs/rules).'}));
  const pts = kp.kernels.filter(k => k.gflops && k.intensity);
  if (pts.length) rooflineChart(el, pts, kp.roofline);
  else el.appendChild(h('p', {class: 'note', text: 'No profiled kernel did floating-point work: none sits on the roofline chart (DRAM % of peak in the table).'}));
  const geo = v => v ? '(' + v.join(', ') + ')' : '–';
  const rows = kp.kernels.map(k => Object.assign({}, k, {top: k.findings.length ? k.findings[0].id.replace('kernel_', '') + (k.findings[0].est_kernel_saving_pct !== null ? ' −' + num(k.findings[0].est_kernel_saving_pct, 0) + '%' : '') : '–'}));
  const cols = [
    {key: 'name', label: 'kernel', text: true, name: true},
    MULTI ? {key: 'rank', label: 'rank'} : null,
    {key: 'ms_per_step', label: 'ms/step', fmt: v => num(v, 3)},
    {key: 'dur_us', label: 'µs (ncu)', fmt: v => num(v, 1)},
    {key: 'grid', label: 'grid', fmt: geo},
    {key: 'block', label: 'block', fmt: geo},
    {key: 'dram_gbs', label: 'DRAM GB/s', fmt: v => num(v, 0)},
    {key: 'dram_pct_of_peak', label: 'of peak', fmt: v => pct(v)},
    {key: 'gflops', label: 'GFLOP/s', fmt: v => num(v, 0)},
    {key: 'achieved_occupancy', label: 'occ. achieved', fmt: v => pct(v)},
    {key: 'theoretical_occupancy', label: 'theoretical', fmt: v => pct(v)},
    {key: 'registers', label: 'regs'},
    {key: 'top', label: 'finding', text: true},
  ].filter(Boolean);
  dataTable(el, cols, rows, {sort: 'ms_per_step', placeholder: 'filter profiled kernels…', onrow: r => { location.hash = '#findings'; }});
  const hot = kp.kernels.filter(k => k.hot_lines && k.hot_lines.length);
  if (hot.length) {
    el.appendChild(h('h3', {text: 'Hot source lines (warp-stall samples)'}));
    for (const k of hot) {
      el.appendChild(h('p', {class: 'hotk', text: k.name}));
      el.appendChild(h('ul', {class: 'hotlines'}, ...k.hot_lines.map(l => h('li', {text: pct(l.share) + '  ' + (l.file ? l.file.split('/').pop() + ':' : 'line ') + l.line + (l.source ? '  ' + l.source.trim() : '')}))));
    }
  }
}

function renderKernels() {
  const el = clear(body('kernels'));
  const rows = U.kernels;
  renderProfiled(el);
  if (!rows.length) { el.appendChild(h('p', {class: 'note', text: 'No GPU kernels in this run.'})); return; }
  el.appendChild(h('p', {class: 'note', text: 'Per kernel name over the steady-state steps (whole run when there are none). Geometry, registers and occupancy are those of the configuration with the most time. Theoretical occupancy is computed from the device limits (CUDA occupancy calculation); SM coverage = min(1, blocks / SMs); waves = blocks / (resident blocks per SM × SMs). Click a row to find the kernel in the timeline.'}));
  const cats = [...new Set(rows.map(r => r.category))].sort();
  const sel = h('select', {'aria-label': 'category'}, h('option', {value: '', text: 'all categories'}), ...cats.map(c => h('option', {value: c, text: c})));
  const geo = v => v ? '(' + v.join(', ') + ')' : '–';
  const cols = [
    {key: 'name', label: 'kernel', text: true, name: true},
    MULTI ? {key: 'rank', label: 'rank'} : null,
    {key: 'category', label: 'category', text: true},
    {key: 'calls', label: 'calls', fmt: v => v.toLocaleString()},
    {key: 'total_ns', label: 'total', fmt: fmtNs},
    {key: 'share', label: 'share', fmt: v => pct(v, 1)},
    {key: 'mean_ns', label: 'mean', fmt: fmtNs},
    {key: 'median_ns', label: 'median', fmt: fmtNs},
    {key: 'min_ns', label: 'min', fmt: fmtNs},
    {key: 'max_ns', label: 'max', fmt: fmtNs},
    {key: 'grid', label: 'grid', fmt: geo, sortval: r => r.blocks},
    {key: 'block', label: 'block', fmt: geo, sortval: r => r.threads_per_block},
    {key: 'registers', label: 'regs'},
    {key: 'shared_memory', label: 'smem', fmt: v => v === null ? '–' : fmtBytes(v)},
    {key: 'occupancy', label: 'occupancy', fmt: v => pct(v), title: 'theoretical occupancy'},
    {key: 'occupancy_limiter', label: 'limited by', text: true},
    {key: 'sm_coverage', label: 'SM cov.', fmt: v => pct(v)},
    {key: 'waves', label: 'waves', fmt: v => num(v, 2)},
    {key: 'tensor_cores', label: 'TC', fmt: v => v === true ? 'yes' : v === false ? 'no' : '?'},
    {key: 'precision', label: 'precision', text: true},
  ].filter(Boolean);
  const t = dataTable(el, cols, rows, {sort: 'total_ns', controls: h('label', {}, 'category ', sel), placeholder: 'filter kernels by name…',
    onrow: r => { openTimeline(0, TIMELINE ? TIMELINE.ev.endUs : 1, {search: r.name, rank: r.rank}); if (TIMELINE) { TIMELINE.band = null; TIMELINE.nextMatch(); } }});
  sel.addEventListener('change', () => { t.extraFilter = sel.value ? (r => r.category === sel.value) : null; t.redraw(); });
  if (U.kernels_top_only) el.appendChild(h('p', {class: 'warnnote', text: 'This run has too many kernel launches for the full table in the page: the ' + rows.length + ' kernel names with the most time are listed (every launch is still in the timeline).'}));
  const cat = Object.entries(U.categories_ms).sort((a, b) => b[1] - a[1]);
  if (cat.length) el.appendChild(h('p', {class: 'note', text: 'Kernel time by category (steady steps): ' + cat.map(([c, v]) => c + ' ' + fmtMs(v)).join(' · ')}));
}

function renderCopies() {
  const el = clear(body('copies'));
  if (!U.copies.total) { el.appendChild(h('p', {class: 'note', text: 'No memory copies in this run.'})); return; }
  el.appendChild(h('p', {class: 'note', text: 'Per direction over the steady-state steps. Bandwidth = bytes / copy time (1 B/ns = 1 GB/s). Overlap = copy time during which a kernel ran on the same GPU; exposed = the rest. Pageable host memory is staged by the driver and blocks the host; pinned memory allows async copies.'}));
  for (const rank of RANKS) {
    const c = R.copies[String(rank)];
    if (!c) continue;
    if (MULTI) el.appendChild(h('h3', {text: 'Rank ' + rank}));
    const dirs = c.directions.filter(d => d.count > 0).map(d => ({...d, pageable_n: d.pageable.count, pinned_n: d.pinned.count,
      overlap: d.ns ? d.overlap_ns / d.ns : null}));
    dataTable(el, [
      {key: 'direction', label: 'direction', text: true}, {key: 'count', label: 'copies'},
      {key: 'bytes', label: 'bytes', fmt: fmtBytes}, {key: 'ns', label: 'time', fmt: fmtNs},
      {key: 'bandwidth_gbs', label: 'GB/s', fmt: v => num(v, 1)}, {key: 'median_bytes', label: 'median size', fmt: fmtBytes},
      {key: 'pageable_n', label: 'pageable'}, {key: 'pinned_n', label: 'pinned'}, {key: 'api_async', label: 'async calls'},
      {key: 'host_blocking', label: 'host-blocking'}, {key: 'tiny_count', label: '< 64 KB'},
      {key: 'overlap', label: 'overlapped', fmt: v => pct(v)}, {key: 'exposed_ns', label: 'exposed', fmt: fmtNs},
    ], dirs, {filter: false, sort: 'ns'});
    el.appendChild(h('p', {class: 'note', text: `Per step: ${num(c.mean_count_per_step, 1)} copies, ${fmtNs(c.mean_ns_per_step)} copy time, ${fmtNs(c.mean_exposed_ns_per_step)} exposed; HtoD ${fmtBytes(c.mean_htod_bytes_per_step)}, DtoH ${fmtBytes(c.mean_dtoh_bytes_per_step)}.`}));
  }
  el.appendChild(h('h3', {text: 'Longest copies' + (U.copies.total > U.copies.rows.length ? ' (' + U.copies.rows.length + ' of ' + U.copies.total + ')' : '')}));
  dataTable(el, [
    MULTI ? {key: 'rank', label: 'rank'} : null,
    {key: 'start_us', label: 'at', fmt: fmtUs}, {key: 'dur_us', label: 'duration', fmt: fmtUs},
    {key: 'kind', label: 'direction', text: true}, {key: 'bytes', label: 'bytes', fmt: fmtBytes},
    {key: 'gbs', label: 'GB/s', fmt: v => num(v, 1)}, {key: 'src', label: 'from', text: true}, {key: 'dst', label: 'to', text: true},
    {key: 'device', label: 'GPU'}, {key: 'stream', label: 'stream'},
  ].filter(Boolean), U.copies.rows, {sort: 'dur_us', limit: 50, filter: false,
    onrow: r => openTimeline(r.start_us - r.dur_us * 20, r.start_us + r.dur_us * 21, {rank: r.rank})});
}

function renderSyncs() {
  const el = clear(body('syncs'));
  const evs = U.sync_events;
  el.appendChild(h('p', {class: 'note', text: 'Every point where a host thread waited for the GPU: explicit syncs (cudaDeviceSynchronize, cudaStreamSynchronize…), scalar reads (.item(), .cpu(): a DtoH copy plus a sync inside one op) and blocking copies. Blocked time is the API time; call sites come from the enclosing framework ops and user Python frames.'}));
  for (const rank of RANKS) {
    const sy = R.syncs[String(rank)];
    if (!sy) continue;
    if (MULTI) el.appendChild(h('h3', {text: 'Rank ' + rank}));
    el.appendChild(kv([['in steady steps', `${sy.count} sync points, ${fmtNs(sy.blocked_ns)} blocked`],
      ['per step', `${num(sy.mean_count_per_step, 1)} syncs, ${fmtNs(sy.mean_blocked_ns_per_step)} blocked`],
      ['by kind', sy.by_kind.map(k => k.kind + ' ' + k.count + ' (' + fmtNs(k.blocked_ns) + ')').join(' · ')]]));
    if (sy.call_sites.length) {
      el.appendChild(h('h3', {text: 'Call sites'}));
      dataTable(el, [{key: 'name', label: 'call site', text: true, name: true}, {key: 'kind', label: 'kind', text: true},
        {key: 'api', label: 'API', text: true}, {key: 'count', label: 'count'}, {key: 'blocked_ns', label: 'blocked', fmt: fmtNs},
        {key: 'op', label: 'op', text: true}, {key: 'outer_op', label: 'outer op', text: true}],
      sy.call_sites, {sort: 'blocked_ns', filter: false});
    }
  }
  if (!evs.length) { el.appendChild(h('p', {class: 'note', text: 'No host-device sync points in this run.'})); return; }
  el.appendChild(h('h3', {text: 'Sync points (' + evs.length + ')'}));
  dataTable(el, [
    MULTI ? {key: 'rank', label: 'rank'} : null,
    {key: 'start_us', label: 'at', fmt: fmtUs}, {key: 'step', label: 'step', fmt: v => v < 0 ? 'outside' : String(v)},
    {key: 'kind', label: 'kind', text: true}, {key: 'blocked_ns', label: 'blocked', fmt: fmtNs},
    {key: 'api', label: 'API', text: true}, {key: 'frame', label: 'user frame', text: true, name: true},
    {key: 'op', label: 'op', text: true}, {key: 'tid', label: 'thread'},
  ].filter(Boolean), evs, {sort: 'blocked_ns', limit: 100,
    onrow: r => openTimeline(r.start_us - 50, r.end_us + 50, {rank: r.rank})});
}

function renderInput() {
  const el = clear(body('input'));
  el.appendChild(h('p', {class: 'note', text: 'Time the training thread waited for its next batch (data loader __next__, tf.data IteratorGetNext), per step, and how much of it the GPU sat idle. The first step often waits for worker start-up; it is reported separately.'}));
  let any = false;
  for (const rank of RANKS) {
    const inp = R.input[String(rank)];
    if (!inp) continue;
    if (MULTI) el.appendChild(h('h3', {text: 'Rank ' + rank}));
    if (!inp.count) { el.appendChild(h('p', {class: 'note', text: 'No input waits recorded (no data-loader events in the trace).'})); continue; }
    any = true;
    el.appendChild(kv([
      ['verdict', (inp.verdict === 'unknown' ? 'not measured' : inp.verdict + ' input-bound') + ` (${num(inp.input_bound_pct, 1)}% of the step waiting for input while the GPU idled; TF Profiler tiers: >20% highly, 5–20% moderately)`],
      ['wait per step', `mean ${fmtNs(inp.mean_wait_ns_per_step)}, median ${fmtNs(inp.median_wait_ns_per_step)}, max ${fmtNs(inp.max_wait_ns_per_step)} (${pct(inp.mean_share, 1)} of the step)`],
      ['GPU idle while waiting', fmtNs(inp.mean_gpu_idle_wait_ns_per_step) + ' per step'],
      ['first step', fmtNs(inp.first_step_wait_ns) + (inp.first_step_outlier ? ' (outlier: worker start-up)' : '') + '; mean of the others ' + fmtNs(inp.mean_wait_ns_excl_first)],
      ['loader settings', inp.dataloader ? Object.entries(inp.dataloader).map(([k, v]) => k + '=' + JSON.stringify(v)).join(', ') : 'not recorded (imported trace)'],
    ]));
    const steps = U.steps.filter(x => x.rank === rank);
    const chart = h('div', {class: 'chart'});
    el.appendChild(chart);
    stackedBars(chart, steps.map((x, i) => ({
      label: String(x.number), dim: !x.steady,
      parts: {input_wait: (inp.gpu_idle_wait_ns_per_step[i] || 0) / 1e6, idle: Math.max(0, ((inp.wait_ns_per_step[i] || 0) - (inp.gpu_idle_wait_ns_per_step[i] || 0)) / 1e6)},
      tip: ['Step ' + x.number, 'waited ' + fmtNs(inp.wait_ns_per_step[i]) + ' (' + pct(inp.share_per_step[i], 1) + ' of the step)', 'GPU idle meanwhile ' + fmtNs(inp.gpu_idle_wait_ns_per_step[i])],
      onclick: () => openTimeline(x.start_us, x.end_us, {rank, search: 'DataLoader'}),
    })), {height: 150, fmtY: v => num(v, v < 1 ? 2 : 1) + ' ms', xlabel: 'step (red: GPU idle while waiting, grey: GPU busy meanwhile)', aria: 'input wait per step'});
  }
  if (!any && !RANKS.length) el.appendChild(h('p', {class: 'note', text: 'No ranks.'}));
}

function renderMemory() {
  const el = clear(body('memory'));
  const mem = TM.counters.filter(c => c.kind === 'memory');
  if (!mem.length) { el.appendChild(h('p', {class: 'note', text: 'No allocator events in this run (torch.profiler records them with profile_memory=True).'})); return; }
  el.appendChild(h('p', {class: 'note', text: 'Caching-allocator memory after each allocation or free: allocated (live tensors) and reserved (held by the allocator). Each point is the maximum of its time bucket, so peaks are kept. Click to open that time in the timeline.'}));
  const grid = h('div', {});
  el.appendChild(grid);
  for (const c of mem) {
    const cap = c.capacity;
    grid.appendChild(h('h3', {text: c.label + (MULTI ? ' · rank ' + c.rank : '')}));
    grid.appendChild(kv([
      ['peak allocated', fmtBytes(c.peak.allocated) + (cap ? ' (' + pct(c.peak.allocated / cap, 1) + ' of ' + fmtBytes(cap) + ')' : '')],
      ['peak reserved', fmtBytes(c.peak.reserved) + (cap ? ' (' + pct(c.peak.reserved / cap, 1) + ')' : '')],
      ['allocator events', c.events.toLocaleString()],
    ]));
    grid.appendChild(h('div', {class: 'legend'}, h('span', {}, h('span', {class: 'sw', style: {background: '#2a9fd6'}}), 'allocated'),
      h('span', {}, h('span', {class: 'sw', style: {background: '#e08a00'}}), 'reserved')));
    const chart = h('div', {class: 'chart'});
    grid.appendChild(chart);
    const draw = () => lineChart(chart, c.t_us, [
      {name: 'allocated', values: c.series.allocated, color: '#2a9fd6', step: true},
      {name: 'reserved', values: c.series.reserved, color: '#e08a00', step: true}],
    {fmtY: fmtBytes, t0: 0, t1: TM.end_us, aria: 'memory over time', onclick: t => openTimeline(Math.max(0, t - 2000), t + 2000, {rank: c.rank})});
    draw();
    window.addEventListener('resize', debounce(draw, 150));
  }
}

function renderSamples() {
  const el = clear(body('samples'));
  const smp = TM.counters.filter(c => c.kind === 'sample');
  if (!smp.length) { el.appendChild(h('p', {class: 'note', text: 'No system or GPU samples in this run (stepscope record samples CPU, memory, disk, network and NVML metrics; imported traces have none).'})); return; }
  const grid = h('div', {class: 'grid2'});
  el.appendChild(grid);
  for (const c of smp) {
    const box = h('div', {}, h('h3', {text: c.label + (MULTI ? ' · rank ' + c.rank : '') + (c.unit ? ' (' + c.unit + ')' : '')}));
    const chart = h('div', {class: 'chart'});
    box.appendChild(chart); grid.appendChild(box);
    const name = Object.keys(c.series)[0];
    const draw = () => lineChart(chart, c.t_us, [{name, values: c.series[name], color: '#16a37f'}],
      {height: 130, fmtY: v => num(v, Math.abs(v) < 10 ? 2 : 0) + (c.unit ? ' ' + c.unit : ''), t0: 0, t1: TM.end_us,
        onclick: t => openTimeline(Math.max(0, t - 5000), t + 5000, {rank: c.rank})});
    draw();
    window.addEventListener('resize', debounce(draw, 150));
  }
}

function renderRanks() {
  const el = clear(body('ranks'));
  if (!MULTI) { el.appendChild(h('p', {class: 'note', text: 'Single rank: nothing to compare. With several ranks this section shows per-rank step time and breakdown, and which rank is the straggler.'})); return; }
  const rows = R.ranks.map(r => ({rank: r.rank, steps: r.steps, steady: r.steady_steps, mean: r.step_time ? r.step_time.mean_ms : null,
    median: r.step_time ? r.step_time.median_ms : null, p95: r.step_time ? r.step_time.p95_ms : null, busy: r.gpu_busy_pct,
    kernels: r.kernels, kernel_ms: r.kernel_time_ms, comm: r.breakdown_ms.communication, breakdown: r.breakdown_ms}));
  const means = rows.map(r => r.mean).filter(x => x !== null);
  if (means.length > 1) {
    const mx = Math.max(...means), mn = Math.min(...means), slow = rows.find(r => r.mean === mx);
    el.appendChild(h('p', {text: `Slowest rank ${slow.rank}: mean step ${fmtMs(mx)}, ${pct((mx - mn) / mn, 1)} slower than the fastest (${fmtMs(mn)}).`}));
  }
  dataTable(el, [{key: 'rank', label: 'rank'}, {key: 'steps', label: 'steps'}, {key: 'steady', label: 'steady'},
    {key: 'mean', label: 'mean step', fmt: fmtMs}, {key: 'median', label: 'median', fmt: fmtMs}, {key: 'p95', label: 'p95', fmt: fmtMs},
    {key: 'busy', label: 'GPU busy', fmt: v => num(v, 1) + '%'}, {key: 'kernels', label: 'kernels'},
    {key: 'kernel_ms', label: 'kernel time', fmt: fmtMs}, {key: 'comm', label: 'exposed comm / step', fmt: fmtMs}],
  rows, {filter: false, sort: 'rank', desc: false});
  const chart = h('div', {class: 'chart'});
  el.appendChild(h('h3', {text: 'Mean breakdown per rank'}));
  el.appendChild(chart);
  stackedBars(chart, rows.map(r => ({label: 'rank ' + r.rank, parts: r.breakdown,
    tip: ['Rank ' + r.rank, 'mean step ' + fmtMs(r.mean)].concat(CATS.filter(c => r.breakdown[c] > 0).map(c => CAT_LABEL[c] + ': ' + fmtMs(r.breakdown[c]))),
    onclick: () => { const st = U.steps.filter(x => x.rank === r.rank); if (st.length) openTimeline(st[0].start_us, st[st.length - 1].end_us, {rank: r.rank}); }})),
  {height: 200, fmtY: v => num(v, 1) + ' ms', aria: 'per-rank breakdown'});
  renderCollectives(el);
}

/** Collectives across ranks: the step x rank wait heat map and the collectives by kind. */
function renderCollectives(el) {
  const C = R.collectives;
  if (!C || !C.matched) {
    el.appendChild(h('p', {class: 'note', text: 'No collectives could be matched across ranks (none recorded, or one rank only).'}));
    return;
  }
  el.appendChild(h('h3', {text: 'Waiting inside collectives, per step and rank'}));
  el.appendChild(h('p', {class: 'note', text: `${C.matched} collectives matched across ranks by ${C.matched_by}` +
    (C.unmatched ? `, ${C.unmatched} calls left unmatched` : '') +
    '. A cell is the time the rank waited inside collectives for a later rank in that step (kernel duration minus the shortest over the ranks); ● marks the step\'s late rank. Click a cell to open the step.'}));
  const heat = C.heat, max = Math.max(1e-9, ...heat.wait_ms.flat());
  const grid = h('div', {class: 'heat', role: 'grid', 'aria-label': 'wait per step and rank'});
  grid.style.gridTemplateColumns = `auto repeat(${heat.ranks.length}, minmax(2.2em, 1fr))`;
  grid.appendChild(h('div', {class: 'muted', text: 'step'}));
  for (const r of heat.ranks) grid.appendChild(h('div', {class: 'muted', text: 'rank ' + r}));
  heat.steps.forEach((step, i) => {
    grid.appendChild(h('div', {class: 'muted', text: String(step)}));
    heat.ranks.forEach((r, j) => {
      const w = heat.wait_ms[i][j], late = heat.late[i] === r;
      const cell = h('div', {class: 'cell', text: late ? '●' : '', title: `step ${step}, rank ${r}: waited ${fmtMs(w)}` + (late ? ' (late rank)' : '')});
      cell.style.background = `rgba(200, 60, 160, ${(0.08 + 0.92 * w / max).toFixed(3)})`;
      cell.addEventListener('click', () => {
        const st = U.steps.find(x => x.rank === r && x.number === step);
        if (st) openTimeline(st.start_us, st.end_us, {rank: r});
      });
      grid.appendChild(cell);
    });
  });
  el.appendChild(grid);
  el.appendChild(h('h3', {text: 'Collectives by kind'}));
  dataTable(el, [{key: 'op', label: 'op', text: true}, {key: 'name', label: 'name', text: true, name: true},
    {key: 'pg', label: 'group', text: true}, {key: 'bytes', label: 'size', fmt: v => v === null ? '–' : fmtBytes(v)},
    {key: 'ranks', label: 'ranks'}, {key: 'calls', label: 'calls'},
    {key: 'transfer_ms', label: 'transfer (median)', fmt: fmtMs}, {key: 'wait_ms', label: 'wait (median)', fmt: fmtMs},
    {key: 'busbw_gbs', label: 'bus GB/s', fmt: v => num(v, 0)}],
  C.groups, {filter: false, sort: 'transfer_ms'});
  dataTable(el, [{key: 'rank', label: 'rank'}, {key: 'wait_ms', label: 'waiting / step', fmt: fmtMs},
    {key: 'late_calls', label: 'late at'}, {key: 'calls', label: 'matched calls'}],
  C.ranks, {filter: false, sort: 'wait_ms'});
}

function renderFooter() {
  const f = clear(document.getElementById('footer'));
  const diags = R.run.diagnostics || [];
  if (diags.length) f.appendChild(h('details', {}, h('summary', {text: diags.length + ' diagnostic(s) from the import'}),
    h('ul', {}, ...diags.map(d => h('li', {text: d.level + ': ' + d.message + (d.count > 1 ? ' (×' + d.count + ')' : '')})))));
  if (R.host_trust && R.host_trust.note) f.appendChild(h('p', {class: 'warnnote', text: 'Host timings: ' + R.host_trust.note}));
  f.appendChild(h('p', {text: `${U.generator} · report ${R.schema} · generated ${U.generated} · what every number means: docs/report.md`}));
}

// ============================================================================================
// 7. boot
// ============================================================================================
const HOOK = window.__stepscope = {ready: false, errors: [], stepRanges};

function safe(name, fn) {
  try { fn(); } catch (err) {
    HOOK.errors.push(name + ': ' + err);
    const el = body(name);
    if (el) el.appendChild(h('p', {class: 'warnnote', text: 'This section could not be drawn: ' + err}));
    console.error(err);
  }
}

async function boot() {
  document.body.appendChild(tip);
  HOOK.scriptStartMs = SCRIPT_START;
  const status = document.getElementById('status');
  const T = HOOK.timings = {start: performance.now()};
  let pending = null;
  try {  // start decompressing first: the browser inflates while the overview is drawn
    pending = inflate(base64Bytes(document.getElementById('stepscope-blob').textContent));
  } catch (err) { pending = Promise.reject(err); }
  T.base64 = performance.now() - T.start;
  safe('overview', renderOverview);
  safe('findings', renderFindings);
  safe('remedies', renderRemedies);
  T.overview = performance.now() - T.start - T.base64;
  try {
    // the overview was drawn while the blob inflated: count decoding from here, plus base64
    const t = performance.now() - T.base64;
    const buf = await pending;
    T.inflate = performance.now() - t - T.base64;  // what was left of inflating after the overview
    const ev = new Events(TM, buf);
    HOOK.decodeMs = performance.now() - t;
    T.events = HOOK.decodeMs - T.base64 - T.inflate;
    const root = clear(body('timeline'));
    if (!ev.n) root.appendChild(h('p', {class: 'note', text: 'No events in this run.'}));
    TIMELINE = new Timeline(root, ev);
    const t2 = performance.now();
    TIMELINE.draw();
    T.firstDraw = performance.now() - t2;
    HOOK.timeline = TIMELINE;
    status.textContent = ev.n.toLocaleString() + ' events · decoded in ' + num(HOOK.decodeMs, 0) + ' ms';
  } catch (err) {
    HOOK.errors.push('timeline: ' + err);
    clear(body('timeline')).appendChild(h('p', {class: 'warnnote', text: 'The timeline could not be loaded: ' + err}));
    status.textContent = 'timeline unavailable';
    console.error(err);
  }
  safe('kernels', renderKernels);
  safe('copies', renderCopies);
  safe('syncs', renderSyncs);
  safe('input', renderInput);
  safe('memory', renderMemory);
  safe('samples', renderSamples);
  safe('ranks', renderRanks);
  safe('footer', renderFooter);
  T.sections = performance.now() - T.start - T.overview - (HOOK.decodeMs || 0) - (T.firstDraw || 0);
  HOOK.firstRenderMs = performance.now();
  performance.mark('stepscope-ready');
  HOOK.ready = true;
}

boot();
})();
