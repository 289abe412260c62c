/* dissect CUDA backend: causal grouped-query attention on tensor cores (FlashAttention-2,
 * Dao 2023), with mma.sync.m16n8k16 bf16 -> fp32 (sm_80+ PTX, runs on Hopper).
 *
 * Same contract and algorithm as the CUDA-core kernels in attention.cu (the fallback, selected
 * with DX_CUDA_ATTENTION=simple or when a pointer is not 16-byte aligned):
 *   forward   one block per (BM-query tile, h, b), NW warps, each warp owning 16*MT query
 *             rows; S = Q K^T, the online-softmax state and O stay in registers; P is rounded
 *             to bf16 for the P V product (as in FlashAttention-2), row sums use fp32 P.
 *   backward  D = do . o (att_bwd_dot_vec in attention.cu), then
 *             dk, dv per (BK-key tile, kv head, b), each warp owning 16*MT keys: S^T = K Q^T
 *             and dP^T = V dO^T per BQ-query tile, P^T and dS^T in registers, dv += P^T dO,
 *             dk += dS^T Q (P^T and dS^T rounded to bf16 as mma operands); the group's query
 *             heads and the query tiles are walked in ascending order, so dk and dv are
 *             deterministic. dq, by default in the same kernel (FlashAttention-2's form, 5
 *             tile products): dS^T goes to shared memory as bf16, the block's warps compute
 *             dq_tile = dS K over the BK keys and add it to an fp32 buffer with vector atomics
 *             (order of the additions not fixed), converted to bf16 at the end. With
 *             DX_CUDA_DETERMINISTIC=1: a separate dq kernel per (BM-query tile, h, b), each
 *             warp owning 16*MT queries, recomputing S and dP (7 tile products, fixed order).
 *
 * Data movement: the tile that a block walks over (K, V in the forward and dq kernels; Q, dO,
 * lse, D in the dk/dv kernel) is double-buffered in shared memory with cp.async (the next tile
 * is in flight while the current one is multiplied); rows past T are zero-filled. Operand
 * fragments come from shared memory through ldmatrix (.trans for the operands that are
 * contracted over their rows: V in P V, dO in P^T dO, Q in dS^T Q, K in dS K). A warp with
 * MT > 1 row tiles reuses every B fragment MT times, which halves shared-memory reads per mma.
 * Causal masking is applied only in tiles that cross the diagonal or the end of the sequence,
 * and a warp skips tiles that lie wholly above its diagonal.
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
 * Shared memory tiles are bf16 [rows][Dh + 8]: the 16-byte row padding puts the 8 row addresses
 * of every ldmatrix 8x8 matrix in 8 different 16-byte bank groups (conflict free).
 */
#include "cuda_internal.cuh"

#include <math.h>

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

template <int DH> __host__ __device__ constexpr int lds() { return DH + 8; } /* row stride (bf16) */

/* ---- PTX wrappers ------------------------------------------------------------------------ */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i gets
 * matrix i with this lane holding (row lane/4, columns 2(lane%4), +1) */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* the same, transposed: this lane holds (rows 2(lane%4), +1; column lane/4) of each matrix */
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += a b for one m16n8k16 tile (a warp-collective operation) */
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x (MUFU.EX2; -inf -> +0) */
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* 16 bytes global -> shared, asynchronously; full = false writes 16 zero bytes instead */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool full)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(full ? 16 : 0));
}

/* 4 bytes global -> shared, asynchronously; full = false writes zero */
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool full)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(full ? 4 : 0));
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/* waits until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* p[0] += a, p[1] += b in global memory, one vector reduction (sm_90; p 8-byte aligned) */
__device__ __forceinline__ void red_add2(float *p, float a, float b)
{
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo (lower half) */
    return *(uint32_t *)&v;
}

__device__ __forceinline__ void st2(bf16 *p, float lo, float hi)
{
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(lo, hi);
}

/* ---- tiles ------------------------------------------------------------------------------- */

/* dst [ROWS][DH+8] <- rows r0 .. r0+ROWS-1 of src (row stride `stride` elements), rows >= T
 * zero-filled; NT threads, 16-byte copies (rows of src and dst are 16-byte aligned) */
template <int DH, int ROWS, int NT>
__device__ __forceinline__ void tile_async(bf16 *dst, const bf16 *__restrict__ src, size_t stride,
                                           int r0, int T)
{
    constexpr int CPR = DH / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int e = threadIdx.x; e < ROWS * CPR; e += NT) {
        const int r = e / CPR, c = e % CPR, gr = r0 + r;
        const bool in = gr < T;
        cp_async16(smem_u32(dst + r * lds<DH>() + c * 8),
                   src + (size_t)(in ? gr : 0) * stride + c * 8, in);
    }
}

