/* dissect CUDA backend: GEMMs of our own on Hopper (wgmma, sm_90a), for what cuBLAS cannot
 * fuse into its epilogues. First: the MLP's gate|up projection with SwiGLU in the epilogue
 * (kernels.h gemm_swiglu; benchmarks/swiglu_gemm_bench.c times it alone),
 *   g = x W_gate^T, u = x W_up^T (bf16, kept for the backward), h = silu(g) u (bf16),
 * where cuBLAS's GEMM and then swiglu_fwd read g and u back from memory. The same kernel with
 * EPI = head dim is the attention's Q|K|V projection with RoPE on q and k in the epilogue
 * (kernels.h gemm_rope), where cuBLAS's GEMM and then rope_fwd read q and k back.
 *
 * Structure (as CUTLASS's warp-specialised "cooperative" Hopper GEMM and FlashAttention-3): a
 * persistent grid, one block of three warpgroups per SM.
 * - Warpgroup 0, warp 0, one thread: the producer. TMA tensor copies (cp.async.bulk.tensor,
 *   128-byte swizzle, completing on the stage's "full" mbarrier) of a 128 x 64 tile of x and the
 *   128 x 64 tiles of W_gate and W_up (rows f0 .. f0+127 and F+f0 ..) into a ring of 4 stages.
 * - Warpgroups 1 and 2: the consumers. Each owns 64 rows of the 128 x 256 accumulator (gate
 *   columns 0-127, up 128-255) and issues wgmma.m64n256k16 over each stage, releasing it (the
 *   "empty" mbarrier) once the next stage's products are issued and the previous ones are done.
 *   After a tile's last stage they round g and u to bf16 and write them with stmatrix, in two
 *   halves (g and u columns 0-63, then 64-127), into their 16 KB buffer (two of the tensor maps'
 *   64 x 64 boxes, 128-byte swizzle): half 0 at once, half 1 kept packed in 32 registers and
 *   written during the next tile's products, once the epilogue warps have stored half 0. In the
 *   accumulator layout a thread holding gate column c of a row holds up column c too.
 * - Warpgroup 0, warps 1-3: the epilogue, overlapping the consumers' next tile. Per half: TMA
 *   stores of g and u; h = swiglu_h(g, u) from the buffer (the rounded values, as swiglu_fwd
 *   computes it from stored ones), written over g's box once its store has read it, and
 *   TMA-stored; then the buffer goes back to its consumer (mbarriers epi_full / epi_empty, two
 *   phases per tile). (With RoPE, EPI > 0 below, warp 1's lane 0 alone stores y's halves.)
 * The fourth stage is what the halves buy: with 3 stages of 48 KB and two 32 KB buffers per
 * tile, the producer had one stage in flight beyond the two the consumers hold, and the kernel
 * ran 4-12% behind cuBLASLt's 256 x 128 GEMM of its shape at the power limit; with 4, 1-5%
 * (benchmarks/wg_limit_probe.c, NOTES item 43).
 * Without the third role the epilogue (rounding, exponentials, reciprocals, stores) kept the
 * tensor cores idle for ~10% of the kernel (benchmarks/NOTES.md). Tiles are walked in groups of 16
 * row tiles (column tiles inner within a group) so the tiles running at once share x and W in L2.
 * Row and column edges: the TMA loads fill with zeros past M and K, the stores clip past M and F
 * (gate rows past F of the last column tile are up rows of W, computed and never stored). */
#include "cuda_internal.cuh"
#include "wgmma.cuh" /* with the TMA wrappers and tensor maps */

namespace {

constexpr int GS_BM = 128, GS_BF = 128, GS_BK = 64;
constexpr int GS_A_BYTES = GS_BM * GS_BK * 2;     /* 16 KB */
constexpr int GS_B_BYTES = 2 * GS_BF * GS_BK * 2; /* 32 KB: gate rows, then up rows */
constexpr int GS_STAGE_BYTES = GS_A_BYTES + GS_B_BYTES;
constexpr int GS_STAGES = 4;
constexpr int GS_EPI_BYTES = 64 * GS_BF * 2;       /* 16 KB: half a consumer's 64 rows (two 64 x 64 boxes) */
constexpr size_t gs_smem() { return 1024 + (size_t)GS_STAGES * GS_STAGE_BYTES + 2 * GS_EPI_BYTES + 128; }

#ifdef DXC_HAVE_WGMMA
/* keeps a value alive without storing it (the timing variant without an epilogue) */
__device__ __forceinline__ void base_sink(float v)
{
    asm volatile("" ::"f"(v));
}

/* accumulator registers d[o..o+7] (d[o..o+31]) as write-only operands of an asm statement */
#define DXC_OUT8(d, o)                                                                                 \
    "=f"(d[o]), "=f"(d[o + 1]), "=f"(d[o + 2]), "=f"(d[o + 3]), "=f"(d[o + 4]), "=f"(d[o + 5]),          \
        "=f"(d[o + 6]), "=f"(d[o + 7])
#define DXC_OUT32(d, o) DXC_OUT8(d, o), DXC_OUT8(d, o + 8), DXC_OUT8(d, o + 16), DXC_OUT8(d, o + 24)
constexpr int GS_GROUP = 16; /* row tiles per group of the tile order */

/* row tile m0 (128 rows) and column tile f0 (BF columns) of work tile t: groups of GS_GROUP row
 * tiles, column tiles inner within a group */
template <int BF = GS_BF>
__device__ __forceinline__ void gs_tile(int t, int tiles_m, int tiles_f, int &m0, int &f0)
{
    const int per_group = GS_GROUP * tiles_f, grp = t / per_group, first = grp * GS_GROUP;
    const int rows = min(GS_GROUP, tiles_m - first), in = t - grp * per_group;
    m0 = (first + in % rows) * GS_BM;
    f0 = (in / rows) * BF;
}

/* d[0..127] (+)= A B^T, m64n256k16, A and B from shared memory (descriptors, K-major A; B
 * K-major, or with TB = 1 stored [k][n] MN-major: the transpose bit) */
template <int TB>
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
                 "%128, %129, p, 1, 1, 0, %131;\n}\n"
                 : DXC_ACC32(d, 0), DXC_ACC32(d, 32), DXC_ACC32(d, 64), DXC_ACC32(d, 96)
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TB));
}

