/* dissect CUDA backend: causal grouped-query attention on tensor cores (FlashAttention-2,
 * Dao 2023), with mma.sync.m16n8k16 bf16 -> fp32 (sm_80+ PTX, runs on Hopper); on Hopper the
 * forward and the backward at head dims 64 and 128 run on warpgroup MMAs instead (att_fwd_wg,
 * att_bwd_wg below: wgmma, TMA tile copies, mbarriers, warp specialisation, bulk reductions,
 * after FlashAttention-3, Shah et al. 2024).
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
#include "att_order.h"
#include "cuda_internal.cuh"
#include "wgmma.cuh"

#include <math.h>
#include <string.h>

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

template <int DH> __host__ __device__ constexpr int lds() { return DH + 8; } /* row stride (bf16) */

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

/* ---- forward: the online softmax of one score tile, and the output ----------------------- */

/* Scores of keys after the row (causal) or past T set to -inf. s[m][n][e] is the C fragment of
 * key tile columns j0 + 8n.., rows wr0 + 16m.. (layout in the header comment). */
template <int MT, int NN>
__device__ __forceinline__ void mask_tile(float (&s)[MT][NN][4], int j0, int wr0, int T, int g,
                                          int t)
{
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

/* Online softmax (FlashAttention-2) per row (m, hh) of a raw score tile: new running max,
 * s <- 2^(s sl2 - max sl2) (fp32 P), row sums rescaled and added; cs[m][hh] gets the factor
 * 2^((old max - new max) sl2) that the row's O accumulator must be multiplied by (rescale_o);
 * sl2 = log2(e)/sqrt(Dh). */
template <int MT, int NN>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NN][4], float (&mrow)[MT][2],
                                               float (&lrow)[MT][2], float (&cs)[MT][2], float sl2)
{
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
            cs[m][hh] = c;
        }
}

/* oacc rows (m, hh) *= cs[m][hh] */
template <int MT, int NDT>
__device__ __forceinline__ void rescale_o(float (&oacc)[MT][NDT][4], const float (&cs)[MT][2])
{
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int nd = 0; nd < NDT; nd++) {
            oacc[m][nd][0] *= cs[m][0];
            oacc[m][nd][1] *= cs[m][0];
            oacc[m][nd][2] *= cs[m][1];
            oacc[m][nd][3] *= cs[m][1];
        }
}

/* o rows wr0 + 16m + g (+8) of head h <- oacc / row sum (bf16), lse <- natural-log sum-exp */
template <int MT, int NDT>
__device__ __forceinline__ void store_o_lse(bf16 *__restrict__ o, float *__restrict__ lse,
                                            const float (&oacc)[MT][NDT][4],
                                            const float (&mrow)[MT][2], const float (&lrow)[MT][2],
                                            int wr0, int b, int h, int H, int T, size_t qst,
                                            float sl2, int g, int t)
{
    constexpr int DH = 8 * NDT;
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
               size_t qld, float sl2)
{
    constexpr int L = lds<DH>(), NT = NW * 32, BM = 16 * MT * NW, NDT = DH / 8, NN = BN / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Qs = (bf16 *)smem_raw, *Ks = Qs + BM * L, *Vs = Ks + 2 * BN * L; /* K, V: 2 stages */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x % H, b = blockIdx.x / H, kh = h / (H / Hkv);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BM; /* long (late) query tiles first */
    const size_t qst = (size_t)H * DH; /* o, dout (dq_acc); q, dq rows qld apart, k, v, dk, dv kst */
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
    const int la = lane_a_off<DH>(lane), lb = lane_b_off<DH>(lane);

    tile_async<DH, BM, NT>(Qs, q + (size_t)b * T * qld + (size_t)h * DH, qld, q0, T);
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
            if (j0 + BN - 1 > wr0 || j0 + BN > T) mask_tile<MT, NN>(s, j0, wr0, T, g, t);
            float cs[MT][2];
            online_softmax<MT, NN>(s, mrow, lrow, cs, sl2);
            rescale_o<MT, NDT>(oacc, cs);
            mma_pb<DH, MT, BN / 16>(oacc, s, vt + la); /* O += P V */
        }
        __syncthreads(); /* every warp is done with stage j & 1 before it is refilled */
    }

    store_o_lse<MT, NDT>(o, lse, oacc, mrow, lrow, wr0, b, h, H, T, qst, sl2, g, t);
}

/* ---- forward on Hopper: wgmma (sm_90a) ---------------------------------------------------- */

/* The forward with warpgroup MMAs (wgmma, PTX ISA "Asynchronous Warpgroup Level Matrix
 * Multiply-Accumulate"), structured as FlashAttention-3 (Shah et al. 2024; att_fwd_wg says how).
 * Each warp's 16 rows of a wgmma accumulator are laid out as mma.m16n8k16's C fragment, so
 * mask_tile, online_softmax, rescale_o and store_o_lse serve both forwards, and two accumulator
 * tiles of 8 columns are the register A fragment of the next product, as above.
 *
 * Shared memory tiles use the 128-byte swizzle of the wgmma operand descriptors: a tile of R rows
 * of DH bf16 is DH/64 column blocks of [R][64]; row r of a block is 128 bytes at r*128, its
 * 16-byte chunk c stored at chunk c ^ (r % 8); tiles start 1024-byte aligned. K-major
 * descriptors (Q, K): stride between 8-row groups 1024 bytes; the k-th 16 columns start 32k bytes
 * into a block. MN-major (V as B of P V, keys = k): 8-key groups 1024 bytes apart, column blocks
 * R*128 bytes apart (CUTLASS's GmmaDescriptor, cute/arch/mma_sm90_desc.hpp, for the encoding). */

template <int DH, int BN, int KS> constexpr size_t fwd_wg_smem()
{
    return 1024 + (size_t)(128 + 2 * KS * BN) * DH * sizeof(bf16) + 128; /* alignment slack, barriers */
}

/* A persistent grid (one block per SM) walks the work tiles (128 queries of one head and batch)
 * longest first: tile L = blockIdx.x, + gridDim.x, ... is query tile nqt - 1 - L / (B H) of
 * (b, h) = L % (B H); or (hm) head after head: tile L is query tile nqt - 1 - L % nqt of
 * (b, h) = L / nqt, the block's n-th tile a snake over the rounds of gridDim.x tiles
 * (att_order.h). Without a persistent grid (gridDim.x = the tiles) block L takes tile L.
 * Each block has 3 warpgroups (FlashAttention-3's warp specialisation):
 *   warpgroup 0, the producer (40 registers): copies each work tile's Q (once the consumers
 *     are done with the previous one: "empty_q"), then its K and V tiles of BN keys into KS
 *     stages each; a copy completes on the stage's "full" mbarrier, and a stage is refilled
 *     after its "empty" mbarrier says both consumers are done with it. The stages run on across
 *     work tiles, so the next tile's copies overlap this one's last products and the output
 *     stores. TMA: one thread issues TMA copies of 64-column boxes (tq, tk, tv: 3-D tensor maps
 *     over [B][T][heads x DH], so rows past T come in as zeros; the 128-byte swizzle of the
 *     boxes is the layout below). Otherwise (variant 13) all 128 threads issue 16-byte cp.async:
 *     at B 8 T 2048 Dh 128 that producer was 47% of the kernel's issued instructions and the
 *     consumers waited on "full" 20% of their time (Nsight Compute); TMA, 0.570 against 0.859
 *     ms (H200, benchmarks/NOTES.md item 20);
 *   warpgroups 1 and 2, the consumers (232 registers): query rows 64(w-1) .. +63 each. Per key
 *     tile j they issue S_j = Q K_j^T together with O += P_{j-1} V_{j-1}, then run the softmax of
 *     S_j while the P V product runs; the two consumers take turns issuing (named barriers
 *     1 and 2, "ping-pong"), so one's softmax overlaps the other's matrix products. */
