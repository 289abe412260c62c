/* dissect CUDA backend: declarations shared by the .cu files of kernels/cuda (not a public
 * header; the public one is cuda_backend.h). */
#ifndef DX_CUDA_INTERNAL_CUH
#define DX_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "common/common.h"
#include "kernels.h"
}
#include "cuda_backend.h"

typedef __nv_bfloat16 bf16;

/* One live allocation: open-addressing hash table slot (p == NULL: empty). */
struct dxc_slot {
    void *p;
    size_t bytes;
    int cat;
};

struct dxc_impl {
    int device;
    int num_sms;
    int smem_optin;     /* max dynamic shared memory per block (bytes) */
    int l2_bytes;       /* L2 cache size (bytes) */
    int sync_each_op;   /* DX_CUDA_SYNC=1: synchronise and check after every op */
    int attn_simple;    /* DX_CUDA_ATTENTION=simple: CUDA-core attention kernels only */
    int attn_det;       /* DX_CUDA_DETERMINISTIC=1: two-kernel attention backward (no atomics) */
    int attn_fwd_var;   /* DX_CUDA_ATT_FWD / _BWD = i: tile-shape variant i of the tensor-core */
    int attn_bwd_var;   /* attention kernels (attention_mma.cu; 0 = the default, for tuning) */
    int attn_grid;      /* DX_CUDA_ATT_GRID = n > 0: the persistent attention forward's grid capped
                           at n blocks (tests: several work tiles per block at small shapes) */
    int attn_chunk;     /* DX_CUDA_ATT_CHUNK = n: att_bwd_wg's launch order in chunks of n (b, kv
                           head) pairs (n > 0, forced), none (0), or chosen per shape (-1, unset) */
    int attn_skip;      /* DX_CUDA_ATT_SKIP (timing only; bits 0 and 1 make results wrong): bit
                           0 leaves out the tensor-core backward's D = do . o pass (D zeroed
                           instead), bit 1 its separate dq conversion pass (dq left as it was;
                           either changes the data downstream, so what it gives a step is not
                           the pass's cost); bit 2 runs the dq pass twice, bit 3 the D pass
                           twice: each pass's cost in a step with the data unchanged
                           (benchmarks/NOTES.md items 35, 36) */
    long chunk_key[5];  /* the shape (B Hkv, key tiles, T, G, Dh) att_bwd_wg's chunk was chosen for */
    int chunk_val;      /* and that chunk (attention_mma.cu: bwd_wg_chunk) */
    int wgmma;          /* compute capability 9.x: the sm_90a kernels (wgmma) can run */
    int swiglu_gemm;    /* DX_CUDA_SWIGLU_GEMM=0 clears it: gemm_swiglu as cuBLAS + swiglu_fwd */
    int rope_gemm;      /* DX_CUDA_ROPE_GEMM=0 clears it: gemm_rope as cuBLAS + rope_fwd */
    int gemm_wg_ep;     /* DX_GEMM_WG_EP (gemm_wg.cu's timing variants; 0 = the kernels as they are) */
    int gemm_wg_smem;   /* gemm_wg.cu's kernels whose shared-memory limit is set on this device
                           (bit 0 forward, bit 1 backward, bits 2 and 3 gemm_rope at head dims 64, 128) */
    int rope_fold;      /* be->attention_bwd_rope set (RoPE's backward in att_bwd_wg's dk
                           epilogue and its dq conversion); on unless DX_CUDA_ROPE_FOLD=0 */
    cudaStream_t stream; /* where ops run: the compute stream, or side_stream between
                            be->side_begin and be->side_end */
    /* the side stream (kernels.h: side_begin ...): AdamW overlapping the next forward */
    cudaStream_t compute_stream; /* the compute stream while `stream` is the side stream */
    cudaStream_t side_stream;    /* created at the first side_begin */
    cudaEvent_t side_start;      /* compute-stream position the side stream starts after */
    cudaEvent_t *side_ev;        /* [side_nev]: positions recorded by side_record, per slot */
    int side_nev;
    cudaEvent_t *stamp_ev;       /* [stamp_nev]: the stopwatch's slots (be->stamp), timing events */
    int stamp_nev;
    /* the overlap stream (kernels.h: overlap_begin ...): a memory-bound op beside a GEMM */
    cudaStream_t aux_stream;     /* created at the first overlap_begin (highest priority) */
    cudaStream_t aux_saved;      /* the compute stream while `stream` is aux_stream */
    cudaEvent_t aux_fork, aux_done;
    int aux_sms;                 /* > 0 from overlap_begin to overlap_join: the SMs left to it */
    int side_grid;               /* DX_CUDA_SIDE_BLOCKS: most blocks of an AdamW launch on the side
                                    stream (0: as on the compute stream) */
    /* CPU offload copies: device-to-host [0] and host-to-device [1] streams, and a ring of
     * DX_COPY_TICKETS events, one per copy in flight (ticket t uses event t % DX_COPY_TICKETS) */
    cudaStream_t copy_stream[2];
    cudaEvent_t copy_ev[DX_COPY_TICKETS];
    cudaEvent_t copy_before; /* compute-stream position a copy starts after */
    cudaEvent_t fence_ev[DX_COPY_TICKETS]; /* compute-stream positions (be->fence), reused in turn */
    int fence_next;
    int copy_next;           /* next ticket */
    cublasHandle_t blas;
    void *blas_ws;      /* cuBLAS workspace (via the backend allocator), also cuBLASLt's */
    size_t blas_ws_bytes;
    int gemm_sms;       /* DX_CUDA_GEMM_SMS: SM count target of the GEMMs (0: all) */
    cublasLtHandle_t lt; /* gemm_res: cuBLASLt (its output may be a matrix other than its C) */
    struct dxc_lt_plan *lt_plans; /* descriptors and algorithm per GEMM shape, looked up once */
    int lt_nplans, lt_off; /* DX_CUDA_GEMM_RES=0: gemm_res as a copy and a cuBLAS GEMM */
    int lt_tile;           /* DX_CUDA_GEMM_TILE (default 1): cuBLASLt's 256 x 128 tile preferred */
    double lt_gemm_min;    /* cuda_gemm through cuBLASLt from this many multiply-adds (INFINITY: never) */
    dxc_slot *slots;    /* live allocations */
    size_t cap, count;
    void *scratch;      /* op workspace, grown on demand (stream-ordered reuse) */
    size_t scratch_bytes;
    float *rope_tab;    /* cos [rope_T][Dh/2] then sin [rope_T][Dh/2] */
    int rope_T, rope_Dh;
    float rope_theta;
    struct dxc_nvml *nvml; /* power.cu: NVML, loaded at the first power_counters call */
};

