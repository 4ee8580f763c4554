/* exec_internal.h — what the executor's files share; private to schedulers/exec/exec*.c
 * (the public API is exec.h).
 *
 *   exec.c         sp_exec_new/free and the runtime: a step walks sim.order[rank]
 *   exec_setup.c   what every rank plans alike before step 1: refusals, stage costs, schedule
 *   exec_stage.c   one stage's jobs (F, B / δ / G of a micro-batch) and their messages
 *   exec_sync.c    who holds which weights; gradient buckets, their collectives, the updates
 *   exec_bppsa.c    BPPSA across ranks (--parallel scan), over layers or over time steps
 *   exec_report.c  trace events, statistics, and the --exec-order / --trace / --costs-out files
 *   exec_clip.c    --clip-grad-norm: the global norm, plain or post-validated updates
 *   exec_memory.c  the activation bytes each rank holds (its peak: the JSON's peak_activation_bytes)
 *   exec_buffers.c the model's buffers (batch norm's running statistics) and --sync-bn
 */
#ifndef SP_EXEC_INTERNAL_H
#define SP_EXEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "core/tape.h"
#include "schedulers/plan/actions.h"
#include "schedulers/exec/exec.h"
#include "schedulers/memory/memory.h"
#include "schedulers/sim/sim_comm.h"

enum { SYNC_NONE, SYNC_ALLREDUCE, SYNC_OWNER };

/* A stage is one segment of the model (schedule.h, sp_tape_segments): a run of layers
 * that only the previous segment's output enters and only its last layer's output
 * leaves. A chain's segments are its layers, one each; in a DAG (ResNet-20) a residual
 * block's body with its add is one segment, its layers a DAG of their own. */
typedef struct stage_info {
    sp_layer *layer;         /* its first layer (a chain's stage: its only one)       */
    int layer0, nlayers;     /* the model's layers [layer0, layer0 + nlayers)          */
    sp_param **params;       /* [nparams]: its layers' parameters, in layer order     */
    int nparams;
    char name[SP_STAGE_NAME];   /* the segment's name, as build/schedule --model's      */
    int sync;                /* SYNC_*                                               */
    int comm;                /* index into x->comms, −1 when this rank is no member  */
    int owner;               /* SYNC_OWNER: world rank of the master copy            */
    int owner_in_comm;
    bool owns;               /* this rank steps the optimizer for the stage          */
    int bucket;              /* −1: no parameters or no sync                         */
    int grad_jobs;           /* local jobs per step that write its gradients (B or G) */
    int out_ndim, out_shape[SP_MAX_DIMS];   /* one sample's output                   */
    sp_req *wreq;            /* [nparams]: their broadcasts (SYNC_OWNER)               */
    size_t nfloats;          /* parameters                                           */
} stage_info;

typedef struct bucket {
    int *stages, nstages;
    int comm, sync, root;
    float *buf;
    size_t n;
    int pending;             /* gradient jobs still to run this step                 */
    bool started;
    sp_req req;
    double t_start, t_done;
    bool outstanding;        /* ddp: its sum is not yet applied (the next step's
                                forward of its first stage waits for it)         */
    long step;               /* the step whose gradients it carries              */
} bucket;

/* The cross-rank scan's compute phases on a rank, timed by exec_bppsa.c and
 * exec_bppsa_blelloch.c: the forward (time scan), the layers above the recurrent one, the work
 * before the levels (rank W−1's segment backward or sweep, or forming the element; _A2
 * after rank 1's hand-off when rank 1 is the last rank), the work after the levels
 * (_SEG; _SEG2 after the hand-off), the time scan's weight gradients, and per level k a
 * product before its send (_LV + 2k) and after its receive (_LV + 2k + 1). */
enum { SCAN_PH_FWD, SCAN_PH_TOP, SCAN_PH_A, SCAN_PH_A2, SCAN_PH_SEG, SCAN_PH_SEG2, SCAN_PH_WGRAD, SCAN_PH_LV,
       SCAN_MAX_LEVELS = 64, SCAN_PHASES = SCAN_PH_LV + 2 * SCAN_MAX_LEVELS };

typedef struct trace_ev {
    int what;                /* job id, −1 − bucket (a collective in flight), or
                                WAIT_EV − bucket (this rank blocked on it)            */
    int step;
    double t0, t1;
} trace_ev;