template <int DH, int BN, bool TMA, int KS>
__global__ void __launch_bounds__(384, 1)
    att_fwd_wg(bf16 *__restrict__ o, float *__restrict__ lse, const bf16 *__restrict__ q,
               const bf16 *__restrict__ k, const bf16 *__restrict__ v, int B, int T, int H,
               int Hkv, size_t kst, size_t qld, float sl2, int hm,
               const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv)
{
#ifdef DXC_HAVE_WGMMA
    constexpr int BM = 128, NN = BN / 8, NDT = DH / 8;
    constexpr uint32_t QB = BM * DH * 2, KB = BN * DH * 2; /* tile bytes */
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t Qs = base, Ks = Qs + QB, Vs = Ks + KS * KB; /* K, V: KS stages each */
    /* mbarriers (8 bytes each): full_q, empty_q, full_k[KS], full_v[KS], empty_k[KS], empty_v[KS] */
    const uint32_t bars = Vs + KS * KB, full_q = bars, empty_q = bars + 8, full_k = bars + 16,
                   full_v = full_k + 8 * KS, empty_k = full_v + 8 * KS, empty_v = empty_k + 8 * KS;

    const int wg = threadIdx.x >> 7;
    const int nqt = (T + BM - 1) / BM, BH = B * H, ntiles = nqt * BH;
    const size_t qst = (size_t)H * DH; /* o; q rows qld apart */
    /* work tile L (the order above; hm: the query tiles of one head after another): query rows
     * q0 .. q0 + BM - 1 of head h, batch b, kv head kh, nkt key tiles of BN */
    struct work_tile { int q0, h, b, kh, nkt; };
    auto work = [&](int L) {
        int qt, bh;
        dx_att_fwd_work(L, nqt, BH, hm, &qt, &bh);
        const int q0 = qt * BM, h = bh % H, kend = q0 + BM < T ? q0 + BM : T;
        return work_tile{q0, h, bh / H, h / (H / Hkv), (kend + BN - 1) / BN};
    };
    /* the block's n-th work tile (att_order.h: a snake over the rounds where hm) */
    auto nth = [&](int n) { return dx_att_fwd_nth(n, (int)blockIdx.x, (int)gridDim.x, hm); };

    if (threadIdx.x == 0) {
        const int fills = TMA ? 1 : 128; /* the TMA thread's expect_tx, or every cp.async thread */
        mbar_init(full_q, fills);
        mbar_init(empty_q, 8); /* the consumers' 8 warps */
        for (int i = 0; i < KS; i++) {
            mbar_init(full_k + 8 * i, fills);
            mbar_init(full_v + 8 * i, fills);
            mbar_init(empty_k + 8 * i, 8);
            mbar_init(empty_v + 8 * i, 8);
        }
        if (TMA) fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0 && TMA) { /* producer: one thread issuing TMA copies */
        setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        int it = 0, n = 0; /* K/V tiles and work tiles copied so far */
        for (int L = nth(0); L < ntiles; L = nth(++n)) {
            const work_tile w = work(L);
            const int q0 = w.q0, h = w.h, b = w.b, kh = w.kh, nkt = w.nkt;
            if (n > 0) mbar_wait(empty_q, (n - 1) & 1);
            mbar_expect_tx(full_q, QB);
#pragma unroll
            for (int cb = 0; cb < DH / 64; cb++)
                tma_load_3d(Qs + cb * BM * 128, &tq, full_q, h * DH + cb * 64, q0, b);
            for (int j = 0; j < nkt; j++, it++) {
                const int st = it % KS, u = it / KS;
                if (it >= KS) mbar_wait(empty_k + 8 * st, (u - 1) & 1);
                mbar_expect_tx(full_k + 8 * st, KB);
#pragma unroll
                for (int cb = 0; cb < DH / 64; cb++)
                    tma_load_3d(Ks + st * KB + cb * BN * 128, &tk, full_k + 8 * st, kh * DH + cb * 64,
                                j * BN, b);
                if (it >= KS) mbar_wait(empty_v + 8 * st, (u - 1) & 1);
                mbar_expect_tx(full_v + 8 * st, KB);
#pragma unroll
                for (int cb = 0; cb < DH / 64; cb++)
                    tma_load_3d(Vs + st * KB + cb * BN * 128, &tv, full_v + 8 * st, kh * DH + cb * 64,
                                j * BN, b);
            }
        }
        return;
    }
    if (wg == 0) { /* producer: the warpgroup's 128 threads issuing cp.async */
        setmaxnreg_dec<40>();
        const int tid = threadIdx.x;
        int it = 0, n = 0; /* K/V tiles and work tiles copied so far */
        for (int L = nth(0); L < ntiles; L = nth(++n)) {
            const work_tile w = work(L);
            const int q0 = w.q0, h = w.h, b = w.b, kh = w.kh, nkt = w.nkt;
            const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
            const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
            if (n > 0) mbar_wait(empty_q, (n - 1) & 1);
            const bf16 *qb = q + (size_t)b * T * qld + (size_t)h * DH;
            tile_async_sw<DH, BM, 128>(Qs, qb, qld, q0, T, tid);
            cp_async_arrive(full_q);
            for (int j = 0; j < nkt; j++, it++) {
                const int st = it % KS, u = it / KS;
                if (it >= KS) mbar_wait(empty_k + 8 * st, (u - 1) & 1);
                tile_async_sw<DH, BN, 128>(Ks + st * KB, kb, kst, j * BN, T, tid);
                cp_async_arrive(full_k + 8 * st);
                if (it >= KS) mbar_wait(empty_v + 8 * st, (u - 1) & 1);
                tile_async_sw<DH, BN, 128>(Vs + st * KB, vb, kst, j * BN, T, tid);
                cp_async_arrive(full_v + 8 * st);
            }
        }
        cp_wait<0>(); /* nothing in flight at exit */
        return;
    }

    /* consumers */
    setmaxnreg_inc<232>();
    const int c = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    float s[1][NN][4];
    float(&sf)[NN * 4] = reinterpret_cast<float(&)[NN * 4]>(s);
    float oacc[1][NDT][4];
    float(&of)[NDT * 4] = reinterpret_cast<float(&)[NDT * 4]>(oacc);
    uint32_t pa[BN / 16][4];
    const uint32_t qa = Qs + c * 64 * 128;

    /* S = Q K^T for the K tile in stage st, issued (K-major descriptors over DH/16 k-steps) */
    auto issue_s = [&](int st) {
        const uint32_t kt = Ks + st * KB;
#pragma unroll
        for (int ks = 0; ks < DH / 16; ks++)
            wgmma_ss(sf, wg_desc(qa + (ks >> 2) * BM * 128 + (ks & 3) * 32, 16),
                     wg_desc(kt + (ks >> 2) * BN * 128 + (ks & 3) * 32, 16), ks > 0);
        wg_commit();
    };
    /* O += P V for the V tile in stage st, issued (V read transposed: MN-major, column blocks
     * BN*128 bytes apart) */
    auto issue_pv = [&](int st) {
        const uint32_t vt = Vs + st * KB;
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            wgmma_rs_tb(of, pa[kk], wg_desc(vt + kk * 16 * 128, BN * 128));
        wg_commit();
    };
    auto to_pa = [&]() {
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            pa[kk][0] = pack2(s[0][2 * kk][0], s[0][2 * kk][1]);
            pa[kk][1] = pack2(s[0][2 * kk][2], s[0][2 * kk][3]);
            pa[kk][2] = pack2(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
            pa[kk][3] = pack2(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
        }
    };

    auto stg = [](int x) { return x % KS; };        /* the stage of K/V tile x */
    auto par = [](int x) { return (x / KS) & 1; }; /* its fill's phase parity */
    if (c == 1) bar_arrive(1, 256); /* consumer 0 issues first */
    int it = 0, n = 0; /* K/V tiles and work tiles consumed so far */
    for (int L = nth(0); L < ntiles; L = nth(++n)) {
        const work_tile w = work(L);
        const int q0 = w.q0, h = w.h, b = w.b, nkt = w.nkt;
        const int wr0 = q0 + 64 * c + 16 * warp; /* this warp's first row */
        /* consumer 1 leaves out its very last turn-passing arrival, so that every bar.sync
         * of both named barriers is matched */
        const bool last_work = nth(n + 1) >= ntiles;
        float mrow[1][2] = {{-INFINITY, -INFINITY}}, lrow[1][2] = {{0.0f, 0.0f}}, cs[1][2];
        zero(oacc);
        /* once S_j (K/V tile `itj`) has landed: release K (and Q after the last), mask, softmax */
        auto softmax_s = [&](int j, int itj) {
            reg_fence(sf);
            if (lane == 0) {
                mbar_arrive(empty_k + 8 * stg(itj));
                if (j == nkt - 1) mbar_arrive(empty_q);
            }
            const int j0 = j * BN;
            if (j0 + BN - 1 > wr0 || j0 + BN > T) mask_tile<1, NN>(s, j0, wr0, T, g, t);
            online_softmax<1, NN>(s, mrow, lrow, cs, sl2);
        };

        mbar_wait(full_q, n & 1);
        { /* key tile 0: S_0 alone */
            mbar_wait(full_k + 8 * stg(it), par(it));
            if (!TMA) fence_proxy_async(); /* cp.async wrote through the generic proxy */
            bar_sync(1 + c, 256); /* this consumer's turn to issue */
            wg_fence();
            issue_s(stg(it));
            if (!(c == 1 && last_work && nkt == 1)) bar_arrive(2 - c, 256); /* the other's turn */
            wg_wait<0>();
            softmax_s(0, it);
            to_pa();
        }
        for (int j = 1; j < nkt; j++) {
            const int itj = it + j;
            mbar_wait(full_k + 8 * stg(itj), par(itj));
            mbar_wait(full_v + 8 * stg(itj - 1), par(itj - 1));
            if (!TMA) fence_proxy_async();
            bar_sync(1 + c, 256);
            reg_fence(of);
            wg_fence();
            issue_s(stg(itj));
            issue_pv(stg(itj - 1));
            if (!(c == 1 && last_work && j == nkt - 1)) bar_arrive(2 - c, 256);
            wg_wait<1>(); /* S_j has landed; P_{j-1} V_{j-1} may still run */
            softmax_s(j, itj);
            wg_wait<0>();
            reg_fence(of);
            if (lane == 0) mbar_arrive(empty_v + 8 * stg(itj - 1));
            rescale_o<1, NDT>(oacc, cs);
            to_pa();
        }
        { /* the last key tile's P V */
            const int itj = it + nkt - 1;
            mbar_wait(full_v + 8 * stg(itj), par(itj));
            if (!TMA) fence_proxy_async();
            reg_fence(of);
            wg_fence();
            issue_pv(stg(itj));
            wg_wait<0>();
            reg_fence(of);
            if (lane == 0) mbar_arrive(empty_v + 8 * stg(itj));
        }
        it += nkt;
        store_o_lse<1, NDT>(o, lse, oacc, mrow, lrow, wr0, b, h, H, T, qst, sl2, g, t);
    }
#else
    __trap(); /* dispatched only on sm_90 (dxc_impl.wgmma) */
#endif
}

/* ---- backward: shared pieces ------------------------------------------------------------ */

/* P^T and dS^T of a transposed score tile: st[m][n][e] = S^T (raw K Q^T) and dp[m][n][e] = dP^T
 * (V dO^T) of keys wk0 + 16m + g (+8) and queries i0 + 8n + 2t (+1) (the C fragment layout);
 * lt, dt = lse and D of queries i0 .. i0 + 8 NN - 1. Afterwards st = P^T = exp(S^T / sqrt(Dh)
 * - lse) and dp = dS^T = P^T (dP^T - D) (FlashAttention-2's backward, Dao 2023, Algorithm 2),
 * both 0 where the query is before the key or either is past T. */
template <int MT, int NN>
__device__ __forceinline__ void bwd_p_ds(float (&st)[MT][NN][4], float (&dp)[MT][NN][4],
                                         const float *lt, const float *dt, int i0, int wk0, int T,
                                         float sl2, int g, int t)
{
    const bool edge = i0 < wk0 + 16 * MT - 1 || i0 + 8 * NN > T || wk0 + 16 * MT > T;
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
                    const int qi = i0 + col + (e & 1), key = wk0 + 16 * m + g + 8 * (e >> 1);
                    if (qi < key || qi >= T || key >= T) p = 0.0f;
                }
                st[m][n][e] = p;
                dp[m][n][e] = p * (dp[m][n][e] - ((e & 1) ? d2.y : d2.x));
            }
    }
}

/* dk <- dka * scale, dv <- dva (bf16) for keys wk0 + 16m + g (+8) of kv head kh, batch b (rows
 * kst elements apart); dka, dva in the C fragment layout over DH = 8 NDT columns. rtab (not
 * NULL: dxc_rope_table's cos / sin, sin at sin_off): dk also rotated back by RoPE of its key's
 * position (rope_bwd); the thread holds both columns of each rotated pair. */
