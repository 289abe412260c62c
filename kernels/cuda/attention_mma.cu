/* dissect CUDA backend: causal grouped-query attention on tensor cores (FlashAttention-2,
 * Dao 2023), with mma.sync.m16n8k16 bf16 -> fp32 (sm_80+ PTX, runs on Hopper).
 *
 * Same contract and algorithm as the CUDA-core kernels in attention.cu (the fallback, selected
 * with DX_CUDA_ATTENTION=simple or when a pointer is not 16-byte aligned):
 *   forward   one block (4 warps) per (64-query tile, h, b); each warp owns 16 query rows,
 *             keeps S = Q K^T, the online-softmax state and O in registers; P is rounded to
 *             bf16 for the P V product (as in FlashAttention-2), row sums use fp32 P.
 *   backward  D = do . o (att_bwd_dot in attention.cu), then
 *             dk, dv per (64-key tile, kv head, b), each warp owning 16 keys: S^T = K Q^T and
 *             dP^T = V dO^T per 64-query tile, P^T and dS^T in registers, dv += P^T dO,
 *             dk += dS^T Q (P^T and dS^T rounded to bf16 as mma operands); the group's query
 *             heads and the query tiles are walked in ascending order (no atomics);
 *             dq per (64-query tile, h, b), each warp owning 16 queries: dq += dS K.
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
 * with g = lane / 4 and t = lane % 4; two bf16 per 32-bit register, lower index in the lower
 * half:
 *   A 16x16 (row-major): a0,a1 = (g, 2t..2t+1)   a2,a3 = (g+8, 2t..)
 *                        a4,a5 = (g, 2t+8..)     a6,a7 = (g+8, 2t+8..)
 *   B 16x8  (k x n):     b0,b1 = (2t..2t+1, g)   b2,b3 = (2t+8.., g)
 *   C 16x8  (fp32):      c0,c1 = (g, 2t..2t+1)   c2,c3 = (g+8, 2t..)
 * Two C tiles of 8 columns (n-tiles 2kk, 2kk+1) are exactly the A fragment of k-step kk, so
 * score tiles feed the next product without leaving registers.
 *
 * Shared memory tiles are bf16 [64][Dh + 8]: the 16-byte row padding makes the fragment loads
 * (32-bit pairs along a row, or 16-bit elements down a column) bank-conflict free.
 */
#include "cuda_internal.cuh"

#include <math.h>
#include <string.h>

#ifndef DXC_SIM_MMA
/* d += a b for one m16n8k16 tile (a warp-collective operation) */
static __device__ __forceinline__ void dxc_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                                          const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

namespace {

constexpr int TB = 64;  /* rows (queries or keys) per tile */
constexpr int NTH = 128; /* 4 warps */
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

template <int DH> __host__ __device__ constexpr int lds() { return DH + 8; } /* row stride (bf16) */
/* forward: Q, K, V tiles; backward: four tiles plus lse and D of 64 rows */
template <int DH> constexpr size_t fwd_smem() { return (size_t)3 * TB * lds<DH>() * sizeof(bf16); }
template <int DH> constexpr size_t bwd_smem()
{
    return (size_t)4 * TB * lds<DH>() * sizeof(bf16) + (size_t)2 * TB * sizeof(float);
}

/* two adjacent bf16 (even index) as one 32-bit register */
__device__ __forceinline__ uint32_t ld2(const bf16 *p) { return *(const uint32_t *)p; }

/* two bf16 from two rows (same column) packed: lo from p[0], hi from p[stride] */
__device__ __forceinline__ uint32_t ld2col(const bf16 *p, int stride)
{
    const unsigned short *u = (const unsigned short *)p;
    return (uint32_t)u[0] | ((uint32_t)u[stride] << 16);
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo (lower half) */
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
}

__device__ __forceinline__ void st2(bf16 *p, float lo, float hi)
{
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(lo, hi);
}

/* dst [64][DH+8] = rows r0.. of src (row stride `stride` elements), zero rows >= T; 16-byte
 * vector copies (src rows and dst rows are 16-byte aligned). */
template <int DH>
__device__ __forceinline__ void load_tile(bf16 *__restrict__ dst, const bf16 *__restrict__ src,
                                          size_t stride, int r0, int T)
{
    constexpr int CPR = DH / 8; /* 16-byte chunks per row */
    for (int e = threadIdx.x; e < TB * CPR; e += NTH) {
        const int r = e / CPR, c = e % CPR, gr = r0 + r;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (gr < T) val = *(const uint4 *)(src + (size_t)gr * stride + c * 8);
        *(uint4 *)(dst + r * lds<DH>() + c * 8) = val;
    }
}

/* A fragment of k-step ks for the 16 rows starting at `rows` (row-major, stride LDS) */
template <int DH>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const bf16 *rows, int ks, int g, int t)
{
    constexpr int L = lds<DH>();
    const bf16 *p = rows + g * L + 16 * ks + 2 * t;
    a[0] = ld2(p);
    a[1] = ld2(p + 8 * L);
    a[2] = ld2(p + 8);
    a[3] = ld2(p + 8 * L + 8);
}

