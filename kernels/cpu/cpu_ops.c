/* dissect CPU kernels (OpenBLAS + OpenMP), built twice: -DDX_REAL_F32 (real = float,
 * functions dx_cpu_f32_*) and -DDX_REAL_F64 (real = double, dx_cpu_f64_*). The math of every op
 * is documented in kernels.h.
 *
 * Determinism: every op gives bitwise-identical results for any thread count. Parallel loops
 * only split independent output elements (rows, columns, keys); every reduction runs in a
 * fixed order chosen from the shapes alone (never from the number of threads). `omp simd`
 * reductions are reassociated by the compiler, but identically in every thread.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* We never unmask floating-point exceptions, so comparisons may be if-converted: this lets GCC
 * vectorise loops with min/max/clamps (e.g. r_exp below) at -O2. It changes no results. */
#pragma GCC optimize("no-trapping-math")
#endif

#include "cpu_ops.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(DX_REAL_F32)
typedef float real;
#define DX_OP(name) dx_cpu_f32_##name
#define R_LOG logf
#define R_SQRT sqrtf
#elif defined(DX_REAL_F64)
typedef double real;
#define DX_OP(name) dx_cpu_f64_##name
#define R_LOG log
#define R_SQRT sqrt
#else
#error "compile cpu_ops.c with -DDX_REAL_F32 or -DDX_REAL_F64"
#endif

/* Threads for a parallel loop of this backend. */
#define NT(be) ((be)->nthreads > 0 ? (be)->nthreads : 1)
/* Element-wise loops below this size run on one thread (fork/join costs more than the work). */
#define DX_PAR_MIN 32768

#if defined(DX_REAL_F32)
/* exp for float that the compiler can vectorise (libm's expf is a scalar call): Cody-Waite
 * reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial (Cephes expf, ~1 ulp), scaled
 * by 2^n through the exponent bits. exp(x) = 0 below ln(FLT_MIN) (also for -inf); arguments
 * above 88 saturate at exp(88) (the kernels only exponentiate x <= 0 in softmaxes, and
 * silu's exp(-g) is harmless there); NaN propagates. */
static inline float r_exp(float x)
{
    const float lo = -87.33654475f, hi = 88.0f;
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    xc = xc == xc ? xc : 0.0f; /* NaN: a finite exponent for the bits below (the result is NaN) */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    union { int32_t i; float f; } sc;
    sc.i = ((int32_t)n + 127) << 23;
    float y = p * sc.f;
    return x != x ? x : x < lo ? 0.0f : y;
}
#else
#define r_exp exp
#endif

/* ------------------------------------------------------------------------------------------ */

void DX_OP(gemm)(dx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                 int c_acc)
{
    (void)be;
    (void)c_acc; /* act == acc on the CPU */
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* C = beta C (BLAS would reject lda < 1) */
        real *c = C;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                c[(size_t)i * ldc + j] = beta == 0 ? 0 : (real)beta * c[(size_t)i * ldc + j];
        return;
    }
#if defined(DX_REAL_F32)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, (const float *)A, lda,
                (const float *)B, ldb, beta, (float *)C, ldc);
#else
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, (double)alpha, (const double *)A,
                lda, (const double *)B, ldb, (double)beta, (double *)C, ldc);
#endif
}

/* ------------------------------------------------------------------------------------------ */

void DX_OP(rmsnorm_fwd)(dx_backend *be, void *y_, void *rstd_, const void *x_, const void *w_,
                        int N, int D, float eps)
{
    real *y = y_, *rstd = rstd_;
    const real *x = x_, *w = w_;
#pragma omp parallel for num_threads(NT(be)) schedule(static) if (N > 1 && (size_t)N * D >= 4096)
    for (int i = 0; i < N; i++) {
        const real *xi = x + (size_t)i * D;
        real *yi = y + (size_t)i * D;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < D; j++) ss += (double)xi[j] * xi[j];
        double rs = 1.0 / sqrt(ss / D + (double)eps);
        rstd[i] = (real)rs;
        real r = (real)rs;
#pragma omp simd
        for (int j = 0; j < D; j++) yi[j] = w[j] * (xi[j] * r);
    }
}

#define DX_DW_BLOCK 64