template <int MT, int NDT>
__device__ __forceinline__ void store_dk_dv(bf16 *__restrict__ dk, bf16 *__restrict__ dv,
                                            const float (&dka)[MT][NDT][4],
                                            const float (&dva)[MT][NDT][4], int wk0, int b, int kh,
                                            int T, size_t kst, float scale, int t, int g,
                                            const float *__restrict__ rtab = nullptr,
                                            size_t sin_off = 0)
{
    constexpr int HALF = 4 * NDT; /* Dh / 2: column 8 nd + c pairs with 8 (nd + NDT/2) + c */
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int key = wk0 + 16 * m + g + 8 * hh;
            if (key >= T) continue;
            const size_t off = ((size_t)b * T + key) * kst + (size_t)kh * 8 * NDT + 2 * t;
#pragma unroll
            for (int nd = 0; nd < NDT; nd++)
                st2(dv + off + 8 * nd, dva[m][nd][2 * hh], dva[m][nd][2 * hh + 1]);
            if (!rtab) {
#pragma unroll
                for (int nd = 0; nd < NDT; nd++)
                    st2(dk + off + 8 * nd, dka[m][nd][2 * hh] * scale,
                        dka[m][nd][2 * hh + 1] * scale);
                continue;
            }
            /* RoPE's backward (kernels.h rope_bwd, the inverse rotation of position key):
             * x[i] = a cos + b sin, x[i + Dh/2] = b cos - a sin for a = dk[i], b = dk[i + Dh/2] */
            const float *cr = rtab + (size_t)key * HALF, *sr = cr + sin_off;
#pragma unroll
            for (int nd = 0; nd < NDT / 2; nd++) {
                const int i = 8 * nd + 2 * t;
                const float2 c = __ldg(reinterpret_cast<const float2 *>(cr + i));
                const float2 sn = __ldg(reinterpret_cast<const float2 *>(sr + i));
                const float a0 = dka[m][nd][2 * hh] * scale, a1 = dka[m][nd][2 * hh + 1] * scale;
                const float b0 = dka[m][nd + NDT / 2][2 * hh] * scale,
                            b1 = dka[m][nd + NDT / 2][2 * hh + 1] * scale;
                st2(dk + off + 8 * nd, a0 * c.x + b0 * sn.x, a1 * c.y + b1 * sn.y);
                st2(dk + off + 8 * (nd + NDT / 2), b0 * c.x - a0 * sn.x, b1 * c.y - a1 * sn.y);
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
                    int Hkv, size_t kst, size_t qld, float sl2, float scale)
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
    const size_t qst = (size_t)H * DH; /* o, dout (dq_acc); q, dq rows qld apart, k, v, dk, dv kst */
    const int la = lane_a_off<DH>(lane), lb = lane_b_off<DH>(lane);

    /* iteration it: query head kh * G + it / nq, query tile c0 + (it % nq) * BQ (queries
     * before c0 see none of these keys) */
    const int nq = (T - c0 + BQ - 1) / BQ, niter = G * nq;
    auto load = [&](int it, int s) {
        const int h = kh * G + it / nq, i0 = c0 + (it % nq) * BQ;
        tile_async<DH, BQ, NT>(Qs + s * BQ * L, q + (size_t)b * T * qld + (size_t)h * DH, qld, i0,
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
            bwd_p_ds<MT, NN>(st, dp, lt, dt, i0, wk0, T, sl2, g, t);
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

    store_dk_dv<MT, NDT>(dk, dv, dka, dva, wk0, b, kh, T, kst, scale, t, g);
}

/* ---- backward on Hopper: dk, dv and dq on warpgroup MMAs --------------------------------- */

/* att_bwd_wg's dq accumulator: per (b, h, 64-query tile) DH/64 pieces of 64 x 64 fp32, each
 * contiguous, element (r, col) of a piece at r * 64 + 4 ((col / 4) ^ (r % 8)) + col % 4 (16-byte
 * chunks swizzled, for conflict-free shared-memory stores); queries past T padded */
__host__ __device__ constexpr size_t dq_tiled_off(int r, int col)
{
    return (size_t)r * 64 + 4 * ((col / 4) ^ (r % 8)) + col % 4;
}

template <int DH, int BQ = 64> constexpr size_t bwd_wg_smem()
{
    /* alignment slack; K, V (128 keys); Q, dO (2 stages of BQ queries); dS^T (2 x 128 x BQ);
     * lse, D (2 stages of BQ); dq tiles (2 consumers x 64 x 64 fp32); mbarriers */
    return 1024 + (size_t)(2 * 128 * DH + 4 * BQ * DH + 2 * 128 * BQ) * sizeof(bf16) +
           4 * BQ * sizeof(float) + 2 * 64 * 64 * sizeof(float) + 192 +
           (DH == 64 && BQ == 64 ? 2 * (64 * 64 + 2 * 64 * 32) * sizeof(float) : 0); /* (Dh 64) 2
                                                                converters' tiles, cos and sin rows */
}

#ifdef DXC_HAVE_WGMMA /* (used by att_bwd_wg only) */
__device__ __forceinline__ int ld_acquire_gpu(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
#endif

/* RoPE's backward on 4 + 4 columns of one dq row (row: its (t, h) slice; columns d .. d+3 and
 * e = d + Dh/2 ..; a, bb: the fp32 accumulator there, c, sn: cos and sin of position t):
 *   row[d + j] = bf16(a_j s cos_j + b_j s sin_j),  row[e + j] = bf16(b_j s cos_j - a_j s sin_j)
 * (s = scale; kernels.h rope_bwd's math), as both the separate pass and the in-kernel
 * conversion write it */
__device__ __forceinline__ void dq_store_rope4(bf16 *row, int d, int e, float4 a, float4 bb, float4 c,
                                               float4 sn, float scale)
{
    const float a0 = a.x * scale, a1 = a.y * scale, a2 = a.z * scale, a3 = a.w * scale;
    const float b0 = bb.x * scale, b1 = bb.y * scale, b2 = bb.z * scale, b3 = bb.w * scale;
    __nv_bfloat162 *o = (__nv_bfloat162 *)(row + d), *p = (__nv_bfloat162 *)(row + e);
    o[0] = __floats2bfloat162_rn(a0 * c.x + b0 * sn.x, a1 * c.y + b1 * sn.y);
    o[1] = __floats2bfloat162_rn(a2 * c.z + b2 * sn.z, a3 * c.w + b3 * sn.w);
    p[0] = __floats2bfloat162_rn(b0 * c.x - a0 * sn.x, b1 * c.y - a1 * sn.y);
    p[1] = __floats2bfloat162_rn(b2 * c.z - a2 * sn.z, b3 * c.w - a3 * sn.w);
}

/* the dq tile of (b, h, query tile i0 / 64) converted by one warp from its copy in shared memory
 * (stage: att_bwd_wg's accumulator tile, DH / 64 pieces, dq_tiled_off): dq[b, t, h, :] =
 * bf16(acc * scale) for the tile's rows t < T, with RoPE's backward (att_dq_from_tiles_rope's
 * math) where rope is set (cs: the rows i0 .. of dxc_rope_table's cos table, DH / 2 floats each,
 * then 64 rows later those of its sin table, in shared memory too); then the tile's 128-byte lines in global memory (acc_tile) are
 * dropped from L2 unwritten (discard.global.L2: nothing reads them before the next call's first
 * contributions overwrite them), so that the fp32 tile never goes back to DRAM. */
template <int DH>
__device__ __forceinline__ void dq_tile_convert(bf16 *__restrict__ dq, const float *stage,
                                                const float *cs, const float *acc_tile, int b, int h,
                                                int i0, int T, int H, float scale, bool rope,
                                                size_t qld, int lane)
{
    constexpr int HALF = DH / 2;
    const int rows = T - i0 < 64 ? T - i0 : 64;
    auto ld = [&](int r, int col) {
        return *(const float4 *)(stage + (size_t)(col / 64) * 4096 + dq_tiled_off(r, col % 64));
    };
    if (rope) {
        constexpr int Q = HALF / 4; /* items per row: columns d .. d+3 and d+HALF .. +3 */
#pragma unroll 1
        for (int i = lane; i < rows * Q; i += 32) {
            const int r = i / Q, d = (i % Q) * 4, e = d + HALF, t = i0 + r;
            const float4 a = ld(r, d), bb = ld(r, e);
            const float4 c = *(const float4 *)(cs + r * HALF + d);
            const float4 sn = *(const float4 *)(cs + (64 + r) * HALF + d);
            dq_store_rope4(dq + ((size_t)b * T + t) * qld + (size_t)h * DH, d, e, a, bb, c, sn, scale);
        }
    } else {
        constexpr int Q = DH / 4;
#pragma unroll 1
        for (int i = lane; i < rows * Q; i += 32) {
            const int r = i / Q, d = (i % Q) * 4;
            const float4 a = ld(r, d);
            __nv_bfloat162 *o =
                (__nv_bfloat162 *)(dq + ((size_t)b * T + i0 + r) * qld + (size_t)h * DH + d);
            o[0] = __floats2bfloat162_rn(a.x * scale, a.y * scale);
            o[1] = __floats2bfloat162_rn(a.z * scale, a.w * scale);
        }
    }
    /* safe only because every piece is written whole before its next read: by its first
     * contribution's copy (mode bit 4) or after the memset (bit 3 alone) */
    for (int l = lane; l < 64 * DH * 4 / 128; l += 32)
        asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(acc_tile + 32 * l) : "memory");
}

/* The backward of att_bwd_dkdv_tc<DH, .., DQ = true> (same contract, FlashAttention-2's
 * 5-product form) with FlashAttention-3's warp specialisation (Shah et al. 2024). One block per
 * (128-key tile at c0, kv head kh, batch b), 3 warpgroups:
 *   warpgroup 0, the producer (40 registers): copies the block's K and V once, then for every
 *     (query head of the group, 64-query tile from c0) in ascending order Q, dO, lse and D into
 *     two stages ("full" / "empty" mbarriers as in att_fwd_wg); every tile is stored 128-byte
 *     swizzled, [DH/64][rows][64]. TMA: warp 0's lane 0 copies K, V, Q and dO with TMA (3-D
 *     tensor maps as att_fwd_wg's; "full" expects their bytes) and its 32 lanes lse and D with
 *     4-byte cp.async (rows of T floats need not be 16-byte aligned), 33 arrivals per stage;
 *     otherwise (variant 13) the warpgroup's 128 threads copy everything with cp.async;
 *   warpgroups 1 and 2 (232 registers): keys c0 + 64(w-1) .. +63 each. Per query tile:
 *     S^T = K Q^T and dP^T = V dO^T (shared-memory operands, K-major), P^T and dS^T in
 *     registers (bwd_p_ds), then dV += P^T dO and dK += dS^T Q with P^T, dS^T as register
 *     operands and dO, Q read transposed (MN-major), while dS^T also goes to shared memory
 *     (bf16, swizzled [128 keys][64 queries], two buffers). After a named barrier over both
 *     warpgroups, dq = dS K over the 128 keys (A = dS^T and B = K both read transposed): at
 *     Dh 128 warpgroup w takes columns 64(w-1) .. +63, at Dh 64 the warpgroups take turns
 *     (query tile it: warpgroup 1 + it % 2). The 64 x 64 fp32 tile goes to shared memory and
 *     from there into its piece of dq_acc (tiled: dq_tiled_off) in one bulk asynchronous
 *     reduction (cp.reduce.async.bulk .add.f32; 2.18 against 2.42 ms with per-thread
 *     red.global at B 8 T 2048 H 32 Dh 128, NOTES item 14).
 * BQT = 128 (Dh 64 with TMA, the default since 2026-11-28; NOTES item 34): 128-query
 *   tiles, so S^T and dP^T are 64 x 128 products per warpgroup (m64n128k16), dS^T is [128 keys]
 *   [2 x 64 queries], and both warpgroups issue dq every tile, warpgroup w for queries
 *   64(w-1) .. +63 of it (FlashAttention-3's Hopper backward at head dim 64 has 128 x 128 tiles
 *   and splits dQ between its two consumers by query rows likewise): each tile's dq products
 *   are balanced between the consumers instead of falling to one in turn (NOTES item 34).
 * A warpgroup whose 64 keys all come after the query tile (or lie past T) issues no products
 * for it and writes zero dS^T rows (mode bit 1, variant 11, computes them: NOTES item 18).
 * dk and dv are deterministic (ascending order); the order of dq's additions is not. rtab (not
 * NULL): dk comes out with RoPE's backward applied (store_dk_dv), and so does dq. mode bit 0: the
 * grid is (key tiles, B Hkv); bit 2 (only without bit 0): the blocks in launch order run in
 * chunks of mode >> 8 (b, kv head) pairs (bwd_wg_chunk).
 * mode bits 3 and 4 (TMA only): the consumers only write their dq tiles into shared memory
 * (dq_full / dq_empty mbarriers) and warp 1 of the producer warpgroup, otherwise idle, issues
 * the bulk operations in their order and frees each buffer once it has been read.
 * Bit 4: the accumulator is not zeroed first; per 64 x 64 piece the contribution that claims it
 * first (an atomic count) is copied (cp.async.bulk), then sets the piece's flag once complete,
 * and the others wait for that flag before their reductions (the claimer is running and waits
 * on nothing after its claim, so every wait ends; a flag set by a fixed block, e.g. the
 * diagonal one, could deadlock, as that block need not be resident).
 * Bit 3 (Dh 64): dq is converted here, not by a separate pass over the accumulator: once an
 * operation has completed warp 1 adds one to dq_cnt[tile] (b, h, 64 queries); a tile has
 * DH / 64 x (qi / 2 + 1) contributions (64-query tile qi: one per piece and key tile at or
 * before it), and the one that completes it hands the tile to warp 2 or 3 (cv_* mbarriers),
 * which copies it from L2 into shared memory in one bulk copy, converts it (dq_tile_convert:
 * RoPE's backward folded in) and drops its lines from L2 unwritten. The atomics and the
 * conversions stay off the consumers' path; in the head-major order the longest key tile's
 * block completes most of its pair's tiles, about one per query tile it walks.
 * Together the accumulator need not cross DRAM: the separate pass read it, the memset wrote it,
 * the first reductions read it back and L2 wrote the sums back (~4 x 134 MB per call at B 8 T
 * 2048 H 32 Dh 64; NOTES item 23). But the converter warps of the block that completes most
 * tiles fall behind and stall it (7-44% slower at Dh 64, NOTES item 24), so bit 3 is only
 * variants 16 and 17. dkdv_wg_launch zeroes dq_cnt (dxc_dq_cnt_ints) before each launch, and the
 * accumulator too unless bit 4 is set. */
template <int DH, bool TMA, int BQT>
__global__ void __launch_bounds__(384, 1)
    att_bwd_wg(bf16 *__restrict__ dk, bf16 *__restrict__ dv, float *__restrict__ dq_acc,
               bf16 *__restrict__ dq, int *__restrict__ dq_cnt, const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
               const bf16 *__restrict__ k, const bf16 *__restrict__ v,
               const float *__restrict__ lse, const float *__restrict__ Dv, int T, int H, int Hkv,
               size_t kst, size_t qld, float sl2, float scale, int mode, const float *__restrict__ rtab,
               size_t sin_off, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdo)
{
#ifdef DXC_HAVE_WGMMA
    /* BQ: queries per tile, 64, or 128 (Dh 64 with TMA only: both consumers issue dq for their
     * own 64 queries of every tile, as FlashAttention-3's Hopper backward at head dim 64 does
     * with its 128 x 128 tiles, NOTES item 34) */
    constexpr int BK = 128, BQ = BQT, NN = BQ / 8, NDT = DH / 8;
    static_assert(BQ == 64 || (BQ == 128 && DH == 64 && TMA), "128-query tiles: Dh 64 with TMA");
    constexpr bool Q2 = BQ == 128; /* dq: each consumer its 64 queries of every tile */
    /* issuer: producer warp 1 issues the dq bulk operations (bits 3, 4); conv (Dh 64): its
     * warps 2 and 3 convert completed tiles; first_store: a piece's first contribution copied */
    const bool key_x = mode & 1, skip_dead = !(mode & 2), issuer = TMA && (mode & 24),
               conv = TMA && DH == 64 && !Q2 && (mode & 8), first_store = TMA && (mode & 16);
    constexpr uint32_t KB = BK * DH * 2, QB = BQ * DH * 2, SB = BK * BQ * 2; /* tile bytes */
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t Ks = base, Vs = Ks + KB, Qs = Vs + KB, Os = Qs + 2 * QB, Ss = Os + 2 * QB;
    const uint32_t Lv = Ss + 2 * SB; /* float lse[2][BQ], D[2][BQ] */
    const float *Lg = (const float *)((const char *)smem_raw + (Lv - raw));
    const uint32_t Dq = Lv + 4 * BQ * 4; /* float [2][64 * 64] (dq_tiled_off) */
    /* mbarriers: full_kv, full[2], empty[2]; (conv) per consumer its dq tile written (dq_full)
     * and read by the bulk operation (dq_empty) */
    const uint32_t bars = Dq + 2 * 64 * 64 * 4, full_kv = bars, full = bars + 8, empty = bars + 24;
    const uint32_t dq_full = bars + 40, dq_empty = bars + 56;
    /* (conv) per converter warp: a tile to convert (cv_full, cv_slot), its slot free again
     * (cv_empty), its copy in shared memory (cv_ld, at Stg + 16 KB x the warp) */
    const uint32_t cv_full = bars + 72, cv_empty = bars + 88, cv_ld = bars + 104, cv_slot = bars + 120;
    const uint32_t Stg = bars + 192;

    const int wg = threadIdx.x >> 7;
    /* grid (B Hkv, key tiles), long (early) key tiles first; key_x: (key tiles, B Hkv); mode
     * bit 2 (grid (B Hkv, key tiles)): in launch order, chunks of C = mode >> 8 (b, kv head)
     * pairs one after another, a chunk's key tiles longest first (bwd_wg_chunk) */
    int bk = key_x ? blockIdx.y : blockIdx.x, c0 = (key_x ? blockIdx.x : blockIdx.y) * BK;
    if (mode & 4) {
        int kt;
        dx_att_chunk_map(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, mode >> 8, &bk, &kt);
        c0 = kt * BK;
    }
    const int kh = bk % Hkv, b = bk / Hkv, G = H / Hkv;
    const size_t qst = (size_t)H * DH; /* dout; q rows qld apart */
    /* iteration it: query head h = kh * G + it / nq, query tile qi = it % nq, its queries from
     * c0 + qi * BQ (queries before c0 see none of these keys). The loops count h and qi rather
     * than divide: a signed division by nq at the head of every consumer iteration was ~10% of
     * the consumers' stall samples (2.9% of the backward at B 8 T 2048 Dh 64, NOTES item 33) */
    const int nq = (T - c0 + BQ - 1) / BQ, niter = G * nq;
    const int nt64 = (T + 63) / 64;
    /* (conv) dq_cnt: per tile (b, h, 64 queries) its completed additions, then per piece
     * (64 x 64 of a tile) a claim count and a flag "first contribution written" (first_store) */
    const size_t ntile = (size_t)(key_x ? gridDim.y : gridDim.x) * G * nt64;
    int *const dq_claim = dq_cnt + ntile, *const dq_written = dq_claim + ntile * (DH / 64);

    if (threadIdx.x == 0) {
        /* TMA: K, V by thread 0's expect_tx; a stage by its expect_tx and warp 0's cp.async of
         * lse and D (noinc arrivals) */
        mbar_init(full_kv, TMA ? 1 : 128);
        for (int i = 0; i < 2; i++) {
            mbar_init(full + 8 * i, TMA ? 33 : 128);
            mbar_init(empty + 8 * i, 8); /* the consumers' 8 warps */
            mbar_init(dq_full + 8 * i, 1);
            mbar_init(dq_empty + 8 * i, 1);
            mbar_init(cv_full + 8 * i, 1);
            mbar_init(cv_empty + 8 * i, 1);
            mbar_init(cv_ld + 8 * i, 1);
        }
        if (TMA) fence_mbar_init();
    }
    __syncthreads();

    /* row r of query tile i0's lse and D (head h) into stage st, zero past T (4-byte cp.async:
     * rows of T floats need not be 16-byte aligned) */
    auto copy_lse_d = [&](int st, int h, int i0, int r) {
        const int gr = i0 + r;
        const bool in = gr < T;
        const size_t ro = ((size_t)b * H + h) * T + (in ? gr : 0);
        cp_async4(Lv + 4 * (st * BQ + r), lse + ro, in);
        cp_async4(Lv + 4 * ((2 + st) * BQ + r), Dv + ro, in);
    };

    if (wg == 0 && TMA) { /* producer: warp 0, lane 0 issuing TMA copies, its lanes lse and D */
        setmaxnreg_dec<40>();
        const int tid = threadIdx.x;
        if (tid >= 32) {
            const int lane = tid & 31;
            if (issuer && tid < 64) { /* warp 1: dq's bulk operations (lane 0) and their counts */
                int npush = 0;
                /* the bulk operation issued last and not yet counted: its tile */
                bool pend = false;
                size_t pend_ti = 0;
                /* tile ti (query tile i0 of its head) to converter warp npush % 2 */
                auto push = [&](uint32_t v) {
                    const int w = npush & 1;
                    if (npush >= 2) mbar_wait(cv_empty + 8 * w, ((npush >> 1) - 1) & 1);
                    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(cv_slot + 4 * w), "r"(v) : "memory");
                    mbar_arrive(cv_full + 8 * w);
                    npush++;
                };
                /* (conv, lane 0) one completed contribution to tile ti; the one that completes
                 * it (DH / 64 pieces x key tiles 0 .. qi / 2) hands the tile to a converter */
                auto count = [&](size_t ti) {
                    __threadfence(); /* the contribution (visible to this thread), then the count */
                    const int qi = (int)(ti % nt64);
                    if (atomicAdd(dq_cnt + ti, 1) == (DH / 64) * (qi / 2 + 1) - 1) {
                        __threadfence(); /* every contributor's, before the converter's copy */
                        push((uint32_t)ti);
                    }
                };
                if (lane == 0) {
                    int used0 = 0, used1 = 0; /* per consumer its dq tiles so far (registers) */
                    for (int it = 0, qi = 0, h = kh * G; it < niter;
                         it++, qi = qi + 1 == nq ? 0 : qi + 1, h += qi == 0) {
                        const int i0 = c0 + qi * BQ;
                        const size_t ti = ((size_t)b * H + h) * nt64 + i0 / 64;
#pragma unroll
                        for (int pc = 0; pc < (Q2 ? 2 : DH / 64); pc++) {
                            /* the consumer of this piece: Dh 128 one per 64 columns, Dh 64 the
                             * tile's (it % 2), or (Q2) one per 64 queries */
                            const int cc = DH == 128 || Q2 ? pc : (it & 1);
                            if (Q2 && i0 + 64 * pc >= T) continue; /* no queries there: no piece */
                            const size_t pi = Q2 ? ti + pc : ti * (DH / 64) + pc; /* the piece */
                            /* consumer cc's tile number: one per iteration (Dh 128), one every
                             * other (Dh 64), or (Q2) counted, as a half past T has none */
                            const int use = Q2 ? (cc ? used1++ : used0++) : DH == 128 ? it : it >> 1;
                            mbar_wait(dq_full + 8 * cc, use & 1);
                            float *dst = dq_acc + pi * 4096;
                            const uint32_t src = Dq + cc * 64 * 64 * 4;
                            bool stored = false;
                            if (first_store && atomicAdd(dq_claim + pi, 1) == 0) {
                                /* the piece's first contribution: a plain copy (the
                                 * accumulator is not zeroed first) */
                                bulk_copy_s2g(dst, src, 64 * 64 * 4);
                                stored = true;
                            } else {
                                if (first_store) { /* once the first contribution is written */
                                    while (ld_acquire_gpu(dq_written + pi) == 0) __nanosleep(64);
                                    asm volatile("fence.proxy.async.global;\n" ::: "memory");
                                }
                                bulk_red_add_f32(dst, src, 64 * 64 * 4);
                            }
                            bulk_commit();
                            bulk_wait_read<0>();
                            mbar_arrive(dq_empty + 8 * cc); /* the consumer may refill it */
                            if (stored) {
                                bulk_wait<false>(); /* written (and the previous one complete) */
                                asm volatile("fence.proxy.async.global;\n" ::: "memory");
                                st_release_gpu(dq_written + pi, 1);
                            } else if (conv && pend) {
                                bulk_wait_n<1>(); /* the previous one complete */
                                asm volatile("fence.proxy.async.global;\n" ::: "memory");
                            }
                            if (conv) {
                                if (pend) count(pend_ti);
                                if (stored) count(ti);
                                pend = !stored;
                                pend_ti = ti;
                            }
                        }
                    }
                    bulk_wait<false>(); /* every operation complete before the block exits */
                    if (conv) {
                        asm volatile("fence.proxy.async.global;\n" ::: "memory");
                        if (pend) count(pend_ti);
                        push(~0u); /* both converters: no more tiles */
                        push(~0u);
                    }
                }
            } else if (conv && tid >= 64) { /* warps 2 and 3: convert the tiles warp 1 hands them */
                /* its staging: the tile (16 KB), then cos and sin rows (8 KB each) */
                const int w = (tid >> 5) - 2;
                constexpr uint32_t TB = 64 * DH * 4, RB = 64 * (DH / 2) * 4;
                const uint32_t stg = Stg + w * (TB + 2 * RB);
                const float *stg_g = (const float *)((const char *)smem_raw + (stg - raw));
                for (int n = 0;; n++) {
                    mbar_wait(cv_full + 8 * w, n & 1);
                    uint32_t v;
                    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(cv_slot + 4 * w) : "memory");
                    if (v == ~0u) break;
                    const size_t ti = v;
                    const int qi = (int)(ti % nt64), h = (int)(ti / nt64 % H);
                    const float *acc_tile = dq_acc + ti * 64 * DH;
                    /* the tile from L2 into shared memory in one bulk copy, and RoPE's cos and
                     * sin rows of its queries (each row DH / 2 floats: 16-byte aligned) */
                    const int rows = T - qi * 64 < 64 ? T - qi * 64 : 64;
                    const uint32_t rb = rtab ? (uint32_t)rows * (DH / 2) * 4 : 0;
                    if (lane == 0) {
                        asm volatile("fence.proxy.async.global;\n" ::: "memory");
                        mbar_expect_tx(cv_ld + 8 * w, TB + 2 * rb);
                        bulk_load_g2s(stg, acc_tile, TB, cv_ld + 8 * w);
                        if (rtab) {
                            const float *cr = rtab + (size_t)qi * 64 * (DH / 2);
                            bulk_load_g2s(stg + TB, cr, rb, cv_ld + 8 * w);
                            bulk_load_g2s(stg + TB + RB, cr + sin_off, rb, cv_ld + 8 * w);
                        }
                    }
                    mbar_wait(cv_ld + 8 * w, n & 1);
                    dq_tile_convert<DH>(dq, stg_g, stg_g + TB / 4, acc_tile, b, h, qi * 64, T, H, scale,
                                        rtab != nullptr, qld, lane);
                    __syncwarp();
                    if (lane == 0) {
                        fence_proxy_async(); /* the reads above, before the next bulk copy's writes */
                        mbar_arrive(cv_empty + 8 * w);
                    }
                }
            }
            return;
        }
        if (tid == 0) {
            mbar_expect_tx(full_kv, 2 * KB);
#pragma unroll
            for (int cb = 0; cb < DH / 64; cb++) {
                tma_load_3d(Ks + cb * BK * 128, &tk, full_kv, kh * DH + cb * 64, c0, b);
                tma_load_3d(Vs + cb * BK * 128, &tv, full_kv, kh * DH + cb * 64, c0, b);
            }
        }
        for (int it = 0, qi = 0, h = kh * G; it < niter; it++, qi = qi + 1 == nq ? 0 : qi + 1, h += qi == 0) {
            const int st = it & 1, i0 = c0 + qi * BQ;
            if (it >= 2) mbar_wait(empty + 8 * st, ((it >> 1) - 1) & 1);
            if (tid == 0) {
                mbar_expect_tx(full + 8 * st, 2 * QB);
#pragma unroll
                for (int cb = 0; cb < DH / 64; cb++) {
                    tma_load_3d(Qs + st * QB + cb * BQ * 128, &tq, full + 8 * st, h * DH + cb * 64, i0, b);
                    tma_load_3d(Os + st * QB + cb * BQ * 128, &tdo, full + 8 * st, h * DH + cb * 64, i0, b);
                }
            }
#pragma unroll
            for (int r = tid; r < BQ; r += 32) copy_lse_d(st, h, i0, r);
            cp_async_arrive(full + 8 * st);
        }
        cp_wait<0>(); /* nothing in flight at exit */
        return;
    }
    if (wg == 0) { /* producer: the warpgroup's 128 threads issuing cp.async */
        setmaxnreg_dec<40>();
        const int tid = threadIdx.x;
        tile_async_sw<DH, BK, 128>(Ks, k + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T, tid);
        tile_async_sw<DH, BK, 128>(Vs, v + (size_t)b * T * kst + (size_t)kh * DH, kst, c0, T, tid);
        cp_async_arrive(full_kv);
        for (int it = 0, qi = 0, h = kh * G; it < niter; it++, qi = qi + 1 == nq ? 0 : qi + 1, h += qi == 0) {
            const int st = it & 1, i0 = c0 + qi * BQ;
            if (it >= 2) mbar_wait(empty + 8 * st, ((it >> 1) - 1) & 1);
            const size_t qo = (size_t)b * T * qst + (size_t)h * DH, qq = (size_t)b * T * qld + (size_t)h * DH;
            tile_async_sw<DH, BQ, 128>(Qs + st * QB, q + qq, qld, i0, T, tid);
            tile_async_sw<DH, BQ, 128>(Os + st * QB, dout + qo, qst, i0, T, tid);
            if (tid < BQ) copy_lse_d(st, h, i0, tid);
            cp_async_arrive(full + 8 * st);
        }
        cp_wait<0>(); /* nothing in flight at exit */
        return;
    }

    /* consumers */
    setmaxnreg_inc<232>();
    const int c = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    /* dq: 64 queries x 64 columns per consumer (Dh 128: its half of the columns; Q2: its half
     * of the queries) */
    float sacc[1][NN][4], dpacc[1][NN][4], dka[1][NDT][4], dva[1][NDT][4], dqa[1][8][4];
    float(&sf)[NN * 4] = reinterpret_cast<float(&)[NN * 4]>(sacc);
    float(&dpf)[NN * 4] = reinterpret_cast<float(&)[NN * 4]>(dpacc);
    float(&dkf)[NDT * 4] = reinterpret_cast<float(&)[NDT * 4]>(dka);
    float(&dvf)[NDT * 4] = reinterpret_cast<float(&)[NDT * 4]>(dva);
    float(&dqf)[32] = reinterpret_cast<float(&)[32]>(dqa);
    uint32_t pa[BQ / 16][4], da[BQ / 16][4];
    zero(dka);
    zero(dva);
    const uint32_t ka = Ks + c * 64 * 128, va = Vs + c * 64 * 128;
    const int wk0 = c0 + 64 * c + 16 * warp; /* this warp's first key */
    const int srow = 64 * c + 16 * warp + g;  /* its first dS^T row */
    /* dq columns (Dh 128: this warpgroup's 64; Dh 64: all) and their B = K column block */
    const int dq_col = DH == 128 ? 64 * c : 0;
    const uint32_t kq = Ks + (DH == 128 ? c * KB / 2 : 0);
    const uint32_t dqs = Dq + c * 64 * 64 * 4; /* this consumer's dq tile */
    const int tid = threadIdx.x & 127;
    uint32_t nred = 0; /* this consumer's dq tiles so far */
    /* dS^T row r (key), columns 8n + 2t, +1 (queries) in stage ss: 64-query blocks of BK rows
     * of 128 bytes, 16-byte chunks XOR-swizzled by row (the wgmma 128-byte swizzle) */
    auto ds_at = [&](uint32_t ss, int r, int n) {
        return ss + (uint32_t)(n >> 3) * (BK * 128) + r * 128 + (((n & 7) ^ (r & 7)) << 4) + 4 * t;
    };

    mbar_wait(full_kv, 0);
    for (int it = 0, qi = 0, h = kh * G; it < niter; it++, qi = qi + 1 == nq ? 0 : qi + 1, h += qi == 0) {
        const int st = it & 1, i0 = c0 + qi * BQ;
        const uint32_t qt = Qs + st * QB, ot = Os + st * QB, ss = Ss + st * SB;
        /* every query of the tile before this warpgroup's first key, or its keys all past T:
         * P^T = dS^T = 0 (nothing to add to dV or dK), only its dS^T rows for dq, as zeros (the
         * diagonal's first query tile for the second warpgroup: 1 of 2 nq tiles of a key tile;
         * with 128-query tiles only keys past T) */
        if (skip_dead && (i0 + BQ - 1 < c0 + 64 * c || c0 + 64 * c >= T)) {
#pragma unroll
            for (int n = 0; n < NN; n++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int r = srow + 8 * hh;
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_at(ss, r, n)), "r"(0u) : "memory");
                }
        } else {
            mbar_wait(full + 8 * st, (it >> 1) & 1);
            if (!TMA) fence_proxy_async(); /* cp.async wrote Q and dO through the generic proxy */
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < DH / 16; ks++) /* S^T = K Q^T */
                wgmma_ss(sf, wg_desc(ka + (ks >> 2) * KB / (DH / 64) + (ks & 3) * 32, 16),
                         wg_desc(qt + (ks >> 2) * QB / (DH / 64) + (ks & 3) * 32, 16), ks > 0);