static inline dxc_impl *dxc(dx_backend *be) { return (dxc_impl *)be->impl; }

/* dg = dh u s (1 + g (1 - s)), du = dh silu(g) = dh (g s), s = sigmoid(g), the reciprocal as in
 * swiglu_h (swiglu_bwd, and gemm_wg.cu's fused backward) */
static __device__ __forceinline__ void swiglu_d(float dh, float g, float u, float &dg, float &du)
{
    const float s = __fdividef(1.0f, 1.0f + __expf(-g));
    dg = dh * u * s * (1.0f + g * (1.0f - s));
    du = dh * (g * s);
}

/* gemm_wg.cu: the gate|up GEMM with SwiGLU in its epilogue (kernels.h gemm_swiglu), g and u rows
 * ldgu apart, h rows ldh apart. Enqueues it and returns 0, or returns 1 (nothing enqueued, no
 * error set) where it does not apply: no sm_90a kernels, F, K or a row stride not a multiple of
 * 8, a pointer not 16-byte aligned, or no tensor-map encoder from the driver. */
int dxc_gemm_swiglu(dx_backend *be, void *g, void *u, int ldgu, void *h, int ldh, const void *x, int ldx,
                    const void *w, int ldw, int M, int F, int K);
/* gemm_wg.cu: y[M,F] = x[M,K] w[F,K]^T with RoPE (kernels.h rope_fwd, position = row % T, head
 * dim Dh 64 or 128) applied to the columns below R (a multiple of Dh: q's and k's heads of a fused
 * Q|K|V output) in the epilogue, before the one rounding to bf16; rows ldx, ldw, ldy apart.
 * Enqueues it and returns 0, or returns 1 where it does not apply (as dxc_gemm_swiglu; also Dh
 * not 64 or 128, R not a multiple of Dh or past F). */