/* d[0..127] = A B^T, the same (write-only: the accumulator's old values are dead before) */
template <int TB>
__device__ __forceinline__ void wgmma_n256_first(float (&d)[128], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
                 "%128, %129, 0, 1, 1, 0, %130;\n"
                 : DXC_OUT32(d, 0), DXC_OUT32(d, 32), DXC_OUT32(d, 64), DXC_OUT32(d, 96)
                 : "l"(da), "l"(db), "n"(TB));
}

/* A K-major operand descriptor for rows of 64 bytes (32 bf16) with the 64-byte swizzle (TMA's
 * CU_TENSOR_MAP_SWIZZLE_64B: 16-byte chunk c of row r at chunk c ^ ((r / 2) % 4)): 8-row groups
 * 512 bytes apart, layout type 2 (CUTLASS's GmmaDescriptor, cute/arch/mma_sm90_desc.hpp) */
__device__ __forceinline__ uint64_t wg_desc_sw64(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(512 >> 4) << 32 | 2ull << 62;
}

/* 16 bytes of shared memory at addr into / from four registers */
__device__ __forceinline__ void lds128(uint32_t (&v)[4], uint32_t addr)
{
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(addr));
}
__device__ __forceinline__ void sts128(uint32_t addr, const uint32_t (&v)[4])
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
}
/* four 8 x 8 bf16 matrices from mma accumulator-layout registers; lane i gives row i % 8 of matrix i / 8 */
__device__ __forceinline__ void stmatrix4(uint32_t addr, const uint32_t (&v)[4])
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
}
/* (lo, hi) rounded to bf16, packed (lo in the low half) */
__device__ __forceinline__ uint32_t bf2(float lo, float hi)
{
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&b;
}
__device__ __forceinline__ float2 unbf2(uint32_t v) { return __bfloat1622float2(*(const __nv_bfloat162 *)&v); }

/* The producer thread: for each of the block's tiles and each of its KT stages, wait until the
 * ring slot is free ("empty"), announce STAGE_BYTES on its "full" barrier and load(stage, bar, kt,
 * m0, f0) issues the TMA copies into it. */
template <int ST, int STAGE_BYTES, int BF, class Load>
__device__ __forceinline__ void produce_tiles(int tiles, int tiles_m, int tiles_f, int KT, uint32_t base,
                                              uint32_t full, uint32_t empty, Load load)
{
    int it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int m0, f0;
        gs_tile<BF>(t, tiles_m, tiles_f, m0, f0);
        for (int kt = 0; kt < KT; kt++, it++) {
            const int s = it % ST, r = it / ST;
            if (r > 0) mbar_wait(empty + 8 * s, (r - 1) & 1);
            const uint32_t bar = full + 8 * s;
            mbar_expect_tx(bar, STAGE_BYTES);
            load(base + s * STAGE_BYTES, bar, kt, m0, f0);
        }
    }
}

/* A consumer warpgroup's products over one tile's KT stages of a ring of ST stages (ring position
 * `it`, advanced): wait for each stage's copies ("full"), issue(a, b, first) the stage's wgmmas on
 * the stage's A rows of this warpgroup (a: its 64 rows of A_ROW_BYTES) and its B (b) -- the
 * tile's first stage overwrites the accumulator, so its old values are dead and do not live
 * through an epilogue --, commit, call poll() (work of the warp's own that does not touch the
 * accumulator, e.g. the previous tile's deferred epilogue, overlapping the products), and
 * release the previous stage ("empty", one arrival per warp) once its products are done; the
 * last stage's after all are. */
