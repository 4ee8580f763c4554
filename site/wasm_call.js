/* wasm_call.js — how JavaScript calls the module's entry points (site/wasm_api.h), linked
 * into scanprop.js (make site: emcc --post-js), so the page (site/app.js) and the node
 * checks (scripts/site_wasm_check.js, tests/site/wasm_fuzz.js) call them the same way:
 *
 *   Module.siteCall(name, types, args)  →  the entry point's answer, parsed
 *
 * types: 'string' or 'number' per argument. Strings go on the heap (malloc, freed after
 * the call), not on the C stack where ccall puts them: an uploaded CSV of a few MB
 * (4 bytes a character) would overflow the 5 MB stack. If the module still fails (out of
 * memory, a trap), the stack pointer is put back and the answer is {"ok":false,"error":…},
 * with "trap": true, so the next call runs on a sound stack. */
Module['siteCall'] = function (name, types, args) {
  var held = [], sp = stackSave();
  try {
    var cargs = args.map(function (a, i) {
      if (types[i] !== 'string') return a;
      var s = a === undefined || a === null ? '' : String(a), n = lengthBytesUTF8(s) + 1, p = _malloc(n);
      if (!p) throw new Error('no memory for a ' + n + '-byte argument');
      held.push(p);
      stringToUTF8(s, p, n);
      return p;
    });
    var answer = UTF8ToString(Module['ccall'](name, 'number', types.map(function () { return 'number'; }), cargs));
    return JSON.parse(answer);
  } catch (e) {
    stackRestore(sp);
    return {ok: false, trap: true, error: name + ': ' + (e && e.message ? e.message : String(e))};
  } finally {
    held.forEach(function (p) { _free(p); });
  }
};
