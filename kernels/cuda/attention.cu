/* dissect CUDA backend: causal grouped-query attention, FlashAttention-2 style (Dao 2023).
 *
 * Shapes (kernels.h): q, o, dq, dout X[B,T,H,Dh]; k, v, dk, dv X[B,T,Hkv,Dh]; lse A[B,H,T];
 * query head h reads kv head h / (H / Hkv). Dh in {32, 64, 128} (template parameter), any T.
 * Row strides: o and dout dense (qst = H Dh), q and dq qld (ldq), k, v, dk, dv kst (ldkv).
 *
 * The entry points below run the tensor-core kernels of attention_mma.cu when every bf16
 * pointer is 16-byte aligned (their tile loads are 16-byte vectors), and otherwise, or with
 * DX_CUDA_ATTENTION=simple in the environment, the CUDA-core kernels of this file: the
 * reference implementation, slower, with P and dS kept in fp32. D = do . o comes from
 * att_bwd_dot_vec (tensor-core path, vectorized) or att_bwd_dot (one thread per row).
 *
 * Tiles of BR = 64 queries x BC = 64 keys; blocks of 256 threads laid out 16 x 16
 * (ty = tid / 16, tx = tid % 16). A thread owns score rows ty + 16a and columns tx + 16c
 * (a, c < 4), and output rows ty + 16a, columns tx + 16e (e < Dh / 16); the 16 threads of a
 * row are one half-warp, so row maxima and sums are xor-shuffles within it. Tiles are staged
 * in shared memory as fp32 with a padded row stride (Dh + 1: conflict-free column walks).
 * All products are fp32 FMAs on CUDA cores (no tensor cores yet), so P and dS are never
 * rounded to bf16.
 *
 *   forward  one block per (query tile, h, b): online softmax over the key tiles j0 <= i in
 *            log2 units (scores pre-multiplied by log2(e) / sqrt(Dh), exp2f), o = acc / l,
 *            lse = ln 2 * (m + log2 l). Heaviest (last) query tiles are scheduled first.
 *   backward three kernels, no atomics, deterministic:
 *            1. D_i = do_i . o_i per (b, i, h), fp32, into a workspace laid out like lse;
 *            2. dk, dv per (key tile, kv head, b): over the group's query heads, then the query
 *               tiles i0 >= j0 in ascending order, P^T and dS^T recomputed from lse;
 *            3. dq per (query tile, h, b): over key tiles in ascending order.
 *            (2 and 3 both recompute S and dP: 7 tile products instead of FA-2's 5, in
 *            exchange for no fp32 atomics and no dq scratch.)
 *
 * Exactness where the math is exact: every dot product over Dh is one fmaf chain in ascending
 * d, the same in all kernels, so the backward sees bit-identical scores to the forward, and
 * dp_ij = do_i . v_j equals D_i = do_i . o_i bitwise when o_i = v_j (the first query row of a
 * sequence, where p = 1): ds is then exactly 0, as on the CPU.
 */
#include "cuda_internal.cuh"

#include <math.h>
#include <stdio.h>

