// plan.js — the plan explorer (--emit plan-html): the arena timeline, what
// is live at a step (the page opens at the peak), the schedule with a
// tensor's producer and readers, regions, strategies and a search box.
'use strict';

(function () {
  const t0 = performance.now();
  const P = GC.data(), M = GC.model(P), e = GC.esc, $ = GC.$;
  const KNOWN = new Set(['version', 'target', 'budget_bytes', 'graph', 'config', 'schedule_kind', 'no_reuse', 'dims',
    'schedule', 'tensors', 'regions', 'totals', 'strategies', 'source_lines', 'device']);
  let step = M.peakStep, sel = -1;

  // ---- header, regions, strategies, what else the plan says
  $('title').textContent = 'memory plan: ' + (P.graph || '?') + (P.config ? ' (' + P.config + ')' : '');
  document.title = 'plan: ' + (P.graph || '?') + (P.config ? ' ' + P.config : '');
  const dims = Object.entries(P.dims || {}).map(([k, v]) => k + '=' + v).join(' ');
  const tot = P.totals || {};
  $('facts').innerHTML = [
    'target ' + e(P.target || '?'), 'schedule ' + e(P.schedule_kind || '?') + (P.no_reuse ? ' (--no-reuse)' : ''), e(dims),
    GC.int(M.ns) + ' steps', GC.int(M.nt) + ' tensors', GC.int(M.buffers.length) + ' arena buffers',
    'arena ' + GC.human(M.arenaBytes) + ' / lower bound ' + GC.human(M.arenaBound) +
      (typeof tot.arena_ratio === 'number' ? ' (' + tot.arena_ratio.toFixed(4) + 'x)' : ''),
    typeof tot.arena_no_reuse_bytes === 'number' ? 'without reuse ' + GC.human(tot.arena_no_reuse_bytes) : '',
    'peak: step ' + M.peakStep + ', ' + GC.human(M.peakBytes),
  ].filter(Boolean).map((s) => '<span>' + s + '</span>').join('');
  $('regions').innerHTML = '<h2>regions</h2>' + GC.regionsHTML(P);
  $('strategies').innerHTML = '<h2>strategies</h2>' + GC.strategiesHTML(P);
  const totKnown = new Set(['peak_bytes', 'params_bytes', 'grads_bytes', 'optstate_bytes', 'arena_bytes', 'arena_lower_bound',
    'arena_ratio', 'arena_no_reuse_bytes', 'fits']);
  const more = Object.fromEntries(Object.entries(P).filter(([k]) => !KNOWN.has(k)));
  for (const [k, v] of Object.entries(tot)) if (!totKnown.has(k)) more['totals.' + k] = v;
  if (P.device !== undefined) more.device = P.device;
  $('more').innerHTML = Object.keys(more).length ? '<h2>more in this plan</h2><table class="kv">' + GC.kvRows(more) + '</table>' : '';

  // ---- the schedule list
  const rows = M.S.map((op, s) => '<div class="row" data-step="' + s + '"><span class="n">' + s + '</span><i style="background:' +
    GC.colour(GC.PHASE_COLOR, op.phase) + '" title="' + e(op.phase) + '"></i><span class="op">' + e(op.op) + '</span> ' + e(op.name) + '</div>');
  $('schedule').innerHTML = rows.join('');
  const rowEl = (s) => $('schedule').children[s];
  $('schedule').addEventListener('click', (ev) => {
    const r = ev.target.closest('.row');
    if (r) { showOp(+r.dataset.step); setStep(+r.dataset.step, false); }
  });
  let marked = [];
  function markRows(prod, cons) {
    for (const [s, c] of marked) { const r = rowEl(s); if (r) r.classList.remove(c); }
    marked = [];
    if (prod >= 0) marked.push([prod, 'prod']);
    for (const s of cons) marked.push([s, 'cons']);
    for (const [s, c] of marked) { const r = rowEl(s); if (r) r.classList.add(c); }
  }
  function scrollRow(s) {
    const box = $('schedule'), r = rowEl(s);
    if (r) box.scrollTop = r.offsetTop - box.offsetTop - box.clientHeight / 3;
  }

  // ---- the timeline
  const tl = new GC.Timeline($('timeline'), M, {
    onHover: (b, s, ev) => GC.tip(b ? GC.tensorHTML(M, M.memberAt(b, s), s) : null, ev),
    onPick: (b, s) => select(M.memberAt(b, s)),
    onStep: (s) => setStep(s, true),
  });
  window.addEventListener('resize', () => tl.redraw());
  $('colour').addEventListener('change', () => { tl.colourBy = $('colour').value; $('legend').innerHTML = GC.legendHTML(M, tl.colourBy); tl.redraw(); });
  $('legend').innerHTML = GC.legendHTML(M, 'kind');
  $('reset').addEventListener('click', () => { tl.reset(); tl.redraw(); });

  // ---- selection: a tensor (its producer and readers in the schedule)
  function select(i) {
    sel = i;
    if (i < 0) { tl.hl = null; markRows(-1, []); $('selinfo').innerHTML = ''; tl.redraw(); return; }
    const readers = M.readers(i), b = M.bufOfTensor(i);
    tl.hl = b >= 0 ? {buf: b, steps: readers} : null;
    markRows(M.prod[i], readers);
    $('selinfo').innerHTML = '<h2>selected tensor</h2>' + GC.tensorHTML(M, i, step) +
      '<p class="steps">read at: ' + (readers.length ? readers.map((s) => '<a data-step="' + s + '">' + s + '</a>').join(' ') : 'no step') + '</p>';
    scrollRow(M.prod[i] >= 0 ? M.prod[i] : readers[0] || 0);
    tl.redraw();
  }
  function showOp(s) {
    const op = M.S[s], t = (ids) => (ids || []).map((i) => '<a data-t="' + i + '">' + e(M.T[i] ? M.T[i].name : i) + '</a>').join(', ') || '\u2014';
    markRows(-1, []);
    tl.hl = null;
    let h = '<h2>step ' + s + '</h2><div class="tname">' + e(op.name) + '</div><table class="kv"><tr><th>op</th><td>' + e(op.op) +
      ' (' + e(op.phase) + ')</td></tr><tr><th>inputs</th><td>' + t(op.inputs) + '</td></tr><tr><th>outputs</th><td>' + t(op.outputs) + '</td></tr>';
    if (op.src) { const line = M.srcText(op.src); h += '<tr><th>source</th><td>' + e(op.src) + (line ? '<pre class="src">' + e(line.trim()) + '</pre>' : '') + '</td></tr>'; }
    const known = new Set(['step', 'op', 'name', 'phase', 'inputs', 'outputs', 'src']);
    h += GC.kvRows(Object.fromEntries(Object.entries(op).filter(([k]) => !known.has(k))));
    $('selinfo').innerHTML = h + '</table>';
  }
  $('selinfo').addEventListener('click', (ev) => {
    const a = ev.target.closest('a');
    if (!a) return;
    if (a.dataset.t !== undefined) select(+a.dataset.t);
    else if (a.dataset.step !== undefined) setStep(+a.dataset.step, true);
  });

  // ---- the step: what is live there
  function setStep(s, scroll) {
    step = Math.max(0, Math.min(s, M.ns - 1));
    $('step').value = step;
    tl.step = step;
    tl.redraw();
    const cur = $('schedule').querySelector('.row.cur');
    if (cur) cur.classList.remove('cur');
    const r = rowEl(step);
    if (r) r.classList.add('cur');
    if (scroll) scrollRow(step);
    renderLive();
  }
  function renderLive() {
    const live = M.liveAt(step), op = M.S[step] || {};
    const sum = live.reduce((a, b) => a + b.size, 0);
    let h = '<h2>live at step <span id="live-step">' + step + '</span>' + (step === M.peakStep ? ' <span class="peak">(the peak)</span>' : '') + '</h2>' +
      '<p>' + e(op.name || '') + ' (' + e(op.op || '') + ', ' + e(op.phase || '') + '): <b id="live-count">' + live.length + '</b> arena buffers, ' +
      '<b id="live-sum" data-bytes="' + sum + '">' + GC.human(sum) + '</b> (' + GC.int(sum) + ' bytes)' +
      (M.persistent ? '; params, grads and optimizer state add ' + GC.human(M.persistent) + ' at every step' : '') + '</p>';
    h += '<table class="list"><thead><tr><th>tensor</th><th>kind</th><th class="r">bytes</th><th class="r">share</th><th>steps</th><th>producer</th></tr></thead><tbody>';
    for (const b of live) {
      const i = M.memberAt(b, step), t = M.T[i], p = M.prod[i];
      h += '<tr data-t="' + i + '"><td class="tn">' + e(t.name) + (b.members.length > 1 ? ' <span class="muted">(in-place chain of ' + b.members.length + ')</span>' : '') +
        '</td><td>' + e(t.kind) + '</td><td class="r">' + GC.human(b.size) + '</td><td class="r">' + (sum ? (100 * b.size / sum).toFixed(1) : '0') +
        '%</td><td>' + b.first + '\u2013' + b.last + '</td><td>' + (p >= 0 ? e(M.S[p].name) : '\u2014') + '</td></tr>';
    }
    $('live').innerHTML = h + '</tbody></table>';
    $('stepinfo').textContent = 'step ' + step + ' of ' + M.ns + ': ' + (op.name || '') + ' \u2014 ' + GC.human(M.liveBytes[step] || 0) + ' live';
  }
  $('live').addEventListener('click', (ev) => { const r = ev.target.closest('tr[data-t]'); if (r) select(+r.dataset.t); });
  $('step').max = Math.max(0, M.ns - 1);
  $('step').addEventListener('input', () => setStep(+$('step').value, true));
  $('gopeak').addEventListener('click', () => setStep(M.peakStep, true));

  // ---- search over tensor and op names
  let searchTimer = 0;
  $('search').addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(search, 120); });
  function search() {
    const q = $('search').value.trim().toLowerCase();
    if (!q) { tl.match = null; $('results').innerHTML = ''; tl.redraw(); return; }
    const ts = [], ops = [];
    M.T.forEach((t, i) => { if (String(t.name).toLowerCase().includes(q)) ts.push(i); });
    M.S.forEach((op, s) => { if (String(op.name).toLowerCase().includes(q) || String(op.op).toLowerCase().includes(q)) ops.push(s); });
    tl.match = new Set();
    for (const i of ts) { const b = M.bufOfTensor(i); if (b >= 0) tl.match.add(b); }
    for (const s of ops) for (const i of M.S[s].outputs || []) { const b = M.bufOfTensor(i); if (b >= 0) tl.match.add(b); }
    const cap = 60;
    $('results').innerHTML = '<b>' + ts.length + '</b> tensors, <b>' + ops.length + '</b> ops match. ' +
      ts.slice(0, cap).map((i) => '<a data-t="' + i + '">' + e(M.T[i].name) + '</a>').join(' ') + (ts.length > cap ? ' \u2026' : '') +
      (ops.length ? ' | ops: ' + ops.slice(0, cap).map((s) => '<a data-step="' + s + '">' + s + ' ' + e(M.S[s].name) + '</a>').join(' ') + (ops.length > cap ? ' \u2026' : '') : '');
    tl.redraw();
  }
  $('results').addEventListener('click', (ev) => {
    const a = ev.target.closest('a');
    if (!a) return;
    if (a.dataset.t !== undefined) { const i = +a.dataset.t; select(i); if (M.T[i].first !== null && M.T[i].first !== undefined) setStep(M.T[i].first, false); }
    else { showOp(+a.dataset.step); setStep(+a.dataset.step, true); }
  });

  // ---- open at the peak; a link may name a step, a tensor and a search:
  // plan.html#step=120&tensor=h0.qkv&q=attn
  const hash = new URLSearchParams(location.hash.slice(1));
  const hstep = parseInt(hash.get('step'), 10);
  setStep(hstep >= 0 && hstep < M.ns ? hstep : M.peakStep, true);
  if (hash.get('q')) { $('search').value = hash.get('q'); search(); }
  if (hash.get('tensor')) {
    const i = M.T.findIndex((t) => t.name === hash.get('tensor'));
    if (i >= 0) select(i);
  }
  const t1 = performance.now();
  tl.draw();
  const t2 = performance.now();
  tl.draw();
  const t3 = performance.now();
  // what the tests read (tests/explorer): counts after the scripts ran
  const st = $('stats');
  st.dataset.tensors = M.nt;
  st.dataset.steps = M.ns;
  st.dataset.buffers = M.buffers.length;
  st.dataset.drawn = tl.drawn;
  st.dataset.peakStep = M.peakStep;
  st.dataset.peakBytes = M.peakBytes;
  st.dataset.strategies = Array.isArray(P.strategies) ? P.strategies.length : 0;
  st.dataset.initMs = (t1 - t0).toFixed(1);   // parse, model, lists
  st.dataset.firstDrawMs = (t2 - t1).toFixed(1);   // the first frame (with the page's layout)
  st.dataset.drawMs = (t3 - t2).toFixed(1);   // one more frame (what zoom and pan cost)
  st.dataset.ready = '1';
})();
