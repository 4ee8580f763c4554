/* run_parallel.c — the runner's side of --parallel (cli/run.h): MPI up and
 * down, the check that every rank runs the same program, model, data and settings (before
 * the first collective), the communication model (--comm-profile or a short probe) and
 * the executor (schedulers/exec/exec.h) that sp_train then drives. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/comm/comm.h"
#include "core/error.h"
#include "core/io/fileio.h"
#include "schedulers/sim/comm_cost.h"
#include "schedulers/exec/exec.h"
#include "cli/run.h"
#include "cli/run_internal.h"

/* The order/trace files, then MPI down (every rank). */
void run_exec_end(struct sp_exec *x)
{
    if (!x) return;
    sp_exec_finish(x);
    sp_exec_free(x);
    sp_comm_finalize();
}

/* Flags that may differ between ranks: they change neither the schedule, the data nor the
 * numbers (docs/DISTRIBUTED.md). */
#define RANK_LOCAL_FLAGS "threads|quiet|comm-timeout"
#define MAX_DIGEST 160

static uint32_t hash_text(uint32_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return (h ^ 0xff) * 16777619u;
}

static uint32_t hash_ints(uint32_t h, int n, const int *v)
{
    char buf[32];
    for (int i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, "%d", v[i]);
        h = hash_text(h, buf);
    }
    return h;
}

/* FNV-1a (64 bits) of a file's bytes; 0 when it cannot be read (the read that follows
 * refuses it on that rank, naming why). */
static uint64_t hash_file(const char *path)
{
    FILE *f = sp_open_read(path, NULL);
    if (!f) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
    bool bad = ferror(f);
    fclose(f);
    return bad ? 0 : h | 1;   /* never 0: that is "cannot read" */
}

/* A list of ranks ("1, 3") whose entry e differs from rank 0's; returns how many. */
static int ranks_differing(const float *all, int W, int E, int e, char *ranks, size_t len)
{
    size_t k = 0;
    int nd = 0;
    ranks[0] = 0;
    for (int r = 1; r < W; r++)
        if (memcmp(all + (size_t)r * 4 * E + 4 * e, all + 4 * e, 4 * sizeof *all) != 0) {
            if (k + 16 < len) k += (size_t)snprintf(ranks + k, len - k, "%s%d", nd ? ", " : "", r);
            nd++;
        }
    return nd;
}

/* Before the first collective of the executor: every rank must run the same program and
 * model on the same data with the same settings, and read the same bytes from the files
 * it is given, or a rank would read a gradient bucket of another size, wait for a message
 * that never comes or silently train with rank 0's numbers. One allgather of a hash per
 * flag (and of the program, the model's parameter shapes, the dataset's identity and the
 * contents of each input file: a path names a file on each rank's own disk or working
 * directory); on a difference every rank refuses alike, naming the first flag or file
 * that differs and the ranks. */