void DX_OP(rmsnorm_bwd)(dx_backend *be, void *dx_, void *dw_, const void *dy_, const void *x_,
                        const void *w_, const void *rstd_, int N, int D)
{
    real *dx = dx_, *dw = dw_;
    const real *dy = dy_, *x = x_, *w = w_, *rstd = rstd_;
    int nt = NT(be);
    int big = (size_t)N * D >= 4096;

    /* dx: rows are independent. */
#pragma omp parallel for num_threads(nt) schedule(static) if (big && N > 1)
    for (int i = 0; i < N; i++) {
        const real *dyi = dy + (size_t)i * D, *xi = x + (size_t)i * D;
        real *dxi = dx + (size_t)i * D;
        real rs = rstd[i];
        double c = 0;
#pragma omp simd reduction(+ : c)
        for (int j = 0; j < D; j++) c += (double)(dyi[j] * w[j]) * (double)(xi[j] * rs);
        real cm = (real)(c / D);
#pragma omp simd
        for (int j = 0; j < D; j++) dxi[j] += rs * (dyi[j] * w[j] - (xi[j] * rs) * cm);
    }

    /* dw: column blocks are independent; each sums over rows in order i = 0..N-1. */
    int nblk = (D + DX_DW_BLOCK - 1) / DX_DW_BLOCK;
#pragma omp parallel for num_threads(nt) schedule(static) if (big && nblk > 1)
    for (int bk = 0; bk < nblk; bk++) {
        int j0 = bk * DX_DW_BLOCK, nj = D - j0 < DX_DW_BLOCK ? D - j0 : DX_DW_BLOCK;
        double acc[DX_DW_BLOCK];
        for (int j = 0; j < nj; j++) acc[j] = 0;
        for (int i = 0; i < N; i++) {
            const real *dyi = dy + (size_t)i * D + j0, *xi = x + (size_t)i * D + j0;
            real rs = rstd[i];
#pragma omp simd
            for (int j = 0; j < nj; j++) acc[j] += (double)dyi[j] * (double)(xi[j] * rs);
        }
        for (int j = 0; j < nj; j++) dw[j0 + j] += (real)acc[j];
    }
}

/* ------------------------------------------------------------------------------------------ */

/* Rotates every head of x[B,T,H,Dh] (tokens are rows of ld elements) by the angles of its
 * position t; dir = +1 forward, -1 for the transpose (inverse) rotation. Angles are computed in
 * double, once per t. */
static void rope_apply(dx_backend *be, real *x, int ld, int B, int T, int H, int Dh, float theta,
                       int dir)
{
    int half = Dh / 2;
#pragma omp parallel num_threads(NT(be)) if (T > 1 && (size_t)B * T * H * Dh >= 8192)
    {
        real cs[half > 0 ? 2 * half : 1];
        real *c = cs, *s = cs + half;
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < half; i++) {
                double f = (double)t * pow((double)theta, -2.0 * i / Dh);
                c[i] = (real)cos(f);
                s[i] = (real)(dir * sin(f));
            }
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    real *xa = x + ((size_t)b * T + t) * ld + (size_t)h * Dh, *xb = xa + half;
#pragma omp simd
                    for (int i = 0; i < half; i++) {
                        real a = xa[i], bb = xb[i];
                        xa[i] = a * c[i] - bb * s[i];
                        xb[i] = bb * c[i] + a * s[i];
                    }
                }
        }
    }
}

void DX_OP(rope_fwd)(dx_backend *be, void *x, int ld, int B, int T, int H, int Dh, float theta)
{
    rope_apply(be, x, ld, B, T, H, Dh, theta, +1);
}

void DX_OP(rope_bwd)(dx_backend *be, void *dx, int ld, int B, int T, int H, int Dh, float theta)
{
    rope_apply(be, dx, ld, B, T, H, Dh, theta, -1);
}

/* ------------------------------------------------------------------------------------------ */

/* Attention runs on tiles (FlashAttention-2 on a CPU): every heavy step is a small product
 * C[M,N] (+)= A[M,K] B[K,N] on per-thread scratch (mm_nn below: register-blocked, vectorised
 * along N), with key or query tiles transposed to [Dh][tile] where a product contracts over
 * Dh. Scratch is O(tile x Dh) per thread; no T x T matrix exists. Every score is the same
 * expression in the forward and in both backward passes, s = sum_{d ascending} (q[d] * scale) *
 * k[d], so the backward recomputes exactly the forward's probabilities. */
#define DX_ATT_KB 64 /* keys per tile (forward, dq pass); queries per tile (dk/dv pass) */
#define DX_ATT_RB 32 /* query rows per task (forward, dq pass); keys per task (dk/dv pass) */

/* 32-byte vectors: AVX2 registers in mm_nn's avx2 clone, pairs of SSE2 registers otherwise.
 * Every lane does the same IEEE operations in the same order in either clone. */
#define VL ((int)(32 / sizeof(real))) /* reals per vector */
typedef real vr __attribute__((vector_size(32)));
typedef real vru __attribute__((vector_size(32), aligned(sizeof(real)), may_alias));
#define VLD(p) ((vr) * (const vru *)(p))
#define VST(p, v) (*(vru *)(p) = (v))

