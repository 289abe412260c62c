/* The MLP's gate|up projection and SwiGLU alone on the CUDA backend: cuBLAS's GEMM and then
 * swiglu_fwd (as the model runs them now, src/model/model.c) against dx_cuda_gemm_swiglu, the
 * wgmma GEMM with SwiGLU in its epilogue (kernels/cuda/gemm_wg.cu), for benchmarks/NOTES.md:
 *
 *   swiglu_gemm_bench M F K [REPS]
 *
 * M tokens, F = intermediate size (each of the gate and up blocks), K = hidden size:
 *   gemm     gu[M,2F] = x W^T                       (cuBLAS, W = gate rows then up rows)
 *   swiglu   h[M,F] = silu(g) u, g | u = gu          (swiglu_fwd alone)
 *   split    gemm, then swiglu                       (the model's forward now)
 *   fused    g, u, h from one kernel                 (dx_cuda_gemm_swiglu, into separate buffers)
 * and the backward through the down projection (W_down [K, F] and dy ~ U(-1, 1),
 * g | u from the split forward):
 *   bwd_gemm    dh[M,F] = dy W_down                  (cuBLAS)
 *   bwd_swiglu  dg, du = swiglu_bwd(dh, g, u)        (alone)
 *   bwd_split   both                                 (the model's backward with DX_CUDA_SWIGLU_GEMM=0)
 *   bwd_fused   dg, du from one kernel               (dx_cuda_gemm_swiglu_bwd)
 * Inputs ~ U(-1, 1) in bf16 (x), W ~ U(-1, 1) / sqrt(K); one warm-up, then REPS (default 30)
 * timed repetitions (CUDA events), median. Prints one JSON line per case {"case", "shape":
 * [M, F, K], "ms", "tflops" (2 M 2F K / time; 2 M F K for the backward)} and lines "check" and
 * "bwd_check" comparing the fused kernels' g, u, h and dg, du with the split paths': the largest difference in units of the reference's bf16 spacing
 * ("max_ulps"), the share of elements more than 1 spacing apart, and "ok" (every element within
 * 2 spacings; accumulation orders differ, so the roundings may). Exit 1 on bad arguments, when
 * the GPU cannot be used, or when the check fails. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "cuda/cuda_backend.h"
#include "kernels.h"
#include "bench_util.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: swiglu_gemm_bench M F K [REPS]\n");
        return 1;
    }
    const int M = atoi(argv[1]), F = atoi(argv[2]), K = atoi(argv[3]);
    const int reps = argc > 4 ? atoi(argv[4]) : 30;
    if (M < 1 || F < 1 || K < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "swiglu_gemm_bench: bad shape M=%d F=%d K=%d reps=%d\n", M, F, K, reps);
        return 1;
    }
    const char *prog = "swiglu_gemm_bench";
    dx_backend *be = dx_backend_cuda_create(0, 1);
    if (!be) {
        fprintf(stderr, "%s: no CUDA backend: %s\n", prog, dx_last_error());
        return 1;
    }
    void *x = bench_rand(be, (size_t)M * K, DX_BF16, 1, prog);
    const size_t nw = (size_t)2 * F * K;
    float *wh = malloc(nw * sizeof *wh);
    void *W = be->alloc(be, nw * 2, DX_MEM_PARAMS);
    void *gu = be->alloc(be, (size_t)M * 2 * F * 2, DX_MEM_ACTIVATIONS);
    void *h = be->alloc(be, (size_t)M * F * 2, DX_MEM_ACTIVATIONS);
    void *gu2 = be->alloc(be, (size_t)M * 2 * F * 2, DX_MEM_ACTIVATIONS);
    void *h2 = be->alloc(be, (size_t)M * F * 2, DX_MEM_ACTIVATIONS);
    void *dy = bench_rand(be, (size_t)M * K, DX_BF16, 2, prog);
    void *Wd = bench_rand(be, (size_t)K * F, DX_BF16, 3, prog);
    void *dh = be->alloc(be, (size_t)M * F * 2, DX_MEM_ACTIVATIONS);
    void *dgu = be->alloc(be, (size_t)M * 2 * F * 2, DX_MEM_ACTIVATIONS);
    void *dgu2 = be->alloc(be, (size_t)M * 2 * F * 2, DX_MEM_ACTIVATIONS);
    if (!wh || !W || !gu || !h || !gu2 || !h2 || !dh || !dgu || !dgu2) {
        fprintf(stderr, "%s: cannot allocate: %s\n", prog, dx_last_error());
        return 1;
    }
    uint64_t s = 12345;
    for (size_t i = 0; i < nw; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        wh[i] = (float)(((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0) / sqrt((double)K));
    }
    if (be->upload_f32(be, W, DX_BF16, wh, nw)) {
        fprintf(stderr, "%s: upload failed\n", prog);
        return 1;
    }
    free(wh);
    cudaStream_t st = (cudaStream_t)dx_cuda_stream(be);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double *t = malloc(reps * sizeof(double));
    static const char *names[8] = {"gemm", "swiglu", "split", "fused", "bwd_gemm", "bwd_swiglu", "bwd_split",
                                   "bwd_fused"};
    const double fl = 2.0 * M * 2.0 * F * K;
    char *u2 = (char *)gu2 + (size_t)F * 2, *u = (char *)gu + (size_t)F * 2;
    for (int c = 0; c < 8; c++) {
        for (int r = -1; r < reps; r++) {
            cudaEventRecord(e0, st);
            if (c == 0 || c == 2) be->gemm(be, 0, 1, M, 2 * F, K, 1.0f, x, K, W, K, 0.0f, gu, 2 * F, 0);
            if (c == 1 || c == 2) be->swiglu_fwd(be, h, gu, u, M, F, 2 * F);
            if (c == 3 && dx_cuda_gemm_swiglu(be, gu2, u2, 2 * F, h2, F, x, K, W, K, M, F, K)) {
                fprintf(stderr, "%s: %s\n", prog, dx_last_error());
                return 1;
            }
            if (c == 4 || c == 6) be->gemm(be, 0, 0, M, F, K, 1.0f, dy, K, Wd, F, 0.0f, dh, F, 0);
            if (c == 5 || c == 6) be->swiglu_bwd(be, dgu, (char *)dgu + (size_t)F * 2, dh, gu, u, M, F, 2 * F);
            if (c == 7 && dx_cuda_gemm_swiglu_bwd(be, dgu2, (char *)dgu2 + (size_t)F * 2, gu, u, 2 * F, dy, K, Wd, F,
                                                  M, F, K)) {
                fprintf(stderr, "%s: %s\n", prog, dx_last_error());
                return 1;
            }
            cudaEventRecord(e1, st);
            const double ms = bench_elapsed_ms(e0, e1, prog);
            if (r >= 0) t[r] = ms;
        }
        qsort(t, reps, sizeof(double), bench_cmp_d);
        const double ms = t[reps / 2];
        printf("{\"case\": \"%s\", \"shape\": [%d, %d, %d], \"ms\": %.4f, \"tflops\": %.1f}\n", names[c], M, F, K,
               ms, c == 1 || c == 5 ? 0.0 : (c < 4 ? fl : fl / 2) / ms / 1e9);
    }
    /* the fused kernels' outputs against the split paths' */
    const size_t ngu = (size_t)M * 2 * F, nh = (size_t)M * F;
    int ok = 1;
    for (int bwd = 0; bwd < 2; bwd++) {
        double max_ulps = 0, over1 = 0;
        if (bwd) {
            bench_ulps(be, dgu, dgu2, ngu, &max_ulps, &over1, prog);
        } else {
            bench_ulps(be, gu, gu2, ngu, &max_ulps, &over1, prog);
            bench_ulps(be, h, h2, nh, &max_ulps, &over1, prog);
        }
        /* the backward's dh is rounded to bf16 before SwiGLU's backward on both paths, so the
         * same 2-spacing bound holds */
        const int good = max_ulps <= 2.0;
        ok &= good;
        printf("{\"case\": \"%s\", \"shape\": [%d, %d, %d], \"max_ulps\": %.2f, \"share_over_1ulp\": %.2e, "
               "\"ok\": %s}\n",
               bwd ? "bwd_check" : "check", M, F, K, max_ulps, over1 / (double)(bwd ? ngu : ngu + nh),
               good ? "true" : "false");
    }
    be->destroy(be);
    return ok ? 0 : 1;
}