static void ranks_agree(const char *app, const sp_run_opts *o, const sp_model *m, const sp_dataset *train,
                        const sp_dataset *test, int sample_ndim, const int *sample_shape)
{
    sp_comm *w = sp_comm_world();
    int W = sp_comm_size(w);
    if (W < 2) return;
    sp_flag_digest d[MAX_DIGEST];
    int nf = sp_flags_digest(d, MAX_DIGEST, RANK_LOCAL_FLAGS);
    /* the files a rank reads by path before or during the run */
    const char *files[][2] = {{"actions", o->actions}, {"costs", o->costs}, {"comm-profile", o->comm_profile},
                              {"load", o->load}};
    enum { NFILES = sizeof files / sizeof files[0] };
    /* and every file read since the flags were parsed (the datasets' files): each of the
     * first NREAD - 1 in a slot of its own, the rest together in the last */
    enum { NREAD = 8 };
    sp_open_record(false);
    const char *const *read;
    int nread = sp_opened_files(&read);
    enum { E_APP, E_FLAGS, E = E_FLAGS + MAX_DIGEST + 2 + NFILES + NREAD };   /* then the model, the data, the files */
    uint64_t h[E] = {0};
    h[E_APP] = hash_text(hash_text(2166136261u, app), m->name);
    for (int i = 0; i < nf; i++) h[E_FLAGS + i] = d[i].hash;
    uint32_t hm = 2166136261u;
    for (int i = 0; i < m->nparams; i++)
        hm = hash_ints(hash_text(hm, m->params[i]->name), m->params[i]->value.ndim, m->params[i]->value.shape);
    h[E_FLAGS + nf] = hm;
    uint32_t hd = hash_ints(2166136261u, sample_ndim, sample_shape);
    for (const sp_dataset *ds = train; ds; ds = ds == train ? test : NULL)
        hd = hash_ints(hash_text(hd, ds->name), 2, (int[]){ds->n, ds->nclasses});
    h[E_FLAGS + nf + 1] = hd;
    int e_files = E_FLAGS + nf + 2;
    for (int i = 0; i < NFILES; i++) h[e_files + i] = files[i][1] ? hash_file(files[i][1]) : 0;
    int e_read = e_files + NFILES;
    for (int i = 0; i < nread; i++) {   /* the path too: another list of files is another slot's */
        int e = e_read + (i < NREAD - 1 ? i : NREAD - 1);
        h[e] = (h[e] ^ hash_file(read[i]) ^ hash_text(2166136261u, read[i])) * 0x100000001b3ull | 1;
    }
    int used = e_read + NREAD;
    /* 16 bits per float: exact in any float and in any MPI implementation */
    float *mine = sp_xcalloc(4 * E, sizeof *mine), *all = sp_xcalloc((size_t)W * 4 * E, sizeof *all);
    for (int e = 0; e < E; e++)
        for (int q = 0; q < 4; q++) mine[4 * e + q] = (float)((h[e] >> (16 * q)) & 0xffff);
    sp_allgather(w, mine, all, 4 * E);
    for (int e = 0; e < used; e++) {
        char ranks[256];
        int nd = ranks_differing(all, W, E, e, ranks, sizeof ranks);
        if (!nd) continue;
        if (e >= e_read) {
            int i = e - e_read;
            sp_comm_fail_all(w, "--parallel %s: the ranks read different files as %s%s: rank%s %s read%s other contents "
                                "than rank 0 (every rank must read the same bytes: one file on a shared disk, or "
                                "identical copies)",
                             o->parallel, i < nread ? read[i] : "the input files", i == NREAD - 1 && nread > NREAD ?
                             " or the files read after it" : "", nd > 1 ? "s" : "", ranks, nd > 1 ? "" : "s");
        }
        if (e >= e_files) {
            const char *const *fl = files[e - e_files];
            bool unread = false;   /* rank 0 or another cannot read it (hash 0) */
            for (int r = 0; r < W; r++) {
                bool zero = true;
                for (int q = 0; q < 4; q++) zero &= all[(size_t)r * 4 * E + 4 * e + q] == 0;
                unread |= zero;
            }
            sp_comm_fail_all(w, "--parallel %s: the ranks read different files as --%s %s: rank%s %s read%s other "
                                "contents than rank 0%s (every rank must read the same bytes: one file on a shared "
                                "disk, or identical copies)",
                             o->parallel, fl[0], fl[1], nd > 1 ? "s" : "", ranks, nd > 1 ? "" : "s",
                             unread ? " (or one of them cannot read it)" : "");
        }
        char what[768], val[256];
        if (e == E_APP)
            snprintf(what, sizeof what, "the program (rank 0 runs %s, model %s)", app, m->name);
        else if (e == E_FLAGS + nf)
            snprintf(what, sizeof what, "the model's parameter shapes (%s)", m->name);
        else if (e == E_FLAGS + nf + 1)
            snprintf(what, sizeof what, "the dataset (rank 0: %s, %d samples)", train ? train->name : "synthetic",
                     train ? train->n : 0);
        else
            snprintf(what, sizeof what, "--%s (rank 0: %s)", d[e - E_FLAGS].name,
                     *sp_flag_value_text(d[e - E_FLAGS].name, val, sizeof val) ? val : "not given");
        sp_comm_fail_all(w, "--parallel %s: the ranks disagree on %s: rank%s %s differ%s from rank 0 (every rank must "
                            "run the same command; only --threads, --quiet and --comm-timeout may differ)",
                         o->parallel, what, nd > 1 ? "s" : "", ranks, nd > 1 ? "" : "s");
    }
    free(mine);
    free(all);
}

/* More threads on this node (its ranks × --threads) than online cores: the steps slow
 * down, a peer may look hung. A warning on rank 0, one line; not an error. */
static void warn_oversubscribed(const char *app, const sp_run_opts *o, sp_comm *w)
{
    if (sp_comm_rank(w) != 0) return;
    const char *env = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");   /* this node's ranks (Open MPI) */
    long ranks = env && atol(env) > 0 ? atol(env) : sp_comm_size(w), cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1 || ranks < 2 || ranks * o->threads <= cores) return;
    long fit = cores / ranks;
    char hint[64];
    if (fit >= 1 && fit < o->threads) snprintf(hint, sizeof hint, "--threads %ld or fewer ranks", fit);
    else snprintf(hint, sizeof hint, "fewer ranks");
    fprintf(stderr, "%s: warning: %ld ranks x %d thread%s on %ld online cores: the node is oversubscribed, the steps "
                    "will be slow (try %s)\n",
            app, ranks, o->threads, o->threads == 1 ? "" : "s", cores, hint);
}

