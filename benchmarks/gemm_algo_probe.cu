/* gemm_algo_probe: which cuBLASLt algorithm is fastest for a training step's GEMM once the GPU
 * runs at its power limit? (benchmarks/NOTES.md item 38)
 *
 * The step's GEMMs run at the power limit (item 19), so what counts is a kernel's rate there,
 * i.e. its energy per FLOP, not its rate at the full clock (item 15 timed cuBLASLt's candidates
 * at their first call, alone, and kept the fastest: no gain in the step). Here every candidate
 * runs back to back long enough for the clock to settle at the limit, the candidates of a shape
 * take turns (ROUNDS rounds of the same order) so that each sees the same thermal state, and
 * each turn's time is the median of the last half of its batches of 10 calls (CUDA events).
 *
 * Cases, in the backend's row-major terms (kernels/kernels.h's gemm; src/model/model.c):
 *   fwd:M,N,K   y[M,N] = x[M,K] W[N,K]^T        bf16 y, beta 0       (linear_fwd)
 *   res:M,N,K   y[M,N] = x[M,K] W[N,K]^T + r    bf16 y and r         (gemm_res: O and down)
 *   dx:M,N,K    dx[M,N] = dy[M,K] W[K,N]        bf16 dx, beta 0      (linear_bwd_dx)
 *   dw:M,N,K    dW[M,N] += dy[K,M]^T x[K,N]     fp32 dW, beta 1      (linear_bwd_dw)
 * For each: "gemmex" (cublasGemmEx with CUBLAS_GEMM_DEFAULT, what cuda_gemm calls; for res the
 * backend's cuBLASLt first candidate, so gemmex is left out) and cuBLASLt's first NALGO
 * heuristic candidates (default 8) with the backend's preference (32 MiB workspace, no
 * reduced-precision split-K reduction). Prints one JSON line per candidate and round and, last,
 * a table: per case and candidate the median over rounds, ms, TFLOP/s, the ratio to the first
 * candidate (gemmex where there is one), and the candidate's tile, stages, cluster shape,
 * split-K and waves (cuBLASLt's algorithm attributes).
 *
 * -p: only the candidate the backend plans (kernels/cuda/cuda_backend.cu, NOTES item 38): the first
 * 256 x 128 tile among cuBLASLt's first NALGO, else the first; no gemmex. benchmarks/step_ceiling.sh
 * times a whole step's GEMMs this way.
 *
 * Build (GPU host, `. .gpu/env.sh` first): nvcc -gencode=arch=compute_90a,code=sm_90a -O3
 * -std=c++17 benchmarks/gemm_algo_probe.cu -lcublasLt -lcublas -o /tmp/gemm_algo_probe
 * Usage: gemm_algo_probe [-t TURN_MS] [-r ROUNDS] [-n NALGO] [-p] CASE...
 * Data: uniform in [-1, 1) for activations and gradients, [-0.02, 0.02) for weights, fixed seed.
 * Errors: a CUDA or cuBLAS failure names the call and exits 1; a bad case exits 2. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#define PROBE_NAME "gemm_algo_probe"
#include "probe_util.cuh"

enum kind { FWD, RES, DX, DW };

struct gcase {
    kind k;
    int M, N, K;
    std::string name;
};

struct cand {
    std::string name; /* "gemmex" or "lt<i>" */
    bool lt;
    cublasLtMatmulAlgo_t algo;
    std::string cfg;
    std::vector<double> ms; /* one per round */
};

static const char *tile_name(int t)
{
    static const struct {
        int id;
        const char *s;
    } T[] = {{15, "64x64"},   {17, "64x128"},  {18, "128x64"},  {19, "64x256"},  {20, "128x128"},
             {21, "256x64"},  {23, "128x256"}, {24, "256x128"}, {26, "64x96"},   {27, "96x64"},
             {28, "96x128"},  {29, "128x160"}, {30, "160x128"}, {31, "192x128"}, {32, "128x192"},
             {33, "128x96"}};
    for (auto &e : T)
        if (e.id == t) return e.s;
    return NULL;
}
static const char *cluster_name(int c)
{
    static const char *C[] = {"auto", "?", "1x1", "2x1", "4x1", "1x2", "2x2", "4x2", "1x4", "2x4", "4x4"};
    return c >= 0 && c <= 10 ? C[c] : NULL;
}

static std::string algo_cfg(const cublasLtMatmulAlgo_t *a, float waves)
{
    int tile = 0, stages = 0, cluster = 0, splitk = 0, id = 0, swz = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
    char b[160], t[16], c[16];
    const char *tn = tile_name(tile), *cn = cluster_name(cluster);
    if (!tn) snprintf(t, sizeof t, "tile%d", tile);
    if (!cn) snprintf(c, sizeof c, "cl%d", cluster);
    snprintf(b, sizeof b, "id %d tile %s stages %d cluster %s splitK %d swizzle %d waves %.2f", id, tn ? tn : t,
             stages, cn ? cn : c, splitk, swz, waves);
    return b;
}

