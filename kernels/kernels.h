/* dissect kernels: the backend interface.
 *
 * Every op of the Llama-2 training step is reached through one table of function pointers
 * (dx_backend), with one CPU implementation (kernels/cpu, OpenBLAS + OpenMP) and, later, one
 * CUDA implementation. The model code never touches element types itself: buffers are `void *`
 * in the backend's memory and hold one of two dtypes the backend declares:
 *
 *   act  (X): activations, working (compute) copy of parameters, activation gradients.
 *   acc  (A): accumulator dtype: fp32 master weights, parameter gradients, AdamW moments,
 *             logits, RMSNorm reciprocal std, attention log-sum-exp, loss sums.
 *
 *   backend   act    acc
 *   cpu       f32    f32      (the engine on CPU)
 *   cpu64     f64    f64      (same code built for double: reference for gradient checks)
 *   cuda      bf16   f32      (later)
 *
 * All tensors are dense, row-major, with the shapes given per op. Token ids and targets are
 * int32 in backend memory. "(+=)" marks outputs that are accumulated into (parameter gradients
 * always accumulate, so gradient accumulation over micro-batches is free); other outputs are
 * overwritten. Unless stated, an output may not alias an input.
 *
 * Errors: ops assume valid shapes (the model checks them once); allocation and transfer
 * functions return NULL / -1 with dx_fail() set.
 */
#ifndef DX_KERNELS_H
#define DX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DX_F32 = 0, DX_F64 = 1, DX_BF16 = 2 } dx_dtype;

#ifdef __CUDACC__
#define DX_HOST_DEVICE __host__ __device__
#else
#define DX_HOST_DEVICE
#endif
/* The counter-based random numbers of dropout (the same on every backend and rank): SplitMix64's
 * finaliser (Steele et al. 2014) of the counter, mixed with a stream, and its top 24 bits as a
 * uniform integer in [0, 2^24). An element is kept when that integer is >= threshold =
 * dx_dropout_threshold(p) (probability 1 - p, to 2^-24). */
static inline DX_HOST_DEVICE uint64_t dx_mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline DX_HOST_DEVICE int dx_dropout_keep(uint64_t stream, uint64_t counter, uint32_t threshold)
{
    return (uint32_t)(dx_mix64(stream ^ dx_mix64(counter)) >> 40) >= threshold;
}
static inline uint32_t dx_dropout_threshold(float p)
{
    double t = (double)p * 16777216.0 + 0.5;
    return t <= 0 ? 0u : t >= 16777216.0 ? 16777216u : (uint32_t)t;
}

/* Bytes per element of a dtype. */
size_t dx_dtype_size(dx_dtype dt);
const char *dx_dtype_name(dx_dtype dt);

/* Categories for the allocator's byte counters (reported per step and per rank). */
typedef enum {
    DX_MEM_PARAMS = 0,  /* working (compute-dtype) parameters */
    DX_MEM_GRADS,       /* parameter gradients */
    DX_MEM_OPTIM,       /* fp32 master weights and AdamW moments */
    DX_MEM_ACTIVATIONS, /* activations saved for backward and workspaces */
    DX_MEM_OTHER,
    DX_MEM_NCAT
} dx_mem_cat;

const char *dx_mem_cat_name(dx_mem_cat c);

typedef struct {
    size_t current[DX_MEM_NCAT]; /* bytes held now, per category */
    size_t peak[DX_MEM_NCAT];    /* high-water mark per category */
    size_t current_total, peak_total;
} dx_mem_stats;

/* AdamW hyper-parameters for one update (Loshchilov & Hutter 2019, "Decoupled Weight Decay
 * Regularization", Alg. 2, as in torch.optim.AdamW):
 *   g  = grad * grad_scale
 *   p  = p * (1 - lr * weight_decay)
 *   m  = beta1 m + (1 - beta1) g ;  v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)                */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    double grad_scale; /* e.g. the global-norm clipping factor min(1, max_norm / norm) */
    long step;         /* 1-based update count, for bias correction */
} dx_adamw_hparams;

typedef struct dx_backend dx_backend;