int dxc_gemm_rope(dx_backend *be, void *y, int ldy, const void *x, int ldx, const void *w, int ldw, int M, int F, int K,
                  int T, int R, int Dh, float theta);
/* 1 where dxc_gemm_rope applies to these arguments (it may still return 1 if the driver's encoder
 * refuses a tensor map), else 0; nothing enqueued. */
int dxc_gemm_rope_fits(dx_backend *be, const void *y, int ldy, const void *x, int ldx, const void *w, int ldw, int M,
                       int F, int K, int T, int R, int Dh);
/* Its backward through the down projection: dh = dy[M,K] w[K,F] (w = down_proj, row stride ldw)
 * rounded to bf16, then dg, du = swiglu_bwd(dh, g, u) in the epilogue (dh is never stored); g, u,
 * dg, du rows ldgu apart. Enqueues it and returns 0, or returns 1 where it does not apply (as
 * dxc_gemm_swiglu). */
int dxc_gemm_swiglu_bwd(dx_backend *be, void *dg, void *du, const void *g, const void *u, int ldgu, const void *dy,
                        int ldy, const void *w, int ldw, int M, int F, int K);

/* power.cu: kernels.h power_counters (NVML through dlopen, loaded at the first call), and its
 * release at destroy (NULL nvml: nothing to do). */
int dxc_power_counters(dx_backend *be, double *energy_j, double *power_capped_s);
void dxc_power_release(dx_backend *be);

/* h = silu(g) u, silu(g) = g sigmoid(g) = g / (1 + exp(-g)), with __expf (error 2 + 1.2 |g| ulp
 * of fp32) and the approximate reciprocal of __fdividef (2 ulp; 1 / inf = 0, so silu(g) -> -0 for
 * g < -88), far below the bf16 rounding of the result. The same function in swiglu_fwd and
 * gemm_wg.cu's fused epilogue, where the IEEE division's ~15 instructions cost tensor-core time. */
static __device__ __forceinline__ float swiglu_h(float g, float u)
{
    return g * __fdividef(1.0f, 1.0f + __expf(-g)) * u;
}

/* 2^x (MUFU.EX2, relative error ~2^-22; -inf -> +0): the attention kernels' softmax and
 * k_xent8's exponentials */
static __device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Prints "dissect cuda backend: <op>: <file>:<line>: <what>: <msg>" to stderr and aborts. */
[[noreturn]] void dxc_die(const char *op, const char *file, int line, const char *what,
                          const char *msg);