/* C[M,N] = (acc ? C : 0) + A[M,K] B[K,N], row strides lda, ldb, ldc. Each C element is summed
 * over k = 0..K-1 in order, whatever path computes it. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void mm_nn(int M, int N, int K, const real *restrict A, size_t lda, const real *restrict B,
                  size_t ldb, real *restrict C, size_t ldc, int acc)
{
    int n = 0;
    for (; n + 2 * VL <= N; n += 2 * VL) {
        int m = 0;
        for (; m + 4 <= M; m += 4) {
            const real *a0 = A + (size_t)m * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
            real *c0 = C + (size_t)m * ldc + n, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
            vr z = {0};
            vr s00 = acc ? VLD(c0) : z, s01 = acc ? VLD(c0 + VL) : z;
            vr s10 = acc ? VLD(c1) : z, s11 = acc ? VLD(c1 + VL) : z;
            vr s20 = acc ? VLD(c2) : z, s21 = acc ? VLD(c2 + VL) : z;
            vr s30 = acc ? VLD(c3) : z, s31 = acc ? VLD(c3 + VL) : z;
            const real *b = B + n;
            for (int k = 0; k < K; k++, b += ldb) {
                vr b0 = VLD(b), b1 = VLD(b + VL);
                real x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
                s00 += x0 * b0;
                s01 += x0 * b1;
                s10 += x1 * b0;
                s11 += x1 * b1;
                s20 += x2 * b0;
                s21 += x2 * b1;
                s30 += x3 * b0;
                s31 += x3 * b1;
            }
            VST(c0, s00);
            VST(c0 + VL, s01);
            VST(c1, s10);
            VST(c1 + VL, s11);
            VST(c2, s20);
            VST(c2 + VL, s21);
            VST(c3, s30);
            VST(c3 + VL, s31);
        }
        for (; m < M; m++) {
            const real *a0 = A + (size_t)m * lda;
            real *c0 = C + (size_t)m * ldc + n;
            vr z = {0};
            vr s00 = acc ? VLD(c0) : z, s01 = acc ? VLD(c0 + VL) : z;
            const real *b = B + n;
            for (int k = 0; k < K; k++, b += ldb) {
                s00 += a0[k] * VLD(b);
                s01 += a0[k] * VLD(b + VL);
            }
            VST(c0, s00);
            VST(c0 + VL, s01);
        }
    }
    for (; n + VL <= N; n += VL)
        for (int m = 0; m < M; m++) {
            const real *a0 = A + (size_t)m * lda;
            real *c0 = C + (size_t)m * ldc + n;
            vr s = {0};
            if (acc) s = VLD(c0);
            const real *b = B + n;
            for (int k = 0; k < K; k++, b += ldb) s += a0[k] * VLD(b);
            VST(c0, s);
        }
    for (; n < N; n++)
        for (int m = 0; m < M; m++) {
            const real *a0 = A + (size_t)m * lda;
            real s = acc ? C[(size_t)m * ldc + n] : 0;
            for (int k = 0; k < K; k++) s += a0[k] * B[(size_t)k * ldb + n];
            C[(size_t)m * ldc + n] = s;
        }
}

/* dst[d * DX_ATT_KB + j] = f * src[j * stride + d] for j < n: a tile, transposed */
static void tile_t(real *restrict dst, const real *restrict src, size_t stride, int n, int Dh,
                   real f)
{
    for (int d = 0; d < Dh; d++) {
        real *t = dst + (size_t)d * DX_ATT_KB;
        for (int j = 0; j < n; j++) t[j] = src[(size_t)j * stride + d] * f;
    }
}

/* dst[r * Dh + d] = f * src[r * stride + d] for r < n: a tile of rows, packed */
static void tile_rows(real *restrict dst, const real *restrict src, size_t stride, int n, int Dh,
                      real f)
{
    for (int r = 0; r < n; r++)
        for (int d = 0; d < Dh; d++) dst[(size_t)r * Dh + d] = src[(size_t)r * stride + d] * f;
}

