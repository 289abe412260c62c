/* dissect model: the Llama-2 decoder over flat parameter groups, on a dx_backend, split over a
 * tensor-parallel group and over pipeline stages.
 *
 * Architecture (Touvron et al. 2023, "Llama 2"; Hugging Face LlamaForCausalLM):
 *   x0 = embed_tokens[ids]
 *   for each layer: h = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))),
 *                   n1 = RMSNorm_1(x);  x' = h + down(silu(gate(n2)) * up(n2)), n2 = RMSNorm_2(h)
 *   logits = lm_head(RMSNorm_f(x_L))   (untied head);  loss = mean cross-entropy of next token
 *
 * Partition (dx_model_part). One rank holds:
 *   - pipeline: one or more model chunks, each a contiguous range of decoder layers; the chunk
 *     that starts at layer 0 also holds the embedding, the one that ends at layer L the final
 *     norm and LM head (the interleaved schedule gives a rank several chunks);
 *   - tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", sec. 3), TP ranks t of tp:
 *     column-parallel q/k/v_proj and gate/up_proj (rows of W[out,in] split: this rank's query
 *     heads [t H/tp, (t+1) H/tp), KV heads likewise when tp divides num_key_value_heads, FFN rows
 *     [t I/tp, (t+1) I/tp)); row-parallel o_proj and down_proj (columns split the same way);
 *     vocab-parallel embedding and LM head (rows [t V/tp, (t+1) V/tp)) with vocab-parallel
 *     cross-entropy (no rank holds the full logits). KV heads fewer than TP ranks (tp a
 *     multiple of num_key_value_heads): k_proj and v_proj are replicated on every TP rank, each
 *     rank computes the one KV head its query heads read, and their gradients are summed over TP.
 *     One all-reduce after each row-parallel GEMM in forward (and after the column-parallel
 *     input gradient in backward), after the embedding, and after the LM head's input gradient.
 *   - sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
 *     Transformer Models", sec. 4.2.2), when part->sequence_parallel and tp > 1: the residual
 *     stream, the RMSNorms and the residual adds work on this rank's rows [t N/tp, (t+1) N/tp)
 *     of the N = B*T tokens; an all-gather before each column-parallel GEMM and a
 *     reduce-scatter after each row-parallel GEMM (and their transposes in backward) replace the
 *     all-reduces. The norm weights' gradients are then partial and summed over TP.
 *
 * Flat parameter groups (DESIGN.md): in order, the embedding (if held), each held decoder layer
 * (chunk by chunk), the final norm + LM head (if held). Each group's parameters are one
 * contiguous buffer of this rank's TP slices; the named views (HF names, logical shapes and
 * this slice's place in them) map into it. ZeRO partitions these buffers over DP ranks.
 *
 * The model does not own parameter or gradient memory: for each group it reads the working
 * parameters at groups[g].work (act dtype X) and accumulates gradients into groups[g].grad
 * (acc dtype A). Whoever owns them (src/zero) sets those pointers, and may swap them around a
 * group's use through the hooks (ZeRO-3 gathers a layer's parameters just before it runs).
 *
 * Activations are kept per slot: a slot holds one micro-batch in flight (the pipeline
 * schedules keep several); micro-batch k of a chunk uses slot k % slots. Activation layout:
 * N = B*T rows, row n = b*T + t; the residual stream has Nr = N (or N/tp with sequence
 * parallelism) rows.
 */
#ifndef DX_MODEL_H
#define DX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "config/config.h"
#include "kernels.h"
#include "trace/tracer.h"

#define DX_MODEL_MAX_CHUNKS DX_PP_MAX_CHUNKS

typedef struct {
    char name[96];   /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
    int group;       /* flat group index */
    size_t offset;   /* element offset in the group */
    int rows, cols;  /* this rank's shape [rows, cols]; cols = 0 for vectors */
    size_t numel;
    int decay;       /* weight decay applies (matrices yes, norm weights no) */
    int is_norm;     /* initialised to 1 (RMSNorm weight) instead of N(0, initializer_range) */
    int global_index;        /* index in the one-process parameter table (the init's stream) */
    int full_rows, full_cols; /* the logical (unsharded) shape */
    int row0, col0;          /* this slice's first row and column in the logical tensor */
    int tp_replicated;       /* the same on every TP rank (norm weights, replicated k/v_proj):
                              * counted once in norms, written once in checkpoints */
    int tp_reduce;           /* its gradient is partial on each TP rank and summed over TP
                              * (norm weights under sequence parallelism, replicated k/v_proj) */
    int init;                /* initial values (dx_model_init_values): 0 the rule above (normal or
                              * 1), 1 uniform in +-1/sqrt(cols) (LoRA's A), 2 zeros (LoRA's B) */
} dx_param;