namespace {

constexpr int BR = 64;  /* queries per tile */
constexpr int BC = 64;  /* keys per tile */
constexpr int NT = 256; /* threads per block (16 x 16) */
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

static_assert(BR == 64 && BC == 64 && NT == 256, "the 16x16 thread layout assumes 64x64 tiles");

__device__ __forceinline__ float half_warp_max(float v)
{
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float half_warp_sum(float v)
{
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* dst[r][d] (row stride DH + 1) = src row (r0 + r) for r < 64, zero for rows >= T. */
template <int DH>
__device__ __forceinline__ void load_tile(float *__restrict__ dst, const bf16 *__restrict__ src,
                                          size_t stride, int r0, int T)
{
    for (int e = threadIdx.x; e < 64 * DH; e += NT) {
        const int r = e / DH, d = e % DH, gr = r0 + r;
        dst[r * (DH + 1) + d] = gr < T ? __bfloat162float(src[(size_t)gr * stride + d]) : 0.0f;
    }
}

template <int DH> constexpr size_t fwd_smem()
{
    return ((size_t)(BR + 2 * BC) * (DH + 1) + (size_t)BR * (BC + 1)) * sizeof(float);
}
template <int DH> constexpr size_t dkdv_smem()
{
    return ((size_t)(2 * BC + 2 * BR) * (DH + 1) + (size_t)2 * BC * (BR + 1) + 2 * BR) *
           sizeof(float);
}
template <int DH> constexpr size_t dq_smem()
{
    return ((size_t)(2 * BR + 2 * BC) * (DH + 1) + (size_t)BR * (BC + 1) + 2 * BR) * sizeof(float);
}

/* ------------------------------------------------------------------------------------------ */

template <int DH>
__global__ void __launch_bounds__(NT)
    att_fwd(bf16 *__restrict__ o, float *__restrict__ lse, const bf16 *__restrict__ q,
            const bf16 *__restrict__ k, const bf16 *__restrict__ v, int T, int H, int Hkv, size_t kst,
            size_t qld, float sl2)
{
    constexpr int LD = DH + 1, LP = BC + 1, EPT = DH / 16;
    DXC_DYNAMIC_SMEM(float, sm);
    float *Qs = sm, *Ks = Qs + BR * LD, *Vs = Ks + BC * LD, *Ps = Vs + BC * LD;

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x; /* long (late) query tiles first */
    const int h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
    const int q0 = qt * BR;
    const size_t qst = (size_t)H * DH; /* o; q rows qld apart, k, v (dk, dv) kst apart */
    const bf16 *qb = q + (size_t)b * T * qld + (size_t)h * DH;
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;

    load_tile<DH>(Qs, qb, qld, q0, T);

    float m[4], l[4], acc[4][EPT];
#pragma unroll
    for (int a = 0; a < 4; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPT; e++) acc[a][e] = 0.0f;
    }

    const int kend = q0 + BR < T ? q0 + BR : T; /* keys j < kend can be unmasked */
    for (int j0 = 0; j0 < kend; j0 += BC) {
        __syncthreads(); /* the previous tile's Ks, Vs, Ps are no longer read */
        load_tile<DH>(Ks, kb, kst, j0, T);
        load_tile<DH>(Vs, vb, kst, j0, T);
        __syncthreads();

        float s[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[a][c] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < DH; d++) {
            float qa[4], kc[4];
#pragma unroll
            for (int a = 0; a < 4; a++) qa[a] = Qs[(ty + 16 * a) * LD + d];
#pragma unroll
            for (int c = 0; c < 4; c++) kc[c] = Ks[(tx + 16 * c) * LD + d];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) s[a][c] = fmaf(qa[a], kc[c], s[a][c]);
        }

#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int i = q0 + ty + 16 * a;
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = j0 + tx + 16 * c;
                s[a][c] = (j <= i && j < T) ? s[a][c] * sl2 : -INFINITY;
                mx = fmaxf(mx, s[a][c]);
            }
            mx = half_warp_max(mx);
            const float mnew = fmaxf(m[a], mx);
            /* every row has key j0 unmasked (j0 <= q0 <= i, j0 < T), so mnew is finite; the
             * guard only keeps a fully masked row at p = 0 instead of NaN */
            const float mref = mnew == -INFINITY ? 0.0f : mnew;
            const float corr = exp2f(m[a] - mref);
            float ps = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                s[a][c] = exp2f(s[a][c] - mref);
                ps += s[a][c];
            }
            ps = half_warp_sum(ps);
            l[a] = l[a] * corr + ps;
            m[a] = mnew;
#pragma unroll
            for (int e = 0; e < EPT; e++) acc[a][e] *= corr;
#pragma unroll
            for (int c = 0; c < 4; c++) Ps[(ty + 16 * a) * LP + tx + 16 * c] = s[a][c];
        }
        __syncthreads();

