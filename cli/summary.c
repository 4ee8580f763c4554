/* summary.c — the JSON line of a run and checked writes to stdout and files. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "core/error.h"
#include "optim/optim.h"
#include "optim/prune.h"
#include "schedulers/exec/exec.h"
#include "schedulers/memory/memory.h"
#include "cli/run.h"
#include "cli/summary.h"
#include "core/guard.h"

/* ---- output ------------------------------------------------------------------------- */

void sp_stdout_check(void)
{
    errno = 0;
    bool bad = fflush(stdout) != 0;
    int e = errno;
    if (!bad && !ferror(stdout)) return;
    fprintf(stderr, "scanprop: stdout: write failed: %s\n", bad && e ? strerror(e) : "an earlier write failed");
    _exit(SP_EXIT_USAGE);
}

void sp_output_close(FILE *f, const char *what)
{
    if (!what) sp_fail("sp_output_close: argument 'what' is NULL");
    errno = 0;
    bool bad = ferror(f) != 0;
    int e = errno;
    if (fclose(f) != 0) bad = true, e = errno;
    if (bad) sp_fail("%s: write failed: %s", what, e ? strerror(e) : "an earlier write failed");
}

/* ---- JSON ---------------------------------------------------------------------------- */

static void put(sp_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sp_json *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(j->buf + j->len, sizeof j->buf - j->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof j->buf - j->len) sp_fail("internal: JSON summary too long");
    j->len += (size_t)n;
}

static void key(sp_json *j, const char *k)
{
    put(j, "%s\"%s\": ", j->first ? "" : ", ", k);
    j->first = false;
}

int sp_json_begin(sp_json *j)
{
    SP_GUARD(SP_ERR);
    if (!j) sp_fail("sp_json_begin: argument 'j' is NULL");
    j->len = 0;
    j->first = true;
    put(j, "{");
    return SP_OK;
}

int sp_json_str(sp_json *j, const char *k, const char *v)
{
    SP_GUARD(SP_ERR);
    if (!j) sp_fail("sp_json_str: argument 'j' is NULL");
    if (!k) sp_fail("sp_json_str: argument 'k' is NULL");
    key(j, k);
    put(j, "\"");
    for (const char *c = v ? v : ""; *c; c++) {
        if (*c == '"' || *c == '\\') put(j, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) put(j, "\\u%04x", *c);
        else put(j, "%c", *c);
    }
    put(j, "\"");
    return SP_OK;
}

int sp_json_num(sp_json *j, const char *k, double v)
{
    SP_GUARD(SP_ERR);
    if (!j) sp_fail("sp_json_num: argument 'j' is NULL");
    if (!k) sp_fail("sp_json_num: argument 'k' is NULL");
    key(j, k);
    if (isfinite(v)) put(j, "%.9g", v);
    else put(j, "null");
    return SP_OK;
}

int sp_json_int(sp_json *j, const char *k, long v)
{
    SP_GUARD(SP_ERR);
    if (!j) sp_fail("sp_json_int: argument 'j' is NULL");
    if (!k) sp_fail("sp_json_int: argument 'k' is NULL");
    key(j, k);
    put(j, "%ld", v);
    return SP_OK;
}

int sp_json_raw(sp_json *j, const char *k, const char *raw)
{
    SP_GUARD(SP_ERR);
    if (!j) sp_fail("sp_json_raw: argument 'j' is NULL");
    if (!k) sp_fail("sp_json_raw: argument 'k' is NULL");
    if (!raw) sp_fail("sp_json_raw: argument 'raw' is NULL");
    key(j, k);
    put(j, "%s", raw);
    return SP_OK;
}

int sp_json_end_print(sp_json *j)
{
    SP_GUARD(SP_ERR);
    if (!j) sp_fail("sp_json_end_print: argument 'j' is NULL");
    put(j, "}");
    errno = 0;
    bool bad = printf("%s\n", j->buf) < 0 || fflush(stdout) != 0;
    int e = errno;
    if (!bad && !ferror(stdout)) return SP_OK;
    /* reported once, here: what could not be written is dropped, so the check at exit
     * (sp_stdout_check) does not report it again after the caller's line */
    __fpurge(stdout);
    clearerr(stdout);
    return sp_error("stdout: write failed: %s", bad && e ? strerror(e) : "an earlier write failed");
}

static void put_str(void *j, const char *k, const char *v) { sp_json_str(j, k, v); }
static void put_num(void *j, const char *k, double v) { sp_json_num(j, k, v); }
static void put_int(void *j, const char *k, long v) { sp_json_int(j, k, v); }