/* B fragment (k = d, n = row) of k-step ks, n-tile of the 8 rows starting at `rows`: B = M^T
 * for a row-major M, i.e. the product contracts over M's columns */
template <int DH>
__device__ __forceinline__ void frag_bt(uint32_t (&b)[2], const bf16 *rows, int ks, int g, int t)
{
    constexpr int L = lds<DH>();
    const bf16 *p = rows + g * L + 16 * ks + 2 * t;
    b[0] = ld2(p);
    b[1] = ld2(p + 8);
}

/* B fragment (k = row, n = column) for k-step kk (16 rows) and n-tile nd (8 columns) of a
 * row-major M: the product contracts over M's rows */
template <int DH>
__device__ __forceinline__ void frag_b(uint32_t (&b)[2], const bf16 *m, int kk, int nd, int g, int t)
{
    constexpr int L = lds<DH>();
    const bf16 *p = m + (16 * kk + 2 * t) * L + 8 * nd + g;
    b[0] = ld2col(p, L);
    b[1] = ld2col(p + 8 * L, L);
}

/* A fragment of k-step kk from two accumulator n-tiles (2kk, 2kk+1), rounded to bf16 */
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4])
{
    a[0] = pack2(c0[0], c0[1]);
    a[1] = pack2(c0[2], c0[3]);
    a[2] = pack2(c1[0], c1[1]);
    a[3] = pack2(c1[2], c1[3]);
}

/* ------------------------------------------------------------------------------------------ */

