/* exec_bppsa.c — BPPSA across ranks: the executor's --parallel scan, and its --plan.
 *
 * Over layers: rank r holds the layers [a_r, b_r] (GPipe's contiguous placement). Its
 * element of the scan is the product of its transposed Jacobians, per sample,
 *     P_r = Jᵀ_{a_r} · … · Jᵀ_{b_r}        (in_{a_r} × out_{b_r}),
 * and the last rank's is the vector v = P_{W−1}·∇y l. The ranks run an inclusive suffix
 * scan in Hillis–Steele's pattern, ⌈log₂ W⌉ levels of send/recv: at the level of span k,
 * rank r receives from rank r + k what that rank holds of the ranks r+k … r+2k−1. After
 * the levels rank r holds T_{r+1} = P_{r+1} ⋯ P_{W−2}·v = ∂l/∂(output of its segment) and
 * back-propagates its own segment linearly from there (its δ and G); rank 1 hands its δ,
 * T_1, to rank 0, which takes no part in the levels (nobody reads T_0).
 *
 * Right to left. Every T the ranks need is a vector (the chain ends in ∇y l), so the
 * matrices are never multiplied into each other: the textbook combine T_r·T_{r+k} is a
 * matrix–matrix product of in_r × out_r × out_{r+k} per sample — at 4 ranks LeNet's
 * (4704 × 1176)·(1176 × 1600), 8.5e11 FLOPs for a batch of 48, which made one step take
 * minutes. A rank keeps the matrices it receives as factors and passes them on as they
 * are; when the vector arrives it multiplies it through them, one matrix–vector product
 * each, and from then on it sends the vector T_r = P_r·T_{r+1}. The levels and their
 * pairs are Hillis–Steele's; the messages carry up to k factors instead of one product.
 * Only the ranks 2 … W−2 form their element (rank 1's is read by nobody: it applies its
 * segment's backward to T_2 instead).
 *
 * Over time (a recurrent first layer, SEQ_LAST: rnn, gru): every rank runs the whole
 * forward (the recurrence is sequential; a pipeline over time would take as long) and
 * the backward of the layers after the recurrent one, which gives ∇h_T. The time steps
 * 1..T are split into W contiguous segments [a_r, b_r]; the chain ∇h_{t−1} = Jᵀ_t·∇h_t
 * (the op's chain_jt, H × H) is scanned exactly as above with P_r = Jᵀ_{a_r} ⋯ Jᵀ_{b_r}
 * and v = ∇h_{a_{W−1}−1}, or with Blelloch's up/down-sweep levels instead
 * (exec_bppsa_blelloch.c; sp_exec_scan_blelloch chooses); after the levels each rank
 * recovers ∇h_t of its own steps with T/W matrix–vector products from ∇h_{b_r} =
 * T_{r+1}. Each rank then computes the
 * weight gradients of its own steps only (the op's chain_backward_params_range, Eq. 2 of
 * [B]: given ∇h_t the steps are independent), and one allreduce sums the recurrent
 * layer's gradients over the ranks; every rank steps the optimizer on the same sums.
 * The layers after the recurrent one are back-propagated whole on every rank (they give
 * ∇h_T; their gradients are the same everywhere and are not summed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/csr.h"
#include "core/error.h"
#include "core/kernels/dense.h"
#include "core/threads.h"
#include "schedulers/exec/exec_internal.h"
#include "schedulers/scan/scan.h"

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

/* Rank r forms its element P_r when a rank below it (other than rank 0) reads it before
 * the vector reaches that rank: ranks 2 … W−2 (the last rank has v; rank 1's element is
 * read by nobody). The same ranks in Blelloch's levels: rank 1 is the plan's a[n], whose
 * products the plan never forms. */
static bool forms_element(const sp_exec *x, int r) { return r >= 2 && r <= x->W - 2; }

/* Whether the ranks r … r+span−1 include the last one: rank r's T is then a vector. */
static bool reaches_end(const sp_exec *x, int r, int span) { return r + span - 1 >= x->W - 1; }

/* Floats per sample of P_r. */
static double element_floats(const sp_exec *x, int r)
{
    seg g = segment_of(x, r);
    return (double)g.in * g.out;
}

/* Floats per sample rank q sends at the level of span k: the vector T_q once q … q+k−1
 * reaches the last rank, else its factors P_q … P_{q+k−1} as they are. */
