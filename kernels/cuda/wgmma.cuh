/* dissect CUDA backend: PTX wrappers shared by the tensor-core kernels (attention_mma.cu,
 * gemm_wg.cu): cp.async, ldmatrix, mma.sync, and on sm_90a warpgroup MMAs (wgmma), their shared-
 * memory descriptors with the 128-byte swizzle, mbarriers, named barriers, setmaxnreg and bulk
 * copies. Not a public header; include it after cuda_internal.cuh. PTX ISA 8.x sections named at
 * each wrapper.
 *
 * Shared memory tiles for wgmma use the 128-byte swizzle of the operand descriptors: a tile of R
 * rows of W bf16 is W/64 column blocks of [R][64]; row r of a block is 128 bytes at r*128, its
 * 16-byte chunk c stored at chunk c ^ (r % 8); tiles start 1024-byte aligned. K-major
 * descriptors: stride between 8-row groups 1024 bytes; the k-th 16 columns start 32k bytes into a
 * block. MN-major: 8-row groups 1024 bytes apart, column blocks R*128 bytes apart (CUTLASS's
 * GmmaDescriptor, cute/arch/mma_sm90_desc.hpp, for the encoding). */
#ifndef DX_CUDA_WGMMA_CUH
#define DX_CUDA_WGMMA_CUH

#include "cuda_internal.cuh"

#include <cuda.h> /* CUtensorMap and its enums (the runtime's driver entry point gives the encoder) */