sp_report_writer sp_json_writer(sp_json *j)
{
    SP_GUARD((sp_report_writer){0});
    if (!j) sp_fail("sp_json_writer: argument 'j' is NULL");
    return (sp_report_writer){j, put_str, put_num, put_int};
}

/* ---- the keys of a training run ------------------------------------------------------ */

void sp_run_summary_begin(const sp_run_session *s, sp_json *j)
{
    if (!s) sp_fail("sp_run_summary_begin: argument 's' is NULL");
    if (!j) sp_fail("sp_run_summary_begin: argument 'j' is NULL");
    sp_json_begin(j);
    sp_json_str(j, "app", s->app);
    sp_json_str(j, "device", s->o->device);
    sp_json_str(j, "backward", s->o->backward);
    if (!s->exec && s->o->microbatches > 1) {   /* gradient accumulation (train/train_accum.c) */
        sp_json_int(j, "microbatches", s->o->microbatches);
        if (s->m->nbuffers > 0) sp_json_str(j, "batch_norm", "per-micro-batch");
    }
}

void sp_run_summary_engine(const sp_run_session *s, sp_json *j)
{
    if (!s) sp_fail("sp_run_summary_engine: argument 's' is NULL");
    if (!j) sp_fail("sp_run_summary_engine: argument 'j' is NULL");
    sp_report_writer w = sp_json_writer(j);
    sp_engine_report(s->engine, &w);
}

void sp_run_summary_train(const sp_run_session *s, sp_json *j, const sp_train_result *r, int batch,
                          const sp_dataset *train)
{
    if (!s) sp_fail("sp_run_summary_train: argument 's' is NULL");
    if (!j) sp_fail("sp_run_summary_train: argument 'j' is NULL");
    if (!r) sp_fail("sp_run_summary_train: argument 'r' is NULL");
    const sp_run_opts *o = s->o;
    sp_run_summary_begin(s, j);
    sp_json_int(j, "epochs", r->epochs);
    sp_json_int(j, "steps", r->steps);
    sp_json_int(j, "batch", batch);
    sp_json_int(j, "threads", o->threads);
    sp_json_str(j, "optim", o->optim);
    sp_json_num(j, "lr", o->lr);
    char seed[24];   /* the whole unsigned 64-bit range: not through a long */
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    sp_json_raw(j, "seed", seed);
    sp_json_str(j, "dataset", train->name);
    sp_run_summary_engine(s, j);
    if (o->cuda_graph && r->graph_captures + r->graph_replays > 0) {   /* the whole step (sp_train) */
        sp_json_str(j, "cuda_graph", "step");
        sp_json_int(j, "graph_captures", r->graph_captures);
        sp_json_int(j, "graph_replays", r->graph_replays);
    }
    if (o->device && strcmp(o->device, "cpu") != 0) {   /* what the last step issued (docs/CUDA.md) */
        const sp_device_counts *c = &r->device_step;
        sp_json_int(j, "device_launches", c->launches);
        sp_json_int(j, "device_library_calls", c->library_calls);
        sp_json_int(j, "device_syncs", c->syncs);
        sp_json_int(j, "device_allocs", c->allocs);
        sp_json_int(j, "device_copies", c->copies);
    }
    const sp_pruning *p = s->pruning;
    if (p) {   /* the fraction of the prunable weights that are pruned */
        int64_t kept = 0, all = 0;
        for (int i = 0; i < s->m->nparams; i++)
            if (p->mask[i]) kept += sp_prune_kept(p, i), all += (int64_t)s->m->params[i]->value.numel;
        sp_json_num(j, "pruned", all ? 1.0 - (double)kept / (double)all : 0.0);
    }
    sp_json_num(j, "train_loss", r->train_loss);
    sp_json_num(j, "test_loss", r->test_loss);
    sp_json_num(j, "test_acc", r->test_acc);
    sp_json_num(j, "images_per_s", r->images_per_s);
    sp_json_num(j, "seconds", r->seconds);
    sp_json_num(j, "forward_ms", r->forward_ms);
    sp_json_num(j, "backward_ms", r->backward_ms);
    sp_json_num(j, "step_ms", r->step_ms);
    sp_json_num(j, "last_loss", r->last_loss);
    if (o->clip_grad_norm > 0) {   /* the executor reports its own global norm (sp_run_summary_exec) */
        sp_json_num(j, "clip_grad_norm", o->clip_grad_norm);
        if (!s->exec) sp_json_num(j, "grad_norm", sp_optim_last_grad_norm(s->optim));
    }
}