struct dx_backend {
    const char *name; /* "cpu", "cpu64", "cuda" */
    dx_dtype act;     /* X */
    dx_dtype acc;     /* A */
    int nthreads;     /* host threads the backend may use */
    dx_mem_stats mem; /* maintained by alloc/free */
    void *impl;       /* backend private state */
    /* the device: its model as the driver names it ("NVIDIA H100 80GB HBM3"; the CPU backends:
     * /proc/cpuinfo's model name, else "cpu"), and its dense bf16 peak in TFLOP/s from
     * dx_peak_tflops (0: unknown, as for every CPU) */
    char device_name[96];
    double peak_tflops;

    /* ---- memory ---- */
    /* Allocates `bytes` (64-byte aligned, uninitialised) counted under `cat`. NULL + dx_fail on
     * failure (message names the category and size). */
    void *(*alloc)(dx_backend *be, size_t bytes, dx_mem_cat cat);
    /* Frees a pointer from alloc (NULL is a no-op) and uncounts it. */
    void (*free)(dx_backend *be, void *p);
    /* Fills `bytes` bytes with zero. */
    void (*zero)(dx_backend *be, void *p, size_t bytes);
    /* Byte copy within backend memory (regions may not overlap). */
    void (*copy)(dx_backend *be, void *dst, const void *src, size_t bytes);
    /* Host -> backend and backend -> host byte copies. */
    int (*upload)(dx_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*download)(dx_backend *be, void *host_dst, const void *src, size_t bytes);
    /* Converts n host floats into dtype dt (act or acc) in backend memory, and back. */
    int (*upload_f32)(dx_backend *be, void *dst, dx_dtype dt, const float *host_src, size_t n);
    int (*download_f32)(dx_backend *be, float *host_dst, const void *src, dx_dtype dt, size_t n);
    /* Waits until all work queued on the compute stream has finished (no-op on CPU); not for
     * the copy streams' or the side stream's work (copy_wait, side_wait). */
    void (*sync)(dx_backend *be);

    /* ---- host staging and asynchronous copies (CPU offload, ZeRO-Offload) ----
     * host_alloc: `bytes` of host memory the copies below may use at full speed (CUDA:
     * page-locked, cudaHostAlloc; CPU: ordinary 64-byte aligned memory), uninitialised; NULL +
     * dx_fail naming the size. host_free releases it (NULL: no-op). Not counted in be->mem (the
     * caller counts host bytes).
     * download_async: queues a copy of `bytes` from backend memory src to host dst that starts
     * after all work queued on the compute stream so far (fence -1) or after the compute-stream
     * position a fence marked (fence(): an id >= 0, or -1 + dx_fail; the last DX_COPY_TICKETS
     * fences stay distinct, an older one may stand for a later position), on a device-to-host
     * copy stream, and
     * returns a ticket >= 0 (-1 + dx_fail). upload_async: queues a copy from host src to backend
     * dst on a host-to-device copy stream (after the compute stream's work queued so far); the
     * compute stream's later work waits for it. copy_wait blocks until the copy of `ticket` has
     * finished (0, or -1 + dx_fail on a CUDA error); a host buffer may be reused only after that.
     * At most DX_COPY_TICKETS copies may be in flight: issuing more first waits for the oldest.
     * upload_async_detached: as upload_async, but the compute stream does not wait for it;
     * copy_join(ticket) makes the compute stream's later work wait for that copy (and, the
     * host-to-device stream being in order, for every upload queued before it).
     * CPU: the copies are memcpy, done before the call returns. */
    void *(*host_alloc)(dx_backend *be, size_t bytes);
    void (*host_free)(dx_backend *be, void *p);
    int (*download_async)(dx_backend *be, void *host_dst, const void *src, size_t bytes, int fence);
    int (*upload_async)(dx_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*copy_wait)(dx_backend *be, int ticket);
    int (*upload_async_detached)(dx_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*copy_join)(dx_backend *be, int ticket);
    int (*fence)(dx_backend *be);
    /* The copy streams (cudaStream_t) for timing marks (mark()): dir 0 device-to-host, 1
     * host-to-device; NULL where copies are synchronous. */
    void *(*copy_stream)(dx_backend *be, int dir);

