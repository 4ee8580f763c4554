/* exec_scan.c — BPPSA across ranks: the executor's --parallel scan, and its --plan.
 *
 * Over layers: rank r holds the layers [a_r, b_r] (GPipe's contiguous placement). Its
 * element of the scan is the product of its transposed Jacobians, per sample,
 *     P_r = Jᵀ_{a_r} · … · Jᵀ_{b_r}        (in_{a_r} × out_{b_r}),
 * and the last rank's is the vector v = P_{W−1}·∇y l. The ranks run an inclusive suffix
 * scan (Hillis–Steele: at level k, rank r receives T_{r+2^k} and forms T_r·T_{r+2^k}),
 * ⌈log₂ W⌉ levels of send/recv, after which T_r is ∂l/∂(input of segment r); one more
 * exchange hands T_{r+1} to rank r as ∂l/∂(output of its segment), and each rank
 * back-propagates its own segment linearly from there (its δ and G). Rank 0's element
 * is never needed (nobody reads T_0), so rank 0 does not form it.
 *
 * Over time (a recurrent first layer, SEQ_LAST: rnn, gru): every rank runs the whole
 * forward (the recurrence is sequential; a pipeline over time would take as long) and
 * the backward of the layers after the recurrent one, which gives ∇h_T. The time steps
 * 1..T are split into W contiguous segments [a_r, b_r]; the chain ∇h_{t−1} = Jᵀ_t·∇h_t
 * (the op's chain_jt, H × H) is scanned exactly as above with P_r = Jᵀ_{a_r} ⋯ Jᵀ_{b_r}
 * and v = ∇h_{a_{W−1}−1}; after the hand-off each rank recovers ∇h_t of its own steps
 * with T/W matrix–vector products. The ranks then allgather the segments of ∇h and each
 * computes the weight gradients from the whole [B, T, H] (the op's
 * chain_backward_params, Eq. 2 of [B]) — the same sums on every rank, so no gradient
 * collective is needed and every rank steps the optimizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/csr.h"
#include "core/error.h"
#include "core/kernels/dense.h"
#include "core/parallel.h"
#include "schedulers/parallel/exec_internal.h"

typedef struct seg {
    int a, b;            /* layers (−1: none)                              */
    int in, out;         /* per-sample sizes of the segment's input/output */
} seg;

/* Rank r's segment: its layers (GPipe's placement) or its time steps. */
static seg segment_of(const sp_exec *x, int r)
{
    seg g = {-1, -1, 0, 0};
    if (x->tscan) {
        g.a = (int)((long)r * x->T / x->W) + 1;
        g.b = (int)((long)(r + 1) * x->T / x->W);
        g.in = g.out = x->H;
        return g;
    }
    for (int s = 0; s < x->S; s++)
        if (x->sched->stage_worker[s] == r) {
            if (g.a < 0) g.a = s;
            g.b = s;
        }
    if (g.a < 0) return g;
    const stage_info *lo = g.a > 0 ? &x->st[g.a - 1] : NULL, *hi = &x->st[g.b];
    size_t in = 1, out = 1;
    if (lo)
        for (int i = 1; i < lo->out_ndim; i++) in *= (size_t)lo->out_shape[i];
    else
        in = x->in_numel;
    for (int i = 1; i < hi->out_ndim; i++) out *= (size_t)hi->out_shape[i];
    g.in = (int)in, g.out = (int)out;
    return g;
}

/* Every rank holds a segment, and no element is out of reach (dense per sample). */
void sp_exec_check_scan(sp_exec *x)
{
    for (int r = 0; r < x->W; r++) {
        seg g = segment_of(x, r);
        if (g.a < 0)
            sp_comm_fail_all(x->world, "--parallel scan: the cost partition left rank %d without layers (use fewer "
                                       "ranks)", r);
        double bytes = 4.0 * x->batch * g.in * g.out;
        if (r > 0 && r < x->W - 1 && bytes > 1024.0 * 1024 * 1024)
            sp_comm_fail_all(x->world, "--parallel scan: rank %d's element is %d x %d per sample (%.1f GB for a batch "
                                       "of %d); the scan suits chains with narrow segment boundaries (use fewer ranks)",
                             r, g.in, g.out, bytes / 1e9, x->batch);
    }
}

