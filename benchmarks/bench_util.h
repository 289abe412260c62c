/* Helpers shared by the kernel benchmarks (attention_bench.c, qkv_gemm_bench.c,
 * swiglu_gemm_bench.c, wg_limit_probe.c), which include cuda_runtime_api.h first. */
#ifndef DX_BENCH_UTIL_H
#define DX_BENCH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

/* qsort comparator of doubles, ascending */
static int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* n elements of dtype dt (DX_BF16 or DX_F32) in backend memory, ~ U(-1, 1) from a xorshift64
 * stream seeded by seed; on failure prints "prog: ..." and exits 1. */
static void *bench_rand(dx_backend *be, size_t n, dx_dtype dt, uint64_t seed, const char *prog)
{
    float *h = malloc(n * sizeof(float));
    void *d = be->alloc(be, n * (dt == DX_F32 ? 4 : 2), DX_MEM_ACTIVATIONS);
    if (!h || !d) {
        fprintf(stderr, "%s: cannot allocate %zu elements\n", prog, n);
        exit(1);
    }
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
        h[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    if (be->upload_f32(be, d, dt, h, n)) {
        fprintf(stderr, "%s: upload failed\n", prog);
        exit(1);
    }
    free(h);
    return d;
}

/* ms between events e0 and e1 once e1 (recorded after the case's calls) has completed; a
 * failure of the work before it prints "prog: <CUDA error>" and exits 1 */
static double bench_elapsed_ms(cudaEvent_t e0, cudaEvent_t e1, const char *prog)
{
    if (cudaEventSynchronize(e1) != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", prog, cudaGetErrorString(cudaGetLastError()));
        exit(1);
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms;
}

/* the spacing of bf16 numbers around |v| (8 significant bits), at least that of 2^-126 */
static inline double bench_bf16_spacing(double v)
{
    int e;
    frexp(fabs(v) > 1e-38 ? v : 1e-38, &e);
    return ldexp(1.0, e - 8);
}

/* largest difference between n bf16 values at a and b (backend memory) in units of a's spacing
 * (into *max_ulps) and the count more than 1 apart (added to *over1); on a failed download prints
 * "prog: ..." and exits 1 */
static inline void bench_ulps(dx_backend *be, const void *a, const void *b, size_t n, double *max_ulps,
                              double *over1, const char *prog)
{
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y || be->download_f32(be, x, a, DX_BF16, n) || be->download_f32(be, y, b, DX_BF16, n)) {
        fprintf(stderr, "%s: download failed: %s\n", prog, dx_last_error());
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)x[i] - (double)y[i]) / bench_bf16_spacing(x[i]);
        if (!(d <= *max_ulps)) *max_ulps = isnan(d) ? INFINITY : d;
        *over1 += d > 1.0;
    }
    free(x);
    free(y);
}

#endif