    /* ---- the side stream (NULL where every op runs in call order on one stream) ----
     * Lets memory-bound work (zero.c: the AdamW updates) run beside the compute stream's next
     * work (the next forward's GEMMs) instead of before it.
     * side_begin: the ops called from now until side_end run on a second stream, after all
     * work queued on the compute stream so far. Only elementwise ops may be called in between
     * (adamw, zero, copy, acc_to_act, mark): not gemm, nor an op with a workspace (scratch is
     * shared with the compute stream). Calling side_begin twice without side_end aborts.
     * side_record(slot): records the side stream's position so far as `slot` (>= 0; slots are
     * created as needed); 0, or -1 + dx_fail (outside side_begin / side_end, or no event).
     * side_end: later ops run on the compute stream again.
     * side_wait(slot): the compute stream's later work waits for the position slot last
     * recorded (no wait if it never was). Nothing else orders the streams: sync waits for the
     * compute stream only, and the caller waits (side_wait) before the compute stream reads or
     * writes memory the side stream's ops use. */
    void (*side_begin)(dx_backend *be);
    int (*side_record)(dx_backend *be, int slot);
    void (*side_end)(dx_backend *be);
    void (*side_wait)(dx_backend *be, int slot);
    /* ---- the overlap stream (NULL where ops run in call order on one stream) ----
     * Runs a memory-bound op (rmsnorm_bwd) on a few SMs beside a power-bound GEMM on the rest
     * (benchmarks/NOTES.md item 30).
     * overlap_begin(sms): the ops called until overlap_end run on a second stream, after all
     * work queued on the compute stream so far, rmsnorm_bwd on at most `sms` SMs (CUDA: rows
     * of D <= 2048, one warp per row; wider rows take every SM free at the time); the compute
     * stream's GEMMs (gemm) called until overlap_join are planned for the other SMs (cuBLAS's
     * SM count target; for fewer where the CUDA backend's DX_CUDA_GEMM_SMS asks fewer). Only
     * rmsnorm_bwd may be called in between (its scratch is not used by gemm). 0, or -1 +
     * dx_fail (sms not in 1 .. SMs - 1, already begun, or on the side stream).
     * overlap_end: later ops run on the compute stream again.
     * overlap_join: the compute stream's later work waits for the overlap stream's; GEMMs are
     * planned as before overlap_begin again (every SM, or DX_CUDA_GEMM_SMS's). Call it before
     * the compute stream touches what the ops in between use. */
    int (*overlap_begin)(dx_backend *be, int sms);
    void (*overlap_end)(dx_backend *be);
    void (*overlap_join)(dx_backend *be);

    /* ---- math ---- */
    /* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major; op(A) is [M,K] (A is [K,M] when
     * trans_a), op(B) is [K,N] (B is [N,K] when trans_b); lda/ldb/ldc are row strides in
     * elements. A, B: X. C: X if c_acc == 0, A if c_acc == 1 (fp32 accumulation either way).
     * Linear layer y = x W^T (W [out,in], HF layout): gemm(0,1, BT,out,in, 1, x,in, W,in, 0, y,out). */
    void (*gemm)(dx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                 int c_acc);
    /* C[M,N] = op(A) @ op(B) + R[M,N], all X (fp32 accumulation), R with row stride ldr, R and C
     * distinct or the same matrix: a linear layer plus the residual (h = x + a W_o^T) without
     * copying x into h first. Otherwise as gemm. NULL where a backend has none: the caller copies
     * R into C and calls gemm with beta = 1 (the same sum). */
    void (*gemm_res)(dx_backend *be, int trans_a, int trans_b, int M, int N, int K, const void *A,
                     int lda, const void *B, int ldb, const void *R, int ldr, void *C, int ldc);
    /* The MLP's gate|up projection and SwiGLU as one op (Shazeer 2020; HF LlamaMLP):
     *   gu[N,2F] = x[N,K] W[2F,K]^T (W = gate_proj rows, then up_proj rows; gu rows 2F apart),
     *   h[N,F] = silu(g) u of its halves g = gu[:, :F], u = gu[:, F:] after their rounding to X,
     * all X: the same results as gemm(0,1, N,2F,K, 1, x,K, W,K, 0, gu,2F) then
     * swiglu_fwd(h, g, u, N, F, 2F), up to the GEMM's order of accumulation. NULL where a backend
     * has none (the caller runs those two); the CUDA backend's runs SwiGLU in the GEMM's epilogue
     * (kernels/cuda/gemm_wg.cu) where it can. */
    void (*gemm_swiglu)(dx_backend *be, void *gu, void *h, const void *x, const void *W, int N, int F,
                        int K);
    /* Its backward through the down projection: dh[N,F] = dy[N,K] W[K,F] (W = down_proj, HF
     * layout [hidden, intermediate]) rounded to X, then dg, du as swiglu_bwd(dg, du, dh, g, u, N, F,
     * 2F) into dgu = dg | du (rows 2F apart) from gu = g | u (rows 2F apart): the same results
     * as gemm(0,0, N,F,K, 1, dy,K, W,F, 0, dh,F) then that swiglu_bwd, up to the GEMM's order of
     * accumulation. dh: [N,F] scratch, written or not (the CUDA backend's fused kernel never
     * stores dh). NULL where a backend has none. */
    void (*gemm_swiglu_bwd)(dx_backend *be, void *dgu, void *dh, const void *dy, const void *W, const void *gu,
                            int N, int F, int K);

