// common.js — shared by the plan explorer (plan.js) and the plan diff
// (diff.js): formatting, the plan model (buffers, lifetimes, live bytes per
// step) and the arena timeline drawn on a canvas (zoom, pan, hover, click).
// Every field beyond the documented core (docs/plan.md) is read defensively:
// plans from newer compilers may carry more, older ones less.
'use strict';

const GC = {};

GC.KIND_COLOR = {
  activation: '#4e79a7', actgrad: '#f28e2b', grad: '#76b7b2', input: '#59a14f',
  workspace: '#9c755f', comm: '#b07aa1', param: '#e15759', optstate: '#edc948',
};
GC.PHASE_COLOR = {fwd: '#4e79a7', bwd: '#f28e2b', opt: '#e15759', recompute: '#59a14f', comm: '#b07aa1'};
GC.REGION_COLOR = {params: '#e15759', grads: '#76b7b2', optstate: '#edc948', arena: '#4e79a7', host: '#bab0ac'};
// A region in device memory: all but the host region ("device": false, --offload).
GC.onDevice = (r) => r.device !== false;
const GC_SPARE = ['#8cd17d', '#ff9da7', '#bab0ac', '#d37295', '#a0cbe8', '#ffbe7d', '#86bcb6', '#f1ce63'];

// A colour for any name: the table's, else a stable spare one.
GC.colour = function (table, name) {
  if (table[name]) return table[name];
  let h = 0;
  for (const c of String(name)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return GC_SPARE[h % GC_SPARE.length];
};

GC.human = function (n) {
  if (typeof n !== 'number' || !isFinite(n)) return String(n);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = Math.abs(n), i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  const s = i === 0 ? v.toFixed(0) : v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
  return (n < 0 ? '-' : '') + s + ' ' + u[i];
};
GC.signed = (n) => (n > 0 ? '+' : n < 0 ? '\u2212' : '\u00b1') + GC.human(Math.abs(n));
GC.int = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : String(n));