template <int DH>
__global__ void __launch_bounds__(NTH)
    att_fwd_mma(bf16 *__restrict__ o, float *__restrict__ lse, const bf16 *__restrict__ q,
                const bf16 *__restrict__ k, const bf16 *__restrict__ v, int T, int H, int Hkv,
                float sl2)
{
    constexpr int L = lds<DH>(), NKS = DH / 16, NDT = DH / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Qs = (bf16 *)smem_raw, *Ks = Qs + TB * L, *Vs = Ks + TB * L;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qt = gridDim.x - 1 - blockIdx.x; /* long (late) query tiles first */
    const int h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
    const int q0 = qt * TB;
    const size_t qst = (size_t)H * DH, kst = (size_t)Hkv * DH;
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;

    load_tile<DH>(Qs, q + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    __syncthreads();
    uint32_t qa[NKS][4];
#pragma unroll
    for (int ks = 0; ks < NKS; ks++) frag_a<DH>(qa[ks], Qs + 16 * warp * L, ks, g, t);

    const int row0 = q0 + 16 * warp + g, row1 = row0 + 8;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* l: this lane's columns */
    float oacc[NDT][4];
#pragma unroll
    for (int nd = 0; nd < NDT; nd++) oacc[nd][0] = oacc[nd][1] = oacc[nd][2] = oacc[nd][3] = 0.0f;

    const int kend = q0 + TB < T ? q0 + TB : T;
    for (int j0 = 0; j0 < kend; j0 += TB) {
        __syncthreads(); /* every warp is done with the previous Ks, Vs */
        load_tile<DH>(Ks, kb, kst, j0, T);
        load_tile<DH>(Vs, vb, kst, j0, T);
        __syncthreads();

        float s[8][4];
#pragma unroll
        for (int jn = 0; jn < 8; jn++) s[jn][0] = s[jn][1] = s[jn][2] = s[jn][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < NKS; ks++)
#pragma unroll
            for (int jn = 0; jn < 8; jn++) {
                uint32_t bk[2];
                frag_bt<DH>(bk, Ks + 8 * jn * L, ks, g, t);
                dxc_mma_bf16_16816(s[jn], qa[ks], bk);
            }

        /* mask (causal, tile edge), scale to log2 units, online softmax per row */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int jn = 0; jn < 8; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j0 + 8 * jn + 2 * t + (e & 1), row = e < 2 ? row0 : row1;
                s[jn][e] = key <= row && key < T ? s[jn][e] * sl2 : -INFINITY;
                if (e < 2) mx0 = fmaxf(mx0, s[jn][e]);
                else mx1 = fmaxf(mx1, s[jn][e]);
            }
#pragma unroll
        for (int off = 1; off <= 2; off <<= 1) { /* the 4 lanes of a row: t = 0..3 */
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        /* key j0 <= row is unmasked in every tile, so the maxima are finite; the guard keeps
         * a fully masked row at p = 0 instead of NaN */
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float r0 = n0 == -INFINITY ? 0.0f : n0, r1 = n1 == -INFINITY ? 0.0f : n1;
        const float c0 = exp2f(m0 - r0), c1 = exp2f(m1 - r1);
        m0 = n0;
        m1 = n1;
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int jn = 0; jn < 8; jn++) {
            s[jn][0] = exp2f(s[jn][0] - r0);
            s[jn][1] = exp2f(s[jn][1] - r0);
            s[jn][2] = exp2f(s[jn][2] - r1);
            s[jn][3] = exp2f(s[jn][3] - r1);
            ps0 += s[jn][0] + s[jn][1];
            ps1 += s[jn][2] + s[jn][3];
        }
        l0 = l0 * c0 + ps0;
        l1 = l1 * c1 + ps1;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) {
            oacc[nd][0] *= c0;
            oacc[nd][1] *= c0;
            oacc[nd][2] *= c1;
            oacc[nd][3] *= c1;
        }

        /* O += P V */
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[4];
            acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                uint32_t bv[2];
                frag_b<DH>(bv, Vs, kk, nd, g, t);
                dxc_mma_bf16_16816(oacc[nd], pa, bv);
            }
        }
    }

#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    if (row0 < T) {
        const float inv = 1.0f / l0;
        bf16 *orow = o + ((size_t)b * T + row0) * qst + (size_t)h * DH + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) st2(orow + 8 * nd, oacc[nd][0] * inv, oacc[nd][1] * inv);
        if (t == 0) lse[((size_t)b * H + h) * T + row0] = (m0 + log2f(l0)) * LN2;
    }
    if (row1 < T) {
        const float inv = 1.0f / l1;
        bf16 *orow = o + ((size_t)b * T + row1) * qst + (size_t)h * DH + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) st2(orow + 8 * nd, oacc[nd][2] * inv, oacc[nd][3] * inv);
        if (t == 0) lse[((size_t)b * H + h) * T + row1] = (m1 + log2f(l1)) * LN2;
    }
}

/* ------------------------------------------------------------------------------------------ */

