// jetpool dashboard: plain JavaScript, no build step, nothing loaded from
// elsewhere. It reads the JSON API under api/ (relative, so the dashboard
// can be mounted under a prefix) and refreshes the page it shows while
// "live" is on. Every value from the server is put in the page as text
// (textContent), never as HTML: record bodies and errors are data.
'use strict';

(() => {
  const S = { session: null, timer: 0, gen: 0, samples: new Map() };
  const main = () => document.getElementById('main');

  // ---- DOM and formatting helpers -------------------------------------

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'width') e.style.width = v; // CSSOM: the CSP allows no inline style attribute
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === undefined || kid === null || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }
  const num = (n) => (n === undefined || n === null ? '-' : Number(n).toLocaleString('en-US'));
  const cell = (v, cls) => el('td', { class: cls }, v);
  const ncell = (v) => el('td', { class: 'num' }, typeof v === 'number' ? num(v) : v);
  const badge = (s, cls) => el('span', { class: 'badge st-' + (cls || s) }, s);
  const short = (s, n) => (!s ? '' : s.length > n ? s.slice(0, n - 1) + '…' : s);
  const q = (o) => new URLSearchParams(Object.entries(o).filter(([, v]) => v !== '' && v !== undefined && v !== null)).toString();

  function dur(sec) {
    if (!isFinite(sec) || sec < 0) return '-';
    sec = Math.round(sec);
    if (sec < 60) return sec + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm ' + (sec % 60) + 's';
    if (sec < 86400) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
    return Math.floor(sec / 86400) + 'd ' + Math.floor((sec % 86400) / 3600) + 'h';
  }
  const ago = (t) => (!t || t.startsWith('0001') ? '-' : dur((Date.now() - Date.parse(t)) / 1000) + ' ago');
  const rate = (r) => (r >= 100 ? num(Math.round(r)) : (r || 0).toFixed(1)) + '/s';

  // cost renders a result's or a status's cost, whatever its shape: a
  // number, or an object of numbers (a total and its parts).
  function cost(v) {
    if (v === undefined || v === null) return null;
    if (typeof v === 'number') return '$' + v.toFixed(v < 1 ? 4 : 2);
    if (typeof v === 'object') {
      const total = v.total ?? v.total_usd ?? v.usd;
      if (typeof total === 'number') return cost(total);
      return Object.entries(v).map(([k, x]) => k + ' ' + (typeof x === 'number' ? cost(x) : JSON.stringify(x))).join(', ');
    }
    return String(v);
  }
  // costOf is what o cost: a record's total (every action and replay), a
  // job's cost so far; never its budget or the parts of its cost.
  const costOf = (o) => {
    if (!o) return null;
    for (const k of ['total_cost', 'cost']) if (k in o) return cost(o[k]);
    for (const k of Object.keys(o)) if (/cost/i.test(k) && !/^max_cost$|^cost_/.test(k)) return cost(o[k]);
    return null;
  };

  function pretty(v) {
    if (v === undefined || v === null) return '';
    if (typeof v === 'string') {
      try { return JSON.stringify(JSON.parse(v), null, 2); } catch { return v; }
    }
    return JSON.stringify(v, null, 2);
  }

  function bar(ok, failed, total, cancelled) {
    cancelled = cancelled || 0;
    total = Math.max(total || 0, ok + failed + cancelled, 1);
    const pct = (n) => (100 * n / total).toFixed(2) + '%';
    return el('div', { class: 'bar', title: `${num(ok)} ok, ${num(failed)} failed, ${num(cancelled)} cancelled of ${num(total)}` },
      el('span', { class: 'ok', width: pct(ok) }), el('span', { class: 'failed', width: pct(failed) }),
      el('span', { class: 'cancelled', width: pct(cancelled) }));
  }

  function table(head, rows, empty) {
    if (!rows.length) return el('p', { class: 'muted' }, empty || 'None.');
    return el('table', {},
      el('thead', {}, el('tr', {}, head.filter((h) => h !== null).map((h) => el('th', { class: h.endsWith(' ') ? 'num' : '' }, h.trim())))),
      el('tbody', {}, rows));
  }

  function kv(pairs) {
    return el('dl', { class: 'kv' }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== '')
      .map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  }

  // Fields the page does not know yet (added to the API by a later
  // version) are still shown, as key: value.
  function others(o, known) {
    const rest = Object.entries(o || {}).filter(([k, v]) => !known.includes(k) && v !== null && v !== '' &&
      !(typeof v === 'object' && Object.keys(v).length === 0));
    return rest.map(([k, v]) => [k.replaceAll('_', ' '), typeof v === 'object' ? JSON.stringify(v) : String(v)]);
  }

  // ---- API ---------------------------------------------------------------

  // api calls the dashboard's server; a read gives up after apiTimeout: a
  // server that lost its store (the process hosting it restarted) answers
  // late or not at all, and the page says so and tries again at the next
  // refresh. An action (a replay of many records) is waited for.
  const apiTimeout = 20000;
  async function api(path, opts) {
    let res;
    try {
      res = await fetch(path, Object.assign({ credentials: 'same-origin', headers: { Accept: 'application/json' },
        signal: opts && opts.method ? undefined : AbortSignal.timeout(apiTimeout) }, opts));
    } catch (e) {
      throw new Error(`the dashboard's server does not answer (${e.name === 'TimeoutError' ? 'no answer in ' + apiTimeout / 1000 + ' s' : e.message}); trying again`);
    }
    if (res.status === 401) { location.href = 'login'; throw new Error('sign in'); }
    let body = null;
    try { body = await res.json(); } catch { /* not JSON */ }
    if (!res.ok) {
      const why = (body && body.error) || res.status + ' ' + res.statusText;
      const err = new Error(res.status === 502 || res.status === 504 ? `the store does not answer (${why}); trying again` : why);
      err.body = body;
      throw err;
    }
    return body;
  }
  const post = (path, data) => api(path, {
    method: 'POST', body: JSON.stringify(data),
    headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'X-Jetpool-CSRF': S.session.csrf },
  });

  // ---- routing and live refresh ------------------------------------------

  function parseHash() {
    const h = location.hash.replace(/^#\/?/, '');
    const [path, query] = h.split('?');
    return { parts: path ? path.split('/').map(decodeURIComponent) : [], params: new URLSearchParams(query || '') };
  }

  const views = { '': jobsView, job: jobView, record: recordView, dlq: dlqView, providers: providersView };

  function render() {
    clearTimeout(S.timer);
    const gen = ++S.gen;
    const { parts, params } = parseHash();
    const view = views[parts[0] || ''] || jobsView;
    document.querySelectorAll('header nav a').forEach((a) => a.classList.toggle('active',
      a.dataset.nav === ({ '': 'jobs', job: 'jobs', record: 'jobs' }[parts[0] || ''] || parts[0])));
    const root = main();
    root.replaceChildren();
    const refresh = view(root, parts.slice(1), params);
    const tick = async () => {
      if (gen !== S.gen) return;
      try {
        await refresh();
        document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
      } catch (e) {
        showError(root, e);
      }
      if (gen === S.gen && document.getElementById('live').checked) S.timer = setTimeout(tick, S.session.poll_ms);
    };
    tick();
  }

  function showError(root, e) {
    let n = root.querySelector(':scope > .notice.error.load');
    if (!n) { n = el('div', { class: 'notice error load' }); root.prepend(n); }
    n.textContent = e.message;
  }
  const clearError = (root) => root.querySelector(':scope > .notice.error.load')?.remove();

  // slot is a region of a view that each refresh replaces.
  function slot(root) {
    const s = el('div');
    root.append(s);
    return (...kids) => { clearError(root); s.replaceChildren(el('div', {}, kids)); };
  }

  // eta keeps the last minute of (time, done) per job and returns the
  // recent rate and the time left at it (the average since the job began
  // when there is not enough history yet). A pipeline's done and total are
  // in steps (a record and action each), its rate in records (steps over
  // the actions).
  function eta(st) {
    const now = Date.now();
    const per = st.steps_total ? st.steps_total / Math.max(st.total, 1) : 1;
    const done = (st.steps_total ? st.steps : st.succeeded + st.failed + (st.cancelled || 0)) / per;
    let h = S.samples.get(st.job) || [];
    h.push([now, done]);
    h = h.filter(([t]) => now - t <= 60000);
    S.samples.set(st.job, h);
    const running = st.status === 'running' || st.status === 'dispatching';
    let r = st.records_per_second;
    const [t0, d0] = h[0];
    if (running && now - t0 >= 4000) r = (done - d0) / ((now - t0) / 1000);
    const left = Math.max(st.total - done, 0);
    return { rate: r, eta: !running ? '-' : left === 0 ? 'finishing' : r > 0 ? dur(left / r) : 'stalled' };
  }

  // ---- jobs ----------------------------------------------------------------

  function statusBadge(st) {
    const paused = st.scheduled ? 'starts ' + new Date(st.start_at).toLocaleString()
      : st.paused_until ? 'paused until ' + new Date(st.paused_until).toLocaleString() : 'paused';
    return [badge(st.status), st.paused ? [' ', badge(paused, 'paused')] : null];
  }

  // progressCell is a job's progress: records finished, and for a pipeline
  // the work done in steps (a record and action each), which moves before
  // any record finishes its last action.
  function progressCell(st) {
    const label = `${num(st.succeeded + st.failed + (st.cancelled || 0))} of ${num(st.total)}`;
    if (!st.steps_total) return [bar(st.succeeded, st.failed, st.total, st.cancelled), el('div', { class: 'bar-label' }, label)];
    const failedSteps = Math.min(st.failed * (st.steps_total / Math.max(st.total, 1)), st.steps);
    return [bar(st.steps - failedSteps, failedSteps, st.steps_total), el('div', { class: 'bar-label steps' },
      `${label} · ${(100 * st.steps / st.steps_total).toFixed(1)}% of the steps`)];
  }

  function jobsView(root) {
    root.append(el('h1', {}, 'Jobs'));
    const put = slot(root);
    return async () => {
      const v = await api('api/jobs');
      const withCost = v.jobs.some((st) => costOf(st) !== null);
      const rows = v.jobs.map((st) => {
        const e = eta(st);
        return el('tr', {},
          cell(el('a', { href: '#/job/' + encodeURIComponent(st.job) }, st.job), 'mono'),
          cell(statusBadge(st)),
          cell(progressCell(st)),
          ncell(st.succeeded), ncell(st.failed), ncell(st.cancelled || 0), ncell(st.queued), ncell(st.in_flight), ncell(st.waiting_for_redelivery),
          ncell(rate(e.rate)), ncell(e.eta), withCost ? cell(costOf(st) || '', 'num') : null, cell(ago(st.created), 'muted'));
      });
      put(el('p', { class: 'muted' }, `${v.workers} worker${v.workers === 1 ? '' : 's'} answered · ${v.jobs.length} job${v.jobs.length === 1 ? '' : 's'}`),
        table(['Job', 'Status', 'Progress', 'Succeeded ', 'Failed ', 'Cancelled ', 'Queued ', 'In flight ', 'Waiting ', 'Rate ', 'ETA ', withCost ? 'Cost so far ' : null, 'Created'],
          rows, 'No jobs yet: `jetpool run` or `jetpool dispatch` one.'));
    };
  }

  // steerBar is a job's cancel, pause and resume buttons (none on a
  // read-only dashboard); the server refuses what the job's state does not
  // allow, and says why.
  function steerBar(root, id, refresh) {
    if (S.session.read_only) return;
    const msg = el('div', { id: 'steer-msg' });
    const act = async (what, body) => {
      try {
        const v = await post('api/jobs/' + encodeURIComponent(id) + '/' + what, body || {});
        msg.replaceChildren(el('div', { class: 'notice', id: 'steered' }, what === 'cancel'
          ? `Cancelled: no new calls (${num(v.workers - (v.still_calling || []).length)} of ${num(v.workers)} workers confirmed); ${num(v.queued)} queued records end cancelled.`
          : what === 'priority' ? `Priority ${v.priority}.`
            : v.paused ? 'Paused: nothing of the job is delivered until it is resumed.' : 'Resumed.'));
      } catch (e) {
        msg.replaceChildren(el('div', { class: 'notice error' }, what + ' failed: ' + e.message));
      }
      refresh();
    };
    const prio = el('input', { type: 'number', id: 'priority-value', min: '1', max: '1000', value: '1', class: 'prio' });
    const confirmCancel = () => msg.replaceChildren(el('div', { class: 'notice confirm' },
      el('span', {}, 'Cancel this job? No new calls start; calls in flight finish; queued records end cancelled (jetpool retry --reason cancelled runs them).'),
      el('button', { type: 'button', id: 'confirm-cancel', class: 'danger', onclick: () => act('cancel') }, 'Cancel the job'),
      el('button', { type: 'button', onclick: () => msg.replaceChildren() }, 'Keep it')));
    root.append(el('div', { class: 'toolbar', id: 'steer' },
      el('button', { type: 'button', id: 'job-pause', onclick: () => act('pause') }, 'Pause'),
      el('button', { type: 'button', id: 'job-resume', onclick: () => act('resume') }, 'Resume'),
      el('button', { type: 'button', id: 'job-cancel', class: 'danger', onclick: confirmCancel }, 'Cancel…'),
      el('label', {}, 'priority ', prio), el('button', { type: 'button', id: 'job-priority',
        onclick: () => act('priority', { priority: Number(prio.value) }) }, 'Set')), msg);
  }

  function jobView(root, [id]) {
    root.append(el('h1', {}, 'Job ', el('span', { class: 'mono' }, id)));
    let refresh = () => {};
    steerBar(root, id, () => refresh());
    const put = slot(root);
    const chart = el('div', { class: 'chart', id: 'history' });
    root.append(el('h2', {}, 'Rate and errors, last 15 minutes'), chart);
    root.append(el('h2', {}, 'Records'));
    recordsPanel(root, id);
    return refresh = async () => {
      const v = await api('api/jobs/' + encodeURIComponent(id));
      // After the job's read, which is the sample the history adds.
      api('api/jobs/' + encodeURIComponent(id) + '/history').then(
        (h) => chart.replaceChildren(...window.jetpoolHistoryChart(h, { el, num, rate, pollMs: S.session.poll_ms })),
        (e) => chart.replaceChildren(el('p', { class: 'notice error' }, 'history: ' + e.message)));
      const st = v.status;
      const pi = document.getElementById('priority-value');
      if (pi && document.activeElement !== pi && st.priority) pi.value = st.priority;
      const e = eta(st);
      const c = costOf(st);
      const card = (k, val) => el('div', { class: 'card', id: 'card-' + k.replaceAll(' ', '-') }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, val));
      const dlq = (o) => '#/dlq?' + q(Object.assign({ job: id }, o));
      const byReason = Object.entries(st.dead_lettered_by_reason || {}).sort((a, b) => b[1] - a[1]);
      const byClass = Object.entries(v.dead_letters.by_class || {}).sort((a, b) => b[1] - a[1]);
      put(
        el('div', { class: 'cards' },
          card('status', statusBadge(st)), card('total', num(st.total)),
          card('succeeded', num(st.succeeded)), card('failed', num(st.failed)), card('cancelled', num(st.cancelled || 0)),
          card('queued', num(st.queued)), card('in flight', num(st.in_flight)), card('storing', num(st.storing)),
          card('waiting', num(st.waiting_for_redelivery)), card('rate', rate(e.rate)), card('eta', e.eta),
          card('dead letters', el('a', { href: dlq({}) }, num(v.dead_letters.total) + (v.dead_letters.at_least ? '+' : ''))),
          card('workers', num(st.workers)), c ? card('cost so far', c) : null),
        st.reason ? el('div', { class: 'notice error' }, st.status + ': ' + st.reason) : null,
        el('h2', {}, 'Actions'),
        table(['Action', 'Progress', 'OK ', 'Failed ', 'Cancelled ', 'In the work stream '], v.actions.map((a) => el('tr', {},
          cell(a.action, 'mono'), cell(bar(a.ok, a.failed, st.total, a.cancelled)), ncell(a.ok),
          ncell(a.failed ? el('a', { href: dlq({ action: a.action }) }, num(a.failed)) : 0),
          ncell(a.cancelled ? el('a', { href: dlq({ action: a.action, reason: 'cancelled' }) }, num(a.cancelled)) : 0), ncell(a.queued)))),
        el('div', { class: 'grid2' },
          el('div', {}, el('h2', {}, 'Failed by reason'),
            table(['Reason', 'Records '], byReason.map(([r, n]) => el('tr', {}, cell(el('a', { href: dlq({ reason: r }) }, r)), ncell(n))), 'No failures.')),
          el('div', {}, el('h2', {}, 'Dead letters by error class'),
            table(['Class', 'Dead letters '], byClass.map(([k, n]) => el('tr', {}, cell(k ? el('a', { href: dlq({ class: k }) }, k) : '(none)'), ncell(n))), 'No dead letters.'))),
        st.batches && st.batches.length ? [el('h2', {}, 'Provider batches'), table(['Action', 'Batch', 'State', 'Round ', 'Total ', 'Succeeded ', 'Failed ', 'Age', 'Last error'],
          st.batches.map((b) => el('tr', {}, cell(b.action), cell(b.provider_batch_id || '(' + b.key + ')', 'mono'), cell(b.state), ncell(b.round),
            ncell(b.counts.total), ncell(b.counts.succeeded), ncell(b.counts.failed), cell(b.age), cell(b.last_error || '', 'err'))))] : null,
        el('h2', {}, 'Job'),
        kv([['actions', v.job.actions.join(' → ')], ['input', v.job.input], ['created', v.job.created + ' (' + ago(v.job.created) + ')'],
          ['updated', ago(v.job.updated)], ['max deliveries', v.job.max_deliver]].concat(others(st, knownStatus))));
    };
  }
  const knownStatus = ['job', 'status', 'reason', 'total', 'queued', 'in_flight', 'storing', 'waiting_for_redelivery', 'succeeded',
    'failed', 'cancelled', 'dead_lettered_by_reason', 'dead_letters', 'paused', 'records_per_second', 'created', 'workers', 'batches', 'steps', 'steps_total'];

  // recordsPanel: find a record by id, or page through the job's results.
  function recordsPanel(root, job) {
    const outcomes = ['ok', 'failed'].concat(S.session.reasons);
    const list = el('div');
    let after = 0;
    const form = el('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); go(); } },
      el('label', {}, 'record id', el('input', { name: 'id', placeholder: 'doc-001', size: 24 })),
      el('button', { type: 'submit', class: 'primary' }, 'Show its story'),
      el('span', { class: 'spacer' }),
      el('label', {}, 'results with outcome', el('select', { name: 'outcome', onchange: () => load(true) },
        el('option', { value: '' }, 'any'), outcomes.map((o) => el('option', { value: o }, o)))));
    const more = el('button', { type: 'button', onclick: () => load(false) }, 'More');
    root.append(form, list, more);
    const go = () => {
      const id = form.elements.id.value.trim();
      if (id) location.hash = '#/record/' + encodeURIComponent(job) + '/' + encodeURIComponent(id);
    };
    async function load(fresh) {
      if (fresh) { after = 0; list.replaceChildren(); }
      try {
        const v = await api('api/jobs/' + encodeURIComponent(job) + '/results?' + q({ outcome: form.elements.outcome.value, after: after || '', limit: 50 }));
        const withCost = v.results.some((m) => costOf(m.data) !== null);
        const rows = v.results.map((m) => {
          const r = m.data;
          return el('tr', {},
            cell(el('a', { href: '#/record/' + encodeURIComponent(job) + '/' + encodeURIComponent(r.id) }, r.id), 'mono'),
            cell(r.action, 'mono'), cell(badge(r.status === 'ok' ? 'ok' : (r.reason || 'failed'), r.status)),
            ncell(r.recovery ? r.recovery.attempts : 0), ncell(r.recovery ? r.recovery.deliveries : 0),
            withCost ? cell(costOf(r) || '', 'num') : null, cell(short(r.error ? r.error.message : typeof r.output === 'string' ? r.output : JSON.stringify(r.output ?? ''), 90)),
            cell(ago(r.finished_at), 'muted'));
        });
        if (fresh || !list.firstChild) list.replaceChildren(table(['Record', 'Action', 'Outcome', 'Attempts ', 'Deliveries ', withCost ? 'Cost ' : null, 'Output or error', 'Finished'], rows, 'No results yet.'));
        else list.querySelector('tbody')?.append(...rows);
        after = v.next || 0;
        more.hidden = !v.next;
      } catch (e) {
        list.replaceChildren(el('div', { class: 'notice error' }, e.message));
      }
    }
    load(true);
  }

  // ---- a record's story --------------------------------------------------------

  function recordView(root, [job, id]) {
    root.append(el('h1', {}, 'Record ', el('span', { class: 'mono' }, id)),
      el('p', {}, 'of job ', el('a', { class: 'mono', href: '#/job/' + encodeURIComponent(job) }, job)));
    const put = slot(root);
    return async () => {
      const v = await api('api/jobs/' + encodeURIComponent(job) + '/records/' + encodeURIComponent(id));
      const order = (a) => { const i = v.actions.indexOf(a); return i < 0 ? 99 : i; };
      const results = v.results.map((m) => m.data).sort((a, b) => order(a.action) - order(b.action));
      const stories = results.map((r) => el('div', { class: 'story' },
        el('h3', {}, el('span', { class: 'mono' }, r.action), ' ', badge(r.status === 'ok' ? 'ok' : (r.reason || 'failed'), r.status)),
        kv([['attempts', r.recovery.attempts], ['deliveries', r.recovery.deliveries], ['repairs', r.recovery.repairs],
          ['classes seen', (r.recovery.classes || []).join(', ')], ['provider', r.provider], ['model', r.model],
          ['replays', r.replays], ['tokens', r.usage ? `${num(r.usage.input_tokens)} in, ${num(r.usage.output_tokens)} out` : ''],
          ['cost', costOf(r)], ['finished', r.finished_at ? r.finished_at + ' (' + ago(r.finished_at) + ')' : '']]
          .concat(others(r, ['id', 'status', 'output', 'error', 'reason', 'recovery', 'usage', 'action', 'job', 'outputs', 'provider', 'model', 'replays', 'finished_at']))),
        r.error ? [el('div', { class: 'muted' }, 'error (' + (r.error.class || 'unknown') + (r.error.retryable ? ', retryable' : '') + ')'), el('pre', { class: 'err' }, r.error.message)] : null,
        r.recovery.failures && r.recovery.failures.length ? table(['# ', 'Delivery ', 'Class', 'Error'], r.recovery.failures.map((f) => el('tr', {},
          ncell(f.n), ncell(f.delivery), cell(f.class + (f.absorbed ? ' (absorbed)' : '') + (f.repair ? ' (repair)' : '')), cell(f.error, 'err')))) : null,
        r.output !== undefined ? [el('div', { class: 'muted' }, 'output'), el('pre', {}, pretty(r.output))] : null));
      const dls = v.dead_letters.map((d) => deadLetterBlock(d));
      put(stories.length ? stories : el('p', { class: 'muted' }, 'No result yet for this record (queued, in flight, or not in this job).'),
        el('h2', {}, 'Dead letters'), dls.length ? dls : el('p', { class: 'muted' }, 'None.'));
    };
  }

  function deadLetterBlock(d) {
    const headers = d.headers ? Object.entries(d.headers).sort(([a], [b]) => (b.startsWith('Jetpool-') - a.startsWith('Jetpool-')) || a.localeCompare(b))
      .map(([k, vs]) => [k, vs.join(', ')]) : [
      ['Jetpool-Reason', d.reason], ['Jetpool-Error-Class', d.class], ['Jetpool-Attempts', d.attempts], ['Jetpool-Deliveries', d.deliveries],
      ['Jetpool-Provider', d.provider], ['Jetpool-Model', d.model], ['Jetpool-Failed-At', d.failed_at], ['Jetpool-Replays', d.replays]];
    return el('div', { class: 'story' },
      el('h3', {}, el('a', { href: '#/dlq/' + d.seq }, 'dead letter ' + d.seq), ' ', badge(d.reason, 'failed'), ' ',
        el('span', { class: 'mono muted' }, d.subject)),
      el('pre', { class: 'err' }, d.error), kv(headers.map(([k, v]) => [el('span', { class: 'mono' }, k), String(v ?? '')])),
      el('div', { class: 'muted' }, 'body'), el('pre', {}, d.body !== undefined ? pretty(d.body) : d.text || ''));
  }

  // ---- dead letters ------------------------------------------------------------

  const filterKeys = ['job', 'action', 'reason', 'class', 'since', 'limit'];

  function dlqView(root, [seq], params) {
    if (seq) return deadLetterView(root, seq);
    root.append(el('h1', {}, 'Dead letters'));
    const f = Object.fromEntries(filterKeys.map((k) => [k, params.get(k) || '']));
    const sel = (name, values) => el('select', { name }, el('option', { value: '' }, 'any'),
      values.map((v) => el('option', { value: v, selected: v === f[name] }, v)));
    const form = el('form', { class: 'filters', id: 'dlq-filter', onsubmit: (ev) => {
      ev.preventDefault();
      location.hash = '#/dlq?' + q(Object.fromEntries(filterKeys.map((k) => [k, form.elements[k].value.trim()])));
    } },
    el('label', {}, 'job', el('input', { name: 'job', value: f.job, size: 28 })),
    el('label', {}, 'action', el('input', { name: 'action', value: f.action, size: 14 })),
    el('label', {}, 'reason', sel('reason', S.session.reasons)),
    el('label', {}, 'class', sel('class', S.session.classes)),
    el('label', {}, 'since', el('input', { name: 'since', value: f.since, size: 6, placeholder: '2h' })),
    el('label', {}, 'limit', el('input', { name: 'limit', value: f.limit, size: 5, placeholder: 'all' })),
    el('button', { type: 'submit', class: 'primary' }, 'Filter'),
    el('a', { href: '#/dlq' }, 'clear'));
    root.append(form);
    const bar = el('div', { class: 'toolbar' });
    const msg = el('div');
    root.append(bar, msg);
    const put = slot(root);
    let matched = 0;
    const filter = Object.fromEntries(Object.entries(f).filter(([, v]) => v !== ''));
    if (filter.limit) filter.limit = Number(filter.limit) || 0;

    function confirmBar(what, n, run) {
      const mode = el('input', { type: 'checkbox', id: 'replay-online' });
      const c = el('div', { class: 'confirm', id: 'confirm' },
        el('span', {}, what === 'replay'
          ? `Replay ${num(n)} dead letter${n === 1 ? '' : 's'} into the work stream (a new replay generation), as \`jetpool retry\` with these filters does?`
          : `Purge ${num(n)} dead letter${n === 1 ? '' : 's'} for good, as \`jetpool dlq purge\` with these filters does?`),
        what === 'replay' ? el('label', {}, mode, ' run batch-mode actions online') : null,
        el('button', { type: 'button', id: 'confirm-' + what, class: what === 'replay' ? 'primary' : 'danger', onclick: async (ev) => {
          ev.target.disabled = true;
          await run(mode.checked);
          c.remove();
        } }, what === 'replay' ? 'Replay them' : 'Purge them'),
        el('button', { type: 'button', onclick: () => c.remove() }, 'Cancel'));
      msg.replaceChildren(c);
    }
    async function replay(online) {
      try {
        const v = await post('api/dlq/replay', Object.assign({}, filter, online ? { mode: 'online' } : {}));
        msg.replaceChildren(el('div', { class: 'notice', id: 'replayed' },
          `Replayed ${num(v.replayed)} of ${num(v.matched)} (job${v.jobs.length === 1 ? '' : 's'} ${v.jobs.join(', ')}).`,
          v.note ? ' ' + v.note + '.' : '', v.skipped ? el('pre', {}, 'skipped:\n' + v.skipped.join('\n')) : null,
          v.warnings ? el('pre', { class: 'warning' }, 'warning: ' + v.warnings.join('\nwarning: ')) : null,
          v.jobs.length === 1 ? [' ', el('a', { href: '#/job/' + encodeURIComponent(v.jobs[0]) }, 'Follow the job →')] : null));
      } catch (e) {
        msg.replaceChildren(el('div', { class: 'notice error' }, 'Replay failed: ' + e.message));
      }
      refresh();
    }
    async function purge() {
      try {
        const v = await post('api/dlq/purge', filter);
        msg.replaceChildren(el('div', { class: 'notice', id: 'purged' }, `Purged ${num(v.purged)} dead letters.`));
      } catch (e) {
        msg.replaceChildren(el('div', { class: 'notice error' }, 'Purge failed: ' + e.message));
      }
      refresh();
    }
    if (!S.session.read_only) {
      bar.append(
        el('button', { type: 'button', id: 'replay', class: 'primary', onclick: () => confirmBar('replay', matched, replay) }, 'Replay matching…'),
        el('button', { type: 'button', id: 'purge', class: 'danger', onclick: () => confirmBar('purge', matched, purge) }, 'Purge matching…'));
    }
    const count = el('span', { class: 'muted', id: 'matched' });
    bar.append(count);
    const one = S.session.read_only ? null : window.jetpoolOneButtons(msg, () => refresh(), { el, post });
    async function refresh() {
      const v = await api('api/dlq?' + q(f));
      matched = v.matched;
      count.textContent = `${num(v.matched)}${v.at_least ? '+' : ''} match` + (v.shown < v.matched ? ` (the first ${num(v.shown)} shown)` : '');
      bar.querySelectorAll('button').forEach((b) => { b.disabled = v.matched === 0; });
      put(table(['Seq ', 'Job', 'Record', 'Action', 'Reason', 'Class', 'Attempts ', 'Deliveries ', 'Replays ', 'Failed', 'Error', one ? '' : null],
        v.entries.map((d) => el('tr', { id: 'dl-' + d.seq },
          ncell(el('a', { href: '#/dlq/' + d.seq }, String(d.seq))), cell(el('a', { href: '#/job/' + encodeURIComponent(d.job) }, d.job), 'mono'),
          cell(el('a', { href: '#/record/' + encodeURIComponent(d.job) + '/' + encodeURIComponent(d.record) }, d.record), 'mono'),
          cell(d.action, 'mono'), cell(badge(d.reason, 'failed')), cell(d.class || '-'), ncell(d.attempts), ncell(d.deliveries), ncell(d.replays),
          cell(ago(d.failed_at), 'muted'), cell(short(d.error, 110), 'err'), one ? cell(one(d), 'actions') : null)),
        'No dead letters match.'));
    }
    return refresh;
  }

  function deadLetterView(root, seq) {
    root.append(el('h1', {}, 'Dead letter ', seq));
    const bar = el('div', { class: 'toolbar' });
    const msg = el('div');
    root.append(bar, msg);
    const put = slot(root);
    let gone = false;
    const one = S.session.read_only ? null : window.jetpoolOneButtons(msg, (ok) => {
      if (ok) { gone = true; bar.replaceChildren(); put(); }
    }, { el, post });
    return async () => {
      if (gone) return; // replayed or purged: what it did stays said
      const d = await api('api/dlq/' + encodeURIComponent(seq));
      if (one && !bar.firstChild) bar.append(...one(d));
      put(el('p', {}, 'record ', el('a', { class: 'mono', href: '#/record/' + encodeURIComponent(d.job) + '/' + encodeURIComponent(d.record) }, d.record),
        ' of job ', el('a', { class: 'mono', href: '#/job/' + encodeURIComponent(d.job) }, d.job), ' · ',
        el('a', { href: '#/dlq?' + q({ job: d.job, action: d.action, reason: d.reason }) }, 'its kind')), deadLetterBlock(d));
    };
  }

  // ---- providers and workers -----------------------------------------------

  function providersView(root) {
    root.append(el('h1', {}, 'Providers & workers'));
    const put = slot(root);
    return async () => {
      const v = await api('api/providers');
      const lim = (s) => s.limits && (s.limits.rpm || s.limits.tpm || s.limits.concurrency)
        ? [s.limits.rpm && `rpm ${num(s.limits.rpm)}`, s.limits.tpm && `tpm ${num(s.limits.tpm)}`, s.limits.concurrency && `concurrency ${num(s.limits.concurrency)}`].filter(Boolean).join(', ')
        : '';
      const sum = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
      const byJob = (m) => Object.entries(m || {}).map(([j, n]) => `${j}: ${n}`).join(', ');
      const knownState = ['provider', 'of', 'limits', 'req_tat', 'tok_tat', 'leases', 'cooldown_until', 'cooldown_cause', 'cooldown_set', 'cooldowns', 'breaker', 'updated'];
      put(
        el('h2', {}, 'Shared limiter state (JETPOOL_LIMITS)'),
        table(['Provider', 'Key', 'Mode', 'Limits', 'In flight ', 'Cooldown', 'Circuit', 'Cooldowns ', 'Updated', 'More'], v.limiters.map((l) => {
          const s = l.state;
          const br = s.breaker || {};
          return el('tr', {},
            cell(s.of ? [s.provider, el('div', { class: 'muted' }, 'deployment of ' + s.of)] : s.provider, 'mono'), cell(l.key, 'mono muted'),
            cell(l.pace ? `${l.mode}, paced at ${l.pace.toFixed(1)}/s` : l.mode), cell(lim(s) || '-'), ncell(l.in_flight),
            cell(l.cooling ? [badge('cooling'), ` ${dur(l.cooldown_left_s)} left`, s.cooldown_cause ? el('div', { class: 'err' }, short(s.cooldown_cause, 80)) : null] : '-'),
            cell([badge(l.circuit.replace('_', '-'), l.circuit), br.until && l.circuit !== 'closed' ? ` until ${new Date(br.until).toLocaleTimeString()}` : '',
              br.last_error ? el('div', { class: 'err' }, short(br.last_error, 80)) : null]),
            ncell(s.cooldowns || 0), cell(ago(s.updated), 'muted'), cell(others(s, knownState).map(([k, x]) => k + ': ' + x).join('; '), 'muted'));
        }), 'No provider has shared state yet (it appears once a worker calls one).'),
        el('h2', {}, 'Workers (jetpool.ctl.stats)'),
        table(['Worker', 'Ready', 'In flight ', 'Storing ', 'Read ahead ', 'Calls ', 'Handled ', 'By job', 'More'], v.workers.map((w) => el('tr', {},
          cell(w.worker, 'mono'), cell(badge('answering', 'ready')), ncell(sum(w.in_flight)), ncell(sum(w.storing)), ncell(sum(w.read_ahead)),
          ncell(w.calls), ncell(w.handled), cell(byJob(w.in_flight), 'mono'),
          cell(others(w, ['worker', 'in_flight', 'storing', 'read_ahead', 'calls', 'handled']).map(([k, x]) => k + ': ' + x).join('; '), 'muted'))),
        'No worker answered: start `jetpool worker` (or `jetpool run`).'));
    };
  }

  // ---- start ----------------------------------------------------------------------

  async function start() {
    try {
      S.session = await api('api/session');
    } catch (e) {
      main().replaceChildren(el('div', { class: 'notice error' }, 'The dashboard cannot reach its API: ' + e.message));
      return;
    }
    document.getElementById('ro').hidden = !S.session.read_only;
    document.getElementById('logout').hidden = !S.session.signed_in;
    document.getElementById('live').addEventListener('change', (ev) => { if (ev.target.checked) render(); else clearTimeout(S.timer); });
    window.addEventListener('hashchange', render);
    render();
  }
  start();
})();