GC.esc = function (s) {
  return String(s).replace(/[&<>"']/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
};
GC.$ = (id) => document.getElementById(id);

// A JSON value as short readable text (bytes in human units when the key says so).
GC.show = function (key, v) {
  if (typeof v === 'number' && /bytes|_bound|memory/.test(key)) return GC.human(v) + ' (' + GC.int(v) + ')';
  if (v === null || v === undefined) return '\u2014';
  if (typeof v === 'object') {
    const s = JSON.stringify(v);
    return s.length > 300 ? s.slice(0, 300) + '\u2026' : s;
  }
  return String(v);
};
// Key/value rows for an object: "<tr><th>k</th><td>v</td></tr>".
GC.kvRows = function (o, skip) {
  let h = '';
  for (const k of Object.keys(o || {})) {
    if (skip && skip.has(k)) continue;
    const v = o[k];
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length <= 12) {
      const inner = Object.keys(v).map((j) => GC.esc(j) + ': ' + GC.esc(GC.show(j, v[j]))).join(', ');
      h += '<tr><th>' + GC.esc(k) + '</th><td>' + (inner || '\u2014') + '</td></tr>';
    } else h += '<tr><th>' + GC.esc(k) + '</th><td>' + GC.esc(GC.show(k, v)) + '</td></tr>';
  }
  return h;
};

// The plan as the pages use it. Buffers are arena storage tensors with
// their in-place descendants (docs/plan.md "Buffers"): one rectangle each.
GC.model = function (P) {
  const T = Array.isArray(P.tensors) ? P.tensors : [];
  const S = Array.isArray(P.schedule) ? P.schedule : [];
  const nt = T.length, ns = S.length;
  const M = {P, T, S, nt, ns};
  const num = (v) => (typeof v === 'number' ? v : null);
  M.prod = new Int32Array(nt).fill(-1);
  M.cons = Array.from({length: nt}, () => []);
  S.forEach((op, s) => {
    for (const t of op.outputs || []) if (t >= 0 && t < nt && M.prod[t] < 0) M.prod[t] = s;
    for (const t of op.inputs || []) if (t >= 0 && t < nt) M.cons[t].push(s);
  });
  M.views = Array.from({length: nt}, () => []);
  T.forEach((t, i) => { const v = num(t.view_of); if (v !== null && v >= 0 && v < nt) M.views[v].push(i); });
  M.root = (i) => { let k = 0; while (num(T[i].view_of) !== null && k++ < nt) i = T[i].view_of; return i; };
  // steps that read t or a view of it
  M.readers = function (i) {
    const out = new Set(), stack = [i];
    while (stack.length) { const j = stack.pop(); M.cons[j].forEach((s) => out.add(s)); stack.push(...M.views[j]); }
    return [...out].sort((a, b) => a - b);
  };
  const live = (t) => num(t.view_of) === null && num(t.first) !== null && num(t.last) !== null;
  const head = (i) => { let k = 0; while (num(T[i].inplace_of) !== null && k++ < nt) i = T[i].inplace_of; return i; };
  const byHead = new Map();
  M.bufOf = new Int32Array(nt).fill(-1);
  M.buffers = [];
  T.forEach((t, i) => {
    if (!live(t) || t.region !== 'arena') return;
    const h = head(i);
    let b = byHead.get(h);
    if (!b) {
      b = {id: M.buffers.length, head: h, members: [], first: Infinity, last: -1, offset: T[h].offset || 0,
           size: 0, bytes: 0, kind: T[h].kind, phase: ''};
      byHead.set(h, b);
      M.buffers.push(b);
    }
    b.members.push(i);
    b.first = Math.min(b.first, t.first);
    b.last = Math.max(b.last, t.last);
    b.bytes = Math.max(b.bytes, t.bytes || 0);
    b.size = Math.max(b.size, Math.ceil((t.bytes || 0) / 256) * 256);
  });
  for (const b of M.buffers) {
    b.members.sort((x, y) => T[x].first - T[y].first || x - y);
    b.members.forEach((i) => { M.bufOf[i] = b.id; });
    b.phase = S[b.first] ? S[b.first].phase : '';
    b.name = T[b.members[0]].name;
  }
  M.bufOfTensor = (i) => M.bufOf[M.root(i)];
  // the member of buffer b live at step s (the child at a handover)
  M.memberAt = function (b, s) {
    let m = b.members[0];
    for (const i of b.members) if (T[i].first <= s) m = i;
    return m;
  };
  // live arena bytes per step, the peak (first step with the most)
  const d = new Float64Array(ns + 1);
  for (const b of M.buffers) if (b.first < ns) { d[b.first] += b.size; d[Math.min(b.last + 1, ns)] -= b.size; }
  M.liveBytes = new Float64Array(ns);
  let run = 0;
  M.peakStep = ns ? 0 : -1;
  M.peakBytes = 0;
  for (let s = 0; s < ns; s++) {
    run += d[s];
    M.liveBytes[s] = run;
    if (run > M.peakBytes) { M.peakBytes = run; M.peakStep = s; }
  }
  M.liveAt = (s) => M.buffers.filter((b) => b.first <= s && s <= b.last).sort((x, y) => y.size - x.size || x.id - y.id);
  M.regions = Array.isArray(P.regions) ? P.regions : [];
  M.region = (name) => M.regions.find((r) => r.name === name) || {};
  M.arenaBytes = M.region('arena').bytes || 0;
  M.arenaBound = M.region('arena').lower_bound || 0;
  M.ymax = Math.max(M.arenaBytes, M.arenaBound, M.buffers.reduce((m, b) => Math.max(m, b.offset + b.size), 0), 256);
  M.persistent = M.regions.filter((r) => r.name !== 'arena' && GC.onDevice(r)).reduce((s, r) => s + (r.bytes || 0), 0);
  M.hostBytes = M.regions.filter((r) => !GC.onDevice(r)).reduce((s, r) => s + (r.bytes || 0), 0);
  M.opName = (s) => (S[s] ? S[s].name + ' (' + S[s].op + ', ' + S[s].phase + ')' : '');
  M.srcText = function (src) {
    if (typeof src !== 'string') return null;
    const m = /^(.*):(\d+):\d+$/.exec(src);
    const lines = P.source_lines || {};
    return m ? lines[m[1] + ':' + m[2]] : null;
  };
  return M;
};

const GC_TENSOR_KNOWN = new Set(['id', 'name', 'kind', 'dtype', 'shape', 'bytes', 'region', 'offset', 'first',
  'last', 'inplace_of', 'view_of', 'src']);

// Everything about tensor i as HTML (hover and the selection panel).
GC.tensorHTML = function (M, i, s) {
  const t = M.T[i], e = GC.esc;
  const shape = Array.isArray(t.shape) ? '[' + t.shape.join(', ') + ']' : '?';
  let h = '<div class="tname">' + e(t.name) + '</div><table class="kv">';
  h += '<tr><th>kind</th><td>' + e(t.kind) + ' \u00b7 ' + e(t.dtype || '?') + ' ' + e(shape) + '</td></tr>';
  h += '<tr><th>bytes</th><td>' + GC.human(t.bytes) + ' (' + GC.int(t.bytes) + ')</td></tr>';
  h += '<tr><th>storage</th><td>' + e(t.region) + ' + ' + GC.int(t.offset) +
       (t.view_of !== null && t.view_of !== undefined ? ', view of ' + e(M.T[t.view_of] ? M.T[t.view_of].name : t.view_of) : '') + '</td></tr>';
  h += '<tr><th>steps</th><td>' + (t.first === null || t.first === undefined ? 'never used' : t.first + '\u2013' + t.last) + '</td></tr>';
  const p = M.prod[i];
  h += '<tr><th>producer</th><td>' + (p >= 0 ? 'step ' + p + ': ' + e(M.opName(p)) : 'none (' + e(t.kind) + ')') + '</td></tr>';
  if (t.src) {
    const line = M.srcText(t.src);
    h += '<tr><th>source</th><td>' + e(t.src) + (line !== null && line !== undefined ? '<pre class="src">' + e(line.trim()) + '</pre>' : '') + '</td></tr>';
  }
  const b = M.bufOf[i];
  if (b >= 0 && M.buffers[b].members.length > 1)
    h += '<tr><th>in place</th><td>' + M.buffers[b].members.map((j) => (j === i ? '<b>' + e(M.T[j].name) + '</b>' : e(M.T[j].name))).join(' \u2192 ') + '</td></tr>';
  h += GC.kvRows(Object.fromEntries(Object.entries(t).filter(([k]) => !GC_TENSOR_KNOWN.has(k))));
  return h + '</table>';
};

// ---------------------------------------------------------------- timeline
// x = schedule step, y = arena offset (0 at the bottom). `view` {x0, x1, y0,
// y1} may be shared by several timelines (the diff links two): change it,
// then call redraw() on each.
GC.Timeline = class {
  constructor(canvas, M, opt) {
    this.c = canvas; this.M = M; this.opt = opt || {};
    this.nsteps = this.opt.nsteps || Math.max(M.ns, 1);
    this.ymax = this.opt.ymax || M.ymax;
    this.view = this.opt.view || {x0: 0, x1: this.nsteps, y0: 0, y1: this.ymax};
    this.pad = {l: 78, r: 12, t: this.opt.label ? 40 : 28, b: 34};
    this.colourBy = 'kind';
    this.step = -1; this.sel = -1; this.match = null; this.hl = null;
    this.drawn = 0; this.pending = false;
    this._events();
  }
  reset() { Object.assign(this.view, {x0: 0, x1: this.nsteps, y0: 0, y1: this.ymax}); }
  size() {
    const r = this.c.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    const w = Math.max(200, Math.round(r.width)), h = Math.max(150, Math.round(r.height));
    if (this.c.width !== w * dpr || this.c.height !== h * dpr) { this.c.width = w * dpr; this.c.height = h * dpr; }
    this.w = w; this.h = h; this.dpr = dpr;
    this.pw = w - this.pad.l - this.pad.r; this.ph = h - this.pad.t - this.pad.b;
  }
  sx(s) { const v = this.view; return this.pad.l + (s - v.x0) / (v.x1 - v.x0) * this.pw; }
  sy(b) { const v = this.view; return this.pad.t + this.ph - (b - v.y0) / (v.y1 - v.y0) * this.ph; }
  stepAt(px) { const v = this.view; return v.x0 + (px - this.pad.l) / this.pw * (v.x1 - v.x0); }
  byteAt(py) { const v = this.view; return v.y0 + (this.pad.t + this.ph - py) / this.ph * (v.y1 - v.y0); }
  colourOf(b) {
    return this.colourBy === 'phase' ? GC.colour(GC.PHASE_COLOR, b.phase) : GC.colour(GC.KIND_COLOR, b.kind);
  }
  redraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }
  draw() {
    this.size();
    const g = this.c.getContext('2d'), M = this.M, p = this.pad;
    g.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    g.clearRect(0, 0, this.w, this.h);
    g.font = '11px sans-serif';
    // phase strip
    for (let s = 0; s < M.ns;) {
      let e = s + 1;
      while (e < M.ns && M.S[e].phase === M.S[s].phase) e++;
      const x0 = Math.max(this.sx(s), p.l), x1 = Math.min(this.sx(e), p.l + this.pw);
      if (x1 > x0) { g.fillStyle = GC.colour(GC.PHASE_COLOR, M.S[s].phase); g.fillRect(x0, p.t - 9, x1 - x0, 6); }
      s = e;
    }
    g.save();
    g.beginPath(); g.rect(p.l, p.t, this.pw, this.ph); g.clip();
    g.fillStyle = '#fafafa'; g.fillRect(p.l, p.t, this.pw, this.ph);
    let drawn = 0;
    const dim = this.match !== null;
    for (const b of M.buffers) {
      const x0 = this.sx(b.first), x1 = this.sx(b.last + 1);
      const y1 = this.sy(b.offset), y0 = this.sy(b.offset + b.size);
      if (x1 < p.l || x0 > p.l + this.pw || y1 < p.t || y0 > p.t + this.ph) continue;
      g.globalAlpha = dim && !this.match.has(b.id) && !(this.hl && this.hl.buf === b.id) ? 0.15 : 1;
      g.fillStyle = this.colourOf(b);
      const minH = dim && this.match.has(b.id) ? 3 : 1;   // search hits stay visible
      g.fillRect(x0, Math.min(y0, y1 - minH), Math.max(x1 - x0, 1), Math.max(y1 - y0, minH));
      if (y1 - y0 > 4 && x1 - x0 > 4) { g.strokeStyle = 'rgba(255,255,255,0.7)'; g.lineWidth = 0.5; g.strokeRect(x0, y0, x1 - x0, y1 - y0); }
      if (b.members.length > 1 && y1 - y0 > 3) {   // in-place handovers inside one buffer
        g.strokeStyle = 'rgba(255,255,255,0.9)'; g.lineWidth = 1; g.setLineDash([2, 2]);
        g.beginPath();
        for (const i of b.members.slice(1)) { const x = this.sx(M.T[i].first + 0.5); g.moveTo(x, y0 + 1); g.lineTo(x, y1 - 1); }
        g.stroke(); g.setLineDash([]);
      }
      drawn++;
    }
    g.globalAlpha = 1;
    this.drawn = drawn;
    if (this.hl) {   // the selection: outline, and ticks at the steps that read it
      const b = M.buffers[this.hl.buf];
      const x0 = this.sx(b.first), x1 = this.sx(b.last + 1), y0 = this.sy(b.offset + b.size), y1 = this.sy(b.offset);
      g.strokeStyle = '#000'; g.lineWidth = 2; g.strokeRect(x0 - 1, y0 - 1, Math.max(x1 - x0, 1) + 2, Math.max(y1 - y0, 1) + 2);
      g.fillStyle = '#000';
      for (const s of this.hl.steps) g.fillRect(this.sx(s + 0.5) - 1, Math.min(y0, y1 - 6) - 4, 2, Math.max(y1 - y0, 6) + 8);
    }
    // lower bound, peak, current step
    g.strokeStyle = '#000'; g.lineWidth = 1; g.setLineDash([6, 4]);
    const ylb = this.sy(M.arenaBound);
    g.beginPath(); g.moveTo(p.l, ylb); g.lineTo(p.l + this.pw, ylb); g.stroke(); g.setLineDash([]);
    if (this.step >= 0) {
      const x = this.sx(this.step + 0.5);
      g.strokeStyle = 'rgba(21,101,192,0.8)'; g.lineWidth = 3; g.beginPath(); g.moveTo(x, p.t); g.lineTo(x, p.t + this.ph); g.stroke();
    }
    if (M.peakStep >= 0) {
      const x = this.sx(M.peakStep + 0.5);
      g.strokeStyle = '#d00'; g.lineWidth = 1.2; g.beginPath(); g.moveTo(x, p.t); g.lineTo(x, p.t + this.ph); g.stroke();
    }
    g.restore();
    if (M.peakStep >= 0) {
      const x = this.sx(M.peakStep + 0.5);
      if (x >= p.l && x <= p.l + this.pw) {
        g.fillStyle = '#d00'; g.textAlign = x > p.l + this.pw - 120 ? 'right' : 'left'; g.textBaseline = 'bottom';
        g.fillText('peak: step ' + M.peakStep + ', ' + GC.human(M.peakBytes), x + (g.textAlign === 'left' ? 4 : -4), p.t - 10);
      }
    }
    this._axes(g);
  }
  _ticks(a, b, n, bytes) {
    const span = (b - a) / n;
    let base = 1;
    if (bytes) while (base * 1024 <= span) base *= 1024;
    while (base * 10 <= span) base *= 10;
    const step = [1, 2, 5, 10].map((k) => k * base).find((v) => v >= span) || span;
    const out = [];
    for (let v = Math.ceil(a / step) * step; v <= b; v += step) out.push(v);
    return out;
  }
  _axes(g) {
    const p = this.pad, v = this.view;
    g.strokeStyle = '#333'; g.lineWidth = 1; g.strokeRect(p.l, p.t, this.pw, this.ph);
    g.fillStyle = '#333'; g.textAlign = 'center'; g.textBaseline = 'top';
    for (const s of this._ticks(v.x0, v.x1, Math.max(2, this.pw / 90), false)) {
      const x = this.sx(s);
      g.beginPath(); g.moveTo(x, p.t + this.ph); g.lineTo(x, p.t + this.ph + 4); g.stroke();
      g.fillText(String(Math.round(s)), x, p.t + this.ph + 6);
    }
    g.fillText(this.opt.axisLabel || 'schedule step (click here to list what is live)', p.l + this.pw / 2, p.t + this.ph + 20);
    g.textAlign = 'right'; g.textBaseline = 'middle';
    for (const b of this._ticks(v.y0, v.y1, Math.max(2, this.ph / 40), true)) {
      const y = this.sy(b);
      g.beginPath(); g.moveTo(p.l - 4, y); g.lineTo(p.l, y); g.stroke();
      g.fillText(GC.human(b), p.l - 6, y);
    }
    if (this.opt.label) { g.fillStyle = '#222'; g.textAlign = 'left'; g.textBaseline = 'top'; g.font = 'bold 12px sans-serif'; g.fillText(this.opt.label, p.l, 1); }
  }
  // the buffer under a point (the smallest one within 2 px), or null
  hit(px, py) {
    const M = this.M;
    let best = null;
    for (const b of M.buffers) {
      const x0 = this.sx(b.first), x1 = Math.max(this.sx(b.last + 1), x0 + 1);
      const y0 = this.sy(b.offset + b.size), y1 = Math.max(this.sy(b.offset), y0 + 1);
      if (px < x0 - 1 || px > x1 + 1 || py < y0 - 2 || py > y1 + 2) continue;
      if (this.match !== null && !this.match.has(b.id)) continue;
      if (!best || b.size < best.size) best = b;
    }
    return best;
  }
  _zoom(axis, px, py, f) {
    const v = this.view;
    if (axis === 'x') {
      const c = this.stepAt(px), span = Math.min(Math.max((v.x1 - v.x0) * f, 4), this.nsteps);
      v.x0 = Math.max(0, Math.min(c - (c - v.x0) * span / (v.x1 - v.x0), this.nsteps - span));
      v.x1 = v.x0 + span;
    } else {
      const c = this.byteAt(py), span = Math.min(Math.max((v.y1 - v.y0) * f, 256), this.ymax);
      v.y0 = Math.max(0, Math.min(c - (c - v.y0) * span / (v.y1 - v.y0), this.ymax - span));
      v.y1 = v.y0 + span;
    }
    this.changed();
  }
  changed() { (this.opt.onView || (() => this.redraw()))(); }
  _events() {
    const c = this.c;
    let drag = null;
    const pos = (e) => { const r = c.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const [x, y] = pos(e), f = Math.exp((e.deltaY || e.deltaX) * 0.002);
      this._zoom(e.shiftKey || e.altKey ? 'y' : 'x', x, y, f);
    }, {passive: false});
    c.addEventListener('mousedown', (e) => { const [x, y] = pos(e); drag = {x, y, v: Object.assign({}, this.view), moved: false}; });
    window.addEventListener('mouseup', (e) => {
      if (!drag) return;
      const d = drag;
      drag = null;
      if (d.moved) return;
      const [x, y] = pos(e);
      const s = Math.floor(this.stepAt(x));
      const inAxis = y > this.pad.t + this.ph, b = inAxis ? null : this.hit(x, y);
      if (b && this.opt.onPick) this.opt.onPick(b, Math.min(Math.max(s, b.first), b.last));
      else if (s >= 0 && s < this.M.ns && this.opt.onStep) this.opt.onStep(s);
    });
    c.addEventListener('mousemove', (e) => {
      const [x, y] = pos(e);
      if (drag) {
        const dx = x - drag.x, dy = y - drag.y;
        if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
        if (!drag.moved) return;
        const v = this.view, w = drag.v.x1 - drag.v.x0, h = drag.v.y1 - drag.v.y0;
        v.x0 = Math.max(0, Math.min(drag.v.x0 - dx / this.pw * w, this.nsteps - w)); v.x1 = v.x0 + w;
        v.y0 = Math.max(0, Math.min(drag.v.y0 + dy / this.ph * h, this.ymax - h)); v.y1 = v.y0 + h;
        this.changed();
        return;
      }
      const b = this.hit(x, y);
      if (this.opt.onHover) this.opt.onHover(b, b ? Math.min(Math.max(Math.floor(this.stepAt(x)), b.first), b.last) : -1, e);
    });
    c.addEventListener('mouseleave', () => { if (this.opt.onHover) this.opt.onHover(null, -1, null); });
    c.addEventListener('dblclick', () => { this.reset(); this.changed(); });
  }
};

