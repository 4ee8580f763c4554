// site_wasm_check.js — runs configurations through the WebAssembly build (make site's
// build/site/scanprop.js) under node and prints the answers as one JSON object; the caller
// (tests/site/test_site.py) compares them with the native programs:
//   simulate: site_simulate, each report against build/schedule's JSON line
//   bppsa:    site_bppsa_plan, text and keys against build/<app> --backward bppsa --plan=full
//   ooo:      site_ooo, each order's peak_bytes and k against build/<app> --backward ooo
// Usage: node --no-experimental-fetch scripts/site_wasm_check.js SCANPROP_JS CONFIGS_JSON
// (CONFIGS_JSON: {"simulate": [...], "bppsa": [...], "ooo": [...]})
'use strict';
const fs = require('fs');
const configs = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
// The module is loaded first: its runtime starts asynchronously, after this handler is set.
const M = require(process.argv[2]);
M.onRuntimeInitialized = () => {
  const types = ['string', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number',
                 'number', 'string', 'number', 'number', 'string', 'number'];
  // every call as the page makes it: Module.siteCall (site/wasm_call.js)
  const simulate = (configs.simulate || []).map((c) => M.siteCall('site_simulate', types, [
    c.scheme, c.stages, c.micro, c.workers || 0, c.groups || 0, c.per_group || 0,
    c.split === undefined ? -1 : c.split, c.no_input_grad ? 1 : 0, c.fwd === undefined ? 1 : c.fwd,
    c.delta === undefined ? 0.5 : c.delta, c.grad === undefined ? 0.5 : c.grad, c.profile || '', c.chunks || 0,
    c.mem_limit || 0, c.actions || '', c.transfer || 0]));
  const bppsa = (configs.bppsa || []).map((c) => M.siteCall('site_bppsa_plan',
    ['string', 'number', 'number', 'number', 'number', 'number', 'number'],
    [c.model, c.levels, c.prune || 0, c.batch, c.channels || 0, c.seq_len || 0, c.hidden || 0]));
  const ooo = (configs.ooo || []).map((c) => {
    const t0 = Date.now();
    const a = M.siteCall('site_ooo', ['string', 'number', 'number', 'number', 'number', 'string', 'number'],
      [c.model, c.batch, c.channels || 0, c.seq_len || 0, c.hidden || 0, c.order || '', c.k || 0]);
    a.ms = Date.now() - t0;
    return a;
  });
  process.stdout.write(JSON.stringify({simulate, bppsa, ooo}));
};
