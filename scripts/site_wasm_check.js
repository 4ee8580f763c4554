// site_wasm_check.js — runs configurations through the WebAssembly simulator (make site's
// build/site/scanprop.js) under node and prints the answers as one JSON array; the caller
// (scripts/test_site.py) compares each report with build/schedule's JSON line.
// Usage: node --no-experimental-fetch scripts/site_wasm_check.js SCANPROP_JS CONFIGS_JSON
'use strict';
const fs = require('fs');
const configs = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
// The module is loaded first: its runtime starts asynchronously, after this handler is set.
const M = require(process.argv[2]);
M.onRuntimeInitialized = () => {
  {
    const types = ['string', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number', 'number',
                   'number', 'string', 'number', 'number', 'string', 'number'];
    const out = configs.map((c) => JSON.parse(M.ccall('site_simulate', 'string', types, [
      c.scheme, c.stages, c.micro, c.workers || 0, c.groups || 0, c.per_group || 0,
      c.split === undefined ? -1 : c.split, c.no_input_grad ? 1 : 0, c.fwd === undefined ? 1 : c.fwd,
      c.delta === undefined ? 0.5 : c.delta, c.grad === undefined ? 0.5 : c.grad, c.profile || '', c.chunks || 0,
      c.mem_limit || 0, c.actions || '', c.transfer || 0])));
    process.stdout.write(JSON.stringify(out));
  }
};