/* "key": [v0, v1, ...] with one value per rank: doubles exactly (%.15g) or ints. */
static void json_per_rank(sp_json *j, const char *key, const double *d, const int *iv, int ranks)
{
    char buf[4096];
    size_t n = 0;
    for (int r = 0; r < ranks && n < sizeof buf - 32; r++)
        n += d ? (size_t)snprintf(buf + n, sizeof buf - n, "%s%.15g", r ? ", " : "[", d[r])
               : (size_t)snprintf(buf + n, sizeof buf - n, "%s%d", r ? ", " : "[", iv[r]);
    snprintf(buf + n, sizeof buf - n, "]");
    sp_json_raw(j, key, buf);
}

/* --parallel: what each rank read, per rank (collective; see summary.h). Gathered as
 * two floats of 20 bits a value: exact below 2^40. */
void sp_run_summary_data(sp_json *j, const sp_loader *l, const sp_dataset *d, const sp_dataset *test)
{
    if (!j) sp_fail("sp_run_summary_data: argument 'j' is NULL");
    if (!l) sp_fail("sp_run_summary_data: argument 'l' is NULL");
    if (!d) sp_fail("sp_run_summary_data: argument 'train' is NULL");
    sp_comm *w = sp_comm_world();
    int W = sp_comm_size(w);
    enum { K = 6 };
    long long mine[K] = {sp_loader_samples_read(l), sp_loader_labels_read(l), d->file_bytes_read, d->file_bytes_kept,
                         test ? test->file_bytes_read : 0, test ? test->file_bytes_kept : 0};
    float v[2 * K], *all = sp_xmalloc(sizeof(float) * 2 * K * (size_t)W);
    for (int i = 0; i < K; i++) v[2 * i] = (float)(mine[i] >> 20), v[2 * i + 1] = (float)(mine[i] & 0xfffff);
    sp_allgather(w, v, all, 2 * K);
    double per = (double)sp_dataset_sample_numel(d) * sizeof(float) + sizeof(int), *col = sp_xmalloc(sizeof(double) * (size_t)W);
    static const char *const keys[K + 1] = {"data_rows_read", "data_labels_read", "data_bytes_read", "data_file_bytes_read",
                                            "data_file_bytes_kept", "test_file_bytes_read", "test_file_bytes_kept"};
    for (int i = 0; i < K + 1; i++) {
        for (int r = 0; r < W; r++) {
            const float *a = all + (size_t)r * 2 * K;
            double rows = (double)a[0] * 1048576.0 + a[1], labels = (double)a[2] * 1048576.0 + a[3];
            int at = i < 2 ? i : i - 1;
            col[r] = i == 2 ? rows * per + labels * 4 : (double)a[2 * at] * 1048576.0 + a[2 * at + 1];
        }
        json_per_rank(j, keys[i], col, NULL, W);
    }
    free(col);
    free(all);
}

