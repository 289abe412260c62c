/* wg_limit_probe: our own Hopper GEMM (kernels/cuda/gemm_wg.cu) against cuBLASLt's plan, both
 * at the power limit, on the same shapes and the same data (benchmarks/NOTES.md item 43).
 *
 * The step's GEMMs run power-capped (items 19, 42), so a kernel's rate there is its energy per
 * FLOP. Item 42 found gate|up's forward with SwiGLU in its epilogue (ours) faster in the step
 * than cuBLASLt's plain GEMM of that shape alone at the limit, but on other data. Here each
 * candidate runs back to back long enough for the clock to settle at the limit, the candidates of
 * a case take turns for ROUNDS rounds, and a turn's time is the median of the last half of its
 * batches of 10 calls (CUDA events), as benchmarks/gemm_algo_probe.cu does.
 *
 *   wg_limit_probe [-t TURN_MS] [-r ROUNDS] CASE...
 *
 * Cases, the backend's row-major terms (kernels/kernels.h):
 *   fwd:M,N,K     y[M,N] = x[M,K] W[N,K]^T, bf16: "lt" be->gemm (cuBLASLt's plan for shapes of
 *                 2^30 multiply-adds or more), "wg" dx_cuda_gemm_wg (ours, plain epilogue)
 *   res:M,N,K     the same plus a residual: "lt_res" be->gemm_res, then "wg" (ours, no residual:
 *                 what an epilogue adding one would start from)
 *   swiglu:M,F,K  gate|up, N = 2F: "lt" and "wg" as fwd, then "fused" dx_cuda_gemm_swiglu (ours,
 *                 SwiGLU in the epilogue: g, u and h written)
 * Data ~ U(-1, 1) (x, r), W ~ U(-1, 1) / sqrt(K), fixed seeds, the same for every candidate of a
 * case. Prints one JSON line per turn, a "check" line per case ("wg"'s y against "lt"'s in units
 * of bf16 spacing; ok within 2), and last a table: per case and candidate the median over
 * rounds, ms, TFLOP/s and the ratio to the case's first candidate. Run nvidia-smi beside it to
 * see that the clock sits at the power limit. Exit 1 on a CUDA failure or a failed check, 2 on
 * bad arguments. */
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "cuda/cuda_backend.h"
#include "kernels.h"
#include "bench_util.h"

#define BATCH 10
#define MAXB 400
#define MAXC 16 /* cases */
#define MAXR 50 /* rounds */

enum { FWD, RES, SWIGLU };

/* one case's operands: y = x W^T (+ r) at M, N, K; F = N / 2 for SWIGLU (h its SwiGLU output) */
typedef struct {
    int kind, M, N, K, F;
    void *x, *W, *r, *y, *y2, *h;
} probe_case;

/* candidate k of the case once, enqueued on the compute stream: 0 cuBLASLt (be->gemm, or
 * be->gemm_res for RES) into y, 1 ours plain into y2, 2 ours with SwiGLU into y2 | h; 0, or
 * non-zero where ours refused the call (dx_last_error says why) */
static int probe_call(dx_backend *be, const probe_case *p, int k)
{
    const int M = p->M, N = p->N, K = p->K, F = p->F;
    if (k == 0 && p->kind == RES) be->gemm_res(be, 0, 1, M, N, K, p->x, K, p->W, K, p->r, N, p->y, N);
    else if (k == 0) be->gemm(be, 0, 1, M, N, K, 1.0f, p->x, K, p->W, K, 0.0f, p->y, N, 0);
    else if (k == 1) return dx_cuda_gemm_wg(be, p->y2, N, p->x, K, p->W, K, M, N, K);
    else return dx_cuda_gemm_swiglu(be, p->y2, (char *)p->y2 + (size_t)F * 2, N, p->h, F, p->x, K, p->W, K, M, F, K);
    return 0;
}

