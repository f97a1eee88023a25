// jetpool dashboard: a job's rate chart, inline SVG drawn from the JSON of
// api/jobs/{job}/history (no library, nothing loaded from elsewhere).
// app.js passes its DOM and number helpers.
'use strict';

(() => {
  // historyChart draws a job's records done a second, and dead-lettered a
  // second by error class (api/jobs/{job}/history: the dashboard's own
  // polls, sampled by its server), as inline SVG: nothing loaded.
  const palette = ['#d4473b', '#c88a12', '#8e44ad', '#2c3e50', '#16a085', '#7f8c8d', '#b03a7a'];
  function historyChart(v, { el, num, rate, pollMs }) {
    if (v.points.length === 0) {
      return [el('p', { class: 'muted', id: 'history-empty' }, `Collecting: the chart starts with this page's second reading of the job (every ${pollMs / 1000} s), and keeps the last 15 minutes while the dashboard runs.`)];
    }
    const W = 720, H = 190, L = 52, R = 12, T = 10, B = 22;
    const axis = (r) => (r >= 1 ? rate(r) : Number(r.toPrecision(2)) + '/s'); // rate() rounds below 1/s to 0.1
    const svg = (tag, attrs, ...kids) => {
      const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
      for (const [k, x] of Object.entries(attrs)) e.setAttribute(k, x);
      e.append(...kids);
      return e;
    };
    // The time axis spans the readings there are (two minutes at least),
    // up to the whole window: a young history is not squeezed to its edge.
    const now = Date.parse(v.now);
    const span = Math.min(v.window_s * 1000, Math.max(120000, now - Date.parse(v.since)));
    const t0 = now - span;
    const step = [0.5, 1, 2, 5].find((k) => span / 60000 / k <= 6);
    const top = Math.max(...v.points.map((p) => p.rate), ...v.points.flatMap((p) => Object.values(p.errors || {})), 0.1);
    const mag = 10 ** Math.floor(Math.log10(top));
    const ymax = [1, 2, 5, 10].map((k) => k * mag).find((k) => k >= top);
    const x = (t) => (L + (W - L - R) * (Date.parse(t) - t0) / (now - t0)).toFixed(1);
    const y = (r) => (T + (H - T - B) * (1 - r / ymax)).toFixed(1);
    const line = (pts, cls, color) => {
      const attrs = { class: cls, points: pts.join(' '), fill: 'none' };
      if (color) attrs.stroke = color;
      return svg('polyline', attrs);
    };
    const kids = [
      svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }), svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }),
      svg('line', { class: 'grid', x1: L, y1: y(ymax / 2), x2: W - R, y2: y(ymax / 2) }),
      svg('text', { x: L - 6, y: T + 8, 'text-anchor': 'end' }, axis(ymax)), svg('text', { x: L - 6, y: y(ymax / 2), 'text-anchor': 'end' }, axis(ymax / 2)),
      svg('text', { x: L - 6, y: H - B, 'text-anchor': 'end' }, '0'),
    ];
    for (let m = Math.floor(span / 60000 / step) * step; m >= 0; m -= step) {
      const at = new Date(now - m * 60000).toISOString();
      kids.push(svg('text', { x: x(at), y: H - 6, 'text-anchor': m === 0 ? 'end' : 'middle' }, m === 0 ? 'now' : `−${m} min`));
    }
    kids.push(line(v.points.map((p) => `${x(p.t)},${y(p.rate)}`), 'rate'));
    const legend = [el('span', { class: 'key rate' }, `done ${rate(v.points[v.points.length - 1].rate)}`)];
    const counted = v.points.filter((p) => p.errors);
    v.classes.forEach((c, i) => {
      const color = palette[i % palette.length];
      kids.push(line(counted.map((p) => `${x(p.t)},${y((p.errors || {})[c] || 0)}`), 'errors', color));
      const e = el('span', { class: 'key' }, `${c} errors ${rate(counted.length ? (counted[counted.length - 1].errors[c] || 0) : 0)}`);
      e.style.borderColor = color;
      legend.push(e);
    });
    const last = v.points[v.points.length - 1];
    kids.push(svg('circle', { class: 'rate', cx: x(last.t), cy: y(last.rate), r: 3 }));
    return [svg('svg', { id: 'history-chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
      'data-samples': v.samples, 'data-points': v.points.length, 'aria-label': 'records done and dead-lettered a second' }, ...kids),
    el('div', { class: 'legend' }, legend, el('span', { class: 'muted' },
      ` · ${num(v.samples)} readings since ${new Date(v.since).toLocaleTimeString()}; dead letters by class count when this page reads them (a replay or purge is no negative rate)`))];
  }

  window.jetpoolHistoryChart = historyChart;
})();