/* dst [ROWS] <- src[r0 ..], entries >= T zero */
template <int ROWS, int NT>
__device__ __forceinline__ void vec_async(float *dst, const float *__restrict__ src, int r0, int T)
{
    for (int r = threadIdx.x; r < ROWS; r += NT) {
        const int gr = r0 + r;
        const bool in = gr < T;
        cp_async4(smem_u32(dst + r), src + (in ? gr : 0), in);
    }
}

/* The key-tile walk of the forward and dq kernels (K, V in two stages of [BN][DH+8]): starts
 * the copy of tile j + 1 (when there is one) into the other stage, then waits until tile j (and
 * everything committed before it) has landed for every thread of the block. */
template <int DH, int BN, int NT>
__device__ __forceinline__ void kv_next(bf16 *Ks, bf16 *Vs, const bf16 *__restrict__ kb,
                                        const bf16 *__restrict__ vb, size_t kst, int j, int nkt,
                                        int T)
{
    if (j + 1 < nkt) {
        const int s = (j + 1) & 1;
        tile_async<DH, BN, NT>(Ks + s * BN * lds<DH>(), kb, kst, (j + 1) * BN, T);
        tile_async<DH, BN, NT>(Vs + s * BN * lds<DH>(), vb, kst, (j + 1) * BN, T);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();
}

/* Byte offsets of this lane's ldmatrix row address inside a 16x16 block of a [rows][DH+8]
 * tile. lane_a: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (0-7, 8-15), (8-15, 8-15)
 * = the A fragment a0..a3, and with .trans the B fragments of two n-tiles of a row-major
 * [k][n] operand. lane_b: (0-7, 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = B fragments
 * (b0, b1) of n-tiles 0 and 1 of an operand stored [n][k]. */
template <int DH> __device__ __forceinline__ int lane_a_off(int lane)
{
    return 2 * (((lane & 7) + 8 * ((lane >> 3) & 1)) * lds<DH>() + 8 * (lane >> 4));
}
template <int DH> __device__ __forceinline__ int lane_b_off(int lane)
{
    return 2 * (((lane & 7) + 8 * (lane >> 4)) * lds<DH>() + 8 * ((lane >> 3) & 1));
}

/* acc[m][n] += A_m B_n^T over k = 0..DH-1, with A_m the 16 rows of smem tile a (16*m ..) and
 * B_n the 8 rows of smem tile b (8*n ..), both stored [row][DH+8]; a, b are shared-space
 * addresses of row 0 (plus this lane's offsets) */
template <int DH, int MT, int NN>
__device__ __forceinline__ void mma_abt(float (&acc)[MT][NN][4], uint32_t a, uint32_t b)
{
    constexpr int L = lds<DH>();
#pragma unroll
    for (int ks = 0; ks < DH / 16; ks++) {
        uint32_t fa[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++) ldsm4(fa[m], a + 2 * (16 * m * L + 16 * ks));
#pragma unroll
        for (int p = 0; p < NN / 2; p++) {
            uint32_t fb[4];
            ldsm4(fb, b + 2 * (16 * p * L + 16 * ks));
#pragma unroll
            for (int m = 0; m < MT; m++) {
                mma16816(acc[m][2 * p], fa[m], fb[0], fb[1]);
                mma16816(acc[m][2 * p + 1], fa[m], fb[2], fb[3]);
            }
        }
    }
}

/* The same with the A fragments already in registers (fa[m][ks] = rows 16m.., columns 16ks..) */
template <int DH, int MT, int NN>
__device__ __forceinline__ void mma_abt_reg(float (&acc)[MT][NN][4], const uint32_t (&fa)[MT][DH / 16][4],
                                            uint32_t b)
{
    constexpr int L = lds<DH>();
#pragma unroll
    for (int ks = 0; ks < DH / 16; ks++) {
#pragma unroll
        for (int p = 0; p < NN / 2; p++) {
            uint32_t fb[4];
            ldsm4(fb, b + 2 * (16 * p * L + 16 * ks));
#pragma unroll
            for (int m = 0; m < MT; m++) {
                mma16816(acc[m][2 * p], fa[m][ks], fb[0], fb[1]);
                mma16816(acc[m][2 * p + 1], fa[m][ks], fb[2], fb[3]);
            }
        }
    }
}

/* acc[m][nd] += P_m B over k = 0..16*KK-1, with P_m given as accumulator tiles [2*KK][4]
 * (rounded to bf16 here) and B the smem tile b stored [k][DH+8] (row-major k x DH) */
template <int DH, int MT, int KK>
__device__ __forceinline__ void mma_pb(float (&acc)[MT][DH / 8][4], const float (&p)[MT][2 * KK][4],
                                       uint32_t b)
{
    constexpr int L = lds<DH>();
#pragma unroll
    for (int kk = 0; kk < KK; kk++) {
        uint32_t fa[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++) {
            fa[m][0] = pack2(p[m][2 * kk][0], p[m][2 * kk][1]);
            fa[m][1] = pack2(p[m][2 * kk][2], p[m][2 * kk][3]);
            fa[m][2] = pack2(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
            fa[m][3] = pack2(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int q = 0; q < DH / 16; q++) {
            uint32_t fb[4];
            ldsm4t(fb, b + 2 * (16 * kk * L + 16 * q));
#pragma unroll
            for (int m = 0; m < MT; m++) {
                mma16816(acc[m][2 * q], fa[m], fb[0], fb[1]);
                mma16816(acc[m][2 * q + 1], fa[m], fb[2], fb[3]);
            }
        }
    }
}

template <int MT, int N> __device__ __forceinline__ void zero(float (&a)[MT][N][4])
{
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < N; n++) a[m][n][0] = a[m][n][1] = a[m][n][2] = a[m][n][3] = 0.0f;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* block: BM = 16*MT*NW queries of head h, batch b; key tiles of BN */
template <int DH, int NW, int MT, int BN> constexpr size_t fwd_smem()
{
    return (size_t)(16 * MT * NW + 4 * BN) * lds<DH>() * sizeof(bf16);
}

/* QR: the warp's Q fragments are loaded from shared memory once and kept in registers
 * (MT * DH / 4 registers) instead of being re-read for every key tile */
template <int DH, int NW, int MT, int BN, bool QR>
__global__ void __launch_bounds__(NW * 32)
    att_fwd_tc(bf16 *__restrict__ o, float *__restrict__ lse, const bf16 *__restrict__ q,
               const bf16 *__restrict__ k, const bf16 *__restrict__ v, int T, int H, int Hkv, size_t kst,
               float sl2)
{
    constexpr int L = lds<DH>(), NT = NW * 32, BM = 16 * MT * NW, NDT = DH / 8, NN = BN / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Qs = (bf16 *)smem_raw, *Ks = Qs + BM * L, *Vs = Ks + 2 * BN * L; /* K, V: 2 stages */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x % H, b = blockIdx.x / H, kh = h / (H / Hkv);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BM; /* long (late) query tiles first */
    const size_t qst = (size_t)H * DH; /* k, v (dk, dv): rows kst apart */
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
    const int la = lane_a_off<DH>(lane), lb = lane_b_off<DH>(lane);

    tile_async<DH, BM, NT>(Qs, q + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    tile_async<DH, BN, NT>(Ks, kb, kst, 0, T);
    tile_async<DH, BN, NT>(Vs, vb, kst, 0, T);
    cp_commit();

    const int wr0 = q0 + 16 * MT * warp; /* this warp's first query row */
    const uint32_t qa = smem_u32(Qs + 16 * MT * warp * L) + la;
    float mrow[MT][2], lrow[MT][2], oacc[MT][NDT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
        mrow[m][0] = mrow[m][1] = -INFINITY, lrow[m][0] = lrow[m][1] = 0.0f;
    zero(oacc);
    uint32_t qf[MT][QR ? DH / 16 : 1][4];

    const int kend = q0 + BM < T ? q0 + BM : T, nkt = (kend + BN - 1) / BN;
    for (int j = 0; j < nkt; j++) {
        kv_next<DH, BN, NT>(Ks, Vs, kb, vb, kst, j, nkt, T); /* tile j (and Q) in shared memory */
        if (QR && j == 0) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int ks = 0; ks < (QR ? DH / 16 : 1); ks++)
                    ldsm4(qf[m][ks], qa + 2 * (16 * m * L + 16 * ks));
        }
        const int j0 = j * BN;
        if (j0 <= wr0 + 16 * MT - 1) { /* some key of the tile is <= some row of this warp */
            const uint32_t kt = smem_u32(Ks + (j & 1) * BN * L),
                           vt = smem_u32(Vs + (j & 1) * BN * L);
            float s[MT][NN][4];
            zero(s);
            if constexpr (QR)
                mma_abt_reg<DH, MT, NN>(s, qf, kt + lb);
            else
                mma_abt<DH, MT, NN>(s, qa, kt + lb);
            if (j0 + BN - 1 > wr0 || j0 + BN > T) {
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int n = 0; n < NN; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = j0 + 8 * n + 2 * t + (e & 1);
                            const int row = wr0 + 16 * m + g + 8 * (e >> 1);
                            if (key > row || key >= T) s[m][n][e] = -INFINITY;
                        }
            }
            /* online softmax per row (m, hh): raw scores, 2^(s * sl2 - max * sl2) */
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int n = 0; n < NN; n++)
                        mx = fmaxf(mx, fmaxf(s[m][n][2 * hh], s[m][n][2 * hh + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); /* the row's 4 lanes */
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mn = fmaxf(mrow[m][hh], mx);
                    /* a row with no key yet stays at p = 0 instead of NaN */
                    const float ms = mn == -INFINITY ? 0.0f : mn * sl2;
                    const float c = ex2(mrow[m][hh] * sl2 - ms);
                    mrow[m][hh] = mn;
                    float ps = 0.0f;
#pragma unroll
                    for (int n = 0; n < NN; n++) {
                        s[m][n][2 * hh] = ex2(fmaf(s[m][n][2 * hh], sl2, -ms));
                        s[m][n][2 * hh + 1] = ex2(fmaf(s[m][n][2 * hh + 1], sl2, -ms));
                        ps += s[m][n][2 * hh] + s[m][n][2 * hh + 1];
                    }
                    lrow[m][hh] = lrow[m][hh] * c + ps;
#pragma unroll
                    for (int nd = 0; nd < NDT; nd++) {
                        oacc[m][nd][2 * hh] *= c;
                        oacc[m][nd][2 * hh + 1] *= c;
                    }
                }
            mma_pb<DH, MT, BN / 16>(oacc, s, vt + la); /* O += P V */
        }
        __syncthreads(); /* every warp is done with stage j & 1 before it is refilled */
    }

#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float l = lrow[m][hh];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int row = wr0 + 16 * m + g + 8 * hh;
            if (row < T) {
                const float inv = 1.0f / l;
                bf16 *orow = o + ((size_t)b * T + row) * qst + (size_t)h * DH + 2 * t;
#pragma unroll
                for (int nd = 0; nd < NDT; nd++)
                    st2(orow + 8 * nd, oacc[m][nd][2 * hh] * inv, oacc[m][nd][2 * hh + 1] * inv);
                if (t == 0)
                    lse[((size_t)b * H + h) * T + row] = (mrow[m][hh] * sl2 + log2f(l)) * LN2;
            }
        }
}

/* ---- backward: dk, dv -------------------------------------------------------------------- */

/* block: BK = 16*MT*NW keys of kv head kh, batch b; query tiles of BQ */
template <int DH, int NW, int MT, int BQ, bool DQ> constexpr size_t dkdv_smem()
{
    return (size_t)(2 * 16 * MT * NW + 4 * BQ) * lds<DH>() * sizeof(bf16) +
           (size_t)4 * BQ * sizeof(float) +
           (DQ ? (size_t)16 * MT * NW * (BQ + 8) * sizeof(bf16) : 0); /* dS^T tile */
}

/* DQ: also dq_acc[b,i,h,:] += dS K (unscaled, fp32, vector reductions in global memory): dS^T
 * goes through shared memory as bf16, and the block's warps split the BQ x DH product. */
template <int DH, int NW, int MT, int BQ, bool DQ>
__global__ void __launch_bounds__(NW * 32)
    att_bwd_dkdv_tc(bf16 *__restrict__ dk, bf16 *__restrict__ dv, float *__restrict__ dq_acc,
                    const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
                    const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                    const float *__restrict__ lse, const float *__restrict__ Dv, int T, int H,
                    int Hkv, size_t kst, float sl2, float scale)
{
    constexpr int L = lds<DH>(), NT = NW * 32, BK = 16 * MT * NW, NDT = DH / 8, NN = BQ / 8;
    constexpr int LS = BQ + 8;                         /* dS^T row stride (bf16) */
    constexpr int NRP = BQ / 16, NCP = NW / NRP, DPW = DH / NCP; /* dq: warp's rows, d columns */
    static_assert(!DQ || (NW % NRP == 0 && DPW % 16 == 0), "dq split");
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Ks = (bf16 *)smem_raw, *Vs = Ks + BK * L, *Qs = Vs + BK * L, *Os = Qs + 2 * BQ * L;
    float *Ls = (float *)(Os + 2 * BQ * L), *Dd = Ls + 2 * BQ; /* Q, dO, lse, D: 2 stages */
    bf16 *Ss = (bf16 *)(Dd + 2 * BQ);                          /* dS^T [BK][BQ + 8] (DQ) */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int kh = blockIdx.x % Hkv, b = blockIdx.x / Hkv, G = H / Hkv;
    const int c0 = blockIdx.y * BK; /* long (early) key tiles first */
    const size_t qst = (size_t)H * DH; /* k, v (dk, dv): rows kst apart */
    const int la = lane_a_off<DH>(lane), lb = lane_b_off<DH>(lane);

    /* iteration it: query head kh * G + it / nq, query tile c0 + (it % nq) * BQ (queries
     * before c0 see none of these keys) */
    const int nq = (T - c0 + BQ - 1) / BQ, niter = G * nq;
    auto load = [&](int it, int s) {
        const int h = kh * G + it / nq, i0 = c0 + (it % nq) * BQ;
        tile_async<DH, BQ, NT>(Qs + s * BQ * L, q + (size_t)b * T * qst + (size_t)h * DH, qst, i0,
                               T);
        tile_async<DH, BQ, NT>(Os + s * BQ * L, dout + (size_t)b * T * qst + (size_t)h * DH, qst,
                               i0, T);
        vec_async<BQ, NT>(Ls + s * BQ, lse + ((size_t)b * H + h) * T, i0, T);
        vec_async<BQ, NT>(Dd + s * BQ, Dv + ((size_t)b * H + h) * T, i0, T);
    };
    tile_async<DH, BK, NT>(Ks, k + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T);
    tile_async<DH, BK, NT>(Vs, v + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T);
    load(0, 0);
    cp_commit();

    const int wk0 = c0 + 16 * MT * warp; /* this warp's first key */
    const uint32_t ka = smem_u32(Ks + 16 * MT * warp * L) + la;
    const uint32_t va = smem_u32(Vs + 16 * MT * warp * L) + la;
    float dka[MT][NDT][4], dva[MT][NDT][4];
    zero(dka);
    zero(dva);

    for (int it = 0; it < niter; it++) {
        if (it + 1 < niter) load(it + 1, (it + 1) & 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const int i0 = c0 + (it % nq) * BQ, s = it & 1;
        if (i0 + BQ - 1 >= wk0) { /* some query of the tile is >= some key of this warp */
            const uint32_t qt = smem_u32(Qs + s * BQ * L), ot = smem_u32(Os + s * BQ * L);
            const float *lt = Ls + s * BQ, *dt = Dd + s * BQ;
            float st[MT][NN][4], dp[MT][NN][4];
            zero(st);
            zero(dp);
            mma_abt<DH, MT, NN>(st, ka, qt + lb); /* S^T = K Q^T */
            mma_abt<DH, MT, NN>(dp, va, ot + lb); /* dP^T = V dO^T */
            const bool edge = i0 < wk0 + 16 * MT - 1 || i0 + BQ > T || wk0 + 16 * MT > T;
#pragma unroll
            for (int n = 0; n < NN; n++) {
                const int col = 8 * n + 2 * t;
                const float2 l2 = *(const float2 *)(lt + col), d2 = *(const float2 *)(dt + col);
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = ex2(fmaf(st[m][n][e], sl2, -((e & 1) ? l2.y : l2.x) * LOG2E));
                        if (edge) {
                            const int qi = i0 + col + (e & 1),
                                      key = wk0 + 16 * m + g + 8 * (e >> 1);
                            if (qi < key || qi >= T || key >= T) p = 0.0f;
                        }
                        st[m][n][e] = p;
                        dp[m][n][e] = p * (dp[m][n][e] - ((e & 1) ? d2.y : d2.x));
                    }
            }
            mma_pb<DH, MT, BQ / 16>(dva, st, ot + la); /* dV += P^T dO */
            mma_pb<DH, MT, BQ / 16>(dka, dp, qt + la); /* dK += dS^T Q */
            if constexpr (DQ) {
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int n = 0; n < NN; n++)
#pragma unroll
                        for (int hh = 0; hh < 2; hh++)
                            *(uint32_t *)(Ss + (16 * MT * warp + 16 * m + g + 8 * hh) * LS + 8 * n +
                                          2 * t) = pack2(dp[m][n][2 * hh], dp[m][n][2 * hh + 1]);
            }
        } else if constexpr (DQ) { /* no query of the tile sees this warp's keys: dS = 0 */
            for (int e = lane; e < 16 * MT * BQ / 2; e += 32)
                ((uint32_t *)Ss)[(16 * MT * warp + e / (BQ / 2)) * (LS / 2) + e % (BQ / 2)] = 0u;
        }
        if constexpr (DQ) {
            __syncthreads(); /* the block's dS^T tile is complete */
            /* dq[i0 + 16 rp .., 32-column piece cp] += dS (16 x BK) K (BK x DPW) */
            const int rp = warp % NRP, cp = warp / NRP;
            float acc[DPW / 8][4];
#pragma unroll
            for (int n = 0; n < DPW / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
            /* A = dS from the transposed tile: the lane_b address pattern with .trans */
            const uint32_t sa = smem_u32(Ss) + 2 * (((lane & 7) + 8 * (lane >> 4)) * LS +
                                                    8 * ((lane >> 3) & 1) + 16 * rp);
            const uint32_t kb = smem_u32(Ks) + la + 2 * DPW * cp;
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t fa[4];
                ldsm4t(fa, sa + 2 * 16 * kk * LS);
#pragma unroll
                for (int p = 0; p < DPW / 16; p++) {
                    uint32_t fb[4];
                    ldsm4t(fb, kb + 2 * (16 * kk * L + 16 * p));
                    mma16816(acc[2 * p], fa, fb[0], fb[1]);
                    mma16816(acc[2 * p + 1], fa, fb[2], fb[3]);
                }
            }
            const int h = kh * G + it / nq;
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int qi = i0 + 16 * rp + g + 8 * hh;
                if (qi >= T) continue;
                float *dst =
                    dq_acc + ((size_t)b * T + qi) * qst + (size_t)h * DH + DPW * cp + 2 * t;
#pragma unroll
                for (int n = 0; n < DPW / 8; n++)
                    red_add2(dst + 8 * n, acc[n][2 * hh], acc[n][2 * hh + 1]);
            }
        }
        __syncthreads(); /* every warp is done with stage s (and dS^T) before they are refilled */
    }