/* dst (rows × c) = Jᵀ (rows × m, CSR) · M (m × c), one sample. */
static void csr_times_dense(const sp_csr *jt, const float *M, int c, float *dst)
{
    for (int i = 0; i < jt->rows; i++) {
        float *d = dst + (size_t)i * c;
        memset(d, 0, sizeof(float) * (size_t)c);
        for (int32_t e = jt->indptr[i]; e < jt->indptr[i + 1]; e++) {
            float v = jt->data[e];
            const float *mrow = M + (size_t)jt->indices[e] * c;
            for (int k = 0; k < c; k++) d[k] += v * mrow[k];
        }
    }
}

/* P_r for every sample: [n, in, out]. */
static float *segment_product(sp_exec *x, seg g, int n)
{
    size_t maxdim = (size_t)g.out;
    for (int s = g.a; s <= g.b; s++) {
        size_t in = sp_tensor_sample_numel(sp_node_x(x->node[s * x->B]));
        maxdim = in > maxdim ? in : maxdim;
    }
    float *P = sp_xmalloc(sizeof(float) * (size_t)n * g.in * g.out);
    float *cur = sp_xmalloc(sizeof(float) * maxdim * g.out), *nxt = sp_xmalloc(sizeof(float) * maxdim * g.out);
    sp_csr *jt = sp_xcalloc((size_t)(g.b - g.a + 1), sizeof *jt);
    for (int s = g.a; s <= g.b; s++) {
        sp_node *nd = x->node[s * x->B];
        nd->op->jt_pattern(nd, 0, &jt[s - g.a]);
    }
    for (int smp = 0; smp < n; smp++) {
        /* cur = I (out × out), then cur = Jᵀ_s · cur from the last layer down */
        memset(cur, 0, sizeof(float) * (size_t)g.out * g.out);
        for (int i = 0; i < g.out; i++) cur[(size_t)i * g.out + i] = 1.0f;
        for (int s = g.b; s >= g.a; s--) {
            sp_node *nd = x->node[s * x->B];
            nd->op->jt_values(nd, 0, smp, &jt[s - g.a]);
            csr_times_dense(&jt[s - g.a], cur, g.out, nxt);
            float *t = cur;
            cur = nxt, nxt = t;
        }
        memcpy(P + (size_t)smp * g.in * g.out, cur, sizeof(float) * (size_t)g.in * g.out);
    }
    for (int s = g.a; s <= g.b; s++) sp_csr_free(&jt[s - g.a]);
    free(jt);
    free(cur);
    free(nxt);
    return P;
}

/* The time segment's P_r = Jᵀ_a ⋯ Jᵀ_b per sample: [n, H, H]. */
static float *time_product(sp_exec *x, seg g, int n)
{
    int H = x->H;
    size_t HH = (size_t)H * H;
    const sp_node *nd = x->node[0];
    float *P = sp_xmalloc(sizeof(float) * (size_t)n * HH), *jt = sp_xmalloc(sizeof(float) * HH);
    float *cur = sp_xcalloc(HH, sizeof(float)), *nxt = sp_xcalloc(HH, sizeof(float));
    for (int smp = 0; smp < n; smp++) {
        nd->op->chain_jt(nd, smp, g.b, cur);   /* Jᵀ_b, then Jᵀ_t · (…) down to t = a */
        for (int t = g.b - 1; t >= g.a; t--) {
            nd->op->chain_jt(nd, smp, t, jt);
            sp_gemm(false, false, H, H, H, 1.0f, jt, H, cur, H, 0.0f, nxt, H);
            float *tmp = cur;
            cur = nxt, nxt = tmp;
        }
        memcpy(P + (size_t)smp * HH, cur, sizeof(float) * HH);
    }
    free(jt);
    free(cur);
    free(nxt);
    return P;
}

/* ∇h_t for t = b … a of the time segment from ∇h_b (dhb, [n, H]) into mine ([n, len, H],
 * step a first); below ([n, H]) receives ∇h_{a−1} when given. */