#pragma unroll
            for (int ks = 0; ks < DH / 16; ks++) /* dP^T = V dO^T */
                wgmma_ss(dpf, wg_desc(va + (ks >> 2) * KB / (DH / 64) + (ks & 3) * 32, 16),
                         wg_desc(ot + (ks >> 2) * QB / (DH / 64) + (ks & 3) * 32, 16), ks > 0);
            wg_commit();
            wg_wait<0>();
            reg_fence(sf);
            reg_fence(dpf);
            bwd_p_ds<1, NN>(sacc, dpacc, Lg + st * BQ, Lg + (2 + st) * BQ, i0, wk0, T, sl2, g, t);
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {
#pragma unroll
                for (int x = 0; x < 2; x++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int n = 2 * kk + x;
                        pa[kk][2 * x + hh] = pack2(sacc[0][n][2 * hh], sacc[0][n][2 * hh + 1]);
                        da[kk][2 * x + hh] = pack2(dpacc[0][n][2 * hh], dpacc[0][n][2 * hh + 1]);
                        const int r = srow + 8 * hh; /* dS^T row r, columns 8n + 2t, +1 */
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_at(ss, r, n)),
                                     "r"(da[kk][2 * x + hh])
                                     : "memory");
                    }
            }
            reg_fence(dkf);
            reg_fence(dvf);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) /* dV += P^T dO */
                wgmma_rs_tb(dvf, pa[kk], wg_desc(ot + kk * 16 * 128, QB / (DH / 64)));
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) /* dK += dS^T Q */
                wgmma_rs_tb(dkf, da[kk], wg_desc(qt + kk * 16 * 128, QB / (DH / 64)));
            wg_commit();
        }
        fence_proxy_async(); /* the dS^T stores, before the tensor cores read them */
        bar_sync(1, 256);    /* both warpgroups' dS^T rows are in */
        /* Q2: this consumer's 64 queries of the tile, none past T */
        if (Q2 ? i0 + 64 * c < T : DH == 128 || (it & 1) == c) {
            wg_fence();
            const uint32_t sq = ss + (Q2 ? c * BK * 128 : 0); /* its dS^T query block */
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) /* dq = dS K */
                wgmma_ss_tt(dqf, wg_desc(sq + kk * 16 * 128, 64 * 128),
                            wg_desc(kq + kk * 16 * 128, 64 * 128), kk > 0);
            wg_commit();
            wg_wait<0>();
            reg_fence(dqf);
            reg_fence(dkf);
            reg_fence(dvf);
            if (lane == 0) mbar_arrive(empty + 8 * st);
            /* dq tile -> this consumer's shared buffer (once its previous reduction has read
             * it), then one bulk reduction of the 16 KB into dq_acc's piece (FlashAttention-3
             * adds its dq tiles with TMA reductions likewise) */
            if (issuer) { /* producer warp 1's bulk operation has read the buffer */
                if (nred > 0) mbar_wait(dq_empty + 8 * c, (nred - 1) & 1);
            } else {
                if (tid == 0) bulk_wait<true>();
                bar_sync(3 + c, 128);
            }
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = 16 * warp + g + 8 * hh;
#pragma unroll
                for (int n = 0; n < 8; n++)
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(
                                     dqs + 4 * (uint32_t)dq_tiled_off(r, 8 * n + 2 * t)),
                                 "f"(dqa[0][n][2 * hh]), "f"(dqa[0][n][2 * hh + 1])
                                 : "memory");
            }
            fence_proxy_async();
            bar_sync(3 + c, 128);
            if (tid == 0) {
                if (issuer) {
                    mbar_arrive(dq_full + 8 * c); /* to producer warp 1 */
                } else {
                    bulk_red_add_f32(dq_acc + (((size_t)b * H + h) * nt64 + i0 / 64 + (Q2 ? c : 0)) * 64 * DH +
                                         (size_t)dq_col * 64,
                                     dqs, 64 * 64 * 4);
                    bulk_commit();
                }
            }
            nred++;
        } else {
            wg_wait<0>();
            reg_fence(dkf);
            reg_fence(dvf);
            if (lane == 0) mbar_arrive(empty + 8 * st);
        }
    }
    store_dk_dv<1, NDT>(dk, dv, dka, dva, wk0, b, kh, T, kst, scale, t, g, rtab, sin_off);
    if (tid == 0 && !issuer) bulk_wait<false>(); /* the last dq reduction, before the block exits */