#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int key = wk0 + 16 * m + g + 8 * hh;
            if (key >= T) continue;
            const size_t off = ((size_t)b * T + key) * kst + (size_t)kh * DH + 2 * t;
#pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                st2(dk + off + 8 * nd, dka[m][nd][2 * hh] * scale, dka[m][nd][2 * hh + 1] * scale);
                st2(dv + off + 8 * nd, dva[m][nd][2 * hh], dva[m][nd][2 * hh + 1]);
            }
        }
}

/* ---- backward: dq ------------------------------------------------------------------------ */

/* block: BM = 16*MT*NW queries of head h, batch b; key tiles of BN */
template <int DH, int NW, int MT, int BN> constexpr size_t dq_smem()
{
    return (size_t)(2 * 16 * MT * NW + 4 * BN) * lds<DH>() * sizeof(bf16);
}

template <int DH, int NW, int MT, int BN>
__global__ void __launch_bounds__(NW * 32)
    att_bwd_dq_tc(bf16 *__restrict__ dq, const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
                  const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                  const float *__restrict__ lse, const float *__restrict__ Dv, int T, int H,
                  int Hkv, size_t kst, float sl2, float scale)
{
    constexpr int L = lds<DH>(), NT = NW * 32, BM = 16 * MT * NW, NDT = DH / 8, NN = BN / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Qs = (bf16 *)smem_raw, *Os = Qs + BM * L, *Ks = Os + BM * L, *Vs = Ks + 2 * BN * L;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x % H, b = blockIdx.x / H, kh = h / (H / Hkv);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BM; /* long (late) query tiles first */
    const size_t qst = (size_t)H * DH; /* k, v (dk, dv): rows kst apart */
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
    const int la = lane_a_off<DH>(lane), lb = lane_b_off<DH>(lane);

    tile_async<DH, BM, NT>(Qs, q + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    tile_async<DH, BM, NT>(Os, dout + (size_t)b * T * qst + (size_t)h * DH, qst, q0, T);
    tile_async<DH, BN, NT>(Ks, kb, kst, 0, T);
    tile_async<DH, BN, NT>(Vs, vb, kst, 0, T);
    cp_commit();

    const int wr0 = q0 + 16 * MT * warp;
    const float *lrow = lse + ((size_t)b * H + h) * T, *drow = Dv + ((size_t)b * H + h) * T;
    float L2[MT][2], D[MT][2]; /* lse in log2 units and D of this lane's rows */
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = wr0 + 16 * m + g + 8 * hh;
            L2[m][hh] = row < T ? lrow[row] * LOG2E : 0.0f;
            D[m][hh] = row < T ? drow[row] : 0.0f;
        }
    const uint32_t qa = smem_u32(Qs + 16 * MT * warp * L) + la;
    const uint32_t oa = smem_u32(Os + 16 * MT * warp * L) + la;
    float dqa[MT][NDT][4];
    zero(dqa);

    const int kend = q0 + BM < T ? q0 + BM : T, nkt = (kend + BN - 1) / BN;
    for (int j = 0; j < nkt; j++) {
        kv_next<DH, BN, NT>(Ks, Vs, kb, vb, kst, j, nkt, T); /* tile j (and Q, dO) landed */
        const int j0 = j * BN;
        if (j0 <= wr0 + 16 * MT - 1) {
            const uint32_t kt = smem_u32(Ks + (j & 1) * BN * L),
                           vt = smem_u32(Vs + (j & 1) * BN * L);
            float s[MT][NN][4], dp[MT][NN][4];
            zero(s);
            zero(dp);
            mma_abt<DH, MT, NN>(s, qa, kt + lb);  /* S = Q K^T */
            mma_abt<DH, MT, NN>(dp, oa, vt + lb); /* dP = dO V^T */
            const bool edge = j0 + BN - 1 > wr0 || j0 + BN > T;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NN; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = ex2(fmaf(s[m][n][e], sl2, -L2[m][e >> 1]));
                        if (edge) {
                            const int key = j0 + 8 * n + 2 * t + (e & 1);
                            const int row = wr0 + 16 * m + g + 8 * (e >> 1);
                            if (key > row || key >= T) p = 0.0f;
                        }
                        s[m][n][e] = p * (dp[m][n][e] - D[m][e >> 1]); /* dS */
                    }
            mma_pb<DH, MT, BN / 16>(dqa, s, kt + la); /* dQ += dS K */
        }
        __syncthreads();
    }

