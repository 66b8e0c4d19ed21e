// diff.js — two plans of one graph (--emit plan-diff): bytes per region and
// per kind, both arenas on one step axis, and the tensors (matched by name)
// that changed region, lifetime or storage, or exist in one plan only.
'use strict';

(function () {
  const D = GC.data(), A = GC.model(D.a), B = GC.model(D.b), e = GC.esc, $ = GC.$;
  const na = D.name_a || 'A', nb = D.name_b || 'B';
  const cell = (v) => '<td>' + (typeof v === 'number' ? GC.human(v) : e(v)) + '</td>';
  const dcell = (a, b) => {
    const d = (b || 0) - (a || 0);
    return '<td class="' + (d > 0 ? 'pos' : d < 0 ? 'neg' : '') + '">' + GC.signed(d) + '</td>';
  };

  $('title').textContent = 'plan diff: ' + na + ' \u2192 ' + nb;
  const dims = (P) => Object.entries(P.dims || {}).map(([k, v]) => k + '=' + v).join(' ');
  $('facts').innerHTML = ['graph ' + e(D.a.graph || '?') + (D.a.config ? ' (' + e(D.a.config) + ')' : ''),
    'A: ' + e(na) + ' \u2014 ' + e(D.a.target || '?') + ', ' + e(D.a.schedule_kind || '?') + ', ' + e(dims(D.a)) + ', ' + A.ns + ' steps',
    'B: ' + e(nb) + ' \u2014 ' + e(D.b.target || '?') + ', ' + e(D.b.schedule_kind || '?') + ', ' + e(dims(D.b)) + ', ' + B.ns + ' steps',
  ].map((s) => '<span>' + s + '</span>').join('');
  $('regions-a').innerHTML = '<h2>A: regions</h2>' + GC.regionsHTML(D.a);
  $('regions-b').innerHTML = '<h2>B: regions</h2>' + GC.regionsHTML(D.b);
  $('strategies-a').innerHTML = '<h2>A: strategies</h2>' + GC.strategiesHTML(D.a);
  $('strategies-b').innerHTML = '<h2>B: strategies</h2>' + GC.strategiesHTML(D.b);

  // ---- bytes per region, and the totals
  const rnames = [...new Set([...A.regions, ...B.regions].map((r) => r.name))];
  const total = (M) => M.regions.filter(GC.onDevice).reduce((s, r) => s + (r.bytes || 0), 0);   // device memory
  let h = '<h2>bytes by region</h2><table class="num"><tr><th>region</th><th>A</th><th>B</th><th>B \u2212 A</th></tr>';
  for (const r of rnames) {
    const a = A.region(r).bytes || 0, b = B.region(r).bytes || 0;
    h += '<tr data-region="' + e(r) + '"><td>' + e(r) + '</td>' + cell(a) + cell(b) + dcell(a, b) + '</tr>';
  }
  h += '<tr><td><b>total (device)</b></td>' + cell(total(A)) + cell(total(B)) + dcell(total(A), total(B)) + '</tr>';
  h += '<tr><td>arena lower bound</td>' + cell(A.arenaBound) + cell(B.arenaBound) + dcell(A.arenaBound, B.arenaBound) + '</tr>';
  h += '<tr><td>peak step</td><td>' + A.peakStep + '</td><td>' + B.peakStep + '</td><td></td></tr>';
  h += '<tr><td>steps / tensors / buffers</td><td>' + [A.ns, A.nt, A.buffers.length].join(' / ') + '</td><td>' +
    [B.ns, B.nt, B.buffers.length].join(' / ') + '</td><td></td></tr></table>';
  $('bytes').innerHTML = h;

  // ---- bytes per kind (storage tensors that are used, before reuse)
  const byKind = (M) => {
    const o = {};
    for (const t of M.T) {
      if (t.view_of !== null && t.view_of !== undefined) continue;
      if (t.first === null || t.first === undefined) continue;
      const k = o[t.kind] || (o[t.kind] = {bytes: 0, n: 0});
      k.bytes += t.bytes || 0; k.n++;
    }
    return o;
  };
  const ka = byKind(A), kb = byKind(B);
  h = '<h2>bytes by kind (storage tensors, before reuse)</h2><table class="num"><tr><th>kind</th><th>A</th><th>B</th><th>B \u2212 A</th><th>tensors A</th><th>tensors B</th></tr>';
  for (const k of [...new Set([...Object.keys(ka), ...Object.keys(kb)])]) {
    const a = ka[k] || {bytes: 0, n: 0}, b = kb[k] || {bytes: 0, n: 0};
    h += '<tr data-kind="' + e(k) + '"><td>' + e(k) + '</td>' + cell(a.bytes) + cell(b.bytes) + dcell(a.bytes, b.bytes) + '<td>' + a.n + '</td><td>' + b.n + '</td></tr>';
  }
  $('kinds').innerHTML = h + '</table>';

  // ---- the two arenas on one step axis and one byte scale
  const view = {x0: 0, x1: Math.max(A.ns, B.ns, 1), y0: 0, y1: Math.max(A.ymax, B.ymax)};
  let tls = [];
  const pick = (M, other) => (b, s) => selectName(M.T[M.memberAt(b, s)].name);
  const opts = (M, label) => ({view, nsteps: view.x1, ymax: view.y1, label, axisLabel: 'schedule step',
    onView: () => tls.forEach((t) => t.redraw()),
    onHover: (b, s, ev) => GC.tip(b ? GC.tensorHTML(M, M.memberAt(b, s), s) : null, ev),
    onPick: pick(M), onStep: () => {}});
  const ta = new GC.Timeline($('timeline-a'), A, opts(A, 'A: ' + na + ' (arena ' + GC.human(A.arenaBytes) + ')'));
  const tb = new GC.Timeline($('timeline-b'), B, opts(B, 'B: ' + nb + ' (arena ' + GC.human(B.arenaBytes) + ')'));
  tls = [ta, tb];
  window.addEventListener('resize', () => tls.forEach((t) => t.redraw()));
  $('reset').addEventListener('click', () => { ta.reset(); tls.forEach((t) => t.redraw()); });
  $('colour').addEventListener('change', () => { tls.forEach((t) => { t.colourBy = $('colour').value; t.redraw(); }); $('legend').innerHTML = GC.legendHTML(A, $('colour').value); });
  $('legend').innerHTML = GC.legendHTML(A, 'kind');

  function selectName(name) {
    let h2 = '';
    for (const [M, t, side] of [[A, ta, 'A'], [B, tb, 'B']]) {
      const i = M.T.findIndex((x) => x.name === name);
      const b = i >= 0 ? M.bufOfTensor(i) : -1;
      t.hl = b >= 0 ? {buf: b, steps: M.readers(i)} : null;
      t.redraw();
      h2 += '<div class="panel"><h2>' + side + '</h2>' + (i >= 0 ? GC.tensorHTML(M, i, -1) : '<p class="muted">' + e(name) + ': not in this plan</p>') + '</div>';
    }
    $('selinfo').innerHTML = h2;
  }

  // ---- tensors matched by name
  const mapB = new Map(B.T.map((t) => [t.name, t]));
  const mapA = new Map(A.T.map((t) => [t.name, t]));
  // a lifetime as text; the whole schedule is "all" (schedules differ in length)
  const life = (M, t) => (t.first === null || t.first === undefined ? 'unused' : t.first === 0 && t.last === M.ns - 1 ? 'all' : t.first + '\u2013' + t.last);
  const nameOf = (M, i) => (i === null || i === undefined ? null : M.T[i] ? M.T[i].name : i);
  const cats = {changed: [], region: [], lifetime: [], storage: [], moved: [], onlyA: [], onlyB: []};
  for (const [name, a] of mapA) {
    const b = mapB.get(name);
    if (!b) { cats.onlyA.push({name, a, b: null}); continue; }
    const row = {name, a, b, why: []};
    if (a.region !== b.region) { cats.region.push(row); row.why.push('region'); }
    if (life(A, a) !== life(B, b)) { cats.lifetime.push(row); row.why.push('lifetime'); }
    if (a.bytes !== b.bytes || a.dtype !== b.dtype || nameOf(A, a.inplace_of) !== nameOf(B, b.inplace_of) ||
        nameOf(A, a.view_of) !== nameOf(B, b.view_of)) { cats.storage.push(row); row.why.push('storage'); }
    if (a.offset !== b.offset) { cats.moved.push(row); row.why.push('offset'); }
    if (row.why.some((w) => w !== 'offset')) cats.changed.push(row);
  }
  for (const [name, b] of mapB) if (!mapA.has(name)) cats.onlyB.push({name, a: null, b});
  const size = (r) => Math.max(r.a ? r.a.bytes || 0 : 0, r.b ? r.b.bytes || 0 : 0);
  for (const k of Object.keys(cats)) cats[k].sort((x, y) => size(y) - size(x) || (x.name < y.name ? -1 : 1));

  const label = {changed: 'changed (region, lifetime or storage)', region: 'region', lifetime: 'lifetime', storage: 'storage',
    moved: 'offset only', onlyA: 'only in A', onlyB: 'only in B'};
  let tab = 'changed';
  function renderChanges() {
    const list = cats[tab], cap = 400;
    const steps = (M, t) => (t ? life(M, t) : '\u2014');
    const stor = (M, t) => (t ? e(t.dtype || '') + ' ' + GC.human(t.bytes || 0) + (t.inplace_of !== null && t.inplace_of !== undefined ? ', in place of ' + e(nameOf(M, t.inplace_of)) : '') +
      (t.view_of !== null && t.view_of !== undefined ? ', view of ' + e(nameOf(M, t.view_of)) : '') : '\u2014');
    let h3 = '<h2>tensors by name</h2><div class="tabs">' + Object.keys(cats).map((k) => '<button data-tab="' + k + '" class="' + (k === tab ? 'on' : '') +
      '">' + label[k] + ' (<span id="n-' + k + '">' + cats[k].length + '</span>)</button>').join('') + '</div>';
    h3 += '<table class="list"><thead><tr><th>tensor</th><th>kind</th><th>region A \u2192 B</th><th>steps A</th><th>steps B</th><th>storage A</th><th>storage B</th><th>offset A \u2192 B</th></tr></thead><tbody>';
    for (const r of list.slice(0, cap)) {
      const t = r.a || r.b;
      h3 += '<tr data-name="' + e(r.name) + '" data-t="1"><td class="tn">' + e(r.name) + '</td><td>' + e(t.kind) + '</td><td>' + e(r.a ? r.a.region : '\u2014') + ' \u2192 ' + e(r.b ? r.b.region : '\u2014') +
        '</td><td>' + steps(A, r.a) + '</td><td>' + steps(B, r.b) + '</td><td>' + stor(A, r.a) + '</td><td>' + stor(B, r.b) + '</td><td>' +
        (r.a ? GC.int(r.a.offset) : '\u2014') + ' \u2192 ' + (r.b ? GC.int(r.b.offset) : '\u2014') + '</td></tr>';
    }
    h3 += '</tbody></table>' + (list.length > cap ? '<p class="muted">' + (list.length - cap) + ' more not shown</p>' : '');
    $('changes').innerHTML = h3;
  }
  $('changes').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-tab]');
    if (b) { tab = b.dataset.tab; renderChanges(); return; }
    const r = ev.target.closest('tr[data-name]');
    if (r) selectName(r.dataset.name);
  });
  renderChanges();
  ta.draw();
  tb.draw();

  const st = $('stats');
  for (const k of Object.keys(cats)) st.dataset[k] = cats[k].length;
  Object.assign(st.dataset, {peakA: A.peakStep, peakB: B.peakStep, buffersA: A.buffers.length, buffersB: B.buffers.length,
    drawnA: ta.drawn, drawnB: tb.drawn, ready: '1'});
})();