#else
    __trap(); /* dispatched only on sm_90 (dxc_impl.wgmma) */
#endif
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
                  int Hkv, size_t kst, size_t qld, float sl2, float scale)
{
    constexpr int L = lds<DH>(), NT = NW * 32, BM = 16 * MT * NW, NDT = DH / 8, NN = BN / 8;
    DXC_DYNAMIC_SMEM(uint4, smem_raw);
    bf16 *Qs = (bf16 *)smem_raw, *Os = Qs + BM * L, *Ks = Os + BM * L, *Vs = Ks + 2 * BN * L;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x % H, b = blockIdx.x / H, kh = h / (H / Hkv);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BM; /* long (late) query tiles first */
    const size_t qst = (size_t)H * DH; /* o, dout (dq_acc); q, dq rows qld apart, k, v, dk, dv kst */
    const bf16 *kb = k + (size_t)b * T * kst + (size_t)kh * DH;
    const bf16 *vb = v + (size_t)b * T * kst + (size_t)kh * DH;
    const int la = lane_a_off<DH>(lane), lb = lane_b_off<DH>(lane);

    tile_async<DH, BM, NT>(Qs, q + (size_t)b * T * qld + (size_t)h * DH, qld, q0, T);
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
            bf16 *r = dq + ((size_t)b * T + row) * qld + (size_t)h * DH + 2 * t;
#pragma unroll
            for (int nd = 0; nd < NDT; nd++)
                st2(r + 8 * nd, dqa[m][nd][2 * hh] * scale, dqa[m][nd][2 * hh + 1] * scale);
        }
}