#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = wr0 + 16 * m + g + 8 * hh;
            if (row >= T) continue;
            bf16 *r = dq + ((size_t)b * T + row) * qst + (size_t)h * DH + 2 * t;
#pragma unroll
            for (int nd = 0; nd < NDT; nd++)
                st2(r + 8 * nd, dqa[m][nd][2 * hh] * scale, dqa[m][nd][2 * hh + 1] * scale);
        }
}

/* ---- launches ---------------------------------------------------------------------------- */

template <int DH, int NW, int MT, int BN, bool QR = false>
void fwd_launch(dx_backend *be, void *o, void *lse, const void *q, const void *k, const void *v,
                int B, int T, int H, int Hkv, size_t kst)
{
    const char *op = "attention_fwd";
    constexpr int BM = 16 * MT * NW;
    const size_t smem = fwd_smem<DH, NW, MT, BN>();
    auto kern = att_fwd_tc<DH, NW, MT, BN, QR>;
    dxc_set_smem(be, (const void *)kern, smem, op);
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    dim3 grid((unsigned)(B * H), (unsigned)((T + BM - 1) / BM));
    kern<<<grid, NW * 32, smem, dxc(be)->stream>>>((bf16 *)o, (float *)lse, (const bf16 *)q,
                                                  (const bf16 *)k, (const bf16 *)v, T, H, Hkv, kst, sl2);
    DXC_LAUNCHED(be, op);
}

