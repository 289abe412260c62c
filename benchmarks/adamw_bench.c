/* Host AdamW alone (dx_host_adamw, the CPU-Adam of dissect's optimizer offload) and a
 * STREAM-style triad, on this host, with T OpenMP threads:
 *
 *   adamw_bench [--params N] [--threads T] [--steps S] [--chunk C]
 *
 * AdamW: N fp32 parameters with fp32 gradients and moments (weights ~ N(0, 0.02), gradients
 * ~ N(0, 1e-3) from the counter-based RNG), updated in chunks of C elements (the offload's
 * staging chunk, default 8 Mi) with bf16 output, as dx_zero_step does with offload; S timed
 * steps after one warm-up. Triad (McCalpin's STREAM, "a = b + s * c" on doubles, 24 bytes per
 * element counted, 3 arrays of N/2 elements, best of S) gives the host's attainable bandwidth.
 * Prints one JSON line per measurement:
 *   {"impl": "dissect-host-adamw", "params", "threads", "step_s" (median), "params_per_s",
 *    "gbps": N * 28 / step_s (the minimal traffic: read grad, read+write master, m, v, fp32;
 *    the same count as benchmarks/torch_adamw_cpu.py; dissect also writes 2 bytes of bf16),
 *    "gbps_actual": N * 30 / step_s}
 *   {"impl": "stream-triad", "threads", "gbps"}
 *   {"impl": "dissect-host-adamw-redo", ...}: dx_host_adamw_redo (the repair of a speculative
 *    update, factor 0.5) over the same chunks
 * DX_HOST_ADAMW_STREAM=0 turns the bf16 output's streaming stores off (kernels/cpu/host_adamw.c),
 * for a side-by-side figure.
 * Exit 1 with a message if memory cannot be allocated.
 */
#include <getopt.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*host_update)(float *, float *, float *, const float *, void *, dx_dtype, size_t,
                            const dx_adamw_hparams *, int);

/* Median seconds of `steps` timed passes of fn over the n parameters in chunks (after one
 * untimed pass); step_up: hp->step counts up before each pass. t: [steps] scratch. */
static double median_pass(host_update fn, float *p, float *m, float *v, const float *g, uint16_t *out, size_t n,
                          size_t chunk, dx_adamw_hparams *hp, int step_up, int threads, int steps, double *t)
{
    for (int s = -1; s < steps; s++) {
        if (step_up) hp->step++;
        uint64_t t0 = dx_now_ns();
        for (size_t c = 0; c < n; c += chunk) {
            size_t k = n - c < chunk ? n - c : chunk;
            fn(p + c, m + c, v + c, g + c, out + c, DX_BF16, k, hp, threads);
        }
        if (s >= 0) t[s] = (double)(dx_now_ns() - t0) * 1e-9;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_d);
    return steps % 2 ? t[steps / 2] : 0.5 * (t[steps / 2 - 1] + t[steps / 2]);
}

int main(int argc, char **argv)
{
    size_t n = 1000000000, chunk = (size_t)1 << 23;
    int threads = omp_get_max_threads(), steps = 5;
    static const struct option opts[] = {{"params", required_argument, 0, 'n'},
                                         {"threads", required_argument, 0, 't'},
                                         {"steps", required_argument, 0, 's'},
                                         {"chunk", required_argument, 0, 'c'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'n') n = (size_t)atof(optarg);
        else if (o == 't') threads = atoi(optarg);
        else if (o == 's') steps = atoi(optarg);
        else if (o == 'c') chunk = (size_t)atof(optarg);
        else {
            fprintf(stderr, "usage: adamw_bench [--params N] [--threads T] [--steps S] [--chunk C]\n");
            return 2;
        }
    }
    if (n < 1 || threads < 1 || steps < 1 || chunk < 1) {
        fprintf(stderr, "adamw_bench: --params, --threads, --steps and --chunk must be >= 1\n");
        return 2;
    }
    float *p = aligned_alloc(64, (n * 4 + 63) / 64 * 64), *m = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    float *v = aligned_alloc(64, (n * 4 + 63) / 64 * 64), *g = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    uint16_t *out = aligned_alloc(64, (n * 2 + 63) / 64 * 64);
    if (!p || !m || !v || !g || !out) {
        fprintf(stderr, "adamw_bench: cannot allocate %.1f GiB for %zu parameters\n", n * 18.0 / (1 << 30), n);
        return 1;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) { /* first touch by the threads that update them */
        p[i] = (float)(0.02 * dx_normal(1, 0, i));
        g[i] = (float)(1e-3 * dx_normal(1, 1, i));
        m[i] = v[i] = 0;
        out[i] = 0;
    }
    dx_adamw_hparams hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                           .grad_scale = 1.0, .step = 0};
    double *t = calloc((size_t)steps, sizeof *t);
    double med = median_pass(dx_host_adamw, p, m, v, g, out, n, chunk, &hp, 1, threads, steps, t);
    printf("{\"impl\": \"dissect-host-adamw\", \"params\": %zu, \"threads\": %d, \"step_s\": %.4f, "
           "\"params_per_s\": %.4g, \"gbps\": %.1f, \"gbps_actual\": %.1f, \"check\": %.6g}\n",
           n, threads, med, n / med, n * 28.0 / med / 1e9, n * 30.0 / med / 1e9, (double)p[n / 2]);
    fflush(stdout);
    /* the repair of a speculative update (dx_host_adamw_redo, factor 0.5), same chunks */
    hp.grad_scale = 0.5;
    med = median_pass(dx_host_adamw_redo, p, m, v, g, out, n, chunk, &hp, 0, threads, steps, t);
    printf("{\"impl\": \"dissect-host-adamw-redo\", \"params\": %zu, \"threads\": %d, \"step_s\": %.4f, "
           "\"params_per_s\": %.4g, \"gbps_actual\": %.1f, \"check\": %.6g}\n",
           n, threads, med, n / med, n * 30.0 / med / 1e9, (double)p[n / 2]);
    fflush(stdout);
    free(m);
    free(v);
    free(out);

    /* STREAM triad over the memory the AdamW used: 3 arrays of n/2 doubles */
    size_t e = n / 2;
    double *a = (double *)p, *b = (double *)g, *cc = aligned_alloc(64, (e * 8 + 63) / 64 * 64);
    if (!cc) {
        fprintf(stderr, "adamw_bench: cannot allocate the triad's arrays\n");
        return 1;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < e; i++) {
        a[i] = 0;
        b[i] = 1.0;
        cc[i] = 2.0;
    }
    double best = 1e30;
    for (int s = 0; s < steps + 1; s++) {
        uint64_t t0 = dx_now_ns();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < e; i++) a[i] = b[i] + 3.0 * cc[i];
        double dt = (double)(dx_now_ns() - t0) * 1e-9;
        if (s > 0 && dt < best) best = dt;
    }
    printf("{\"impl\": \"stream-triad\", \"threads\": %d, \"elements\": %zu, \"gbps\": %.1f, \"check\": %g}\n",
           threads, e, e * 24.0 / best / 1e9, a[e / 3]);
    free(cc);
    free(p);
    free(g);
    free(t);
    return 0;
}