int main(int argc, char **argv)
{
    const char *prog = "wg_limit_probe";
    double turn_ms = 400;
    int rounds = 3, opt;
    while ((opt = getopt(argc, argv, "t:r:")) != -1) {
        if (opt == 't') turn_ms = atof(optarg);
        else if (opt == 'r') rounds = atoi(optarg);
        else {
            fprintf(stderr, "usage: %s [-t TURN_MS] [-r ROUNDS] fwd|res|swiglu:M,N,K ...\n", prog);
            return 2;
        }
    }
    const int ncase = argc - optind;
    if (turn_ms <= 0 || rounds < 1 || rounds > MAXR || ncase < 1 || ncase > MAXC) {
        fprintf(stderr, "%s: need TURN_MS > 0, 1..%d rounds and 1..%d cases\n", prog, MAXR, MAXC);
        return 2;
    }
    int kind[MAXC], Ms[MAXC], Ns[MAXC], Ks[MAXC];
    for (int c = 0; c < ncase; c++) {
        const char *a = argv[optind + c];
        char k[16];
        if (sscanf(a, "%15[a-z]:%d,%d,%d", k, &Ms[c], &Ns[c], &Ks[c]) != 4 || Ms[c] < 1 || Ns[c] < 1 || Ks[c] < 1 ||
            (kind[c] = !strcmp(k, "fwd") ? FWD : !strcmp(k, "res") ? RES : !strcmp(k, "swiglu") ? SWIGLU : -1) < 0) {
            fprintf(stderr, "%s: bad case '%s' (fwd|res|swiglu:M,N,K)\n", prog, a);
            return 2;
        }
    }
    dx_backend *be = dx_backend_cuda_create(0, 1);
    if (!be) {
        fprintf(stderr, "%s: no CUDA backend: %s\n", prog, dx_last_error());
        return 1;
    }
    if (!be->gemm_res) {
        fprintf(stderr, "%s: the backend has no gemm_res\n", prog);
        return 1;
    }
    cudaStream_t st = (cudaStream_t)dx_cuda_stream(be);
    cudaEvent_t ev[MAXB + 1];
    for (int i = 0; i <= MAXB; i++) cudaEventCreate(&ev[i]);
    static const char *names[3][3] = {{"lt", "wg", NULL}, {"lt_res", "wg", NULL}, {"lt", "wg", "fused"}};
    double med[MAXC][3] = {{0}};
    int bad = 0;
    for (int c = 0; c < ncase; c++) {
        const int M = Ms[c], K = Ks[c], N = kind[c] == SWIGLU ? 2 * Ns[c] : Ns[c], F = Ns[c];
        const int ncand = kind[c] == SWIGLU ? 3 : 2;
        void *x = bench_rand(be, (size_t)M * K, DX_BF16, 1, prog);
        void *w32 = bench_rand(be, (size_t)N * K, DX_F32, 2, prog);
        void *W = be->alloc(be, (size_t)N * K * 2, DX_MEM_PARAMS);
        if (!W) {
            fprintf(stderr, "%s: cannot allocate W: %s\n", prog, dx_last_error());
            return 1;
        }
        be->scale(be, w32, (size_t)N * K, 1.0f / sqrtf((float)K));
        be->acc_to_act(be, W, w32, (size_t)N * K);
        be->free(be, w32);
        void *r = kind[c] == RES ? bench_rand(be, (size_t)M * N, DX_BF16, 3, prog) : NULL;
        void *y = be->alloc(be, (size_t)M * N * 2, DX_MEM_ACTIVATIONS);
        void *y2 = be->alloc(be, (size_t)M * N * 2, DX_MEM_ACTIVATIONS);
        void *h = kind[c] == SWIGLU ? be->alloc(be, (size_t)M * F * 2, DX_MEM_ACTIVATIONS) : NULL;
        if (!y || !y2 || (kind[c] == SWIGLU && !h)) {
            fprintf(stderr, "%s: cannot allocate case %s: %s\n", prog, argv[optind + c], dx_last_error());
            return 1;
        }
        const probe_case pc = {kind[c], M, N, K, F, x, W, r, y, y2, h};
        double t[MAXR][3];
        for (int rd = 0; rd < rounds; rd++)
            for (int k = 0; k < ncand; k++) {
                int fail = 0;
                cudaEventRecord(ev[0], st);
                for (int i = 0; i < 20; i++) fail |= probe_call(be, &pc, k); /* warm-up; also the call's time */
                cudaEventRecord(ev[1], st);
                const double w = bench_elapsed_ms(ev[0], ev[1], prog) / 20;
                int nb = (int)(turn_ms / (w * BATCH));
                nb = nb < 8 ? 8 : nb > MAXB ? MAXB : nb;
                cudaEventRecord(ev[0], st);
                for (int b = 0; b < nb; b++) {
                    for (int i = 0; i < BATCH; i++) fail |= probe_call(be, &pc, k);
                    cudaEventRecord(ev[b + 1], st);
                }
                bench_elapsed_ms(ev[0], ev[nb], prog);
                if (fail) {
                    fprintf(stderr, "%s: case %s, %s: %s\n", prog, argv[optind + c], names[kind[c]][k], dx_last_error());
                    return 1;
                }
                double bt[MAXB];
                int n = 0;
                for (int b = nb / 2; b < nb; b++) bt[n++] = bench_elapsed_ms(ev[b], ev[b + 1], prog) / BATCH;
                qsort(bt, n, sizeof bt[0], bench_cmp_d);
                t[rd][k] = bt[n / 2];
                printf("{\"case\": \"%s\", \"cand\": \"%s\", \"round\": %d, \"ms\": %.5f, \"tflops\": %.1f, \"calls\": %d}\n",
                       argv[optind + c], names[kind[c]][k], rd, t[rd][k], 2.0 * M * N * K / t[rd][k] * 1e-9, nb * BATCH);
                fflush(stdout);
            }
        for (int k = 0; k < ncand; k++) {
            double v[MAXR];
            for (int rd = 0; rd < rounds; rd++) v[rd] = t[rd][k];
            qsort(v, rounds, sizeof v[0], bench_cmp_d);
            med[c][k] = v[rounds / 2];
        }
        /* ours against cuBLASLt's (both plain at fwd and swiglu; res: lt_res minus r is not
         * checked, so only the kinds without a residual) */
        if (kind[c] != RES) {
            if (kind[c] == SWIGLU) probe_call(be, &pc, 1); /* y2 held the fused kernel's g | u */
            probe_call(be, &pc, 0);
            double mu = 0, over1 = 0;
            bench_ulps(be, y, y2, (size_t)M * N, &mu, &over1, prog);
            printf("{\"case\": \"%s\", \"check\": \"wg against lt\", \"max_ulps\": %.2f, \"share_over_1ulp\": %.2e, "
                   "\"ok\": %s}\n",
                   argv[optind + c], mu, over1 / ((double)M * N), mu <= 2.0 ? "true" : "false");
            bad |= !(mu <= 2.0);
        }
        be->free(be, x), be->free(be, W), be->free(be, y), be->free(be, y2);
        if (r) be->free(be, r);
        if (h) be->free(be, h);
    }
    printf("\n%-28s %-7s %9s %8s %7s\n", "case", "cand", "ms", "TFLOP/s", "ratio");
    for (int c = 0; c < ncase; c++) {
        const double fl = 2.0 * Ms[c] * (kind[c] == SWIGLU ? 2.0 * Ns[c] : Ns[c]) * Ks[c];
        for (int k = 0; k < (kind[c] == SWIGLU ? 3 : 2); k++)
            printf("%-28s %-7s %9.4f %8.1f %7.4f\n", argv[optind + c], names[kind[c]][k], med[c][k],
                   fl / med[c][k] * 1e-9, med[c][k] / med[c][0]);
    }
    be->destroy(be);
    return bad;
}