static void time_sweep(sp_exec *x, seg g, int n, const float *dhb, float *mine, float *below)
{
    int H = x->H, len = g.b - g.a + 1;
    const sp_node *nd = x->node[0];
    float *jt = sp_xmalloc(sizeof(float) * (size_t)H * H), *v = sp_xmalloc(sizeof(float) * (size_t)H);
    float *tmp = sp_xmalloc(sizeof(float) * (size_t)H);
    for (int smp = 0; smp < n; smp++) {
        memcpy(v, dhb + (size_t)smp * H, sizeof(float) * (size_t)H);
        for (int t = g.b; t >= g.a; t--) {
            memcpy(mine + ((size_t)smp * len + (size_t)(t - g.a)) * H, v, sizeof(float) * (size_t)H);
            if (t == g.a && !below) break;
            nd->op->chain_jt(nd, smp, t, jt);   /* v ← Jᵀ_t · v */
            float *dst = t == g.a ? below + (size_t)smp * H : v;
            for (int i = 0; i < H; i++) {
                float acc = 0;
                for (int j = 0; j < H; j++) acc += jt[(size_t)i * H + j] * v[j];
                tmp[i] = acc;
            }
            memcpy(dst, tmp, sizeof(float) * (size_t)H);
        }
    }
    free(jt);
    free(v);
    free(tmp);
}

/* Back-propagate the rank's own segment from ∂l/∂(its output) in x->dy[b]. */
static void segment_backward(sp_exec *x, seg g)
{
    for (int s = g.b; s >= g.a; s--) {
        sp_node *nd = x->node[s * x->B];
        sp_tensor *dy = &x->dy[s * x->B];
        if (nd->op->backward_params && nd->layer->nparams > 0) nd->op->backward_params(nd, dy);
        if (s > 0) {
            x->dy[(s - 1) * x->B] = sp_tape_tensor_like(&x->tapes[0], &nd->input->out);
            nd->op->backward_input(nd, 0, dy, &x->dy[(s - 1) * x->B]);
        }
    }
}

/* Columns of T_r after the levels that cover ranks r .. r + span − 1. */
static int scan_cols(const sp_exec *x, int r, int span)
{
    int last = r + span - 1;
    return last >= x->W - 1 ? 1 : segment_of(x, last).out;
}

/* The ⌈log₂ W⌉ levels: T ([n, in_r, *cols]) becomes T_r = ∂l/∂(input of segment r). */
static float *scan_levels(sp_exec *x, float *T, int *cols, int n)
{
    int W = x->W, r = x->rank;
    seg me = segment_of(x, r);
    for (int span = 1; span < W; span *= 2) {
        sp_req sreq = {0}, rreq = {0};
        if (r > 0 && r - span > 0)   /* rank 0 never needs anyone's T; nor do we send to it here */
            sp_isend(x->world, T, (size_t)n * me.in * *cols, r - span, tag_of(x, 2, span, 0), &sreq);
        float *Tn = NULL;
        int ncols = 0;
        if (r > 0 && r + span < W) {
            seg o = segment_of(x, r + span);
            ncols = scan_cols(x, r + span, span);
            Tn = sp_xmalloc(sizeof(float) * (size_t)n * o.in * ncols);
            sp_irecv(x->world, Tn, (size_t)n * o.in * ncols, r + span, tag_of(x, 2, span, 0), &rreq);
        }
        sp_wait(&rreq);
        sp_wait(&sreq);
        if (Tn) {   /* T_r ← T_r · T_{r+span}, per sample: (in × cols)·(cols × ncols) */
            float *R = sp_xcalloc((size_t)n * me.in * ncols, sizeof(float));
            for (int smp = 0; smp < n; smp++) {
                const float *A = T + (size_t)smp * me.in * *cols, *Bm = Tn + (size_t)smp * *cols * ncols;
                float *C = R + (size_t)smp * me.in * ncols;
                for (int i = 0; i < me.in; i++)
                    for (int k = 0; k < *cols; k++) {
                        float a = A[(size_t)i * *cols + k];
                        for (int j = 0; j < ncols; j++) C[(size_t)i * ncols + j] += a * Bm[(size_t)k * ncols + j];
                    }
            }
            free(T);
            free(Tn);
            T = R;
            *cols = ncols;
        }
    }
    return T;
}

