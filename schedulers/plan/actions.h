/* actions.h — pipeline schedules as explicit per-rank action lists.
 *
 * The form of PyTorch's torch.distributed.pipelining: each rank runs a list of actions in
 * order, an action being <chunk><type><micro-batch> — "0F0", "3I2", "1W5", "2B1". A chunk
 * (PyTorch's "stage") is a contiguous range of the model's layers; a rank may hold several
 * non-adjacent chunks (interleaved and V-shaped placements). Types:
 *
 *   F  the forward of chunk c on micro-batch b          needs F(c−1, b)
 *   I  the input gradient δ of chunk c ("B" in [ZB])     needs F(c, b) and I/B(c+1, b)
 *   W  the weight gradient G of chunk c                  needs I(c, b)
 *   B  I and W together (the unsplit backward)           needs F(c, b) and I/B(c+1, b)
 *
 * Every (c, b) has exactly one F and either one B or one I and one W. A chunk's activations
 * of micro-batch b are held from its F until its W (or B) has run: that is the memory the
 * zero-bubble schedules trade against bubbles.
 *
 * The CSV form: one line per rank (line r + 1 = rank r), one action per cell, an empty
 * cell is idle and ignored, e.g.
 *     0F0,0F1,0I0,0W0,0F2,...
 *     1F0,1I0,1F1,...
 * Blank lines at the end are nothing; a blank line before a rank's line is refused (it
 * would be a rank that runs nothing). PyTorch's forms read too (_dump_csv's): its
 * communication and bookkeeping actions — cSEND_Fm, cRECV_Fm, cSEND_Bm, cRECV_Bm,
 * cUNSHARD, cRESHARD, cREDUCE_GRAD — are checked against the list's messages (a chunk of
 * their own rank; a send or receive with a neighbouring chunk on another rank, of a
 * micro-batch the list has) and not run (counted in `ignored`: the simulator and executor
 * derive the messages from the placement), and a compound (a;b;...)OVERLAP_F_B runs its computations in order. A NUL
 * byte anywhere is refused.
 *
 * Schemes whose schedule is a fixed list (strict 1F1B, ZB-H1/H2, ZB-V, V-Half, V-Min,
 * interleaved 1F1B, looped BFS, DualPipeV, zb-auto, custom) are generators: they build an
 * sp_actions from sp_pp_params. sp_schedule_from_actions (schedule.h) turns a list into
 * the master schedule's layer-level jobs with a fixed order per worker, which the
 * simulator and the MPI executor both follow. */
#ifndef SP_ACTIONS_H
#define SP_ACTIONS_H

#include <stdbool.h>
#include <stdio.h>
#include "core/error.h"

typedef enum sp_act_type { SP_ACT_F = 0, SP_ACT_I = 1, SP_ACT_W = 2, SP_ACT_B = 3 } sp_act_type;

typedef struct sp_action {
    int chunk, micro;
    sp_act_type type;
} sp_action;

typedef struct sp_actions {
    int ranks, chunks, micro;
    int *chunk_rank;        /* [chunks]: the rank that holds chunk c                    */
    int *off;               /* [ranks + 1]: rank r runs act[off[r] .. off[r+1]) in order */
    sp_action *act;
    int cap;                /* room in act[] (sp_actions_push grows it)                 */
    int *cell;              /* read from a CSV: [off[ranks]] the cell of act[k] in its rank's
                             * line (line r + 1 is rank r), for messages; NULL otherwise   */
    int ignored;            /* read from a CSV: PyTorch's communication and bookkeeping
                             * actions (SEND_F, RECV_B, REDUCE_GRAD, ...) not run          */
} sp_actions;

/* Per-chunk durations of one micro-batch, the transfer time of one activation or gradient
 * between two ranks (0 on the same rank), and the activation size each (c, b) holds
 * (NULL: one unit per chunk). */
typedef struct sp_chunk_costs {
    int chunks;
    const double *f, *i, *w;     /* B costs i + w */
    const double *act;
    double transfer;
} sp_chunk_costs;

/* What running a list gives. */
typedef struct sp_actions_sim {
    double latency;
    double *start, *finish;      /* per action, indexed like act[]                       */
    double *busy;                /* [ranks]                                               */
    double *peak_act;            /* [ranks]: peak of Σ act over the (c, b) held at once   */
    double bubble;               /* 1 − Σ busy / (ranks · latency)                        */
    int *messages;               /* [ranks]: activations and gradients this rank sends   */
} sp_actions_sim;

