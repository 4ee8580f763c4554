/* prune.h — magnitude pruning and retraining of a pruned network (BPPSA's CNN case).
 *
 *   sp_pruning *p = sp_prune_magnitude(m, 0.97, SP_PRUNE_GLOBAL);  // masks, W ← W ⊙ M
 *   ... train with any engine: the optimizer keeps pruned entries at exactly 0 ...
 *   sp_prune_save(p, "pruned.safetensors");
 *
 * What is pruned: the weights of conv and linear layers (parameters named "*.weight"
 * with two or more dimensions); biases stay dense. Per layer (SP_PRUNE_LAYER): in every
 * weight the round(amount · numel) entries of smallest |w|, as
 * torch.nn.utils.prune.l1_unstructured; global (SP_PRUNE_GLOBAL): the round(amount · N)
 * smallest over all of them together, as prune.global_unstructured with L1Unstructured.
 * Ties are broken by position (the earlier entry goes first); torch leaves them to topk.
 * Entries pruned before (a mask already set) stay pruned: masks only shrink.
 *
 * The mask hangs on the parameter (sp_param.mask): the optimizer zeroes the pruned
 * entries of the gradient before and of the weight after every update, so the forward
 * sees W ⊙ M with every engine; bppsa drops the pruned entries from Jᵀ patterns.
 *
 * Checkpoints use torch.nn.utils.prune's state_dict names: a pruned "conv1.weight" is
 * saved as "conv1.weight_orig" (the weight, pruned entries 0) and "conv1.weight_mask"
 * (0/1). In PyTorch: prune.identity(module, "weight") on each pruned module, then
 * load_state_dict (module.weight is then weight_orig * weight_mask, as here).
 * sp_prune_load reads both kinds of checkpoint. */
#ifndef SP_PRUNE_H
#define SP_PRUNE_H

#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"
#include "core/model.h"

typedef enum { SP_PRUNE_LAYER, SP_PRUNE_GLOBAL } sp_prune_scope;

typedef struct sp_pruning {
    sp_model *m;
    float **mask;        /* [m->nparams]; NULL where the parameter is not pruned */
} sp_pruning;

/* True for the parameters magnitude pruning touches (conv/linear weights). */
bool sp_prune_eligible(const sp_param *p);
/* Prunes `amount` (0 ≤ amount < 1) of the eligible weights by magnitude; p may be NULL
 * (a new pruning) or an existing one, whose masks are kept and extended. Sets
 * sp_param.mask and applies W ← W ⊙ M. Returns the pruning (the argument if given). */
sp_pruning *sp_prune_magnitude(sp_model *m, sp_pruning *p, double amount, sp_prune_scope scope);
/* Loads a checkpoint into m: plain names, or torch's *_orig + *_mask pairs. *out gets
 * the pruning the masks describe (attached to m's parameters, W ← W ⊙ M), or NULL when
 * the checkpoint has no masks (then this is sp_model_load). SP_OK, or SP_ERR with one
 * line (sp_last_error) naming the problem; names and pairs are checked before anything
 * is read, so only a read error can leave m partly loaded. */
int sp_prune_load(sp_model *m, const char *path, sp_pruning **out) SP_MUST_CHECK;
/* Saves m with torch's names for the pruned parameters (p NULL: sp_model_save), through
 * the same atomic write. SP_OK or SP_ERR. */
int sp_prune_save(const sp_pruning *p, const sp_model *m, const char *path) SP_MUST_CHECK;
/* Kept (non-zero mask) entries of parameter i, or its numel when it is not pruned. */
int64_t sp_prune_kept(const sp_pruning *p, int i);
/* Detaches the masks from the parameters and frees them. NULL is fine. */
void sp_prune_free(sp_pruning *p);

#endif