    /* RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm):
     *   rstd[i] = 1 / sqrt(mean_j x[i,j]^2 + eps) ;  y[i,j] = w[j] * (x[i,j] * rstd[i])
     * y X[N,D], rstd A[N], x X[N,D], w X[D]. */
    void (*rmsnorm_fwd)(dx_backend *be, void *y, void *rstd, const void *x, const void *w,
                        int N, int D, float eps);
    /* Backward of rmsnorm_fwd. With xh = x * rstd and g = dy * w:
     *   dx[i,:] (+=) rstd[i] * (g - xh * mean_j(g[i,j] * xh[i,j])) ;  dw (+=) sum_i dy * xh
     * dx X[N,D] (+=, the residual stream's gradient), dw A[D] (+=), dy X[N,D]. */
    void (*rmsnorm_bwd)(dx_backend *be, void *dx, void *dw, const void *dy, const void *x,
                        const void *w, const void *rstd, int N, int D);

    /* Rotary position embedding (Su et al. 2021, RoFormer), HF "rotate_half" convention, in
     * place on x X[B,T,H,Dh] (Dh even) whose tokens are rows of `ld` elements (ld >= H*Dh; the
     * heads are the row's first H*Dh elements, e.g. the K block of a fused K|V GEMM output),
     * position of token t = t:
     *   for i < Dh/2: f = t * theta^(-2i/Dh); (a, b) = (x[i], x[i+Dh/2])
     *   x[i] = a cos f - b sin f ; x[i+Dh/2] = b cos f + a sin f
     * rope_bwd applies the inverse rotation (the transpose) in place to the gradient. */
    void (*rope_fwd)(dx_backend *be, void *x, int ld, int B, int T, int H, int Dh, float theta);
    void (*rope_bwd)(dx_backend *be, void *dx, int ld, int B, int T, int H, int Dh, float theta);
    /* The attention's fused Q|K|V projection and RoPE on q and k as one op:
     *   y[N,F] = x[N,K] W[F,K]^T with F = (H + 2 Hkv) Dh (q | k | v column blocks, W = q_proj,
     *   k_proj, v_proj rows; y rows F apart), then rope_fwd(y, F, N / T, T, H, Dh, theta) and
     *   rope_fwd(y + H Dh, F, N / T, T, Hkv, Dh, theta): N tokens, N a multiple of T, token n at
     *   position n % T; all X. The same results as those three ops up to the GEMM's order of
     * accumulation and q, k rounded to X once instead of twice (the CUDA backend rotates the fp32
     * accumulators in its GEMM's epilogue, kernels/cuda/gemm_wg.cu, where it can; elsewhere it
     * runs the three ops). NULL where a backend has none (the caller runs the three ops). */
    void (*gemm_rope)(dx_backend *be, void *y, const void *x, const void *W, int N, int F, int K, int T, int H,
                      int Hkv, int Dh, float theta);
    /* 1 where gemm_rope with these arguments runs as one fused kernel, else 0 (it would run the
     * three ops): callers trace a fused call as one GEMM and run the ops themselves otherwise, so
     * that a trace shows RoPE wherever it runs as its own pass. Reads nothing. NULL with
     * gemm_rope. */
    int (*gemm_rope_fused)(dx_backend *be, const void *y, const void *x, const void *W, int N, int F, int K, int T,
                           int H, int Hkv, int Dh);