void DX_OP(attention_fwd)(dx_backend *be, void *o_, void *lse_, const void *q_, const void *k_,
                          const void *v_, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh)
{
    real *o = o_, *lse = lse_;
    const real *q = q_, *k = k_, *v = v_;
    const int G = H / Hkv;
    const real scale = (real)(1.0 / sqrt((double)Dh));
    const size_t qs = (size_t)H * Dh, ks = (size_t)ldkv, ql = (size_t)ldq; /* strides of t (o, k|v, q) */
    const int nqb = (T + DX_ATT_RB - 1) / DX_ATT_RB;
    const long tasks = (long)B * H * nqb;

#pragma omp parallel num_threads(NT(be)) if (tasks > 1 && (size_t)B * H * T * T * Dh >= 32768)
    {
        real qsc[DX_ATT_RB * Dh], kt[Dh * DX_ATT_KB], acc[DX_ATT_RB * Dh];
        real s[DX_ATT_RB * DX_ATT_KB], m[DX_ATT_RB], l[DX_ATT_RB];
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < tasks; task++) { /* task = (b*H + h)*nqb + qb */
            int qb = (int)(task % nqb), h = (int)((task / nqb) % H), b = (int)(task / ((long)nqb * H));
            int i0 = qb * DX_ATT_RB, i1 = i0 + DX_ATT_RB < T ? i0 + DX_ATT_RB : T, nr = i1 - i0;
            int kh = h / G;
            const real *kb = k + (size_t)b * T * ks + (size_t)kh * Dh;
            const real *vb = v + (size_t)b * T * ks + (size_t)kh * Dh;
            tile_rows(qsc, q + ((size_t)b * T + i0) * ql + (size_t)h * Dh, ql, nr, Dh, scale);
            for (int r = 0; r < nr; r++) {
                m[r] = -INFINITY;
                l[r] = 0;
            }
            for (int j0 = 0; j0 < i1; j0 += DX_ATT_KB) {
                int nj = i1 - j0 < DX_ATT_KB ? i1 - j0 : DX_ATT_KB;
                tile_t(kt, kb + (size_t)j0 * ks, ks, nj, Dh, 1);
                mm_nn(nr, nj, Dh, qsc, Dh, kt, DX_ATT_KB, s, DX_ATT_KB, 0);
                for (int r = 0; r < nr; r++) {
                    real *sr = s + (size_t)r * DX_ATT_KB, *ar = acc + (size_t)r * Dh;
                    int cnt = i0 + r + 1 - j0; /* causal: keys j <= i */
                    cnt = cnt < nj ? cnt : nj;
                    cnt = cnt > 0 ? cnt : 0;
                    real bm = -INFINITY;
                    for (int jj = 0; jj < cnt; jj++) bm = sr[jj] > bm ? sr[jj] : bm;
                    if (bm > m[r]) { /* rescale what was summed under the old maximum */
                        real corr = r_exp(m[r] - bm);
                        l[r] *= corr;
                        if (j0 > 0)
                            for (int d = 0; d < Dh; d++) ar[d] *= corr;
                        m[r] = bm;
                    }
                    real mr = m[r], ls = 0;
#pragma omp simd reduction(+ : ls)
                    for (int jj = 0; jj < cnt; jj++) {
                        sr[jj] = r_exp(sr[jj] - mr);
                        ls += sr[jj];
                    }
                    for (int jj = cnt; jj < nj; jj++) sr[jj] = 0;
                    l[r] += ls;
                }
                mm_nn(nr, Dh, nj, s, DX_ATT_KB, vb + (size_t)j0 * ks, ks, acc, Dh, j0 > 0);
            }
            for (int r = 0; r < nr; r++) {
                real inv = 1 / l[r];
                real *oi = o + ((size_t)b * T + i0 + r) * qs + (size_t)h * Dh;
                for (int d = 0; d < Dh; d++) oi[d] = acc[(size_t)r * Dh + d] * inv;
                lse[((size_t)b * H + h) * T + i0 + r] = m[r] + R_LOG(l[r]);
            }
        }
    }
}

/* Three passes, each parallel over independent outputs (no atomics, fixed summation order):
 *   1. D_i = do_i . o_i per (b, i, h), parked in dq[b,i,h,0] (dq's row (b, i) is ldq apart;
 *      dq is overwritten in pass 3);
 *   2. dk_j, dv_j per (b, kv head, tile of keys): over the group's query heads, then query
 *      tiles in ascending order;
 *   3. dq_i per (b, h, tile of queries): over key tiles in ascending order.
 * Probabilities are recomputed from lse in passes 2 and 3 (FlashAttention-2). */