#pragma unroll 4
        for (int c = 0; c < BC; c++) {
            float pa[4], vv[EPT];
#pragma unroll
            for (int a = 0; a < 4; a++) pa[a] = Ps[(ty + 16 * a) * LP + c];
#pragma unroll
            for (int e = 0; e < EPT; e++) vv[e] = Vs[c * LD + tx + 16 * e];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int e = 0; e < EPT; e++) acc[a][e] = fmaf(pa[a], vv[e], acc[a][e]);
        }
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int i = q0 + ty + 16 * a;
        if (i >= T) continue;
        const float inv = 1.0f / l[a];
        bf16 *orow = o + ((size_t)b * T + i) * qst + (size_t)h * DH;
#pragma unroll
        for (int e = 0; e < EPT; e++) orow[tx + 16 * e] = __float2bfloat16_rn(acc[a][e] * inv);
        if (tx == 0) lse[((size_t)b * H + h) * T + i] = (m[a] + log2f(l[a])) * LN2;
    }
}

/* ------------------------------------------------------------------------------------------ */

/* D[(b*H + h)*T + i] = sum_d do[b,i,h,d] * o[b,i,h,d], tensor-core path: Dh / 8 lanes per row,
 * one 16-byte load of each operand per lane (coalesced), lanes' partial sums added by xor
 * shuffles. do and o 16-byte aligned. */
template <int DH>
__global__ void __launch_bounds__(256)
    att_bwd_dot_vec(float *__restrict__ Dv, const bf16 *__restrict__ dout,
                    const bf16 *__restrict__ o, size_t rows, int T, int H)
{
    constexpr int LPR = DH / 8; /* lanes per row */
    const size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / LPR;
    const int c = threadIdx.x % LPR;
    float s = 0.0f;
    if (r < rows) {
        const uint4 a = *(const uint4 *)(dout + r * DH + 8 * c);
        const uint4 b = *(const uint4 *)(o + r * DH + 8 * c);
        const __nv_bfloat162 *a2 = (const __nv_bfloat162 *)&a, *b2 = (const __nv_bfloat162 *)&b;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 x = __bfloat1622float2(a2[e]), y = __bfloat1622float2(b2[e]);
            s = fmaf(x.x, y.x, s);
            s = fmaf(x.y, y.y, s);
        }
    }
#pragma unroll
    for (int off = 1; off < LPR; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (r < rows && c == 0) {
        const size_t h = r % H, bt = r / H, i = bt % T, b = bt / T;
        Dv[(b * H + h) * T + i] = s;
    }
}

/* D[(b*H + h)*T + i] = sum_d do[b,i,h,d] * o[b,i,h,d]: one thread per row, ascending d (the
 * CUDA-core path, whose exactness argument above needs this order). */
__global__ void att_bwd_dot(float *__restrict__ Dv, const bf16 *__restrict__ dout,
                            const bf16 *__restrict__ o, size_t rows, int T, int H, int Dh)
{
    const size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* (b*T + i)*H + h */
    if (r >= rows) return;
    const bf16 *dr = dout + r * Dh, *orow = o + r * Dh;
    float s = 0.0f;
    for (int d = 0; d < Dh; d++) s = fmaf(__bfloat162float(dr[d]), __bfloat162float(orow[d]), s);
    const size_t h = r % H, bt = r / H, i = bt % T, b = bt / T;
    Dv[(b * H + h) * T + i] = s;
}