    /* Causal scaled-dot-product attention with grouped-query heads (Ainslie et al. 2023): query
     * head h reads kv head h / (H / Hkv). s = q.k / sqrt(Dh), keys j <= i only;
     *   lse[b,h,i] = log sum_j exp(s_ij) ;  o[b,i,h,:] = sum_j exp(s_ij - lse) v[b,j,h',:]
     * q X[B,T,H,Dh] with tokens as rows of `ldq` elements (ldq >= H*Dh: H*Dh for a dense
     * tensor, H*Dh + 2*Hkv*Dh when q, k and v are the column blocks of one fused Q|K|V GEMM
     * output); o X[B,T,H,Dh] (dense), lse A[B,H,T]; k, v X[B,T,Hkv,Dh] with tokens as rows of
     * `ldkv` elements (ldkv >= Hkv*Dh: Hkv*Dh for dense tensors, 2*Hkv*Dh for the two column
     * blocks of a fused K|V output, ldq for a fused Q|K|V one). No T x T matrix is kept.
     * (CUDA: ldq and ldkv multiples of 8 and every tensor pointer 16-byte aligned for the
     * tensor-core kernels; otherwise a slower scalar kernel runs.) */
    void (*attention_fwd)(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                          const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh);
    /* Backward (FlashAttention-2 form, Dao 2023): with p_ij = exp(s_ij - lse_i),
     * D_i = do_i . o_i, dp_ij = do_i . v_j, ds_ij = p_ij (dp_ij - D_i):
     *   dq_i = sum_j ds_ij k_j / sqrt(Dh) ; dk_j = sum_i ds_ij q_i / sqrt(Dh) ; dv_j = sum_i p_ij do_i
     * summing over the query heads of each kv group for dk, dv. dq, dk, dv overwritten; dq has
     * q's row stride ldq, dk and dv the row stride ldkv of k and v (the rest of their rows is
     * left as it is: dq, dk and dv may be the column blocks of one fused buffer). */
    void (*attention_bwd)(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                          const void *q, const void *k, const void *v, const void *o,
                          const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh);
    /* attention_bwd, then rope_bwd(dq, ldq, B, T, H, Dh, theta) and rope_bwd(dk, ldkv, B, T,
     * Hkv, Dh, theta) in one op: dq and dk are the gradients of q and k before RoPE (the
     * rotation folded into the kernels' last writes, so dq and dk are rounded to bf16 once).
     * Same arguments and layouts as attention_bwd, plus RoPE's theta (> 0). NULL where the
     * backend has no such fold; the caller then runs the three ops. */
    void (*attention_bwd_rope)(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                               const void *q, const void *k, const void *v, const void *o,
                               const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv,
                               int Dh, float theta);

    /* SwiGLU (Shazeer 2020): h = silu(g) * u, silu(g) = g / (1 + exp(-g)); h X[N,F] dense;
     * g, u X[N,F] with rows of `ld` elements (ld >= F: F for dense tensors, 2F when g and u are
     * the column blocks of one fused gate|up GEMM output [N, 2F]). */
    void (*swiglu_fwd)(dx_backend *be, void *h, const void *g, const void *u, int N, int F, int ld);
    /* dg = dh * u * s (1 + g (1 - s)), du = dh * silu(g), s = sigmoid(g); dh X[N,F] dense; dg,
     * du (overwritten; the rest of their rows is left as it is), g, u with row stride ld. */
    void (*swiglu_bwd)(dx_backend *be, void *dg, void *du, const void *dh, const void *g,
                       const void *u, int N, int F, int ld);

    /* out X[N,D] = table X[V,D] rows ids int32[N]. */
    void (*embedding_fwd)(dx_backend *be, void *out, const int32_t *ids, const void *table,
                          int N, int D);
    /* dtable A[V,D] (+=) rows ids of dout X[N,D]. */
    void (*embedding_bwd)(dx_backend *be, void *dtable, const void *dout, const int32_t *ids,
                          int N, int D);

