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
 * Inputs ~ U(-1, 1) in bf16 (x), W ~ U(-1, 1) / sqrt(K); one warm-up, then REPS (default 30)
 * timed repetitions (CUDA events), median. Prints one JSON line per case {"case", "shape":
 * [M, F, K], "ms", "tflops" (2 M 2F K / time)} and a line "check" comparing the fused kernel's g,
 * u, h with the split path's: the largest difference in units of the reference's bf16 spacing
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

/* the spacing of bf16 numbers around |v| (8 significant bits), at least that of 2^-126 */
static double bf16_spacing(double v)
{
    int e;
    frexp(fabs(v) > 1e-38 ? v : 1e-38, &e);
    return ldexp(1.0, e - 8);
}

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
    if (!wh || !W || !gu || !h || !gu2 || !h2) {
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
    static const char *names[4] = {"gemm", "swiglu", "split", "fused"};
    const double fl = 2.0 * M * 2.0 * F * K;
    char *u2 = (char *)gu2 + (size_t)F * 2;
    for (int c = 0; c < 4; c++) {
        for (int r = -1; r < reps; r++) {
            cudaEventRecord(e0, st);
            if (c == 0 || c == 2) be->gemm(be, 0, 1, M, 2 * F, K, 1.0f, x, K, W, K, 0.0f, gu, 2 * F, 0);
            if (c == 1 || c == 2) be->swiglu_fwd(be, h, gu, (char *)gu + (size_t)F * 2, M, F, 2 * F);
            if (c == 3 && dx_cuda_gemm_swiglu(be, gu2, u2, 2 * F, h2, F, x, K, W, K, M, F, K)) {
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
               ms, c == 1 ? 0.0 : fl / ms / 1e9);
    }
    /* the fused kernel's g | u and h against the split path's */
    const size_t ngu = (size_t)M * 2 * F, nh = (size_t)M * F;
    float *a = malloc(ngu * sizeof *a), *b = malloc(ngu * sizeof *b);
    if (!a || !b) {
        fprintf(stderr, "%s: out of host memory\n", prog);
        return 1;
    }
    double max_ulps = 0, over1 = 0;
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        const size_t cnt = part ? nh : ngu;
        if (be->download_f32(be, a, part ? h : gu, DX_BF16, cnt) || be->download_f32(be, b, part ? h2 : gu2, DX_BF16, cnt)) {
            fprintf(stderr, "%s: download failed: %s\n", prog, dx_last_error());
            return 1;
        }
        for (size_t i = 0; i < cnt; i++) {
            const double d = fabs((double)a[i] - (double)b[i]) / bf16_spacing(a[i]);
            if (!(d <= max_ulps)) max_ulps = isnan(d) ? INFINITY : d;
            over1 += d > 1.0;
        }
        n += cnt;
    }
    const int ok = max_ulps <= 2.0;
    printf("{\"case\": \"check\", \"shape\": [%d, %d, %d], \"max_ulps\": %.2f, \"share_over_1ulp\": %.2e, \"ok\": %s}\n",
           M, F, K, max_ulps, over1 / (double)n, ok ? "true" : "false");
    free(a);
    free(b);
    be->destroy(be);
    return ok ? 0 : 1;
}