template <int DH>
__global__ void __launch_bounds__(NT)
    att_bwd_dkdv(bf16 *__restrict__ dk, bf16 *__restrict__ dv, const bf16 *__restrict__ dout,
                 const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                 const bf16 *__restrict__ v, const float *__restrict__ lse,
                 const float *__restrict__ Dv, int T, int H, int Hkv, size_t kst, size_t qld, float sl2,
                 float scale)
{
    constexpr int LD = DH + 1, LP = BR + 1, EPT = DH / 16;
    DXC_DYNAMIC_SMEM(float, sm);
    float *Ks = sm, *Vs = Ks + BC * LD, *Qs = Vs + BC * LD, *Os = Qs + BR * LD;
    float *Ps = Os + BR * LD, *Ss = Ps + BC * LP, *Ls = Ss + BC * LP, *Dd = Ls + BR;

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int kt = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, G = H / Hkv;
    const int c0 = kt * BC;
    const size_t qst = (size_t)H * DH; /* dout; q (dq) rows qld apart, k, v (dk, dv) kst apart */

    load_tile<DH>(Ks, k + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T);
    load_tile<DH>(Vs, v + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T);

    float dka[4][EPT], dva[4][EPT];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int e = 0; e < EPT; e++) dka[a][e] = dva[a][e] = 0.0f;

    for (int g = 0; g < G; g++) {
        const int h = kh * G + g;
        const bf16 *qb = q + (size_t)b * T * qld + (size_t)h * DH;
        const bf16 *ob = dout + (size_t)b * T * qst + (size_t)h * DH;
        const float *lrow = lse + ((size_t)b * H + h) * T, *drow = Dv + ((size_t)b * H + h) * T;
        for (int i0 = (c0 / BR) * BR; i0 < T; i0 += BR) { /* queries i >= j only */
            __syncthreads(); /* the previous tile's Qs, Os, Ps, Ss, Ls, Dd are no longer read */
            load_tile<DH>(Qs, qb, qld, i0, T);
            load_tile<DH>(Os, ob, qst, i0, T);
            for (int r = tid; r < BR; r += NT) {
                const int gi = i0 + r;
                Ls[r] = gi < T ? lrow[gi] * LOG2E : 0.0f;
                Dd[r] = gi < T ? drow[gi] : 0.0f;
            }
            __syncthreads();

            /* S^T[c][r] = k_c . q_r, dP^T[c][r] = v_c . do_r; thread: keys ty+16a, queries tx+16c */
            float st[4][4], dpt[4][4];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) st[a][c] = dpt[a][c] = 0.0f;
#pragma unroll 4
            for (int d = 0; d < DH; d++) {
                float ka[4], va[4], qc[4], oc[4];
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    ka[a] = Ks[(ty + 16 * a) * LD + d];
                    va[a] = Vs[(ty + 16 * a) * LD + d];
                }
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    qc[c] = Qs[(tx + 16 * c) * LD + d];
                    oc[c] = Os[(tx + 16 * c) * LD + d];
                }
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        st[a][c] = fmaf(qc[c], ka[a], st[a][c]);
                        dpt[a][c] = fmaf(oc[c], va[a], dpt[a][c]);
                    }
            }
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const int j = c0 + ty + 16 * a;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int r = tx + 16 * c, i = i0 + r;
                    const bool ok = i >= j && i < T && j < T;
                    const float p = ok ? exp2f(st[a][c] * sl2 - Ls[r]) : 0.0f;
                    Ps[(ty + 16 * a) * LP + r] = p;
                    Ss[(ty + 16 * a) * LP + r] = p * (dpt[a][c] - Dd[r]);
                }
            }
            __syncthreads();

            /* dv_c += sum_r P^T[c][r] do_r ; dk_c += sum_r dS^T[c][r] q_r */
#pragma unroll 4
            for (int r = 0; r < BR; r++) {
                float pa[4], sa[4], oe[EPT], qe[EPT];
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    pa[a] = Ps[(ty + 16 * a) * LP + r];
                    sa[a] = Ss[(ty + 16 * a) * LP + r];
                }
#pragma unroll
                for (int e = 0; e < EPT; e++) {
                    oe[e] = Os[r * LD + tx + 16 * e];
                    qe[e] = Qs[r * LD + tx + 16 * e];
                }
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int e = 0; e < EPT; e++) {
                        dva[a][e] = fmaf(pa[a], oe[e], dva[a][e]);
                        dka[a][e] = fmaf(sa[a], qe[e], dka[a][e]);
                    }
            }
        }
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int j = c0 + ty + 16 * a;
        if (j >= T) continue;
        const size_t off = ((size_t)b * T + j) * kst + (size_t)kh * DH;
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            dk[off + tx + 16 * e] = __float2bfloat16_rn(dka[a][e] * scale);
            dv[off + tx + 16 * e] = __float2bfloat16_rn(dva[a][e]);
        }
    }
}