    /* Softmax cross-entropy over logits X[N,V] against targets int32[N] (target < 0: ignored,
     * adds no loss and no gradient), computed in fp32 (the row's loss in fp64):
     *   loss_i = logsumexp(logits_i) - logits_i[t_i] ;  loss_sum A[1] (+=) sum_i loss_i
     *   dlogits X[N,V] = dscale * (softmax(logits_i) - onehot(t_i))   (if dlogits != NULL)
     * dlogits may alias logits (the model overwrites the logits with their gradient, as
     * Megatron-LM's fused cross-entropy does; logits in bf16 as under PyTorch's autocast). */
    void (*cross_entropy)(dx_backend *be, void *loss_sum, void *dlogits, const void *logits,
                          const int32_t *targets, int N, int V, float dscale);

    /* ---- tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", sec. 3) ---- */
    /* Vocab-parallel embedding (Megatron-LM's VocabParallelEmbedding): this rank holds rows
     * [v0, v0 + Vl) of the table. out X[N,D]: row i = table[ids[i] - v0] if v0 <= ids[i] <
     * v0 + Vl, else zeros (the caller sums the partial rows over the TP group). table X[Vl,D],
     * ids int32[N]. */
    void (*embedding_vp_fwd)(dx_backend *be, void *out, const int32_t *ids, const void *table,
                             int N, int D, int v0, int Vl);
    /* dtable A[Vl,D] (+=) the rows of dout X[N,D] whose ids fall in [v0, v0 + Vl) (at row
     * ids[i] - v0); other rows are skipped. ids int32[N]. */
    void (*embedding_vp_bwd)(dx_backend *be, void *dtable, const void *dout, const int32_t *ids,
                             int N, int D, int v0, int Vl);
    /* Vocab-parallel cross-entropy, part 1 (Megatron-LM's VocabParallelCrossEntropy; here with
     * per-slice log-sum-exps instead of an all-reduced max). This rank holds logits X[N,Vl] of
     * vocab ids [v0, v0 + Vl); targets int32[N] hold global vocab ids (< 0: ignored). stats
     * A[N,2] (overwritten): stats[i,0] = logsumexp_j logits[i,j] over the slice; stats[i,1] =
     * logits[i, targets[i] - v0] if the target is in the slice, else 0. The caller all-gathers
     * stats over the TP group (rank order) into A[tp,N,2]. */
    void (*ce_vp_stats)(dx_backend *be, void *stats, const void *logits, const int32_t *targets,
                        int N, int Vl, int v0);
    /* Part 2, from every slice's stats gathered A[tp,N,2]: lse_i = logsumexp_r gathered[r,i,0],
     * tl_i = sum_r gathered[r,i,1];
     *   loss_sum A[1] (+=) sum over rows with targets[i] >= 0 of (lse_i - tl_i) (if not NULL)
     *   dlogits X[N,Vl] = dscale (exp(logits[i,j] - lse_i) - [j == targets[i] - v0]) (if not
     *   NULL; rows with targets[i] < 0 get zeros).
     * Every TP rank adds the whole loss; the slices' dlogits, side by side, are cross_entropy's
     * on the full logits. dlogits may alias logits. */
    void (*ce_vp_finish)(dx_backend *be, void *loss_sum, void *dlogits, const void *logits,
                         const void *gathered, int tp, const int32_t *targets, int N, int Vl,
                         int v0, float dscale);

    /* y = a + b, all X[n]; y may alias a or b. */
    void (*add)(dx_backend *be, void *y, const void *a, const void *b, size_t n);

    /* QLoRA's dequantization (kernels/nf4.h's format; Dettmers et al. 2023): out X[n] element i
     * = dx_nf4_code[k_i] * (fp8_e4m3(absmax8[i / 64]) * scale[i / (64 * 256)] + offset), k_i the
     * 4-bit index in idx[i / 2] (even i: the high nibble), the products and the sum each rounded
     * to fp32 (no fused multiply-add), then to X. idx uint8[(n + 1) / 2], absmax8
     * uint8[ceil(n / 64)], scale fp32[ceil(n / 16384)]: backend memory. */
    void (*nf4_dequantize)(dx_backend *be, void *out, const uint8_t *idx, const uint8_t *absmax8,
                           const float *scale, float offset, size_t n);

