/* testutil.c — finite-difference gradient checking and small fixtures. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <zlib.h>
#include <sys/wait.h>
#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "layers/layers.h"
#include "tests/testutil.h"

void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    sp_rng r;
    sp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = sp_rng_uniform_range(&r, lo, hi);
}

double tu_max_rel_diff(const float *a, const float *b, size_t n)
{
    double scale = 1.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst / scale;
}

static char tmp_path[4200];
static pid_t tmp_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void remove_tmpdir(void)
{
    if (tmp_path[0] && getpid() == tmp_owner) nftw(tmp_path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_bin(const char *name)
{
    static char path[8][4096];
    static int k;
    const char *b = getenv("BUILD");
    k = (k + 1) % 8;
    snprintf(path[k], sizeof path[k], "%s/%s", b && *b ? b : "build", name);
    return path[k];
}

/* A forked child shares its parent's directory; only the process that made it removes it. */
const char *tu_tmpdir(void)
{
    if (!tmp_path[0]) {
        /* SCANPROP_TEST_TMP: the folder to make it in (scripts/run_tests.sh gives each
         * suite its own, so suites that run side by side never remove each other's) */
        char root[4096];
        const char *own = getenv("SCANPROP_TEST_TMP");
        snprintf(root, sizeof root, "%s", own && *own ? own : tu_bin("tmp"));
        mkdir(root, 0755);
        char *abs = realpath(root, NULL);
        snprintf(tmp_path, sizeof tmp_path, "%s/scanprop-test-XXXXXX", abs ? abs : root);
        free(abs);
        if (!mkdtemp(tmp_path)) sp_fail("cannot create a temporary directory under %s: %s", root, strerror(errno));
        tmp_owner = getpid();
        atexit(remove_tmpdir);
    }
    return tmp_path;
}

/* ---- quiet expected errors ----------------------------------------------------------- */

static int saved_stderr = -1, expected_status;
static pid_t capture_owner;
static char capture_file[4300], expect_text[512];