/* The scan over layers (see above), after GPipe's forward with one micro-batch. */
void sp_exec_scan_backward(sp_exec *x)
{
    double t0 = sp_now();
    int W = x->W, r = x->rank, n = x->rows[0];
    seg me = segment_of(x, r);
    float *T = NULL;
    int cols = 0;
    sp_comm_set_label("bppsa scan across ranks");
    if (r == W - 1) {   /* v = the segment's δ chain applied to ∇y l (and its G on the way) */
        x->dy[me.b * x->B] = *sp_exec_ensure_dy(x, me.b, 0);
        segment_backward(x, me);
        cols = 1;
        T = sp_xmalloc(sizeof(float) * (size_t)n * me.in);
        if (me.a > 0) memcpy(T, x->dy[(me.a - 1) * x->B].data, sizeof(float) * (size_t)n * me.in);
    } else if (r > 0) {
        T = segment_product(x, me, n);
        cols = me.out;
    }
    T = scan_levels(x, T, &cols, n);
    /* T_r is now ∂l/∂(input of segment r), [n, in]. Hand it to rank r − 1. */
    sp_req sreq = {0}, rreq = {0};
    if (r > 0) sp_isend(x->world, T, (size_t)n * me.in, r - 1, tag_of(x, 3, 0, 0), &sreq);
    if (r < W - 1) {
        sp_tensor y = sp_exec_stage_tensor(x, me.b, 0);
        sp_irecv(x->world, y.data, y.numel, r + 1, tag_of(x, 3, 0, 0), &rreq);
        sp_wait(&rreq);
        x->dy[me.b * x->B] = y;
        segment_backward(x, me);
    }
    sp_wait(&sreq);
    free(T);
    x->bwd_s += sp_now() - t0;
}

/* The time scan's backward (see above): ∇h_T from the layers after the recurrent one,
 * the scan over the ranks' time segments, the allgather of ∇h, the weight gradients. */
void sp_exec_time_scan_backward(sp_exec *x)
{
    double t0 = sp_now();
    int W = x->W, r = x->rank, n = x->rows[0], H = x->H, Tn = x->T;
    sp_comm_set_label("bppsa scan across ranks over time");
    for (int s = x->S - 1; s >= 1; s--) {   /* the layers above the recurrent one, on every rank */
        sp_node *nd = x->node[s * x->B];
        sp_tensor *dy = sp_exec_ensure_dy(x, s, 0);
        if (nd->op->backward_params && nd->layer->nparams > 0) nd->op->backward_params(nd, dy);
        x->dy[(s - 1) * x->B] = sp_tape_tensor_like(&x->tapes[0], &nd->input->out);
        nd->op->backward_input(nd, 0, dy, &x->dy[(s - 1) * x->B]);
        x->have_dy[(s - 1) * x->B] = true;
    }
    const float *dhT = sp_exec_ensure_dy(x, 0, 0)->data;   /* ∇h_T, [n, H] */
    seg me = segment_of(x, r);
    int len = me.b - me.a + 1, maxlen = (Tn + W - 1) / W;
    float *mine = sp_xcalloc((size_t)n * maxlen * H, sizeof(float));
    float *T = NULL;
    int cols = 0;
    if (r == W - 1) {
        T = sp_xmalloc(sizeof(float) * (size_t)n * H);
        time_sweep(x, me, n, dhT, mine, W > 1 ? T : NULL);
        cols = 1;
    } else if (r > 0) {
        T = time_product(x, me, n);
        cols = H;
    }
    T = scan_levels(x, T, &cols, n);
    sp_req sreq = {0}, rreq = {0};
    if (r > 0) sp_isend(x->world, T, (size_t)n * H, r - 1, tag_of(x, 3, 0, 0), &sreq);
    if (r < W - 1) {   /* ∇h_{b_r} from rank r + 1, then this segment's steps */
        float *dhb = sp_xmalloc(sizeof(float) * (size_t)n * H);
        sp_irecv(x->world, dhb, (size_t)n * H, r + 1, tag_of(x, 3, 0, 0), &rreq);
        sp_wait(&rreq);
        time_sweep(x, me, n, dhb, mine, NULL);
        free(dhb);
    }
    sp_wait(&sreq);
    free(T);
    /* Every rank's segment of ∇h ([n, len, H], padded to maxlen), then G from all of it. */
    if (len < maxlen) {   /* compact per sample [n, len, H] → [n, maxlen, H] (in place, backwards) */
        for (int smp = n - 1; smp >= 0; smp--) {
            memmove(mine + (size_t)smp * maxlen * H, mine + (size_t)smp * len * H, sizeof(float) * (size_t)len * H);
            memset(mine + ((size_t)smp * maxlen + (size_t)len) * H, 0, sizeof(float) * (size_t)(maxlen - len) * H);
        }
    }
    size_t per = (size_t)n * maxlen * H;
    float *all = sp_xmalloc(sizeof(float) * per * (size_t)W);
    sp_comm_set_label("allgather of the recovered hidden-state gradients");
    sp_allgather(x->world, mine, all, per);
    sp_tensor dh = sp_tape_tensor(&x->tapes[0], 3, (int[]){n, Tn, H});
    for (int q = 0; q < W; q++) {
        seg g = segment_of(x, q);
        int lq = g.b - g.a + 1;
        for (int smp = 0; smp < n; smp++)
            memcpy(dh.data + ((size_t)smp * Tn + (size_t)(g.a - 1)) * H, all + per * q + (size_t)smp * maxlen * H,
                   sizeof(float) * (size_t)lq * H);
    }
    sp_node *rec = x->node[0];
    rec->op->chain_backward_params(rec, &dh);
    free(all);
    free(mine);
    x->bwd_s += sp_now() - t0;
}

