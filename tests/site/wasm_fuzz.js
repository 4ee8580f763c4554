// wasm_fuzz.js — hostile calls into the page's WebAssembly module (make site's
// build/site/scanprop.js) under node, through Module.siteCall as the page calls it
// (site/wasm_call.js); run by tests/site/test_site.py (make test-site).
//   1. the refusals the command line makes (chunks -1, split 7, a memory limit with gpipe,
//      ooo k 1e9, scan levels -5 and 1e9, a transfer cost of 1e308, a simulation above the
//      work bound): ok:false with the expected line;
//   2. string arguments of several MB (an uploaded CSV): an answer, never a trap, and the
//      module answers the next call as before;
//   3. 200 refused simulations of a 20,000-micro-batch action list: wasm memory does not grow;
//   4. seeded random calls with hostile numbers (NaN, ±inf, 1e308, negative, 2^31) and
//      strings (empty, garbage, NUL bytes, garbage CSVs): each answer is ok:true (a valid
//      result) or ok:false with a message, never a trap, every call within a few seconds;
//      the module still gives the first answer at the end, and memory stays bounded.
// Prints one JSON object {calls, failures, memory_mb, slowest_ms}; exit 1 on a failure.
// Usage: node --no-experimental-fetch tests/site/wasm_fuzz.js SCANPROP_JS [SEED]   (FUZZ_SLOW=1: each call
// over a second on stderr)
'use strict';
const M = require(process.argv[2]);
const SEED = +(process.argv[3] || 1);
const failures = [];
let calls = 0, slowest = 0;
const fail = (m) => { if (failures.length < 40) failures.push(m); };
const mb = () => M.HEAPU8.length / 1048576;

const SIM_T = ['string', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number',
               'number', 'string', 'number', 'number', 'string', 'number'];
const OOO_T = ['string', 'number', 'number', 'number', 'number', 'string', 'number'];
const BPPSA_T = ['string', 'number', 'number', 'number', 'number', 'number', 'number'];

function call(name, types, args, what) {
  const t0 = Date.now();
  const a = M.siteCall(name, types, args);
  const ms = Date.now() - t0;
  calls++;
  slowest = Math.max(slowest, ms);
  const label = what || name + JSON.stringify(args.map((x) => typeof x === 'string' && x.length > 40 ?
    x.slice(0, 40) + '...(' + x.length + ')' : x));
  if (!a || typeof a !== 'object' || typeof a.ok !== 'boolean') fail(label + ': not an answer: ' + JSON.stringify(a));
  else if (a.trap) fail(label + ': the module failed: ' + a.error);
  else if (!a.ok && !(typeof a.error === 'string' && a.error.length > 0)) fail(label + ': ok:false without a message');
  if (ms > 20000) fail(label + ': ' + ms + ' ms');
  if (ms > 1000 && process.env.FUZZ_SLOW) process.stderr.write(ms + ' ms: ' + label + '\n');
  return a || {};
}

function sim(o) {
  const c = Object.assign({scheme: 'gpipe', stages: 4, micro: 8, workers: 0, groups: 0, per_group: 0, split: -1,
                           nig: 0, fwd: 1, delta: 0.5, grad: 0.5, profile: '', chunks: 0, mem: 0, actions: '',
                           transfer: 0}, o);
  return call('site_simulate', SIM_T, [c.scheme, c.stages, c.micro, c.workers, c.groups, c.per_group, c.split, c.nig,
    c.fwd, c.delta, c.grad, c.profile, c.chunks, c.mem, c.actions, c.transfer], o.what);
}

function refuses(a, want, what) {
  if (a.ok) fail(what + ': accepted (expected a refusal naming "' + want + '")');
  else if (!String(a.error).includes(want)) fail(what + ': "' + a.error + '" (expected "' + want + '")');
}