/* ---- launches ---------------------------------------------------------------------------- */

template <int DH, int NW, int MT, int BN, bool QR = false>
void fwd_launch(dx_backend *be, void *o, void *lse, const void *q, const void *k, const void *v,
                int B, int T, int H, int Hkv, size_t kst, size_t qld)
{
    const char *op = "attention_fwd";
    constexpr int BM = 16 * MT * NW;
    const size_t smem = fwd_smem<DH, NW, MT, BN>();
    auto kern = att_fwd_tc<DH, NW, MT, BN, QR>;
    dxc_set_smem(be, (const void *)kern, smem, op);
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    dim3 grid((unsigned)(B * H), (unsigned)((T + BM - 1) / BM));
    kern<<<grid, NW * 32, smem, dxc(be)->stream>>>((bf16 *)o, (float *)lse, (const bf16 *)q,
                                                  (const bf16 *)k, (const bf16 *)v, T, H, Hkv, kst, qld,
                                                  sl2);
    DXC_LAUNCHED(be, op);
}

/* persistent: one block per SM walking the work tiles; otherwise one block per work tile. TMA:
 * the producer is one thread issuing TMA copies (3-D tensor maps over [B][T][heads x DH], so a
 * sequence's rows past T read as zeros), else its warpgroup issuing cp.async; where the tensor
 * maps cannot be made (q, k, v or their row strides not 16-byte aligned) the cp.async one runs.
 * KS: K and V stages. */
template <int DH, int BN, int KS = 2>
void fwd_wg_launch(dx_backend *be, void *o, void *lse, const void *q, const void *k, const void *v,
                   int B, int T, int H, int Hkv, size_t kst, size_t qld, bool persistent = true,
                   bool head_major = false, bool tma = true)
{
    const char *op = "attention_fwd";
    CUtensorMap tq, tk, tv;
    memset(&tq, 0, sizeof tq);
    memset(&tk, 0, sizeof tk);
    memset(&tv, 0, sizeof tv);
    if (tma && (tensor_map_3d(&tq, q, (uint64_t)B, (uint64_t)T, (uint64_t)H * DH, qld, 128) ||
                tensor_map_3d(&tk, k, (uint64_t)B, (uint64_t)T, (uint64_t)Hkv * DH, kst, BN) ||
                tensor_map_3d(&tv, v, (uint64_t)B, (uint64_t)T, (uint64_t)Hkv * DH, kst, BN)))
        tma = false;
    const size_t smem = fwd_wg_smem<DH, BN, KS>();
    auto kern = tma ? att_fwd_wg<DH, BN, true, KS> : att_fwd_wg<DH, BN, false, KS>;
    dxc_set_smem(be, (const void *)kern, smem, op);
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    const long tiles = (long)B * H * ((T + 127) / 128);
    const int cap = dxc(be)->attn_grid > 0 && dxc(be)->attn_grid < dxc(be)->num_sms ? dxc(be)->attn_grid
                                                                                   : dxc(be)->num_sms;
    const unsigned grid = (unsigned)(persistent && tiles > cap ? cap : tiles);
    kern<<<grid, 384, smem, dxc(be)->stream>>>((bf16 *)o, (float *)lse, (const bf16 *)q,
                                              (const bf16 *)k, (const bf16 *)v, B, T, H, Hkv, kst,
                                              qld, sl2, head_major, tq, tk, tv);
    DXC_LAUNCHED(be, op);
}

template <int DH, int NW, int MT, int BQ, bool DQ>
void dkdv_launch(dx_backend *be, void *dk, void *dv, float *dq_acc, const void *dout,
                 const void *q, const void *k, const void *v, const float *lse, const float *Dv,
                 int B, int T, int H, int Hkv, size_t kst, size_t qld)
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
                                                  Hkv, kst, qld, sl2, scale);
    DXC_LAUNCHED(be, op);
}

/* att_bwd_wg's launch order. Its default grid runs every (b, kv head)'s longest key tile
 * first: good balance, but the blocks running at once then add dq tiles for all B Hkv pairs,
 * and where their dq pieces (G heads x T x Dh fp32 each) exceed the L2 cache, every bulk
 * reduction goes to DRAM (on one H100 at B 8 T 2048 H 32 Hkv 4 Dh 64 the backward took 1.27
 * ms with the reductions, 1.10 without them). In chunks of C pairs (a chunk's key tiles longest
 * first, then the next chunk's) fewer pairs are live at once, at the cost of balance where C is
 * small. C as att_order.h's dx_att_bwd_chunk chooses it (no chunks where one wave's pairs fit
 * half the L2; else the smallest C whose simulated schedule ends within 2% of the best; NOTES
 * item 22), cached per shape; DX_CUDA_ATT_CHUNK (attn_chunk) overrides. Returns C (nbh: the
 * default order). */
static int bwd_wg_chunk(dx_backend *be, int nbh, int nkt, int T, int G, int DH)
{
    dxc_impl *im = dxc(be);
    if (im->attn_chunk >= 0) return im->attn_chunk == 0 || im->attn_chunk > nbh ? nbh : im->attn_chunk;
    const long key[5] = {nbh, nkt, T, G, DH};
    if (memcmp(key, im->chunk_key, sizeof key) != 0) {
        im->chunk_val = dx_att_bwd_chunk(nbh, nkt, T, G, DH, im->num_sms, (double)im->l2_bytes);
        memcpy(im->chunk_key, key, sizeof key);
    }
    return im->chunk_val;
}

/* att_bwd_wg, after zeroing what it adds into: dq_acc (B H ceil(T / 64) tiles of 64 x DH fp32,
 * dq_tiled_off) and dq_cnt (dxc_dq_cnt_ints of them) after it. With TMA copies: mode bit 4 (head
 * dim 128, or T <= 2048 with 128-query tiles at Dh 64, T <= 1024 with 64-query ones; variants
 * 15, 17 and 22 always, 14, 16 and 23 never) copies each piece's first
 * contribution, so only dq_cnt is zeroed, not the accumulator; bit 3 (head dim 64, variants 16
 * and 17 only) converts dq in the kernel. Returns whether it did (else the caller runs the
 * separate pass over the accumulator). */
