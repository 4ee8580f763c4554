/* app.js — the teaching page: controls, drawings, and the self-test (?selftest=1).
 * No figure is computed here: the library compiled to WebAssembly (site/wasm_api.c: the
 * simulator and the scan plan of a chain; site/wasm_models.c: the zoo models' ooo task
 * graph and BPPSA plan, by the engines' own code) returns every number; this file only
 * lays them out. Plain JS, no framework, no network beyond this folder. */
'use strict';

var Module = {
  print: function (t) { /* the C side prints nothing the page needs */ },
  printErr: function (t) { reportError('wasm: ' + t); },
  onRuntimeInitialized: function () { start(); },
};

/* Every error also goes to the console with a marker: the browser test scans chromium's
 * log for it (screenshot runs) besides reading #errors (self-test runs). */
var origConsoleError = console.error.bind(console);
function reportError(msg) {
  var e = document.getElementById('errors');
  if (e) { var p = document.createElement('p'); p.className = 'err'; p.textContent = msg; e.appendChild(p); }
  origConsoleError('SP-PAGE-ERROR ' + msg);
}
window.addEventListener('error', function (ev) { reportError('error: ' + ev.message); });
window.addEventListener('unhandledrejection', function (ev) { reportError('rejection: ' + ev.reason); });
console.error = function () { reportError('console.error: ' + Array.prototype.join.call(arguments, ' ')); };

function getText(url) {
  return fetch(url).then(function (r) {
    if (!r.ok) { reportError('request failed: ' + url + ' ' + r.status); throw new Error(url); }
    return r.text();
  });
}