#define TRACE_STEPS 10   /* the first steps of a run, in the trace */
#define WAIT_EV (-1000000)
#define WAIT_LOSS (-3000000)

struct sp_exec {
    sp_comm *world;
    int rank, W, S, B, batch;
    sp_model *m;
    sp_optim *opt;
    sp_exec_cfg cfg;
    sp_costs *costs;
    sp_schedule *sched;
    sp_sim sim;
    sp_actions *actions;     /* action-list schemes: the list the ranks follow            */
    stage_info *st;
    sp_comm **comms;
    int ncomms;
    int *comm_min;           /* the lowest world rank of each communicator's set         */
    bucket *buckets;
    int nbuckets;
    int *next_bucket;        /* per comm: the next bucket to start (same order everywhere) */
    /* per step */
    sp_tape *tapes;          /* one per micro-batch                                  */
    bool dag;                /* the model is not a chain: stages of several layers     */
    bool *blk_make;          /* [layer]: writes its output in oneDNN's blocked layout
                                (sp_tape.out_blocked; NULL: none), sp_exec_setup_blocked */
    sp_node **node;          /* [s·B + b]: the output node of F(s, b)                 */
    int *first;              /* [s·B + b] (dag): the tape index of F(s, b)'s first node;
                                its nodes are first … node->index, contiguous          */
    bool *walked;            /* [s·B + b] (dag): the δ of the stage's nodes are made
                                (by the first of its δ and G jobs to run)              */
    sp_node **loss;          /* [b]                                                  */
    sp_tensor *dy;           /* [s·B + b]: ∂l/∂y_s                                   */
    bool *have_dy;
    sp_tensor *xin;          /* [b]: the micro-batch's input rows                    */
    const int **yin;
    int *rows;               /* [b]: rows of micro-batch b                           */
    sp_req *sends;
    int nsends, cap_sends;
    bool *done;              /* [job]                                                */
    /* accounting */
    long steps;
    double busy, comm_s, wall, fwd_s, bwd_s;
    int wgrad_steps;   /* time scan: the steps whose weight gradients this rank computed, last step */
    double wall_late, comm_late;   /* wall and comm seconds of the steps after the first */
    double *step_wall;       /* [steps]: each step's wall seconds (the median step)   */
    double job_overhead;     /* seconds of the jobs after the first step that were neither
                                compute nor waiting (exec_predict.c)                 */
    long njobs_late;
    long cap_step_wall;
    double delay_s;          /* the job hook's delay: added to the next job's compute */
    int *order_rec;          /* the first step's executed job ids                    */
    int norder;
    trace_ev *ev;
    int nev, cap_ev;
    double trace_t0;
    double clock_offset;     /* --trace: rank 0's clock − this rank's, seconds (measured at
                                the start, sp_exec_sync_clock)                         */
    double *meas;            /* [6·S]: Σ F, δ, G compute seconds and their counts      */
    size_t in_numel;         /* one input sample                                       */
    /* --parallel scan over a recurrent first layer: its time steps split over the ranks */
    bool tscan;
    int T, H;                /* the recurrent layer's steps and hidden size            */
    /* ddp: a bucket's update is applied when the next step's forward first needs one of
     * its stages (cross-step overlap), with the learning rate of the step it belongs to */
    bool deferred;
    double pending_lr;
    /* The batch's loss: its allreduce starts as soon as the rank's last loss is computed
     * (it then overlaps the backward) and is waited for at the end of the step. */
    int loss_jobs, loss_left;    /* local F jobs of the last stage per step, still to run */
    float loss_buf;
    sp_req loss_req;
    bool loss_started;
    double loss_t0;
    /* activation memory (exec_memory.c): bytes F(s, b) holds until its last backward job */
    double *act_held;        /* [s·B + b]                                              */
    int *bwd_left;           /* [s·B + b]: backward jobs of (s, b) still to run        */
    sp_mem_peak act;         /* held now; the largest since sp_exec_new            */
    /* --clip-grad-norm (exec_clip.c) */
    bool *counted;           /* [S]: this rank adds stage s to the global norm        */
    sp_optim_undo undo;      /* post-validation: the eager update's undo               */
    long clips, rollbacks;
    double last_norm, clip_wait_s;
    /* the prediction (exec_predict.c): the simulated step of sp_exec_predict_step_ms, and
     * with $SCANPROP_EXEC_MSGS the first step's messages this rank issued, in order */
    struct sp_sim_comm *pred;
    struct exec_msg { int peer, kind, stage; double bytes; } *msgs;
    int nmsgs, cap_msgs;
    bool log_msgs;
    /* the optimizer step as measured (sp_exec_step_stage): per stage Σ seconds and the
     * steps counted (the first step's update left out, as from the job costs) */
    double *opt_meas;        /* [2·S]                                                   */
    long *opt_step;          /* [S]: the step last counted                              */
    /* the cross-rank scan's compute phases on this rank (SCAN_PH_*), Σ seconds over the
     * steps after the first: the durations of sp_exec_scan_program's ops */
    double scan_ph[SCAN_PHASES];
    double scan_ph0[SCAN_PHASES];   /* the first step's (the prediction of a one-step run)   */
    long scan_steps;
    struct exec_buffers *bufs;   /* the model's buffers and --sync-bn (exec_buffers.c) */
};