namespace {

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


#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DXC_HAVE_WGMMA 1
#endif
#ifdef DXC_HAVE_WGMMA /* (the compute_90 PTX and the host pass have no use for these) */

/* 64-bit shared-memory matrix descriptor, 128-byte swizzle; addr and lbo in bytes */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)(1024 >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* keeps the compiler from moving accesses of accumulator registers across a wgmma wait */
template <int N> __device__ __forceinline__ void reg_fence(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* orders this thread's earlier generic-proxy shared-memory writes (cp.async included) before
 * later reads by the tensor cores (async proxy) */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* accumulator registers d[o..o+7] (d[o..o+31]) as in-out operands of an asm statement */
#define DXC_ACC8(d, o)                                                                     \
    "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]),              \
        "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
#define DXC_ACC32(d, o) DXC_ACC8(d, o), DXC_ACC8(d, o + 8), DXC_ACC8(d, o + 16), DXC_ACC8(d, o + 24)

/* d[0..31] (+)= A B^T, m64n64k16, A and B from shared memory (descriptors, K-major) */
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : DXC_ACC32(d, 0)
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d[0..63] (+)= A B^T, m64n128k16, A and B from shared memory (descriptors, K-major) */
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
                 "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
                 "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : DXC_ACC32(d, 0), DXC_ACC32(d, 32)
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d[0..31] += A B, m64n64k16, A from registers (the mma.m16n8k16 A fragment of this
 * warp's 16 rows), B from shared memory, stored [k][n] (descriptor, MN-major, transposed) */
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : DXC_ACC32(d, 0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* d[0..63] += A B, m64n128k16, A from registers (the mma.m16n8k16 A fragment of this
 * warp's 16 rows), B from shared memory, stored [k][n] (descriptor, MN-major, transposed) */
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
                 "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
                 "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : DXC_ACC32(d, 0), DXC_ACC32(d, 32)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* d[0..31] (+)= A B, m64n64k16, A [m][k] and B [k][n] from shared memory both stored with the
 * k index over rows (descriptors, MN-major: A and B transposed) */
__device__ __forceinline__ void wgmma_ss_tt(float (&d)[32], uint64_t da, uint64_t db,
                                            int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 "%32, %33, p, 1, 1, 1, 1;\n}\n"
                 : DXC_ACC32(d, 0)
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* mbarrier (PTX ISA "Parallel Synchronization and Communication Instructions: mbarrier") */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* the barrier's phase `parity` (0 or 1) has completed */
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity)
{
    asm volatile("{\n.reg .pred p;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* 1 if the barrier's phase `parity` has completed, else 0, without waiting (test_wait) */
__device__ __forceinline__ int mbar_test(uint32_t bar, int parity)
{
    uint32_t done;
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return (int)done;
}
/* one arrival on bar once every cp.async this thread issued before has landed (the barrier's
 * count includes it: .noinc) */
__device__ __forceinline__ void cp_async_arrive(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* named barrier `id` over n threads: wait for it / arrive without waiting */
__device__ __forceinline__ void bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* global dst[0 .. bytes/4) += shared src[0 .. bytes/4) (fp32), one bulk asynchronous reduction by
 * the calling thread (the TMA unit reads src after the call; bytes a multiple of 16, both
 * 16-byte aligned); completes in this thread's bulk group */
__device__ __forceinline__ void bulk_red_add_f32(float *dst, uint32_t src, int bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
/* global dst[0 .. bytes) = shared src[0 .. bytes), one bulk asynchronous copy by the calling
 * thread (alignment as bulk_red_add_f32); completes in this thread's bulk group */
__device__ __forceinline__ void bulk_copy_s2g(void *dst, uint32_t src, int bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
/* shared dst[0 .. bytes) = global src[0 .. bytes), one bulk asynchronous copy by the calling
 * thread, completing on mbarrier bar's transaction count (16-byte alignment, bytes % 16 == 0) */
__device__ __forceinline__ void bulk_load_g2s(uint32_t dst, const void *src, int bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* this thread's bulk groups have finished reading shared memory (READ) or completed */
/* at most N of this thread's bulk groups are still reading shared memory */
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/* all but the N most recent of this thread's bulk groups have completed (their writes to global
 * memory performed) */
template <int N> __device__ __forceinline__ void bulk_wait_n()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
template <bool READ> __device__ __forceinline__ void bulk_wait()
{
    if (READ) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/* TMA (PTX ISA "Data Movement and Conversion Instructions: cp.async.bulk.tensor"): copies of a
 * tensor map's box, issued by one thread, completing on an mbarrier's transaction count */

/* the stage's transaction count: this arrival also expects `bytes` of TMA copies */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* dst (shared) <- the box of `map` at coordinates (c0 inner, c1 outer); completes on bar */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
/* dst (shared) <- the box of a 3-D `map` at (c0 inner, c1, c2 outer); completes on bar */
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1,
                                            int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
/* the box of `map` at (c0 inner, c1 outer) <- src (shared); in this thread's bulk group */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"((uint64_t)map), "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
/* the mbarrier inits of this thread are visible to the TMA unit (async proxy) */
__device__ __forceinline__ void fence_mbar_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* dst (shared-space address, swizzled [DH/64][ROWS][64] tile) <- rows r0 .. r0+ROWS-1 of src
 * (row stride `stride` elements), rows >= T zero-filled; NT threads numbered from tid, 16-byte
 * copies */
template <int DH, int ROWS, int NT>
__device__ __forceinline__ void tile_async_sw(uint32_t dst, const bf16 *__restrict__ src,
                                              size_t stride, int r0, int T, int tid)
{
    constexpr int CPR = DH / 8;
#pragma unroll
    for (int e = tid; e < ROWS * CPR; e += NT) {
        const int r = e / CPR, c = e % CPR, gr = r0 + r;
        const bool in = gr < T;
        cp_async16(dst + (c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4),
                   src + (size_t)(in ? gr : 0) * stride + c * 8, in);
    }
}
#endif /* DXC_HAVE_WGMMA */

/* ---- TMA tensor maps (host) ------------------------------------------------------------- */

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled from the driver, through the runtime (dissect links no libcuda); NULL
 * where the driver lacks it */
inline encode_tiled_fn encode_tiled()
{
    static encode_tiled_fn fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (encode_tiled_fn)p;
    }
    return fn;
}

/* a 2-D bf16 tensor map over rows x cols (row stride ld elements), box box_cols x box_rows, with
 * the 128-byte swizzle (the wgmma K-major layout above) or, for boxes of 32 columns, the 64-byte
 * swizzle (wg_desc_sw64). Returns 0, or -1 where the encoder is missing or refuses (p or ld * 2
 * not a multiple of 16 bytes, a box over 256 rows). Reads past the edges fill with zeros. */
inline int tensor_map(CUtensorMap *m, const void *p, uint64_t rows, uint64_t cols, uint64_t ld, uint32_t box_rows,
                      uint32_t box_cols = 64)
{
    encode_tiled_fn fn = encode_tiled();
    if (!fn) return -1;
    const cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * 2};
    const cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
              box_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? 0
               : -1;
}

/* a 3-D bf16 tensor map over [batches][rows][cols] (row stride ld elements, batch stride rows x
 * ld), boxes of 64 columns x box_rows rows of one batch with the 128-byte swizzle: a sequence's
 * rows past `rows` read as zeros instead of the next sequence's. Returns 0 or -1 as tensor_map. */
inline int tensor_map_3d(CUtensorMap *m, const void *p, uint64_t batches, uint64_t rows, uint64_t cols, uint64_t ld,
                         uint32_t box_rows)
{
    encode_tiled_fn fn = encode_tiled();
    if (!fn) return -1;
    const cuuint64_t dims[3] = {cols, rows, batches}, strides[2] = {ld * 2, rows * ld * 2};
    const cuuint32_t box[3] = {64, box_rows, 1}, es[3] = {1, 1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? 0
               : -1;
}

} /* namespace */

#endif