void DX_OP(attention_bwd)(dx_backend *be, void *dq_, void *dk_, void *dv_, const void *dout_,
                          const void *q_, const void *k_, const void *v_, const void *o_,
                          const void *lse_, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh)
{
    real *dq = dq_, *dk = dk_, *dv = dv_;
    const real *dout = dout_, *q = q_, *k = k_, *v = v_, *o = o_, *lse = lse_;
    const int G = H / Hkv;
    const real scale = (real)(1.0 / sqrt((double)Dh));
    const size_t qs = (size_t)H * Dh, ks = (size_t)ldkv, ql = (size_t)ldq; /* o, dout; k|v; q, dq */
    const long qrows = (long)B * T * H;
    const int nt = NT(be);
    const int nb = (T + DX_ATT_RB - 1) / DX_ATT_RB;
    const int par = (size_t)B * H * T * T * Dh >= 32768;

    /* pass 1: D, indexed like q rows: (b*T + i)*H + h. Summed in d order like mm_nn's dp, so
     * that ds is exactly 0 where o = v (T = 1). */
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (long r = 0; r < qrows; r++) {
        const real *dr = dout + (size_t)r * Dh, *orow = o + (size_t)r * Dh;
        real sd = 0;
        for (int d = 0; d < Dh; d++) sd += orow[d] * dr[d];
        dq[(size_t)(r / H) * ql + (size_t)(r % H) * Dh] = sd;
    }

    /* pass 2: dk, dv; task = (b*Hkv + kh)*nb + key tile. Scores transposed: s[key][query]. */
    const long ktasks = (long)B * Hkv * nb;
#pragma omp parallel num_threads(nt) if (par && ktasks > 1)
    {
        real qt[Dh * DX_ATT_KB], dot_[Dh * DX_ATT_KB], dka[DX_ATT_RB * Dh], dva[DX_ATT_RB * Dh];
        real s[DX_ATT_RB * DX_ATT_KB], dp[DX_ATT_RB * DX_ATT_KB], li[DX_ATT_KB], di[DX_ATT_KB];
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ktasks; task++) {
            int jb = (int)(task % nb), kh = (int)((task / nb) % Hkv), b = (int)(task / ((long)nb * Hkv));
            int j0 = jb * DX_ATT_RB, j1 = j0 + DX_ATT_RB < T ? j0 + DX_ATT_RB : T, nk = j1 - j0;
            const real *kb = k + ((size_t)b * T + j0) * ks + (size_t)kh * Dh;
            const real *vb = v + ((size_t)b * T + j0) * ks + (size_t)kh * Dh;
            int first = 1;
            for (int g = 0; g < G; g++) {
                int h = kh * G + g;
                const real *lrow = lse + ((size_t)b * H + h) * T;
                for (int i0 = j0; i0 < T; i0 += DX_ATT_KB) {
                    int ni = T - i0 < DX_ATT_KB ? T - i0 : DX_ATT_KB;
                    const real *qb = q + ((size_t)b * T + i0) * ql + (size_t)h * Dh;
                    const real *dob = dout + ((size_t)b * T + i0) * qs + (size_t)h * Dh;
                    tile_t(qt, qb, ql, ni, Dh, scale);
                    tile_t(dot_, dob, qs, ni, Dh, 1);
                    for (int c = 0; c < ni; c++) {
                        li[c] = lrow[i0 + c];
                        di[c] = dq[((size_t)b * T + i0 + c) * ql + (size_t)h * Dh];
                    }
                    mm_nn(nk, ni, Dh, kb, ks, qt, DX_ATT_KB, s, DX_ATT_KB, 0);
                    mm_nn(nk, ni, Dh, vb, ks, dot_, DX_ATT_KB, dp, DX_ATT_KB, 0);
                    for (int r = 0; r < nk; r++) {
                        real *sr = s + (size_t)r * DX_ATT_KB, *pr = dp + (size_t)r * DX_ATT_KB;
                        int c0 = j0 + r - i0; /* causal: queries i >= j */
                        c0 = c0 > 0 ? c0 : 0;
                        c0 = c0 < ni ? c0 : ni;
                        for (int c = 0; c < c0; c++) sr[c] = pr[c] = 0;
#pragma omp simd
                        for (int c = c0; c < ni; c++) {
                            real p = r_exp(sr[c] - li[c]);
                            sr[c] = p;
                            pr[c] = p * (pr[c] - di[c]);
                        }
                    }
                    mm_nn(nk, Dh, ni, s, DX_ATT_KB, dob, qs, dva, Dh, !first);
                    mm_nn(nk, Dh, ni, dp, DX_ATT_KB, qb, ql, dka, Dh, !first);
                    first = 0;
                }
            }
            for (int r = 0; r < nk; r++) {
                real *dkj = dk + ((size_t)b * T + j0 + r) * ks + (size_t)kh * Dh;
                real *dvj = dv + ((size_t)b * T + j0 + r) * ks + (size_t)kh * Dh;
                for (int d = 0; d < Dh; d++) {
                    dkj[d] = dka[(size_t)r * Dh + d] * scale;
                    dvj[d] = dva[(size_t)r * Dh + d];
                }
            }
        }
    }

    /* pass 3: dq; task = (b*H + h)*nb + query tile */
    const long qtasks = (long)B * H * nb;