/* ---- small helpers ---------------------------------------------------------------------- */

static inline bool local(const sp_exec *x, int job) { return x->sched->compute[job] == x->rank; }
static inline int job_of(const sp_exec *x, int s, int b, sp_dir d) { return sp_schedule_find(x->sched, s, b, d); }
/* Message tags: kind 0 activations, 1 ∂l/∂y, 2 a scan level, 3 the scan's hand-off. */
static inline int tag_of(const sp_exec *x, int kind, int s, int b) { return (kind * x->S + s) * x->B + b; }

static inline bool is_scan(const char *name) { return !strcmp(name, "scan"); }
static inline bool is_pipeline(const char *name)
{
    return !strcmp(name, "gpipe") || !strcmp(name, "1f1b") || !strcmp(name, "ooo-ff") || !strcmp(name, "ooo-modulo") ||
           !strcmp(name, "dualpipe") || is_scan(name);
}
/* A pipeline given as per-rank action lists: a generator (1f1b-strict, zb-h1, …) or custom. */
static inline bool is_actions(const char *name) { return sp_scheme_is_actions(name); }
static inline bool is_looped(const char *name) { return !strcmp(name, "lpp") || !strcmp(name, "fslpp"); }
static inline bool is_ddp(const char *name) { return !strcmp(name, "ddp") || !strcmp(name, "ddp-ooo"); }
static inline bool is_data(const char *name) { return is_ddp(name) || !strcmp(name, "fsdp"); }

/* ---- setup (exec_setup.c) ---------------------------------------------------------------- */

/* x->blk_make: on the CPU, the layers that write blocked activations, as the single
 * process's linear and ooo engines do (sp_model_blocked_plan), with every stage output
 * that another rank reads kept NCHW; $SCANPROP_EXEC_BLOCKED=0 turns it off. */
void sp_exec_setup_blocked(sp_exec *x);

/* x->S and x->st[s].layer0/nlayers/layer/params/name: the model's segments, from a
 * shape-only pass (sp_tape_segments, as build/schedule --model cuts it); x->dag. */
void sp_exec_setup_stages(sp_exec *x, int ndim, const int *shape);
/* Where the model cannot be cut (its segments of several layers), for a refusal. */
void sp_exec_uncut(const sp_exec *x, char *buf, size_t len);

void sp_exec_check_config(sp_exec *x);                             /* refusals, before any work */
void sp_exec_setup_costs(sp_exec *x, int ndim, const int *shape);    /* measured or --costs    */
void sp_exec_build_schedule(sp_exec *x);                            /* x->sched and x->sim    */

/* ---- one stage's jobs (exec_stage.c) ---------------------------------------------------- */

void sp_exec_label_job(const sp_exec *x, int job, long step);   /* for a hang's report */
void sp_exec_run_forward(sp_exec *x, int job, sp_job j);
void sp_exec_run_backward(sp_exec *x, int job, sp_job j);
/* Stage s's forward on tape t from its input node in: its layers applied in order, each
 * reading the stage's input or an earlier layer of the stage. Returns its output node. */