template <int DH>
__global__ void __launch_bounds__(NT)
    att_bwd_dq(bf16 *__restrict__ dq, const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
               const bf16 *__restrict__ k, const bf16 *__restrict__ v,
               const float *__restrict__ lse, const float *__restrict__ Dv, int T, int H, int Hkv, size_t kst,
               size_t qld, float sl2, float scale)
{
    constexpr int LD = DH + 1, LP = BC + 1, EPT = DH / 16;
    DXC_DYNAMIC_SMEM(float, sm);
    float *Qs = sm, *Os = Qs + BR * LD, *Ks = Os + BR * LD, *Vs = Ks + BC * LD;
    float *Ss = Vs + BC * LD, *Ls = Ss + BR * LP, *Dd = Ls + BR;

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x; /* long (late) query tiles first */
    const int h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
    const int q0 = qt * BR;
    const size_t qst = (size_t)H * DH; /* dout; q (dq) rows qld apart, k, v (dk, dv) kst apart */
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
    const float *lrow = lse + ((size_t)b * H + h) * T, *drow = Dv + ((size_t)b * H + h) * T;

    load_tile<DH>(Qs, q + (size_t)b * T * qld + (size_t)h * DH, qld, q0, T);
    load_tile<DH>(Os, dout + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    for (int r = tid; r < BR; r += NT) {
        const int gi = q0 + r;
        Ls[r] = gi < T ? lrow[gi] * LOG2E : 0.0f;
        Dd[r] = gi < T ? drow[gi] : 0.0f;
    }

    float dqa[4][EPT];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int e = 0; e < EPT; e++) dqa[a][e] = 0.0f;

    const int kend = q0 + BR < T ? q0 + BR : T;
    for (int j0 = 0; j0 < kend; j0 += BC) {
        __syncthreads(); /* the previous tile's Ks, Vs, Ss are no longer read */
        load_tile<DH>(Ks, kb, kst, j0, T);
        load_tile<DH>(Vs, vb, kst, j0, T);
        __syncthreads();

        /* S[r][c] = q_r . k_c, dP[r][c] = do_r . v_c; thread: queries ty+16a, keys tx+16c */
        float s[4][4], dp[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[a][c] = dp[a][c] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DH; d++) {
            float qa[4], oa[4], kc[4], vc[4];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                qa[a] = Qs[(ty + 16 * a) * LD + d];
                oa[a] = Os[(ty + 16 * a) * LD + d];
            }
#pragma unroll
            for (int c = 0; c < 4; c++) {
                kc[c] = Ks[(tx + 16 * c) * LD + d];
                vc[c] = Vs[(tx + 16 * c) * LD + d];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    s[a][c] = fmaf(qa[a], kc[c], s[a][c]);
                    dp[a][c] = fmaf(oa[a], vc[c], dp[a][c]);
                }
        }
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int r = ty + 16 * a, i = q0 + r;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = j0 + tx + 16 * c;
                const bool ok = j <= i && i < T && j < T;
                const float p = ok ? exp2f(s[a][c] * sl2 - Ls[r]) : 0.0f;
                Ss[r * LP + tx + 16 * c] = p * (dp[a][c] - Dd[r]);
            }
        }
        __syncthreads();

        /* dq_r += sum_c dS[r][c] k_c */
#pragma unroll 4
        for (int c = 0; c < BC; c++) {
            float sa[4], ke[EPT];
#pragma unroll
            for (int a = 0; a < 4; a++) sa[a] = Ss[(ty + 16 * a) * LP + c];
#pragma unroll
            for (int e = 0; e < EPT; e++) ke[e] = Ks[c * LD + tx + 16 * e];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int e = 0; e < EPT; e++) dqa[a][e] = fmaf(sa[a], ke[e], dqa[a][e]);
        }
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int i = q0 + ty + 16 * a;
        if (i >= T) continue;
        bf16 *row = dq + ((size_t)b * T + i) * qld + (size_t)h * DH;
#pragma unroll
        for (int e = 0; e < EPT; e++) row[tx + 16 * e] = __float2bfloat16_rn(dqa[a][e] * scale);
    }
}