template <int DH, int NW, int MT, int BQ, bool DQ>
void dkdv_launch(dx_backend *be, void *dk, void *dv, float *dq_acc, const void *dout,
                 const void *q, const void *k, const void *v, const float *lse, const float *Dv,
                 int B, int T, int H, int Hkv, size_t kst)
{
    const char *op = "attention_bwd";
    constexpr int BK = 16 * MT * NW;
    const float scale = (float)(1.0 / sqrt((double)DH));
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    const size_t smem = dkdv_smem<DH, NW, MT, BQ, DQ>();
    auto kern = att_bwd_dkdv_tc<DH, NW, MT, BQ, DQ>;
    dxc_set_smem(be, (const void *)kern, smem, op);
    dim3 grid((unsigned)(B * Hkv), (unsigned)((T + BK - 1) / BK));
    kern<<<grid, NW * 32, smem, dxc(be)->stream>>>((bf16 *)dk, (bf16 *)dv, dq_acc,
                                                  (const bf16 *)dout, (const bf16 *)q,
                                                  (const bf16 *)k, (const bf16 *)v, lse, Dv, T, H,
                                                  Hkv, kst, sl2, scale);
    DXC_LAUNCHED(be, op);
}

template <int DH, int NW, int MT, int BN>
void dq_launch(dx_backend *be, void *dq, const void *dout, const void *q, const void *k,
               const void *v, const float *lse, const float *Dv, int B, int T, int H, int Hkv, size_t kst)
{
    const char *op = "attention_bwd";
    constexpr int BM = 16 * MT * NW;
    const float scale = (float)(1.0 / sqrt((double)DH));
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    const size_t smem = dq_smem<DH, NW, MT, BN>();
    auto kern = att_bwd_dq_tc<DH, NW, MT, BN>;
    dxc_set_smem(be, (const void *)kern, smem, op);
    dim3 grid((unsigned)(B * H), (unsigned)((T + BM - 1) / BM));
    kern<<<grid, NW * 32, smem, dxc(be)->stream>>>((bf16 *)dq, (const bf16 *)dout,
                                                  (const bf16 *)q, (const bf16 *)k,
                                                  (const bf16 *)v, lse, Dv, T, H, Hkv, kst, sl2, scale);
    DXC_LAUNCHED(be, op);
}