template <int ST, int STAGE_BYTES, int A_BYTES, int A_ROW_BYTES, class Issue, class Poll>
__device__ __forceinline__ void consume_tile(int &it, int KT, uint32_t base, uint32_t full, uint32_t empty, int c,
                                             int lane, Issue issue, Poll poll)
{
    auto stage = [&](const bool first) {
        const int s = it % ST;
        mbar_wait(full + 8 * s, (it / ST) & 1);
        wg_fence();
        issue(base + s * STAGE_BYTES + c * 64 * A_ROW_BYTES, base + s * STAGE_BYTES + A_BYTES, first);
        wg_commit();
        poll(); /* while the stage's products run */
    };
    stage(true);
    it++;
    for (int kt = 1; kt < KT; kt++, it++) {
        stage(false);
        wg_wait<1>(); /* the previous stage's products are done: release it */
        if (lane == 0) mbar_arrive(empty + 8 * ((it - 1) % ST));
    }
    wg_wait<0>();
    if (lane == 0) mbar_arrive(empty + 8 * ((it - 1) % ST));
}
#endif

/* EPI = 0: the SwiGLU kernel above. EPI = 64 or 128, the attention's Q|K|V projection with RoPE
 * (kernels.h gemm_rope), head dim EPI: y[M, F] = x W^T over 128 x 256 tiles of y (W rows f0 ..
 * f0 + 255 as two 128-row boxes; tg = the map of y, tu and th unused), and before the rounding
 * each consumer rotates its accumulators of the columns below R (q's and k's heads): in the
 * accumulator layout a thread holding column i of a head (i < EPI / 2) holds column i + EPI / 2
 * too, so the pair (a, b) becomes (a cos - b sin, b cos + a sin) in registers with the cos / sin
 * table of dxc_rope_table (rtab, sine at sin_off; position = row % T); the epilogue warps only
 * store the tile. The rotation costs no memory pass: rope_fwd read and wrote q and k again. */