M.onRuntimeInitialized = () => {
  const first = sim({what: 'the first answer'});
  if (!first.ok) fail('gpipe 4x8: ' + first.error);
  const firstText = JSON.stringify(first.report);

  // 1. what the command line refuses
  refuses(sim({scheme: 'interleaved-1f1b', stages: 8, workers: 4, chunks: -1}), '--chunks -1: expected >= 1', 'chunks -1');
  refuses(sim({scheme: 'zb-h1', chunks: 2}), '--chunks needs --scheme interleaved-1f1b, interleaved-zb, looped-bfs or zb-auto', 'chunks with zb-h1');
  refuses(sim({split: 7}), 'split 7: expected -1', 'split 7');
  refuses(sim({split: -9}), 'split -9: expected -1', 'split -9');
  refuses(sim({mem: 3}), '--mem-limit needs --scheme zb-auto', 'a memory limit with gpipe');
  refuses(sim({scheme: 'zb-auto', mem: -3}), '--mem-limit -3: expected N', 'memory limit -3');
  refuses(sim({transfer: 1e308}), '--transfer-cost 1e+308: expected a finite time', 'transfer 1e308');
  refuses(sim({fwd: 1e300}), '--fwd-cost 1e+300: expected a finite time', 'fwd 1e300');
  refuses(sim({fwd: NaN}), '--fwd-cost nan: expected a number', 'fwd NaN');
  refuses(sim({stages: 1000, micro: 100000}), 'is too large to simulate', 'gpipe 1000 x 100000');
  refuses(sim({scheme: '1f1b', stages: 1000, micro: 1000}), 'is too large to simulate', '1f1b 1000 x 1000');
  refuses(sim({scheme: 'zb-auto', stages: 64, micro: 512}), 'is too large to simulate', 'zb-auto 64 x 512');
  refuses(call('site_ooo', OOO_T, ['lenet', 4, 0, 0, 0, 'reverse-first-k', 1e9]), '--k 1000000000: expected 0..',
          'ooo k 1e9');
  refuses(call('site_scan_plan', ['number', 'number'], [16, -5]), '--scan-levels -5: expected 0..4', 'scan levels -5');
  refuses(call('site_scan_plan', ['number', 'number'], [16, 1e9]), '--scan-levels 1000000000: expected', 'scan levels 1e9');
  refuses(call('site_bppsa_plan', BPPSA_T, ['lenet', -5, 0, 8, 0, 0, 0]), '--scan-levels -5: expected 0 (linear BP)',
          'bppsa scan levels -5');
  refuses(call('site_bppsa_plan', BPPSA_T, ['lenet', 1e9, 0, 8, 0, 0, 0]), '--scan-levels 1000000000: expected',
          'bppsa scan levels 1e9');

  // 2. string arguments of several MB
  const big = 'layer,fwd,bwd_grad,bwd_delta\n' + 'x,1,1,1\n'.repeat(400000);   // 3.2 MB, 400,000 stages
  sim({profile: big, what: 'a 3.2 MB profile'});
  sim({scheme: 'custom', actions: '0F0,'.repeat(600000), what: 'a 2.4 MB action CSV'});
  sim({scheme: 'custom', actions: '\u00e9'.repeat(1500000), what: 'a 3 MB non-ASCII CSV'});
  call('site_ooo', OOO_T, ['x'.repeat(2000000), 4, 0, 0, 0, 'y'.repeat(2000000), 0], 'ooo with 2 MB names');
  const again = sim({what: 'the first answer after the big strings'});
  if (JSON.stringify(again.report) !== firstText) fail('after the big strings the module answers differently');

  // 3. refused simulations of a 20,000-micro-batch list free what they built
  const B = 20000, f = [], b = [];
  for (let i = 0; i < B; i++) f.push('0F' + i), b.push('0B' + i);
  const r0 = f.concat(b).join(','), r1 = f.map((x) => '1' + x.slice(1)).concat(b.map((x) => '1' + x.slice(1)));
  const list = r0 + '\n' + r1.join(',') + '\n';
  // refused after the list is read: 2 chunks for 1 stage; past the work bound on 2000 stages
  const refusal = (k) => sim({scheme: 'custom', stages: k ? 2000 : 1, micro: 1, actions: list,
                              what: 'a refused 20,000-micro-batch list'});
  for (let i = 0; i < 4; i++) {
    refuses(refusal(i % 2), i % 2 ? 'is too large to simulate' : 'the list has 2 chunks for 1 stages',
            'the refused list ' + i % 2);
  }
  if (!sim({scheme: 'custom', stages: 2, micro: 1, actions: list, what: 'the 20,000-micro-batch list'}).ok)
    fail('the 20,000-micro-batch list on 2 stages is refused');
  const before = mb();
  for (let i = 0; i < 200; i++) refusal(i % 2);
  const grown = mb() - before;
  if (grown > 4) fail('200 refused simulations grew wasm memory by ' + grown.toFixed(1) + ' MB');

  // 4. seeded random hostile calls
  let x = SEED >>> 0 || 1;
  const rnd = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 4294967296; };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const NUM = [0, 1, 2, 3, 4, 8, -1, -9, 7, 0.5, 1e9, -1e9, 2147483647, 2147483648, -2147483649, NaN, Infinity,
               -Infinity, 1e308, 1e-308, -0, 1e12, 1e13];
  const SMALL = [0, 1, 2, 3, 4, 6, 8];
  const garbage = (n) => { let s = ''; for (let i = 0; i < n; i++) s += String.fromCharCode(Math.floor(rnd() * 256)); return s; };
  const CSV = () => pick(['', ',,,\n,,\n', 'layer,fwd,bwd_grad,bwd_delta\na,1,1,1\nb,1e200,1,1\n',
    'layer,fwd,bwd_grad,bwd_delta\na,nan,1,1\n', 'layer,fwd\n', '0F0,0B0\n\n\n', '0F0,0B0\u0000,0F1,0B1\n',
    '0F0,1F0\n1B0,0B0\n', '0F0,0B0\n1F0,1B0\n', '\u0000', garbage(64), garbage(2000), '0F' + '9'.repeat(40) + '\n',
    'layer,fwd,bwd_grad,bwd_delta\n' + 'a,1,1,1\n'.repeat(pick([1, 3, 50]))]);
  const STR = () => pick(['gpipe', '1f1b', 'zb-h1', 'zb-auto', 'interleaved-1f1b', 'custom', 'ddp', 'lpp', 'fsdp',
    'v-half', 'dualpipev', 'dualpipe', '', 'nope', garbage(16), 'gpipe\u0000x']);
  const MODEL = () => pick(['lenet', 'rnn', 'gru', 'mlp', '', 'nope', garbage(8)]);
  const NROUNDS = 300;
  for (let i = 0; i < NROUNDS; i++) {
    const k = rnd();
    const num = () => (rnd() < 0.6 ? pick(SMALL) : pick(NUM));
    if (k < 0.6) {
      sim({scheme: STR(), stages: num(), micro: num(), workers: rnd() < 0.5 ? 0 : num(), groups: rnd() < 0.8 ? 0 : num(),
           per_group: rnd() < 0.8 ? 0 : num(), split: pick([-1, 0, 1, num()]), nig: pick([0, 1, num()]),
           fwd: num(), delta: num(), grad: num(), profile: rnd() < 0.3 ? CSV() : '', chunks: rnd() < 0.7 ? 0 : num(),
           mem: rnd() < 0.7 ? 0 : num(), actions: rnd() < 0.5 ? CSV() : '', transfer: rnd() < 0.6 ? 0 : num()});
    } else if (k < 0.75) {
      call('site_scan_plan', ['number', 'number'], [pick([1, 2, 7, 16, 100, 4096, 4097, 0, -1, 1e9, NaN]), num()]);
    } else if (k < 0.9) {
      call('site_ooo', OOO_T, [MODEL(), pick([1, 2, 4, 0, -1, 65, 1e9, NaN]), pick([0, 0, 1, -1, 17, 1e9]),
        pick([0, 0, 10, -1, 5000, 1e9]), pick([0, 0, 8, -1, 2000, 1e9]),
        pick(['', 'ooo', 'list', 'conventional', 'reverse-first-k', 'sideways', garbage(5)]), num()]);
    } else {
      call('site_bppsa_plan', BPPSA_T, [MODEL(), pick([-1, 0, 1, 2, -5, 1e9, NaN]), pick([0, 0, 0.5, 0.9, 1, -1, NaN, 1e308]),
        pick([1, 2, 4, 0, -1, 65, 1e9]), pick([0, 0, 1, -1, 17]), pick([0, 0, 10, -1, 5000]), pick([0, 0, 8, -1, 2000])]);
    }
    call('site_schemes', [], [], 'site_schemes between the random calls');
  }
  const last = sim({what: 'the first answer at the end'});
  if (JSON.stringify(last.report) !== firstText) fail('at the end the module answers differently');
  if (mb() > 512) fail('wasm memory ' + mb().toFixed(0) + ' MB after the random calls');
  process.stdout.write(JSON.stringify({calls, failures, memory_mb: +mb().toFixed(1), slowest_ms: slowest}) + '\n');
  process.exit(failures.length ? 1 : 0);
};