template <int DH>
bool dkdv_wg_launch(dx_backend *be, void *dk, void *dv, float *dq_acc, void *dq, const void *dout,
                    const void *q, const void *k, const void *v, const float *lse,
                    const float *Dv, int B, int T, int H, int Hkv, size_t kst, size_t qld, bool key_x,
                    const float *rtab, size_t sin_off)
{
    const char *op = "attention_bwd";
    const float scale = (float)(1.0 / sqrt((double)DH));
    const float sl2 = (float)(1.0 / sqrt((double)DH) * 1.4426950408889634);
    const int var = dxc(be)->attn_bwd_var;
    /* 128-query tiles at Dh 64 with TMA (the default, and variants 9, 10, 20 and unknown
     * numbers; 11, 13-17 and 21 keep 64-query tiles). One H100, 2026-11-28, median of 3
     * interleaved against variant 21: backward 0.289 / 0.295 ms at B 32 T 350 H 32 Hkv 4, 1.105
     * / 1.150 at B 8 T 2048, 1.887 / 1.983 at B 4 T 4096, 3.584 / 3.776 at B 2 T 8192 (NOTES
     * item 34) */
    bool q2 = DH == 64 && var != 11 && !(var >= 13 && var <= 17) && var != 21;
    /* TMA (unless variant 13, or the tensor maps cannot be made: see fwd_wg_launch) */
    CUtensorMap tq, tk, tv, tdo;
    memset(&tq, 0, sizeof tq);
    memset(&tk, 0, sizeof tk);
    memset(&tv, 0, sizeof tv);
    memset(&tdo, 0, sizeof tdo);
    const bool tma = var != 13 &&
                     !tensor_map_3d(&tq, q, (uint64_t)B, (uint64_t)T, (uint64_t)H * DH, qld, q2 ? 128 : 64) &&
                     !tensor_map_3d(&tdo, dout, (uint64_t)B, (uint64_t)T, (uint64_t)H * DH, (uint64_t)H * DH,
                                    q2 ? 128 : 64) &&
                     !tensor_map_3d(&tk, k, (uint64_t)B, (uint64_t)T, (uint64_t)Hkv * DH, kst, 128) &&
                     !tensor_map_3d(&tv, v, (uint64_t)B, (uint64_t)T, (uint64_t)Hkv * DH, kst, 128);
    q2 = q2 && tma; /* without tensor maps: 64-query tiles, the cp.async producer */
    constexpr int BQ2 = DH == 64 ? 128 : 64; /* the query tile where q2 (only at Dh 64) */
    const size_t smem = q2 ? bwd_wg_smem<DH, BQ2>() : bwd_wg_smem<DH>();
    auto kern = q2 ? att_bwd_wg<DH, true, BQ2> : tma ? att_bwd_wg<DH, true, 64> : att_bwd_wg<DH, false, 64>;
    dxc_set_smem(be, (const void *)kern, smem, op);
    const unsigned nbh = (unsigned)(B * Hkv), nkt = (unsigned)((T + 127) / 128);
    const dim3 grid = key_x ? dim3(nkt, nbh) : dim3(nbh, nkt);
    /* mode: bit 0 the key-tile-major grid, bit 1 (variant 11) the masked warpgroup tiles computed */
    int mode = (key_x ? 1 : 0) | (var == 11 ? 2 : 0);
    /* bit 4: each piece's first contribution copied, by default at Dh 128 and at Dh 64 up to
     * seq 2048 with 128-query tiles, 1024 with 64-query ones; bit 3 (Dh 64): dq converted in the
     * kernel, only in variants 16 and 17. Alone on
     * one H100 (2026-11-27, NOTES item 24), bit 4 took the backward from 0.670 to 0.609 ms at B
     * 32 T 350 Dh 128, 2.027 to 1.900 at B 8 T 2048 Dh 128, 0.327 to 0.300 at B 32 T 350 Dh 64,
     * but 1.198 to 1.200 at B 8 T 2048 Dh 64, 2.08 to 2.11 at T 4096 and 3.93 to 4.00 at T 8192
     * (warp 1 issues one operation at a time); bit 3 made every shape slower (1.41 ms at B 8 T
     * 2048: the last contributor to most tiles is one block, whose two converter warps fall
     * behind). Variants: 14 neither (the consumers add every contribution), 15 bit 4 at every
     * length, 16 bit 3 only, 17 both; with 128-query tiles at Dh 64, 22 bit 4 at every length,
     * 23 at none. With 128-query tiles (one H100, 2026-11-28, median of 3 interleaved, NOTES
     * item 35) bit 4 gave 1.089 against 1.107 ms at B 8 T 2048, 1.919 / 1.887 at B 4 T 4096,
     * 3.610 / 3.538 at B 2 T 8192, and without it B 32 T 350 took 0.331 against 0.291 */
    const bool conv = tma && DH == 64 && (var == 16 || var == 17);
    if (conv) mode |= 8;
    if (tma && (var == 15 || var == 17 || var == 22 ||
                (var != 14 && var != 16 && var != 23 && (DH == 128 || T <= (q2 ? 2048 : 1024)))))
        mode |= 16;
    const size_t ntile = (size_t)B * H * ((T + 63) / 64), nt = ntile * 64 * DH;
    int *const dq_cnt = (int *)(dq_acc + nt);
    DXC_CHECK(op, cudaMemsetAsync(mode & 16 ? (void *)dq_cnt : (void *)dq_acc, 0,
                                  ((mode & 16 ? 0 : nt) + dxc_dq_cnt_ints(ntile, DH)) * sizeof(float),
                                  dxc(be)->stream));
    if (!key_x && var != 9) { /* bit 2: chunks of C (b, kv head) pairs */
        const int C = bwd_wg_chunk(be, (int)nbh, (int)nkt, T, H / Hkv, DH);
        if (C < (int)nbh) mode |= 4 | (C << 8);
    }
    kern<<<grid, 384, smem, dxc(be)->stream>>>((bf16 *)dk, (bf16 *)dv, dq_acc, (bf16 *)dq, dq_cnt,
                                              (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k,
                                              (const bf16 *)v, lse, Dv, T, H, Hkv, kst, qld, sl2,
                                              scale, mode, rtab, sin_off, tq, tk, tv, tdo);
    DXC_LAUNCHED(be, op);
    return conv;
}

template <int DH, int NW, int MT, int BN>
void dq_launch(dx_backend *be, void *dq, const void *dout, const void *q, const void *k,
               const void *v, const float *lse, const float *Dv, int B, int T, int H, int Hkv, size_t kst,
               size_t qld)
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
                                                  (const bf16 *)v, lse, Dv, T, H, Hkv, kst, qld, sl2,
                                                  scale);
    DXC_LAUNCHED(be, op);
}

/* dq = bf16(acc * scale), 4 elements per thread (n % 4 == 0, 16-byte aligned acc); acc is dense
 * rows of w elements (w % 4 == 0), dq's rows are qld apart */
__global__ void att_dq_from_acc(bf16 *__restrict__ dq, const float *__restrict__ acc, size_t n4,
                                float scale, size_t w, size_t qld)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = ((const float4 *)acc)[i];
        __nv_bfloat162 *d = (__nv_bfloat162 *)(dq + (4 * i) / w * qld + (4 * i) % w);
        d[0] = __floats2bfloat162_rn(a.x * scale, a.y * scale);
        d[1] = __floats2bfloat162_rn(a.z * scale, a.w * scale);
    }
}

/* Elements col .. col + 3 (col % 4 == 0) of query t in att_bwd_wg's tiled dq accumulator
 * (dq_tiled_off), acc_bh = the first piece of its (b, h) */
template <int DH>
__device__ __forceinline__ float4 dq_acc_ld4(const float *acc_bh, int t, int col)
{
    return *(const float4 *)(acc_bh + (size_t)(t / 64) * 64 * DH + (size_t)(col / 64) * 4096 +
                             dq_tiled_off(t % 64, col % 64));
}

/* The separate conversion passes below (att_dq_from_tiles(_rope)), where drop is set: batch b
 * = B - 1 - blockIdx.y, so that the first blocks to run take the batches whose (b, kv head)
 * pairs att_bwd_wg ran last (its chunks go up in b) and whose accumulator pieces are the likeliest
 * still to be in L2; and once a warp has read its rows, the 128-byte lines it read are dropped
 * from L2 unwritten (discard.global.L2, as dq_tile_convert does: nothing reads them before the
 * next call's first contributions or its memset overwrite them), so that dirty accumulator lines
 * do not go back to DRAM. Row t of (b, h) is DH / 32 lines (two per 64-column piece); the warp's
 * lanes with item index j < DH / 32 in their (t, h) drop line j. Every lane of a warp runs the
 * same iterations (n, the items per batch, a multiple of 32 where these passes run: T H DH / 4
 * and T H DH / 8 with H DH a multiple of 256). drop = 0 (variant 24): the order and the lines as
 * before 2026-11-28 (benchmarks/NOTES.md item 35). */
template <int DH>
__device__ __forceinline__ void dq_acc_drop(const float *acc_bh, int t, int j)
{
    if (j < DH / 32)
        asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(acc_bh + (size_t)(t / 64) * 64 * DH + (size_t)(j / 2) * 4096 +
                                                           (size_t)(t % 64) * 64 + 32 * (j % 2))
                     : "memory");
}

/* dq[b, t, h, :] = bf16(acc * scale) from att_bwd_wg's tiled accumulator (dq_tiled_off), 4
 * elements per thread; drop: as above */
template <int DH>
__global__ void att_dq_from_tiles(bf16 *__restrict__ dq, const float *__restrict__ acc, int T,
                                  int H, float scale, size_t qld, int drop)
{
    const size_t n4 = (size_t)T * H * DH / 4; /* of batch b */
    const int nt64 = (T + 63) / 64, b = drop ? (int)(gridDim.y - 1 - blockIdx.y) : (int)blockIdx.y;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % (DH / 4)) * 4, h = (int)(i / (DH / 4) % H),
                  t = (int)(i / (DH / 4) / H);
        const float *acc_bh = acc + ((size_t)b * H + h) * nt64 * 64 * DH;
        const float4 a = dq_acc_ld4<DH>(acc_bh, t, d);
        __nv_bfloat162 *o = (__nv_bfloat162 *)(dq + ((size_t)b * T + t) * qld + (size_t)h * DH + d);
        o[0] = __floats2bfloat162_rn(a.x * scale, a.y * scale);
        o[1] = __floats2bfloat162_rn(a.z * scale, a.w * scale);
        if (drop) {
            __syncwarp(); /* every lane's reads of the lines are done */
            dq_acc_drop<DH>(acc_bh, t, d / 4);
        }
    }
}

/* att_dq_from_tiles with RoPE's backward (kernels.h rope_bwd) folded in: a thread takes columns
 * d .. d+3 (d < DH/2) and d+DH/2 .. +3 of one (t, h) and writes
 *   dq[i] = a cos + b sin ; dq[i + DH/2] = b cos - a sin  (a, b: acc * scale at i, i + DH/2)
 * with cos / sin of position t from dxc_rope_table's table (rows of DH/2 floats, sin at sin_off) */
template <int DH>
__global__ void att_dq_from_tiles_rope(bf16 *__restrict__ dq, const float *__restrict__ acc,
                                       int T, int H, float scale, const float *__restrict__ rtab,
                                       size_t sin_off, size_t qld, int drop)
{
    constexpr int HALF = DH / 2, Q = HALF / 4; /* items per (t, h) */
    const size_t n = (size_t)T * H * Q;      /* of batch b */
    const int nt64 = (T + 63) / 64, b = drop ? (int)(gridDim.y - 1 - blockIdx.y) : (int)blockIdx.y;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % Q) * 4, h = (int)(i / Q % H), t = (int)(i / Q / H);
        const float *acc_bh = acc + ((size_t)b * H + h) * nt64 * 64 * DH;
        const int e = d + HALF;
        const float4 a = dq_acc_ld4<DH>(acc_bh, t, d), bb = dq_acc_ld4<DH>(acc_bh, t, e);
        const float4 c = __ldg((const float4 *)(rtab + (size_t)t * HALF + d));
        const float4 sn = __ldg((const float4 *)(rtab + sin_off + (size_t)t * HALF + d));
        dq_store_rope4(dq + ((size_t)b * T + t) * qld + (size_t)h * DH, d, e, a, bb, c, sn, scale);
        if (drop) {
            __syncwarp(); /* every lane's reads of the lines are done */
            dq_acc_drop<DH>(acc_bh, t, d / 4);
        }
    }
}

/* The backward in one of two forms:
 *   fused (default): dk, dv and dq in one kernel, dq accumulated in fp32 with vector atomics
 *     (5 tile products, FlashAttention-2's form); the order of the atomic additions varies
 *     from run to run, so dq is not bitwise reproducible;
 *   deterministic (DX_CUDA_DETERMINISTIC=1): the dk/dv kernel, then a dq kernel that
 *     recomputes S and dP (7 tile products, fixed summation order). */