int main(int argc, char **argv)
{
    double turn_ms = 400;
    int rounds = 3, nalgo = 8, opt;
    bool pick = false;
    while ((opt = getopt(argc, argv, "t:r:n:p")) != -1) {
        if (opt == 't') turn_ms = atof(optarg);
        else if (opt == 'r') rounds = atoi(optarg);
        else if (opt == 'n') nalgo = atoi(optarg);
        else if (opt == 'p') pick = true;
        else {
            fprintf(stderr, "usage: gemm_algo_probe [-t TURN_MS] [-r ROUNDS] [-n NALGO] [-p] fwd|res|dx|dw:M,N,K ...\n");
            return 2;
        }
    }
    if (turn_ms <= 0 || rounds < 1 || nalgo < 1) {
        fprintf(stderr, "gemm_algo_probe: -t, -r and -n must be positive\n");
        return 2;
    }
    std::vector<gcase> cases;
    for (int i = optind; i < argc; i++) {
        char k[8];
        int M, N, K;
        if (sscanf(argv[i], "%7[a-z]:%d,%d,%d", k, &M, &N, &K) != 4 || M <= 0 || N <= 0 || K <= 0) {
            fprintf(stderr, "gemm_algo_probe: bad case '%s' (want fwd|res|dx|dw:M,N,K)\n", argv[i]);
            return 2;
        }
        kind kk = !strcmp(k, "fwd") ? FWD : !strcmp(k, "res") ? RES : !strcmp(k, "dx") ? DX : !strcmp(k, "dw") ? DW : (kind)-1;
        if ((int)kk < 0) {
            fprintf(stderr, "gemm_algo_probe: bad kind in '%s'\n", argv[i]);
            return 2;
        }
        cases.push_back({kk, M, N, K, argv[i]});
    }
    if (cases.empty()) {
        fprintf(stderr, "gemm_algo_probe: no case given\n");
        return 2;
    }
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    CB(cublasCreate(&blas));
    CB(cublasLtCreate(&lt));
    CB(cublasSetMathMode(blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    size_t ws_bytes = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));
    CB(cublasSetWorkspace(blas, ws, ws_bytes));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CB(cublasSetStream(blas, st));
    const int BATCH = 10, MAXB = 4096;
    std::vector<cudaEvent_t> ev(MAXB + 1);
    for (auto &e : ev) CK(cudaEventCreate(&e));

    std::vector<std::vector<cand>> all(cases.size());
    for (size_t ci = 0; ci < cases.size(); ci++) {
        gcase &g = cases[ci];
        /* row-major operands: A (left), B (right), C (out), R (residual) */
        size_t na, nb;
        int lda, ldb, ldc = g.N;
        int ta, tb; /* the backend's trans_a / trans_b */
        if (g.k == FWD || g.k == RES) { ta = 0, tb = 1, na = (size_t)g.M * g.K, nb = (size_t)g.N * g.K, lda = g.K, ldb = g.K; }
        else if (g.k == DX) { ta = 0, tb = 0, na = (size_t)g.M * g.K, nb = (size_t)g.K * g.N, lda = g.K, ldb = g.N; }
        else { ta = 1, tb = 0, na = (size_t)g.K * g.M, nb = (size_t)g.K * g.N, lda = g.M, ldb = g.N; }
        bool c32 = g.k == DW;
        bf16 *A, *B, *R = NULL;
        void *C;
        CK(cudaMalloc(&A, na * 2));
        CK(cudaMalloc(&B, nb * 2));
        CK(cudaMalloc(&C, (size_t)g.M * g.N * (c32 ? 4 : 2)));
        CK(cudaMemset(C, 0, (size_t)g.M * g.N * (c32 ? 4 : 2)));
        fill<<<1024, 256>>>(A, na, 1234u + (unsigned)ci, 1.0f);
        fill<<<1024, 256>>>(B, nb, 5678u + (unsigned)ci, g.k == DW ? 1.0f : 0.02f);
        if (g.k == RES) {
            CK(cudaMalloc(&R, (size_t)g.M * g.N * 2));
            fill<<<1024, 256>>>(R, (size_t)g.M * g.N, 91u, 1.0f);
        }
        CK(cudaDeviceSynchronize());
        /* column-major view (cuda_gemm's mapping): m = N, n = M, cuBLAS's A = our B, its B = our A */
        cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        float alpha = 1.0f, beta = (g.k == DW || g.k == RES) ? 1.0f : 0.0f;
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, lc, ld;
        CB(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
        CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
        CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, tb ? g.K : g.N, tb ? g.N : g.K, ldb));
        CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, ta ? g.M : g.K, ta ? g.K : g.M, lda));
        CB(cublasLtMatrixLayoutCreate(&lc, c32 ? CUDA_R_32F : CUDA_R_16BF, g.N, g.M, ldc));
        CB(cublasLtMatrixLayoutCreate(&ld, c32 ? CUDA_R_32F : CUDA_R_16BF, g.N, g.M, ldc));
        cublasLtMatmulPreference_t pref;
        CB(cublasLtMatmulPreferenceCreate(&pref));
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
        uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof scheme));
        std::vector<cublasLtMatmulHeuristicResult_t> res(nalgo);
        int found = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, nalgo, res.data(), &found));
        std::vector<cand> &cs = all[ci];
        if (g.k != RES && !pick) cs.push_back({"gemmex", false, {}, "cublasGemmEx default", {}});
        int chosen = -1; /* -p: the backend's plan (lt_pick in cuda_backend.cu) */
        for (int i = 0; i < found && chosen < 0; i++) {
            int tile = 0;
            size_t w;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
            if (res[i].state == CUBLAS_STATUS_SUCCESS && tile == CUBLASLT_MATMUL_TILE_256x128) chosen = i;
        }
        if (chosen < 0) chosen = 0;
        for (int i = 0; i < found; i++)
            if (res[i].state == CUBLAS_STATUS_SUCCESS && (!pick || i == chosen))
                cs.push_back({"lt" + std::to_string(i), true, res[i].algo, algo_cfg(&res[i].algo, res[i].wavesCount), {}});
        if (cs.empty()) {
            fprintf(stderr, "gemm_algo_probe: no cuBLASLt candidate for case %s\n", g.name.c_str());
            return 1;
        }
        void *Rp = R ? (void *)R : C;
        auto call = [&](const cand &c) {
            if (!c.lt)
                CB(cublasGemmEx(blas, opa, opb, g.N, g.M, g.K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C,
                                c32 ? CUDA_R_32F : CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            else
                CB(cublasLtMatmul(lt, desc, &alpha, B, la, A, lb, &beta, Rp, lc, C, ld, &c.algo, ws, ws_bytes, st));
        };
        double flop = 2.0 * g.M * g.N * g.K;
        for (int r = 0; r < rounds; r++)
            for (cand &c : cs) {
                for (int i = 0; i < 20; i++) call(c); /* warm: also estimates the call's time */
                CK(cudaEventRecord(ev[0], st));
                for (int i = 0; i < 20; i++) call(c);
                CK(cudaEventRecord(ev[1], st));
                CK(cudaEventSynchronize(ev[1]));
                float w;
                CK(cudaEventElapsedTime(&w, ev[0], ev[1]));
                int nb_ = (int)std::min((double)MAXB, std::max(8.0, turn_ms / (w / 20 * BATCH)));
                CK(cudaEventRecord(ev[0], st));
                for (int b = 0; b < nb_; b++) {
                    for (int i = 0; i < BATCH; i++) call(c);
                    CK(cudaEventRecord(ev[b + 1], st));
                }
                CK(cudaEventSynchronize(ev[nb_]));
                std::vector<float> t;
                for (int b = nb_ / 2; b < nb_; b++) {
                    float x;
                    CK(cudaEventElapsedTime(&x, ev[b], ev[b + 1]));
                    t.push_back(x / BATCH);
                }
                double ms = median_of(t);
                c.ms.push_back(ms);
                printf("{\"case\": \"%s\", \"cand\": \"%s\", \"round\": %d, \"ms\": %.5f, \"tflops\": %.1f, \"calls\": %d, "
                       "\"cfg\": \"%s\"}\n",
                       g.name.c_str(), c.name.c_str(), r, ms, flop / ms * 1e-9, nb_ * BATCH, c.cfg.c_str());
                fflush(stdout);
            }
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc),
            cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(desc);
        CK(cudaFree(A));
        CK(cudaFree(B));
        CK(cudaFree(C));
        if (R) CK(cudaFree(R));
    }
    printf("\n%-24s %-7s %9s %8s %7s  %s\n", "case", "cand", "ms", "TFLOP/s", "ratio", "config");
    for (size_t ci = 0; ci < cases.size(); ci++) {
        double base = 0;
        for (cand &c : all[ci]) {
            std::vector<float> v(c.ms.begin(), c.ms.end());
            double ms = median_of(v);
            if (base == 0) base = ms;
            printf("%-24s %-7s %9.4f %8.1f %7.4f  %s\n", cases[ci].name.c_str(), c.name.c_str(), ms,
                   2.0 * cases[ci].M * cases[ci].N * cases[ci].K / ms * 1e-9, ms / base, c.cfg.c_str());
        }
    }
    return 0;
}
