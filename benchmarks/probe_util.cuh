/* Helpers shared by the standalone CUDA probes (sm_partition_probe.cu, gemm_algo_probe.cu), each
 * built alone with nvcc (their headers say how). Define PROBE_NAME (a string literal, the
 * program's name) before including this file. */
#ifndef DX_PROBE_UTIL_CUH
#define DX_PROBE_UTIL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

/* A CUDA runtime call (CK) or cuBLAS / cuBLASLt call (CB) that must succeed: on failure prints
 * "PROBE_NAME: the call: the error" and exits 1. */
#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, PROBE_NAME ": %s: %s\n", #x, cudaGetErrorString(e_));                 \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define CB(x)                                                                                     \
    do {                                                                                          \
        cublasStatus_t s_ = (x);                                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            fprintf(stderr, PROBE_NAME ": %s: cuBLAS status %d\n", #x, (int)s_);                  \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

typedef __nv_bfloat16 bf16;

/* p[0 .. n) = scale * u, u uniform in [-1, 1) from a hash of (i, seed): the same values on every
 * run and grid. */
__global__ void fill(bf16 *p, size_t n, unsigned seed, float scale = 1.0f)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2bfloat16(scale * ((float)(h & 0xffffff) / 8388608.0f - 1.0f));
    }
}

/* The median of v (sorts v; 0 when empty). */
template <class T> static double median_of(std::vector<T> &v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : (double)v[v.size() / 2];
}

#endif
