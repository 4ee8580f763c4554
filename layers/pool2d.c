/* pool2d.c — the pooling window shared by avgpool2d and maxpool2d (pool2d.h). Messages
 * name the layer's op, so each op reports under its own name. */
#include <stdint.h>
#include "core/csr.h"
#include "core/error.h"
#include "layers/pool2d.h"

sp_layer *sp_pool2d_layer_new(const sp_opdef *op, int k, int stride, int pad)
{
    if (k < 1 || stride < 1 || pad < 0 || pad > k / 2)
        sp_fail("%s: kernel %d, stride %d, padding %d (expected kernel, stride >= 1 and 0 <= padding <= kernel/2)",
                op->name, k, stride, pad);
    sp_pool2d_layer *l = sp_xcalloc(1, sizeof *l);
    l->base.op = op;
    l->k = k;
    l->stride = stride;
    l->pad = pad;
    return &l->base;
}

sp_conv_geom sp_pool2d_geom(const sp_node *n)
{
    const sp_tensor *x = sp_node_x(n);
    return (sp_conv_geom){.C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .Ho = n->out.shape[2],
                          .Wo = n->out.shape[3], .k = SP_POOL2D(n)->k, .stride = SP_POOL2D(n)->stride,
                          .pad = SP_POOL2D(n)->pad};
}

void sp_pool2d_infer(sp_node *n, const sp_tensor *x)
{
    const sp_pool2d_layer *l = SP_POOL2D(n);
    char buf[64];
    if (x->ndim != 4 || x->shape[2] + 2 * l->pad < l->k || x->shape[3] + 2 * l->pad < l->k)
        sp_fail("%s: input %s, expected [B, C, H, W] with H, W >= %d (kernel %d, padding %d)", l->base.op->name,
                sp_shape_str(x, buf, sizeof buf), l->k - 2 * l->pad, l->k, l->pad);
    n->out = sp_tensor_4d(NULL, x->shape[0], x->shape[1], sp_conv_out_size(x->shape[2], l->k, l->stride, l->pad),
                          sp_conv_out_size(x->shape[3], l->k, l->stride, l->pad));
}

void sp_pool2d_jt_pattern(const sp_node *n, int i0, sp_csr *jt)
{
    sp_conv_geom g = sp_pool2d_geom(n);
    int rows = g.C * g.H * g.W, cols = g.C * g.Ho * g.Wo;
    int64_t nnz = 0;
    for (int r = 0; r < rows; r++) {
        int i_lo, i_hi, j_lo, j_hi;
        sp_window_range(r / g.W % g.H, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        sp_window_range(r % g.W, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        nnz += (int64_t)(i_hi - i_lo) * (j_hi - j_lo);
    }
    if (nnz > INT32_MAX)
        sp_fail("%s: Jᵀ has %lld non-zeros, more than int32 CSR indices hold (expected <= %d)",
                SP_POOL2D(n)->base.op->name, (long long)nnz, INT32_MAX);
    sp_csr_alloc(jt, rows, cols, nnz);
    int32_t pos = 0;
    for (int r = 0; r < rows; r++) {
        int c = r / (g.H * g.W), i_lo, i_hi, j_lo, j_hi;
        sp_window_range(r / g.W % g.H, g.k, g.stride, g.pad, g.Ho, &i_lo, &i_hi);
        sp_window_range(r % g.W, g.k, g.stride, g.pad, g.Wo, &j_lo, &j_hi);
        jt->indptr[r] = pos;
        for (int i = i_lo; i < i_hi; i++)
            for (int j = j_lo; j < j_hi; j++) jt->indices[pos++] = (c * g.Ho + i) * g.Wo + j;
    }
    jt->indptr[rows] = pos;
}