var SVGNS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, parent, text) {
  var e = document.createElementNS(SVGNS, tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function h(tag, attrs, parent, text) {
  var e = document.createElement(tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
/* A number as the programs print it: an integer (a count, bytes, FLOP) in full, digit for
 * digit; a fraction with the 6 significant digits of the JSON lines (%g). */
function fmt(x) {
  if (typeof x !== 'number') return String(x);
  return Number.isInteger(x) ? String(x) : String(+x.toPrecision(6));
}
function bytes(x) {
  if (x >= 1048576) return x + ' B (' + (x / 1048576).toFixed(2) + ' MiB)';
  if (x >= 1024) return x + ' B (' + (x / 1024).toFixed(2) + ' KiB)';
  return x + ' B';
}
/* A job's name, as build/schedule's diagram and the SVG name it (sp_job_label): the
 * direction letter (f forward F, b whole backward, d δ, g G), the stage, and — with more
 * than one micro-batch — the micro-batch as letters (a = 0, b = 1, …, z, ba, bb, …). */
function microName(b) {
  var s = '';
  do { s = String.fromCharCode(97 + b % 26) + s; b = Math.floor(b / 26); } while (b > 0);
  return s;
}
function jobName(dir, stage, mb, micro) { return dir + stage + (micro > 1 ? microName(mb) : ''); }
/* a time with its unit: the simulator's "unit" (the costs' unit) or "us" (a model's) */
function unitName(u) { return u === 'us' ? 'µs' : u === 'unit' ? 'time units' : u; }
/* a figure: <dt>name</dt><dd data-key=key data-value=raw>shown</dd> (the self-test reads data-value) */
function figure(dl, key, name, value, shown) {
  h('dt', {}, dl, name);
  h('dd', {'data-key': key, 'data-value': String(value)}, dl, shown === undefined ? fmt(value) : shown);
}

/* ---- the C side ----------------------------------------------------------------------- */

var api = {};
/* every call goes through Module.siteCall (site/wasm_call.js): string arguments on the heap */
/* sp_open_text's refusal of a NUL byte (core/io/fileio.c), for text the page hands over */
function nulAt(text, name) {
  var i = text ? text.indexOf('\0') : -1;
  if (i < 0) return '';
  var before = text.slice(0, i), line = before.split('\n').length;
  var start = before.lastIndexOf('\n') + 1;
  var bytes = new TextEncoder().encode(text.slice(start, i)).length + 1;
  return name + ': line ' + line + ', byte ' + bytes + ': a NUL byte (expected text)';
}
function bindApi() {
  var call = Module.siteCall;
  api.schemes = function () { return call('site_schemes', [], []); };
  api.simulate = function (c) {
    /* A C string ends at a NUL: refuse it here as the native reader does, not run a cut text */
    var nul = nulAt(c.actions, 'action list: /actions.csv') || nulAt(c.profile, 'profile: /profile.csv');
    if (nul) return {ok: false, error: nul};
    return call('site_simulate',
      ['string', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'string',
       'number', 'number', 'string', 'number'],
      [c.scheme, c.stages, c.micro, c.workers, c.groups, c.per_group, c.split, c.no_input_grad ? 1 : 0,
       c.fwd, c.delta, c.grad, c.profile || '', c.chunks || 0, c.mem_limit || 0, c.actions || '',
       c.transfer || 0]);
  };
  api.scan = function (n, k) { return call('site_scan_plan', ['number', 'number'], [n, k]); };
  /* a zoo model's ooo task graph and every order's plan (order '': all four; k 0: ⌈L/2⌉);
     channels, seq_len, hidden 0: the zoo's */
  api.ooo = function (b, order, k) {
    return call('site_ooo', ['string', 'number', 'number', 'number', 'number', 'string', 'number'],
      [b.model, b.batch, b.channels || 0, b.seq_len || 0, b.hidden || 0, order || '', k || 0]);
  };
  /* what build/<app> --backward bppsa --plan=full prints (levels -1: full): text and JSON keys */
  api.bppsa = function (b, levels) {
    return call('site_bppsa_plan', ['string', 'number', 'number', 'number', 'number', 'number', 'number'],
      [b.model, levels, b.prune || 0, b.batch, b.channels || 0, b.seq_len || 0, b.hidden || 0]);
  };
}

/* ---- Pipelines ------------------------------------------------------------------------ */

var PRESETS = ['lenet', 'vgg11', 'resnet20', 'rnn', 'gru', 'mlp'];
var profiles = {};
var schemes = null;
var panels = [];
var DIRS = {f: 'forward F', b: 'whole backward (δ and G)', d: 'δ (input gradient)', g: 'G (weight gradient)'};

function panelControls(idx, host) {
  var p = {idx: idx, root: h('div', {'class': 'panel', id: 'panel-' + idx}, host)};
  h('h2', {}, p.root, idx === 0 ? 'Scheme A' : 'Scheme B');
  var c = h('div', {'class': 'controls'}, p.root);
  function control(name, label, html) {
    var l = h('label', {}, c, label + ' ');
    l.insertAdjacentHTML('beforeend', html);
    var input = l.querySelector('input,select');
    input.id = 'p' + idx + '-' + name;
    var out = l.querySelector('output');
    input.addEventListener('input', function () { if (out) out.textContent = input.value; update(); });
    input.addEventListener('change', update);
    p[name] = input;
    return input;
  }
  var opts = schemes.schemes.concat(schemes.pp).map(function (s) {
    return '<option value="' + s.name + '" title="' + s.summary.replace(/"/g, '&quot;') + '">' + s.name + '</option>';
  }).join('');
  control('scheme', 'scheme', '<select>' + opts + '</select>').value = idx === 0 ? 'gpipe' : '1f1b';
  control('stages', 'stages', '<input type="range" min="1" max="16" value="4"><output>4</output>');
  control('micro', 'micro-batches', '<input type="range" min="1" max="32" value="8"><output>8</output>');
  control('workers', 'workers (0: default)', '<input type="number" min="0" max="64" value="0">');
  control('groups', 'groups (lpp)', '<input type="number" min="0" max="16" value="0">');
  control('per_group', 'per group (lpp)', '<input type="number" min="0" max="16" value="0">');
  if (schemes.actions) {
    control('chunks', 'chunks per rank (0: default)', '<input type="number" min="0" max="8" value="0">');
    control('mem_limit', 'memory limit (zb-auto)', '<input type="number" min="0" step="1" value="0">');
  }
  control('split', 'backward', '<select><option value="-1">scheme default</option><option value="0">whole</option>' +
          '<option value="1">split δ / G</option></select>');
  control('no_input_grad', 'stage 0 no δ', '<input type="checkbox">');
  control('costs', 'costs', '<select><option value="uniform">unit sliders</option>' +
          PRESETS.map(function (m) { return '<option value="' + m + '">' + m + ' profile</option>'; }).join('') + '</select>');
  control('fwd', 'F', '<input type="range" min="0" max="4" step="0.25" value="1"><output>1</output>');
  control('delta', 'δ', '<input type="range" min="0" max="4" step="0.25" value="0.5"><output>0.5</output>');
  control('grad', 'G', '<input type="range" min="0" max="4" step="0.25" value="0.5"><output>0.5</output>');
  /* every message between two workers costs this (build/schedule --transfer-cost, the costs' unit) */
  control('transfer', 'transfer (per message)',
          '<input type="range" min="0" max="4" step="0.25" value="0"><output>0</output>');
  p.figures = h('dl', {'class': 'figures', id: 'p' + idx + '-figures'}, p.root);
  p.error = h('p', {'class': 'refusal', 'aria-live': 'polite'}, p.root);
  p.cmd = h('pre', {'class': 'cmd', id: 'p' + idx + '-cmd'}, p.root);
  /* focusable: on a phone the timeline scrolls sideways, by keyboard too */
  p.svgbox = h('div', {'class': 'svgbox', tabindex: '0', role: 'region',
    'aria-label': (idx === 0 ? 'scheme A' : 'scheme B') + ' timeline'}, p.root);
  return p;
}

function config(p) {
  var cst = p.costs.value;
  return {
    scheme: p.scheme.value, stages: +p.stages.value, micro: +p.micro.value, workers: +p.workers.value,
    groups: +p.groups.value, per_group: +p.per_group.value, split: +p.split.value,
    no_input_grad: p.no_input_grad.checked, fwd: +p.fwd.value, delta: +p.delta.value, grad: +p.grad.value,
    preset: cst === 'uniform' ? null : cst, profile: cst === 'uniform' ? '' : profiles[cst],
    chunks: p.chunks ? +p.chunks.value : 0, mem_limit: p.mem_limit ? +p.mem_limit.value : 0,
    transfer: +p.transfer.value,
    actions: p.scheme.value === 'custom' ? document.getElementById('csv-text').value : '',
  };
}

/* The command that reproduces a panel: build/schedule with the panel's flags (custom takes
 * its micro-batches from the CSV: FILE.csv is the CSV of the import box), and for a model's
 * profile the training run of the same schedule on `ranks` processes (the simulated
 * workers; none when the configuration is refused). */
function command(c, ranks) {
  var custom = c.scheme === 'custom';   /* the list sets its ranks and micro-batches */
  var a = ['build/schedule', '--scheme', c.scheme];
  if (!custom) a.push('--microbatches', c.micro);
  if (c.preset) a.push('--profile', 'site/profiles/' + c.preset + '.csv');
  else a.push('--stages', c.stages, '--fwd-cost', c.fwd, '--delta-cost', c.delta, '--grad-cost', c.grad);
  if (c.workers && !custom) a.push('--workers', c.workers);
  if (c.groups) a.push('--groups', c.groups);
  if (c.per_group) a.push('--per-group', c.per_group);
  if (c.split === 1) a.push('--split');
  if (c.split === 0) a.push('--no-split');
  if (c.no_input_grad) a.push('--no-input-grad');
  if (c.chunks) a.push('--chunks', c.chunks);
  if (c.mem_limit) a.push('--mem-limit', c.mem_limit);
  if (c.scheme === 'custom') a.push('--actions', 'FILE.csv');
  if (c.transfer) a.push('--transfer-cost', c.transfer);
  /* the app that trains the preset's model (ResNet-20 too: the executor runs it as a chain of its segments) */
  var app = {mlp: 'demo', resnet20: 'resnet'}[c.preset] || c.preset;
  var run = c.preset && ranks ? '\n# a real run of the same schedule (as root: mpirun --allow-run-as-root --oversubscribe):\nmpirun -np ' +
    ranks + ' build/' + app + ' --parallel ' + c.scheme +
    (c.scheme === 'custom' ? ' --actions FILE.csv' : ' --microbatches ' + c.micro) : '';
  return a.join(' ') + run;
}

/* The step a panel draws: sp_simulate's, or — with a transfer cost — the simulation with
 * its messages (sim_comm.c: jobs re-timed, memory over the re-timed jobs, the messages).
 * Both come from the C side as they are; this only picks which of its series to place. */
function stepOf(res) {
  var comm = !!res.transfers;
  return {comm: comm, end: comm ? res.report.latency_with_comm : res.report.latency,
    times: comm ? res.comm_jobs : res.jobs.map(function (j) { return [j[4], j[5]]; }),
    memory: comm ? res.comm_memory : res.memory};
}

var MSG = {act: 'activation (F\'s output) to the next stage\'s worker', grad: '∂l/∂y to the previous stage\'s worker',
  allreduce: 'gradient bucket allreduce', broadcast: 'owner\'s weights broadcast', reduce: 'gradients reduced to the owner',
  loss: 'loss allreduce', dep: 'an output consumed on another worker (no transfer cost: arrives as sent)'};

function drawTimeline(p, res, tmax, cursor) {
  var rep = res.report, W = rep.workers, jobs = res.jobs, step = stepOf(res);
  var stripH = 5, rowH = 34, memH = 18, pitch = stripH + rowH + memH + 8, left = 44, width = 760, top = 14;
  var height = top + W * pitch + 18;
  var sx = function (t) { return left + (tmax > 0 ? t / tmax : 0) * (width - left - 10); };
  var rowTop = function (w) { return top + w * pitch + stripH; };
  p.svgbox.innerHTML = '';
  var svg = el('svg', {viewBox: '0 0 ' + width + ' ' + height, role: 'img',
    'aria-label': rep.scheme + ' timeline: ' + W + ' workers, latency ' + fmt(step.end) + ' ' + unitName(res.unit)}, p.svgbox);
  var defs = el('defs', {}, svg);
  var pat = el('pattern', {id: 'hatch' + p.idx, width: 6, height: 6, patternUnits: 'userSpaceOnUse',
    patternTransform: 'rotate(45)'}, defs);
  el('line', {x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#000', 'stroke-width': 1.5, 'stroke-opacity': 0.45}, pat);
  var idle = el('pattern', {id: 'idle' + p.idx, width: 4, height: 4, patternUnits: 'userSpaceOnUse'}, defs);
  el('circle', {cx: 2, cy: 2, r: 0.7, fill: '#888'}, idle);
  var head = el('marker', {id: 'head' + p.idx, viewBox: '0 0 6 6', refX: 6, refY: 3, markerWidth: 5, markerHeight: 5,
    orient: 'auto'}, defs);
  el('path', {d: 'M0,0 L6,3 L0,6 z', 'class': 'head'}, head);
  for (var w = 0; w < W; w++) {
    var y = rowTop(w);
    el('text', {x: 2, y: y + rowH / 2 + 4, 'class': 'lab'}, svg, 'w' + w);
    el('rect', {x: sx(0), y: y, width: sx(step.end) - sx(0), height: rowH, fill: 'url(#idle' + p.idx + ')',
      'class': 'idle'}, svg).appendChild(el('title', {}, null, 'idle time of worker ' + w));
    /* memory lane: the simulator's own series (sim_memory.c), [time, activation bytes,
       fetched-weight bytes] steps, scaled to the largest peak of any worker; a dashed line
       adds the fetched weights where the scheme fetches any (fsdp, fslpp) */
    var peak = Math.max.apply(null, (rep.peak_memory_bytes || res.peak_act_bytes).concat([1e-12]));
    var pts = step.memory[w], base = y + rowH + memH + 2, hi = 0, fetched = false;
    var d = 'M' + sx(0) + ',' + base, dw = d;
    for (var i = 0; i < pts.length; i++) {
      var t1 = i + 1 < pts.length ? pts[i + 1][0] : step.end;
      d += ' V' + (base - (pts[i][1] / peak) * memH) + ' H' + sx(t1);
      dw += ' V' + (base - ((pts[i][1] + pts[i][2]) / peak) * memH) + ' H' + sx(t1);
      hi = Math.max(hi, pts[i][1]);
      fetched = fetched || pts[i][2] > 0;
    }
    el('path', {d: d, 'class': 'mem', 'data-worker': w, 'data-top': String(hi)}, svg).appendChild(
      el('title', {}, null, 'worker ' + w + ' activations held; peak ' + fmt(res.peak_act_bytes[w])));
    if (fetched)
      el('path', {d: dw, 'class': 'mem wgt'}, svg).appendChild(
        el('title', {}, null, 'worker ' + w + ' activations and fetched weights held'));
  }
  jobs.forEach(function (j, k) {
    var wk = j[0], st = j[1], mb = j[2], dir = j[3], t0 = step.times[k][0], t1 = step.times[k][1];
    var y = rowTop(wk);
    var shade = 0.35 + 0.65 * (rep.microbatches > 1 ? 1 - mb / (rep.microbatches - 1) * 0.6 : 1);
    var g = el('g', {'class': 'job dir-' + dir + (t0 >= cursor ? ' future' : '')}, svg);
    /* white under the shaded box: the idle dots show only where the worker is idle */
    el('rect', {x: sx(t0), y: y + 1, width: Math.max(0.5, sx(t1) - sx(t0)), height: rowH - 2, fill: '#fff'}, g);
    el('rect', {x: sx(t0), y: y + 1, width: Math.max(0.5, sx(t1) - sx(t0)), height: rowH - 2,
      'fill-opacity': shade, 'class': 'box'}, g);
    if (dir === 'g' || dir === 'd')
      el('rect', {x: sx(t0), y: y + 1, width: Math.max(0.5, sx(t1) - sx(t0)), height: rowH - 2,
        fill: dir === 'g' ? 'url(#hatch' + p.idx + ')' : 'none'}, g);
    if (sx(t1) - sx(t0) > 18)
      el('text', {x: (sx(t0) + sx(t1)) / 2, y: y + rowH / 2 + 4, 'text-anchor': 'middle', 'class': 'jl'}, g,
        jobName(dir, st, mb, rep.microbatches));
    el('title', {}, g, jobName(dir, st, mb, rep.microbatches) + ': ' + DIRS[dir] + ', stage ' + st + ' (' +
      res.stage_names[st] + '), micro-batch ' + microName(mb) + ' (' + mb + ' counting from 0), worker ' + wk + ', ' +
      fmt(t0) + ' → ' + fmt(t1) + ' ' + unitName(res.unit));
  });
  /* messages, one drawn element each: a point-to-point message is an arrow from its
     sender's row at the time it leaves to its receiver's row at its arrival; a collective
     is a bar on each member's strip over the row. With a transfer cost the C side's
     "transfers" (rank, peer, kind, stage, start, end; a broadcast's sender is its root),
     else its "messages" (from, to, sent at: they arrive as sent). */
  var msgs = step.comm ? res.transfers.map(function (m) {
    var bcast = m[2] === 'broadcast';
    return {from: bcast ? m[1] : m[0], to: bcast ? m[0] : m[1], kind: m[2], stage: m[3], t0: m[4], t1: m[5]};
  }) : res.messages.map(function (m) {
    return {from: m[0], to: m[1], kind: 'dep', stage: jobs[m[3]][1], t0: m[2], t1: m[2]};
  });
  msgs.forEach(function (m) {
    var g = el('g', {'class': 'msg kind-' + m.kind + (m.t0 > cursor ? ' future' : ''),
      'data-from': m.from, 'data-to': m.to}, svg);
    if (m.to < 0 || m.to === m.from) {   /* a collective's member (or the root's own part) */
      el('rect', {x: sx(m.t0), y: rowTop(m.from) - stripH, width: Math.max(1.5, sx(m.t1) - sx(m.t0)),
        height: stripH - 1, 'class': 'bar'}, g);
    } else {
      var down = m.to > m.from;
      el('line', {x1: sx(m.t0), y1: rowTop(m.from) + (down ? rowH : 0), x2: sx(m.t1), y2: rowTop(m.to) + (down ? 0 : rowH),
        'class': 'arrow', 'marker-end': 'url(#head' + p.idx + ')'}, g);
    }
    el('title', {}, g, MSG[m.kind] + ', stage ' + m.stage + ': worker ' + m.from +
      (m.to >= 0 && m.to !== m.from ? ' → worker ' + m.to : m.to < 0 ? ' (every member)' : ' (root)') +
      ', ' + fmt(m.t0) + ' → ' + fmt(m.t1) + ' ' + unitName(res.unit));
  });
  el('line', {x1: sx(cursor), y1: 2, x2: sx(cursor), y2: height - 16, 'class': 'cursor'}, svg);
  el('text', {x: left, y: height - 4, 'class': 'lab'}, svg, 'time 0 … ' + fmt(step.end) + ' ' + unitName(res.unit) +
    (step.comm ? ' (with transfers)' : ''));
}

/* The key under the panels: each mark of the timelines with its meaning, drawn with the
 * same classes so it reads the same in colour and in greyscale. */
function drawLegend(host) {
  var items = [['job dir-f', 'f: F, the forward (solid)'], ['job dir-d', 'd: δ, the input gradient (heavy outline)'],
    ['job dir-g', 'g: G, the weight gradient (hatched)'], ['job dir-b', 'b: the whole backward, δ and G in one job (dark)'],
    ['shade', 'f2c: f of stage 2, micro-batch c (a = 0, b = 1, …), as build/schedule names it; later micro-batches paler'],
    ['idle', 'idle: dotted background'],
    ['mem', 'activations held (line under a row)'], ['msg kind-act', 'activation message (solid arrow)'],
    ['msg kind-grad', 'gradient message (dashed arrow)'],
    ['msg kind-broadcast', 'weights from / gradients to their owner (dotted arrow)'],
    ['msg kind-collective', 'a collective on this worker: allreduce, or an owner\'s own part (bar over a row; grey: the loss)'],
    ['cursor', 'time slider (the costs\' unit: time units, or µs with a model\'s profile)']];
  var ul = h('ul', {'class': 'legend', 'aria-label': 'key to the timelines'}, host);
  items.forEach(function (it) {
    var li = h('li', {}, ul);
    var svg = el('svg', {viewBox: '0 0 30 16', width: 30, height: 16, 'aria-hidden': 'true'}, li);
    var defs = el('defs', {}, svg);
    var pat = el('pattern', {id: 'lhatch-' + it[0].replace(/\W/g, ''), width: 6, height: 6, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(45)'}, defs);
    el('line', {x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#000', 'stroke-width': 1.5, 'stroke-opacity': 0.45}, pat);
    var k = it[0];
    if (k.indexOf('job') === 0) {
      var g = el('g', {'class': k}, svg);
      el('rect', {x: 1, y: 1, width: 28, height: 14, 'class': 'box'}, g);
      if (k === 'job dir-g') el('rect', {x: 1, y: 1, width: 28, height: 14, fill: 'url(#' + pat.id + ')'}, g);
    } else if (k === 'shade') {
      [1, 0.7, 0.4].forEach(function (o, i) {
        el('rect', {x: 1 + i * 9.5, y: 1, width: 9, height: 14, 'fill-opacity': o, 'class': 'box'},
           el('g', {'class': 'job dir-f'}, svg));
      });
    } else if (k === 'idle') {
      var ip = el('pattern', {id: 'lidle', width: 4, height: 4, patternUnits: 'userSpaceOnUse'}, defs);
      el('circle', {cx: 2, cy: 2, r: 0.7, fill: '#888'}, ip);
      el('rect', {x: 1, y: 1, width: 28, height: 14, fill: 'url(#lidle)'}, svg);
    } else if (k === 'mem') {
      el('path', {d: 'M1,14 V9 H12 V4 H22 V11 H29', 'class': 'mem'}, svg);
    } else if (k === 'cursor') {
      el('line', {x1: 15, y1: 0, x2: 15, y2: 16, 'class': 'cursor'}, svg);
    } else if (k === 'msg kind-collective') {
      el('rect', {x: 3, y: 6, width: 24, height: 4, 'class': 'bar'}, el('g', {'class': 'msg kind-allreduce'}, svg));
    } else {
      var mk = el('marker', {id: 'lhead-' + k.replace(/\W/g, ''), viewBox: '0 0 6 6', refX: 6, refY: 3, markerWidth: 5,
        markerHeight: 5, orient: 'auto'}, defs);
      el('path', {d: 'M0,0 L6,3 L0,6 z', 'class': 'head'}, mk);
      el('line', {x1: 2, y1: 2, x2: 27, y2: 14, 'class': 'arrow', 'marker-end': 'url(#' + mk.id + ')'},
         el('g', {'class': k}, svg));
    }
    h('span', {}, li, it[1]);
  });
}

function update() {
  panels.forEach(function (p, i) {
    var shown = i === 0 || document.getElementById('compare').checked;
    p.root.hidden = !shown;
    if (!shown) return;
    var c = config(p);
    p.stages.disabled = !!c.preset;
    p.res = api.simulate(c);
    p.cmd.textContent = command(c, p.res.ok ? p.res.report.workers : 0);
  });
  var tmax = 0;
  panels.forEach(function (p) { if (!p.root.hidden && p.res.ok) tmax = Math.max(tmax, stepOf(p.res).end); });
  var slider = document.getElementById('time');
  var cursor = tmax * slider.value / 1000;
  var shownUnit = panels[0].res && panels[0].res.ok ? ' ' + unitName(panels[0].res.unit) : '';
  document.getElementById('time-out').textContent = fmt(cursor) + shownUnit;
  panels.forEach(function (p) {
    if (p.root.hidden) return;
    p.figures.innerHTML = '';
    if (!p.res.ok) { p.error.textContent = 'refused: ' + p.res.error; p.svgbox.innerHTML = ''; return; }
    p.error.textContent = '';
    var r = p.res.report;
    figure(p.figures, 'latency', 'latency (' + unitName(p.res.unit) + ')', r.latency);
    if (r.latency_with_comm !== undefined) {   /* the simulation with transfers (sim_comm.c) */
      figure(p.figures, 'latency_with_comm', 'latency with transfers (' + unitName(p.res.unit) + ')', r.latency_with_comm);
      figure(p.figures, 'messages', 'messages per worker (sent or joined)', r.messages.join(', '));
      figure(p.figures, 'comm_time', 'transfer time per worker (' + unitName(p.res.unit) + ')', r.comm_time.map(fmt).join(', '));
    }
    figure(p.figures, 'bubble', 'bubble fraction', p.res.bubble);
    figure(p.figures, 'utilization', 'utilisation', r.utilization);
    figure(p.figures, 'peak_activation_bytes_max', 'peak activation memory (a worker)', r.peak_activation_bytes_max,
      p.res.unit === 'unit' ? fmt(r.peak_activation_bytes_max) + ' activations' : bytes(r.peak_activation_bytes_max));
    if (r.peak_activation_bytes) figure(p.figures, 'peak_activation_bytes', 'peak activations per worker', r.peak_activation_bytes.join(', '));
    if (r.peak_memory_bytes) figure(p.figures, 'peak_memory_bytes', 'peak memory per worker (weights, gradients, optimizer state, buckets, activations)', r.peak_memory_bytes.join(', '));
    figure(p.figures, 'workers', 'workers', r.workers);
    figure(p.figures, 'activation_transfers_max', 'activation messages (max per worker)', r.activation_transfers_max);
    drawTimeline(p, p.res, tmax, cursor);
  });
}

/* The CSV goes to the C side as scheme "custom" of panel A: the same reader, checks and
 * simulator as build/schedule --scheme custom --actions FILE.csv. */
function importCsv() {
  var out = document.getElementById('csv-result');
  out.innerHTML = '';
  if (!schemes.actions) {
    h('p', {'class': 'refusal', id: 'csv-status'}, out,
      'This build has no action-list schedules yet (schedulers/plan/schedule_actions.c): nothing to simulate the CSV with.');
    return;
  }
  setControl('p0-scheme', 'custom');
  var p = panels[0];
  if (!p.res.ok) { h('p', {'class': 'refusal', id: 'csv-status'}, out, 'refused: ' + p.res.error); return; }
  var r = p.res.report;
  h('p', {id: 'csv-status'}, out, 'imported into scheme A: ' + r.workers + ' ranks, ' + r.microbatches +
    ' micro-batches, latency ' + fmt(r.latency));
}

/* ---- BPPSA ---------------------------------------------------------------------------- */

/* The model presets of the BPPSA view, as the apps run them (their defaults: build/rnn
 * reads T = 100 with hidden 64); the plan is made in WebAssembly (site_bppsa_plan). */
var BP_MODELS = {
  lenet: {model: 'lenet', app: 'lenet', batch: 8},
  'lenet-pruned': {model: 'lenet', app: 'lenet', batch: 8, prune: 0.9},
  rnn: {model: 'rnn', app: 'rnn', batch: 8, seq_len: 100, hidden: 64},
};
var bpFull = {};
/* A model preset: the plan's text as the app prints it (--plan=full), whose step table
 * gives the tree (read as printed, nothing recomputed), and its JSON keys the figures. */
function parsePlanText(txt, json) {
  var lines = txt.trim().split('\n'), steps = [];
  lines.forEach(function (ln) {
    var m = /^\s+(\d+)\s+(up|down|identity|carry)\s+(-?\d+)\s+(-?\d+)\s+(.*?)\s+(\d+)\s*(\*?)\s*$/.exec(ln);
    if (m) steps.push({level: +m[1], kind: m[2], l: +m[3], r: +m[4], result: m[5], flops: +m[6], critical: m[7] === '*',
      product: !/move|skipped|^-$/.test(m[5]) && m[2] !== 'identity'});
  });
  return {json: json, steps: steps, text: txt};
}

function drawTree(host, n, steps, nlevels) {
  host.innerHTML = '';
  var colW = Math.max(12, Math.min(48, 720 / (n + 1))), rowH = 26, left = 60, top = 24;
  var width = left + colW * (n + 1) + 20, height = top + rowH * (nlevels + 1) + 30;
  var svg = el('svg', {viewBox: '0 0 ' + width + ' ' + height, role: 'img',
    'aria-label': 'scan tree of ' + n + ' links in ' + nlevels + ' levels'}, host);
  var x = function (i) { return left + colW * (i + 0.5); };
  for (var i = 0; i <= n; i++) {
    el('line', {x1: x(i), y1: top - 6, x2: x(i), y2: top + rowH * nlevels, 'class': 'col'}, svg);
    if (n <= 40 || i % 4 === 0) el('text', {x: x(i), y: top - 10, 'text-anchor': 'middle', 'class': 'lab'}, svg, 'a' + i);
  }
  steps.forEach(function (s) {
    var y = top + rowH * (s.level + 0.5);
    var l = s.l < 0 ? s.r : s.l;
    var g = el('g', {'class': 'step kind-' + s.kind + (s.product ? ' product' : ' move') + (s.critical ? ' critical' : '')}, svg);
    el('line', {x1: x(l), y1: y - 8, x2: x(s.r), y2: y + 6, 'class': 'edge'}, g);
    el('circle', {cx: x(s.r), cy: y + 6, r: s.product ? 5 : 3, 'class': 'node'}, g);
    el('text', {x: x(s.r) + 6, y: y + 4, 'class': 'sl'}, g, s.kind[0].toUpperCase());
    el('title', {}, g, 'level ' + s.level + ' ' + s.kind + ' a[' + s.l + '] → a[' + s.r + ']' + (s.result ? ': ' + s.result : '') +
      (s.product ? ' (a product)' : ' (no product)'));
  });
  var lv = {};
  steps.forEach(function (s) { lv[s.level] = s.kind; });
  for (var k = 0; k < nlevels; k++)
    el('text', {x: 2, y: top + rowH * (k + 0.5) + 4, 'class': 'lab'}, svg, k + ' ' + (lv[k] || ''));
}

/* The key under the tree, in HTML so it wraps at any width: each mark drawn with the
 * tree's own classes. */
function drawTreeLegend(host) {
  host.innerHTML = '';
  var items = [['step kind-up product', 'U: an up-sweep step'], ['step kind-down product', 'D: a down-sweep step'],
    ['step kind-identity move', 'I: the identity seed; C: a sequential carry'],
    ['step kind-up product', 'big dot: a product (a Jᵀ·Jᵀ or Jᵀ·vector)'], ['step kind-up move', 'small dot: a move, no product'],
    ['step kind-up product critical', 'red edge: on the critical path (the longest chain of products, * in the table)']];
  var ul = h('ul', {'class': 'legend', id: 'bp-legend', 'aria-label': 'key to the scan tree'}, host);
  items.forEach(function (it) {
    var li = h('li', {}, ul);
    var svg = el('svg', {viewBox: '0 0 30 16', width: 30, height: 16, 'aria-hidden': 'true'}, li);
    var g = el('g', {'class': it[0]}, svg);
    el('line', {x1: 4, y1: 2, x2: 22, y2: 11, 'class': 'edge'}, g);
    el('circle', {cx: 22, cy: 11, r: it[0].indexOf('move') >= 0 ? 3 : 5, 'class': 'node'}, g);
    h('span', {}, li, it[1]);
  });
}

/* The chain's n: what the slider held before a model preset showed its own link count. */
var chainN = null;
function updateBppsa() {
  var src = document.getElementById('bp-source').value, nIn = document.getElementById('bp-n'),
      kIn = document.getElementById('bp-k'), figs = document.getElementById('bp-figures');
  figs.innerHTML = '';
  document.getElementById('bp-table').textContent = '';
  drawTreeLegend(document.getElementById('bp-legend-box'));
  if (src === 'chain') {
    nIn.disabled = false;
    if (chainN !== null) {   /* back from a preset: the chain's own n and range */
      nIn.min = 3; nIn.max = 63; nIn.step = 2; nIn.value = chainN; chainN = null;
    }
    document.getElementById('bp-n-out').textContent = nIn.value;
    var full = api.scan(+nIn.value, -1).full_levels;
    kIn.max = full;
    if (+kIn.value > full) kIn.value = full;
    document.getElementById('bp-k-out').textContent = kIn.value;
    var r = api.scan(+nIn.value, +kIn.value);
    figure(figs, 'links', 'links n', r.links);
    figure(figs, 'scan_levels', 'up-sweep levels K', r.scan_levels);
    figure(figs, 'levels', 'sequential levels (depth)', r.levels);
    figure(figs, 'linear_levels', 'linear BP levels', r.linear_levels);
    figure(figs, 'chain_depth', 'longest product chain', r.chain_depth);
    figure(figs, 'products', 'products (work)', r.products);
    figure(figs, 'linear_products', 'linear BP products', r.linear_products);
    /* build/demo --layers L is a chain of 2L − 1 ops below the loss: 2L − 1 links, so the
       slider takes odd n only and the command prints the view's n */
    document.getElementById('bp-cmd').textContent = 'build/demo --layers ' + (r.links + 1) / 2 +
      ' --backward bppsa --scan-levels ' + r.scan_levels + ' --plan=full    # ' + r.links + ' links';
    drawTree(document.getElementById('bp-tree'), r.links, r.steps.map(function (s) {
      return {kind: s[0], level: s[1], l: s[2], r: s[3], product: !!s[4]};
    }), r.nlevels);
    return;
  }
  var b = BP_MODELS[src];
  if (bpFull[src] === undefined) {   /* the full depth: the plan with --scan-levels full */
    var r0 = api.bppsa(b, -1);
    if (!r0.ok) { reportError('bppsa ' + src + ': ' + r0.error); return; }
    bpFull[src] = r0.report.full_levels;
  }
  kIn.max = bpFull[src];
  if (+kIn.value > bpFull[src]) kIn.value = bpFull[src];
  document.getElementById('bp-k-out').textContent = kIn.value;
  var cmd = 'build/' + b.app + ' --backward bppsa --plan=full --scan-levels ' + kIn.value + ' --batch ' + b.batch +
    (b.prune ? ' --prune ' + b.prune : '');
  document.getElementById('bp-cmd').textContent = cmd;
  var res = api.bppsa(b, +kIn.value);
  if (!res.ok) { reportError('bppsa ' + src + ': ' + res.error); return; }
  {
    var txt = res.text, p = parsePlanText(txt, res.report), j = p.json;
    /* the n slider shows the model's links, fixed (the chain's n comes back with the chain) */
    if (chainN === null) chainN = +nIn.value;
    nIn.min = nIn.max = j.links; nIn.step = 1; nIn.value = j.links;
    nIn.disabled = true;
    document.getElementById('bp-n-out').textContent = j.links;
    figure(figs, 'links', 'links n', j.links);
    figure(figs, 'scan_levels', 'up-sweep levels K', j.scan_levels);
    figure(figs, 'levels', 'sequential levels (depth)', j.levels);
    figure(figs, 'linear_levels', 'linear BP levels', j.linear_levels);
    figure(figs, 'flops_per_sample', 'FLOP per sample (work)', j.flops_per_sample);
    figure(figs, 'linear_flops_per_sample', 'linear BP FLOP per sample', j.linear_flops_per_sample);
    figure(figs, 'scan_bytes', 'scan memory', j.scan_bytes, bytes(j.scan_bytes) + HOST32);
    var maxLevel = 0;
    p.steps.forEach(function (s) { maxLevel = Math.max(maxLevel, s.level + 1); });
    drawTree(document.getElementById('bp-tree'), j.links, p.steps, maxLevel);
    document.getElementById('bp-table').textContent = txt.replace(/^(memory per step: .*)$/m, '$1\n' + HOST32_LINE);
  }
}

/* The memory model counts the host's bookkeeping (pointers, tape nodes, task records) too;
 * this page's WebAssembly build has 32-bit pointers, so its scan memory is a few KiB below
 * what the 64-bit programs print for the same plan. The Jᵀ values and products are equal
 * to the byte; every other figure is the program's. */
var HOST32 = ' — this page\'s 32-bit WebAssembly build; the 64-bit command counts a few KiB more ' +
  '(pointers in the arrays and tasks)';
var HOST32_LINE = '(this page: 32-bit WebAssembly pointers; the 64-bit command prints a few KiB more for the scan ' +
  'and the arrays and tasks, the same Jt values and products)';

/* ---- Out-of-order backward ------------------------------------------------------------ */

function updateOoo() {
  var m = document.getElementById('ooo-model').value, host = document.getElementById('ooo-orders');
  /* the command of one order: its JSON line's plan_peak_bytes (and k) are the figures shown */
  var cmdOf = function (order) {
    return 'build/' + m + (m === 'rnn' ? ' --seq-len 1000 --hidden 20' : '') + ' --backward ooo --order ' + order +
      ' --batch 8 --steps 1 --threads 1 --lanes 1';
  };
  document.getElementById('ooo-cmd').textContent = 'each order\'s command is under its heading; add --trace t.json ' +
    'for the measured lanes';
  /* one batch of 8 as the command runs it (site_ooo): build/vgg11 reads 1-channel images
     (Fashion-MNIST at 32x32) by default; rnn is the zoo's (T = 1000, hidden 20) */
  var d = api.ooo({model: m, batch: 8, channels: m === 'vgg11' ? 1 : 0}, '', 0);
  host.innerHTML = '';
  if (!d.ok) { reportError('ooo ' + m + ': ' + d.error); return; }
  {
    var tmax = 0;
    d.orders.forEach(function (o) { tmax = Math.max(tmax, o.makespan); });
    d.orders.forEach(function (o) {
      var box = h('div', {'class': 'order', id: 'ooo-' + o.order}, host);
      h('h3', {}, box, 'order ' + o.order + (o.order === 'reverse-first-k' ? ' (k = ' + o.k + ')' : ''));
      h('pre', {'class': 'cmd'}, box, cmdOf(o.order));
      var dl = h('dl', {'class': 'figures'}, box);
      figure(dl, 'makespan', 'backward done (' + EST_UNIT + ')', o.makespan);
      figure(dl, 'main_done', 'main lane done: the next forward may start (' + EST_UNIT + ')', o.main_done);
      figure(dl, 'peak_bytes', 'peak memory (one task at a time)', o.peak_bytes, bytes(o.peak_bytes));
      if (o.order === 'reverse-first-k') figure(dl, 'k', 'k', o.k);
      var width = 760, left = 50, rowH = 30;
      var svg = el('svg', {viewBox: '0 0 ' + width + ' ' + (2 * rowH + 24), role: 'img',
        'aria-label': o.order + ': two lanes'}, box);
      var sx = function (t) { return left + t / tmax * (width - left - 10); };
      el('text', {x: 2, y: rowH / 2 + 4, 'class': 'lab'}, svg, 'main');
      el('text', {x: 2, y: rowH * 1.5 + 4, 'class': 'lab'}, svg, 'sub');
      o.tasks.forEach(function (t) {
        var task = d.tasks[t[0]], y = t[1] * rowH;
        var g = el('g', {'class': 'task kind-' + task.kind + (task.critical ? ' critical' : '')}, svg);
        el('rect', {x: sx(t[2]), y: y + 2, width: Math.max(0.5, sx(t[3]) - sx(t[2])), height: rowH - 4, 'class': 'box'}, g);
        /* the label only where it fits its box (10 px text: under 6.5 px a character), else
           its kind only, else none: no label runs into its neighbour */
        var bw = sx(t[3]) - sx(t[2]), lab = task.label.replace(/_\d+$/, ''), kind = lab.split(' ')[0];
        var shown = bw >= 6.5 * lab.length + 4 ? lab : bw >= 6.5 * kind.length + 4 ? kind : '';
        if (shown)
          el('text', {x: (sx(t[2]) + sx(t[3])) / 2, y: y + rowH / 2 + 4, 'text-anchor': 'middle', 'class': 'jl'}, g, shown);
        el('title', {}, g, task.label + (task.critical ? ' (critical path)' : '') + ': ' + fmt(t[2]) + ' → ' + fmt(t[3]) +
          ' ' + EST_UNIT);
      });
      el('text', {x: left, y: 2 * rowH + 18, 'class': 'lab'}, svg, 'time 0 … ' + fmt(tmax) + ' ' + EST_UNIT);
    });
    oooLegend(host);
    var g = document.getElementById('ooo-graph');
    g.innerHTML = '';
    h('h3', {}, g, 'task graph: ' + d.tasks.length + ' tasks, critical path ' + fmt(d.critical_est) + ' (' + EST_UNIT + ')');
    var pre = h('pre', {'class': 'table'}, g);
    pre.textContent = d.tasks.map(function (t, i) {
      return (t.critical ? '* ' : '  ') + i + ' ' + t.label + '  est ' + fmt(t.est) + '  after ' +
        (t.pred.length ? t.pred.map(function (q) { return d.tasks[q].label; }).join(', ') : '(start)');
    }).join('\n');
  }
}

/* The engine's cost model (ooo.c): each task costs its FLOP for the batch plus a fixed
 * per-task overhead counted in FLOP; a lane's time is the sum of its tasks' costs. */
var EST_UNIT = 'FLOP, modelled';

/* The key to the two-lane timelines, in HTML so it wraps at any width. */
function oooLegend(host) {
  var items = [['task kind-d', 'δ: the input gradient (solid)'], ['task kind-g', 'G: the weight gradient (dashed outline)'],
    ['task kind-U', 'U: the layer\'s update (dotted outline)'],
    ['task kind-d critical', 'thick black outline: the critical path (the longest chain of estimates)'],
    ['time', 'time in FLOP, modelled: each task costs its FLOP for the batch of 8 plus 20000 (the engine\'s estimate)']];
  var ul = h('ul', {'class': 'legend', id: 'ooo-legend', 'aria-label': 'key to the two-lane timelines'});
  host.insertBefore(ul, host.firstChild);
  items.forEach(function (it) {
    var li = h('li', {}, ul);
    var svg = el('svg', {viewBox: '0 0 30 16', width: 30, height: 16, 'aria-hidden': 'true'}, li);
    if (it[0] === 'time') el('path', {d: 'M2,12 H28 M2,9 V15 M28,9 V15', stroke: '#222', fill: 'none'}, svg);
    else el('rect', {x: 2, y: 2, width: 26, height: 12, 'class': 'box'}, el('g', {'class': it[0]}, svg));
    h('span', {}, li, it[1]);
  });
}

/* ---- views, start, self-test ---------------------------------------------------------- */

function show(view) {
  ['pipelines', 'bppsa', 'ooo'].forEach(function (v) {
    document.getElementById('view-' + v).hidden = v !== view;
    document.getElementById('tab-' + v).setAttribute('aria-selected', v === view ? 'true' : 'false');
  });
  if (view === 'bppsa') return updateBppsa();
  if (view === 'ooo') return updateOoo();
}

function start() {
  bindApi();
  schemes = api.schemes();
  var loads = PRESETS.map(function (m) { return getText('profiles/' + m + '.csv').then(function (t) { profiles[m] = t; }); });
  Promise.all(loads).then(function () {
    var host = document.getElementById('panels');
    panels = [panelControls(0, host), panelControls(1, host)];
    drawLegend(document.getElementById('legend'));
    document.getElementById('compare').addEventListener('change', update);
    document.getElementById('time').addEventListener('input', update);
    document.getElementById('csv-run').addEventListener('click', importCsv);
    document.getElementById('csv-file').addEventListener('change', function (ev) {
      var f = ev.target.files[0];
      if (f) f.text().then(function (t) { document.getElementById('csv-text').value = t; importCsv(); });
    });
    document.querySelectorAll('nav button').forEach(function (b) {
      b.addEventListener('click', function () { show(b.dataset.view); });
    });
    ['bp-source', 'bp-n', 'bp-k'].forEach(function (id) {
      document.getElementById(id).addEventListener('input', function () {
        if (id === 'bp-n') document.getElementById('bp-n-out').textContent = document.getElementById(id).value;
        if (id === 'bp-k') document.getElementById('bp-k-out').textContent = document.getElementById(id).value;
        updateBppsa();
      });
    });
    document.getElementById('ooo-model').addEventListener('change', updateOoo);
    update();
    var q = new URLSearchParams(location.search);
    if (q.get('view')) show(q.get('view'));
    /* p0-NAME=V / p1-NAME=V: panel A's or B's control NAME set to V, as a student would
       (a link or a screenshot can show any configuration) */
    q.forEach(function (v, k) { if (/^p[01]-\w+$/.test(k)) setControl(k, v); });
    if (q.get('compare')) { document.getElementById('compare').checked = true; update(); }
    if (q.get('selftest')) selftest(JSON.parse(q.get('selftest')));
    document.body.dataset.ready = '1';
  });
}

/* The self-test drives the controls as a student would (value + input/change events),
 * then reads the figures the page shows; tests/site/test_site.py compares them with the
 * native programs. cases: {pipelines:[{control: value}], bppsa:[{source,n,k}], ooo:[model]} */
function setControl(id, value) {
  var e = document.getElementById(id);
  if (!e) { reportError('selftest: no control ' + id); return; }
  if (e.type === 'checkbox') e.checked = !!value; else e.value = String(value);
  e.dispatchEvent(new Event('input', {bubbles: true}));
  e.dispatchEvent(new Event('change', {bubbles: true}));
}
function readFigures(dl) {
  var o = {};
  dl.querySelectorAll('dd').forEach(function (dd) { o[dd.dataset.key] = dd.dataset.value; });
  return o;
}
/* what each figure shows, as a reader sees it (the test reads every number in it) */
function readTexts(dl) {
  var o = {};
  dl.querySelectorAll('dd').forEach(function (dd) { o[dd.dataset.key] = dd.textContent; });
  return o;
}
/* Each legend's items (and their text) against the window: [left, top, right, bottom] */
function legendBoxes(ul) {
  return {id: ul.id || ul.parentNode.id, scroll: [ul.scrollWidth, ul.clientWidth],
    items: Array.prototype.map.call(ul.querySelectorAll('li'), function (li) {
      var r = document.createRange();
      r.selectNodeContents(li);
      return {text: li.textContent, box: boxOf(li), text_box: boxOf(r)};
    })};
}
/* The text labels of a drawing that overlap one another or run out of their own box */
function labelClashes(svg) {
  var labs = Array.prototype.map.call(svg.querySelectorAll('g.task'), function (g) {
    var t = g.querySelector('text'), b = g.querySelector('rect.box');
    if (!t) return null;
    var tb = t.getBBox();
    return {text: t.textContent, l: tb.x, r: tb.x + tb.width, box_l: +b.getAttribute('x'),
      box_r: +b.getAttribute('x') + +b.getAttribute('width'), y: +b.getAttribute('y')};
  }).filter(function (x) { return x; });
  var bad = [];
  labs.forEach(function (a, i) {
    if (a.l < a.box_l - 0.5 || a.r > a.box_r + 0.5) bad.push(a.text + ' outside its box');
    labs.slice(i + 1).forEach(function (b) {
      if (a.y === b.y && Math.min(a.r, b.r) - Math.max(a.l, b.l) > 0.5) bad.push(a.text + ' over ' + b.text);
    });
  });
  return {labels: labs.length, bad: bad};
}
function boxOf(e) {
  var b = e.getBoundingClientRect();
  return [b.left, b.top, b.right, b.bottom];
}
/* Every control on screen now: its name (id, or tag and text), tabIndex, disabled. */
function controlsShown() {
  return Array.prototype.filter.call(document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]'),
    function (e) { return e.getClientRects().length > 0; }).map(function (e) {
      return {name: controlName(e), tabindex: e.tabIndex, disabled: !!e.disabled};
    });
}
function controlName(e) {
  return e.id || e.tagName.toLowerCase() + ':' + (e.getAttribute('href') || e.textContent.trim().slice(0, 40));
}
function selftest(cases) {
  var out = {pipelines: [], bppsa: [], ooo: [], csv: null,   /* the schemes panel A offers */
    schemes: Array.prototype.map.call(document.getElementById('p0-scheme').options, function (o) { return o.value; })};
  var chain = Promise.resolve();
  (cases.pipelines || []).forEach(function (c) {
    chain = chain.then(function () {
      show('pipelines');
      Object.keys(c).forEach(function (k) { setControl('p0-' + k, c[k]); });
      var p = panels[0];
      out.pipelines.push({set: c, shown: readFigures(p.figures), texts: readTexts(p.figures),
        command: p.cmd.textContent.split('\n')[0], commands: p.cmd.textContent,
        error: p.error.textContent, boxes: p.svgbox.querySelectorAll('g.job').length,
        /* messages drawn, and how many the C side's answer has (transfers, or the zero-cost
           messages); test_site.py also compares them with build/schedule's "messages" */
        drawn_msgs: p.svgbox.querySelectorAll('g.msg').length, transfers: !!p.res.transfers,
        answer_msgs: p.res.ok ? (p.res.transfers || p.res.messages).length : -1,
        lanes: Array.prototype.map.call(p.svgbox.querySelectorAll('path.mem:not(.wgt)'),
          function (l) { return Number(l.dataset.top); })});
    });
  });
  chain = chain.then(function () {   /* the CSV import, through panel A's controls */
    show('pipelines');
    var c = cases.csv || {};
    Object.keys(c.set || {}).forEach(function (k) { setControl('p0-' + k, c.set[k]); });
    document.getElementById('import').open = true;
    if (c.text) document.getElementById('csv-text').value = c.text;
    document.getElementById('csv-run').click();
    var st = document.getElementById('csv-status'), p = panels[0];
    out.csv = {status: st ? st.textContent : '', actions: schemes.actions, set: c.set || {},
      shown: schemes.actions ? readFigures(p.figures) : null, texts: schemes.actions ? readTexts(p.figures) : null,
      command: p.cmd.textContent.split('\n')[0], commands: p.cmd.textContent, error: p.error.textContent};
  });
  (cases.bppsa || []).forEach(function (c) {
    chain = chain.then(function () {
      show('bppsa');
      setControl('bp-source', c.source);
      if (c.n) setControl('bp-n', c.n);
      setControl('bp-k', c.k);
      return Promise.resolve(updateBppsa()).then(function () {
        var figs = document.getElementById('bp-figures');
        out.bppsa.push({set: c, shown: readFigures(figs), texts: readTexts(figs),
          command: document.getElementById('bp-cmd').textContent, table: document.getElementById('bp-table').textContent,
          sliders: {n: document.getElementById('bp-n').value, n_out: document.getElementById('bp-n-out').textContent,
            n_max: document.getElementById('bp-n').max, k: document.getElementById('bp-k').value,
            k_out: document.getElementById('bp-k-out').textContent},
          steps: document.querySelectorAll('#bp-tree g.step').length,
          legend: Array.prototype.map.call(document.querySelectorAll('#bp-legend li'), function (li) {
            return {text: li.textContent, cls: li.querySelector('g').getAttribute('class')};
          })});
      });
    });
  });
  (cases.ooo || []).forEach(function (m) {
    chain = chain.then(function () {
      show('ooo');
      setControl('ooo-model', m);
      return Promise.resolve(updateOoo()).then(function () {
        var r = {model: m, orders: {}, texts: {}, commands: {}, labels: {}};
        document.querySelectorAll('#ooo-orders .order').forEach(function (o) {
          var name = o.id.replace('ooo-', '');
          r.orders[name] = readFigures(o.querySelector('dl'));
          r.texts[name] = readTexts(o.querySelector('dl'));
          r.commands[name] = o.querySelector('pre.cmd').textContent;
          r.labels[name] = labelClashes(o.querySelector('svg'));
        });
        out.ooo.push(r);
      });
    });
  });
  if (cases.layout) chain = chain.then(function () {   /* the figures lists side by side */
    show('pipelines');
    Object.keys(cases.layout).forEach(function (k) { setControl(k, cases.layout[k]); });
    out.layout = {width: window.innerWidth, height: window.innerHeight, panels: panels.map(function (p) {
      return {box: boxOf(p.root), labels: Array.prototype.map.call(p.figures.querySelectorAll('dt, dd'), function (e) {
        var r = document.createRange();   /* the text's own boxes: what overflows its cell included */
        r.selectNodeContents(e);
        return {text: e.textContent, box: boxOf(r)};
      })};
    })};
    /* every legend of the three views, laid out at this width */
    out.layout.legends = [legendBoxes(document.querySelector('#legend ul'))];
    show('bppsa');
    out.layout.legends.push(legendBoxes(document.getElementById('bp-legend')));
    setControl('bp-source', 'lenet');
    out.layout.legends.push(legendBoxes(document.getElementById('bp-legend')));
    setControl('bp-source', 'chain');
    show('ooo');
    setControl('ooo-model', 'vgg11');
    out.layout.legends.push(legendBoxes(document.getElementById('ooo-legend')));
    show('pipelines');
  });
  chain = chain.then(function () {   /* each view's controls, for the Tab check */
    out.controls = {};
    document.getElementById('import').open = true;
    return ['pipelines', 'bppsa', 'ooo'].reduce(function (c, v) {
      return c.then(function () { return show(v); }).then(function () { out.controls[v] = controlsShown(); });
    }, Promise.resolve());
  });
  chain.then(function () {
    show(cases.end_view || 'pipelines');
    var pre = document.getElementById('selftest-result');
    out.errors = Array.prototype.map.call(document.querySelectorAll('#errors p'), function (p) { return p.textContent; });
    pre.textContent = JSON.stringify(out);
    document.body.dataset.selftest = 'done';
  }).catch(function (e) { reportError('selftest: ' + e); });
}
