/* pool2d.h — what avgpool2d and maxpool2d share: the layer (a k×k window moved by a
 * stride over a padded NCHW input), its geometry, shape inference, the constructor's
 * checks, and the Jᵀ pattern of window membership (row (c, h, w) lists the windows
 * (c, i, j) that contain (h, w), in column order) that both ops fill with values of
 * their own. Each op's arithmetic stays in its own file. */
#ifndef SP_POOL2D_H
#define SP_POOL2D_H

#include "core/op.h"
#include "layers/im2col.h"

typedef struct sp_pool2d_layer {
    sp_layer base;
    int k, stride, pad;
} sp_pool2d_layer;

#define SP_POOL2D(n) ((const sp_pool2d_layer *)(n)->layer)

/* A pooling layer of op: kernel, stride >= 1, 0 <= padding <= kernel/2 (sp_fail
 * otherwise, with op's name). */
sp_layer *sp_pool2d_layer_new(const sp_opdef *op, int k, int stride, int pad);
/* Input and output planes and the window of node n. */
sp_conv_geom sp_pool2d_geom(const sp_node *n);
/* [B, C, H, W] → [B, C, Ho, Wo], floor mode; the window must fit the padded input. */
void sp_pool2d_infer(sp_node *n, const sp_tensor *x);
/* The membership pattern, sp_fail past int32 CSR indices. */
void sp_pool2d_jt_pattern(const sp_node *n, int i, sp_csr *jt);

#endif