typedef struct {
    size_t numel; /* elements of the group */
    void *work;   /* X[numel]: working parameters used by forward/backward */
    void *grad;   /* A[numel]: gradients, accumulated (+=) by backward */
    int grad_fresh; /* set by grad's owner instead of zeroing it: its contents are undefined and
                     * the group's next backward overwrites the whole of grad (the weight-gradient
                     * GEMMs with beta = 0, PyTorch's first accumulation into a None .grad; what
                     * no GEMM writes whole is zeroed first) and clears the flag */
    int backward_reads_work; /* backward reads work (0: the embedding, whose gradient is a
                              * scatter-add of dL/dx; ZeRO-3 then gathers it for forward only) */
    int module;   /* trace coordinates: DX_MOD_EMBEDDING, DX_MOD_LAYER or DX_MOD_LM_HEAD */
    int layer;    /* global decoder layer index, -1 for the embedding and head */
    int frozen;   /* not trained (LoRA's base model): backward forms no gradient for it, grad
                   * stays NULL; its owner keeps only the working copy */
} dx_group;

typedef enum { DX_HOOK_PRE_FORWARD, DX_HOOK_POST_FORWARD, DX_HOOK_PRE_BACKWARD, DX_HOOK_POST_BACKWARD } dx_hook_kind;

/* Called around each group's use; returns 0 or -1 (+ dx_fail). */
typedef int (*dx_group_hook)(void *ctx, int group, dx_hook_kind kind);

/* What one rank holds (see the top of this file). */
typedef struct {
    int tp, tp_rank;       /* tensor-parallel size and this rank's index in its TP group */
    int sequence_parallel; /* with tp > 1 */
    dx_comm *tp_comm;      /* the TP group over backend buffers (NULL when tp == 1) */
    int nchunks;           /* model chunks (1 .. DX_MODEL_MAX_CHUNKS) */
    int first_layer[DX_MODEL_MAX_CHUNKS], num_layers[DX_MODEL_MAX_CHUNKS]; /* per chunk, in order */
    int slots;             /* micro-batches in flight per chunk (>= 1) */
    /* activation recomputation (config.h's dx_recompute): none, selective (each layer keeps its
     * input, q/k/v after RoPE, h, the gate/up outputs and the norms' rstd; its RMSNorm outputs,
     * attention output and log-sum-exp and SwiGLU product are recomputed in backward) or full
     * (each recomputed layer keeps only its input and runs its forward again in backward, before
     * its gradients); full recomputation covers every layer (uniform) or the first
     * recompute_num_layers layers of each chunk (block). Recomputed ops are traced in phase
     * "recompute". Gradients are bitwise those without recomputation. */
    int recompute, recompute_method, recompute_num_layers;
    /* LoRA (Hu et al. 2021; src/model/lora.h), lora_r > 0: every base group is frozen, and one
     * trainable adapter group per held layer follows the base groups (in chunk and layer
     * order) with, for each target (bit t of lora_targets, DX_LORA_* in config.h), A [r, in]
     * (PEFT's init: uniform +-1/sqrt(in)) and B [out, r] (zeros), named as PEFT's state dict
     * without its "base_model.model." prefix, e.g. "model.layers.3.self_attn.q_proj.lora_A.weight".
     * The adapter GEMMs are traced as op lora_gemm. Under TP a column-parallel target (q, k, v,
     * gate, up) holds A whole and its rows of B, a row-parallel one (o, down) its columns of A and
     * B whole; the whole ones' gradients are partial and summed over TP (tp_reduce). k and v need
     * the KV heads split over TP (num_key_value_heads % tp == 0). */
    int lora_r;
    float lora_scale;      /* lora_alpha / r */
    float lora_dropout;    /* PEFT's lora_dropout p on each adapter's input (0 <= p < 1), in
                            * training forwards and their backward only; masks keyed by
                            * dx_model_set_dropout_seed and dx_model_set_micro_sequence */
    unsigned lora_targets; /* bit mask over DX_LORA_Q .. DX_LORA_DOWN */
} dx_model_part;

typedef struct dx_model dx_model;

/* Builds the parameter table of the part and allocates activations for `slots` micro-batches of
 * up to max_B x max_T tokens. Returns NULL + dx_fail on a bad shape or partition (heads, KV
 * heads, FFN, vocab or tokens not divisible by tp; layer ranges outside the model) or an
 * allocation failure. */
dx_model *dx_model_create_part(const dx_model_config *cfg, dx_backend *be, int max_B, int max_T,
                               const dx_model_part *part);
/* The whole model on one rank (no TP, one chunk, one slot). */
dx_model *dx_model_create(const dx_model_config *cfg, dx_backend *be, int max_B, int max_T);
void dx_model_destroy(dx_model *m);

int dx_model_num_groups(const dx_model *m);
dx_group *dx_model_group(dx_model *m, int g);
int dx_model_num_params_table(const dx_model *m);
const dx_param *dx_model_param(const dx_model *m, int i);
/* Index of the parameter named `name` in this rank's table, or -1. */
int dx_model_find_param(const dx_model *m, const char *name);
/* Whether `name` is a parameter of the whole model (any stage, any TP slice): embed_tokens,
 * layers 0 .. L-1's nine tensors, the final norm, lm_head. */