/* The time scan's forward: the whole model on the whole batch, on every rank. */
void sp_exec_time_scan_forward(sp_exec *x)
{
    double t0 = sp_now();
    sp_tape *t = &x->tapes[0];
    sp_node *h = sp_tape_input(t, &x->xin[0]);
    for (int s = 0; s < x->S; s++) h = x->node[s * x->B] = sp_apply(t, x->st[s].layer, h);
    x->loss[0] = sp_apply_loss(t, x->m->loss, h, x->yin[0]);
    x->fwd_s += sp_now() - t0;
}

/* ---- the cross-rank scan's plan (--parallel scan --plan) --------------------------------- */

int sp_exec_print_plan(const sp_exec *x, FILE *f)
{
    int W = x->W, n = x->batch, levels = 0;
    for (int span = 1; span < W; span *= 2) levels++;
    fprintf(f, "cross-rank scan plan: %d ranks, batch %d, over the %s; %d levels (ceil(log2 %d))\n", W, n,
            x->tscan ? "time steps of the recurrent first layer" : "layers", levels, W);
    for (int r = 0; r < W; r++) {
        seg g = segment_of(x, r);
        fprintf(f, "segment: rank %d %s %d-%d [%d -> %d per sample]", r, x->tscan ? "steps" : "layers", g.a, g.b, g.in,
                g.out);
        if (W > 1 && r == 0) fprintf(f, ": no element (nobody reads T_0)\n");
        else if (r == W - 1)
            fprintf(f, ": element v = P_%d * grad (%d floats per sample), by back-propagating the segment\n", r, g.in);
        else if (x->tscan)
            fprintf(f, ": element P_%d, %d x %d per sample, %.4g FLOPs (%d products of chain_jt)\n", r, g.in, g.out,
                    2.0 * n * g.in * g.in * g.out * (g.b - g.a), g.b - g.a);
        else
            fprintf(f, ": element P_%d, %d x %d per sample, %.4g floats (a product of %d Jt)\n", r, g.in, g.out,
                    (double)n * g.in * g.out, g.b - g.a + 1);
    }
    int level = 0;
    for (int span = 1; span < W; span *= 2) {
        fprintf(f, "level %d (span %d):", ++level, span);
        int pairs = 0;
        for (int r = 1; r + span < W; r++) {   /* rank r receives T_{r+span} (rank 0 takes no part) */
            seg me = segment_of(x, r), o = segment_of(x, r + span);
            int cols = scan_cols(x, r, span), ncols = scan_cols(x, r + span, span);
            fprintf(f, "%s rank %d -> rank %d (%d x %d per sample, %.4g floats; rank %d forms T_%d*T_%d, %.4g FLOPs)",
                    pairs++ ? ";" : "", r + span, r, o.in, ncols, (double)n * o.in * ncols, r, r, r + span,
                    2.0 * n * me.in * cols * ncols);
        }
        fprintf(f, "%s\n", pairs ? "" : " none (rank 0 needs no T_0)");
    }
    fprintf(f, "hand-off:");
    for (int r = 1; r < W; r++)
        fprintf(f, "%s rank %d -> rank %d (%d floats per sample)", r > 1 ? ";" : "", r, r - 1, segment_of(x, r).in);
    if (W == 1) fprintf(f, " none");
    fprintf(f, "\n");
    if (x->tscan) {
        int maxlen = (x->T + W - 1) / W;
        fprintf(f, "allgather: every rank's %d x %d steps of grad h per sample (%.4g floats), then every rank's weight "
                   "gradients from all %d steps\n", maxlen, x->H, (double)n * maxlen * x->H * W, x->T);
    }
    return levels;
}