sp_node *sp_exec_stage_forward(const sp_exec *x, int s, sp_tape *t, sp_node *in);
/* A stage of several layers on tape t (nodes first … last): the δ of each of its nodes
 * from dy, the δ of its input into dx (NULL: none wanted), and with params every
 * layer's gradients too (a whole B); *t_grad the seconds the gradients took. With fuse
 * (and params), a one-input layer whose op has backward_input_params makes its δ and G
 * in that one call, as the linear engine does (bitwise the two calls); its G share of
 * *t_grad is then the call's time weighted by the op's G FLOPs over its δ + G FLOPs. */
void sp_exec_stage_walk(sp_tape *t, int first, int last, const sp_tensor *dy, sp_tensor *dx, bool params,
                        bool fuse, double *t_grad);
/* Its nodes' gradients from the δ a walk left (a deferred G). */
void sp_exec_stage_grads(sp_tape *t, int first, int last);
/* The bytes F(s, b) holds for its backward (sp_tape_segment_act_bytes of its nodes). */
double sp_exec_stage_act_bytes(const sp_exec *x, int s, int b);
/* Stage s's output of micro-batch b, shaped, on b's tape. */
sp_tensor sp_exec_stage_tensor(sp_exec *x, int s, int b);
/* ∂l/∂y_s of micro-batch b, from the local tape, the loss, or the rank that made it. */
sp_tensor *sp_exec_ensure_dy(sp_exec *x, int s, int b);

/* ---- weights and gradients (exec_sync.c) ------------------------------------------------ */

void sp_exec_setup_weights(sp_exec *x);   /* st[s].sync/comm/owns, x->comms */
void sp_exec_setup_buckets(sp_exec *x);   /* x->buckets, st[s].bucket       */
/* Start of a step: buckets reset, gradients zeroed, owned weights broadcast. */
void sp_exec_sync_begin_step(sp_exec *x);
/* A job that wrote stage s's gradients is done: start its bucket when complete. */
void sp_exec_grad_done(sp_exec *x, int s);
/* The optimizer step of stage s (this rank steps it), timed: the update of step `step`
 * (the first step's is left out of the measured mean). */
void sp_exec_step_stage(sp_exec *x, int s, long step);
/* Wait for bucket i and unpack its sum; with update, also step its stages (ddp). */
void sp_exec_finish_bucket(sp_exec *x, int i, bool update);
void sp_exec_poll_buckets(sp_exec *x);
/* End of a step's jobs: every bucket finished (or left in flight: ddp). */
void sp_exec_close_buckets(sp_exec *x);
/* The owners' optimizer steps (unless deferred to the next step's forward). */
void sp_exec_update_owners(sp_exec *x);
void sp_exec_flush_updates(sp_exec *x);   /* every update still outstanding */

/* ---- activation memory (exec_memory.c) ------------------------------------------------- */

void sp_exec_mem_begin_step(sp_exec *x);
void sp_exec_mem_forward(sp_exec *x, int s, int b, const sp_node *n);   /* F(s, b) ran: n */
void sp_exec_mem_backward(sp_exec *x, int s, int b);                    /* a backward job ran */
void sp_exec_mem_free(sp_exec *x);
/* The whole memory per rank, measured (collective: an allgather) and predicted, into
 * st->peak_mem_bytes and st->pred_peak_mem_bytes (allocated here). */
void sp_exec_mem_gather(sp_exec *x, sp_exec_stats *st);

/* ---- buffers and synchronized batch norm (exec_buffers.c) ------------------------------ */

/* Why the model's buffers or --sync-bn cannot run under this scheme (into buf), or NULL. */
const char *sp_exec_buffers_refusal(const sp_exec *x, char *buf, size_t len);
void sp_exec_buffers_keep(sp_exec *x);         /* before the costs are measured: a copy   */
void sp_exec_buffers_setup(sp_exec *x);        /* after the schedule: the copy back, owners,
                                                * order, --sync-bn                         */
void sp_exec_buffers_begin_step(sp_exec *x);   /* replicated layers: the owner's buffers   */
void sp_exec_buffers_sync(sp_exec *x);         /* every buffer from its owner (collective) */
/* Its messages for the simulator (sim_comm.h; NULL: none); the seconds spent so far in
 * --sync-bn's allgathers (left out of the jobs' measured compute: they are messages). */