/* ------------------------------------------------------------------------------------------ */

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

void check_shape(const char *op, int B, int H, int Hkv, int Dh)
{
    char msg[200];
    msg[0] = 0;
    if (Dh != 32 && Dh != 64 && Dh != 128)
        snprintf(msg, sizeof msg, "head_dim %d not supported (32, 64 or 128)", Dh);
    else if (Hkv <= 0 || H % Hkv != 0)
        snprintf(msg, sizeof msg, "H = %d is not a multiple of Hkv = %d", H, Hkv);
    else if (H > 65535 || B > 65535 || Hkv > 65535)
        snprintf(msg, sizeof msg, "B = %d or H = %d exceeds the grid limit 65535", B, H);
    if (msg[0]) dxc_die(op, __FILE__, __LINE__, "shape", msg);
}

template <int DH>
void fwd_launch(dx_backend *be, void *o, void *lse, const void *q, const void *k, const void *v,
                int B, int T, int H, int Hkv, size_t kst, size_t qld)
{
    const char *op = "attention_fwd";
    const size_t smem = fwd_smem<DH>();
    dxc_set_smem(be, (const void *)att_fwd<DH>, smem, op);
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    dim3 grid((T + BR - 1) / BR, H, B);
    att_fwd<DH><<<grid, NT, smem, dxc(be)->stream>>>((bf16 *)o, (float *)lse, (const bf16 *)q,
                                                    (const bf16 *)k, (const bf16 *)v, T, H, Hkv, kst,
                                                    qld, sl2);
    DXC_LAUNCHED(be, op);
}

template <int DH>
void bwd_launch(dx_backend *be, void *dq, void *dk, void *dv, const void *dout, const void *q,
                const void *k, const void *v, const float *lse, const float *Dv, int B, int T,
                int H, int Hkv, size_t kst, size_t qld)
{
    const char *op = "attention_bwd";
    const float scale = (float)(1.0 / sqrt((double)DH));
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    cudaStream_t st = dxc(be)->stream;

    const size_t s1 = dkdv_smem<DH>();
    dxc_set_smem(be, (const void *)att_bwd_dkdv<DH>, s1, op);
    dim3 g1((T + BC - 1) / BC, Hkv, B);
    att_bwd_dkdv<DH><<<g1, NT, s1, st>>>((bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                                         (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse,
                                         Dv, T, H, Hkv, kst, qld, sl2, scale);
    DXC_LAUNCHED(be, op);

    const size_t s2 = dq_smem<DH>();
    dxc_set_smem(be, (const void *)att_bwd_dq<DH>, s2, op);
    dim3 g2((T + BR - 1) / BR, H, B);
    att_bwd_dq<DH><<<g2, NT, s2, st>>>((bf16 *)dq, (const bf16 *)dout, (const bf16 *)q,
                                       (const bf16 *)k, (const bf16 *)v, lse, Dv, T, H, Hkv, kst, qld,
                                       sl2, scale);
    DXC_LAUNCHED(be, op);
}

} // namespace

void dxc_attention_fwd(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                       const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh)
{
    const char *op = "attention_fwd";
    const size_t kst = (size_t)ldkv, qld = (size_t)ldq;
    if (B <= 0 || T <= 0 || H <= 0) return;
    check_shape(op, B, H, Hkv, Dh);
    DXC_ENTER(be, op);
    if (!dxc(be)->attn_simple && ldkv % 8 == 0 && ldq % 8 == 0 && aligned16(o) && aligned16(q) &&
        aligned16(k) && aligned16(v)) {
        dxc_attention_fwd_mma(be, o, lse, q, k, v, ldq, ldkv, B, T, H, Hkv, Dh);
        return;
    }
    switch (Dh) {
    case 32: fwd_launch<32>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld); break;
    case 64: fwd_launch<64>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld); break;
    default: fwd_launch<128>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld); break;
    }
}