template <int EPI>
__global__ void __launch_bounds__(384, 1)
gemm_swiglu_wg(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
               const __grid_constant__ CUtensorMap tg, const __grid_constant__ CUtensorMap tu,
               const __grid_constant__ CUtensorMap th, int M, int F, int K, int ep,
               const float *__restrict__ rtab, size_t sin_off, int T, int R)
{
#ifdef DXC_HAVE_WGMMA
    constexpr int BF = EPI ? 2 * GS_BF : GS_BF; /* columns of y (EPI) or of g and of u per tile */
    extern __shared__ unsigned char gs_raw[];
    const uint32_t base = (smem_u32(gs_raw) + 1023) & ~1023u;
    const uint32_t epi = base + GS_STAGES * GS_STAGE_BYTES; /* consumer c's buffer at epi + c 16 KB: g box, then u box */
    const uint32_t full = epi + 2 * GS_EPI_BYTES, empty = full + 8 * GS_STAGES;
    const uint32_t epi_full = empty + 8 * GS_STAGES, epi_empty = epi_full + 16;
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;
    const int tiles_m = (M + GS_BM - 1) / GS_BM, tiles_f = (F + BF - 1) / BF;
    const int tiles = tiles_m * tiles_f, KT = (K + GS_BK - 1) / GS_BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < GS_STAGES; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 8); /* the consumers' 8 warps */
        }
        for (int c = 0; c < 2; c++) {
            mbar_init(epi_full + 8 * c, 4); /* consumer c's 4 warps have written g and u */
            mbar_init(epi_empty + 8 * c, 1); /* the epilogue warps are done with consumer c's buffers */
        }
        fence_mbar_init();
    }
    __syncthreads();
    if (wg == 0) {
        setmaxnreg_dec<40>();
        if (tid == 0) { /* the producer */
            produce_tiles<GS_STAGES, GS_STAGE_BYTES, BF>(
                tiles, tiles_m, tiles_f, KT, base, full, empty, [&](uint32_t a, uint32_t bar, int kt, int m0, int f0) {
                    const uint32_t b = a + GS_A_BYTES;
                    tma_load_2d(a, &tx, bar, kt * GS_BK, m0);
                    tma_load_2d(b, &tw, bar, kt * GS_BK, f0);
                    tma_load_2d(b + GS_B_BYTES / 2, &tw, bar, kt * GS_BK, EPI ? f0 + GS_BF : F + f0);
                });
        } else if (warp > 0 && ep != 2 && (!EPI || warp == 1)) {
            /* the epilogue warps (1-3, 96 threads): per tile and consumer, TMA-store its g and u,
             * compute h = swiglu_h(g, u) over the 64 x 128 tile in place of g once g's store has
             * read it, TMA-store h, and hand the buffers back. EPI > 0: warp 1 alone, its lane 0
             * TMA-storing the consumer's 64 x 256 piece of y (past M or F clipped) */
            const int et = tid - 32;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int m0, f0;
                gs_tile<BF>(t, tiles_m, tiles_f, m0, f0);
                for (int hf = 0; hf < 2; hf++) /* halves in order 0, 1: consumer c's half 1 comes later */
                    for (int c = 0; c < 2; c++) {
                        const uint32_t gb = epi + c * GS_EPI_BYTES, ub = gb + GS_EPI_BYTES / 2;
                        const int row0 = m0 + c * 64;
                        mbar_wait(epi_full + 8 * c, hf); /* its (2 n + hf)-th completion */
                        if constexpr (EPI != 0) {
                            if (et == 0) {
                                tma_store_2d(&tg, gb, f0 + 128 * hf, row0);
                                tma_store_2d(&tg, ub, f0 + 128 * hf + 64, row0);
                                bulk_commit();
                                bulk_wait_read<0>(); /* the stores have read the buffer: hand it back */
                                mbar_arrive(epi_empty + 8 * c);
                            }
                            __syncwarp(); /* the warp waits for epi_full together: none of it is a phase behind */
                            continue;
                        }
                        const int fc = f0 + 64 * hf; /* the half's 64 columns of g, u and h */
                        if (et == 0) {
                            tma_store_2d(&tg, gb, fc, row0);
                            bulk_commit();
                            tma_store_2d(&tu, ub, fc, row0);
                            bulk_commit();
                            bulk_wait_read<1>(); /* g's store has read its box */
                        }
                        bar_sync(3, 96);
                        for (int e = et; e < 64 * 64 / 8; e += 96) { /* 16-byte chunks, same place in g, u, h */
                            const uint32_t off = (uint32_t)e * 16;
                            uint32_t gv[4], uv[4], hv[4];
                            lds128(gv, gb + off);
                            lds128(uv, ub + off);
#pragma unroll
                            for (int i = 0; i < 4; i++) {
                                const float2 gf = unbf2(gv[i]), uf = unbf2(uv[i]);
                                hv[i] = bf2(swiglu_h(gf.x, uf.x), swiglu_h(gf.y, uf.y));
                            }
                            sts128(gb + off, hv);
                        }
                        fence_proxy_async();
                        bar_sync(3, 96);
                        if (et == 0) {
                            tma_store_2d(&th, gb, fc, row0);
                            bulk_commit();
                            bulk_wait_read<0>(); /* every store has read its box: hand the buffer back */
                            mbar_arrive(epi_empty + 8 * c);
                        }
                    }
            }
            if (et == 0) bulk_wait<false>(); /* the last stores complete before the block exits */
        }
    } else {
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        const uint32_t gb = epi + c * GS_EPI_BYTES;
        const int mi = lane >> 3, r = warp * 16 + 8 * (mi & 1) + (lane & 7);
        float acc[128];
        uint32_t pend[32]; /* the last tile's half 1, rounded, until this consumer's buffer is free */
        bool pending = false;
        /* half hf of the tile rounded to bf16 and packed in stmatrix's order: the half's 16 blocks of
         * 8 columns (accumulator blocks: SwiGLU g 8 hf .. 8 hf + 7 then u 16 + 8 hf .., else y 16 hf ..),
         * v[4 q + m] = matrix m of the pair of blocks (2 q, 2 q + 1): (block 2 q + m / 2, rows
         * 8 (m % 2) ..) of the warp's 16 rows */
        auto pack = [&](int hf, uint32_t(&v)[32]) {
#pragma unroll
            for (int q = 0; q < 8; q++)
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const int jl = 2 * q + (m >> 1), hr = m & 1;
                    const int jj = EPI ? 16 * hf + jl : (jl < 8 ? 8 * hf + jl : 16 + 8 * hf + jl - 8);
                    v[4 * q + m] = bf2(acc[4 * jj + 2 * hr], acc[4 * jj + 2 * hr + 1]);
                }
        };
        /* a packed half into the buffer (its two 64 x 64 boxes, 128-byte swizzle as the tensor
         * maps' boxes; lane i gives the address of row i % 8 of matrix i / 8), then epi_full */
        auto put = [&](const uint32_t(&v)[32]) {
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const int jm = 2 * q + (mi >> 1);
                const uint32_t w[4] = {v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]};
                stmatrix4(gb + (jm >> 3) * 8192 + r * 128 + (((jm & 7) ^ (r & 7)) << 4), w);
            }
            fence_proxy_async(); /* the TMA stores read what stmatrix wrote */
            __syncwarp();
            if (lane == 0) mbar_arrive(epi_full + 8 * c);
        };
        int it = 0, n = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, n++) {
            consume_tile<GS_STAGES, GS_STAGE_BYTES, GS_A_BYTES, 128>(
                it, KT, base, full, empty, c, lane,
                [&](uint32_t a, uint32_t b, bool first) {
                    if (first) wgmma_n256_first<0>(acc, wg_desc(a, 16), wg_desc(b, 16));
                    else wgmma_n256<0>(acc, wg_desc(a, 16), wg_desc(b, 16), 1);
#pragma unroll
                    for (int kk = 1; kk < GS_BK / 16; kk++)
                        wgmma_n256<0>(acc, wg_desc(a + 32 * kk, 16), wg_desc(b + 32 * kk, 16), 1);
                },
                [&] { /* the last tile's half 1 once half 0 has left the buffer (completion 2 n - 2) */
                    if (pending && __shfl_sync(0xffffffffu, mbar_test(epi_empty + 8 * c, 0), 0)) {
                        put(pend);
                        pending = false;
                    }
                });
            reg_fence(acc);
            if (ep == 2) { /* timing variant: no epilogue (results wrong) */
                if (acc[0] == 1234.5f && acc[127] == -1234.5f) base_sink(acc[64]);
                continue;
            }
            if constexpr (EPI != 0) { /* RoPE on the columns below R (whole heads of EPI) */
                constexpr int HJ = EPI / 8, HALF = EPI / 2; /* 8-column blocks per head */
                int m0, f0;
                gs_tile<BF>(t, tiles_m, tiles_f, m0, f0);
                const int lg = lane >> 2, lt = lane & 3;
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int pos = (m0 + 64 * c + 16 * warp + lg + 8 * hr) % T;
                    const float *tc = rtab + (size_t)pos * HALF, *ts = tc + sin_off;
                    float cs[HJ / 2][2], sn[HJ / 2][2]; /* i = 8 jj + 2 lt + e of every head */
#pragma unroll
                    for (int jj = 0; jj < HJ / 2; jj++) {
                        const float2 cv = __ldg(reinterpret_cast<const float2 *>(tc + 8 * jj + 2 * lt));
                        const float2 sv = __ldg(reinterpret_cast<const float2 *>(ts + 8 * jj + 2 * lt));
                        cs[jj][0] = cv.x;
                        cs[jj][1] = cv.y;
                        sn[jj][0] = sv.x;
                        sn[jj][1] = sv.y;
                    }
#pragma unroll
                    for (int j = 0; j < 32; j++) {
                        if (j % HJ >= HJ / 2 || f0 + 8 * j >= R) continue;
                        const int jj = j % HJ, p = j + HJ / 2;
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float a = acc[4 * j + 2 * hr + e], b = acc[4 * p + 2 * hr + e];
                            acc[4 * j + 2 * hr + e] = a * cs[jj][e] - b * sn[jj][e];
                            acc[4 * p + 2 * hr + e] = b * cs[jj][e] + a * sn[jj][e];
                        }
                    }
                }
            }
            /* Epilogue, in two halves so that 4 stages fit beside the buffers: half 0 into the
             * buffer now, half 1 kept packed in registers and written while the next tile's
             * products run (the poll above), once the epilogue warps have stored half 0. */
            if (pending) { /* the last tile's half 1 found no free buffer during this tile */
                mbar_wait(epi_empty + 8 * c, 0);
                put(pend);
            }
            uint32_t v0[32];
            pack(1, pend);
            pack(0, v0);
            if (n > 0) mbar_wait(epi_empty + 8 * c, 1); /* the last tile's half 1 has left (completion 2 n - 1) */
            put(v0);
            pending = true;
        }
        if (pending) {
            mbar_wait(epi_empty + 8 * c, 0);
            put(pend);
        }
    }