/* dq = bf16(acc * scale), 4 elements per thread (n % 4 == 0, 16-byte aligned acc) */
__global__ void att_dq_from_acc(bf16 *__restrict__ dq, const float *__restrict__ acc, size_t n4,
                                float scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = ((const float4 *)acc)[i];
        __nv_bfloat162 *d = (__nv_bfloat162 *)(dq + 4 * i);
        d[0] = __floats2bfloat162_rn(a.x * scale, a.y * scale);
        d[1] = __floats2bfloat162_rn(a.z * scale, a.w * scale);
    }
}

/* The backward in one of two forms:
 *   fused (default): dk, dv and dq in one kernel, dq accumulated in fp32 with vector atomics
 *     (5 tile products, FlashAttention-2's form); the order of the atomic additions varies
 *     from run to run, so dq is not bitwise reproducible;
 *   deterministic (DX_CUDA_DETERMINISTIC=1): the dk/dv kernel, then a dq kernel that
 *     recomputes S and dP (7 tile products, fixed summation order). */
template <int DH, int NW, int MT, int BQ, int BN>
void bwd_launch(dx_backend *be, void *dq, void *dk, void *dv, float *dq_acc, const void *dout,
                const void *q, const void *k, const void *v, const float *lse, const float *Dv,
                int B, int T, int H, int Hkv, size_t kst)
{
    if (dxc(be)->attn_det) {
        dkdv_launch<DH, NW, MT, BQ, false>(be, dk, dv, NULL, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst);
        dq_launch<DH, NW, MT, BN>(be, dq, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst);
        return;
    }
    const char *op = "attention_bwd";
    const size_t n = (size_t)B * T * H * DH;
    cudaStream_t st = dxc(be)->stream;
    DXC_CHECK(op, cudaMemsetAsync(dq_acc, 0, n * sizeof(float), st));
    dkdv_launch<DH, NW, MT, BQ, true>(be, dk, dv, dq_acc, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst);
    const size_t n4 = n / 4;
    size_t blocks = (n4 + 255) / 256;
    if (blocks > (size_t)dxc(be)->num_sms * 16) blocks = (size_t)dxc(be)->num_sms * 16;
    att_dq_from_acc<<<(unsigned)blocks, 256, 0, st>>>((bf16 *)dq, dq_acc, n4,
                                                       (float)(1.0 / sqrt((double)DH)));
    DXC_LAUNCHED(be, op);
}

} // namespace