#pragma omp parallel num_threads(nt) if (par && qtasks > 1)
    {
        real qsc[DX_ATT_RB * Dh], kt[Dh * DX_ATT_KB], vt[Dh * DX_ATT_KB], dqa[DX_ATT_RB * Dh];
        real s[DX_ATT_RB * DX_ATT_KB], dp[DX_ATT_RB * DX_ATT_KB], li[DX_ATT_RB], di[DX_ATT_RB];
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < qtasks; task++) {
            int ib = (int)(task % nb), h = (int)((task / nb) % H), b = (int)(task / ((long)nb * H));
            int i0 = ib * DX_ATT_RB, i1 = i0 + DX_ATT_RB < T ? i0 + DX_ATT_RB : T, nr = i1 - i0;
            int kh = h / G;
            const real *kb = k + (size_t)b * T * ks + (size_t)kh * Dh;
            const real *vb = v + (size_t)b * T * ks + (size_t)kh * Dh;
            const real *dob = dout + ((size_t)b * T + i0) * qs + (size_t)h * Dh;
            tile_rows(qsc, q + ((size_t)b * T + i0) * ql + (size_t)h * Dh, ql, nr, Dh, scale);
            for (int r = 0; r < nr; r++) {
                li[r] = lse[((size_t)b * H + h) * T + i0 + r];
                di[r] = dq[((size_t)b * T + i0 + r) * ql + (size_t)h * Dh];
            }
            for (int j0 = 0; j0 < i1; j0 += DX_ATT_KB) {
                int nj = i1 - j0 < DX_ATT_KB ? i1 - j0 : DX_ATT_KB;
                tile_t(kt, kb + (size_t)j0 * ks, ks, nj, Dh, 1);
                tile_t(vt, vb + (size_t)j0 * ks, ks, nj, Dh, 1);
                mm_nn(nr, nj, Dh, qsc, Dh, kt, DX_ATT_KB, s, DX_ATT_KB, 0);
                mm_nn(nr, nj, Dh, dob, qs, vt, DX_ATT_KB, dp, DX_ATT_KB, 0);
                for (int r = 0; r < nr; r++) {
                    real *sr = s + (size_t)r * DX_ATT_KB, *pr = dp + (size_t)r * DX_ATT_KB;
                    int cnt = i0 + r + 1 - j0; /* causal: keys j <= i */
                    cnt = cnt < nj ? cnt : nj;
                    cnt = cnt > 0 ? cnt : 0;
                    real lr = li[r], dr = di[r];
#pragma omp simd
                    for (int jj = 0; jj < cnt; jj++) pr[jj] = r_exp(sr[jj] - lr) * (pr[jj] - dr);
                    for (int jj = cnt; jj < nj; jj++) pr[jj] = 0;
                }
                mm_nn(nr, Dh, nj, dp, DX_ATT_KB, kb + (size_t)j0 * ks, ks, dqa, Dh, j0 > 0);
            }
            for (int r = 0; r < nr; r++) {
                real *dqi = dq + ((size_t)b * T + i0 + r) * ql + (size_t)h * Dh;
                for (int d = 0; d < Dh; d++) dqi[d] = dqa[(size_t)r * Dh + d] * scale;
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */

void DX_OP(swiglu_fwd)(dx_backend *be, void *h_, const void *g_, const void *u_, int N, int F,
                       int ld)
{
#pragma omp parallel for num_threads(NT(be)) schedule(static) if ((size_t)N * F >= DX_PAR_MIN)
    for (int r = 0; r < N; r++) {
        real *h = (real *)h_ + (size_t)r * F;
        const real *g = (const real *)g_ + (size_t)r * ld, *u = (const real *)u_ + (size_t)r * ld;
#pragma omp simd
        for (int i = 0; i < F; i++) {
            real gi = g[i];
            h[i] = gi / (1 + r_exp(-gi)) * u[i];
        }
    }
}

void DX_OP(swiglu_bwd)(dx_backend *be, void *dg_, void *du_, const void *dh_, const void *g_,
                       const void *u_, int N, int F, int ld)
{
#pragma omp parallel for num_threads(NT(be)) schedule(static) if ((size_t)N * F >= DX_PAR_MIN)
    for (int r = 0; r < N; r++) {
        real *dg = (real *)dg_ + (size_t)r * ld, *du = (real *)du_ + (size_t)r * ld;
        const real *dh = (const real *)dh_ + (size_t)r * F;
        const real *g = (const real *)g_ + (size_t)r * ld, *u = (const real *)u_ + (size_t)r * ld;
#pragma omp simd
        for (int i = 0; i < F; i++) {
            real gi = g[i];
            real s = 1 / (1 + r_exp(-gi));
            dg[i] = dh[i] * u[i] * s * (1 + gi * (1 - s));
            du[i] = dh[i] * (gi * s);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */

void DX_OP(embedding_fwd)(dx_backend *be, void *out_, const int32_t *ids, const void *table_,
                          int N, int D)
{
    real *out = out_;
    const real *table = table_;
#pragma omp parallel for num_threads(NT(be)) schedule(static) if ((size_t)N * D >= DX_PAR_MIN)
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * D, table + (size_t)ids[i] * D, (size_t)D * sizeof(real));
}

/* The whole table is the slice [0, INT_MAX) of embedding_vp_bwd (below). */
void DX_OP(embedding_bwd)(dx_backend *be, void *dtable_, const void *dout_, const int32_t *ids,
                          int N, int D)
{
    DX_OP(embedding_vp_bwd)(be, dtable_, dout_, ids, N, D, 0, INT_MAX);
}

/* ------------------------------------------------------------------------------------------ */

#define DX_MAX_CHUNKS 1024 /* fixed-order reductions: at most this many chunk partials */

void DX_OP(cross_entropy)(dx_backend *be, void *loss_sum_, void *dlogits_, const void *logits_,
                          const int32_t *targets, int N, int V, float dscale)
{
    real *loss_sum = loss_sum_, *dl = dlogits_;
    const real *logits = logits_;
    double part[DX_MAX_CHUNKS];
    int nch = N < DX_MAX_CHUNKS ? N : DX_MAX_CHUNKS;
    if (nch <= 0) return;
    int per = (N + nch - 1) / nch; /* rows per chunk: a function of N only */
    nch = (N + per - 1) / per;
#pragma omp parallel for num_threads(NT(be)) schedule(dynamic, 1) \
    if (nch > 1 && (size_t)N * V >= DX_PAR_MIN)
    for (int c = 0; c < nch; c++) {
        int i1 = (c + 1) * per < N ? (c + 1) * per : N;
        double lsum = 0;
        for (int i = c * per; i < i1; i++) {
            const real *z = logits + (size_t)i * V;
            real *dz = dl ? dl + (size_t)i * V : NULL;
            int t = targets[i];
            if (t < 0) {
                if (dz) memset(dz, 0, (size_t)V * sizeof(real));
                continue;
            }
            real zt = z[t];
            real mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
            double se = 0;
            if (dz) {
#pragma omp simd reduction(+ : se)
                for (int j = 0; j < V; j++) { /* dz may alias z: read z[j] before writing */
                    real e = r_exp(z[j] - mx);
                    dz[j] = e;
                    se += e;
                }
                real f = (real)((double)dscale / se);
#pragma omp simd
                for (int j = 0; j < V; j++) dz[j] *= f;
                dz[t] -= (real)dscale;
            } else {
#pragma omp simd reduction(+ : se)
                for (int j = 0; j < V; j++) se += r_exp(z[j] - mx);
            }
            lsum += (double)mx + log(se) - (double)zt;
        }
        part[c] = lsum;
    }
    double tot = 0;
    for (int c = 0; c < nch; c++) tot += part[c];
    loss_sum[0] += (real)tot;
}

/* ---- tensor parallelism: vocab-parallel embedding and cross-entropy ---- */

void DX_OP(embedding_vp_fwd)(dx_backend *be, void *out_, const int32_t *ids, const void *table_,
                             int N, int D, int v0, int Vl)
{
    real *out = out_;
    const real *table = table_;
#pragma omp parallel for num_threads(NT(be)) schedule(static) if ((size_t)N * D >= DX_PAR_MIN)
    for (int i = 0; i < N; i++) {
        int r = ids[i] - v0;
        if (r >= 0 && r < Vl) memcpy(out + (size_t)i * D, table + (size_t)r * D, (size_t)D * sizeof(real));
        else memset(out + (size_t)i * D, 0, (size_t)D * sizeof(real));
    }
}

/* Repeated ids make rows collide, so threads split columns; each adds rows in order. */
void DX_OP(embedding_vp_bwd)(dx_backend *be, void *dtable_, const void *dout_, const int32_t *ids,
                             int N, int D, int v0, int Vl)
{
    real *dtable = dtable_;
    const real *dout = dout_;
    int nblk = (D + DX_DW_BLOCK - 1) / DX_DW_BLOCK;
#pragma omp parallel for num_threads(NT(be)) schedule(static) \
    if (nblk > 1 && (size_t)N * D >= DX_PAR_MIN)
    for (int bk = 0; bk < nblk; bk++) {
        int j0 = bk * DX_DW_BLOCK, nj = D - j0 < DX_DW_BLOCK ? D - j0 : DX_DW_BLOCK;
        for (int i = 0; i < N; i++) {
            int r = ids[i] - v0;
            if (r < 0 || r >= Vl) continue;
            real *t = dtable + (size_t)r * D + j0;
            const real *s = dout + (size_t)i * D + j0;
#pragma omp simd
            for (int j = 0; j < nj; j++) t[j] += s[j];
        }
    }
}

void DX_OP(ce_vp_stats)(dx_backend *be, void *stats_, const void *logits_, const int32_t *targets,
                        int N, int Vl, int v0)
{
    real *stats = stats_;
    const real *logits = logits_;
#pragma omp parallel for num_threads(NT(be)) schedule(static) if ((size_t)N * Vl >= DX_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const real *z = logits + (size_t)i * Vl;
        real mx = -INFINITY;
        for (int j = 0; j < Vl; j++) mx = z[j] > mx ? z[j] : mx;
        double se = 0;
        for (int j = 0; j < Vl; j++) se += r_exp(z[j] - mx);
        int t = targets[i] - v0;
        stats[2 * (size_t)i] = (real)((double)mx + log(se));
        stats[2 * (size_t)i + 1] = targets[i] >= 0 && t >= 0 && t < Vl ? z[t] : 0;
    }
}

void DX_OP(ce_vp_finish)(dx_backend *be, void *loss_sum_, void *dlogits_, const void *logits_,
                         const void *gathered_, int tp, const int32_t *targets, int N, int Vl,
                         int v0, float dscale)
{
    real *loss_sum = loss_sum_, *dl = dlogits_;
    const real *logits = logits_, *g = gathered_;
    double part[DX_MAX_CHUNKS];
    int nch = N < DX_MAX_CHUNKS ? N : DX_MAX_CHUNKS;
    if (nch <= 0) return;
    int per = (N + nch - 1) / nch;
    nch = (N + per - 1) / per;
#pragma omp parallel for num_threads(NT(be)) schedule(dynamic, 1) \
    if (nch > 1 && (size_t)N * Vl >= DX_PAR_MIN)
    for (int c = 0; c < nch; c++) {
        int i1 = (c + 1) * per < N ? (c + 1) * per : N;
        double lsum = 0;
        for (int i = c * per; i < i1; i++) {
            /* the row's log-sum-exp over every slice, and its target logit (one slice has it) */
            double mx = -INFINITY, se = 0, tl = 0;
            for (int r = 0; r < tp; r++) {
                double l = (double)g[((size_t)r * N + i) * 2];
                mx = l > mx ? l : mx;
            }
            for (int r = 0; r < tp; r++) {
                se += exp((double)g[((size_t)r * N + i) * 2] - mx);
                tl += (double)g[((size_t)r * N + i) * 2 + 1];
            }
            const double lse = mx + log(se);
            const int t = targets[i];
            real *dz = dl ? dl + (size_t)i * Vl : NULL;
            if (t < 0) {
                if (dz) memset(dz, 0, (size_t)Vl * sizeof(real));
                continue;
            }
            lsum += lse - tl;
            if (dz) {
                const real *z = logits + (size_t)i * Vl;
                for (int j = 0; j < Vl; j++) dz[j] = (real)((double)dscale * exp((double)z[j] - lse));
                if (t - v0 >= 0 && t - v0 < Vl) dz[t - v0] -= (real)dscale;
            }
        }
        part[c] = lsum;
    }
    double tot = 0;
    for (int c = 0; c < nch; c++) tot += part[c];
    if (loss_sum) loss_sum[0] += (real)tot;
}

/* ------------------------------------------------------------------------------------------ */

void DX_OP(add)(dx_backend *be, void *y_, const void *a_, const void *b_, size_t n)
{
    real *y = y_;
    const real *a = a_, *b = b_; /* y may alias a or b: no restrict */
#pragma omp parallel for simd num_threads(NT(be)) schedule(static) if (n >= DX_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void DX_OP(dropout)(dx_backend *be, void *y_, const void *x_, int N, int F, float p, uint64_t stream,
                    uint64_t row0, uint64_t row_len, uint64_t col0)
{
    real *y = y_;
    const real *x = x_; /* y may alias x */
    const uint32_t th = dx_dropout_threshold(p);
    const real keep_scale = (real)1 / (1 - (real)p);
#pragma omp parallel for num_threads(NT(be)) schedule(static) if ((size_t)N * F >= DX_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const uint64_t c0 = (row0 + (uint64_t)i) * row_len + col0;
        for (int j = 0; j < F; j++) {
            const size_t e = (size_t)i * F + j;
            y[e] = dx_dropout_keep(stream, c0 + (uint64_t)j, th) ? x[e] * keep_scale : 0;
        }
    }
}

void DX_OP(adamw)(dx_backend *be, void *master_, void *work_, const void *grad_, void *m_,
                  void *v_, size_t n, const dx_adamw_hparams *hp)
{
    real *p = master_, *work = work_, *m = m_, *v = v_;
    const real *grad = grad_;
    /* arithmetic in `real` (fp32 in the engine, fp64 in the reference build), as
     * torch.optim.AdamW on parameters of that dtype; the constants rounded once from fp64. The
     * host AdamW of optimizer offload (host_adamw.c) uses the same expressions in fp32. */
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double bc1 = 1.0 - pow(b1, (double)hp->step), bc2 = 1.0 - pow(b2, (double)hp->step);
    const real cb1 = (real)b1, cb2 = (real)b2, omb1 = (real)(1.0 - b1), omb2 = (real)(1.0 - b2);
    const real eps = (real)hp->eps, gs = (real)hp->grad_scale, decay = (real)(1.0 - hp->lr * hp->weight_decay);
    const real step1 = (real)(hp->lr / bc1), ibc2 = (real)(1.0 / bc2);
#pragma omp parallel for simd num_threads(NT(be)) schedule(static) if (n >= DX_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        real g = grad[i] * gs;
        real pi = p[i] * decay;
        real mi = cb1 * m[i] + omb1 * g;
        real vi = cb2 * v[i] + omb2 * g * g;
        pi -= step1 * mi / (R_SQRT(vi * ibc2) + eps);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
    if (work) /* act == acc on the CPU: the cast is a copy */
#pragma omp parallel for simd num_threads(NT(be)) schedule(static) if (n >= DX_PAR_MIN)
        for (size_t i = 0; i < n; i++) work[i] = p[i];
}

void DX_OP(sumsq)(dx_backend *be, void *out_, const void *x_, size_t n)
{
    real *out = out_;
    const real *x = x_;
    double part[DX_MAX_CHUNKS];
    if (n == 0) return;
    size_t per = (n + DX_MAX_CHUNKS - 1) / DX_MAX_CHUNKS;
    if (per < 4096) per = 4096; /* a function of n only */
    int nch = (int)((n + per - 1) / per);
#pragma omp parallel for num_threads(NT(be)) schedule(static) if (nch > 1)
    for (int c = 0; c < nch; c++) {
        size_t i0 = (size_t)c * per, i1 = i0 + per < n ? i0 + per : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
        part[c] = s;
    }
    double tot = 0;
    for (int c = 0; c < nch; c++) tot += part[c];
    out[0] += (real)tot;
}

void DX_OP(scale)(dx_backend *be, void *x_, size_t n, float s)
{
    real *x = x_;
    real f = (real)s;
#pragma omp parallel for simd num_threads(NT(be)) schedule(static) if (n >= DX_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= f;
}

void DX_OP(acc_to_act)(dx_backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    if (dst != src) memcpy(dst, src, n * sizeof(real)); /* act == acc on the CPU */
}

void DX_OP(acc_add_act)(dx_backend *be, void *dst_, const void *src_, size_t n)
{
    real *dst = dst_;
    const real *src = src_; /* act == acc on the CPU */
#pragma omp parallel for simd num_threads(NT(be)) schedule(static) if (n >= DX_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