template <int DH>
__global__ void __launch_bounds__(NTH)
    att_bwd_dkdv_mma(bf16 *__restrict__ dk, bf16 *__restrict__ dv, const bf16 *__restrict__ dout,
                     const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                     const bf16 *__restrict__ v, const float *__restrict__ lse,
                     const float *__restrict__ Dv, int T, int H, int Hkv, float sl2, float scale)
{
    constexpr int L = lds<DH>(), NKS = DH / 16, NDT = DH / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Ks = (bf16 *)smem_raw, *Vs = Ks + TB * L, *Qs = Vs + TB * L, *Os = Qs + TB * L;
    float *Ls = (float *)(Os + TB * L), *Dd = Ls + TB;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int kt = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, G = H / Hkv;
    const int c0 = kt * TB;
    const int key0 = c0 + 16 * warp + g, key1 = key0 + 8; /* this lane's accumulator rows */
    const size_t qst = (size_t)H * DH, kst = (size_t)Hkv * DH;

    load_tile<DH>(Ks, k + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T);
    load_tile<DH>(Vs, v + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T);

    float dka[NDT][4], dva[NDT][4];
#pragma unroll
    for (int nd = 0; nd < NDT; nd++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[nd][e] = dva[nd][e] = 0.0f;

    for (int gi = 0; gi < G; gi++) {
        const int h = kh * G + gi;
        const bf16 *qb = q + (size_t)b * T * qst + (size_t)h * DH;
        const bf16 *ob = dout + (size_t)b * T * qst + (size_t)h * DH;
        const float *lrow = lse + ((size_t)b * H + h) * T, *drow = Dv + ((size_t)b * H + h) * T;
        for (int i0 = c0; i0 < T; i0 += TB) { /* queries i >= j only (c0 is tile-aligned) */
            __syncthreads(); /* every warp is done with the previous Qs, Os, Ls, Dd */
            load_tile<DH>(Qs, qb, qst, i0, T);
            load_tile<DH>(Os, ob, qst, i0, T);
            for (int r = threadIdx.x; r < TB; r += NTH) {
                const int gr = i0 + r;
                Ls[r] = gr < T ? lrow[gr] * LOG2E : 0.0f;
                Dd[r] = gr < T ? drow[gr] : 0.0f;
            }
            __syncthreads();

            /* S^T = K Q^T and dP^T = V dO^T: rows = this warp's 16 keys, 64 query columns */
            float st[8][4], dp[8][4];
#pragma unroll
            for (int jn = 0; jn < 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) st[jn][e] = dp[jn][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < NKS; ks++) {
                uint32_t ka[4], va[4];
                frag_a<DH>(ka, Ks + 16 * warp * L, ks, g, t);
                frag_a<DH>(va, Vs + 16 * warp * L, ks, g, t);
#pragma unroll
                for (int jn = 0; jn < 8; jn++) {
                    uint32_t bq[2], bo[2];
                    frag_bt<DH>(bq, Qs + 8 * jn * L, ks, g, t);
                    frag_bt<DH>(bo, Os + 8 * jn * L, ks, g, t);
                    dxc_mma_bf16_16816(st[jn], ka, bq);
                    dxc_mma_bf16_16816(dp[jn], va, bo);
                }
            }
            /* P^T (in st) and dS^T = P^T (dP^T - D) (in dp) */
#pragma unroll
            for (int jn = 0; jn < 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = 8 * jn + 2 * t + (e & 1), qi = i0 + r;
                    const int key = e < 2 ? key0 : key1;
                    const bool ok = qi >= key && qi < T && key < T;
                    const float p = ok ? exp2f(st[jn][e] * sl2 - Ls[r]) : 0.0f;
                    st[jn][e] = p;
                    dp[jn][e] = p * (dp[jn][e] - Dd[r]);
                }
            /* dV += P^T dO ; dK += dS^T Q (contracting over the 64 queries) */
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t pa[4], sa[4];
                acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
                acc_to_a(sa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int nd = 0; nd < NDT; nd++) {
                    uint32_t bo[2], bq[2];
                    frag_b<DH>(bo, Os, kk, nd, g, t);
                    frag_b<DH>(bq, Qs, kk, nd, g, t);
                    dxc_mma_bf16_16816(dva[nd], pa, bo);
                    dxc_mma_bf16_16816(dka[nd], sa, bq);
                }
            }
        }
    }

    if (key0 < T) {
        const size_t off = ((size_t)b * T + key0) * kst + (size_t)kh * DH + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) {
            st2(dk + off + 8 * nd, dka[nd][0] * scale, dka[nd][1] * scale);
            st2(dv + off + 8 * nd, dva[nd][0], dva[nd][1]);
        }
    }
    if (key1 < T) {
        const size_t off = ((size_t)b * T + key1) * kst + (size_t)kh * DH + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) {
            st2(dk + off + 8 * nd, dka[nd][2] * scale, dka[nd][3] * scale);
            st2(dv + off + 8 * nd, dva[nd][2], dva[nd][3]);
        }
    }
}