#endif
}


/* ---- the backward through the down projection ------------------------------------------------
 * dh = dy W_down (dy [M, K] K-major; W_down [K, F] row-major, so B is MN-major: the transpose
 * bit) over 128 x 256 tiles of dh (wgmma.m64n256k16 per consumer, as the forward's), rounded to
 * bf16 into shared memory by the consumers (stmatrix, as the forward's g); the epilogue warps
 * compute dg, du = swiglu_d(dh, g, u) and store them: dh never reaches global memory. Shared
 * memory holds a ring of 4 stages of 32-deep k slices (8 KB of dy: rows of 64 bytes with the
 * 64-byte swizzle; 16 KB of W_down: four 64 x 32 boxes, MN-major), the 64 KB dh tile (8 boxes of
 * 64 x 64: box k holds rows 64 (k / 4) .., columns 64 (k % 4) ..; consumer c writes boxes 4c ..
 * 4c + 3) and a ring of 4 slots of g and u boxes (8 KB each). The epilogue warps walk the tile's
 * 8 boxes ("units"): wait for the unit's g and u (TMA loads), compute dg, du in place, TMA-store
 * them, then load the unit 3 on into the slot the previous unit's stores have just read, so the
 * loads of three units are in flight while one is computed. 230.5 KB of shared memory: Hopper's
 * 227 KB opt-in limit. (Against the first version's 128 x 128 tiles with one g|u buffer per tile:
 * NOTES item 18.) */
constexpr int GB_BN = 256, GB_BK = 32, GB_STAGES = 4;
constexpr int GB_A_BYTES = 128 * GB_BK * 2, GB_B_BYTES = GB_BK * GB_BN * 2; /* 8 KB, 16 KB */
constexpr int GB_STAGE_BYTES = GB_A_BYTES + GB_B_BYTES;                      /* 24 KB */
constexpr int GB_DH_BYTES = 128 * GB_BN * 2, GB_GU_BYTES = 4 * 64 * 64 * 2;  /* 64 KB, 32 KB */
constexpr size_t gb_smem()
{
    return 1024 + (size_t)GB_STAGES * GB_STAGE_BYTES + GB_DH_BYTES + 2 * GB_GU_BYTES + 128;
}