static void say(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(saved_stderr, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void capture_check(int status, void *arg)
{
    if (getpid() != capture_owner || saved_stderr < 0) return;   /* a forked child */
    fflush(stderr);
    static char text[8192];
    size_t n = 0;
    FILE *f = fopen(capture_file, "r");
    if (f) {
        n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
    }
    text[n] = 0;
    remove(capture_file);
    int expected = expected_status;
    if (expected != 2 || status != 2) {   /* not an expected error: show what it printed */
        say(text);
        if (expected == 2 && status != 2) {
            say("(expected: exit 2 with one line 'scanprop: ...')\n");
        }
        return;
    }
    char *nl = strchr(text, '\n');
    bool one_line = strncmp(text, "scanprop: ", 10) == 0 && nl && nl[1] == 0;
    bool has = !expect_text[0] || strstr(text, expect_text);
    if (one_line && has) return;
    say("expected error output: one line 'scanprop: ...'");
    if (expect_text[0]) {
        say(" containing '");
        say(expect_text);
        say("'");
    }
    say("; got:\n");
    say(text);
    remove_tmpdir();
    _exit(1);
}

/* Under AddressSanitizer the capture is off: with stderr redirected and the check run
 * from on_exit, Criterion reports every .exit_code test as having "exited during its
 * setup or teardown" (seen with GCC 12 and clang 14 ASan builds). The sanitizer builds
 * then print the expected errors and check only the exit status; the plain builds check
 * the message too. */
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif

void tu_capture_stderr(void)
{
#ifdef TU_ASAN
    return;
#endif
    if (capture_owner == getpid()) return;
    snprintf(capture_file, sizeof capture_file, "%s/stderr.txt", tu_tmpdir());
    fflush(stderr);
    int fd = open(capture_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
    capture_owner = getpid();
    /* read now: Criterion's test record is not valid any more at exit */
    expected_status = criterion_current_test && criterion_current_test->data ? criterion_current_test->data->exit_code : 0;
    on_exit(capture_check, NULL);   /* after remove_tmpdir's atexit: runs first */
}

void tu_expect_error(const char *text)
{
    snprintf(expect_text, sizeof expect_text, "%s", text ? text : "");
    tu_capture_stderr();
}

int tu_run_last(const char *cmd, char *last, size_t len)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen %s", cmd);
    char line[8192];
    if (last) last[0] = 0;
    while (fgets(line, sizeof line, p))
        if (last) snprintf(last, len, "%s", line);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double tu_json_num(const char *json, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    cr_assert_not_null(p, "key %s missing in %s", key, json);
    return strtod(p + strlen(pat), NULL);
}

void tu_strip_key(char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, ", \"%s\": ", key);
    char *p = strstr(json, pat);
    if (!p) return;
    char *end = p + strlen(pat);
    while (*end && *end != ',' && *end != '}') end++;
    memmove(p, end, strlen(end) + 1);
}

void tu_strip_timings(char *json)
{
    static const char *keys[] = {"images_per_s", "seconds", "forward_ms", "backward_ms", "step_ms", "critical_path_ms"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) tu_strip_key(json, keys[k]);
}

int tu_run(const char *cmd, char *out, size_t outlen, char *err, size_t errlen)
{
    static int seq;
    char o[4300], e[4300], full[16384];
    const char *dir = tu_tmpdir();
    seq++;
    snprintf(o, sizeof o, "%s/run%d.out", dir, seq);
    snprintf(e, sizeof e, "%s/run%d.err", dir, seq);
    snprintf(full, sizeof full, "( %s ) >'%s' 2>'%s' </dev/null", cmd, o, e);
    fflush(NULL);
    int st = system(full);
    const char *paths[2] = {o, e};
    char *bufs[2] = {out, err};
    size_t lens[2] = {outlen, errlen};
    for (int i = 0; i < 2; i++) {
        if (bufs[i] && lens[i]) {
            size_t n = 0;
            FILE *f = fopen(paths[i], "r");
            if (f) {
                n = fread(bufs[i], 1, lens[i] - 1, f);
                fclose(f);
            }
            bufs[i][n] = 0;
        }
        remove(paths[i]);
    }
    if (st == -1) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

/* y = l(xs) on tape t: a loss op with labels, else l applied to the ninputs leaves. */
static sp_node *apply(sp_tape *t, sp_layer *l, int ninputs, const sp_tensor *xs, const int *labels)
{
    sp_node *in[TU_MAX_INPUTS];
    for (int i = 0; i < ninputs; i++) in[i] = sp_tape_input(t, &xs[i]);
    return labels ? sp_apply_loss(t, l, in[0], labels) : sp_apply_n(t, l, ninputs, in);
}

/* L = Σ r ⊙ f(x), float64 accumulation, on a scratch tape. */
static double eval_L(sp_layer *l, int ninputs, const sp_tensor *xs, const float *r, const int *labels, sp_tape *t)
{
    sp_tape_reset(t);
    sp_node *y = apply(t, l, ninputs, xs, labels);
    double L = 0.0;
    for (size_t i = 0; i < y->out.numel; i++) L += (double)r[i] * (double)y->out.data[i];
    return L;
}

/* Compare analytic grad g of tensor v (perturbed in place) with finite differences. */
static double check_tensor(sp_tensor *v, const float *g, sp_layer *l, int ninputs, const sp_tensor *xs,
                           const float *r, const tu_gc_opts *o, sp_rng *pick, sp_tape *t)
{
    int nchk = (size_t)o->max_checks < v->numel ? o->max_checks : (int)v->numel;
    double worst = 0.0, scale = 1.0;
    double *fd = sp_xmalloc((size_t)nchk * sizeof *fd);
    size_t *idx = sp_xmalloc((size_t)nchk * sizeof *idx);
    for (int c = 0; c < nchk; c++) {
        size_t i = (size_t)nchk == v->numel ? (size_t)c : sp_rng_below(pick, (uint32_t)v->numel);
        float keep = v->data[i];
        v->data[i] = keep + (float)o->eps;
        double Lp = eval_L(l, ninputs, xs, r, o->labels, t);
        v->data[i] = keep - (float)o->eps;
        double Lm = eval_L(l, ninputs, xs, r, o->labels, t);
        v->data[i] = keep;
        idx[c] = i;
        fd[c] = (Lp - Lm) / (2.0 * o->eps);
        scale = fmax(scale, fabs(fd[c]));
    }
    for (int c = 0; c < nchk; c++) worst = fmax(worst, fabs((double)g[idx[c]] - fd[c]));
    free(fd);
    free(idx);
    return worst / scale;
}

static void fill_input(sp_tensor *x, sp_rng *r, const tu_gc_opts *o)
{
    for (size_t i = 0; i < x->numel; i++) {
        float v = sp_rng_uniform_range(r, o->x_lo, o->x_hi);
        if (o->min_abs_x > 0 && fabsf(v) < o->min_abs_x) v = v < 0 ? -o->min_abs_x : o->min_abs_x;
        x->data[i] = v;
    }
    if (o->grid > 0) {   /* distinct values: a random permutation of a grid */
        int *perm = sp_xmalloc(x->numel * sizeof *perm);
        for (size_t i = 0; i < x->numel; i++) perm[i] = (int)i;
        sp_rng_shuffle(r, perm, (int)x->numel);
        for (size_t i = 0; i < x->numel; i++) x->data[i] = o->grid * ((float)perm[i] - 0.5f * (float)x->numel);
        free(perm);
    }
}

tu_gc_result tu_gradcheck_n(sp_layer *l, int ninputs, const int *ndims, const int (*shapes)[SP_MAX_DIMS],
                            uint64_t seed, const tu_gc_opts *opts)
{
    tu_gc_opts o = opts ? *opts : (tu_gc_opts){0};
    if (o.eps == 0) o.eps = 1e-2;
    if (o.max_checks == 0) o.max_checks = 64;
    if (o.x_lo == 0 && o.x_hi == 0) o.x_lo = -1, o.x_hi = 1;
    if (ninputs < 1 || ninputs > TU_MAX_INPUTS) sp_fail("tu_gradcheck_n: %d inputs", ninputs);
    sp_rng r;
    sp_rng_seed(&r, seed);
    if (l->op->init_params) l->op->init_params(l, &r);

    sp_tensor xs[TU_MAX_INPUTS], dxs[TU_MAX_INPUTS];
    for (int i = 0; i < ninputs; i++) {
        xs[i] = sp_tensor_new(ndims[i], shapes[i]);
        fill_input(&xs[i], &r, &o);
    }

    sp_tape t, scratch;
    sp_tape_init(&t);
    sp_tape_init(&scratch);
    sp_node *y = apply(&t, l, ninputs, xs, o.labels);
    float *rv = sp_xmalloc(y->out.numel * sizeof *rv);
    for (size_t i = 0; i < y->out.numel; i++) rv[i] = sp_rng_uniform_range(&r, -1, 1);
    sp_tensor dy = sp_tensor_view(rv, y->out.ndim, y->out.shape);

    tu_gc_result res = {.nparams = l->nparams, .ninputs = ninputs};
    for (int i = 0; i < ninputs; i++) {
        dxs[i] = sp_tensor_new(ndims[i], shapes[i]);
        for (size_t k = 0; k < dxs[i].numel; k++) dxs[i].data[k] = NAN;   /* δ must overwrite */
        y->kern->backward_input(y, i, &dy, &dxs[i]);
        for (size_t k = 0; k < dxs[i].numel; k++) res.max_abs_dx = fmax(res.max_abs_dx, fabs(dxs[i].data[k]));
    }
    for (int p = 0; p < l->nparams; p++) sp_tensor_zero(&l->params[p]->grad);
    if (y->kern->backward_params) y->kern->backward_params(y, &dy);

    sp_rng pick;
    sp_rng_seed(&pick, seed ^ 0x5eed);
    for (int i = 0; i < ninputs; i++) {
        bool nan = false;
        for (size_t k = 0; k < dxs[i].numel; k++) nan |= isnan(dxs[i].data[k]);
        res.err_in[i] = nan ? INFINITY : check_tensor(&xs[i], dxs[i].data, l, ninputs, xs, rv, &o, &pick, &scratch);
        res.err_dx = fmax(res.err_dx, res.err_in[i]);
    }
    for (int p = 0; p < l->nparams; p++)
        res.err_param[p] = check_tensor(&l->params[p]->value, l->params[p]->grad.data, l, ninputs, xs, rv, &o,
                                        &pick, &scratch);

    free(rv);
    for (int i = 0; i < ninputs; i++) {
        sp_tensor_free(&dxs[i]);
        sp_tensor_free(&xs[i]);
    }
    sp_tape_free(&t);
    sp_tape_free(&scratch);
    return res;
}

tu_gc_result tu_gradcheck(sp_layer *l, int ndim, const int *xshape, uint64_t seed, const tu_gc_opts *opts)
{
    int shape[1][SP_MAX_DIMS] = {{0}};
    memcpy(shape[0], xshape, (size_t)ndim * sizeof(int));
    return tu_gradcheck_n(l, 1, &ndim, shape, seed, opts);
}

double tu_gc_worst(const tu_gc_result *r)
{
    double w = r->err_dx;
    for (int p = 0; p < r->nparams; p++) w = fmax(w, r->err_param[p]);
    return w;
}

/* ---- small DAG models ---------------------------------------------------------------- */

static int add2(sp_model *m, sp_layer *l, int a, int b) { return sp_model_add_from(m, l, 2, (int[]){a, b}); }

static sp_model *resmlp(void)
{
    sp_model *m = sp_model_new("resmlp");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_linear("fc0", 8, 6));
    int x = sp_model_add_from(m, sp_tanh(), 1, (int[]){0});
    sp_model_add_from(m, sp_sigmoid(), 1, (int[]){x});   /* dead branch */
    sp_model_add_from(m, sp_linear("fc1", 6, 6), 1, (int[]){x});
    sp_model_add(m, sp_tanh());
    int f = sp_model_add_from(m, sp_linear("fc2", 6, 6), 1, (int[]){sp_model_last(m)});
    add2(m, sp_add(), f, x);
    int h = sp_model_add_from(m, sp_tanh(), 1, (int[]){sp_model_last(m)});
    int hh = add2(m, sp_add(), h, h);
    add2(m, sp_concat(), hh, x);
    sp_model_add(m, sp_linear("fc3", 12, 5));
    return m;
}

/* conv → relu → [a + f(a)] → relu → [s(b) + g(b)] → relu → flatten → fc */
static sp_model *resconv(void)
{
    sp_model *m = sp_model_new("resconv");
    sp_model_set_loss(m, sp_softmax_ce());
    sp_model_add(m, sp_conv2d("conv0", 2, 4, 3, 1, 1));
    int a = sp_model_add_from(m, sp_relu(), 1, (int[]){sp_model_last(m)});
    sp_model_add(m, sp_conv2d("b1.conv1", 4, 4, 3, 1, 1));
    sp_model_add(m, sp_relu());
    int f = sp_model_add_from(m, sp_conv2d("b1.conv2", 4, 4, 3, 1, 1), 1, (int[]){sp_model_last(m)});
    add2(m, sp_add(), f, a);
    int b = sp_model_add_from(m, sp_relu(), 1, (int[]){sp_model_last(m)});
    sp_model_add(m, sp_conv2d("b2.conv1", 4, 6, 3, 2, 1));
    sp_model_add(m, sp_relu());
    int g = sp_model_add_from(m, sp_conv2d("b2.conv2", 6, 6, 3, 1, 1), 1, (int[]){sp_model_last(m)});
    int s = sp_model_add_from(m, sp_conv2d("b2.shortcut", 4, 6, 1, 2, 0), 1, (int[]){b});
    add2(m, sp_add(), g, s);
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", 6 * 3 * 3, 5));
    return m;
}

static sp_model *dense(void)
{
    sp_model *m = sp_model_new("dense");
    sp_model_set_loss(m, sp_softmax_ce());
    int feats[4], nfeat = 0, C = 4;
    sp_model_add(m, sp_conv2d("conv0", 2, 4, 3, 1, 1));
    feats[nfeat++] = sp_model_last(m);
    for (int l = 0; l < 3; l++) {
        int in = nfeat == 1 ? feats[0] : sp_model_add_from(m, sp_concat(), nfeat, feats);
        char name[32];
        snprintf(name, sizeof name, "block.layer%d.conv", l + 1);
        sp_model_add_from(m, sp_relu(), 1, (int[]){in});
        feats[nfeat++] = sp_model_add_from(m, sp_conv2d(name, C, 3, 3, 1, 1), 1, (int[]){sp_model_last(m)});
        C += 3;
    }
    sp_model_add_from(m, sp_concat(), nfeat, feats);
    sp_model_add(m, sp_relu());
    sp_model_add(m, sp_maxpool2d(2, 2, 0));
    sp_model_add(m, sp_flatten());
    sp_model_add(m, sp_linear("fc", C * 3 * 3, 5));
    return m;
}

sp_model *tu_dag_model(const char *name)
{
    if (strcmp(name, "resmlp") == 0) return resmlp();
    if (strcmp(name, "resconv") == 0) return resconv();
    if (strcmp(name, "dense") == 0) return dense();
    sp_fail("tu_dag_model: unknown model %s", name);
}

int tu_dag_input_shape(const char *name, int *shape)
{
    if (strcmp(name, "resmlp") == 0) {
        shape[0] = 8;
        return 1;
    }
    shape[0] = 2, shape[1] = 6, shape[2] = 6;
    return 3;
}

float *tu_model_weights(const sp_model *m, size_t *n)
{
    *n = 0;
    for (int i = 0; i < m->nparams; i++) *n += m->params[i]->value.numel;
    float *w = malloc(*n * sizeof *w), *q = w;
    for (int i = 0; i < m->nparams; i++) {
        memcpy(q, m->params[i]->value.data, m->params[i]->value.numel * sizeof *q);
        q += m->params[i]->value.numel;
    }
    return w;
}

const char *tu_tmp_path(const char *name)
{
    static char buf[8][4608];
    static int k;
    char *p = buf[k++ % 8];
    int n = snprintf(p, sizeof buf[0], "%s/%s", tu_tmpdir(), name);
    cr_assert(n > 0 && (size_t)n < sizeof buf[0], "temporary path too long: %s", name);
    return p;
}

void tu_write_file(const char *path, const void *data, size_t n, bool gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        cr_assert(g && gzwrite(g, data, (unsigned)n) == (int)n, "cannot write %s", path);
        gzclose(g);
    } else {
        FILE *fp = fopen(path, "wb");
        cr_assert(fp && fwrite(data, 1, n, fp) == n, "cannot write %s", path);
        fclose(fp);
    }
}

double tu_st_max_rel_diff(const char *pa, const char *pb, bool buffers, bool *bitwise, int *nbuf)
{
    sp_st_file *a = sp_st_open(pa), *b = sp_st_open(pb);
    cr_assert(a && b, "cannot open %s or %s", pa, pb);
    cr_assert_eq(sp_st_count(a), sp_st_count(b), "%s and %s hold different tensor counts", pa, pb);
    double worst = 0;
    bool same = true;
    int bufs = 0;
    for (int i = 0; i < sp_st_count(a); i++) {
        const sp_st_tensor *ta = sp_st_at(a, i), *tb = sp_st_find(b, ta->name);
        cr_assert_not_null(tb, "%s missing in %s", ta->name, pb);
        cr_assert_eq(ta->nbytes, tb->nbytes, "%s: %zu bytes against %zu", ta->name, (size_t)ta->nbytes,
                     (size_t)tb->nbytes);
        bool is_buf = strstr(ta->name, "running_") || strstr(ta->name, "num_batches");
        bufs += is_buf;
        if (is_buf && !buffers) continue;
        int shape[SP_ST_MAX_DIMS];
        for (int d = 0; d < ta->ndim; d++) shape[d] = (int)ta->shape[d];
        float *x = malloc(ta->nbytes + 4), *y = malloc(tb->nbytes + 4);
        cr_assert_eq(sp_st_read_f32(a, ta->name, x, ta->ndim, shape), 0);
        cr_assert_eq(sp_st_read_f32(b, ta->name, y, ta->ndim, shape), 0);
        same &= memcmp(x, y, ta->nbytes) == 0;
        double d = tu_max_rel_diff(x, y, ta->numel);
        worst = d > worst ? d : worst;
        free(x);
        free(y);
    }
    sp_st_close(a);
    sp_st_close(b);
    if (bitwise) *bitwise = same;
    if (nbuf) *nbuf = bufs;
    return worst;
}

const char *tu_bin_path(const char *name)
{
    static char path[4][512];
    static int k;
    const char *b = getenv("BUILD");
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", b ? b : "build", name);
    return path[k];
}
