/* dissect CUDA backend: act (X) = bf16, acc (A) = f32.
 *
 * Implements every entry of the dx_backend vtable (kernels/kernels.h) on one CUDA device, with
 * the semantics of the CPU twin (kernels/cpu/cpu_ops.c). Built only when meson finds nvcc,
 * cudart, cuBLAS and cuBLASLt (option -Dcuda=auto|enabled|disabled); the core is then compiled
 * with -DDX_HAVE_CUDA=1.
 *
 * Execution: the backend owns one non-blocking compute stream. Every math op, zero and copy is
 * enqueued asynchronously on that stream and returns at once; `sync` waits for the stream.
 * upload / upload_f32 / download / download_f32 are synchronous: they return once the host
 * buffer may be reused (downloads: once the data is on the host), after all previously queued
 * work. `free` waits for the stream before releasing memory, so a buffer may be freed right
 * after enqueuing the last op that reads it.
 *
 * Errors: alloc and the transfer functions return NULL / -1 with dx_fail() set. The math ops
 * have no error return: a failing CUDA / cuBLAS call or kernel launch prints the op, file, line
 * and CUDA error to stderr and aborts. Kernels run asynchronously, so a fault inside a kernel
 * is reported by a later call; set DX_CUDA_SYNC=1 in the environment to synchronise after every
 * op and name the faulting op (slow; for debugging).
 *
 * Attention runs on tensor cores (mma.sync, FlashAttention-2 style; P and dS rounded to bf16
 * as mma operands) when its bf16 pointers are 16-byte aligned; DX_CUDA_ATTENTION=simple
 * selects the CUDA-core kernels instead (fp32 throughout; slower; a reference for debugging).
 * gemm_swiglu runs the gate|up GEMM with SwiGLU in its epilogue on Hopper, gemm_swiglu_bwd the
 * down projection's input-gradient GEMM with SwiGLU's backward in its epilogue (gemm_wg.cu,
 * below); DX_CUDA_SWIGLU_GEMM=0 selects cuBLAS's GEMMs and swiglu_fwd / swiglu_bwd instead.
 * gemm_rope runs the fused Q|K|V projection with RoPE on q and k in its epilogue on Hopper at
 * head dims 64 and 128 (gemm_wg.cu; gemm_rope_fused says where); DX_CUDA_ROPE_GEMM=0 selects
 * cuBLAS's GEMM and rope_fwd instead.
 * DX_CUDA_GEMM_SMS=n (0 < n < the device's SM count) has cuBLAS plan its GEMMs for n SMs
 * (cublasSetSmCountTarget), leaving the others to kernels that run beside them, such as NCCL's.
 *
 * Memory: device memory from cudaMalloc (never managed memory), 256-byte aligned. be->mem
 * counts the bytes requested through alloc per category, and also the backend's own buffers:
 * the cuBLAS workspace (DX_MEM_OTHER) and the op workspaces grown on demand (attention D
 * vector and fp32 dq accumulator, reduction partials, RoPE cos/sin table: DX_MEM_ACTIVATIONS);
 * those stay allocated until destroy.
 *
 * Determinism: all ops give bitwise-identical results run to run on the same device and shapes,
 * except embedding_bwd and embedding_vp_bwd, which add rows into dtable with fp32 atomics (rows with repeated ids
 * are summed in an unspecified order; differences are in the last bits), attention_bwd's dq on
 * the tensor-core path, accumulated over key tiles with fp32 atomics (FlashAttention-2's form;
 * DX_CUDA_DETERMINISTIC=1 in the environment when the backend is created selects a two-kernel
 * backward that recomputes S and dP for dq in a fixed order instead, ~15% slower), and gemm, which is whatever cuBLAS
 * chooses (deterministic for a fixed handle, stream and shapes).
 */
#ifndef DX_CUDA_BACKEND_H
#define DX_CUDA_BACKEND_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA backend on device `device` (0-based index among the visible devices;
 * nthreads >= 1 host threads, used for host-side conversions only). Creates the compute stream
 * and the cuBLAS handle bound to it. Returns NULL + dx_fail() if there is no such device, no
 * driver, or a CUDA / cuBLAS call fails. Release with be->destroy(be). */
dx_backend *dx_backend_cuda_create(int device, int nthreads);

/* The backend's compute stream (a cudaStream_t), e.g. for NCCL calls that must be ordered with
 * the backend's ops. NULL if `be` is not a CUDA backend. */
void *dx_cuda_stream(dx_backend *be);

/* The SM count cuBLAS plans the compute stream's GEMMs for now (cublasGetSmCountTarget; 0: all
 * SMs): DX_CUDA_GEMM_SMS's when it was set at creation, or fewer between overlap_begin and
 * overlap_join (the SMs the overlap stream leaves, when smaller). -1 if `be` is not a CUDA
 * backend or cuBLAS fails. For tests. */
int dx_cuda_gemm_sm_target(dx_backend *be);

/* y[M,F] = x[M,K] W[F,K]^T (bf16, fp32 accumulation, rounded once) on our own Hopper GEMM
 * (gemm_wg.cu: the Q|K|V kernel with no column rotated; 128 x 256 tiles of y, two consumer
 * warpgroups on wgmma.m64n256k16), for benchmarks/wg_limit_probe.c, which times it against
 * cuBLASLt's plan at the power limit. Row strides ldy, ldx, ldw. Enqueued on the compute stream.
 * Needs compute capability 9.x, F, K and every stride multiples of 8, 16-byte aligned pointers;
 * otherwise -1 + dx_fail and nothing is enqueued. */
int dx_cuda_gemm_wg(dx_backend *be, void *y, int ldy, const void *x, int ldx, const void *w, int ldw, int M, int F,
                    int K);
/* The MLP's gate|up projection with SwiGLU fused into the GEMM's epilogue (gemm_wg.cu; what the
 * backend's gemm_swiglu runs where it applies; benchmarks/swiglu_gemm_bench.c times it alone):
 *   g[M,F] = x W[0:F]^T, u[M,F] = x W[F:2F]^T (bf16, fp32 accumulation, rounded once),
 *   h[M,F] = silu(g) u computed from the rounded g and u (as swiglu_fwd from stored ones),
 * x bf16 [M,K] (row stride ldx), W bf16 [2F,K] (gate rows then up rows, HF layout, row stride
 * ldw), g and u rows ldgu apart (u = g + F in the model's g | u buffer), h rows ldh apart.
 * Enqueued on the compute stream. Needs compute capability 9.x (wgmma, TMA), F, K and every row
 * stride multiples of 8, every pointer 16-byte aligned; otherwise -1 + dx_fail and nothing is
 * enqueued. DX_GEMM_WG_EP=2 in the environment when the backend is created leaves the epilogue
 * out (timing only; wrong results). */
int dx_cuda_gemm_swiglu(dx_backend *be, void *g, void *u, int ldgu, void *h, int ldh, const void *x, int ldx,
                        const void *w, int ldw, int M, int F, int K);
/* Its backward through the down projection (kernels.h gemm_swiglu_bwd, fused): dh = dy[M,K]
 * w[K,F] (w = down_proj, row stride ldw) rounded to bf16, then dg, du from dh, g, u as swiglu_bwd
 * computes them, all four rows ldgu apart; dh is never stored. Same requirements and errors. */
int dx_cuda_gemm_swiglu_bwd(dx_backend *be, void *dg, void *du, const void *g, const void *u, int ldgu,
                            const void *dy, int ldy, const void *w, int ldw, int M, int F, int K);

#ifdef __cplusplus
}
#endif

#endif