template <int DH>
__global__ void __launch_bounds__(NTH)
    att_bwd_dq_mma(bf16 *__restrict__ dq, const bf16 *__restrict__ dout,
                   const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                   const bf16 *__restrict__ v, const float *__restrict__ lse,
                   const float *__restrict__ Dv, int T, int H, int Hkv, float sl2, float scale)
{
    constexpr int L = lds<DH>(), NKS = DH / 16, NDT = DH / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Qs = (bf16 *)smem_raw, *Os = Qs + TB * L, *Ks = Os + TB * L, *Vs = Ks + TB * L;
    float *Ls = (float *)(Vs + TB * L), *Dd = Ls + TB;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qt = gridDim.x - 1 - blockIdx.x; /* long (late) query tiles first */
    const int h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
    const int q0 = qt * TB;
    const int row0 = q0 + 16 * warp + g, row1 = row0 + 8;
    const size_t qst = (size_t)H * DH, kst = (size_t)Hkv * DH;
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
    const float *lrow = lse + ((size_t)b * H + h) * T, *drow = Dv + ((size_t)b * H + h) * T;

    load_tile<DH>(Qs, q + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    load_tile<DH>(Os, dout + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    for (int r = threadIdx.x; r < TB; r += NTH) {
        const int gr = q0 + r;
        Ls[r] = gr < T ? lrow[gr] * LOG2E : 0.0f;
        Dd[r] = gr < T ? drow[gr] : 0.0f;
    }
    __syncthreads();
    const float L0 = Ls[16 * warp + g], L1 = Ls[16 * warp + g + 8];
    const float D0 = Dd[16 * warp + g], D1 = Dd[16 * warp + g + 8];

    float dqa[NDT][4];
#pragma unroll
    for (int nd = 0; nd < NDT; nd++) dqa[nd][0] = dqa[nd][1] = dqa[nd][2] = dqa[nd][3] = 0.0f;

    const int kend = q0 + TB < T ? q0 + TB : T;
    for (int j0 = 0; j0 < kend; j0 += TB) {
        __syncthreads(); /* every warp is done with the previous Ks, Vs */
        load_tile<DH>(Ks, kb, kst, j0, T);
        load_tile<DH>(Vs, vb, kst, j0, T);
        __syncthreads();

        /* S = Q K^T and dP = dO V^T: rows = this warp's 16 queries, 64 key columns */
        float s[8][4], dp[8][4];
#pragma unroll
        for (int jn = 0; jn < 8; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[jn][e] = dp[jn][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            uint32_t qa[4], oa[4];
            frag_a<DH>(qa, Qs + 16 * warp * L, ks, g, t);
            frag_a<DH>(oa, Os + 16 * warp * L, ks, g, t);
#pragma unroll
            for (int jn = 0; jn < 8; jn++) {
                uint32_t bk[2], bv[2];
                frag_bt<DH>(bk, Ks + 8 * jn * L, ks, g, t);
                frag_bt<DH>(bv, Vs + 8 * jn * L, ks, g, t);
                dxc_mma_bf16_16816(s[jn], qa, bk);
                dxc_mma_bf16_16816(dp[jn], oa, bv);
            }
        }
        /* dS = P (dP - D), in s */
#pragma unroll
        for (int jn = 0; jn < 8; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j0 + 8 * jn + 2 * t + (e & 1), row = e < 2 ? row0 : row1;
                const bool ok = key <= row && key < T && row < T;
                const float p = ok ? exp2f(s[jn][e] * sl2 - (e < 2 ? L0 : L1)) : 0.0f;
                s[jn][e] = p * (dp[jn][e] - (e < 2 ? D0 : D1));
            }
        /* dQ += dS K (contracting over the 64 keys) */
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t sa[4];
            acc_to_a(sa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                uint32_t bk[2];
                frag_b<DH>(bk, Ks, kk, nd, g, t);
                dxc_mma_bf16_16816(dqa[nd], sa, bk);
            }
        }
    }

    if (row0 < T) {
        bf16 *r = dq + ((size_t)b * T + row0) * qst + (size_t)h * DH + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) st2(r + 8 * nd, dqa[nd][0] * scale, dqa[nd][1] * scale);
    }
    if (row1 < T) {
        bf16 *r = dq + ((size_t)b * T + row1) * qst + (size_t)h * DH + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) st2(r + 8 * nd, dqa[nd][2] * scale, dqa[nd][3] * scale);
    }
}