static double sent_floats(const sp_exec *x, int q, int span)
{
    if (reaches_end(x, q, span)) return segment_of(x, q).in;
    double f = 0;
    for (int j = q; j < q + span; j++) f += element_floats(x, j);
    return f;
}

/* Every rank holds a segment, and no rank holds more than 1 GiB of matrices (its element
 * and the factors it receives; dense per sample). */
void sp_exec_check_scan(sp_exec *x)
{
    for (int r = 0; r < x->W; r++)
        if (segment_of(x, r).a < 0)
            sp_comm_fail_all(x->world, "--parallel scan: the cost partition left rank %d without layers (use fewer "
                                       "ranks)", r);
    for (int r = 1; r < x->W - 1; r++) {
        double held = forms_element(x, r) ? element_floats(x, r) : 0;
        int big = forms_element(x, r) ? r : -1;
        for (int span = 1; r + span < x->W; span *= 2) {
            int q = r + span;
            if (reaches_end(x, q, span)) continue;   /* a vector */
            held += sent_floats(x, q, span);
            for (int j = q; j < q + span; j++)
                if (big < 0 || element_floats(x, j) > element_floats(x, big)) big = j;
        }
        double bytes = 4.0 * x->batch * held;
        if (bytes > 1024.0 * 1024 * 1024) {
            seg g = segment_of(x, big);
            sp_comm_fail_all(x->world, "--parallel scan: rank %d would hold %.1f GB of Jacobian products for a batch "
                                       "of %d (the largest, P_%d, is %d x %d per sample); the scan suits chains with "
                                       "narrow segment boundaries (use fewer ranks)",
                             r, bytes / 1e9, x->batch, big, g.in, g.out);
        }
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
        /* Jᵀ_b scattered dense (multiplying I by it would cost nnz × out), then Jᵀ_s times
         * the product so far from the layer below it down, in cur and nxt by turns; the
         * last factor lands in P */
        const float *prod = NULL;
        for (int s = g.b; s >= g.a; s--) {
            sp_node *nd = x->node[s * x->B];
            sp_csr *j = &jt[s - g.a];
            float *to = s == g.a ? P + (size_t)smp * g.in * g.out : (g.b - s) % 2 ? nxt : cur;
            nd->kern->jt_values(nd, 0, smp, j);
            if (s == g.b) {
                memset(to, 0, sizeof(float) * (size_t)j->rows * g.out);
                for (int i = 0; i < j->rows; i++)
                    for (int32_t e = j->indptr[i]; e < j->indptr[i + 1]; e++)
                        to[(size_t)i * g.out + j->indices[e]] += j->data[e];
            } else {
                csr_times_dense(j, prod, g.out, to);
            }
            prod = to;
        }
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
        nd->kern->chain_jt(nd, smp, g.b, cur);   /* Jᵀ_b, then Jᵀ_t · (…) down to t = a */
        for (int t = g.b - 1; t >= g.a; t--) {
            nd->kern->chain_jt(nd, smp, t, jt);
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
            nd->kern->chain_jt(nd, smp, t, jt);   /* v ← Jᵀ_t · v */
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

/* Back-propagate the rank's own segment from ∂l/∂(its output) in x->dy[b]. With hand,
 * the segment's δ (T_1 on rank 1) goes to rank 0 as soon as it is made, before the first
 * layer's G (δ and G of a layer are independent: the pipeline schedules run them as
 * separate jobs). Timed into scan phase ph (ph + 1 after the hand-off). */
static void segment_backward(sp_exec *x, seg g, sp_req *hand, int ph, double t0)
{
    for (int s = g.b; s >= g.a; s--) {
        sp_node *nd = x->node[s * x->B];
        sp_tensor *dy = &x->dy[s * x->B];
        bool params = nd->kern->backward_params && nd->layer->nparams > 0;
        if (params && !(hand && s == g.a)) nd->kern->backward_params(nd, dy);
        if (s > 0) {
            sp_tensor *dx = &x->dy[(s - 1) * x->B];
            *dx = sp_tape_tensor_like(&x->tapes[0], &nd->input->out);
            nd->kern->backward_input(nd, 0, dy, dx);
            if (hand && s == g.a) {
                sp_exec_scan_phase(x, ph, t0);
                sp_exec_log_msg(x, 0, SP_MSG_HANDOFF, -1, 4.0 * (double)dx->numel);
                sp_isend(x->world, dx->data, dx->numel, 0, tag_of(x, 3, 0, 0), hand);
                t0 = sp_now(), ph++;
            }
        }
        if (params && hand && s == g.a) nd->kern->backward_params(nd, dy);
    }
    sp_exec_scan_phase(x, ph, t0);
}

void sp_exec_scan_phase(sp_exec *x, int ph, double t0)
{
    if (ph >= 0 && ph < SCAN_PHASES) (x->steps > 0 ? x->scan_ph : x->scan_ph0)[ph] += sp_now() - t0;
}

/* dst = P·u for every sample: P [n, rows, cols], u [n, cols], dst [n, rows]. */
static void apply_factor(const float *P, int rows, int cols, int n, const float *u, float *dst)
{
    for (int smp = 0; smp < n; smp++) {
        const float *A = P + (size_t)smp * rows * cols, *v = u + (size_t)smp * cols;
        float *d = dst + (size_t)smp * rows;
        for (int i = 0; i < rows; i++) {
            float acc = 0;
            for (int k = 0; k < cols; k++) acc += A[(size_t)i * cols + k] * v[k];
            d[i] = acc;
        }
    }
}

/* The ⌈log₂ W⌉ levels (see the top of the file). They are not schedulers/scan/'s plan,
 * which combines each pair of blocks once down a tree (exec_bppsa_blelloch.c runs it):
 * here every rank takes from the rank span above it at every level and keeps what it
 * gets as factors, uncombined, so the levels stay this span loop and share only their
 * count with the module (sp_scan_ceil_log2). elem: P_r ([n, in, out]) on the ranks
 * that form it, taken over; v: T_{W−1} ([n, in]) on the last rank. Returns T_{r+1}
 * ([n, out_r], to free) on the ranks 1 … W−2, NULL on the others. */
static float *scan_levels(sp_exec *x, float *elem, const float *v, int n)
{
    int W = x->W, r = x->rank;
    seg me = segment_of(x, r);
    float *L = elem;          /* P_r, then the factors received (P_{r+1}, …), one after another */
    size_t nL = elem ? (size_t)n * me.in * me.out : 0;
    float *next = NULL;       /* T_{r+1}, once the vector has arrived */
    float *Tr = NULL;         /* T_r = P_r·T_{r+1}, made the first time it is sent */
    for (int span = 1, k = 0; span < W; span *= 2, k++) {
        sp_req sreq = {0}, rreq = {0};
        int q = r + span;
        if (r > 0 && r - span > 0) {   /* rank 0 reads no T: nobody sends to it here */
            const float *out = L;
            size_t cnt = nL;
            if (reaches_end(x, r, span)) {
                if (r < W - 1 && !Tr) {
                    double t0 = sp_now();
                    Tr = sp_xmalloc(sizeof(float) * (size_t)n * me.in);
                    apply_factor(L, me.in, me.out, n, next, Tr);
                    sp_exec_scan_phase(x, SCAN_PH_LV + 2 * k, t0);
                }
                out = r < W - 1 ? Tr : v;
                cnt = (size_t)n * me.in;
            }
            sp_exec_log_msg(x, r - span, SP_MSG_SCAN, k, 4.0 * (double)cnt);
            sp_isend(x->world, out, cnt, r - span, tag_of(x, 2, span, 0), &sreq);
        }
        float *got = NULL;
        size_t ngot = 0;
        if (r > 0 && q < W) {
            ngot = (size_t)n * (size_t)sent_floats(x, q, span);
            got = sp_xmalloc(sizeof(float) * ngot);
            sp_irecv(x->world, got, ngot, q, tag_of(x, 2, span, 0), &rreq);
        }
        sp_wait(&rreq);
        sp_wait(&sreq);
        if (!got) continue;
        double t0 = sp_now();
        if (!reaches_end(x, q, span)) {   /* more factors, kept as they are */
            L = sp_xrealloc(L, sizeof(float) * (nL + ngot));
            memcpy(L + nL, got, sizeof(float) * ngot);
            nL += ngot;
            free(got);
            sp_exec_scan_phase(x, SCAN_PH_LV + 2 * k + 1, t0);
            continue;
        }
        /* T_q: multiplied through the factors held, P_{q−1} first, down to P_{r+1} */
        float *u = got;
        size_t off = nL;
        for (int j = q - 1; j > r; j--) {
            seg g = segment_of(x, j);
            off -= (size_t)n * g.in * g.out;
            float *t = sp_xmalloc(sizeof(float) * (size_t)n * g.in);
            apply_factor(L + off, g.in, g.out, n, u, t);
            free(u);
            u = t;
        }
        next = u;
        sp_exec_scan_phase(x, SCAN_PH_LV + 2 * k + 1, t0);
    }
    free(L);
    free(Tr);
    return next;
}

/* The scan over layers (see above), after GPipe's forward with one micro-batch. */
void sp_exec_scan_backward(sp_exec *x)
{
    double t0 = sp_now();
    int W = x->W, r = x->rank, n = x->rows[0];
    seg me = segment_of(x, r);
    float *elem = NULL;
    const float *v = NULL;
    sp_req hand = {0};   /* rank 1's T_1 to rank 0 */
    sp_req *h = r == 1 ? &hand : NULL;
    sp_comm_set_label("bppsa scan across ranks");
    if (x->steps > 0) x->scan_steps++;
    if (r == W - 1) {   /* v = the segment's δ chain applied to ∇y l (and its G on the way) */
        x->dy[me.b * x->B] = *sp_exec_ensure_dy(x, me.b, 0);
        segment_backward(x, me, h, SCAN_PH_A, t0);
        if (me.a > 0) v = x->dy[(me.a - 1) * x->B].data;
    } else if (forms_element(x, r)) {
        elem = segment_product(x, me, n);
        sp_exec_scan_phase(x, SCAN_PH_A, t0);
    }
    float *next = scan_levels(x, elem, v, n);
    if (next) {   /* ranks 1 … W−2: their own segment from T_{r+1} */
        double t1 = sp_now();
        sp_tensor y = sp_exec_stage_tensor(x, me.b, 0);
        memcpy(y.data, next, sizeof(float) * y.numel);
        free(next);
        x->dy[me.b * x->B] = y;
        segment_backward(x, me, h, SCAN_PH_SEG, t1);
    }
    if (r == 0 && W > 1) {
        sp_tensor y = sp_exec_stage_tensor(x, me.b, 0);
        sp_req rreq = {0};
        sp_irecv(x->world, y.data, y.numel, 1, tag_of(x, 3, 0, 0), &rreq);
        sp_wait(&rreq);
        x->dy[me.b * x->B] = y;
        segment_backward(x, me, NULL, SCAN_PH_SEG, sp_now());
    }
    sp_wait(&hand);
    x->bwd_s += sp_now() - t0;
}

/* The recurrent layer's parameter gradients summed over the ranks (one allreduce of its
 * parameters packed); every rank then holds the whole G and steps its optimizer. The
 * layers above it were back-propagated in full on every rank and are not summed. */
static void reduce_recurrent_grads(sp_exec *x, sp_node *rec)
{
    if (x->W < 2) return;
    sp_layer *l = rec->layer;
    size_t total = 0;
    for (int p = 0; p < l->nparams; p++) total += l->params[p]->grad.numel;
    float *buf = sp_xmalloc(sizeof(float) * total);
    size_t at = 0;
    for (int p = 0; p < l->nparams; at += l->params[p]->grad.numel, p++)
        memcpy(buf + at, l->params[p]->grad.data, sizeof(float) * l->params[p]->grad.numel);
    sp_comm_set_label("allreduce of the recurrent layer's weight gradients");
    sp_exec_log_msg(x, -1, SP_MSG_ALLREDUCE, 0, 4.0 * (double)total);
    sp_allreduce(x->world, buf, total);
    at = 0;
    for (int p = 0; p < l->nparams; at += l->params[p]->grad.numel, p++)
        memcpy(l->params[p]->grad.data, buf + at, sizeof(float) * l->params[p]->grad.numel);
    free(buf);
}

/* The time scan's backward (see above): ∇h_T from the layers after the recurrent one,
 * the scan over the ranks' time segments, each rank's ∇h of its own steps and their
 * weight gradients, one allreduce of those. */
void sp_exec_time_scan_backward(sp_exec *x)
{
    double t0 = sp_now();
    int W = x->W, r = x->rank, n = x->rows[0], H = x->H, Tn = x->T;
    sp_comm_set_label("bppsa scan across ranks over time");
    if (x->steps > 0) x->scan_steps++;
    for (int s = x->S - 1; s >= 1; s--) {   /* the layers above the recurrent one, on every rank */
        sp_node *nd = x->node[s * x->B];
        sp_tensor *dy = sp_exec_ensure_dy(x, s, 0);
        if (nd->kern->backward_params && nd->layer->nparams > 0) nd->kern->backward_params(nd, dy);
        x->dy[(s - 1) * x->B] = sp_tape_tensor_like(&x->tapes[0], &nd->input->out);
        nd->kern->backward_input(nd, 0, dy, &x->dy[(s - 1) * x->B]);
        x->have_dy[(s - 1) * x->B] = true;
    }
    const float *dhT = sp_exec_ensure_dy(x, 0, 0)->data;   /* ∇h_T, [n, H] */
    sp_exec_scan_phase(x, SCAN_PH_TOP, t0);
    double t1 = sp_now();
    seg me = segment_of(x, r);
    int len = me.b - me.a + 1, maxlen = (Tn + W - 1) / W;
    float *mine = sp_xcalloc((size_t)n * maxlen * H, sizeof(float));
    float *elem = NULL, *below = NULL;   /* below: ∇h_{a_r − 1} = T_r, rank 1's to hand to rank 0 */
    if (r == 1 || (r == W - 1 && W > 1)) below = sp_xmalloc(sizeof(float) * (size_t)n * H);
    bool bl = sp_exec_scan_blelloch(x);
    if (r == W - 1) time_sweep(x, me, n, dhT, mine, below);
    else if (forms_element(x, r)) elem = time_product(x, me, n);
    sp_exec_scan_phase(x, SCAN_PH_A, t1);
    float *next = bl ? sp_exec_blelloch_levels(x, elem, r == W - 1 ? below : NULL, n)
                     : scan_levels(x, elem, r == W - 1 ? below : NULL, n);
    if (next) {   /* ranks 1 … W−2: this segment's steps from ∇h_{b_r} = T_{r+1} */
        t1 = sp_now();
        time_sweep(x, me, n, next, mine, r == 1 ? below : NULL);
        free(next);
        sp_exec_scan_phase(x, SCAN_PH_SEG, t1);
    }
    sp_req hand = {0};
    if (r == 1) {
        sp_exec_log_msg(x, 0, SP_MSG_HANDOFF, -1, 4.0 * (double)n * H);
        sp_isend(x->world, below, (size_t)n * H, 0, tag_of(x, 3, 0, 0), &hand);
    }
    if (r == 0 && W > 1) {   /* ∇h_{b_0} from rank 1 */
        float *dhb = sp_xmalloc(sizeof(float) * (size_t)n * H);
        sp_req rreq = {0};
        sp_irecv(x->world, dhb, (size_t)n * H, 1, tag_of(x, 3, 0, 0), &rreq);
        sp_wait(&rreq);
        t1 = sp_now();
        time_sweep(x, me, n, dhb, mine, NULL);
        free(dhb);
        sp_exec_scan_phase(x, SCAN_PH_SEG, t1);
    }
    sp_wait(&hand);
    free(below);
    /* This rank's share of G: the steps a_r … b_r only (Eq. 2: given ∇h_t the steps'
     * weight gradients are independent), then the sum over the ranks. */
    sp_node *rec = x->node[0];
    if (!rec->kern->chain_backward_params_range)
        sp_comm_fail_all(x->world, "--parallel scan: %s has no weight gradients over a range of time steps on this "
                                   "device (chain_backward_params_range; the CPU has it)", rec->op->name);
    sp_tensor dh = sp_tensor_view(mine, 3, (int[]){n, len, H});
    t1 = sp_now();
    rec->kern->chain_backward_params_range(rec, &dh, me.a - 1, me.b);
    sp_exec_scan_phase(x, SCAN_PH_WGRAD, t1);
    x->wgrad_steps = len;
    free(mine);
    reduce_recurrent_grads(x, rec);
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
    sp_exec_scan_phase(x, SCAN_PH_FWD, t0);
}

/* ---- the scan's step as a program per rank (the prediction, sim_prog.c) ------------------ */

static void put(sp_prog *p, int op, int r, int peer, int kind, int stage, double bytes, double us, int job)
{
    sp_prog_add(p, (sp_prog_op){op, r, peer, kind, stage, job, bytes, us, op == SP_OP_OPT ? "optimizer" : NULL});
}

/* A compute phase, named for the trace's simulated rows. */
static void compute(sp_prog *p, int r, double us, const char *name)
{
    sp_prog_add(p, (sp_prog_op){.op = SP_OP_COMPUTE, .rank = r, .peer = -1, .job = -1, .us = us, .name = name});
}

/* Rank r's Hillis–Steele levels as scan_levels runs them. */
static void hs_program(const sp_exec *x, int r, const double *mine, sp_prog *p)
{
    int W = x->W;
    seg me = segment_of(x, r);
    for (int span = 1, k = 0; span < W; span *= 2, k++) {
        bool sent = r > 0 && r - span > 0, got = r > 0 && r + span < W;
        if (sent) {
            compute(p, r, mine[SCAN_PH_LV + 2 * k], "scan level: T_r");   /* the first time a vector is sent */
            double floats = reaches_end(x, r, span) ? me.in : sent_floats(x, r, span);
            put(p, SP_OP_SEND, r, r - span, SP_MSG_SCAN, k, 4.0 * x->batch * floats, 0, -1);
        }
        if (got) put(p, SP_OP_RECV, r, r + span, 0, 0, 0, 0, -1);
        if (sent) put(p, SP_OP_WAITSENDS, r, -1, 0, 0, 0, 0, -1);
        if (got) compute(p, r, mine[SCAN_PH_LV + 2 * k + 1], "scan level: products");
    }
}

/* Rank r's forward over layers: its F jobs in the order it walks them, each receiving
 * its input from another rank and sending its output on (exec_stage.c). Returns whether
 * the rank issued the loss (after its last F of the last stage). */
static bool forward_program(const sp_exec *x, int r, const double *f, sp_prog *p)
{
    const sp_schedule *s = x->sched;
    int left = 0;
    for (int j = 0; j < s->njobs; j++) left += s->compute[j] == r && s->jobs[j].dir == SP_FWD && s->jobs[j].stage == x->S - 1;
    bool loss = false;
    for (int i = x->sim.order_off[r]; i < x->sim.order_off[r + 1]; i++) {
        int j = x->sim.order[i], st = s->jobs[j].stage;
        if (s->jobs[j].dir != SP_FWD) continue;
        if (st > 0) {
            int q = sp_schedule_find(s, st - 1, s->jobs[j].micro, SP_FWD);
            if (s->compute[q] != r) put(p, SP_OP_RECV, r, s->compute[q], 0, 0, 0, 0, -1);
        }
        put(p, SP_OP_COMPUTE, r, -1, 0, 0, 0, f[st], j);
        int n, sent[8], nsent = 0;
        const int *succ = sp_schedule_succs(s, j, &n);
        double bytes = 4.0 * x->batch * (double)sp_shape_numel(x->st[st].out_ndim, x->st[st].out_shape);
        for (int k = 0; k < n; k++) {
            int w = s->compute[succ[k]];
            bool dup = false;
            if (w == r || s->jobs[succ[k]].dir != SP_FWD) continue;
            for (int m = 0; m < nsent; m++) dup |= sent[m] == w;
            if (dup || nsent == 8) continue;
            sent[nsent++] = w;
            put(p, SP_OP_SEND, r, w, SP_MSG_ACT, st, bytes, 0, -1);
        }
        if (st == x->S - 1 && --left == 0) put(p, SP_OP_LOSS, r, -1, SP_MSG_LOSS, x->S - 1, 4, 0, -1), loss = true;
    }
    return loss;
}

void sp_exec_scan_program(const sp_exec *x, const double *ph, const double *f, const double *opt, sp_prog *p)
{
    int W = x->W;
    bool bl = sp_exec_scan_blelloch(x);
    p->workers = W;
    p->njobs = x->sched->njobs;   /* the time scan's (one worker's) included: the trace reads them */
    for (int r = 0; r < W; r++) {
        const double *mine = ph + (size_t)r * SCAN_PHASES;
        double u = 0;   /* the rank's optimizer step: its stages (the time scan: every stage) */
        for (int st = 0; st < x->S; st++)
            if (x->st[st].nfloats && (x->tscan || x->sched->stage_worker[st] == r)) u += opt[st];
        bool loss = false, mid = r >= 1 && r <= W - 2;
        if (x->tscan) {
            compute(p, r, mine[SCAN_PH_FWD] + mine[SCAN_PH_TOP] + mine[SCAN_PH_A], "forward, top layers, element");
            if (bl) sp_exec_blelloch_program(x, r, ph, p);
            else hs_program(x, r, mine, p);
            if (mid) compute(p, r, mine[SCAN_PH_SEG], "segment sweep");
            if (r == 1) put(p, SP_OP_SEND, r, 0, SP_MSG_HANDOFF, -1, 4.0 * x->batch * x->H, 0, -1);
        } else {
            loss = forward_program(x, r, f, p);
            compute(p, r, mine[SCAN_PH_A], r == W - 1 ? "segment backward" : "element");
            if (r == 1 && r == W - 1) {   /* the hand-off inside the last rank's segment */
                put(p, SP_OP_SEND, r, 0, SP_MSG_HANDOFF, -1, 4.0 * x->batch * segment_of(x, 1).in, 0, -1);
                compute(p, r, mine[SCAN_PH_A2], "segment backward");
            }
            hs_program(x, r, mine, p);
            if (mid) compute(p, r, mine[SCAN_PH_SEG], "segment backward");
            if (mid && r == 1) {
                put(p, SP_OP_SEND, r, 0, SP_MSG_HANDOFF, -1, 4.0 * x->batch * segment_of(x, 1).in, 0, -1);
                compute(p, r, mine[SCAN_PH_SEG2], "segment backward");
            }
        }
        if (r == 0 && W > 1) {
            put(p, SP_OP_RECV, r, 1, 0, 0, 0, 0, -1);
            compute(p, r, mine[SCAN_PH_SEG], x->tscan ? "segment sweep" : "segment backward");
        }
        if (r == 1) put(p, SP_OP_WAITSENDS, r, -1, 0, 0, 0, 0, -1);
        if (x->tscan) {
            compute(p, r, mine[SCAN_PH_WGRAD], "weight gradients");
            size_t np = 0;
            for (int k = 0; k < x->st[0].layer->nparams; k++) np += x->st[0].layer->params[k]->grad.numel;
            if (W > 1) put(p, SP_OP_ALLREDUCE, r, -1, SP_MSG_ALLREDUCE, 0, 4.0 * (double)np, 0, -1);
        }
        put(p, SP_OP_WAITSENDS, r, -1, 0, 0, 0, 0, -1);   /* the step's sends (exec.c) */
        if (x->cfg.clip_grad_norm > 0) {   /* exec_clip.c */
            if (!loss) put(p, SP_OP_LOSS, r, -1, SP_MSG_LOSS, x->S - 1, 4, 0, -1);
            put(p, SP_OP_NORM, r, -1, SP_MSG_NORM, -1, 8, 0, -1);
            if (x->cfg.post_validate) put(p, SP_OP_OPT, r, -1, 0, 0, 0, u, -1);
            put(p, SP_OP_NORMWAIT, r, -1, 0, 0, 0, 0, -1);
            if (!x->cfg.post_validate) put(p, SP_OP_OPT, r, -1, 0, 0, 0, u, -1);
        } else {
            put(p, SP_OP_OPT, r, -1, 0, 0, 0, u, -1);
            if (!loss) put(p, SP_OP_LOSS, r, -1, SP_MSG_LOSS, x->S - 1, 4, 0, -1);
        }
    }
}

/* ---- the cross-rank scan's plan (--parallel scan --plan) --------------------------------- */

/* The plan's Hillis–Steele levels: every product is a matrix–vector product (see the top
 * of the file). */
static void hs_plan_levels(const sp_exec *x, FILE *f)
{
    int W = x->W, n = x->batch;
    int level = 0;
    bool *made = sp_xcalloc((size_t)W, sizeof *made);   /* T_q = P_q * T_{q+1} already made */
    for (int span = 1; span < W; span *= 2) {
        fprintf(f, "level %d (span %d):", ++level, span);
        int pairs = 0;
        for (int r = 1; r + span < W; r++) {   /* rank r receives from rank q (rank 0 takes no part) */
            int q = r + span;
            fprintf(f, "%s rank %d -> rank %d (", pairs++ ? ";" : "", q, r);
            if (!reaches_end(x, q, span)) {
                if (span > 1) fprintf(f, "P_%d..P_%d as they are", q, q + span - 1);
                else fprintf(f, "P_%d as it is", q);
                fprintf(f, ", %.4g floats; rank %d keeps %s)", n * sent_floats(x, q, span), r,
                        span > 1 ? "them" : "it");
                continue;
            }
            fprintf(f, "T_%d, %d floats per sample", q, segment_of(x, q).in);
            if (q < W - 1 && !made[q])
                fprintf(f, ", made by rank %d as P_%d * T_%d, %.4g FLOPs", q, q, q + 1, 2.0 * n * element_floats(x, q));
            made[q] = true;
            if (q == r + 1) {
                fprintf(f, "; it is T_%d)", r + 1);
                continue;
            }
            double flops = 0;
            for (int j = r + 1; j < q; j++) flops += 2.0 * n * element_floats(x, j);
            if (q - 1 > r + 1) fprintf(f, "; rank %d multiplies it through P_%d..P_%d", r, q - 1, r + 1);
            else fprintf(f, "; rank %d multiplies it by P_%d", r, q - 1);
            fprintf(f, ", %.4g FLOPs)", flops);
        }
        fprintf(f, "%s\n", pairs ? "" : " none (rank 0 needs no T_0)");
    }
    free(made);
}

int sp_exec_print_plan(const sp_exec *x, FILE *f)
{
    int W = x->W, n = x->batch;
    bool bl = sp_exec_scan_blelloch(x);
    int levels = bl ? 2 * sp_scan_ceil_log2(W - 1) : sp_scan_ceil_log2(W);
    if (bl) {
        fprintf(f, "cross-rank scan plan: %d ranks, batch %d, over the time steps of the recurrent first layer; "
                   "blelloch, %d levels (2 ceil(log2 %d))\n", W, n, levels, W - 1);
    } else {
        fprintf(f, "cross-rank scan plan: %d ranks, batch %d, over the %s; hillis-steele, %d levels (ceil(log2 %d))\n",
                W, n, x->tscan ? "time steps of the recurrent first layer" : "layers", levels, W);
    }
    for (int r = 0; r < W; r++) {
        seg g = segment_of(x, r);
        fprintf(f, "segment: rank %d %s %d-%d [%d -> %d per sample]", r, x->tscan ? "steps" : "layers", g.a, g.b, g.in,
                g.out);
        if (W > 1 && r == 0) fprintf(f, ": no element (nobody reads T_0)\n");
        else if (r == W - 1)
            fprintf(f, ": element v = P_%d * grad (%d floats per sample), by back-propagating the segment\n", r, g.in);
        else if (!forms_element(x, r))
            fprintf(f, bl ? ": no element (its aggregates are read by nobody)\n"
                          : ": no element (nobody reads P_1: the rank back-propagates its segment from T_2)\n");
        else if (x->tscan)
            fprintf(f, ": element P_%d, %d x %d per sample, %.4g FLOPs (%d products of chain_jt)\n", r, g.in, g.out,
                    2.0 * n * g.in * g.in * g.out * (g.b - g.a), g.b - g.a);
        else
            fprintf(f, ": element P_%d, %d x %d per sample, %.4g floats (a product of %d Jt)\n", r, g.in, g.out,
                    (double)n * g.in * g.out, g.b - g.a + 1);
    }
    if (bl) sp_exec_blelloch_plan(x, f);
    else hs_plan_levels(x, f);
    if (W > 1) fprintf(f, "hand-off: rank 1 -> rank 0 (T_1, %d floats per sample)\n", segment_of(x, 1).in);
    else fprintf(f, "hand-off: none\n");
    if (x->tscan) {
        size_t np = 0;
        for (int p = 0; p < x->st[0].layer->nparams; p++) np += x->st[0].layer->params[p]->value.numel;
        fprintf(f, "weight gradients: each rank over its own steps only (rank r: steps a_r-b_r above), then an "
                   "allreduce of the %s layer's %zu gradient floats\n", x->st[0].layer->op->name, np);
    }
    return levels;
}