    /* Inverted dropout (Srivastava et al. 2014; PyTorch's nn.Dropout in training): y X[N,F] =
     * x X[N,F] / (1 - p) where element (i, j) is kept, 0 elsewhere; kept when
     * dx_dropout_keep(stream, (row0 + i) * row_len + col0 + j, dx_dropout_threshold(p)), so the
     * mask of an element depends on its global (row, column) alone: the same under any split of
     * the rows or columns over ranks. 0 <= p < 1; y may alias x. */
    void (*dropout)(dx_backend *be, void *y, const void *x, int N, int F, float p, uint64_t stream,
                    uint64_t row0, uint64_t row_len, uint64_t col0);

    /* AdamW step on n elements (see dx_adamw_hparams): master, grad, m, v A[n] (master, m, v
     * updated in place); work X[n] (may be NULL) receives the updated master cast to X. */
    void (*adamw)(dx_backend *be, void *master, void *work, const void *grad, void *m, void *v,
                  size_t n, const dx_adamw_hparams *hp);

    /* out A[1] (+=) sum_i x[i]^2, x A[n]. */
    void (*sumsq)(dx_backend *be, void *out, const void *x, size_t n);

    /* x A[n] *= s. */
    void (*scale)(dx_backend *be, void *x, size_t n, float s);

    /* dst X[n] = (X) src A[n]. */
    void (*acc_to_act)(dx_backend *be, void *dst, const void *src, size_t n);

    /* dst A[n] += (A) src X[n] (X -> A is exact: bf16 -> fp32, or a copy where X == A). The
     * ZeRO gradient shard accumulating a reduce-scatter done in X (DX_ZERO_REDUCE_ACT). */
    void (*acc_add_act)(dx_backend *be, void *dst, const void *src, size_t n);

    /* ---- timing marks, for traces (NULL on backends whose ops finish before returning) ---- */
    /* Records a timestamp in stream order on `stream` (NULL: the compute stream; otherwise a
     * cudaStream_t of the same device, e.g. NCCL's); returns its id (ids count up from the
     * number of marks resolve_marks kept pending) or -1 if it could not be recorded. */
    int (*mark)(dx_backend *be, void *stream);
    /* Waits for the compute stream's work queued so far (wait_all: for every mark, too) and
     * returns, for each mark id < the returned count, (*ns)[id] >= 0: its time in
     * CLOCK_MONOTONIC nanoseconds, or (*ns)[id] < 0 if it has not completed yet (a mark on
     * another stream, e.g. after a collective that overlaps the next step): it is kept under
     * the new id -1 - (*ns)[id], to be resolved by a later call. Resolved ids are reused. The
     * array is owned by the backend, valid until the next call. -1 + dx_fail on error. */
    int (*resolve_marks)(dx_backend *be, int wait_all, const int64_t **ns);
    /* Takes the host-time reference for the next resolve_marks now: waits for the compute
     * stream's work queued so far and reads the host clock. That resolve_marks (wait_all 0) then
     * waits for nothing and converts the marks completed by then, those recorded since the
     * anchor too, so that the conversion (microseconds per mark) can run while the GPU works on
     * later work. Optional (NULL: resolve_marks takes its own). 0, or -1 + dx_fail. */
    int (*anchor_marks)(dx_backend *be);

    /* ---- stopwatch (NULL where ops finish before returning: time them with the host clock) ----
     * Times stretches of the compute stream's work without the host waiting between them (the
     * worker's forward and backward times per micro-batch).
     * stamp(slot): records the compute stream's position so far (also between side_begin and
     * side_end) as `slot` (>= 0; slots are created as needed; recording a slot again moves it);
     * 0, or -1 + dx_fail.
     * stamp_seconds(a, b, &s): *s = seconds from slot a's position to slot b's (CUDA events,
     * resolution about 0.5 us; negative if b ran first), once both have completed (call after
     * sync); 0, or -1 + dx_fail if a slot was never recorded or has not completed. */
    int (*stamp)(dx_backend *be, int slot);
    int (*stamp_seconds)(dx_backend *be, int a, int b, double *s);