/* The communication model of a run: --comm-profile, read by every rank before any work
 * (cm given NULL), or else, on >= 2 ranks, the short probe (collective, a few ms). Rank 0
 * prints its figures on stderr, one line (not with --quiet). NULL on one rank without a
 * profile. */
static struct sp_comm_model *comm_model(const char *app, const sp_run_opts *o, sp_comm *w, sp_comm_model *cm)
{
    if (!cm && sp_comm_size(w) < 2) return NULL;
    if (!cm) cm = sp_comm_model_quick(w);
    if (sp_comm_rank(w) == 0 && !o->quiet) {
        char line[1024];
        sp_comm_model_summary(cm, line, sizeof line);
        if (o->comm_profile) fprintf(stderr, "%s: communication model (%s): %s\n", app, cm->source, line);
        else fprintf(stderr, "%s: communication probe (%.0f ms): %s\n", app, cm->probe_ms, line);
    }
    return cm;
}

struct sp_exec *run_exec_new(const char *app, const sp_run_opts *o, sp_model *m, sp_optim *opt,
                             const sp_dataset *train, const sp_dataset *test, int sample_ndim,
                             const int *sample_shape, struct sp_comm_model **cm)
{
    if (!o->parallel) return NULL;
    if (!sp_comm_have_mpi() && getenv("OMPI_COMM_WORLD_SIZE"))
        sp_fail("--parallel %s: this build has no MPI (rebuild with make MPI=1)", o->parallel);
    sp_comm_set_timeout(o->comm_timeout);
    sp_comm_init(NULL, NULL);
    ranks_agree(app, o, m, train, test, sample_ndim, sample_shape);
    warn_oversubscribed(app, o, sp_comm_world());
    sp_comm_model *profile = NULL;   /* a bad --comm-profile is refused before any work */
    if (o->comm_profile && sp_comm_model_load(o->comm_profile, &profile) != SP_OK)
        sp_comm_fail_all(sp_comm_world(), "%s", sp_last_error());
    sp_exec_cfg c = {.scheme = o->parallel,
                     .micro = o->microbatches,
                     .sync_bn = o->sync_bn,
                     .groups = o->groups,
                     .partition = o->partition,
                     .bucket_mb = o->bucket_mb,
                     .costs_in = o->costs,
                     .costs_out = o->costs_out,
                     .order_out = o->exec_order,
                     .trace_path = o->trace,
                     .ooo = (sp_engine_caps(o->backward) & SP_ENGINE_REORDERS_DW) != 0,
                     .k = sp_run_engine_int(o, "k", 0),
                     .clip_grad_norm = o->clip_grad_norm,
                     .post_validate = strcmp(o->step_sync, "plain") != 0,
                     .chunks = o->chunks,
                     .actions = o->actions,
                     .mem_limit = o->mem_limit,
                     .mem_limit_bytes = o->mem_limit_bytes};
    struct sp_exec *x = sp_exec_new(sp_comm_world(), m, opt, &c, sample_ndim, sample_shape, o->batch);
    /* Not started by mpirun: one process is the only rank. It runs (a schedule's numbers
     * and files on one worker are worth having), but says so. */
    if (sp_exec_workers(x) == 1 && !getenv("OMPI_COMM_WORLD_SIZE"))
        fprintf(stderr, "%s: note: --parallel %s runs 1 worker (not started by mpirun; for W workers: mpirun -np W "
                        "%s ...)\n", app, o->parallel, app);
    if (o->plan) {   /* --parallel scan --plan: the cross-rank levels; nothing trains */
        if (sp_exec_rank(x) == 0) {
            int levels = sp_exec_print_plan(x, stdout);
            sp_json j;
            sp_json_begin(&j);
            sp_json_str(&j, "mode", "plan");
            sp_json_str(&j, "parallel", o->parallel);
            sp_json_int(&j, "workers", sp_exec_workers(x));
            sp_json_int(&j, "levels", levels);
            sp_check(sp_json_end_print(&j));
        }
        sp_comm_model_free(profile);
        run_exec_end(x);
        exit(0);
    }
    *cm = comm_model(app, o, sp_comm_world(), profile);
    return x;
}