/* Tile shapes per head dimension (warps per block, row tiles per warp MT, walked tile). Chosen by
 * timing every variant on an H100 (benchmarks/attention_bench.sh with VARIANTS, 2026-11-24,
 * benchmarks/NOTES.md item 12) at seq 350, 2048, 4096 and 8192:
 *   forward Dh 64:   4 warps, MT 2 (each B fragment used twice), 64 keys, the warp's Q fragments
 *                    kept in registers (0.542 ms at B 8 T 2048 H 32 against 0.568 re-reading them
 *                    from shared memory for every key tile);
 *   forward Dh 128:  4 warps, MT 2, 64 keys (1.016 ms at B 8 T 2048 H 32 against 1.489 with 8 warps
 *                    of MT 1: the K/V tile in shared memory serves twice the rows);
 *   backward Dh 128: 8 warps, MT 1, 64 queries per tile (3.55 ms against 3.86 with 32).
 * DX_CUDA_ATT_FWD and DX_CUDA_ATT_BWD = i select variant i of the lists below (0 = the default;
 * for tuning with benchmarks/attention_bench.sh VARIANTS=...; an unknown i is the default); every
 * variant passes test_cuda_kernels' attention checks (DX_CUDA_TEST_ONLY=attention):
 *   forward  Dh 64:  0 (4 warps, MT 2, 64 keys, Q in registers)  1 (8, 1, 128)  2 (4, 1, 128)
 *                    3 (4, 2, 64, Q from shared memory)  4 (8, 1, 64, Q in registers)
 *            Dh 128: 0 (4, 2, 64)  1 (4, 1, 64)  2 (8, 1, 64, Q in registers)  3 (4, 1, 128)
 *                    4 (8, 1, 32)  5 (8, 1, 64)  6 (4, 2, 32)  7 (8, 2, 32)
 *   backward Dh 128: 0 (8 warps, MT 1, 64 queries)  1 (4, 1, 32)  2 (8, 1, 32)  3 (4, 1, 64) */