/* ------------------------------------------------------------------------------------------ */

template <int DH>
void fwd_launch(dx_backend *be, void *o, void *lse, const void *q, const void *k, const void *v,
                int B, int T, int H, int Hkv)
{
    const char *op = "attention_fwd";
    const size_t smem = fwd_smem<DH>();
    dxc_set_smem(be, (const void *)att_fwd_mma<DH>, smem, op);
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    dim3 grid((T + TB - 1) / TB, H, B);
    att_fwd_mma<DH><<<grid, NTH, smem, dxc(be)->stream>>>((bf16 *)o, (float *)lse, (const bf16 *)q,
                                                         (const bf16 *)k, (const bf16 *)v, T, H,
                                                         Hkv, sl2);
    DXC_LAUNCHED(be, op);
}

template <int DH>
void bwd_launch(dx_backend *be, void *dq, void *dk, void *dv, const void *dout, const void *q,
                const void *k, const void *v, const float *lse, const float *Dv, int B, int T,
                int H, int Hkv)
{
    const char *op = "attention_bwd";
    const float scale = (float)(1.0 / sqrt((double)DH));
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    cudaStream_t st = dxc(be)->stream;
    const size_t smem = bwd_smem<DH>();

    dxc_set_smem(be, (const void *)att_bwd_dkdv_mma<DH>, smem, op);
    dim3 g1((T + TB - 1) / TB, Hkv, B);
    att_bwd_dkdv_mma<DH><<<g1, NTH, smem, st>>>((bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                                                (const bf16 *)q, (const bf16 *)k,
                                                (const bf16 *)v, lse, Dv, T, H, Hkv, sl2, scale);
    DXC_LAUNCHED(be, op);

    dxc_set_smem(be, (const void *)att_bwd_dq_mma<DH>, smem, op);
    dim3 g2((T + TB - 1) / TB, H, B);
    att_bwd_dq_mma<DH><<<g2, NTH, smem, st>>>((bf16 *)dq, (const bf16 *)dout, (const bf16 *)q,
                                              (const bf16 *)k, (const bf16 *)v, lse, Dv, T, H,
                                              Hkv, sl2, scale);
    DXC_LAUNCHED(be, op);
}

} // namespace

void dxc_attention_fwd_mma(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                           const void *v, int B, int T, int H, int Hkv, int Dh)
{
    switch (Dh) {
    case 32: fwd_launch<32>(be, o, lse, q, k, v, B, T, H, Hkv); break;
    case 64: fwd_launch<64>(be, o, lse, q, k, v, B, T, H, Hkv); break;
    default: fwd_launch<128>(be, o, lse, q, k, v, B, T, H, Hkv); break;
    }
}

void dxc_attention_bwd_mma(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                           const void *q, const void *k, const void *v, const float *lse,
                           const float *Dv, int B, int T, int H, int Hkv, int Dh)
{
    switch (Dh) {
    case 32: bwd_launch<32>(be, dq, dk, dv, dout, q, k, v, lse, Dv, B, T, H, Hkv); break;
    case 64: bwd_launch<64>(be, dq, dk, dv, dout, q, k, v, lse, Dv, B, T, H, Hkv); break;
    default: bwd_launch<128>(be, dq, dk, dv, dout, q, k, v, lse, Dv, B, T, H, Hkv); break;
    }
}
