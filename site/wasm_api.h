/* wasm_api.h — what the teaching page's WebAssembly entry points share (site/wasm_api.c:
 * the simulator and the scan plan of a chain; site/wasm_models.c: the zoo models' ooo task
 * graph and BPPSA plan). Every entry point returns one JSON object as a string owned by
 * site_out_close (valid until the next answer); a refusal (sp_fail under sp_try) is
 * {"ok":false,"error":"..."}. */
#ifndef SP_SITE_WASM_API_H
#define SP_SITE_WASM_API_H

#include <stddef.h>
#include <stdio.h>

#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#define SITE_API EMSCRIPTEN_KEEPALIVE
#else
#define SITE_API
#endif

/* An answer being written: an in-memory FILE. */
typedef struct site_out {
    FILE *f;
    char *buf;
    size_t len;
} site_out;

void site_out_open(site_out *o);
/* Closes o; its text becomes the answer (the previous one is freed). */
const char *site_out_close(site_out *o);
/* A JSON string literal of s. */
void site_json_str(FILE *f, const char *s);
/* {"ok":false,"error":sp_last_error()} */
const char *site_error_answer(void);

#endif
