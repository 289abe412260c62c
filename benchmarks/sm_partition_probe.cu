/* sm_partition_probe: does a memory-bound pass cost less beside a GEMM that leaves it a few SMs
 * than after the GEMM, on a GPU at its power limit? (benchmarks/NOTES.md item 30)
 *
 * The training step's weight-gradient GEMMs (bf16 operands, fp32 gradient += dY^T X) are
 * power-bound; RMSNorm's backward is memory-bound and can run beside the same layer's weight
 * gradient (it needs only the input gradient). Each case below runs back to back for ITERS
 * iterations (the clock settles at the power limit within the first few hundred) and prints the
 * median of the last half of the per-iteration times (CUDA events on stream 0):
 *   gemm         the GEMM alone, every SM (cublasGemmEx, as the backend's wgrad)
 *   gemm@S       the GEMM alone with cublasSetSmCountTarget(SMs - S)
 *   norm         the norm-like pass alone, 2 blocks per SM
 *   norm/S       the pass alone on S blocks (one per SM: 512 threads, more registers than a
 *                GEMM CTA leaves, so no GEMM CTA shares its SM)
 *   serial       gemm then norm on one stream (what the step does now)
 *   overlap/S    norm/S on a second stream beside gemm@S, joined every iteration
 * The norm-like pass is RMSNorm's backward without dw: per row of D bf16, c = sum dy w x rstd,
 * then dres += rstd (dy w - x rstd c / D) (reads dy, x, dres; writes dres).
 *
 * Build (on the GPU host, `. .gpu/env.sh` first): nvcc -gencode=arch=compute_90a,code=sm_90a -O3
 * -std=c++17 benchmarks/sm_partition_probe.cu -lcublas -o /tmp/sm_partition_probe
 * Usage: sm_partition_probe M N K [ITERS [S ...]]   (row-major dW[N, K] += dY[M, N]^T X[M, K];
 * the norm pass over M rows of K). Data: uniform in [-1, 1), fixed seed. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_NAME "sm_partition_probe"
#include "probe_util.cuh"

__global__ void fill_f(float *p, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

/* one warp per row at a time, rows strided over all warps; D % 256 == 0, D <= 4096 */
template <int V>
__global__ void __launch_bounds__(512) normlike(bf16 *dres, const bf16 *dy, const bf16 *x, const bf16 *w,
                                                const float *rstd, int R, int D)
{
    const int lane = threadIdx.x & 31, warps = gridDim.x * (blockDim.x >> 5);
    for (int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < R; r += warps) {
        const uint4 *dyr = (const uint4 *)(dy + (size_t)r * D), *xr = (const uint4 *)(x + (size_t)r * D);
        uint4 *dr = (uint4 *)(dres + (size_t)r * D);
        const uint4 *wr = (const uint4 *)w;
        uint4 a[V], b[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            a[k] = dyr[k * 32 + lane];
            b[k] = xr[k * 32 + lane];
        }
        const float rs = rstd[r];
        float c = 0;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const uint4 wv = wr[k * 32 + lane];
            const bf16 *pa = (const bf16 *)&a[k], *pb = (const bf16 *)&b[k], *pw = (const bf16 *)&wv;
#pragma unroll
            for (int e = 0; e < 8; e++)
                c = fmaf(__bfloat162float(pa[e]) * __bfloat162float(pw[e]), __bfloat162float(pb[e]) * rs, c);
        }
#pragma unroll
        for (int o = 16; o; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
        const float cm = c / (float)D;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const uint4 wv = wr[k * 32 + lane];
            uint4 ov = dr[k * 32 + lane];
            const bf16 *pa = (const bf16 *)&a[k], *pb = (const bf16 *)&b[k], *pw = (const bf16 *)&wv;
            bf16 *po = (bf16 *)&ov;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float xh = __bfloat162float(pb[e]) * rs;
                po[e] = __float2bfloat16(__bfloat162float(po[e]) +
                                         rs * (__bfloat162float(pa[e]) * __bfloat162float(pw[e]) - xh * cm));
            }
            dr[k * 32 + lane] = ov;
        }
    }
}