void dxc_attention_fwd_mma(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                           const void *v, int ldkv, int B, int T, int H, int Hkv, int Dh)
{
    const size_t kst = (size_t)ldkv;
    const int var = dxc(be)->attn_fwd_var;
#define FWD(...) fwd_launch<__VA_ARGS__>(be, o, lse, q, k, v, B, T, H, Hkv, kst)
    switch (Dh) {
    case 32: FWD(32, 4, 2, 64); break;
    case 64:
        switch (var) {
        case 1: FWD(64, 8, 1, 128); break;
        case 2: FWD(64, 4, 1, 128); break;
        case 3: FWD(64, 4, 2, 64); break;
        case 4: FWD(64, 8, 1, 64, true); break;
        default: FWD(64, 4, 2, 64, true); break;
        }
        break;
    default:
        switch (var) {
        case 1: FWD(128, 4, 1, 64); break;
        case 2: FWD(128, 8, 1, 64, true); break;
        case 3: FWD(128, 4, 1, 128); break;
        case 4: FWD(128, 8, 1, 32); break;
        case 5: FWD(128, 8, 1, 64); break;
        case 6: FWD(128, 4, 2, 32); break;
        case 7: FWD(128, 8, 2, 32); break;
        default: FWD(128, 4, 2, 64); break;
        }
        break;
    }
#undef FWD
}

void dxc_attention_bwd_mma(dx_backend *be, void *dq, void *dk, void *dv, float *dq_acc,
                           const void *dout, const void *q, const void *k, const void *v,
                           const float *lse, const float *Dv, int ldkv, int B, int T, int H,
                           int Hkv, int Dh)
{
    const size_t kst = (size_t)ldkv;
#define BWD(...) bwd_launch<__VA_ARGS__>(be, dq, dk, dv, dq_acc, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst)
    switch (Dh) {
    case 32: BWD(32, 4, 2, 32, 32); break;
    case 64: BWD(64, 4, 2, 32, 32); break;
    default:
        switch (dxc(be)->attn_bwd_var) {
        case 1: BWD(128, 4, 1, 32, 32); break;
        case 2: BWD(128, 8, 1, 32, 32); break;
        case 3: BWD(128, 4, 1, 64, 64); break;
        default: BWD(128, 8, 1, 64, 64); break;
        }
        break;
    }
#undef BWD
}