/* "3I2" into buf (≥ 32 bytes); returns buf. */
const char *sp_action_str(sp_action a, char *buf);

/* Allocate an empty list for `ranks` ranks with room for `cap` actions in all; the
 * generators append with sp_actions_push (rank by rank, in rank order). */
sp_actions *sp_actions_new(int ranks, int chunks, int micro, int cap);
void sp_actions_push(sp_actions *a, int rank, sp_action act);
void sp_actions_free(sp_actions *a);

/* Structural checks: every (c, b) has exactly its actions, nothing repeated, no chunk on
 * two ranks, chunk_rank consistent. SP_ERR with one line naming the rank and the action. */
int sp_actions_check(const sp_actions *a) SP_MUST_CHECK;

/* Run the lists in order on `ranks` ranks: an action starts when its rank is free and its
 * predecessors are done (+ transfer when a predecessor ran on another rank). A list that
 * cannot run to the end (a cycle between ranks, an action waiting for one that no rank
 * will run first) gives SP_ERR naming the rank, the action and what it waits for. costs
 * NULL: unit costs F = I = W = 1, transfer 0. out may be NULL (a check only). */
int sp_actions_simulate(const sp_actions *a, const sp_chunk_costs *costs, sp_actions_sim *out) SP_MUST_CHECK;
void sp_actions_sim_free(sp_actions_sim *r);

/* The CSV form above. read: a regular file (sp_open_read); SP_ERR naming the file, the
 * row and the cell for anything malformed, then sp_actions_check and sp_actions_simulate
 * (so a list that cannot run is refused before any work). */
int sp_actions_read_csv(const char *path, sp_actions **out) SP_MUST_CHECK;
void sp_actions_write_csv(FILE *out, const sp_actions *a);
/* The form PyTorch's _PipelineScheduleRuntime._dump_csv writes by default, which its
 * _load_csv(path, format="compute_comms") reads back: each rank's computations in order,
 * a SEND_F/SEND_B after each one whose consumer chunk is on another rank and the
 * RECV_F/RECV_B in that rank's list (PyTorch's lowering: ranks take turns, one action
 * each), cREDUCE_GRAD after chunk c's last W or B; CRLF line ends. No UNSHARD/RESHARD
 * (FSDP's; the runtime needs none without it). A valid list (sp_actions_check). */
void sp_actions_write_torch(FILE *out, const sp_actions *a);

/* ------------------------------------------------------------------------------------ */
/* Generators                                                                           */

typedef struct sp_pp_params {
    int ranks;                   /* p                                                     */
    int micro;                   /* m                                                     */
    int chunks_per_rank;         /* v (interleaved-1f1b, looped-bfs); 0 = the default      */
    const sp_chunk_costs *costs; /* NULL: unit costs                                      */
    double mem_limit;            /* zb-auto: peak activations per rank (units of act); 0 = none */
} sp_pp_params;

typedef struct sp_pp_generator {
    const char *name, *summary;
    int default_chunks_per_rank;      /* 1, 2 (V shapes), or v from --chunks              */
    /* SP_ERR with one line when the parameters do not fit (e.g. m not a multiple of p). */
    int (*generate)(const sp_pp_params *p, sp_actions **out);
} sp_pp_generator;

/* --mem-limit's value (build/schedule and the apps): a plain number N ≥ 0 is N
 * micro-batches of a chunk's activations per rank (0 = none; *bytes false); a number with
 * a unit — B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. 512MiB,
 * 1.5GB, 300KB — is bytes per rank (> 0; *bytes true), for generators given each chunk's
 * activation bytes (sp_chunk_costs.act). SP_ERR with one line naming `flag` and the text
 * for anything else. */
int sp_mem_limit_parse(const char *flag, const char *text, double *limit, bool *bytes) SP_MUST_CHECK;

/* The LIST rows of the scheme registry (schedule.h, schemes.c) as generators, in its
 * order; NULL when no generator has that name. */
const sp_pp_generator *sp_pp_find(const char *name);
int sp_pp_count(void);
const sp_pp_generator *sp_pp_at(int i);

#endif