struct bufs {
    int M, N, K, sms;
    bf16 *dy, *x, *w, *ndy, *nx, *dres;
    float *dw, *rstd;
};

static void gemm(cublasHandle_t h, const bufs &b, cudaStream_t s)
{
    /* row-major dW[N, K] += dY[M, N]^T X[M, K]  ==  column-major dW^T[K, N] = X^T[K, M] dY[M, N] */
    const float one = 1.0f;
    CB(cublasSetStream(h, s));
    CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, b.K, b.N, b.M, &one, b.x, CUDA_R_16BF, b.K, b.dy, CUDA_R_16BF,
                    b.N, &one, b.dw, CUDA_R_32F, b.K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void norm(const bufs &b, int blocks, int threads, cudaStream_t s)
{
    const int V = b.K / 256;
    switch (V) {
    case 8: normlike<8><<<blocks, threads, 0, s>>>(b.dres, b.ndy, b.nx, b.w, b.rstd, b.M, b.K); break;
    case 16: normlike<16><<<blocks, threads, 0, s>>>(b.dres, b.ndy, b.nx, b.w, b.rstd, b.M, b.K); break;
    default: normlike<4><<<blocks, threads, 0, s>>>(b.dres, b.ndy, b.nx, b.w, b.rstd, b.M, b.K); break;
    }
    CK(cudaGetLastError());
}

/* runs `it` iterations of body(i) on s0 (body may fork/join s1), returns the median of the last
 * half of the per-iteration times in us */
template <class F> static double timed(int iters, cudaStream_t s0, F body)
{
    std::vector<cudaEvent_t> ev(iters + 1);
    for (auto &e : ev) CK(cudaEventCreate(&e));
    CK(cudaEventRecord(ev[0], s0));
    for (int i = 0; i < iters; i++) {
        body();
        CK(cudaEventRecord(ev[i + 1], s0));
    }
    CK(cudaStreamSynchronize(s0));
    std::vector<double> t;
    for (int i = iters / 2; i < iters; i++) {
        float ms;
        CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
        t.push_back(ms * 1e3);
    }
    for (auto &e : ev) CK(cudaEventDestroy(e));
    return median_of(t);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: sm_partition_probe M N K [ITERS [S ...]]\n");
        return 2;
    }
    bufs b;
    b.M = atoi(argv[1]);
    b.N = atoi(argv[2]);
    b.K = atoi(argv[3]);
    const int iters = argc > 4 ? atoi(argv[4]) : 1000;
    std::vector<int> side;
    for (int i = 5; i < argc; i++) side.push_back(atoi(argv[i]));
    if (side.empty()) side = {8, 16, 24};
    if (b.M <= 0 || b.N <= 0 || b.K <= 0 || b.K % 256 || b.K > 4096 || iters < 10) {
        fprintf(stderr, "sm_partition_probe: M, N > 0; K a multiple of 256 up to 4096; ITERS >= 10\n");
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    b.sms = prop.multiProcessorCount;
    const size_t MN = (size_t)b.M * b.N, MK = (size_t)b.M * b.K;
    CK(cudaMalloc(&b.dy, MN * 2));
    CK(cudaMalloc(&b.x, MK * 2));
    CK(cudaMalloc(&b.ndy, MK * 2));
    CK(cudaMalloc(&b.nx, MK * 2));
    CK(cudaMalloc(&b.dres, MK * 2));
    CK(cudaMalloc(&b.w, (size_t)b.K * 2));
    CK(cudaMalloc(&b.dw, (size_t)b.N * b.K * 4));
    CK(cudaMalloc(&b.rstd, (size_t)b.M * 4));
    fill<<<1024, 256>>>(b.dy, MN, 1);
    fill<<<1024, 256>>>(b.x, MK, 2);
    fill<<<1024, 256>>>(b.ndy, MK, 3);
    fill<<<1024, 256>>>(b.nx, MK, 4);
    fill<<<1024, 256>>>(b.dres, MK, 5);
    fill<<<64, 256>>>(b.w, (size_t)b.K, 6);
    fill_f<<<1024, 256>>>(b.dw, (size_t)b.N * b.K, 0.0f);
    fill_f<<<64, 256>>>(b.rstd, (size_t)b.M, 0.5f);
    CK(cudaDeviceSynchronize());

    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s0, s1;
    CK(cudaStreamCreateWithPriority(&s0, cudaStreamNonBlocking, hi));
    CK(cudaStreamCreateWithPriority(&s1, cudaStreamNonBlocking, hi));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    void *ws;
    const size_t wsb = 64u << 20;
    CK(cudaMalloc(&ws, wsb));
    CB(cublasSetWorkspace(h, ws, wsb));
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));

    const double gflop = 2.0 * b.M * b.N * (double)b.K * 1e-9;
    const double mb = 4.0 * MK * 2 * 1e-6; /* dy, x, dres read, dres written */
    printf("%s, %d SMs; dW[%d, %d] += dY^T X over M = %d (%.1f GFLOP); norm pass %d x %d (%.0f MB); "
           "median of the last %d of %d iterations, us\n",
           prop.name, b.sms, b.N, b.K, b.M, gflop, b.M, b.K, mb, iters / 2, iters);

    /* warm-up: every case once (cuBLAS picks its kernels per SM target) */
    auto run_gemm = [&](int target) {
        CB(cublasSetSmCountTarget(h, target));
        gemm(h, b, s0);
    };
    run_gemm(0);
    for (int s : side) run_gemm(b.sms - s);
    CB(cublasSetSmCountTarget(h, 0));
    norm(b, 2 * b.sms, 256, s0);
    CK(cudaDeviceSynchronize());

    printf("%-14s %10s %10s %10s\n", "case", "us", "TFLOP/s", "TB/s");
    auto row = [&](const char *name, double us, double fl, double mbytes) {
        printf("%-14s %10.1f %10.0f %10.2f\n", name, us, fl / us * 1e3, mbytes / us);
        fflush(stdout);
    };
    /* two rounds, so that a drift of the clock shows as a difference between them */
    for (int round = 0; round < 2; round++) {
        printf("-- round %d\n", round + 1);
        const double tg = timed(iters, s0, [&] { run_gemm(0); });
        row("gemm", tg, gflop, 0);
        const double tn = timed(iters, s0, [&] { norm(b, 2 * b.sms, 256, s0); });
        row("norm", tn, 0, mb);
        const double ts = timed(iters, s0, [&] { run_gemm(0); norm(b, 2 * b.sms, 256, s0); });
        row("serial", ts, gflop, mb);
        for (int s : side) {
            char nm[32];
            snprintf(nm, sizeof nm, "gemm@%d", b.sms - s);
            row(nm, timed(iters, s0, [&] { run_gemm(b.sms - s); }), gflop, 0);
            snprintf(nm, sizeof nm, "norm/%d", s);
            row(nm, timed(iters, s0, [&] { norm(b, s, 512, s0); }), 0, mb);
            snprintf(nm, sizeof nm, "overlap/%d", s);
            const double to = timed(iters, s0, [&] {
                CK(cudaEventRecord(fork, s0));
                CK(cudaStreamWaitEvent(s1, fork, 0));
                norm(b, s, 512, s1);
                CK(cudaEventRecord(join, s1));
                run_gemm(b.sms - s);
                CK(cudaStreamWaitEvent(s0, join, 0));
            });
            row(nm, to, gflop, mb);
            printf("%-14s %10.3f  (overlap/%d against serial)\n", "ratio", to / ts, s);
        }
        CB(cublasSetSmCountTarget(h, 0));
    }
    CB(cublasDestroy(h));
    return 0;
}