const sp_sim_buffers *sp_exec_buffers_sim(const sp_exec *x);
double sp_exec_buffers_reduce_s(const sp_exec *x);
void sp_exec_buffers_free(sp_exec *x);

/* ---- the step's end under a gradient-norm clip (exec_clip.c) ---------------------------- */

void sp_exec_clip_update(sp_exec *x);   /* instead of sp_exec_update_owners */
void sp_exec_clip_free(sp_exec *x);

/* ---- BPPSA across ranks (exec_bppsa.c) --------------------------------------------------- */

void sp_exec_check_scan(sp_exec *x);
void sp_exec_scan_backward(sp_exec *x);        /* over layers, after GPipe's forward */
void sp_exec_time_scan_forward(sp_exec *x);    /* over time: the whole forward here  */
void sp_exec_time_scan_backward(sp_exec *x);
/* exec_bppsa_blelloch.c: the time scan's levels in Blelloch's pattern, the steps of
 * schedulers/scan/'s plan. sp_exec_scan_blelloch: whether they run ($SCANPROP_SCAN_ALGO,
 * or auto); _levels: as exec_bppsa.c's levels (elem taken over, v on the last rank),
 * T_{r+1} ([n, H], to free) on the ranks 1 … W−2; _plan: its lines. */
bool sp_exec_scan_blelloch(const sp_exec *x);
float *sp_exec_blelloch_levels(sp_exec *x, float *elem, const float *v, int n);
void sp_exec_blelloch_plan(const sp_exec *x, FILE *f);
/* The scan's step as a program per rank (sim_comm.h sp_prog), for the prediction: every
 * message the executor sends, in its order, with compute ops from ph ([W·SCAN_PHASES]
 * µs per rank and phase, this run's means), f ([S] µs of each stage's forward) and
 * opt ([S] µs of each stage's optimizer step). */
void sp_exec_scan_program(const sp_exec *x, const double *ph, const double *f, const double *opt, sp_prog *p);
/* exec_bppsa_blelloch.c's levels for that program (rank r's ops, as sp_exec_blelloch_levels
 * runs them). */
void sp_exec_blelloch_program(const sp_exec *x, int r, const double *ph, sp_prog *p);
/* Time since t0 into this rank's scan phase ph (the first step's kept apart, scan_ph0). */
void sp_exec_scan_phase(sp_exec *x, int ph, double t0);

/* ---- the prediction (exec_predict.c) ------------------------------------------------------ */

/* The stage costs this run measured (mean µs of F, δ, G over every rank and every step
 * but the first; the planning costs where a part never ran) and the optimizer step
 * (opt, has_opt: measured on some rank; else the planning profile's, if it has them).
 * Collective. */
sp_costs *sp_exec_measured_costs(sp_exec *x);

/* A message this rank issues (kind: sim_comm.h's sp_msg_kind; peer as sim_comm.h's
 * sp_sim_msg): logged during the first step when $SCANPROP_EXEC_MSGS is set. */
void sp_exec_log_msg(sp_exec *x, int peer, int kind, int stage, double bytes);
/* $SCANPROP_EXEC_MSGS=PREFIX: PREFIX.r<rank>.csv (this rank's log) and, on rank 0,
 * PREFIX.sim.csv (the prediction's messages), "rank,peer,kind,stage,bytes" lines. */
void sp_exec_write_msgs(sp_exec *x);
/* The trace's simulated rows: one process "rank r (simulated)" per rank (pid W + r). */
void sp_exec_trace_predicted(const sp_exec *x, FILE *f);
void sp_exec_pred_free(sp_exec *x);
double sp_exec_job_us(sp_exec *x);   /* the executor's own µs per job, collective */

/* ---- reports (exec_report.c) ------------------------------------------------------------ */

void sp_exec_trace_add_step(sp_exec *x, int what, long step, double t0, double t1);
void sp_exec_trace_add(sp_exec *x, int what, double t0, double t1);   /* this step */
/* Collective: this rank's clock offset to rank 0 by ping-pongs (NTP's estimate). */
void sp_exec_sync_clock(sp_exec *x);

#endif
