/* sim_report.h — a simulated schedule and a LayerPipe partition as the `schedule` app
 * prints them: the per-worker table and one JSON line each (the last stdout line). */
#ifndef SP_SIM_REPORT_H
#define SP_SIM_REPORT_H

#include <stdio.h>
#include "schedulers/sim/sim.h"

/* One row per worker (jobs, utilisation, transfers, weights held, peak activations),
 * then latency, utilisation and ρ against its bound M/S. */
void sp_sim_print_workers(FILE *out, const sp_sim *r);
/* The schedule and its simulation as one JSON line: shape, latency, utilisation, the
 * largest transfers and memory, and per-worker arrays. */
void sp_sim_print_json(FILE *out, const sp_schedule *s, const sp_costs *c, const sp_sim *r);
/* The same with the simulation with communication (sim_comm.h; NULL: as above) added:
 * latency_with_comm (the costs' unit, µs from a model or a profile), and per worker
 * comm_ms (its communication lane busy), opt_ms (optimizer steps) and messages; with the
 * constant transfer latency (sc->transfer > 0, --transfer-cost): transfer_cost,
 * latency_with_comm, comm_time (the lane busy) in the costs' unit, and messages. */
struct sp_sim_comm;
void sp_sim_print_json_comm(FILE *out, const sp_schedule *s, const sp_costs *c, const sp_sim *r,
                            const struct sp_sim_comm *sc);
/* The same with "batch_norm" (a model with buffers: "per-rank", "synchronized" or
 * "per-micro-batch", the apps' key; NULL: none) after "time_unit". */
void sp_sim_print_json_bn(FILE *out, const sp_schedule *s, const sp_costs *c, const sp_sim *r,
                          const struct sp_sim_comm *sc, const char *batch_norm);
/* LayerPipe's partition as one JSON line: the target, bottlenecks (its own and the
 * contiguous PipeDream one) and per-processor loads. */
void sp_layerpipe_print_json(FILE *out, const sp_layerpipe *lp);
/* The scheme names as one JSON line: {"schemes":["ddp",...]}. */
void sp_schemes_print_json(FILE *out);

#endif