    /* ---- the device's energy and power-limit counters (optional: NULL where there are none,
     * as on the CPU backends) ----
     * *energy_j = the energy the device has drawn since an origin of the driver's (J, from
     * NVML's nvmlDeviceGetTotalEnergyConsumption, in mJ), *power_capped_s = the time since an
     * origin of the driver's during which the power limit held the device's clocks down (s,
     * NVML's nvmlDeviceGetViolationStatus for NVML_PERF_POLICY_POWER, in ns): cumulative, so a
     * stretch of work is the difference of two calls. The counters cover the whole device (other
     * processes' work on it included). CUDA: a helper thread reads them every 20 ms (a reading
     * takes milliseconds of host time) and a call returns its latest sample without waiting, so
     * a value is up to ~25 ms old and a difference over a short stretch is coarse (the first call
     * waits for the first sample). 0, or -1 + dx_fail when NVML (libnvidia-ml.so.1, loaded at the
     * first call) or a counter is not available; the first failure is final. */
    int (*power_counters)(dx_backend *be, double *energy_j, double *power_capped_s);

    /* Releases the backend and everything it holds. */
    void (*destroy)(dx_backend *be);
};

/* Copies in flight at most on a backend's copy streams (see download_async). */
#define DX_COPY_TICKETS 64

/* AdamW for offloaded optimizer states (ZeRO-Offload's CPU-Adam, Ren et al. 2021), in host
 * memory: master, m, v f32[n] updated in place from grad f32[n] (scaled by hp->grad_scale), and
 * the updated master written to out[n] in dtype out_dt (DX_F32, DX_F64, or DX_BF16 rounded to
 * nearest even, as the CUDA backend's conversion). fp32 arithmetic in the expression order of
 * the CPU backend's adamw op (dx_adamw_hparams), so on the CPU backend the result is bitwise the
 * non-offloaded update (the CUDA op computes in fp64: equal to fp32 rounding). Vectorised (omp
 * simd) and split statically over nthreads OpenMP threads (>= 1); bitwise the same for any
 * thread count. */
void dx_host_adamw(float *master, float *m, float *v, const float *grad, void *out, dx_dtype out_dt,
                   size_t n, const dx_adamw_hparams *hp, int nthreads);

/* Repairs a speculative dx_host_adamw (zero.c: the early update with clipping on, run with
 * gradient factor 1 before the global norm was known): master, m, v f32[n] hold the result of
 * dx_host_adamw with these hp but grad_scale 1 on grad f32[n] (the same gradient, unscaled);
 * each element's update is undone (the step's subtrahend recomputed bitwise from m and v and
 * added back, the decay divided out, m and v solved for their previous values, in fp64; v
 * clamped at 0) and redone with hp->grad_scale, the result written to out[n] as dx_host_adamw
 * writes it. The undone values equal the previous ones exactly or within about one fp32 ulp
 * (what the stored results had rounded away), so the repaired update equals the direct one
 * within a few ulps, not bitwise. Needs beta1, beta2 and 1 - lr * weight_decay nonzero (the
 * divisors). Threads as dx_host_adamw. */
void dx_host_adamw_redo(float *master, float *m, float *v, const float *grad, void *out, dx_dtype out_dt,
                        size_t n, const dx_adamw_hparams *hp, int nthreads);

/* out[n] (host) = src[n] converted to out_dt (DX_F32, DX_F64, or DX_BF16 rounded to nearest
 * even, as dx_host_adamw writes it): the host-resident working parameters of ZeRO-3 parameter
 * offload (zero.c). */
void dx_host_convert_f32(void *out, dx_dtype out_dt, const float *src, size_t n);

/* CPU backends. nthreads >= 1 sets OpenMP and OpenBLAS threads. Return NULL + dx_fail. */
dx_backend *dx_backend_cpu_create(int nthreads);   /* act = acc = f32 */
dx_backend *dx_backend_cpu64_create(int nthreads); /* act = acc = f64 */

/* Reads one acc-dtype (A) scalar from backend memory into a host double, at full precision
 * (f64 on cpu64, f32 elsewhere). Returns 0 or -1 + dx_fail. */
int dx_read_acc_scalar(dx_backend *be, const void *p, double *out);

/* Shared helper for backends: updates be->mem after an allocation (+bytes) or free (-bytes). */
void dx_mem_account(dx_mem_stats *s, dx_mem_cat cat, long long delta);

#endif