// The floating tooltip (#tip) next to the pointer.
GC.tip = function (html, e) {
  const tip = GC.$('tip');
  if (!html || !e) { tip.hidden = true; return; }
  tip.innerHTML = html;
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  let x = e.clientX + 14, y = e.clientY + 14;
  if (x + w > window.innerWidth - 4) x = e.clientX - w - 14;
  if (y + h > window.innerHeight - 4) y = Math.max(4, window.innerHeight - h - 4);
  tip.style.left = x + 'px';
  tip.style.top = y + 'px';
};

// The regions bar: every device region to scale, with the budget and the
// device; the host region (--offload) after the total, not in it.
GC.regionsHTML = function (P) {
  const all = Array.isArray(P.regions) ? P.regions : [];
  const regs = all.filter(GC.onDevice), host = all.filter((r) => !GC.onDevice(r) && r.bytes);
  const total = regs.reduce((s, r) => s + (r.bytes || 0), 0);
  const budget = typeof P.budget_bytes === 'number' ? P.budget_bytes : null;
  const dev = P.device && typeof P.device === 'object' ? P.device : null;
  const devBytes = dev ? [dev.bytes, dev.memory_bytes, dev.mem_bytes].find((v) => typeof v === 'number') : undefined;
  const scale = Math.max(total, budget || 0, devBytes || 0, 1);
  let bar = '';
  for (const r of regs) {
    if (!r.bytes) continue;
    const w = 100 * r.bytes / scale;
    bar += '<div class="seg" style="width:' + w + '%;background:' + GC.colour(GC.REGION_COLOR, r.name) + '" title="' +
      GC.esc(r.name + ': ' + GC.int(r.bytes) + ' bytes') + '">' + (w > 12 ? GC.esc(r.name) + ' ' + GC.human(r.bytes) : w > 5 ? GC.esc(r.name) : '') + '</div>';
  }
  const mark = (v, cls, text) => '<div class="mark ' + cls + (v / scale > 0.6 ? ' flip' : '') + '" style="left:' + (100 * v / scale) +
    '%"><span>' + GC.esc(text) + '</span></div>';
  if (budget !== null) bar += mark(budget, 'budget', 'budget ' + GC.human(budget) + (total <= budget ? ' (fits)' : ' (does not fit)'));
  if (devBytes) bar += mark(devBytes, 'device', (dev.name ? dev.name + ' ' : 'device ') + GC.human(devBytes));
  let legend = regs.map((r) => '<span><i style="background:' + GC.colour(GC.REGION_COLOR, r.name) + '"></i>' + GC.esc(r.name) + ' ' +
    GC.human(r.bytes || 0) + (r.lower_bound !== undefined && r.name === 'arena' ? ' (lower bound ' + GC.human(r.lower_bound) + ')' : '') + '</span>').join('');
  legend += '<span><b>total ' + GC.human(total) + '</b> (' + GC.int(total) + ' bytes)</span>';
  legend += host.map((r) => '<span class="host" data-host-bytes="' + r.bytes + '"><i style="background:' +
    GC.colour(GC.REGION_COLOR, r.name) + '"></i>' + GC.esc(r.name) + ' ' + GC.human(r.bytes) +
    ' (host memory: not device memory, not in the total)</span>').join('');
  return '<div class="rbar">' + bar + '</div><div class="rlegend">' + legend + '</div>';
};

