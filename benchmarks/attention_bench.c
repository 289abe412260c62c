/* dissect's fused causal GQA attention alone on the CUDA backend, for benchmarks/attention_bench.sh:
 *
 *   attention_bench B T H Hkv Dh [REPS]
 *
 * q, k, v, do ~ U(-1, 1) in bf16 (q, k and v as the model keeps them: the three column blocks of
 * one [B*T, (H + 2 Hkv) Dh] Q|K|V buffer; dq, dk, dv likewise), one warm-up, then REPS (default 20) timed forward and
 * backward calls (CUDA events on the backend's stream, each call timed alone). Prints one JSON
 * line: {"impl": "dissect", "shape": [B, T, H, Hkv, Dh], "fwd_ms", "bwd_ms" (medians),
 * "fwd_tflops", "bwd_tflops"}, counting causal FLOPs as 4 B H Dh T (T+1)/2 forward and 2.5 times
 * that backward (FlashAttention's convention, also benchmarks/torch_attention_ref.py's).
 * The backward is the default (fused, dq by atomics) unless DX_CUDA_DETERMINISTIC=1.
 * Exit 1 with a message on bad arguments or when the GPU cannot be used.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "cuda/cuda_backend.h"
#include "kernels.h"
#include "bench_util.h"

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: attention_bench B T H Hkv Dh [REPS]\n");
        return 1;
    }
    const int B = atoi(argv[1]), T = atoi(argv[2]), H = atoi(argv[3]), Hkv = atoi(argv[4]),
              Dh = atoi(argv[5]), reps = argc > 6 ? atoi(argv[6]) : 20;
    if (B < 1 || T < 1 || H < 1 || Hkv < 1 || H % Hkv || (Dh != 32 && Dh != 64 && Dh != 128) || reps < 1 ||
        reps > 1000) {
        fprintf(stderr, "attention_bench: bad shape B=%d T=%d H=%d Hkv=%d Dh=%d reps=%d (Dh 32/64/128, Hkv | H)\n",
                B, T, H, Hkv, Dh, reps);
        return 1;
    }
    dx_backend *be = dx_backend_cuda_create(0, 1);
    if (!be) {
        fprintf(stderr, "attention_bench: no CUDA backend: %s\n", dx_last_error());
        return 1;
    }
    const int ld = (H + 2 * Hkv) * Dh; /* row stride of q, k, v, dq, dk, dv */
    const size_t nq = (size_t)B * T * H * Dh, nqkv = (size_t)B * T * ld;
    void *q = bench_rand(be, nqkv, DX_BF16, 1, "attention_bench");
    void *dout = bench_rand(be, nq, DX_BF16, 3, "attention_bench");
    void *o = be->alloc(be, nq * 2, DX_MEM_ACTIVATIONS), *dq = be->alloc(be, nqkv * 2, DX_MEM_ACTIVATIONS);
    void *lse = be->alloc(be, (size_t)B * H * T * 4, DX_MEM_ACTIVATIONS);
    if (!o || !dq || !lse) {
        fprintf(stderr, "attention_bench: cannot allocate: %s\n", dx_last_error());
        return 1;
    }
    void *k = (char *)q + (size_t)H * Dh * 2, *v = (char *)k + (size_t)Hkv * Dh * 2;
    void *dk = (char *)dq + (size_t)H * Dh * 2, *dv = (char *)dk + (size_t)Hkv * Dh * 2;
    cudaStream_t st = (cudaStream_t)dx_cuda_stream(be);
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    double *fr = malloc(reps * sizeof(double)), *br = malloc(reps * sizeof(double));
    for (int r = -1; r < reps; r++) {
        cudaEventRecord(e0, st);
        be->attention_fwd(be, o, lse, q, k, v, ld, ld, B, T, H, Hkv, Dh);
        cudaEventRecord(e1, st);
        be->attention_bwd(be, dq, dk, dv, dout, q, k, v, o, lse, ld, ld, B, T, H, Hkv, Dh);
        cudaEventRecord(e2, st);
        const double b = bench_elapsed_ms(e1, e2, "attention_bench"), a = bench_elapsed_ms(e0, e1, "attention_bench");
        if (r >= 0) fr[r] = a, br[r] = b;
    }
    qsort(fr, reps, sizeof(double), bench_cmp_d);
    qsort(br, reps, sizeof(double), bench_cmp_d);
    const double f = fr[reps / 2], bw = br[reps / 2];
    const double fl = 4.0 * B * H * Dh * (double)T * (T + 1) / 2;
    printf("{\"impl\": \"dissect\", \"shape\": [%d, %d, %d, %d, %d], \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
           "\"fwd_tflops\": %.1f, \"bwd_tflops\": %.1f}\n",
           B, T, H, Hkv, Dh, f, bw, fl / f / 1e9, 2.5 * fl / bw / 1e9);
    be->destroy(be);
    return 0;
}