template <int DH, int NW, int MT, int BQ, int BN>
bool bwd_launch(dx_backend *be, void *dq, void *dk, void *dv, float *dq_acc, const void *dout,
                const void *q, const void *k, const void *v, const float *lse, const float *Dv,
                int B, int T, int H, int Hkv, size_t kst, size_t qld, int wg, const float *rtab,
                size_t sin_off)
{
    if (dxc(be)->attn_det) {
        dkdv_launch<DH, NW, MT, BQ, false>(be, dk, dv, NULL, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst,
                                          qld);
        dq_launch<DH, NW, MT, BN>(be, dq, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst, qld);
        return false;
    }
    const char *op = "attention_bwd";
    const size_t n = (size_t)B * T * H * DH;
    cudaStream_t st = dxc(be)->stream;
    if constexpr (DH == 64 || DH == 128) {
        if (wg) { /* the tiled accumulator (dq_tiled_off), then att_bwd_wg's counters */
            if (dkdv_wg_launch<DH>(be, dk, dv, dq_acc, dq, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst,
                                   qld, wg == 2, rtab, sin_off))
                return rtab != nullptr; /* dq converted by the kernel */
            if (dxc(be)->attn_skip & 2) return rtab != nullptr; /* timing only: dq left as it was */
            const size_t per_b = (size_t)T * H * DH / (rtab ? 8 : 4),
                         cap = (size_t)dxc(be)->num_sms * 16 / B + 1;
            const size_t blocks = (per_b + 255) / 256 < cap ? (per_b + 255) / 256 : cap;
            const float scale = (float)(1.0 / sqrt((double)DH));
            /* the last batches first, their lines dropped from L2 once read (variant 24: not) */
            const int drop = dxc(be)->attn_bwd_var != 24 && !(dxc(be)->attn_skip & 4) &&
                             (size_t)T * H * DH % (32 * 8) == 0;
            /* (DX_CUDA_ATT_SKIP bit 2, timing only: twice, without the drop, as variant 24, so
             * that the second pass reads what the first read; compare it with variant 24) */
            for (int rep = dxc(be)->attn_skip & 4 ? 2 : 1; rep > 0; rep--) {
                if (rtab)
                    att_dq_from_tiles_rope<DH><<<dim3((unsigned)blocks, (unsigned)B), 256, 0, st>>>(
                        (bf16 *)dq, dq_acc, T, H, scale, rtab, sin_off, qld, drop);
                else
                    att_dq_from_tiles<DH><<<dim3((unsigned)blocks, (unsigned)B), 256, 0, st>>>(
                        (bf16 *)dq, dq_acc, T, H, scale, qld, drop);
                DXC_LAUNCHED(be, op);
            }
            return rtab != nullptr;
        }
    }
    DXC_CHECK(op, cudaMemsetAsync(dq_acc, 0, n * sizeof(float), st));
    dkdv_launch<DH, NW, MT, BQ, true>(be, dk, dv, dq_acc, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst, qld);
    const size_t n4 = n / 4;
    size_t blocks = (n4 + 255) / 256;
    if (blocks > (size_t)dxc(be)->num_sms * 16) blocks = (size_t)dxc(be)->num_sms * 16;
    att_dq_from_acc<<<(unsigned)blocks, 256, 0, st>>>((bf16 *)dq, dq_acc, n4,
                                                       (float)(1.0 / sqrt((double)DH)),
                                                       (size_t)H * DH, qld);
    DXC_LAUNCHED(be, op);
    return false;
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
 * On Hopper (compute capability 9.x) at Dh 64 and 128:
 *   the forward is att_fwd_wg with 128-key tiles and TMA copies (0.366 ms at B 8 T 2048 H 32
 *     Hkv 4 Dh 64, 0.570 at Dh 128 H 32 Hkv 32; SDPA flash 0.518, 0.892, SDPA cuDNN 0.345, 0.494;
 *     one H100, 2026-11-26, benchmarks/NOTES.md items 13 and 20),
 *     on a persistent grid walking the work tiles head after head (NOTES item 32; 11 is the
 *     same), or one block per work tile head after head (variant 12); variant 15 is the
 *     order before 2026-11-27 (longest first on the persistent grid, 12 where the K/V rows
 *     in use would not fit L2), 9 att_fwd_wg with 64-key tiles (persistent, longest first),
 *     10 one block per work tile in the longest-first order, 8 the mma.sync default above;
 *   the backward is att_bwd_wg (1.268 ms at B 8 T 2048 H 32 Hkv 4 Dh 64, 1.993 at Dh 128 Hkv 32;
 *     SDPA flash 1.836, 3.104, SDPA cuDNN 1.142, 1.682; one H100, 2026-11-26; NOTES items 14
 *     and 20), its grid (B Hkv, key tiles) with the longest key tiles first, launched in chunks
 *     of (b, kv head) pairs where dq would not fit L2 (bwd_wg_chunk; 1.153 ms at B 8 T 2048 Dh
 *     64 on an H100, 2026-11-27, NOTES item 22; at Dh 64 with 128-query tiles since
 *     2026-11-28, 1.105 ms, NOTES item 34), or the longest first without chunks (variant
 *     9), or from 8 waves of blocks up (key tiles, B Hkv), so that the blocks running at once
 *     share (b, kv head) and read Q and dO from L2 (variant 10); variant 8 is the mma.sync
 *     default above.
 * DX_CUDA_ATT_FWD and DX_CUDA_ATT_BWD = i select variant i of the lists below (0 = the default;
 * for tuning with benchmarks/attention_bench.sh VARIANTS=...; an unknown i is the default); every
 * variant passes test_cuda_kernels' attention checks (DX_CUDA_TEST_ONLY=attention;
 * DX_CUDA_ATT_GRID=n caps the persistent forward's grid at n blocks, as those checks do in one
 * pass, so that small shapes also give each block several work tiles):
 *   forward  Dh 64:  0 (wgmma, 128 keys; elsewhere 8)  8 (4 warps, MT 2, 64 keys, Q in registers)
 *                    9 (wgmma, 64 keys, persistent, longest first)
 *                    10 (wgmma, 128 keys, one block per work tile, longest first)
 *                    11 (as 0: persistent, head after head)  12 (wgmma, 10 head after head)
 *                    13 (0 with the cp.async producer)  14 (0 with 3 K/V stages)
 *                    15 (wgmma, the order before 2026-11-27: longest first, or 12)
 *                    1 (8, 1, 128)  2 (4, 1, 128)
 *                    3 (4, 2, 64, Q from shared memory)  4 (8, 1, 64, Q in registers)
 *            Dh 128: 0 (wgmma, 128 keys; elsewhere 8)  8 (4, 2, 64)  9 (wgmma, 64 keys)  10-15
 *                    1 (4, 1, 64)  2 (8, 1, 64, Q in registers)  3 (4, 1, 128)  4 (8, 1, 32)
 *                    5 (8, 1, 64)  6 (4, 2, 32)  7 (8, 2, 32)
 *   backward Dh 64:  0 (wgmma; elsewhere 8)  9 (wgmma, longest first, no chunks)
 *                    10 (wgmma, key-tile major)
 *                    11 (0 computing the warpgroup tiles that lie wholly above the diagonal)
 *                    13 (0 with the cp.async producer, dq converted by a separate pass)
 *                    14 (0 with the consumers adding every dq contribution, then the separate
 *                        pass att_dq_from_tiles(_rope))
 *                    15 (0 with each piece's first contribution copied at every length)
 *                    16 (the dq accumulator zeroed first, every contribution added by warp 1,
 *                        each tile converted in the kernel once complete)
 *                    17 (first contributions copied and tiles converted in the kernel)
 *                    20 (as 0: 128-query tiles, both consumers issuing dq every tile,
 *                        att_bwd_wg<64, true, 128>; NOTES item 34)
 *                    21 (0 with 64-query tiles, the default until 2026-11-28; as are 11 and
 *                        13-17)
 *                    22 (0 with each piece's first contribution copied at every length)
 *                    23 (0 with the accumulator zeroed first at every length)
 *                    24 (0 with the separate dq pass in batch order, keeping the accumulator's
 *                        lines in L2: as before 2026-11-28)
 *                    8 (4 warps, MT 2, 32 queries per tile)
 *            Dh 128: 0 (wgmma; elsewhere 8)  9  10  11  13  14  15 (as 0)  16 (as 14)  17 (as 0)  20 (as 0)  21 (as 0)  22 (as 0)  23 (as 14)  24  8 (8 warps, MT 1, 64 queries)  1 (4, 1, 32)
 *                    2 (8, 1, 32)  3 (4, 1, 64) */
void dxc_attention_fwd_mma(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                           const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh)
{
    const size_t kst = (size_t)ldkv, qld = (size_t)ldq;
    const int var = dxc(be)->attn_fwd_var;
    if (dxc(be)->wgmma && (Dh == 64 || Dh == 128) && (var == 0 || (var >= 9 && var <= 15))) {
        /* A persistent grid walking the work tiles head after head (the snake order of
         * att_fwd_wg's nth), so that the blocks running at once share their heads' K and V
         * rows in L2. Against the longest-first order that was the default until 2026-11-27
         * (variant 15: longest first, or one block per work tile head after head where the K
         * and V rows of about min(SMs, B H) heads would not fit L2), one H100, median of 30,
         * two rounds: B 32 T 350 H 32 Hkv 32 Dh 128 0.162 / 0.163 against 0.221 / 0.223 ms, B 16
         * T 700 0.211 / 0.215 against 0.324 / 0.326, B 8 T 2048 0.521 / 0.531 against 0.577 /
         * 0.580, B 4 T 4096 0.919 / 0.942 against 0.979 / 0.980; Dh 64 Hkv 4: B 32 T 350
         * 0.100 / 0.101 against 0.102 / 0.106, B 8 T 2048 0.378 / 0.368 against 0.381 / 0.390
         * (NOTES item 32). The longest-first order visits every head once per query-tile
         * position, so where all heads' K and V exceed L2 each pass reads them from DRAM again
         * (477 against 275 MB read at B 32 T 350 Dh 128). */
        const double kv_live = (double)(B * H < dxc(be)->num_sms ? B * H : dxc(be)->num_sms) /
                               (H / Hkv) * T * Dh * 2 * sizeof(bf16);
        const bool l2_miss = kv_live > (double)dxc(be)->l2_bytes; /* variant 15's choice */
        const int vo = var == 13 || var == 14 ? 0 : var; /* the tile order of variants 13, 14 */
        const bool pers = vo == 0 || vo == 11 || (vo == 15 && !l2_miss);
        const bool hm = vo == 0 || vo == 11 || vo == 12 || (vo == 15 && l2_miss);
        if (Dh == 64) {
            if (var == 9) fwd_wg_launch<64, 64>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld);
            else if (var == 14) fwd_wg_launch<64, 128, 3>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld, pers, hm);
            else fwd_wg_launch<64, 128>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld, pers, hm, var != 13);
        } else {
            if (var == 9) fwd_wg_launch<128, 64>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld);
            else if (var == 14) fwd_wg_launch<128, 128, 3>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld, pers, hm);
            else fwd_wg_launch<128, 128>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld, pers, hm, var != 13);
        }
        return;
    }
#define FWD(...) fwd_launch<__VA_ARGS__>(be, o, lse, q, k, v, B, T, H, Hkv, kst, qld)
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

int dxc_attention_bwd_mma(dx_backend *be, void *dq, void *dk, void *dv, float *dq_acc,
                          const void *dout, const void *q, const void *k, const void *v,
                          const float *lse, const float *Dv, int ldq, int ldkv, int B, int T,
                          int H, int Hkv, int Dh, const float *rope_tab, size_t sin_off)
{
    const size_t kst = (size_t)ldkv, qld = (size_t)ldq;
    const int var = dxc(be)->attn_bwd_var;
    /* att_bwd_wg (not with DX_CUDA_DETERMINISTIC): 1, or 2 with the key-tile-major grid; the
     * mma.sync kernels for variants 1-8 (and without sm_90a) */
    const long nblk = (long)B * Hkv * ((T + 127) / 128);
    const int wg = !dxc(be)->wgmma || (var >= 1 && var <= 8) ? 0
                   : var == 9                                ? 1
                   : var == 10                               ? 2
                                                             : (nblk >= 8L * dxc(be)->num_sms ? 2 : 1);
#define BWD(...)                                                                                   \
    bwd_launch<__VA_ARGS__>(be, dq, dk, dv, dq_acc, dout, q, k, v, lse, Dv, B, T, H, Hkv, kst, qld, \
                            wg, rope_tab, sin_off)
    bool rotated = false;
    switch (Dh) {
    case 32: rotated = BWD(32, 4, 2, 32, 32); break;
    case 64: rotated = BWD(64, 4, 2, 32, 32); break;
    default:
        switch (var) {
        case 1: rotated = BWD(128, 4, 1, 32, 32); break;
        case 2: rotated = BWD(128, 8, 1, 32, 32); break;
        case 3: rotated = BWD(128, 4, 1, 64, 64); break;
        default: rotated = BWD(128, 8, 1, 64, 64); break;
        }
        break;
    }
#undef BWD
    return rotated ? 1 : 0;
}