int dx_model_is_param_name(const dx_model *m, const char *name);
/* Chunks held, and whether chunk c holds the embedding / the LM head. */
int dx_model_num_chunks(const dx_model *m);
int dx_model_chunk_has_embedding(const dx_model *m, int c);
int dx_model_chunk_has_head(const dx_model *m, int c);
/* Vocabulary slice of this rank's LM head: ids [*v0, *v0 + returned count). */
int dx_model_vocab_slice(const dx_model *m, int *v0);
/* Rows of the residual stream for a micro-batch of N tokens (N, or N / tp with sequence
 * parallelism): the rows of chunk inputs, outputs and their gradients. */
int dx_model_residual_rows(const dx_model *m, int N);
/* Bytes of one residual-stream buffer X[Nr, D] for N tokens (what stages send each other). */
size_t dx_model_residual_bytes(const dx_model *m, int N);
dx_backend *dx_model_backend(const dx_model *m);

/* Records kernel calls (trace.level op), module spans (module, op) and TP collectives into tr
 * (NULL = off). */
void dx_model_set_tracer(dx_model *m, dx_tracer *tr);

/* Installs the group hook (NULL = none). */
void dx_model_set_hook(dx_model *m, dx_group_hook hook, void *ctx);

/* Initial value of elements [start, start+count) of group g as fp32 (host): N(0, init_range)
 * for matrices, 1 for norm weights; a function of (seed, parameter, element of the logical
 * tensor) only, so every partition starts from the one-process model's weights. */
void dx_model_init_values(const dx_model *m, int g, size_t start, size_t count, uint64_t seed,
                          float *out);

/* Forward of chunk c for the micro-batch in slot s (B x T tokens). The chunk's input is ids
 * (backend int32[B*T]) when the chunk holds the embedding, else the buffer of
 * dx_model_chunk_input(m, c, s), filled by the caller (the previous stage's output, X[Nr, D]).
 * When the chunk holds the head: adds the sum of per-token losses to loss_sum (A[1], +=; with
 * tp > 1 every TP rank adds the whole micro-batch's loss) and, if want_grad, keeps dL/dlogits
 * scaled by dscale (e.g. 1 / global tokens) for dx_model_backward_chunk; targets may be NULL
 * (logits only). Otherwise the output is dx_model_chunk_output(m, c, s). Collective over the TP
 * group. Returns 0 or -1 (+ dx_fail, e.g. from a hook or a batch larger than allocated). */
int dx_model_forward_chunk(dx_model *m, int c, int s, const int32_t *ids, const int32_t *targets,
                           int B, int T, void *loss_sum, int want_grad, float dscale);
/* X[Nr, D] input buffer of chunk c, slot s (chunks without the embedding). */
void *dx_model_chunk_input(dx_model *m, int c, int s);
/* X[Nr, D] output of chunk c, slot s after its forward (chunks without the head). */
void *dx_model_chunk_output(dx_model *m, int c, int s);

/* Backward of chunk c for slot s, after its forward with want_grad: accumulates (+=) the
 * gradients of the chunk's groups. For a chunk without the head, dL/d(output) must be in
 * dx_model_grad_buffer(m) first (the next stage's input gradient). After the call that buffer
 * holds dL/d(chunk input) (chunks without the embedding send it to the previous stage).
 * Collective over the TP group. Returns 0 or -1 (+ dx_fail from a hook). */
int dx_model_backward_chunk(dx_model *m, int c, int s);
/* X[Nr, D] residual-gradient buffer of the backward pass (see dx_model_backward_chunk). */
void *dx_model_grad_buffer(dx_model *m);

/* One-chunk models (pp = 1): forward of the whole model on slot 0 (dx_model_forward_chunk with
 * c = s = 0), and its backward. */
int dx_model_forward(dx_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                     void *loss_sum, int want_grad, float dscale);
int dx_model_backward(dx_model *m);

/* LoRA dropout's keys. The step's seed (the same on every rank; set before the step's first
 * forward), and, before the forward of a micro-batch into slot s of chunk c, the global index
 * (the data order's sequence number) of its first sequence: an adapter input element's mask is
 * a function of (seed, layer, target, global token, global column), so it is the same under any
 * DP, TP or PP layout and micro-batch size, and its backward regenerates it. set_micro_sequence:
 * -1 + dx_fail for a chunk or slot out of range. */
void dx_model_set_dropout_seed(dx_model *m, uint64_t seed);
int dx_model_set_micro_sequence(dx_model *m, int c, int s, uint64_t seq0);

/* Logits X[B*T, Vl] of the last forward on slot 0 of the head chunk: this rank's vocabulary
 * slice (dx_model_vocab_slice); the whole vocabulary when tp = 1. A forward with want_grad
 * leaves dL/dlogits there instead (the same buffer). */
const void *dx_model_logits(const dx_model *m);

/* Bytes of activation memory allocated. */
size_t dx_model_activation_bytes(const dx_model *m);

#endif
