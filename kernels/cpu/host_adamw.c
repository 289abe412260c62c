/* dx_host_adamw: AdamW over offloaded optimizer states in host memory; see kernels.h.
 *
 * ZeRO-Offload's CPU-Adam (Ren et al. 2021, Sec. 4.2) is fast because it makes one pass over
 * memory (read grad, master, m, v; write master, m, v and the low-precision parameter copy) with
 * SIMD arithmetic on every core, where a framework's optimizer makes one pass per tensor op. This
 * is the same idea: one fused loop per thread over a contiguous range, vectorised with omp simd;
 * the range loop is compiled for AVX-512, AVX2 and baseline x86-64 (target_clones) and the CPU
 * picks at load time. The arithmetic is fp32, as in torch.optim.AdamW on fp32 parameters and
 * DeepSpeed's CPU-Adam (fp64 made the loop compute-bound: 2.2x slower on an AVX-512 host), with
 * the expression order of the CPU backend's fp32 adamw op (kernels/cpu/cpu_ops.c), so the
 * offloaded update equals the on-device one bitwise on the CPU backend; the CUDA backend's
 * adamw computes in fp64 and agrees to fp32 rounding. Needs -fno-math-errno (sqrtf vectorised)
 * and no FMA contraction (meson.build).
 */
#include "kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

typedef struct {
    float b1, b2, omb1, omb2, eps, gs, decay, step1, ibc2;
} adamw_c;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DX_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DX_CLONES
#endif

/* bf16 with round-to-nearest-even (NaN stays a quiet NaN), as the backends convert */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (uint16_t)(nan ? q : r); /* a select, so the loop vectorises */
}

#define ADAMW_BODY(i)                                                                          \
    float g = grad[i] * c->gs;                                                                 \
    float pi = p[i] * c->decay;                                                                \
    float mi = c->b1 * m[i] + c->omb1 * g;                                                     \
    float vi = c->b2 * v[i] + c->omb2 * g * g;                                                 \
    pi -= c->step1 * mi / (sqrtf(vi * c->ibc2) + c->eps);                                      \
    p[i] = pi;                                                                                 \
    m[i] = mi;                                                                                 \
    v[i] = vi;

/* One thread's range [i0, i1): PRE(i) (nothing, or UNDO_BODY below), the update, the updated
 * master stored into out as STORE(p[i]). */
#define DEF_RANGE(name, T, STORE, PRE)                                                         \
    DX_CLONES static void name(float *restrict p, float *restrict m, float *restrict v,       \
                               const float *restrict grad, T *restrict out, size_t i0,         \
                               size_t i1, const adamw_c *c)                                    \
    {                                                                                          \
        _Pragma("omp simd") for (size_t i = i0; i < i1; i++)                                   \
        {                                                                                      \
            PRE(i)                                                                             \
            ADAMW_BODY(i)                                                                      \
            out[i] = STORE(p[i]);                                                              \
        }                                                                                      \
    }
#define AS_F32(x) (x)
#define AS_F64(x) ((double)(x))
#define NO_PRE(i)
DEF_RANGE(range_f32, float, AS_F32, NO_PRE)
DEF_RANGE(range_bf16, uint16_t, to_bf16, NO_PRE)
DEF_RANGE(range_f64, double, AS_F64, NO_PRE)

/* max(f, 0) for a non-NaN f in integer operations: a compare would be control flow to the
 * vectoriser (it may trap on NaN), which then leaves the whole loop scalar */
static inline float clamp0(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u &= ~(uint32_t)((int32_t)u >> 31); /* a set sign bit clears the value */
    memcpy(&f, &u, 4);
    return f;
}

/* dx_host_adamw_redo: element i's update with gradient factor 1 undone. The terms the update
 * added are recomputed bitwise (the same fp32 expressions as ADAMW_BODY's with g = grad[i]: the
 * step's subtrahend from the stored m and v, the gradient's shares of m and v) and taken back
 * in fp64, the decay divided out (multiplications by fp64 reciprocals: a loop of divisions was
 * compute-bound). So the only error is what the fp32 results had rounded away:
 * the previous value comes back exactly or within about an ulp of the result, and a moment that
 * was 0 (the first step, an embedding row not seen before) comes back as 0 exactly. v is clamped
 * at 0 (a v made almost entirely of this gradient's square can solve to a tiny negative). */