void sp_run_summary_exec(const sp_run_session *s, sp_json *j)
{
    if (!s) sp_fail("sp_run_summary_exec: argument 's' is NULL");
    if (!j) sp_fail("sp_run_summary_exec: argument 'j' is NULL");
    struct sp_exec *x = s->exec;
    if (!x) return;
    sp_exec_stats st;
    sp_exec_gather_stats(x, &st);
    double steps = st.steps > 0 ? (double)st.steps : 1.0, comm = 0;
    char busy[2048], idle[2048];
    size_t nb = 0, ni = 0;
    for (int r = 0; r < st.workers; r++) {
        comm += st.comm[r] / st.workers;
        double b = 1e3 * st.busy[r] / steps, i = 1e3 * (st.wall[r] - st.busy[r]) / steps;
        if (nb < sizeof busy - 32) nb += (size_t)snprintf(busy + nb, sizeof busy - nb, "%s%.3f", r ? ", " : "[", b);
        if (ni < sizeof idle - 32) ni += (size_t)snprintf(idle + ni, sizeof idle - ni, "%s%.3f", r ? ", " : "[", i);
    }
    snprintf(busy + nb, sizeof busy - nb, "]");
    snprintf(idle + ni, sizeof idle - ni, "]");
    sp_json_str(j, "parallel", sp_exec_scheme(s->exec));   /* ddp --backward ooo: "ddp-ooo" */
    sp_json_int(j, "workers", st.workers);
    sp_json_int(j, "microbatches", sp_exec_schedule(x)->micro);
    if (sp_exec_batch_norm(x)) sp_json_str(j, "batch_norm", sp_exec_batch_norm(x));
    sp_json_num(j, "comm_ms", 1e3 * comm / steps);
    /* the steps after the first, as --costs-out's job costs (bench/distributed.sh) */
    sp_json_num(j, "step_mean_ms", 1e3 * st.step_mean);
    sp_json_num(j, "step_median_ms", 1e3 * st.step_median);   /* after the first 5 steps */
    sp_json_num(j, "job_overhead_us", st.job_us);
    sp_json_num(j, "comm_mean_ms", 1e3 * st.comm_mean);
    /* the simulator's step for what ran: this run's job costs and communication model */
    sp_json_num(j, "predicted_step_ms", sp_exec_predict_step_ms(x, s->comm));
    sp_json_raw(j, "busy_ms", busy);
    sp_json_raw(j, "idle_ms", idle);
    /* activation memory per rank: measured by the executor, and as the schedule simulated it */
    json_per_rank(j, "peak_activation_bytes", st.peak_act_bytes, NULL, st.workers);
    json_per_rank(j, "simulated_peak_activation_bytes", st.sim_peak_act_bytes, NULL, st.workers);
    /* the time scan: each rank's share of the weight gradients, in steps */
    if (st.wgrad_steps) json_per_rank(j, "wgrad_steps", NULL, st.wgrad_steps, st.workers);
    if (st.scan_algo) sp_json_str(j, "scan_algo", st.scan_algo);
    /* the whole memory per rank (weights, gradients, optimizer state, buckets, activations):
     * measured by the executor, and predicted (exec.h) */
    json_per_rank(j, "peak_memory_bytes", st.peak_mem_bytes, NULL, st.workers);
    json_per_rank(j, "predicted_peak_memory_bytes", st.pred_peak_mem_bytes, NULL, st.workers);
    sp_exec_stats_free(&st);
    if (s->o->clip_grad_norm > 0) {
        sp_exec_clip c;
        sp_exec_clip_stats(x, &c);
        sp_json_str(j, "step_sync", s->o->step_sync);
        sp_json_int(j, "steps_clipped", c.steps_clipped);
        sp_json_int(j, "clip_rollbacks", c.rollbacks);
        sp_json_num(j, "grad_norm", c.last_norm);
        sp_json_num(j, "clip_wait_ms", 1e3 * c.wait_s / (st.steps > 0 ? (double)st.steps : 1.0));
    }
}

/* ---- memory (--mem-report) ------------------------------------------------------------ */

long sp_rss_kib(void)
{
    /* open/read into a stack buffer, not stdio: called after every step with --mem-report,
     * and a step allocates nothing (tests/test_alloc.c) */
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *p = strstr(buf, "\nVmRSS:");
    return p ? strtol(p + 7, NULL, 10) : -1;
}

static double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

void sp_run_summary_memory(const sp_run_session *s, sp_json *j, const sp_train_result *r, const sp_dataset *train,
                           const sp_dataset *test, long rss_steady_kib)
{
    if (!s) sp_fail("sp_run_summary_memory: argument 's' is NULL");
    if (!j) sp_fail("sp_run_summary_memory: argument 'j' is NULL");
    if (!r) sp_fail("sp_run_summary_memory: argument 'r' is NULL");
    struct rusage ru;
    long peak_kib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;   /* Linux: KiB */
    sp_mem_breakdown mem;   /* weights: parameters and buffers; the gradients allocated */
    sp_mem_model(s->m, &mem);
    size_t params = 0;
    for (int i = 0; i < s->m->nparams; i++) params += s->m->params[i]->value.numel;
    size_t state = 0;   /* sgd: the momentum buffer; adam: m and v (each Σ numel) */
    for (int k = 0; k < 2; k++)
        if (s->optim && s->optim->state[k])
            for (int i = 0; i < s->optim->nparams; i++) state += s->optim->params[i]->value.numel;
    sp_json_num(j, "rss_peak_mib", peak_kib >= 0 ? peak_kib / 1024.0 : NAN);
    sp_json_num(j, "rss_steady_mib", rss_steady_kib >= 0 ? rss_steady_kib / 1024.0 : NAN);
    sp_json_int(j, "params", (long)params);
    sp_json_num(j, "mem_params_mib", mib(mem.weights));   /* parameters and buffers */
    sp_json_num(j, "mem_grads_mib", r->grads_in_step ? 0.0 : mib(mem.grads));   /* else in the step arena */
    sp_json_num(j, "mem_optim_mib", mib((double)state * sizeof(float)));
    sp_json_num(j, "mem_arena_mib", mib((double)r->arena_bytes));
    sp_json_num(j, "mem_eval_arena_mib", mib((double)r->eval_arena_bytes));
    sp_json_num(j, "mem_dataset_mib", mib((double)(sp_dataset_bytes(train) + (test ? sp_dataset_bytes(test) : 0))));
}
