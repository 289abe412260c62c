/* dissect model: the Llama-2 decoder over flat parameter groups, on a dx_backend.
 *
 * Architecture (Touvron et al. 2023, "Llama 2"; Hugging Face LlamaForCausalLM):
 *   x0 = embed_tokens[ids]
 *   for each layer: h = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))),
 *                   n1 = RMSNorm_1(x);  x' = h + down(silu(gate(n2)) * up(n2)), n2 = RMSNorm_2(h)
 *   logits = lm_head(RMSNorm_f(x_L))   (untied head);  loss = mean cross-entropy of next token
 *
 * Flat parameter groups (DESIGN.md): group 0 = embedding; groups 1..L = decoder layers;
 * group L+1 = final norm + LM head. Each group's parameters are one contiguous buffer; the
 * named views (HF names) map into it. ZeRO partitions these buffers over DP ranks.
 *
 * The model does not own parameter or gradient memory: for each group it reads the working
 * parameters at groups[g].work (act dtype X) and accumulates gradients into groups[g].grad
 * (acc dtype A). Whoever owns them (src/zero) sets those pointers, and may swap them around a
 * group's use through the hooks (ZeRO-3 gathers a layer's parameters just before it runs).
 *
 * Activation layout: N = B*T rows, row n = b*T + t.
 */
#ifndef DX_MODEL_H
#define DX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "trace/tracer.h"
#include "kernels.h"

typedef struct {
    char name[96];   /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
    int group;       /* flat group index */
    size_t offset;   /* element offset in the group */
    int rows, cols;  /* shape [rows, cols]; cols = 0 for vectors */
    size_t numel;
    int decay;       /* weight decay applies (matrices yes, norm weights no) */
    int is_norm;     /* initialised to 1 (RMSNorm weight) instead of N(0, initializer_range) */
} dx_param;

typedef struct {
    size_t numel; /* elements of the group */
    void *work;   /* X[numel]: working parameters used by forward/backward */
    void *grad;   /* A[numel]: gradients, accumulated (+=) by backward */
    int backward_reads_work; /* backward reads work (0: the embedding, whose gradient is a
                              * scatter-add of dL/dx; ZeRO-3 then gathers it for forward only) */
} dx_group;

typedef enum { DX_HOOK_PRE_FORWARD, DX_HOOK_POST_FORWARD, DX_HOOK_PRE_BACKWARD, DX_HOOK_POST_BACKWARD } dx_hook_kind;

/* Called around each group's use; returns 0 or -1 (+ dx_fail). */
typedef int (*dx_group_hook)(void *ctx, int group, dx_hook_kind kind);

typedef struct dx_model dx_model;

/* Builds the parameter table and allocates activations for up to max_B x max_T tokens.
 * Returns NULL + dx_fail on a bad shape or allocation failure. */
dx_model *dx_model_create(const dx_model_config *cfg, dx_backend *be, int max_B, int max_T);
void dx_model_destroy(dx_model *m);

int dx_model_num_groups(const dx_model *m);
dx_group *dx_model_group(dx_model *m, int g);
int dx_model_num_params_table(const dx_model *m);
const dx_param *dx_model_param(const dx_model *m, int i);
/* Index of the parameter named `name`, or -1. */
int dx_model_find_param(const dx_model *m, const char *name);

/* Records kernel calls (trace.level op) and module spans (module, op) into tr (NULL = off). */
void dx_model_set_tracer(dx_model *m, dx_tracer *tr);

/* Installs the group hook (NULL = none). */
void dx_model_set_hook(dx_model *m, dx_group_hook hook, void *ctx);

/* Initial value of elements [start, start+count) of group g as fp32 (host): N(0, init_range)
 * for matrices, 1 for norm weights; a function of (seed, parameter, element) only. */
void dx_model_init_values(const dx_model *m, int g, size_t start, size_t count, uint64_t seed,
                          float *out);

/* Forward pass on ids and targets (backend int32[B*T]); adds the sum of per-token losses to
 * loss_sum (A[1], +=). If want_grad, also writes dL/dlogits scaled by dscale (e.g. 1 / global
 * tokens) for a following dx_model_backward. targets may be NULL (logits only; no loss).
 * Returns 0 or -1 (+ dx_fail, e.g. from a hook or a batch larger than allocated). */
int dx_model_forward(dx_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                     void *loss_sum, int want_grad, float dscale);

/* Backward pass of the last dx_model_forward(want_grad = 1): accumulates (+=) every group's
 * gradient. Returns 0 or -1 (+ dx_fail from a hook). */
int dx_model_backward(dx_model *m);

/* Logits A[B*T, V] of the last dx_model_forward. */
const void *dx_model_logits(const dx_model *m);

/* Bytes of activation memory allocated. */
size_t dx_model_activation_bytes(const dx_model *m);

#endif