#define UNDO_BODY(i)                                                                           \
    {                                                                                          \
        float u1 = c->step1 * m[i] / (sqrtf(v[i] * c->ibc2) + c->eps);                         \
        float gm = c->omb1 * grad[i], gv = c->omb2 * grad[i] * grad[i];                        \
        double m0 = ((double)m[i] - (double)gm) * (1.0 / (double)c->b1);                       \
        double v0 = ((double)v[i] - (double)gv) * (1.0 / (double)c->b2);                       \
        p[i] = (float)(((double)p[i] + (double)u1) * (1.0 / (double)c->decay));                \
        m[i] = (float)m0;                                                                      \
        v[i] = clamp0((float)v0);                                                              \
    }
DEF_RANGE(redo_f32, float, AS_F32, UNDO_BODY)
DEF_RANGE(redo_bf16, uint16_t, to_bf16, UNDO_BODY)
DEF_RANGE(redo_f64, double, AS_F64, UNDO_BODY)

#if defined(__x86_64__) && defined(__GNUC__)
#include <emmintrin.h>
#include <stdint.h>
#include <stdlib.h>
/* The bf16 range with the output written by non-temporal (streaming) stores: the bf16 copy is
 * read next by the copy engine (or not at all by this core), so fetching its lines into the
 * cache before writing them (write-allocate) is wasted traffic: 2 of the 32 bytes per parameter
 * that otherwise cross the memory bus. Blocks of 64 elements are computed into a buffer by the
 * same vectorised body, then streamed out 16 bytes at a time (SSE2, every x86-64); the head up
 * to 16-byte alignment and the tail take the plain loop. Same arithmetic: bitwise the same.
 *
 * Software prefetch, pf elements ahead (0: none): each block first asks for the cache lines of
 * master, m, v and grad pf elements further on (prefetcht0; none past the thread's range), so
 * more line misses are in flight per core than the hardware prefetcher keeps (it restarts at
 * every 4 KB page). Measured (benchmarks/host_adamw_bench.sh, 16 threads, 1e9 parameters, 4
 * paired rounds each): +9% and +6% on two H100 machines' hosts (4.50 -> 4.86e9 and 4.20 ->
 * 4.43e9 parameters/s, past their STREAM triads), +-0 on the H200 machine's (4.11 -> 4.13e9,
 * already past its triad); the offloaded 7B step on the H100 -2.6%. */
enum { NT_BLOCK = 64 };
DX_CLONES static void range_bf16_stream(float *restrict p, float *restrict m, float *restrict v,
                                        const float *restrict grad, uint16_t *restrict out, size_t i0,
                                        size_t i1, const adamw_c *c, size_t pf)
{
    size_t i = i0;
    while (i < i1 && ((uintptr_t)(out + i) & 15)) i++;
    if ((uintptr_t)(out + i) & 15) i = i1; /* an odd address: no aligned block */
    range_bf16(p, m, v, grad, out, i0, i, c);
    for (; i + NT_BLOCK <= i1; i += NT_BLOCK) {
        if (pf) /* a line every 16 floats, inside this thread's range of the arrays */
            for (size_t q = i + pf; q < i + pf + NT_BLOCK && q < i1; q += 16) {
                _mm_prefetch((const char *)(p + q), _MM_HINT_T0);
                _mm_prefetch((const char *)(m + q), _MM_HINT_T0);
                _mm_prefetch((const char *)(v + q), _MM_HINT_T0);
                _mm_prefetch((const char *)(grad + q), _MM_HINT_T0);
            }
        uint16_t tmp[NT_BLOCK] __attribute__((aligned(64)));
        _Pragma("omp simd") for (size_t j = 0; j < NT_BLOCK; j++)
        {
            ADAMW_BODY(i + j)
            tmp[j] = to_bf16(pi);
        }
        for (int q = 0; q < NT_BLOCK * 2 / 16; q++)
            _mm_stream_si128((__m128i *)(out + i) + q, _mm_load_si128((const __m128i *)tmp + q));
    }
    range_bf16(p, m, v, grad, out, i, i1, c);
    _mm_sfence(); /* the streamed lines are visible before the copy engine is told to read them */
}

/* Streaming stores, unless DX_HOST_ADAMW_STREAM=0 (read at each call: benchmarks/adamw_bench.c
 * and tests/test_kernels.c compare both ways). Measured in paired runs: 16 threads of an H100
 * host, 1e9 parameters, 4.05 -> 4.12 and 4.30 -> 4.46e9 parameters/s; 2 threads of a 2-core VM,
 * 2e8 parameters, +1.7% to +3.3% in four pairs. */
static int use_stream(void)
{
    const char *e = getenv("DX_HOST_ADAMW_STREAM");
    return !(e && e[0] == '0');
}