__global__ void __launch_bounds__(384, 1)
gemm_swiglu_bwd_wg(const __grid_constant__ CUtensorMap tdy, const __grid_constant__ CUtensorMap tw,
                    const __grid_constant__ CUtensorMap tg, const __grid_constant__ CUtensorMap tu,
                    const __grid_constant__ CUtensorMap tdg, const __grid_constant__ CUtensorMap tdu, int M, int F,
                    int K)
{
#ifdef DXC_HAVE_WGMMA
    extern __shared__ unsigned char gs_raw[];
    const uint32_t base = (smem_u32(gs_raw) + 1023) & ~1023u;
    const uint32_t dhb = base + GB_STAGES * GB_STAGE_BYTES, gbuf = dhb + GB_DH_BYTES, ubuf = gbuf + GB_GU_BYTES;
    const uint32_t full = ubuf + GB_GU_BYTES, empty = full + 8 * GB_STAGES;
    const uint32_t epi_full = empty + 8 * GB_STAGES, epi_empty = epi_full + 16, gu_full = epi_empty + 16;
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;
    const int tiles_m = (M + 127) / 128, tiles_f = (F + GB_BN - 1) / GB_BN;
    const int tiles = tiles_m * tiles_f, KT = (K + GB_BK - 1) / GB_BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < GB_STAGES; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 8);
        }
        for (int c = 0; c < 2; c++) {
            mbar_init(epi_full + 8 * c, 4);
            mbar_init(epi_empty + 8 * c, 1);
        }
        for (int sl = 0; sl < 4; sl++) mbar_init(gu_full + 8 * sl, 1);
        fence_mbar_init();
    }
    __syncthreads();
    if (wg == 0) {
        setmaxnreg_dec<72>(); /* 128 x 72 + 256 x 216 = 384 x 168 registers */
        if (tid == 0) { /* the producer */
            produce_tiles<GB_STAGES, GB_STAGE_BYTES, GB_BN>(
                tiles, tiles_m, tiles_f, KT, base, full, empty, [&](uint32_t a, uint32_t bar, int kt, int m0, int f0) {
                    tma_load_2d(a, &tdy, bar, kt * GB_BK, m0);
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        tma_load_2d(a + GB_A_BYTES + q * 4096, &tw, bar, f0 + 64 * q, kt * GB_BK);
                });
        } else if (warp > 0) { /* the epilogue warps */
            const int et = tid - 32;
            /* unit u of this block: box k = u % 8 of its tile n = u / 8 (rows 64 (k / 4) .., columns
             * 64 (k % 4) ..; dh's box k), g and u in ring slot u % 4 (gu_full + 8 slot) */
            auto unit = [&](int u, int &c0, int &r0) {
                const int t = blockIdx.x + (u >> 3) * gridDim.x, k = u & 7;
                if (t >= tiles) return false;
                gs_tile<GB_BN>(t, tiles_m, tiles_f, r0, c0);
                c0 += 64 * (k & 3);
                r0 += 64 * (k >> 2);
                return true;
            };
            auto load_unit = [&](int u) {
                int c0, r0;
                if (!unit(u, c0, r0)) return;
                const uint32_t sl = (uint32_t)(u & 3), bar = gu_full + 8 * sl;
                mbar_expect_tx(bar, 2 * 8192);
                tma_load_2d(gbuf + sl * 8192, &tg, bar, c0, r0);
                tma_load_2d(ubuf + sl * 8192, &tu, bar, c0, r0);
            };
            if (et == 0)
                for (int u = 0; u < 3; u++) load_unit(u);
            int n = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, n++) {
                for (int k = 0; k < 8; k++) {
                    const int u = 8 * n + k;
                    const uint32_t sl = (uint32_t)(u & 3);
                    if ((k & 3) == 0) mbar_wait(epi_full + 8 * (k >> 2), n & 1); /* consumer k / 4's dh */
                    mbar_wait(gu_full + 8 * sl, (u >> 2) & 1);
                    /* 16-byte chunks, the same place in dh's box k and the slot's g and u */
                    for (int e = et; e < 64 * 64 / 8; e += 96) {
                        const uint32_t w = (uint32_t)e * 16, off = sl * 8192 + w;
                        uint32_t hv[4], gv[4], uv[4];
                        lds128(hv, dhb + (uint32_t)k * 8192 + w);
                        lds128(gv, gbuf + off);
                        lds128(uv, ubuf + off);
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const float2 hf = unbf2(hv[i]), gf = unbf2(gv[i]), uf = unbf2(uv[i]);
                            float dg0, du0, dg1, du1;
                            swiglu_d(hf.x, gf.x, uf.x, dg0, du0);
                            swiglu_d(hf.y, gf.y, uf.y, dg1, du1);
                            gv[i] = bf2(dg0, dg1); /* dg over g, du over u */
                            uv[i] = bf2(du0, du1);
                        }
                        sts128(gbuf + off, gv);
                        sts128(ubuf + off, uv);
                    }
                    fence_proxy_async();
                    bar_sync(3, 96);
                    if (et == 0) {
                        if ((k & 3) == 3) mbar_arrive(epi_empty + 8 * (k >> 2)); /* consumer k / 4's dh read */
                        int c0, r0;
                        unit(u, c0, r0);
                        tma_store_2d(&tdg, gbuf + sl * 8192, c0, r0);
                        tma_store_2d(&tdu, ubuf + sl * 8192, c0, r0);
                        bulk_commit();
                        bulk_wait_read<1>(); /* unit u - 1's stores have read slot (u + 3) % 4 */
                        load_unit(u + 3);
                    }
                }
            }
            if (et == 0) bulk_wait<false>();
        }
    } else {
        setmaxnreg_inc<216>();
        const int c = wg - 1;
        float acc[128];
        int it = 0, n = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, n++) {
            consume_tile<GB_STAGES, GB_STAGE_BYTES, GB_A_BYTES, 64>(
                it, KT, base, full, empty, c, lane, [&](uint32_t a, uint32_t b, bool first) {
                    /* A: 64-byte rows, k-step 1 32 bytes on; B: k rows of 128 bytes in boxes of 64
                     * columns (LBO 4 KB), k-step 1 16 rows on */
                    if (first) wgmma_n256_first<1>(acc, wg_desc_sw64(a), wg_desc(b, 4096));
                    else wgmma_n256<1>(acc, wg_desc_sw64(a), wg_desc(b, 4096), 1);
                    wgmma_n256<1>(acc, wg_desc_sw64(a + 32), wg_desc(b + 16 * 128, 4096), 1);
                },
                [] {});
            reg_fence(acc);
            /* dh rounded to bf16 into this consumer's 64 rows of the dh buffer (boxes 4c .. 4c + 3) */
            if (n > 0) mbar_wait(epi_empty + 8 * c, (n - 1) & 1);
            const uint32_t hb = dhb + c * 4 * 8192;
            const int mi = lane >> 3, r = warp * 16 + 8 * (mi & 1) + (lane & 7);
#pragma unroll
            for (int j = 0; j < 32; j += 2) {
                uint32_t v[4];
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const int jj = j + (m >> 1), hr = m & 1;
                    v[m] = bf2(acc[4 * jj + 2 * hr], acc[4 * jj + 2 * hr + 1]);
                }
                const int jm = j + (mi >> 1);
                stmatrix4(hb + (jm >> 3) * 8192 + r * 128 + (((jm & 7) ^ (r & 7)) << 4), v);
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(epi_full + 8 * c);
        }
    }
