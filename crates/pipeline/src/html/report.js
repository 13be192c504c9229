// Draws report.html and leaderboard.html from the JSON block #data.
// Every text from the data goes in through textContent, never as HTML.
(() => {
  'use strict';
  const D = JSON.parse(document.getElementById('data').textContent);
  const app = document.getElementById('app');
  const COLORS = ['#2b5fb8', '#c2410c', '#15803d', '#7e22ce', '#0e7490', '#a16207'];
  const CLASSES = ['rescued', 'harmed', 'unchanged', 'both miss', 'retriever miss'];
  const CLASS_COLORS = { 'rescued': '#1f7a3f', 'harmed': '#b42318', 'unchanged': '#8b95a7',
    'both miss': '#d0d5dd', 'retriever miss': '#7e22ce' };
  const SVGNS = 'http://www.w3.org/2000/svg';

  // A DOM element: attrs holds attributes, `text`, `class` and on* handlers.
  function el(tag, attrs, ...kids) {
    const e = tag.startsWith('svg:') ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }
  const num = (x, d = 4) => (x === null || x === undefined || Number.isNaN(x)) ? '–' : x.toFixed(d);
  const signed = (x, d = 4) => (x === null || x === undefined) ? '–' : (x > 0 ? '+' : '') + x.toFixed(d);
  const tone = x => x > 1e-12 ? 'up' : x < -1e-12 ? 'down' : 'muted';
  const pct = x => (x === null || x === undefined) ? '–' : (100 * x).toFixed(1) + '%';

  // The state lives in the URL hash: view, the open query, the filters.
  function state() {
    const p = new URLSearchParams(location.hash.slice(1));
    return {
      view: p.get('view') || (p.get('q') ? 'queries' : 'summary'),
      q: p.get('q'),
      change: Number(p.get('change') || defaultChange()),
      cls: p.get('class') || '',
      slice: p.get('slice') || '',
      from: p.get('from') || '',
      to: p.get('to') || '',
      text: p.get('text') || '',
      sort: p.get('sort') || 'id',
      dir: p.get('dir') || 'asc',
      fs: p.get('fs') || '',
    };
  }
  function go(changes) {
    const s = Object.assign(state(), changes);
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries({ view: s.view, q: s.q, change: s.change, class: s.cls, slice: s.slice,
      from: s.from, to: s.to, text: s.text, sort: s.sort, dir: s.dir, fs: s.fs })) {
      if (v !== null && v !== undefined && v !== '' && !(k === 'sort' && v === 'id') && !(k === 'dir' && v === 'asc')
        && !(k === 'change' && v === defaultChange())) p.set(k, v);
    }
    location.hash = p.toString();
  }
  function defaultChange() {
    // The last step: the reranker's where there is one.
    return D.changes && D.changes.length ? D.changes.length - 1 : 0;
  }

  function header(title, about, views, current) {
    return el('header', {},
      el('h1', { text: title }),
      about.map(line => el('p', { text: line })),
      el('nav', {}, views.map(([id, label]) =>
        el('a', { href: '#view=' + id, class: id === current ? 'on' : null, 'data-view': id, text: label }))));
  }

  // ---------- charts ----------
  function lineChart(title, xs, series, yLabel) {
    const W = 460, H = 260, L = 44, R = 12, T = 22, B = 32;
    const all = series.flatMap(s => s.values.filter(v => v !== null));
    const ymax = Math.min(1, Math.max(0.05, ...all) * 1.05);
    const x = i => L + (xs.length <= 1 ? 0 : (i / (xs.length - 1)) * (W - L - R));
    const y = v => T + (1 - v / ymax) * (H - T - B);
    const g = el('svg:svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
    g.append(el('svg:text', { x: L, y: 14, text: title, style: 'font-weight:600;fill:#1d2330' }));
    for (let t = 0; t <= 4; t++) {
      const v = ymax * t / 4;
      g.append(el('svg:line', { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: '#eceff4' }));
      g.append(el('svg:text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', text: v.toFixed(2) }));
    }
    const ticks = [...new Set([0, Math.floor((xs.length - 1) / 2), xs.length - 1])];
    for (const i of ticks) g.append(el('svg:text', { x: x(i), y: H - 12, 'text-anchor': 'middle', text: xs[i] }));
    g.append(el('svg:text', { x: W - R, y: H - 1, 'text-anchor': 'end', text: yLabel }));
    series.forEach((s, n) => {
      const pts = s.values.map((v, i) => v === null ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`).filter(Boolean);
      g.append(el('svg:polyline', { points: pts.join(' '), fill: 'none', stroke: s.color || COLORS[n % COLORS.length],
        'stroke-width': 2, 'stroke-dasharray': s.dash || null }));
    });
    const legend = el('div', { class: 'legend' }, series.map((s, n) =>
      el('span', {}, el('i', { style: `background:${s.color || COLORS[n % COLORS.length]}` }), s.name)));
    return el('div', {}, g, legend);
  }
  // A change and its interval on a shared axis (a forest plot's row).
  function whisker(delta, lo, hi, span) {
    const W = 160, H = 16, mid = W / 2;
    const x = v => mid + Math.max(-1, Math.min(1, v / span)) * (mid - 4);
    const g = el('svg:svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    g.append(el('svg:line', { x1: mid, x2: mid, y1: 0, y2: H, stroke: '#c5ccd8' }));
    if (lo !== null && hi !== null) g.append(el('svg:line', { x1: x(lo), x2: x(hi), y1: H / 2, y2: H / 2, stroke: '#5b6475', 'stroke-width': 2 }));
    if (delta !== null) g.append(el('svg:circle', { cx: x(delta), cy: H / 2, r: 4, fill: delta >= 0 ? '#1f7a3f' : '#b42318' }));
    return g;
  }

  if (D.kind === 'leaderboard') return leaderboard();

  // ---------- the run report ----------
  const stageNames = D.stages.map(s => s.name);
  const skills = D.skills;
  const cut = D.cut;
  const main = 'NDCG@' + cut;
  const byId = new Map(D.queries.map(q => [q.id, q]));
  const skillName = i => typeof i === 'number' ? (skills.name[i] || skills.id[i]) : String(i);
  const skillId = i => typeof i === 'number' ? skills.id[i] : String(i);
  const stepName = c => `${stageNames[c.stage]} vs ${stageNames[c.against]}`;

  function render() {
    const s = state();
    const views = [['summary', 'Summary'], ['attribution', 'Attribution'], ['transitions', 'Gold-rank transitions'],
      ['depth', 'Depth & curves'], ['slices', 'Slices'], ['queries', 'Queries']];
    if (F) views.splice(5, 0, ['focus', 'Query focus']);
    const body = el('main', { id: 'view-' + s.view });
    if (s.view === 'summary') summary(body);
    else if (s.view === 'attribution') attribution(body);
    else if (s.view === 'transitions') transitions(body, s);
    else if (s.view === 'depth') depth(body);
    else if (s.view === 'slices') slices(body);
    else if (s.view === 'focus' && F) focusView(body, s);
    else if (s.q && byId.has(s.q)) queryView(body, byId.get(s.q), s);
    else queries(body, s);
    app.replaceChildren(header(D.title, D.about, views, s.view), body);
  }

  function summary(body) {
    body.append(el('h2', { text: 'Each stage, and what each step changes' }),
      el('p', { class: 'note', text: `${D.queries.length} judged queries. Δ: the later stage minus the one it builds on, with its 95% paired bootstrap interval (2,000 resamples over queries).` }));
    const head = el('tr', {}, el('th', { class: 'l', text: 'metric' }), stageNames.map(n => el('th', { text: n })),
      D.changes.map(c => el('th', { text: 'Δ ' + stepName(c) })));
    const rows = Object.keys(D.stages[0].metrics).map(m => el('tr', { class: m === main ? 'main' : null },
      el('td', { class: 'l', text: m }),
      D.stages.map(st => el('td', { 'data-stage': st.name, 'data-metric': m, text: num(st.metrics[m]) })),
      D.changes.map(c => {
        const r = c.rows.find(r => r.metric === m);
        return el('td', { class: r ? tone(r.delta) : null },
          r ? signed(r.delta) : '–', r ? el('div', { class: 'ci', text: `[${signed(r.lo)}, ${signed(r.hi)}]` }) : null);
      })));
    body.append(el('table', { id: 'summary-table' }, el('thead', {}, head), el('tbody', {}, rows)));
    for (const c of D.changes) {
      body.append(el('p', {}, el('b', { text: stepName(c) + ': ' }),
        `${c.wins} wins, ${c.ties} ties, ${c.losses} losses over ${c.queries} queries on ${c.metric}; paired randomization test of the mean difference (10,000 rounds, two-sided): p = ${num(c.p)}.`));
    }
    if (D.links.length) body.append(el('p', { class: 'note' }, 'Files: ', D.links.flatMap((l, i) =>
      [i ? ', ' : '', el('a', { href: l.href, text: l.name })])));
    body.append(el('p', { class: 'note', text: D.tool }));
  }

  // ---------- query focus (focus.json) ----------
  const F = D.focus || null;
  const focusStages = F ? Object.keys(F.stages) : [];
  // The stage the view shows: the one asked for, else the run's retriever (the last).
  const focusStage = s => focusStages.includes(s.fs) ? s.fs : focusStages[focusStages.length - 1];
  const focusRows = F ? Object.fromEntries(focusStages.map(st =>
    [st, new Map(F.stages[st].queries.map(q => [q.query_id, q]))])) : {};
  const skillIndex = new Map(skills.id.map((id, i) => [id, i]));
  const focusSkill = id => skillIndex.has(id) ? skillName(skillIndex.get(id)) : id;
  // A request cut at its sentences' spans (offsets in characters, as Python counts them).
  function sentencePieces(text, spans) {
    const chars = Array.from(text);
    const out = [];
    let at = 0;
    spans.forEach(([s, e], i) => {
      if (s > at) out.push({ text: chars.slice(at, s).join('') });
      out.push({ text: chars.slice(s, e).join(''), i });
      at = e;
    });
    if (at < chars.length) out.push({ text: chars.slice(at).join('') });
    return out;
  }
  // Blue where leaving the sentence out lowers the gold's score (it carries the intent), red
  // where it raises it, stronger with |Δ| against the largest of that gold's sentences.
  function shade(d, max) {
    if (d === null || d === undefined || !max) return null;
    const a = (Math.min(1, Math.abs(d) / max) * 0.6).toFixed(3);
    return d >= 0 ? `background:rgba(43,95,184,${a})` : `background:rgba(194,65,12,${a})`;
  }
  const stat = x => (x && x.mean !== null && x.mean !== undefined)
    ? [num(x.mean), el('div', { class: 'ci', text: `[${num(x.ci[0])}, ${num(x.ci[1])}]` })] : '–';

  function focusView(body, s) {
    const st = focusStage(s);
    body.append(el('h2', { text: 'Query focus: which sentences of each request carry its gold skills' }),
      el('p', { class: 'note', text: F.about }));
    const rows = [['ndcg@10', 'NDCG@10 of the full request'], ['best_sentence_ndcg@10', 'NDCG@10 of the best single sentence'],
      ['focus_headroom', 'focus headroom (best sentence − full request)'], ['single_sentence_wins', 'share of queries a single sentence wins'],
      ['concentration', 'concentration: share of |Δ gold score| on the top sentence'], ['entropy', 'normalised entropy of the sentences\' shares']];
    body.append(el('table', { id: 'focus-summary' },
      el('thead', {}, el('tr', {}, el('th', { class: 'l', text: 'per stage, mean over queries [95% CI]' }), focusStages.map(n => el('th', { text: n })))),
      el('tbody', {}, rows.map(([key, label]) => el('tr', { class: key === 'focus_headroom' ? 'main' : null },
        el('td', { class: 'l', text: label }),
        focusStages.map(n => el('td', { 'data-stage': n, 'data-key': key }, stat(F.stages[n].summary[key]))))))));
    // Where each gold's intent sentence stands, per stage.
    const POS = ['first', 'middle', 'last', 'only'];
    const W = 460, rowH = 18, L = 120;
    const chart = el('svg:svg', { id: 'position-chart', width: W, height: focusStages.length * POS.length * rowH + 30,
      viewBox: `0 0 ${W} ${focusStages.length * POS.length * rowH + 30}`, role: 'img', 'aria-label': 'intent position' });
    chart.append(el('svg:text', { x: 0, y: 12, text: 'Share of gold skills whose intent sentence stands first, in the middle, last or alone', style: 'font-weight:600;fill:#1d2330' }));
    focusStages.forEach((n, si) => POS.forEach((p, pi) => {
      const v = (F.stages[n].summary.position[p] || { share: 0 }).share;
      const y = 22 + (si * POS.length + pi) * rowH;
      chart.append(el('svg:text', { x: L - 6, y: y + 12, 'text-anchor': 'end', text: `${n} · ${p}` }),
        el('svg:rect', { x: L, y: y + 3, width: Math.max(0, v * (W - L - 60)), height: rowH - 6, fill: COLORS[si % COLORS.length], 'data-stage': n, 'data-position': p }),
        el('svg:text', { x: L + v * (W - L - 60) + 4, y: y + 12, text: pct(v) }));
    }));
    body.append(el('div', { class: 'charts' }, chart));
    const multi = k => F.stages[st].summary.multi_skill[k];
    const multiText = k => `${multi(k).queries} (Completeness@10 ${num(multi(k)['completeness@10'].mean)})`;
    body.append(el('p', { class: 'note', id: 'multi-skill', text: `${st}: requests with several gold skills whose intent sentences are one: ${multiText('one_sentence')}; in different sentences: ${multiText('several_sentences')}.` }));
    const controls = el('div', { class: 'controls' }, el('label', {}, 'stage ', el('select', { id: 'focus-stage', onchange: e => go({ fs: e.target.value }) },
      focusStages.map(n => el('option', { value: n, selected: n === st ? 'selected' : null, text: n })))));
    body.append(el('h3', { text: `Each request, its sentences shaded by what leaving each out does to a gold skill's score (${st}; hover for the numbers)` }), controls);
    for (const fq of F.queries) {
      const q = byId.get(fq.query_id);
      const row = focusRows[st].get(fq.query_id);
      if (!q || !row) continue;
      const pieces = sentencePieces(q.text, fq.sentences);
      const block = el('div', { class: 'focus-query', 'data-query': fq.query_id },
        el('h3', {}, el('a', { href: '#', onclick: e => { e.preventDefault(); go({ q: fq.query_id, view: 'queries' }); }, text: `Query ${fq.query_id}` }), ' ',
          el('span', { class: 'muted', text: `NDCG@10 ${num(row.full['ndcg@10'])}; best sentence ${row.best_sentence === null ? '–' : row.best_sentence + 1} alone ${num(row['best_sentence_ndcg@10'])}` })));
      for (const g of row.gold) {
        const deltas = g.without.map(w => (g.full.score === null || w.score === null) ? null : g.full.score - w.score);
        const max = Math.max(0, ...deltas.filter(d => d !== null).map(Math.abs));
        block.append(el('div', { class: 'focus-gold', 'data-gold': g.skill_id },
          el('div', { class: 'muted', text: `${focusSkill(g.skill_id)}: rank ${g.full.rank || '–'} with the full request` }),
          el('div', { class: 'querytext focus-text' }, pieces.map(p => p.i === undefined ? p.text : el('span', {
            class: 'sent' + (g.intent === p.i ? ' intent' : ''), 'data-sentence': p.i, 'data-delta': deltas[p.i],
            style: shade(deltas[p.i], max),
            title: `sentence ${p.i + 1}: Δ score ${signed(deltas[p.i])} when left out (rank ${g.full.rank || '–'} → ${g.without[p.i].rank || '–'}); alone: rank ${g.alone[p.i].rank || '–'}, score ${num(g.alone[p.i].score)}${g.intent === p.i ? '; the intent sentence' : ''}`,
            text: p.text })))));
      }
      body.append(block);
    }
  }

  // The request with the intent sentences of the focus view's stage marked (where the run has
  // query focus).
  function queryText(q, s) {
    const fq = F ? F.queries.find(x => x.query_id === q.id) : null;
    const row = fq ? focusRows[focusStage(s)].get(q.id) : null;
    if (!row) return el('div', { class: 'querytext', id: 'query-text', text: q.text });
    const intents = new Map();
    for (const g of row.gold) if (g.intent !== null) intents.set(g.intent, [...(intents.get(g.intent) || []), focusSkill(g.skill_id)]);
    return el('div', { class: 'querytext', id: 'query-text' }, sentencePieces(q.text, fq.sentences).map(p =>
      p.i !== undefined && intents.has(p.i)
        ? el('mark', { class: 'intent', 'data-sentence': p.i, title: `intent sentence of ${intents.get(p.i).join(', ')} (${focusStage(s)})`, text: p.text })
        : p.text));
  }

  function classCounts(ci, filter) {
    const counts = Object.fromEntries(CLASSES.map(c => [c, 0]));
    for (const q of D.queries) if (!filter || filter(q)) counts[q.class[ci]]++;
    return counts;
  }

  function attribution(body) {
    body.append(el('h2', { text: 'Which queries each step rescued, harmed or could not reach' }),
      el('p', { class: 'note', text: `Per query, on ${main}: a retriever miss has no gold skill in the first stage's top N (the reranker's pool), so no reranker could help; rescued and harmed queries rose or fell; both miss: a gold skill was in the pool but neither stage ranked one in the top ${cut}. Click a class to list its queries.` }));
    if (!D.changes.length) body.append(el('p', { text: 'This run has a single stage: there is nothing to attribute.' }));
    D.changes.forEach((c, ci) => {
      body.append(el('h3', { text: stepName(c) }));
      const counts = classCounts(ci);
      body.append(el('div', { class: 'cards' }, CLASSES.filter(k => c.pool || k !== 'retriever miss').map(k =>
        el('div', { class: 'card click', 'data-class': k, onclick: () => go({ view: 'queries', q: null, change: ci, cls: k, slice: '', from: '', to: '' }) },
          el('b', { text: counts[k], style: `color:${CLASS_COLORS[k] === '#d0d5dd' ? '#5b6475' : CLASS_COLORS[k]}` }),
          el('span', { text: `${k} (${pct(counts[k] / D.queries.length)})` })))));
      if (c.pool) {
        const a = D.stages[c.against].metrics[main], b = D.stages[c.stage].metrics[main];
        body.append(el('table', { class: 'pool' }, el('tbody', {},
          el('tr', {}, el('td', { class: 'l', text: `Pool: the first stage's top ${c.pool.depth}` }), el('td', {})),
          el('tr', {}, el('td', { class: 'l', text: `Recall@${c.pool.depth} of ${stageNames[c.against]} (the share of gold skills any reranker can reach)` }), el('td', { text: num(c.pool.recall) })),
          el('tr', {}, el('td', { class: 'l', text: `${main} of ${stageNames[c.against]}` }), el('td', { text: num(a) })),
          el('tr', {}, el('td', { class: 'l', text: `${main} of ${stageNames[c.stage]}` }), el('td', { text: num(b) })),
          el('tr', {}, el('td', { class: 'l', text: `${main} of the oracle reranker (the pool's best order)` }), el('td', { 'data-oracle': '', text: num(c.pool.oracle) })),
          el('tr', { class: 'main' }, el('td', { class: 'l', text: 'Share of the possible gain realised' }), el('td', { class: tone(c.pool.realised), text: pct(c.pool.realised) })))));
      } else {
        body.append(el('p', { class: 'note', text: `${stageNames[c.stage]} is not a reordering of ${stageNames[c.against]}'s top N, so it has no pool and no ceiling.` }));
      }
    });
  }

  function bucket(r, n) {
    if (!r || r > n) return '>N';
    if (r === 1) return '1';
    if (r <= 5) return '2–5';
    if (r <= 10) return '6–10';
    return '11–N';
  }
  const BUCKETS = ['1', '2–5', '6–10', '11–N', '>N'];

  function transitions(body) {
    body.append(el('h2', { text: 'Where each gold skill was, and where the step put it' }),
      el('p', { class: 'note', text: 'Every gold skill of every query: its rank bucket in the first stage (rows) against the later stage (columns); N is the pool. Click a cell to list its queries.' }));
    D.changes.forEach((c, ci) => {
      const n = c.pool ? c.pool.depth : c.depth;
      const m = new Map();
      const beyond = [];
      for (const q of D.queries) q.gold.forEach((g, j) => {
        const a = bucket(q.ranks[c.against][j], n), b = bucket(q.ranks[c.stage][j], n);
        m.set(a + '|' + b, (m.get(a + '|' + b) || 0) + 1);
        const r = q.ranks[c.against][j];
        if (r > n) beyond.push(r);
      });
      const label = b => b.replace('N', String(n));
      body.append(el('h3', { text: `${stepName(c)} (N = ${n}${c.pool ? ', the pool' : `, the depth of ${stageNames[c.stage]}: not a reordering of a pool`})` }),
        el('table', { class: 'matrix', 'data-change': ci },
          el('thead', {}, el('tr', {}, el('th', { class: 'l', text: `${stageNames[c.against]} ↓ / ${stageNames[c.stage]} →` }), BUCKETS.map(b => el('th', { text: label(b) })))),
          el('tbody', {}, BUCKETS.map(a => el('tr', {}, el('th', { class: 'l', text: label(a) }),
            BUCKETS.map(b => {
              const k = m.get(a + '|' + b) || 0;
              return el('td', { class: k ? null : 'zero', 'data-from': a, 'data-to': b, text: k,
                style: k && a !== b ? `background:${BUCKETS.indexOf(b) < BUCKETS.indexOf(a) ? '#e3f4e8' : '#fbe5e3'}` : null,
                onclick: k ? () => go({ view: 'queries', q: null, change: ci, from: a, to: b, cls: '', slice: '' }) : null });
            }))))));
      if (beyond.length) {
        beyond.sort((x, y) => x - y);
        body.append(el('p', { class: 'note', text: `Gold skills beyond N that ${stageNames[c.against]} ranked at full depth: ranks ${beyond.slice(0, 30).join(', ')}${beyond.length > 30 ? ', …' : ''}.` }));
      }
    });
    if (!D.changes.length) body.append(el('p', { text: 'This run has a single stage: there is no step to follow.' }));
  }

  function depth(body) {
    body.append(el('h2', { text: 'Rerank depth: the metric against how much of the pool is reranked' }));
    const pooled = D.changes.filter(c => c.pool);
    for (const c of pooled) {
      if (!c.pool.by_depth) {
        body.append(el('p', { class: 'note', text: `${stepName(c)}: its stored scores are interpolated with the first stage's, so other depths cannot be recomputed from them.` }));
        continue;
      }
      const xs = c.pool.by_depth.ndcg.map((_, i) => i + 1);
      body.append(el('p', { class: 'note', text: `${stepName(c)}: the first stage's top n reranked by the stored pointwise scores, for n = 1…${c.pool.depth} (what --rerank-depth n gives, from this one run).` }),
        el('div', { class: 'charts', id: 'depth-chart' }, lineChart(`${main} and Recall@${cut} by rerank depth n`, xs, [
          { name: `${main}`, values: c.pool.by_depth.ndcg },
          { name: `Recall@${cut}`, values: c.pool.by_depth.recall, dash: '5 3' },
          { name: `${main} of ${stageNames[c.against]}`, values: xs.map(() => D.stages[c.against].metrics[main]), color: '#8b95a7', dash: '2 3' },
        ], 'n')));
    }
    if (!pooled.length) body.append(el('p', { text: 'No step of this run reorders a pool.' }));
    body.append(el('h2', { text: 'Recall@k and NDCG@k per stage' }));
    const xs = D.curves.length ? D.curves[0].recall.map((_, i) => i + 1) : [];
    body.append(el('div', { class: 'charts' },
      lineChart('Recall@k', xs, D.curves.map(c => ({ name: c.stage, values: c.recall })), 'k'),
      lineChart('NDCG@k', xs, D.curves.map(c => ({ name: c.stage, values: c.ndcg })), 'k')));
  }

  function slices(body) {
    body.append(el('h2', { text: `Slices: ${main}'s change per group, with its uncertainty` }),
      el('p', { class: 'note', text: 'Per group: the change of the step, its 95% paired bootstrap interval, the randomization test\'s p and p Holm-corrected across the groups of the slice. Click a group to list its queries.' }));
    for (const sl of D.slices) {
      const span = Math.max(0.05, ...sl.groups.flatMap(g => g.changes.flatMap(c => [Math.abs(c.lo || 0), Math.abs(c.hi || 0)])));
      body.append(el('h3', { text: sl.title.replace(/`/g, '') }),
        el('table', { 'data-slice': sl.key },
          el('thead', {}, el('tr', {}, el('th', { class: 'l', text: 'group' }), el('th', { text: 'queries' }),
            D.changes.map(c => [el('th', { text: 'Δ ' + stepName(c) }), el('th', { text: `±${span.toFixed(2)}` }), el('th', { text: 'p' }), el('th', { text: 'p (Holm)' })]))),
          el('tbody', {}, sl.groups.map((g, gi) => el('tr', { class: 'click', style: 'cursor:pointer',
            onclick: () => go({ view: 'queries', q: null, slice: `${sl.key}:${gi}`, cls: '', from: '', to: '' }) },
          el('td', { class: 'l', text: g.label }), el('td', { text: g.queries }),
          g.changes.map(c => [el('td', { class: tone(c.delta) }, signed(c.delta), el('div', { class: 'ci', text: `[${signed(c.lo)}, ${signed(c.hi)}]` })),
            el('td', {}, whisker(c.delta, c.lo, c.hi, span)), el('td', { text: num(c.p, 3) }),
            el('td', { class: c.p_holm < 0.05 ? 'main' : null, text: num(c.p_holm, 3) })]))))));
    }
  }

  function sliceLabel(key) {
    const [k, g] = key.split(':');
    const sl = D.slices.find(s => s.key === k);
    return sl && sl.groups[g] ? `${sl.title.replace(/`/g, '').replace(/^By /, '')}: ${sl.groups[g].label}` : key;
  }

  function filtered(s) {
    const c = D.changes[s.change];
    const text = s.text.toLowerCase();
    let rows = D.queries.filter(q => {
      if (s.cls && c && q.class[s.change] !== s.cls) return false;
      if (s.slice) {
        const [k, g] = s.slice.split(':');
        if (!(q.slices[k] || []).includes(Number(g))) return false;
      }
      if (s.from && c) {
        const n = c.pool ? c.pool.depth : c.depth;
        if (!q.gold.some((_, j) => bucket(q.ranks[c.against][j], n) === s.from && bucket(q.ranks[c.stage][j], n) === s.to)) return false;
      }
      if (text && !q.id.toLowerCase().includes(text) && !q.text.toLowerCase().includes(text)) return false;
      return true;
    });
    const delta = q => c ? q.ndcg[c.stage] - q.ndcg[c.against] : 0;
    const key = s.sort === 'delta' ? delta : s.sort === 'words' ? (q => q.words)
      : s.sort.startsWith('stage') ? (q => q.ndcg[Number(s.sort.slice(5))]) : null;
    rows = rows.slice().sort((a, b) => {
      const x = key ? key(a) - key(b) : 0;
      return (x || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)) * (s.dir === 'desc' ? -1 : 1);
    });
    return rows;
  }

  function queries(body, s) {
    const c = D.changes[s.change];
    body.append(el('h2', { text: 'Queries' }));
    const controls = el('div', { class: 'controls' });
    if (D.changes.length > 1) controls.append(el('label', {}, 'step ', el('select', { id: 'change', onchange: e => go({ change: Number(e.target.value) }) },
      D.changes.map((c, i) => el('option', { value: i, selected: i === s.change ? 'selected' : null, text: stepName(c) })))));
    if (c) controls.append(el('label', {}, 'class ', el('select', { id: 'filter-class', onchange: e => go({ cls: e.target.value }) },
      el('option', { value: '', text: 'all' }), CLASSES.map(k => el('option', { value: k, selected: s.cls === k ? 'selected' : null, text: k })))));
    controls.append(el('label', {}, 'slice ', el('select', { id: 'filter-slice', onchange: e => go({ slice: e.target.value }) },
      el('option', { value: '', text: 'all' }), D.slices.flatMap(sl => sl.groups.map((g, gi) =>
        el('option', { value: `${sl.key}:${gi}`, selected: s.slice === `${sl.key}:${gi}` ? 'selected' : null, text: sliceLabel(`${sl.key}:${gi}`) }))))));
    const search = el('input', { type: 'search', id: 'search', placeholder: 'search id or text', value: s.text });
    search.addEventListener('change', e => go({ text: e.target.value }));
    controls.append(search);
    if (s.from) controls.append(el('span', { class: 'chip', id: 'transition-chip' }, `gold ${s.from} → ${s.to}`,
      el('button', { title: 'clear', text: '×', onclick: () => go({ from: '', to: '' }) })));
    body.append(controls);
    const rows = filtered(s);
    const sorter = (key, label) => el('button', { class: 'sort', 'data-sort': key, text: label + (s.sort === key ? (s.dir === 'asc' ? ' ▲' : ' ▼') : ''),
      onclick: () => go({ sort: key, dir: s.sort === key && s.dir === 'asc' ? 'desc' : 'asc' }) });
    body.append(el('p', { class: 'note', id: 'count', text: `${rows.length} of ${D.queries.length} queries` }),
      el('table', { class: 'queries', id: 'queries' },
        el('thead', {}, el('tr', {}, el('th', { class: 'l' }, sorter('id', 'query')), el('th', {}, sorter('words', 'words')),
          el('th', { text: 'gold' }), stageNames.map((n, i) => el('th', {}, sorter('stage' + i, `${n} ${main}`))),
          c ? el('th', {}, sorter('delta', 'Δ ' + stepName(c))) : null, c ? el('th', { class: 'l', text: 'class' }) : null)),
        el('tbody', {}, rows.map(q => el('tr', { 'data-query': q.id, onclick: () => go({ q: q.id, view: 'queries' }) },
          el('td', { class: 'l', text: q.id }), el('td', { text: q.words }), el('td', { text: q.gold.length }),
          q.ndcg.map(v => el('td', { text: num(v) })),
          c ? el('td', { class: tone(q.ndcg[c.stage] - q.ndcg[c.against]), text: signed(q.ndcg[c.stage] - q.ndcg[c.against]) }) : null,
          c ? el('td', { class: 'l' }, el('span', { class: 'badge', text: q.class[s.change] })) : null)))));
  }

  let bodies = null;
  async function skillBody(i) {
    const at = D.bodies.skills.indexOf(i);
    if (at < 0) return null;
    if (!bodies) {
      const bytes = Uint8Array.from(atob(D.bodies.gzip_base64), ch => ch.charCodeAt(0));
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
      bodies = JSON.parse(await new Response(stream).text());
    }
    return bodies[at];
  }

  function skillPanel(i, q) {
    const goldAt = q.gold.findIndex(g => g[0] === i);
    const panel = el('div', { class: 'skill', id: 'skill-panel', 'data-skill': skillId(i) },
      el('h3', {}, skillName(i), ' ', goldAt >= 0 ? el('span', { class: 'badge gold', text: `gold (grade ${q.gold[goldAt][1]})` }) : null),
      el('p', { class: 'muted', text: skillId(i) + (typeof i === 'number' && skills.major[i] ? ` · ${skills.major[i]}${skills.sub[i] ? ' / ' + skills.sub[i] : ''}` : '') }),
      el('p', { text: typeof i === 'number' ? skills.description[i] : '' }));
    const pre = el('pre', { id: 'skill-body', hidden: 'hidden' });
    const button = el('button', { id: 'show-body', text: 'Show the full SKILL.md', onclick: async () => {
      const text = await skillBody(i);
      pre.textContent = text === null ? '(not embedded: the report keeps the bodies of the best-ranked skills within its size budget)' : text;
      pre.removeAttribute('hidden');
      button.remove();
    } });
    panel.append(button, pre);
    return panel;
  }

  function queryView(body, q, s) {
    body.append(el('p', {}, el('a', { href: '#', onclick: e => { e.preventDefault(); go({ q: null }); }, text: '← all queries' })),
      el('h2', { id: 'query-title', text: `Query ${q.id}` }),
      queryText(q, s));
    const goldIds = new Set(q.gold.map(g => g[0]));
    // Gold skills and their ranks in each stage.
    body.append(el('h3', { text: 'Gold skills' }), el('table', { id: 'gold-table' },
      el('thead', {}, el('tr', {}, el('th', { class: 'l', text: 'skill' }), el('th', { text: 'grade' }), stageNames.map(n => el('th', { text: n })))),
      el('tbody', {}, q.gold.map((g, j) => el('tr', { 'data-skill': skillId(g[0]) }, el('td', { class: 'l', text: skillName(g[0]) }), el('td', { text: g[1] }),
        stageNames.map((_, si) => el('td', { 'data-stage': stageNames[si], text: q.ranks[si][j] || '–' })))))));
    const missed = q.gold.filter((g, j) => q.ranks.every(r => !r[j] || r[j] > D.shown));
    if (missed.length) body.append(el('p', { id: 'missed', class: 'note' }, `Gold skills no stage put in its top ${D.shown}: `,
      missed.map(g => { const j = q.gold.indexOf(g); return `${skillName(g[0])} (ranks ${q.ranks.map(r => r[j] || '–').join(' / ')})`; }).join('; ')));
    const panelSlot = el('div', {});
    const lists = el('div', { class: 'lists' }, D.stages.map((st, si) => {
      const before = st.after === null ? null : q.top[st.after];
      return el('div', { 'data-stage': st.name },
        el('h3', {}, `${st.name} `, el('span', { class: 'muted', text: `${main} ${num(q.ndcg[si])}` })),
        el('ol', {}, q.top[si].map((i, r) => {
          let move = null;
          if (before) {
            const was = before.indexOf(i);
            move = was < 0 ? el('span', { class: 'mv up', text: 'new' })
              : was > r ? el('span', { class: 'mv up', text: `↑${was - r}` })
                : was < r ? el('span', { class: 'mv down', text: `↓${r - was}` }) : el('span', { class: 'mv muted', text: '=' });
          }
          return el('li', { class: goldIds.has(i) ? 'gold' : null, 'data-skill': skillId(i), 'data-rank': r + 1,
            onclick: () => panelSlot.replaceChildren(skillPanel(i, q)) },
          el('span', { class: 'r', text: r + 1 }), skillName(i), move,
          el('span', { class: 'd', text: typeof i === 'number' ? skills.description[i] : '' }));
        })));
    }));
    body.append(lists, panelSlot);
  }

  // ---------- the sweep's leaderboard ----------
  function leaderboard() {
    const body = el('main', { id: 'view-leaderboard' });
    body.append(el('p', { class: 'note', text: `Sorted by ${D.metric}, each with its 95% bootstrap interval over queries. Tier: configurations whose difference to the one above is not significant (paired randomization test, p ≥ 0.05) share a tier. Δ: a reranker's change on its first stage.` }));
    const rows = D.rows;
    const hi = Math.max(0.05, ...rows.map(r => r.hi || r.value || 0));
    const W = 640, rowH = 22, L = 250;
    const chart = el('svg:svg', { width: W, height: rows.length * rowH + 24, viewBox: `0 0 ${W} ${rows.length * rowH + 24}`, id: 'bars' });
    const x = v => L + (v / hi) * (W - L - 20);
    rows.forEach((r, i) => {
      const y = 8 + i * rowH;
      chart.append(el('svg:text', { x: L - 8, y: y + 13, 'text-anchor': 'end', text: r.label }));
      chart.append(el('svg:rect', { x: L, y: y + 3, width: Math.max(0, x(r.value || 0) - L), height: rowH - 8, fill: r.stage === 'reranker' ? '#c2410c' : '#2b5fb8', opacity: 0.8 }));
      if (r.lo !== null) chart.append(el('svg:line', { x1: x(r.lo), x2: x(r.hi), y1: y + rowH / 2 - 1, y2: y + rowH / 2 - 1, stroke: '#1d2330', 'stroke-width': 1.5 }));
    });
    body.append(el('div', {}, chart));
    body.append(el('table', { id: 'leaderboard' },
      el('thead', {}, el('tr', {}, ['#', 'tier'].map(t => el('th', { text: t })), el('th', { class: 'l', text: 'model' }), el('th', { class: 'l', text: 'stage' }),
        el('th', { class: 'l', text: 'first stage' }), el('th', { text: 'depth' }), el('th', { text: D.metric }), el('th', { text: 'Δ' }), el('th', { text: 'p' }),
        D.columns.map(c => el('th', { text: c })), el('th', { class: 'l', text: 'report' }))),
      el('tbody', {}, rows.map((r, i) => el('tr', { 'data-row': i, 'data-tier': r.tier },
        el('td', { text: i + 1 }), el('td', { text: r.tier }), el('td', { class: 'l', text: r.model }), el('td', { class: 'l', text: r.stage }),
        el('td', { class: 'l', text: r.first_stage || '' }), el('td', { text: r.depth || '' }),
        el('td', {}, num(r.value), el('div', { class: 'ci', text: r.lo === null ? '' : `[${num(r.lo)}, ${num(r.hi)}]` })),
        el('td', { class: tone(r.delta), text: r.delta === null ? '' : signed(r.delta) }), el('td', { text: r.p === null ? '' : num(r.p, 3) }),
        D.columns.map(c => el('td', { text: num(r.scores[c]) })),
        el('td', { class: 'l' }, r.report ? el('a', { href: r.report, text: 'report' }) : ''))))));
    if (D.failed.length) body.append(el('h2', { text: 'Failed' }), el('ul', {}, D.failed.map(f => el('li', { text: `${f.job}: ${f.error}` }))));
    app.replaceChildren(header(D.title, D.about, [], ''), body);
  }

  window.addEventListener('hashchange', render);
  render();
})();