#define DXC_CHECK(op, call)                                                                    \
    do {                                                                                       \
        cudaError_t dxc_e_ = (call);                                                           \
        if (dxc_e_ != cudaSuccess)                                                             \
            dxc_die(op, __FILE__, __LINE__, #call, cudaGetErrorString(dxc_e_));                \
    } while (0)

#define DXC_BLAS(op, call)                                                                     \
    do {                                                                                       \
        cublasStatus_t dxc_s_ = (call);                                                        \
        if (dxc_s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            dxc_die(op, __FILE__, __LINE__, #call, cublasGetStatusString(dxc_s_));             \
    } while (0)

/* After every kernel launch: reports launch errors (bad configuration, too much shared
 * memory...) at once; with DX_CUDA_SYNC=1 also waits for the kernel and reports faults. */
#define DXC_LAUNCHED(be, op)                                                                   \
    do {                                                                                       \
        DXC_CHECK(op, cudaGetLastError());                                                     \
        if (dxc(be)->sync_each_op) DXC_CHECK(op, cudaStreamSynchronize(dxc(be)->stream));      \
    } while (0)

/* Declares the launch's dynamic shared memory as an array `T name[]` (a macro so that a
 * host-side simulator of the kernels can provide it). */
#ifndef DXC_DYNAMIC_SMEM
#define DXC_DYNAMIC_SMEM(T, name) extern __shared__ T name[]
#endif

/* Makes the backend's device current (cheap when it already is). */
#define DXC_ENTER(be, op) DXC_CHECK(op, cudaSetDevice(dxc(be)->device))

/* Workspace of at least `bytes` for op `op`, valid until the next call on this backend
 * (every op runs in stream order, so reuse by the next op is safe). Aborts if out of memory. */
void *dxc_scratch(dx_backend *be, size_t bytes, const char *op);

/* Sets the maximum dynamic shared memory of `func` and checks it fits on the device. */
void dxc_set_smem(dx_backend *be, const void *func, size_t bytes, const char *op);

/* attention.cu (entry points; dispatch to the tensor-core kernels or the CUDA-core ones) */
/* (the backend's attention_fwd / attention_bwd, kernels.h: q, dq rows ldq apart; k, v, dk, dv
 * rows ldkv apart) */
void dxc_attention_fwd(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                       const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh);
/* rope_theta != 0: dq and dk come out multiplied by RoPE's inverse rotation (the backend's
 * attention_bwd_rope); 0: attention_bwd */
void dxc_attention_bwd(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                       const void *q, const void *k, const void *v, const void *o,
                       const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh,
                       float rope_theta);

/* RoPE (cuda_backend.cu). dxc_rope_table: the cached cos / sin table of positions 0..T-1 or more
 * for Dh and theta (rebuilt when either changes or T grows): cos of position t, pair i < Dh/2 at
 * [t * Dh/2 + i], sin at [*sin_off + t * Dh/2 + i]; valid until the next call with another Dh,
 * theta or a larger T. dxc_rope_apply: the backend's rope_fwd (dir 1) or rope_bwd (dir -1). */
const float *dxc_rope_table(dx_backend *be, int T, int Dh, float theta, size_t *sin_off,
                            const char *op);
void dxc_rope_apply(dx_backend *be, void *x, int ld, int B, int T, int H, int Dh, float theta,
                    float dir, const char *op);

/* The ints att_bwd_wg keeps after dq's accumulator for ntile tiles (b, h, 64 queries) of head
 * dimension Dh: per tile a count of completed contributions, per 64 x 64 piece a claim count and
 * a "first contribution written" flag (attention_mma.cu: att_bwd_wg's mode bits 3 and 4). */
static inline size_t dxc_dq_cnt_ints(size_t ntile, int Dh) { return ntile * (1 + 2 * (size_t)((Dh + 63) / 64)); }
/* Floats of dxc_attention_bwd_mma's dq_acc: B H ceil(T / 64) tiles of 64 x Dh fp32 (queries
 * padded for att_bwd_wg's tiles), then dxc_dq_cnt_ints counters (4 bytes each). */
static inline size_t dxc_dq_acc_floats(int B, int T, int H, int Dh)
{
    const size_t ntile = (size_t)B * H * ((T + 63) / 64);
    return ntile * 64 * (size_t)Dh + dxc_dq_cnt_ints(ntile, Dh);
}

/* attention_mma.cu (tensor cores; Dh in {32, 64, 128}, all bf16 pointers 16-byte aligned;
 * Dv = the D vector of the backward, laid out like lse; dq_acc = fp32 workspace of
 * dxc_dq_acc_floats floats, 16-byte aligned, for the fused backward's dq accumulation;
 * ldq % 8 == 0, ldkv % 8 == 0) */
void dxc_attention_fwd_mma(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                           const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh);
/* rope_tab (NULL: none; else dxc_rope_table's, sin_off its sine offset): dq and dk rotated back
 * inside the kernels where the path allows; returns 1 when it did, 0 when dq and dk still need
 * rope_bwd */
int dxc_attention_bwd_mma(dx_backend *be, void *dq, void *dk, void *dv, float *dq_acc,
                          const void *dout, const void *q, const void *k, const void *v,
                          const float *lse, const float *Dv, int ldq, int ldkv, int B, int T,
                          int H, int Hkv, int Dh, const float *rope_tab, size_t sin_off);

#endif