#endif
}

/* the persistent grids' block count: every SM, or DX_CUDA_GEMM_SMS's target (SMs left to NCCL) */
int grid_sms(const dxc_impl *im) { return im->gemm_sms > 0 && im->gemm_sms < im->num_sms ? im->gemm_sms : im->num_sms; }

/* the kernel's shared-memory limit raised once per device (bit `which` of gemm_wg_smem) */
void wg_smem(dx_backend *be, const void *func, size_t bytes, int which, const char *op)
{
    if (dxc(be)->gemm_wg_smem & which) return;
    dxc_set_smem(be, func, bytes, op);
    dxc(be)->gemm_wg_smem |= which;
}

} /* namespace */

int dxc_gemm_swiglu(dx_backend *be, void *g, void *u, int ldgu, void *h, int ldh, const void *x, int ldx,
                    const void *w, int ldw, int M, int F, int K)
{
    dxc_impl *im = dxc(be);
    if (!im->wgmma || (size_t)im->smem_optin < gs_smem() || M < 1 || F < 1 || K < 1 || F % 8 || K % 8 || ldx % 8 ||
        ldw % 8 || ldgu % 8 || ldh % 8 ||
        ((uintptr_t)x | (uintptr_t)w | (uintptr_t)g | (uintptr_t)u | (uintptr_t)h) % 16)
        return 1;
    CUtensorMap tx, tw, tg, tu, th;
    if (tensor_map(&tx, x, (uint64_t)M, (uint64_t)K, (uint64_t)ldx, GS_BM) ||
        tensor_map(&tw, w, 2 * (uint64_t)F, (uint64_t)K, (uint64_t)ldw, GS_BF) ||
        tensor_map(&tg, g, (uint64_t)M, (uint64_t)F, (uint64_t)ldgu, 64) ||
        tensor_map(&tu, u, (uint64_t)M, (uint64_t)F, (uint64_t)ldgu, 64) ||
        tensor_map(&th, h, (uint64_t)M, (uint64_t)F, (uint64_t)ldh, 64))
        return 1;
    DXC_ENTER(be, "gemm_swiglu");
    wg_smem(be, (const void *)gemm_swiglu_wg<0>, gs_smem(), 1, "gemm_swiglu");
    const int tiles = ((M + GS_BM - 1) / GS_BM) * ((F + GS_BF - 1) / GS_BF);
    gemm_swiglu_wg<0><<<min(tiles, grid_sms(im)), 384, gs_smem(), im->stream>>>(tx, tw, tg, tu, th, M, F, K,
                                                                                 im->gemm_wg_ep, nullptr, 0, 1, 0);
    DXC_LAUNCHED(be, "gemm_swiglu");
    return 0;
}

int dxc_gemm_rope_fits(dx_backend *be, const void *y, int ldy, const void *x, int ldx, const void *w, int ldw, int M,
                       int F, int K, int T, int R, int Dh)
{
    const dxc_impl *im = dxc(be);
    return im->wgmma && (size_t)im->smem_optin >= gs_smem() && M >= 1 && F >= 1 && K >= 1 && T >= 1 && F % 8 == 0 &&
           K % 8 == 0 && ldx % 8 == 0 && ldw % 8 == 0 && ldy % 8 == 0 && (Dh == 64 || Dh == 128) && R >= 0 &&
           R % Dh == 0 && R <= F && ((uintptr_t)x | (uintptr_t)w | (uintptr_t)y) % 16 == 0 && encode_tiled();
}