/* The prefetch distance of the streaming loop in elements: DX_HOST_ADAMW_PREFETCH (read at each
 * call, like DX_HOST_ADAMW_STREAM; 0 turns it off; rounded down to whole 64-element blocks; a
 * value that is not a count up to 1 Mi means the default), else 512 (2 KB ahead in each of the
 * four arrays: 256 to 1024 timed alike on the H100 host, prefetcht1 and 2-8 KB no better). */
static size_t prefetch_distance(void)
{
    const char *e = getenv("DX_HOST_ADAMW_PREFETCH");
    if (!e || !*e) return 512;
    char *end;
    unsigned long d = strtoul(e, &end, 10);
    if (*end || d > (1ul << 20)) return 512; /* not a count: the default */
    return (size_t)d / NT_BLOCK * NT_BLOCK;
}
#else
#define range_bf16_stream(p, m, v, g, out, i0, i1, c, pf) range_bf16(p, m, v, g, out, i0, i1, c)
static int use_stream(void) { return 0; }
static size_t prefetch_distance(void) { return 0; }
#endif

/* The loop constants of one update, in fp32 as ADAMW_BODY uses them. */
static adamw_c constants(const dx_adamw_hparams *hp)
{
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double bc1 = 1.0 - pow(b1, (double)hp->step), bc2 = 1.0 - pow(b2, (double)hp->step);
    const adamw_c c = {(float)b1, (float)b2, (float)(1.0 - b1), (float)(1.0 - b2), (float)hp->eps,
                       (float)hp->grad_scale, (float)(1.0 - hp->lr * hp->weight_decay),
                       (float)(hp->lr / bc1), (float)(1.0 / bc2)};
    return c;
}

/* Threads for n elements, and each one's range: contiguous, a multiple of 16 elements (whole
 * cache lines of the fp32 arrays). */
static int team(size_t n, int nthreads, size_t *per)
{
    int nt = nthreads >= 1 ? nthreads : 1;
    if (n < ((size_t)1 << 15)) nt = 1; /* not worth waking the team */
    *per = ((n + (size_t)nt - 1) / (size_t)nt + 15) / 16 * 16;
    return nt;
}

/* dx_host_adamw (redo 0) and dx_host_adamw_redo (redo 1): the update's constants, then each
 * OpenMP thread's range through the loop for the output dtype. */
static void update(float *master, float *m, float *v, const float *grad, void *out, dx_dtype out_dt, size_t n,
                   const dx_adamw_hparams *hp, int nthreads, int redo)
{
    if (!n) return;
    const adamw_c c = constants(hp);
    size_t per;
    const int nt = team(n, nthreads, &per);
    const int stream = !redo && use_stream();
    const size_t pf = stream ? prefetch_distance() : 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = omp_get_thread_num();
        size_t i0 = (size_t)t * per, i1 = i0 + per < n ? i0 + per : n;
        if (i0 < n) {
            if (redo && out_dt == DX_BF16) redo_bf16(master, m, v, grad, out, i0, i1, &c);
            else if (redo && out_dt == DX_F64) redo_f64(master, m, v, grad, out, i0, i1, &c);
            else if (redo) redo_f32(master, m, v, grad, out, i0, i1, &c);
            else if (out_dt == DX_BF16 && stream) range_bf16_stream(master, m, v, grad, out, i0, i1, &c, pf);
            else if (out_dt == DX_BF16) range_bf16(master, m, v, grad, out, i0, i1, &c);
            else if (out_dt == DX_F64) range_f64(master, m, v, grad, out, i0, i1, &c);
            else range_f32(master, m, v, grad, out, i0, i1, &c);
        }
    }
}

void dx_host_adamw(float *master, float *m, float *v, const float *grad, void *out, dx_dtype out_dt,
                   size_t n, const dx_adamw_hparams *hp, int nthreads)
{
    update(master, m, v, grad, out, out_dt, n, hp, nthreads, 0);
}

void dx_host_adamw_redo(float *master, float *m, float *v, const float *grad, void *out, dx_dtype out_dt,
                        size_t n, const dx_adamw_hparams *hp, int nthreads)
{
    update(master, m, v, grad, out, out_dt, n, hp, nthreads, 1);
}

void dx_host_convert_f32(void *out, dx_dtype out_dt, const float *src, size_t n)
{
    if (out_dt == DX_BF16) {
        uint16_t *o = out;
        for (size_t i = 0; i < n; i++) o[i] = to_bf16(src[i]);
    } else if (out_dt == DX_F64) {
        double *o = out;
        for (size_t i = 0; i < n; i++) o[i] = src[i];
    } else if (n) {
        memcpy(out, src, n * sizeof(float));
    }
}
