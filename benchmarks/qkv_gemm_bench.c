/* The attention projections' GEMMs alone on the CUDA backend: Q and K|V as two GEMMs (as the model
 * runs them now) against one fused Q|K|V GEMM, for benchmarks/NOTES.md ("Next optimisations"):
 *
 *   qkv_gemm_bench N D HD KD [REPS]
 *
 * N tokens, hidden D, HD = heads x head dim (the Q block's width), KD = kv heads x head dim (each
 * of the K and V blocks). The calls are the model's (src/model/model.c linear_fwd / linear_bwd):
 *   forward   split: q[N,HD] = x W_q^T; kv[N,2KD] = x W_kv^T      fused: qkv[N,HD+2KD] = x W_qkv^T
 *   input gradient  split: dx = dq W_q; dx += dkv W_kv (beta 1)    fused: dx = dqkv W_qkv
 *   weight gradient split: dW_q = dq^T x; dW_kv = dkv^T x (fp32)   fused: dW_qkv = dqkv^T x (fp32)
 * All inputs ~ U(-1, 1) in bf16; one warm-up, then REPS (default 30) timed repetitions of each
 * case (CUDA events around the case's one or two GEMMs). Prints one JSON line per case:
 * {"case", "shape": [N, D, HD, KD], "ms" (median), "tflops"}. Exit 1 with a message on bad
 * arguments or when the GPU cannot be used.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "cuda/cuda_backend.h"
#include "kernels.h"
#include "bench_util.h"

#define AT(p, off) ((void *)((char *)(p) + (off)))

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: qkv_gemm_bench N D HD KD [REPS]\n");
        return 1;
    }
    const int N = atoi(argv[1]), D = atoi(argv[2]), HD = atoi(argv[3]), KD = atoi(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : 30;
    if (N < 1 || D < 1 || HD < 1 || KD < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "qkv_gemm_bench: bad shape N=%d D=%d HD=%d KD=%d reps=%d\n", N, D, HD, KD, reps);
        return 1;
    }
    dx_backend *be = dx_backend_cuda_create(0, 1);
    if (!be) {
        fprintf(stderr, "qkv_gemm_bench: no CUDA backend: %s\n", dx_last_error());
        return 1;
    }
    const int W3 = HD + 2 * KD; /* the fused output's width */
    const char *prog = "qkv_gemm_bench";
    void *x = bench_rand(be, (size_t)N * D, DX_BF16, 1, prog);
    void *W = bench_rand(be, (size_t)W3 * D, DX_BF16, 2, prog);  /* W_q rows, then W_k, W_v */
    void *dy = bench_rand(be, (size_t)N * W3, DX_BF16, 3, prog); /* dqkv; dq and dkv for the split */
    void *dq = bench_rand(be, (size_t)N * HD, DX_BF16, 4, prog);
    void *dkv = bench_rand(be, (size_t)N * 2 * KD, DX_BF16, 5, prog);
    void *y = be->alloc(be, (size_t)N * W3 * 2, DX_MEM_ACTIVATIONS);
    void *dx = be->alloc(be, (size_t)N * D * 2, DX_MEM_ACTIVATIONS);
    void *dW = be->alloc(be, (size_t)W3 * D * 4, DX_MEM_ACTIVATIONS);
    if (!y || !dx || !dW) {
        fprintf(stderr, "qkv_gemm_bench: cannot allocate: %s\n", dx_last_error());
        return 1;
    }
    const void *Wkv = AT(W, (size_t)HD * D * 2);
    void *ykv = be->alloc(be, (size_t)N * 2 * KD * 2, DX_MEM_ACTIVATIONS);
    if (!ykv) {
        fprintf(stderr, "qkv_gemm_bench: cannot allocate: %s\n", dx_last_error());
        return 1;
    }
    cudaStream_t st = (cudaStream_t)dx_cuda_stream(be);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double *t = malloc(reps * sizeof(double));
    static const char *names[6] = {"fwd_split", "fwd_fused", "dgrad_split", "dgrad_fused", "wgrad_split",
                                   "wgrad_fused"};
    const double fl[3] = {2.0 * N * W3 * D, 2.0 * N * D * W3, 2.0 * W3 * (double)D * N};
    for (int c = 0; c < 6; c++) {
        for (int r = -1; r < reps; r++) {
            cudaEventRecord(e0, st);
            switch (c) {
            case 0: /* the model's forward: q, then k|v into its own buffer */
                be->gemm(be, 0, 1, N, HD, D, 1.0f, x, D, W, D, 0.0f, y, HD, 0);
                be->gemm(be, 0, 1, N, 2 * KD, D, 1.0f, x, D, Wkv, D, 0.0f, ykv, 2 * KD, 0);
                break;
            case 1: be->gemm(be, 0, 1, N, W3, D, 1.0f, x, D, W, D, 0.0f, y, W3, 0); break;
            case 2:
                be->gemm(be, 0, 0, N, D, HD, 1.0f, dq, HD, W, D, 0.0f, dx, D, 0);
                be->gemm(be, 0, 0, N, D, 2 * KD, 1.0f, dkv, 2 * KD, Wkv, D, 1.0f, dx, D, 0);
                break;
            case 3: be->gemm(be, 0, 0, N, D, W3, 1.0f, dy, W3, W, D, 0.0f, dx, D, 0); break;
            case 4:
                be->gemm(be, 1, 0, HD, D, N, 1.0f, dq, HD, x, D, 0.0f, dW, D, 1);
                be->gemm(be, 1, 0, 2 * KD, D, N, 1.0f, dkv, 2 * KD, x, D, 0.0f, AT(dW, (size_t)HD * D * 4), D, 1);
                break;
            default: be->gemm(be, 1, 0, W3, D, N, 1.0f, dy, W3, x, D, 0.0f, dW, D, 1); break;
            }
            cudaEventRecord(e1, st);
            const double ms = bench_elapsed_ms(e0, e1, "qkv_gemm_bench");
            if (r >= 0) t[r] = ms;
        }
        qsort(t, reps, sizeof(double), bench_cmp_d);
        const double ms = t[reps / 2];
        printf("{\"case\": \"%s\", \"shape\": [%d, %d, %d, %d], \"ms\": %.4f, \"tflops\": %.1f}\n", names[c], N,
               D, HD, KD, ms, fl[c / 2] / ms / 1e9);
    }
    be->destroy(be);
    return 0;
}
