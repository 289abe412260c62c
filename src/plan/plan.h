/* dissect plan: the bytes each rank's allocator will hold, predicted from the config before
 * anything is allocated (`dissect plan`, and `dissect train`'s check before it builds a rank).
 *
 * The prediction follows the allocations of src/model (activations per in-flight micro-batch
 * under the recomputation policy, backward scratch, the TP / SP buffers), src/zero (working
 * parameters, gradients and AdamW states per ZeRO stage over the DP axis, padded groups, the
 * stage-2/3 gradient buckets and stage-3 gather slots; with optimizer offload the master weights
 * and moments on the host instead, with parameter offload the stage-3 parameter shards too) and src/worker (batch buffers), for the
 * rank's pipeline stage (or interleaved chunks) and TP slice. Element sizes: CPU backend fp32
 * everywhere; CUDA bf16 activations and working parameters, fp32 gradients and states. The CUDA
 * backend's own workspaces (cuBLAS, attention accumulators, RoPE tables) are not modelled: on a
 * GPU the plan is a lower bound by those.
 */
#ifndef DX_PLAN_H
#define DX_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

enum { DX_PLAN_PARAMS = 0, DX_PLAN_GRADS, DX_PLAN_OPTIM, DX_PLAN_ACTIVATIONS, DX_PLAN_OTHER, DX_PLAN_NCAT };

typedef struct {
    int pp, dp, tp;                /* the rank's grid coordinates */
    int64_t bytes[DX_PLAN_NCAT];   /* per category (kernels.h's dx_mem_cat order) */
    int64_t peak;                  /* their sum: everything is held through the step */
    int64_t host;                  /* host bytes: offloaded master weights, moments, parameter
                                    * shards (offload_param) and the staging slots */
} dx_plan_rank;

/* The plan of world rank `rank` of config c (finalised for c->tp x c->dp x c->pp ranks) on
 * `device` ("cpu" or "cuda"). Returns 0 or -1 + dx_fail on a config the model cannot take. */
int dx_plan_rank_bytes(const dx_config *c, int rank, const char *device, dx_plan_rank *out);

/* The largest train_micro_batch_size_per_gpu (<= max_micro) whose plan's peak over all ranks
 * fits `limit` bytes; 0 if not even 1 fits. */
int dx_plan_max_micro_batch(const dx_config *c, const char *device, int64_t limit, int max_micro);

/* What would make a plan that exceeds `limit` fit, as text for an error message (the first of:
 * a smaller micro-batch, full recomputation, a higher ZeRO stage, optimizer offload on a GPU,
 * more ranks), into
 * buf[cap]. */
void dx_plan_advice(const dx_config *c, const char *device, int64_t limit, char *buf, size_t cap);

#endif