// The strategies the compiler reports (docs/plan.md "strategies").
GC.strategiesHTML = function (P) {
  const st = Array.isArray(P.strategies) ? P.strategies : [];
  if (!st.length) return '<p class="muted">This plan lists no strategies.</p>';
  const known = new Set(['name', 'applied', 'summary', 'saved_bytes', 'details']);
  return st.map((s) => {
    if (!s || typeof s !== 'object') return '';
    const saved = typeof s.saved_bytes === 'number' ? 'saves ' + GC.human(s.saved_bytes) : 'saving not measured';
    let h = '<div class="strat' + (s.applied ? ' on' : '') + '"><b>' + GC.esc(s.name || '?') + '</b> <span class="tag">' +
      (s.applied ? 'applied' : 'not applied') + '</span> ' + GC.esc(s.summary || '') + ' <span class="saved">' + GC.esc(saved) + '</span>';
    const rows = GC.kvRows(s.details && typeof s.details === 'object' ? s.details : {}) +
      GC.kvRows(Object.fromEntries(Object.entries(s).filter(([k]) => !known.has(k))));
    if (rows) h += '<table class="kv">' + rows + '</table>';
    return h + '</div>';
  }).join('');
};

GC.legendHTML = function (M, by) {
  const names = [...new Set(by === 'phase' ? M.buffers.map((b) => b.phase) : M.buffers.map((b) => b.kind))];
  const table = by === 'phase' ? GC.PHASE_COLOR : GC.KIND_COLOR;
  return names.map((n) => '<span><i style="background:' + GC.colour(table, n) + '"></i>' + GC.esc(n) + '</span>').join('') +
    '<span><i class="line red"></i>peak</span><span><i class="line dash"></i>lower bound</span><span><i class="line blue"></i>step</span>';
};

// The data the page was made with (<script id="gc-data">).
GC.data = function () {
  try {
    return JSON.parse(GC.$('gc-data').textContent);
  } catch (err) {
    document.body.insertAdjacentHTML('afterbegin', '<p class="error">cannot read the plan: ' + GC.esc(err) + '</p>');
    throw err;
  }
};