int dxc_gemm_rope(dx_backend *be, void *y, int ldy, const void *x, int ldx, const void *w, int ldw, int M, int F, int K,
                  int T, int R, int Dh, float theta)
{
    dxc_impl *im = dxc(be);
    if (!dxc_gemm_rope_fits(be, y, ldy, x, ldx, w, ldw, M, F, K, T, R, Dh)) return 1;
    CUtensorMap tx, tw, ty;
    if (tensor_map(&tx, x, (uint64_t)M, (uint64_t)K, (uint64_t)ldx, GS_BM) ||
        tensor_map(&tw, w, (uint64_t)F, (uint64_t)K, (uint64_t)ldw, GS_BF) ||
        tensor_map(&ty, y, (uint64_t)M, (uint64_t)F, (uint64_t)ldy, 64))
        return 1;
    DXC_ENTER(be, "gemm_rope");
    size_t sin_off;
    const float *tab = dxc_rope_table(be, T, Dh, theta, &sin_off, "gemm_rope");
    const int tiles = ((M + GS_BM - 1) / GS_BM) * ((F + 2 * GS_BF - 1) / (2 * GS_BF));
    auto kern = Dh == 64 ? gemm_swiglu_wg<64> : gemm_swiglu_wg<128>;
    wg_smem(be, (const void *)kern, gs_smem(), Dh == 64 ? 4 : 8, "gemm_rope");
    kern<<<min(tiles, grid_sms(im)), 384, gs_smem(), im->stream>>>(tx, tw, ty, ty, ty, M, F, K, im->gemm_wg_ep, tab,
                                                                 sin_off, T, R);
    DXC_LAUNCHED(be, "gemm_rope");
    return 0;
}

extern "C" int dx_cuda_gemm_wg(dx_backend *be, void *y, int ldy, const void *x, int ldx, const void *w, int ldw, int M,
                               int F, int K)
{
    if (dxc_gemm_rope(be, y, ldy, x, ldx, w, ldw, M, F, K, 1, 0, 64, 10000.0f))
        return dx_fail("gemm_wg: not on this device, shape M %d F %d K %d or alignment", M, F, K);
    return 0;
}

extern "C" int dx_cuda_gemm_swiglu(dx_backend *be, void *g, void *u, int ldgu, void *h, int ldh, const void *x,
                                   int ldx, const void *w, int ldw, int M, int F, int K)
{
    if (dxc_gemm_swiglu(be, g, u, ldgu, h, ldh, x, ldx, w, ldw, M, F, K))
        return dx_fail("gemm_swiglu: not on this device, shape M %d F %d K %d or alignment", M, F, K);
    return 0;
}

int dxc_gemm_swiglu_bwd(dx_backend *be, void *dg, void *du, const void *g, const void *u, int ldgu, const void *dy,
                        int ldy, const void *w, int ldw, int M, int F, int K)
{
    dxc_impl *im = dxc(be);
    if (!im->wgmma || (size_t)im->smem_optin < gb_smem() || M < 1 || F < 1 || K < 1 || F % 8 || K % 8 || ldy % 8 ||
        ldw % 8 || ldgu % 8 ||
        ((uintptr_t)dg | (uintptr_t)du | (uintptr_t)g | (uintptr_t)u | (uintptr_t)dy | (uintptr_t)w) % 16)
        return 1;
    CUtensorMap tdy, tw, tg, tu, tdg, tdu;
    if (tensor_map(&tdy, dy, (uint64_t)M, (uint64_t)K, (uint64_t)ldy, 128, GB_BK) ||
        tensor_map(&tw, w, (uint64_t)K, (uint64_t)F, (uint64_t)ldw, GB_BK) ||
        tensor_map(&tg, g, (uint64_t)M, (uint64_t)F, (uint64_t)ldgu, 64) ||
        tensor_map(&tu, u, (uint64_t)M, (uint64_t)F, (uint64_t)ldgu, 64) ||
        tensor_map(&tdg, dg, (uint64_t)M, (uint64_t)F, (uint64_t)ldgu, 64) ||
        tensor_map(&tdu, du, (uint64_t)M, (uint64_t)F, (uint64_t)ldgu, 64))
        return 1;
    DXC_ENTER(be, "gemm_swiglu_bwd");
    wg_smem(be, (const void *)gemm_swiglu_bwd_wg, gb_smem(), 2, "gemm_swiglu_bwd");
    const int tiles = ((M + 127) / 128) * ((F + GB_BN - 1) / GB_BN);
    gemm_swiglu_bwd_wg<<<min(tiles, grid_sms(im)), 384, gb_smem(), im->stream>>>(tdy, tw, tg, tu, tdg, tdu, M, F,
                                                                                   K);
    DXC_LAUNCHED(be, "gemm_swiglu_bwd");
    return 0;
}

extern "C" int dx_cuda_gemm_swiglu_bwd(dx_backend *be, void *dg, void *du, const void *g, const void *u, int ldgu,
                                       const void *dy, int ldy, const void *w, int ldw, int M, int F, int K)
{
    if (dxc_gemm_swiglu_bwd(be, dg, du, g, u, ldgu, dy, ldy, w, ldw, M, F, K))
        return dx_fail("gemm_swiglu_bwd: not on this device, shape M %d F %d K %d or alignment", M, F, K);
    return 0;
}