void dxc_attention_bwd(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                       const void *q, const void *k, const void *v, const void *o,
                       const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh,
                       float rope_theta)
{
    const char *op = "attention_bwd";
    const size_t kst = (size_t)ldkv, qld = (size_t)ldq;
    if (B <= 0 || T <= 0 || H <= 0) return;
    check_shape(op, B, H, Hkv, Dh);
    DXC_ENTER(be, op);
    const size_t rows = (size_t)B * T * H;
    const float *L = (const float *)lse;
    /* RoPE's backward, where the kernels do not fold it: the rotation of dq and dk after */
    auto rope_after = [&]() {
        if (rope_theta == 0.0f) return;
        dxc_rope_apply(be, dq, ldq, B, T, H, Dh, rope_theta, -1.0f, op);
        dxc_rope_apply(be, dk, ldkv, B, T, Hkv, Dh, rope_theta, -1.0f, op);
    };
    if (!dxc(be)->attn_simple && ldkv % 8 == 0 && ldq % 8 == 0 && aligned16(dq) && aligned16(dk) && aligned16(dv) &&
        aligned16(dout) && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(o)) {
        /* scratch: D (rows floats, padded to 128 bytes: att_bwd_wg drops the accumulator's
         * 128-byte lines from L2), then dq's fp32 accumulator (queries padded to a multiple of
         * 64 for att_bwd_wg's tiles), then att_bwd_wg's counters (dxc_dq_acc_floats) */
        const size_t rows4 = (rows + 31) & ~(size_t)31;
        const size_t acc = dxc_dq_acc_floats(B, T, H, Dh);
        float *Dv = (float *)dxc_scratch(be, (rows4 + acc) * sizeof(float), op);
        const unsigned blocks = (unsigned)((rows * (Dh / 8) + 255) / 256);
        const bf16 *d_ = (const bf16 *)dout, *o_ = (const bf16 *)o;
        cudaStream_t st = dxc(be)->stream;
        if (dxc(be)->attn_skip & 1) { /* timing only: D = 0 (cuda_internal.cuh attn_skip) */
            DXC_CHECK(op, cudaMemsetAsync(Dv, 0, rows * sizeof(float), st));
        } else {
            for (int rep = dxc(be)->attn_skip & 8 ? 2 : 1; rep > 0; rep--) { /* (bit 3: twice, timing) */
                switch (Dh) {
                case 32: att_bwd_dot_vec<32><<<blocks, 256, 0, st>>>(Dv, d_, o_, rows, T, H); break;
                case 64: att_bwd_dot_vec<64><<<blocks, 256, 0, st>>>(Dv, d_, o_, rows, T, H); break;
                default: att_bwd_dot_vec<128><<<blocks, 256, 0, st>>>(Dv, d_, o_, rows, T, H); break;
                }
                DXC_LAUNCHED(be, op);
            }
        }
        size_t sin_off = 0;
        const float *tab = rope_theta != 0.0f ? dxc_rope_table(be, T, Dh, rope_theta, &sin_off, op)
                                              : NULL;
        if (!dxc_attention_bwd_mma(be, dq, dk, dv, Dv + rows4, dout, q, k, v, L, Dv, ldq, ldkv, B, T,
                                   H, Hkv, Dh, tab, sin_off))
            rope_after();
        return;
    }
    float *Dv = (float *)dxc_scratch(be, rows * sizeof(float), op);
    att_bwd_dot<<<(unsigned)((rows + 255) / 256), 256, 0, dxc(be)->stream>>>(
        Dv, (const bf16 *)dout, (const bf16 *)o, rows, T, H, Dh);
    DXC_LAUNCHED(be, op);
    switch (Dh) {
    case 32: bwd_launch<32>(be, dq, dk, dv, dout, q, k, v, L, Dv, B, T, H, Hkv, kst, qld); break;
    case 64: bwd_launch<64>(be, dq, dk, dv, dout, q, k, v, L, Dv, B, T, H, Hkv, kst, qld); break;
    default: bwd_launch<128>(be, dq, dk, dv, dout, q, k, v, L, Dv, B, T, H, Hkv, kst, qld); break;
    }
    rope_after();
}
