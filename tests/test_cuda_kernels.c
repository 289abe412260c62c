/* dissect: tests of the CUDA backend (bf16 activations, f32 accumulators) against its CPU twin
 * (the "cpu" f32 backend, itself tested against float64 references in test_kernels.c).
 *
 * For every op and several shapes (odd sizes included): fresh random inputs, rounded to bf16
 * where the CUDA op reads X (bf16), so that both backends see exactly the same numbers; CUDA
 * outputs poisoned with 0xFF bytes (NaN in bf16 and f32) before each call, so elements left
 * unwritten fail; "(+=)" outputs prefilled with the same random values on both sides. Each
 * output is compared by its relative L2 error ||gpu - cpu|| / ||cpu|| (NaN anywhere fails;
 * a reference with RMS below 1e-3 for bf16 outputs, 1e-6 for f32 ones, is compared absolutely:
 * e.g. dq at T = 1 is exactly 0 on the CPU and rounding noise on the GPU):
 *   bf16 outputs                               < 1e-2  (one bf16 rounding is 2^-9 ~ 2e-3)
 *   f32 outputs computed from exact inputs     < 1e-5
 *     except gemm with an f32 C: < 1e-4, because tensor-core fp32 accumulation is not IEEE
 *     round-to-nearest (alignment and truncation inside the MMA: Fasi et al. 2021,
 *     "Numerical behavior of NVIDIA tensor cores"), so its error grows faster with K than
 *     the CPU's sgemm;
 *   copies and conversions that must be exact  == 0  (mismatching elements counted).
 * gemm is checked with odd row strides (cublasGemmEx) and, at 2^30 and 2^31 multiply-adds, with
 * dense ones, which take the backend's cuBLASLt route and its choice of algorithm.
 * Attention is checked nine times: with the tensor-core kernels (default, "[tc]": fused
 * backward with fp32 atomics or bulk reductions for dq), the same with DX_CUDA_DETERMINISTIC=1 ("[tc-det]": the
 * two-kernel backward; also DX_CUDA_ATT_GRID=7, so that the Hopper forward's persistent blocks
 * each walk several work tiles), with the CUDA-core ones (DX_CUDA_ATTENTION=simple, "[simple]")
 * and with the tensor-core ones again, the Hopper backward's blocks launched in chunks of 3
 * (b, kv head) pairs (DX_CUDA_ATT_CHUNK=3, "[tc-chunk]"; with the Hopper forward's
 * longest-first order on 7 persistent blocks, DX_CUDA_ATT_FWD=15), and three more times with the Hopper
 * backward's other handlings of dq (by default, at these lengths, a producer warp copies each
 * piece's first contribution and adds the others, then a separate pass converts dq): its
 * accumulator zeroed first, every contribution added by that warp and each tile converted in the
 * kernel once complete (DX_CUDA_ATT_BWD=16, "[tc-add]"), the first contributions copied and the
 * tiles converted in the kernel (17, "[tc-conv]"), and every contribution added by the
 * consumers, then the separate pass (14, "[tc-sep]"); and on the
 * Hopper backward's key-tile-major grid (DX_CUDA_ATT_BWD=10, "[tc-keymaj]"), and with its 64-query
 * tiles at Dh 64 (DX_CUDA_ATT_BWD=21, "[tc-q64]"; the default has 128-query tiles since
 * 2026-11-28). Every pass also checks Dh 64 shapes past seq 1024 (B 1 T 1100) and 2048 (B 1
 * T 2100), where the Hopper backward with 64-query tiles (T 1100: pass [tc-q64]) and with
 * 128-query tiles (T 2100) zeroes its dq accumulator and adds every contribution instead of
 * copying each piece's first one. Every pass checks the backward both
 * as attention_bwd and as attention_bwd_rope (RoPE's backward folded in; the backend's
 * default, which the test forces with DX_CUDA_ROPE_FOLD=1 in case the caller's environment
 * turned it off).
 * Prints one line per output: op, shape, error, bound, ok; then "N passed, M failed" and exits
 * 1 on any failure. Attention is also timed with CUDA events (informative only; the two
 * training-size timings, medians of 7 runs, are skipped when DX_CUDA_TEST_NO_PERF is set).
 * DX_CUDA_TEST_ONLY=attention runs the attention checks and timings only; =embedding the
 * embedding's checks only; =power the device's energy and power-limit counters only.
 * Without a CUDA device it prints "no CUDA device: skipped" and exits 77 (meson's skip code).
 */
#include "common/common.h"
#include "cuda/cuda_backend.h"
#include "kernels.h"
#include "nf4.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dx_backend *gpu, *cpu;
static int n_pass, n_fail;
static const char *att_tag = ""; /* attention implementation in the op names */

/* ---- reporting ---- */

static void report(const char *op, const char *shape, double err, double bound)
{
    int ok = bound == 0 ? err == 0 : err < bound; /* NaN fails either way */
    printf("%-30s %-40s %11.3e %8.0e  %s\n", op, shape, err, bound, ok ? "ok" : "FAIL");
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

static void die(const char *what)
{
    fprintf(stderr, "test_cuda_kernels: %s: %s\n", what, dx_last_error());
    exit(2);
}

/* ---- host data ---- */

static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static void *xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_cuda_kernels: out of host memory\n");
        exit(2);
    }
    return p;
}

/* shift + scale * N(0,1), rounded to bf16 if bf (else exact float) */
static float *hrand(size_t n, uint64_t seed, double scale, double shift, int bf)
{
    float *p = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float f = (float)(shift + scale * dx_normal(seed, 11, i));
        p[i] = bf ? bf16_round(f) : f;
    }
    return p;
}

static float *hcopy(const float *x, size_t n)
{
    float *p = xmalloc(n * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* relative L2 error; references with RMS below `floor` are compared absolutely */
static double relerr_f(const float *a, const float *ref, size_t n, double floor)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den < floor * floor * (double)n) den = floor * floor * (double)n;
    return sqrt(num / den);
}

static double relerr(const float *a, const float *ref, size_t n)
{
    return relerr_f(a, ref, n, 1e-6);
}

/* relerr over the M x N blocks of two matrices with rows ld elements apart (the padding left out) */
static double relerr_rows(const float *a, const float *ref, int M, int N, int ld)
{
    float *blk = xmalloc((size_t)M * N * sizeof(float)), *rblk = xmalloc((size_t)M * N * sizeof(float));
    for (int i = 0; i < M; i++) {
        memcpy(blk + (size_t)i * N, a + (size_t)i * ld, (size_t)N * sizeof(float));
        memcpy(rblk + (size_t)i * N, ref + (size_t)i * ld, (size_t)N * sizeof(float));
    }
    double e = relerr(blk, rblk, (size_t)M * N);
    free(blk);
    free(rblk);
    return e;
}

static double mismatches(const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) bad++;
    return (double)bad;
}

/* ---- GPU buffers (dtype given per buffer) and CPU buffers (f32) ---- */

static void poison(void *p, size_t bytes)
{
    if (cudaMemsetAsync(p, 0xFF, bytes, (cudaStream_t)dx_cuda_stream(gpu)) != cudaSuccess) {
        fprintf(stderr, "test_cuda_kernels: cudaMemsetAsync failed\n");
        exit(2);
    }
}

static void *g_alloc(size_t n, dx_dtype dt)
{
    void *p = gpu->alloc(gpu, (n ? n : 1) * dx_dtype_size(dt), DX_MEM_OTHER);
    if (!p) die("gpu alloc");
    return p;
}

static void *g_from(const float *h, size_t n, dx_dtype dt)
{
    void *p = g_alloc(n, dt);
    if (gpu->upload_f32(gpu, p, dt, h, n)) die("gpu upload_f32");
    return p;
}

static void *g_nan(size_t n, dx_dtype dt)
{
    void *p = g_alloc(n, dt);
    poison(p, n * dx_dtype_size(dt));
    return p;
}

static float *g_get(const void *p, size_t n, dx_dtype dt)
{
    float *h = xmalloc(n * sizeof(float));
    if (gpu->download_f32(gpu, h, p, dt, n)) die("gpu download_f32");
    return h;
}

static void *g_ints(const int32_t *h, size_t n)
{
    void *p = gpu->alloc(gpu, (n ? n : 1) * sizeof(int32_t), DX_MEM_OTHER);
    if (!p || gpu->upload(gpu, p, h, n * sizeof(int32_t))) die("gpu ints");
    return p;
}

static void *c_from(const float *h, size_t n)
{
    void *p = cpu->alloc(cpu, (n ? n : 1) * sizeof(float), DX_MEM_OTHER);
    if (!p) die("cpu alloc");
    memcpy(p, h, n * sizeof(float));
    return p;
}

static void *c_nan(size_t n)
{
    void *p = cpu->alloc(cpu, (n ? n : 1) * sizeof(float), DX_MEM_OTHER);
    if (!p) die("cpu alloc");
    for (size_t i = 0; i < n; i++) ((float *)p)[i] = NAN;
    return p;
}

static void gfree(void *p) { gpu->free(gpu, p); }
static void cfree(void *p) { cpu->free(cpu, p); }

#define BF DX_BF16
#define F32 DX_F32

/* Row-strided layouts (the fused K|V and gate|up GEMM outputs): rows of `cols` values in rows
 * `ld` apart, the gap filled with `fill`. wide() builds one from a dense [rows, cols] array;
 * narrow() takes the dense part back out; gap_kept() says whether every gap value is still fill. */
static float *wide(const float *x, size_t rows, size_t cols, size_t ld, float fill)
{
    float *w = xmalloc(rows * ld * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++) w[r * ld + c] = c < cols ? x[r * cols + c] : fill;
    return w;
}
static float *narrow(const float *w, size_t rows, size_t cols, size_t ld)
{
    float *x = xmalloc(rows * cols * sizeof(float));
    for (size_t r = 0; r < rows; r++) memcpy(x + r * cols, w + r * ld, cols * sizeof(float));
    return x;
}
static int gap_kept(const float *w, size_t rows, size_t cols, size_t ld, float fill)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = cols; c < ld; c++)
            if (w[r * ld + c] != fill) return 0;
    return 1;
}

/* compares a GPU buffer (dtype dt) with a CPU f32 buffer */
static void cmp(const char *op, const char *shape, const void *g, dx_dtype dt, const void *c,
                size_t n, double bound)
{
    float *a = g_get(g, n, dt);
    report(op, shape, relerr_f(a, (const float *)c, n, dt == DX_BF16 ? 1e-3 : 1e-6), bound);
    free(a);
}

/* compares the dense part of a row-strided GPU bf16 buffer g [rows, ld] with a dense CPU f32
 * buffer c [rows, cols], and checks that the op left the gap (filled with `fill`) alone */
static void cmp_strided(const char *op, const char *shape, const void *g, const void *c,
                        size_t rows, size_t cols, size_t ld, float fill, double bound)
{
    float *a = g_get(g, rows * ld, BF), *d = narrow(a, rows, cols, ld);
    double e = relerr_f(d, (const float *)c, rows * cols, 1e-3);
    if (!gap_kept(a, rows, cols, ld, fill)) e = INFINITY; /* wrote outside its columns */
    report(op, shape, e, bound);
    free(a);
    free(d);
}

#define B_X 1e-2   /* bf16 outputs */
#define B_A 1e-5   /* f32 outputs from exact inputs */
#define B_GEMM_A 1e-4

/* ---- timing ---- */

typedef struct {
    cudaEvent_t a, b;
} timer;

static void t_start(timer *t)
{
    cudaEventCreate(&t->a);
    cudaEventCreate(&t->b);
    cudaEventRecord(t->a, (cudaStream_t)dx_cuda_stream(gpu));
}

static double t_stop(timer *t)
{
    float ms = 0;
    cudaEventRecord(t->b, (cudaStream_t)dx_cuda_stream(gpu));
    cudaEventSynchronize(t->b);
    cudaEventElapsedTime(&ms, t->a, t->b);
    cudaEventDestroy(t->a);
    cudaEventDestroy(t->b);
    return ms;
}

/* ============================================================================================
 * memory, transfers
 * ========================================================================================== */

/* cuBLAS's SM count target (dx_cuda_gemm_sm_target) through overlap_begin / overlap_join: between
 * them the SMs the overlap stream leaves, or DX_CUDA_GEMM_SMS's where that is fewer, and after
 * overlap_join the target of before (DX_CUDA_GEMM_SMS's, which overlap_join used to reset to all
 * SMs). A second backend is created with DX_CUDA_GEMM_SMS = SMs - 6. */
static void test_gemm_sm_target(void)
{
    int nsm = 0;
    if (!gpu->overlap_begin || cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess ||
        nsm < 16)
        return;
    char shape[64];
    snprintf(shape, sizeof shape, "%d SMs, overlap on 3", nsm);
    const int a0 = dx_cuda_gemm_sm_target(gpu); /* 0 unless DX_CUDA_GEMM_SMS was set */
    if (gpu->overlap_begin(gpu, 3)) die("overlap_begin");
    const int a1 = dx_cuda_gemm_sm_target(gpu);
    gpu->overlap_end(gpu);
    gpu->overlap_join(gpu);
    const int a2 = dx_cuda_gemm_sm_target(gpu);
    const int want1 = a0 > 0 && a0 < nsm - 3 ? a0 : nsm - 3;
    report("gemm SM target, overlap", shape, !(a0 >= 0 && a1 == want1 && a2 == a0), 0);

    char v[16];
    snprintf(v, sizeof v, "%d", nsm - 6);
    setenv("DX_CUDA_GEMM_SMS", v, 1);
    dx_backend *b = dx_backend_cuda_create(0, 1);
    unsetenv("DX_CUDA_GEMM_SMS");
    if (!b) die("dx_backend_cuda_create with DX_CUDA_GEMM_SMS");
    int t[5];
    t[0] = dx_cuda_gemm_sm_target(b);
    if (b->overlap_begin(b, 3)) die("overlap_begin");
    t[1] = dx_cuda_gemm_sm_target(b); /* SMs - 6 < SMs - 3 */
    b->overlap_end(b);
    b->overlap_join(b);
    t[2] = dx_cuda_gemm_sm_target(b);
    if (b->overlap_begin(b, 10)) die("overlap_begin");
    t[3] = dx_cuda_gemm_sm_target(b); /* SMs - 10 < SMs - 6 */
    b->overlap_end(b);
    b->overlap_join(b);
    t[4] = dx_cuda_gemm_sm_target(b);
    b->destroy(b);
    snprintf(shape, sizeof shape, "DX_CUDA_GEMM_SMS=%d, overlap on 3, 10", nsm - 6);
    const int want[5] = {nsm - 6, nsm - 6, nsm - 6, nsm - 10, nsm - 6};
    int bad = 0;
    for (int i = 0; i < 5; i++) bad += t[i] != want[i];
    report("gemm SM target, DX_CUDA_GEMM_SMS", shape, bad, 0);
}

static void test_memory(void)
{
    dx_mem_stats s0 = gpu->mem;
    void *a = gpu->alloc(gpu, 1001, DX_MEM_PARAMS), *b = gpu->alloc(gpu, 77, DX_MEM_GRADS);
    void *c = gpu->alloc(gpu, 0, DX_MEM_OPTIM);
    if (!a || !b || !c) die("alloc");
    int ok = gpu->mem.current[DX_MEM_PARAMS] == s0.current[DX_MEM_PARAMS] + 1001 &&
             gpu->mem.current[DX_MEM_GRADS] == s0.current[DX_MEM_GRADS] + 77 &&
             gpu->mem.current_total == s0.current_total + 1078 && ((uintptr_t)a & 63) == 0 &&
             ((uintptr_t)b & 63) == 0;
    gfree(a);
    gfree(b);
    gfree(c);
    gfree(NULL);
    ok = ok && gpu->mem.current_total == s0.current_total &&
         gpu->mem.current[DX_MEM_PARAMS] == s0.current[DX_MEM_PARAMS];
    report("alloc/free accounting", "1001+77+0 bytes", ok ? 0 : 1, 0);

    /* many allocations: exercises the pointer table's growth and deletion */
    enum { NA = 1000 };
    void *ps[NA];
    for (int i = 0; i < NA; i++) {
        ps[i] = gpu->alloc(gpu, (size_t)(i % 13) * 64 + 3, (dx_mem_cat)(i % DX_MEM_NCAT));
        if (!ps[i]) die("alloc");
    }
    for (int i = 0; i < NA; i += 2) gfree(ps[i]);
    for (int i = 1; i < NA; i += 2) gfree(ps[i]);
    report("alloc/free accounting", "1000 buffers", gpu->mem.current_total == s0.current_total ? 0 : 1,
           0);

    const size_t n = 1001;
    unsigned char *h = xmalloc(n), *r = xmalloc(n);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(dx_hash64(i) & 0xff);
    void *d = g_alloc(n, DX_F32), *d2 = g_alloc(n, DX_F32);
    if (gpu->upload(gpu, d, h, n) || gpu->download(gpu, r, d, n)) die("transfer");
    report("upload/download", "1001 bytes", memcmp(h, r, n) ? 1 : 0, 0);
    poison(d2, n);
    gpu->copy(gpu, d2, d, n);
    memset(r, 0, n);
    if (gpu->download(gpu, r, d2, n)) die("download");
    report("copy", "1001 bytes", memcmp(h, r, n) ? 1 : 0, 0);
    poison(d2, n);
    gpu->zero(gpu, d2, n);
    if (gpu->download(gpu, r, d2, n)) die("download");
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += r[i] != 0;
    report("zero", "1001 bytes", (double)nz, 0);
    gfree(d);
    gfree(d2);
    free(h);
    free(r);

    /* f32 <-> bf16 conversions: bf16-representable values round-trip exactly; arbitrary
     * floats round to nearest even (checked on ties, zeros, infinities) */
    size_t m = (1u << 22) + 5; /* more than one staging chunk */
    float *x = hrand(m, 1, 3.0, 0.0, 1), *xf = hrand(m, 2, 3.0, 0.0, 0);
    void *g = g_from(x, m, BF);
    float *y = g_get(g, m, BF);
    report("upload_f32/download_f32", "bf16 n=4194309 exact", mismatches(x, y, m), 0);
    free(y);
    void *g2 = g_from(xf, m, F32);
    y = g_get(g2, m, F32);
    report("upload_f32/download_f32", "f32 n=4194309 exact", mismatches(xf, y, m), 0);
    free(y);
    gfree(g);
    gfree(g2);
    float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                  -(1.0f + 0x1p-8f), 1.0f + 0x1p-8f + 0x1p-20f, 3.0e38f, 1e-40f, 65504.0f};
    size_t ns = sizeof sp / sizeof sp[0];
    float *rs = xmalloc(ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) rs[i] = bf16_round(sp[i]);
    g = g_from(sp, ns, BF);
    y = g_get(g, ns, BF);
    report("upload_f32 rounding", "ties, zeros, inf, denormal", mismatches(rs, y, ns), 0);
    free(y);
    gfree(g);
    free(rs);
    free(x);
    free(xf);
}

/* ============================================================================================
 * gemm
 * ========================================================================================== */

/* gemm against the CPU's. layout GEMM_DENSE: unpadded row strides, so that shapes of 2^30
 * multiply-adds or more take the backend's cuBLASLt route (cuda_backend.cu: its algorithm
 * choice); GEMM_ODD: odd strides (lda + 3, ldb + 2, ldc + 1), which take cublasGemmEx;
 * GEMM_ALIGNED: strides padded by 8 (rows still 16-byte aligned: the cuBLASLt route at those
 * shapes, with a C that is a column block of a wider matrix). Where padded, C's padding columns
 * are checked untouched. */
enum { GEMM_ODD, GEMM_DENSE, GEMM_ALIGNED };
static void test_gemm_ld(uint64_t seed, int ta, int tb, int M, int N, int K, float beta, int c_acc, int layout)
{
    const float alpha = 0.75f;
    static const int pad[3][3] = {[GEMM_ODD] = {3, 2, 1}, [GEMM_DENSE] = {0, 0, 0}, [GEMM_ALIGNED] = {8, 8, 8}};
    const int dense = layout == GEMM_DENSE;
    int lda = (ta ? M : K) + pad[layout][0], ra = ta ? K : M;
    int ldb = (tb ? K : N) + pad[layout][1], rb = tb ? N : K;
    int ldc = N + pad[layout][2];
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)M * ldc;
    float *A = hrand(na, seed, 1, 0, 1), *Bm = hrand(nb, seed + 1, 1, 0, 1);
    float *C0 = hrand(nc, seed + 2, 1, 0, !c_acc);
    dx_dtype ct = c_acc ? F32 : BF;
    void *ga = g_from(A, na, BF), *gb = g_from(Bm, nb, BF);
    void *gc = beta == 0 ? g_nan(nc, ct) : g_from(C0, nc, ct);
    void *ca = c_from(A, na), *cb = c_from(Bm, nb), *cc = beta == 0 ? c_nan(nc) : c_from(C0, nc);
    gpu->gemm(gpu, ta, tb, M, N, K, alpha, ga, lda, gb, ldb, beta, gc, ldc, c_acc);
    cpu->gemm(cpu, ta, tb, M, N, K, alpha, ca, lda, cb, ldb, beta, cc, ldc, 0);
    float *C = g_get(gc, nc, ct), *Cr = cc;
    size_t padbad = 0;
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) {
            float pad = C[(size_t)i * ldc + j];
            if (beta != 0 && memcmp(&pad, &C0[(size_t)i * ldc + j], 4) != 0) padbad++;
            if (beta == 0 && !isnan(pad)) padbad++;
        }
    char shape[96];
    snprintf(shape, sizeof shape, "ta=%d tb=%d M=%d N=%d K=%d b=%g C=%s%s", ta, tb, M, N, K, beta,
             c_acc ? "f32" : "bf16", dense ? " dense" : layout == GEMM_ALIGNED ? " ld+8" : "");
    report("gemm", shape, relerr_rows(C, Cr, M, N, ldc), c_acc ? B_GEMM_A : B_X);
    if (!dense) report("gemm ldc padding kept", shape, (double)padbad, 0);
    free(C);
    free(A);
    free(Bm);
    free(C0);
    gfree(ga);
    gfree(gb);
    gfree(gc);
    cfree(ca);
    cfree(cb);
    cfree(cc);
}

static void test_gemm(uint64_t seed, int ta, int tb, int M, int N, int K, float beta, int c_acc)
{
    test_gemm_ld(seed, ta, tb, M, N, K, beta, c_acc, GEMM_ODD);
}

/* gemm_res: C = op(A) op(B) + R against the CPU's gemm (beta 1) onto a copy of R. pad > 0:
 * odd row strides (lda, ldb, ldr, ldc padded by pad), which take the copy-and-gemm path;
 * pad == 0: dense 16-byte-aligned rows (cuBLASLt). inplace: R is C. R must stay as it was and
 * C's row padding untouched. */
static void test_gemm_res(uint64_t seed, int ta, int tb, int M, int N, int K, int pad, int inplace)
{
    int lda = (ta ? M : K) + pad, ra = ta ? K : M;
    int ldb = (tb ? K : N) + pad, rb = tb ? N : K;
    int ldc = N + pad, ldr = inplace ? ldc : N + 2 * pad;
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)M * ldc, nr = (size_t)M * ldr;
    float *A = hrand(na, seed, 1, 0, 1), *Bm = hrand(nb, seed + 1, 1, 0, 1);
    float *R = hrand(nr, seed + 2, 1, 0, 1), *C0 = hrand(nc, seed + 3, 1, 0, 1);
    void *ga = g_from(A, na, BF), *gb = g_from(Bm, nb, BF), *gr = g_from(R, nr, BF);
    void *gc = inplace ? gr : g_from(C0, nc, BF);
    float *Rc = xmalloc(nc * sizeof(float)); /* the CPU's C: R in C's layout, padding C0's */
    memcpy(Rc, inplace ? R : C0, nc * sizeof(float));
    for (int i = 0; i < M && !inplace; i++) memcpy(Rc + (size_t)i * ldc, R + (size_t)i * ldr, (size_t)N * sizeof(float));
    void *ca = c_from(A, na), *cb = c_from(Bm, nb), *cc = c_from(Rc, nc);
    gpu->gemm_res(gpu, ta, tb, M, N, K, ga, lda, gb, ldb, gr, ldr, gc, ldc);
    cpu->gemm(cpu, ta, tb, M, N, K, 1.0f, ca, lda, cb, ldb, 1.0f, cc, ldc, 0);
    float *C = g_get(gc, nc, BF), *Cr = cc;
    size_t padbad = 0;
    for (int i = 0; i < M; i++) {
        for (int j = N; j < ldc; j++) padbad += memcmp(&C[(size_t)i * ldc + j], &Rc[(size_t)i * ldc + j], 4) != 0;
    }
    char shape[96];
    snprintf(shape, sizeof shape, "ta=%d tb=%d M=%d N=%d K=%d pad=%d%s", ta, tb, M, N, K, pad, inplace ? " R=C" : "");
    report("gemm_res", shape, relerr_rows(C, Cr, M, N, ldc), B_X);
    report("gemm_res ldc padding kept", shape, (double)padbad, 0);
    if (!inplace) {
        float *Ra = g_get(gr, nr, BF);
        report("gemm_res R unchanged", shape, mismatches(R, Ra, nr), 0);
        free(Ra);
    }
    free(C);
    free(A);
    free(Bm);
    free(R);
    free(C0);
    free(Rc);
    gfree(ga);
    gfree(gb);
    gfree(gr);
    if (!inplace) gfree(gc);
}

/* ============================================================================================
 * rmsnorm
 * ========================================================================================== */

static void test_rmsnorm(uint64_t seed, int N, int D)
{
    const float eps = 1e-5f;
    size_t nx = (size_t)N * D;
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d D=%d", N, D);
    float *x = hrand(nx, seed, 1, 0, 1), *w = hrand(D, seed + 1, 0.5, 1.0, 1);
    float *dy = hrand(nx, seed + 2, 1, 0, 1), *pdx = hrand(nx, seed + 3, 1, 0, 1);
    float *pdw = hrand(D, seed + 4, 1, 0, 0);

    void *gx = g_from(x, nx, BF), *gw = g_from(w, D, BF), *gy = g_nan(nx, BF), *gr = g_nan(N, F32);
    void *cx = c_from(x, nx), *cw = c_from(w, D), *cy = c_nan(nx), *cr = c_nan(N);
    gpu->rmsnorm_fwd(gpu, gy, gr, gx, gw, N, D, eps);
    cpu->rmsnorm_fwd(cpu, cy, cr, cx, cw, N, D, eps);
    cmp("rmsnorm_fwd y", shape, gy, BF, cy, nx, B_X);
    cmp("rmsnorm_fwd rstd", shape, gr, F32, cr, N, B_A);

    /* backward from the same rstd (the CPU's) on both sides */
    void *grs = g_from((const float *)cr, N, F32), *gdy = g_from(dy, nx, BF);
    void *gdx = g_from(pdx, nx, BF), *gdw = g_from(pdw, D, F32);
    void *cdy = c_from(dy, nx), *cdx = c_from(pdx, nx), *cdw = c_from(pdw, D);
    gpu->rmsnorm_bwd(gpu, gdx, gdw, gdy, gx, gw, grs, N, D);
    cpu->rmsnorm_bwd(cpu, cdx, cdw, cdy, cx, cw, cr, N, D);
    cmp("rmsnorm_bwd dx (+=)", shape, gdx, BF, cdx, nx, B_X);
    cmp("rmsnorm_bwd dw (+=)", shape, gdw, F32, cdw, D, B_A);
    if (gpu->overlap_begin) { /* on the overlap stream (few SMs, two virtual blocks): the same bits */
        void *odx = g_from(pdx, nx, BF), *odw = g_from(pdw, D, F32);
        if (gpu->overlap_begin(gpu, 3)) die("overlap_begin");
        gpu->rmsnorm_bwd(gpu, odx, odw, gdy, gx, gw, grs, N, D);
        gpu->overlap_end(gpu);
        gpu->overlap_join(gpu);
        float *a = g_get(gdx, nx, BF), *b = g_get(odx, nx, BF), *aw = g_get(gdw, D, F32), *bw = g_get(odw, D, F32);
        report("rmsnorm_bwd overlap dx", shape, mismatches(a, b, nx), 0);
        report("rmsnorm_bwd overlap dw", shape, mismatches(aw, bw, D), 0);
        free(a);
        free(b);
        free(aw);
        free(bw);
        gfree(odx);
        gfree(odw);
    }

    free(x);
    free(w);
    free(dy);
    free(pdx);
    free(pdw);
    gfree(gx);
    gfree(gw);
    gfree(gy);
    gfree(gr);
    gfree(grs);
    gfree(gdy);
    gfree(gdx);
    gfree(gdw);
    cfree(cx);
    cfree(cw);
    cfree(cy);
    cfree(cr);
    cfree(cdy);
    cfree(cdx);
    cfree(cdw);
}

/* ============================================================================================
 * rope
 * ========================================================================================== */

/* pad: tokens are rows of H*Dh + pad elements on the GPU (0: dense; H*Dh: the K block of a
 * fused K|V buffer; 2: rows not a multiple of 8 elements, the scalar kernel) */
static void test_rope(uint64_t seed, int B, int T, int H, int Dh, int pad)
{
    const float theta = 10000.0f, fill = 7.0f;
    const size_t rows = (size_t)B * T, cols = (size_t)H * Dh, ld = cols + pad, n = rows * cols;
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d Dh=%d ld=%zu", B, T, H, Dh, ld);
    float *x = hrand(n, seed, 1, 0, 1), *xw = wide(x, rows, cols, ld, fill);
    for (int dir = 0; dir < 2; dir++) {
        void *g = g_from(xw, rows * ld, BF), *c = c_from(x, n);
        if (dir == 0) {
            gpu->rope_fwd(gpu, g, (int)ld, B, T, H, Dh, theta);
            cpu->rope_fwd(cpu, c, (int)cols, B, T, H, Dh, theta);
        } else {
            gpu->rope_bwd(gpu, g, (int)ld, B, T, H, Dh, theta);
            cpu->rope_bwd(cpu, c, (int)cols, B, T, H, Dh, theta);
        }
        cmp_strided(dir == 0 ? "rope_fwd" : "rope_bwd", shape, g, c, rows, cols, ld, fill, B_X);
        gfree(g);
        cfree(c);
    }
    free(x);
    free(xw);
}

/* ============================================================================================
 * attention
 * ========================================================================================== */

/* layout on the GPU: 0 dense q, k, v (dq, dk, dv); 1 k and v the two column blocks of one
 * [B*T, 2 Hkv Dh] buffer (a K|V GEMM's output), dk and dv likewise; 2 q, k and v the three column
 * blocks of one [B*T, (H + 2 Hkv) Dh] buffer (the model's Q|K|V GEMM output), dq, dk and dv
 * likewise. The CPU twin has them dense. */
static void test_attention(uint64_t seed, int B, int T, int H, int Hkv, int Dh, int layout)
{
    size_t nq = (size_t)B * T * H * Dh, nk = (size_t)B * T * Hkv * Dh, nl = (size_t)B * H * T;
    const size_t rows = (size_t)B * T, kd = (size_t)Hkv * Dh, qd = (size_t)H * Dh;
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d Hkv=%d Dh=%d%s", B, T, H, Hkv, Dh,
             layout == 1 ? " K|V" : layout == 2 ? " Q|K|V" : "");
    float *q = hrand(nq, seed, 1, 0, 1), *k = hrand(nk, seed + 1, 1, 0, 1);
    float *v = hrand(nk, seed + 2, 1, 0, 1), *dout = hrand(nq, seed + 3, 1, 0, 1);
    /* the GPU side's row strides and the width of the buffer holding k (and v) */
    const size_t wide = layout == 2 ? qd + 2 * kd : layout == 1 ? 2 * kd : kd;
    const int ldq = (int)(layout == 2 ? wide : qd), ldkv = (int)wide;
    /* [q |] k | v per token from the dense blocks (layout 1: k | v; 2: q | k | v) */
    const size_t koff = layout == 2 ? qd : 0;
    float *wbuf = NULL;
    if (layout) {
        wbuf = xmalloc(rows * wide * sizeof(float));
        for (size_t r = 0; r < rows; r++) {
            if (layout == 2) memcpy(wbuf + r * wide, q + r * qd, qd * sizeof(float));
            memcpy(wbuf + r * wide + koff, k + r * kd, kd * sizeof(float));
            memcpy(wbuf + r * wide + koff + kd, v + r * kd, kd * sizeof(float));
        }
    }
    void *gq, *gk, *gv, *gw = NULL;
    if (layout) {
        gw = g_from(wbuf, rows * wide, BF);
        gq = layout == 2 ? gw : g_from(q, nq, BF);
        gk = (char *)gw + koff * sizeof(uint16_t);
        gv = (char *)gk + kd * sizeof(uint16_t);
    } else {
        gq = g_from(q, nq, BF);
        gk = g_from(k, nk, BF);
        gv = g_from(v, nk, BF);
    }
    free(wbuf);
    void *go = g_nan(nq, BF), *gl = g_nan(nl, F32);
    void *cq = c_from(q, nq), *ck = c_from(k, nk), *cv = c_from(v, nk);
    void *co = c_nan(nq), *cl = c_nan(nl);
    gpu->attention_fwd(gpu, go, gl, gq, gk, gv, ldq, ldkv, B, T, H, Hkv, Dh);
    cpu->attention_fwd(cpu, co, cl, cq, ck, cv, (int)qd, (int)kd, B, T, H, Hkv, Dh);
    char op[64];
    snprintf(op, sizeof op, "attention_fwd o %s", att_tag);
    cmp(op, shape, go, BF, co, nq, B_X);
    snprintf(op, sizeof op, "attention_fwd lse %s", att_tag);
    cmp(op, shape, gl, F32, cl, nl, B_A);

    /* backward from the same o (the CPU's, rounded to bf16) and lse on both sides */
    float *ob = hcopy((const float *)co, nq);
    for (size_t i = 0; i < nq; i++) ob[i] = bf16_round(ob[i]);
    void *gob = g_from(ob, nq, BF), *glb = g_from((const float *)cl, nl, F32);
    void *cob = c_from(ob, nq), *gdo = g_from(dout, nq, BF), *cdo = c_from(dout, nq);
    void *cdq = c_nan(nq), *cdk = c_nan(nk), *cdv = c_nan(nk);
    cpu->attention_bwd(cpu, cdq, cdk, cdv, cdo, cq, ck, cv, cob, cl, (int)qd, (int)kd, B, T, H, Hkv, Dh);
    /* form 0: attention_bwd; form 1: attention_bwd_rope (where the backend has it), against the
     * CPU's attention_bwd then rope_bwd on dq and dk */
    const float theta = 10000.0f;
    void *gdq = NULL, *gdw = NULL, *gdk = NULL, *gdv = NULL;
    for (int form = 0; form < 2; form++) {
        if (form == 1 && !gpu->attention_bwd_rope) break;
        if (form == 1) {
            if (layout != 2) gfree(gdq);
            if (layout) gfree(gdw);
            else gfree(gdk), gfree(gdv);
        }
        if (layout) {
            gdw = g_nan(rows * wide, BF);
            gdq = layout == 2 ? gdw : g_nan(nq, BF);
            gdk = (char *)gdw + koff * sizeof(uint16_t);
            gdv = (char *)gdk + kd * sizeof(uint16_t);
        } else {
            gdq = g_nan(nq, BF);
            gdk = g_nan(nk, BF);
            gdv = g_nan(nk, BF);
        }
        if (form == 0) {
            gpu->attention_bwd(gpu, gdq, gdk, gdv, gdo, gq, gk, gv, gob, glb, ldq, ldkv, B, T, H, Hkv, Dh);
        } else {
            gpu->attention_bwd_rope(gpu, gdq, gdk, gdv, gdo, gq, gk, gv, gob, glb, ldq, ldkv, B, T, H,
                                    Hkv, Dh, theta);
            cpu->rope_bwd(cpu, cdq, (int)qd, B, T, H, Dh, theta);
            cpu->rope_bwd(cpu, cdk, (int)kd, B, T, Hkv, Dh, theta);
        }
        const char *name = form == 0 ? "attention_bwd" : "attention_bwd_rope";
        if (layout) { /* [dq |] dk | dv fill the rows between them: compare the whole buffer */
            float *cw = xmalloc(rows * wide * sizeof(float));
            for (size_t r = 0; r < rows; r++) {
                if (layout == 2) memcpy(cw + r * wide, (float *)cdq + r * qd, qd * sizeof(float));
                memcpy(cw + r * wide + koff, (float *)cdk + r * kd, kd * sizeof(float));
                memcpy(cw + r * wide + koff + kd, (float *)cdv + r * kd, kd * sizeof(float));
            }
            snprintf(op, sizeof op, "%s %s %s", name, layout == 2 ? "dq|dk|dv" : "dk|dv", att_tag);
            cmp(op, shape, gdw, BF, cw, rows * wide, B_X);
            free(cw);
            if (layout == 1) {
                snprintf(op, sizeof op, "%s dq %s", name, att_tag);
                cmp(op, shape, gdq, BF, cdq, nq, B_X);
            }
        } else {
            snprintf(op, sizeof op, "%s dq %s", name, att_tag);
            cmp(op, shape, gdq, BF, cdq, nq, B_X);
            snprintf(op, sizeof op, "%s dk %s", name, att_tag);
            cmp(op, shape, gdk, BF, cdk, nk, B_X);
            snprintf(op, sizeof op, "%s dv %s", name, att_tag);
            cmp(op, shape, gdv, BF, cdv, nk, B_X);
        }
    }

    /* timing (informative): mean of 3 runs after the runs above */
    timer t;
    t_start(&t);
    for (int r = 0; r < 3; r++) gpu->attention_fwd(gpu, go, gl, gq, gk, gv, ldq, ldkv, B, T, H, Hkv, Dh);
    double fms = t_stop(&t) / 3;
    t_start(&t);
    for (int r = 0; r < 3; r++)
        gpu->attention_bwd(gpu, gdq, gdk, gdv, gdo, gq, gk, gv, gob, glb, ldq, ldkv, B, T, H, Hkv, Dh);
    double bms = t_stop(&t) / 3;
    snprintf(op, sizeof op, "  time attention %s", att_tag);
    printf("%-30s %-40s fwd %.3f ms, bwd %.3f ms\n", op, shape, fms, bms);

    free(q);
    free(k);
    free(v);
    free(dout);
    free(ob);
    if (layout) {
        gfree(gw);
        gfree(gdw);
        if (layout == 1) gfree(gq), gfree(gdq);
    } else {
        gfree(gq);
        gfree(gk);
        gfree(gv);
        gfree(gdq);
        gfree(gdk);
        gfree(gdv);
    }
    void *gb[] = {go, gl, gob, glb, gdo};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) gfree(gb[i]);
    void *cb[] = {cq, ck, cv, co, cl, cob, cdo, cdq, cdk, cdv};
    for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++) cfree(cb[i]);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* timing only, at training size (no CPU reference) */
static void time_attention(int B, int T, int H, int Hkv, int Dh)
{
    size_t nq = (size_t)B * T * H * Dh, nl = (size_t)B * H * T;
    /* q, k, v (dq, dk, dv) as the model keeps them: column blocks of one [B*T, (H + 2 Hkv) Dh]
     * buffer */
    const int ld = (H + 2 * Hkv) * Dh;
    const size_t nw = (size_t)B * T * ld;
    float *xq = hrand(nw, 99, 1, 0, 1);
    void *gq = g_from(xq, nw, BF), *gdo = g_from(xq, nq, BF);
    void *gk = (char *)gq + (size_t)H * Dh * 2, *gv = (char *)gk + (size_t)Hkv * Dh * 2;
    void *go = g_alloc(nq, BF), *gl = g_alloc(nl, F32);
    void *gdq = g_alloc(nw, BF), *gdk = (char *)gdq + (size_t)H * Dh * 2;
    void *gdv = (char *)gdk + (size_t)Hkv * Dh * 2;
    gpu->attention_fwd(gpu, go, gl, gq, gk, gv, ld, ld, B, T, H, Hkv, Dh); /* warm-up */
    gpu->attention_bwd(gpu, gdq, gdk, gdv, gdo, gq, gk, gv, go, gl, ld, ld, B, T, H, Hkv, Dh);
    enum { NREP = 7 }; /* median of NREP timed runs */
    double fr[NREP], br[NREP];
    for (int r = 0; r < NREP; r++) {
        timer t;
        t_start(&t);
        gpu->attention_fwd(gpu, go, gl, gq, gk, gv, ld, ld, B, T, H, Hkv, Dh);
        fr[r] = t_stop(&t);
        t_start(&t);
        gpu->attention_bwd(gpu, gdq, gdk, gdv, gdo, gq, gk, gv, go, gl, ld, ld, B, T, H, Hkv, Dh);
        br[r] = t_stop(&t);
    }
    qsort(fr, NREP, sizeof fr[0], cmp_double);
    qsort(br, NREP, sizeof br[0], cmp_double);
    double fms = fr[NREP / 2], bms = br[NREP / 2];
    /* causal: half of the 4 B H T^2 Dh flops of the two forward products (bwd: 2.5x) */
    double ff = 2.0 * B * H * (double)T * T * Dh;
    char shape[64], op[64];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d Hkv=%d Dh=%d", B, T, H, Hkv, Dh);
    snprintf(op, sizeof op, "  time attention %s", att_tag);
    printf("%-30s %-40s fwd %.3f ms (%.1f TFLOP/s), bwd %.3f ms (%.1f TFLOP/s)\n", op, shape,
           fms, ff / fms * 1e-9, bms, 2.5 * ff / bms * 1e-9);
    free(xq);
    void *gb[] = {gq, go, gl, gdo, gdq};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) gfree(gb[i]);
}

/* ============================================================================================
 * element-wise ops
 * ========================================================================================== */

/* N x I; fused: on the GPU g and u (dg and du) are the column blocks of one [N, 2I] buffer,
 * the model's gate|up GEMM output; the CPU twin has them dense */
/* gemm_swiglu: gu[N,2F] = x W^T and h = silu(g) u against the CPU's gemm then swiglu_fwd (the
 * CUDA backend's fused wgmma kernel where F and K are multiples of 8, cuBLAS + swiglu_fwd
 * otherwise); h and gu start as NaN, so an element left unwritten fails */
static void test_gemm_swiglu(uint64_t seed, int N, int F, int K)
{
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d K=%d", N, F, K);
    const size_t nx = (size_t)N * K, nw = (size_t)2 * F * K, ngu = (size_t)N * 2 * F, nh = (size_t)N * F;
    float *x = hrand(nx, seed, 1, 0, 1), *w = hrand(nw, seed + 1, 1.0 / sqrt((double)K), 0, 1);
    void *gx = g_from(x, nx, BF), *gw = g_from(w, nw, BF), *ggu = g_nan(ngu, BF), *gh = g_nan(nh, BF);
    void *cx = c_from(x, nx), *cw = c_from(w, nw), *cgu = c_nan(ngu), *ch = c_nan(nh);
    gpu->gemm_swiglu(gpu, ggu, gh, gx, gw, N, F, K);
    cpu->gemm(cpu, 0, 1, N, 2 * F, K, 1.0f, cx, K, cw, K, 0.0f, cgu, 2 * F, 0);
    cpu->swiglu_fwd(cpu, ch, cgu, (float *)cgu + F, N, F, 2 * F);
    cmp("gemm_swiglu g|u", shape, ggu, BF, cgu, ngu, B_X);
    cmp("gemm_swiglu h", shape, gh, BF, ch, nh, B_X);
    free(x);
    free(w);
    void *gb[] = {gx, gw, ggu, gh};
    for (size_t i = 0; i < 4; i++) gfree(gb[i]);
    void *cb[] = {cx, cw, cgu, ch};
    for (size_t i = 0; i < 4; i++) cfree(cb[i]);
}

/* gemm_rope: y[B T, F] = x W^T, F = (H + 2 Hkv) Dh, with RoPE on q's and k's heads, against the
 * CPU's gemm then rope_fwd on q and on k (the CUDA backend's wgmma kernel with the rotation in its
 * epilogue at Dh 64 and 128, cuBLAS + rope_fwd otherwise); y starts as NaN, so an element left
 * unwritten fails. gemm_rope_fused must say which: the fused kernel on a Hopper GPU where
 * hopper_fused (unless DX_CUDA_ROPE_GEMM=0), else the three ops. */
static void test_gemm_rope(uint64_t seed, int B, int T, int H, int Hkv, int Dh, int K, int hopper_fused)
{
    char shape[80];
    const int N = B * T, F = (H + 2 * Hkv) * Dh;
    const float theta = 10000.0f;
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d Hkv=%d Dh=%d K=%d", B, T, H, Hkv, Dh, K);
    const size_t nx = (size_t)N * K, nw = (size_t)F * K, ny = (size_t)N * F;
    float *x = hrand(nx, seed, 1, 0, 1), *w = hrand(nw, seed + 1, 1.0 / sqrt((double)K), 0, 1);
    void *gx = g_from(x, nx, BF), *gw = g_from(w, nw, BF), *gy = g_nan(ny, BF);
    void *cx = c_from(x, nx), *cw = c_from(w, nw), *cy = c_nan(ny);
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    const char *off = getenv("DX_CUDA_ROPE_GEMM");
    const int want = major == 9 && hopper_fused && !(off && strcmp(off, "0") == 0);
    report("gemm_rope_fused", shape, gpu->gemm_rope_fused(gpu, gy, gx, gw, N, F, K, T, H, Hkv, Dh) != want, 0);
    gpu->gemm_rope(gpu, gy, gx, gw, N, F, K, T, H, Hkv, Dh, theta);
    cpu->gemm(cpu, 0, 1, N, F, K, 1.0f, cx, K, cw, K, 0.0f, cy, F, 0);
    cpu->rope_fwd(cpu, cy, F, B, T, H, Dh, theta);
    cpu->rope_fwd(cpu, (float *)cy + (size_t)H * Dh, F, B, T, Hkv, Dh, theta);
    cmp("gemm_rope q|k|v", shape, gy, BF, cy, ny, B_X);
    free(x);
    free(w);
    void *gb[] = {gx, gw, gy};
    for (size_t i = 0; i < 3; i++) gfree(gb[i]);
    void *cb[] = {cx, cw, cy};
    for (size_t i = 0; i < 3; i++) cfree(cb[i]);
}

/* gemm_swiglu_bwd: dh = dy W_down, then dg, du = swiglu_bwd(dh, g, u), against the CPU's gemm
 * then swiglu_bwd (dg | du and g | u rows 2F apart; dg | du start as NaN) */
static void test_gemm_swiglu_bwd(uint64_t seed, int N, int F, int K)
{
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d K=%d", N, F, K);
    const size_t ndy = (size_t)N * K, nw = (size_t)K * F, ngu = (size_t)N * 2 * F, nh = (size_t)N * F;
    float *dy = hrand(ndy, seed, 1, 0, 1), *w = hrand(nw, seed + 1, 1.0 / sqrt((double)K), 0, 1);
    float *gu = hrand(ngu, seed + 2, 2, 0, 1);
    void *gdy = g_from(dy, ndy, BF), *gw = g_from(w, nw, BF), *ggu = g_from(gu, ngu, BF);
    void *gdgu = g_nan(ngu, BF), *gdh = g_nan(nh, BF);
    void *cdy = c_from(dy, ndy), *cw = c_from(w, nw), *cgu = c_from(gu, ngu), *cdgu = c_nan(ngu), *cdh = c_nan(nh);
    gpu->gemm_swiglu_bwd(gpu, gdgu, gdh, gdy, gw, ggu, N, F, K);
    cpu->gemm(cpu, 0, 0, N, F, K, 1.0f, cdy, K, cw, F, 0.0f, cdh, F, 0);
    cpu->swiglu_bwd(cpu, cdgu, (float *)cdgu + F, cdh, cgu, (float *)cgu + F, N, F, 2 * F);
    cmp("gemm_swiglu_bwd dg|du", shape, gdgu, BF, cdgu, ngu, B_X);
    free(dy);
    free(w);
    free(gu);
    void *gb[] = {gdy, gw, ggu, gdgu, gdh};
    for (size_t i = 0; i < 5; i++) gfree(gb[i]);
    void *cb[] = {cdy, cw, cgu, cdgu, cdh};
    for (size_t i = 0; i < 5; i++) cfree(cb[i]);
}

static void test_swiglu(uint64_t seed, int N, int I, int fused)
{
    char shape[64];
    const size_t n = (size_t)N * I, ld = fused ? 2 * (size_t)I : (size_t)I;
    snprintf(shape, sizeof shape, "N=%d I=%d%s", N, I, fused ? " gate|up" : "");
    float *g = hrand(n, seed, 3, 0, 1), *u = hrand(n, seed + 1, 1, 0, 1), *dh = hrand(n, seed + 2, 1, 0, 1);
    void *gdh = g_from(dh, n, BF), *ggu = NULL, *gg, *gu, *gdgu = NULL, *gdg, *gdu;
    if (fused) {
        float *gu_h = xmalloc(2 * n * sizeof(float));
        for (size_t r = 0; r < (size_t)N; r++) {
            memcpy(gu_h + r * ld, g + r * I, (size_t)I * sizeof(float));
            memcpy(gu_h + r * ld + I, u + r * I, (size_t)I * sizeof(float));
        }
        ggu = g_from(gu_h, 2 * n, BF);
        free(gu_h);
        gg = ggu;
        gu = (char *)ggu + (size_t)I * 2;
        gdgu = g_nan(2 * n, BF);
        gdg = gdgu;
        gdu = (char *)gdgu + (size_t)I * 2;
    } else {
        gg = g_from(g, n, BF);
        gu = g_from(u, n, BF);
        gdg = g_nan(n, BF);
        gdu = g_nan(n, BF);
    }
    void *cg = c_from(g, n), *cu = c_from(u, n), *cdh = c_from(dh, n);
    void *gh = g_nan(n, BF);
    void *ch = c_nan(n), *cdg = c_nan(n), *cdu = c_nan(n);
    gpu->swiglu_fwd(gpu, gh, gg, gu, N, I, (int)ld);
    cpu->swiglu_fwd(cpu, ch, cg, cu, N, I, I);
    cmp("swiglu_fwd h", shape, gh, BF, ch, n, B_X);
    gpu->swiglu_bwd(gpu, gdg, gdu, gdh, gg, gu, N, I, (int)ld);
    cpu->swiglu_bwd(cpu, cdg, cdu, cdh, cg, cu, N, I, I);
    if (fused) {
        float *c2 = xmalloc(2 * n * sizeof(float));
        for (size_t r = 0; r < (size_t)N; r++) {
            memcpy(c2 + r * ld, (float *)cdg + r * I, (size_t)I * sizeof(float));
            memcpy(c2 + r * ld + I, (float *)cdu + r * I, (size_t)I * sizeof(float));
        }
        cmp("swiglu_bwd dg|du", shape, gdgu, BF, c2, 2 * n, B_X);
        free(c2);
        gfree(ggu);
        gfree(gdgu);
    } else {
        cmp("swiglu_bwd dg", shape, gdg, BF, cdg, n, B_X);
        cmp("swiglu_bwd du", shape, gdu, BF, cdu, n, B_X);
        void *gb[] = {gg, gu, gdg, gdu};
        for (size_t i = 0; i < 4; i++) gfree(gb[i]);
    }
    free(g);
    free(u);
    free(dh);
    gfree(gdh);
    gfree(gh);
    void *cb[] = {cg, cu, cdh, ch, cdg, cdu};
    for (size_t i = 0; i < 6; i++) cfree(cb[i]);
}

static void test_add(uint64_t seed, size_t n)
{
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    float *a = hrand(n, seed, 1, 0, 1), *b = hrand(n, seed + 1, 1, 0, 1);
    void *ga = g_from(a, n, BF), *gb = g_from(b, n, BF), *gy = g_nan(n, BF);
    void *ca = c_from(a, n), *cb = c_from(b, n), *cy = c_nan(n);
    gpu->add(gpu, gy, ga, gb, n);
    cpu->add(cpu, cy, ca, cb, n);
    cmp("add", shape, gy, BF, cy, n, B_X);
    gpu->add(gpu, ga, ga, gb, n); /* in place: y aliases a */
    cmp("add (y aliases a)", shape, ga, BF, cy, n, B_X);
    free(a);
    free(b);
    gfree(ga);
    gfree(gb);
    gfree(gy);
    cfree(ca);
    cfree(cb);
    cfree(cy);
}

/* LoRA dropout: the CUDA mask is the CPU backends' (kernels.h's counter-based mask), bit for
 * bit: a differing element would be off by |x| / (1 - p), far past the bf16 bound */
static void test_dropout(uint64_t seed, int N, int F, float p)
{
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d p=%.2f", N, F, (double)p);
    const size_t n = (size_t)N * F;
    float *x = hrand(n, seed, 1, 0, 1);
    void *gx = g_from(x, n, BF), *gy = g_nan(n, BF), *cx = c_from(x, n), *cy = c_nan(n);
    const uint64_t stream = 0xabcdefu + seed, row0 = 3 * seed, row_len = (uint64_t)F * 2, col0 = (uint64_t)F;
    gpu->dropout(gpu, gy, gx, N, F, p, stream, row0, row_len, col0);
    cpu->dropout(cpu, cy, cx, N, F, p, stream, row0, row_len, col0);
    cmp("dropout", shape, gy, BF, cy, n, B_X);
    gpu->dropout(gpu, gx, gx, N, F, p, stream, row0, row_len, col0); /* in place */
    cmp("dropout (in place)", shape, gx, BF, cy, n, B_X);
    free(x);
    gfree(gx);
    gfree(gy);
    cfree(cx);
    cfree(cy);
}

/* QLoRA: the CUDA NF4 dequantization against the CPU backend's, on a tensor quantized by the
 * host codec (kernels/nf4.h): odd n (a lone last nibble), a partial last block, several
 * double-quantization groups; the output at element offset off (off % 8 != 0: not 16-byte aligned,
 * the scalar kernel; otherwise 16-element chunks, then the scalar tail) */
static void test_nf4(uint64_t seed, size_t n, size_t off)
{
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu out+%zu", n, off);
    float *w = hrand(n, seed, 1, 0, 1);
    dx_nf4_tensor q;
    if (dx_nf4_quantize(w, n, &q)) die("nf4 quantize");
    const size_t ni = (n + 1) / 2, nb = dx_nf4_blocks(n), ng = dx_nf4_groups(n);
    void *gi = gpu->alloc(gpu, ni, DX_MEM_OTHER), *ga = gpu->alloc(gpu, nb, DX_MEM_OTHER),
         *gs = gpu->alloc(gpu, ng * sizeof(float), DX_MEM_OTHER);
    if (!gi || !ga || !gs || gpu->upload(gpu, gi, q.idx, ni) || gpu->upload(gpu, ga, q.absmax8, nb) ||
        gpu->upload(gpu, gs, q.scale, ng * sizeof(float)))
        die("nf4 upload");
    void *gbuf = g_nan(n + off, BF), *cy = c_nan(n);
    void *gy = (char *)gbuf + off * 2;
    gpu->nf4_dequantize(gpu, gy, gi, ga, gs, q.offset, n);
    cpu->nf4_dequantize(cpu, cy, q.idx, q.absmax8, q.scale, q.offset, n);
    cmp("nf4_dequantize", shape, gy, BF, cy, n, B_X);
    dx_nf4_free(&q);
    free(w);
    gfree(gi);
    gfree(ga);
    gfree(gs);
    gfree(gbuf);
    cfree(cy);
}

static void test_embedding(uint64_t seed, int N, int D, int V)
{
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d D=%d V=%d", N, D, V);
    int32_t *ids = xmalloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(dx_hash64(seed * 1000003u + (uint64_t)i) % (uint64_t)V);
    size_t nt = (size_t)V * D, no = (size_t)N * D;
    float *tab = hrand(nt, seed, 1, 0, 1), *dout = hrand(no, seed + 1, 1, 0, 1);
    float *pre = hrand(nt, seed + 2, 1, 0, 0);
    void *gids = g_ints(ids, N), *gt = g_from(tab, nt, BF), *go = g_nan(no, BF);
    void *ct = c_from(tab, nt), *co = c_nan(no);
    gpu->embedding_fwd(gpu, go, gids, gt, N, D);
    cpu->embedding_fwd(cpu, co, ids, ct, N, D);
    float *o = g_get(go, no, BF);
    report("embedding_fwd (exact)", shape, mismatches(o, (const float *)co, no), 0);
    free(o);
    void *gdo = g_from(dout, no, BF), *gdt = g_from(pre, nt, F32);
    void *cdo = c_from(dout, no), *cdt = c_from(pre, nt);
    gpu->embedding_bwd(gpu, gdt, gdo, gids, N, D);
    cpu->embedding_bwd(cpu, cdt, cdo, ids, N, D);
    /* rows sorted by id, each id's rows added in position order: the CPU's additions, bitwise */
    float *t = g_get(gdt, nt, F32);
    report("embedding_bwd (+=, exact)", shape, mismatches(t, (const float *)cdt, nt), 0);
    free(t);
    free(ids);
    free(tab);
    free(dout);
    free(pre);
    gfree(gids);
    gfree(gt);
    gfree(go);
    gfree(gdo);
    gfree(gdt);
    cfree(ct);
    cfree(co);
    cfree(cdo);
    cfree(cdt);
}

static void test_cross_entropy(uint64_t seed, int N, int V, int with_dl)
{
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d V=%d%s", N, V, with_dl ? "" : " dlogits=NULL");
    size_t n = (size_t)N * V;
    float *z = hrand(n, seed, 2.5, 0, 1); /* logits X: bf16 values */
    int32_t *t = xmalloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        t[i] = i % 4 == 1 ? -1 : (int32_t)(dx_hash64(seed + 7 * (uint64_t)i) % (uint64_t)V);
    const float dscale = 1.0f / (float)N, pre = 0.25f;
    void *gz = g_from(z, n, BF), *gt = g_ints(t, N), *gl = g_from(&pre, 1, F32);
    void *gd = with_dl ? g_nan(n, BF) : NULL;
    void *cz = c_from(z, n), *cl = c_from(&pre, 1), *cd = with_dl ? c_nan(n) : NULL;
    gpu->cross_entropy(gpu, gl, gd, gz, gt, N, V, dscale);
    cpu->cross_entropy(cpu, cl, cd, cz, t, N, V, dscale);
    cmp("cross_entropy loss (+=)", shape, gl, F32, cl, 1, B_A);
    if (with_dl) {
        cmp("cross_entropy dlogits", shape, gd, BF, cd, n, B_X);
        /* in place (the model's use: dlogits overwrite the logits): the same bits */
        void *gl2 = g_from(&pre, 1, F32);
        gpu->cross_entropy(gpu, gl2, gz, gz, gt, N, V, dscale);
        float *l1 = g_get(gl, 1, F32), *l2 = g_get(gl2, 1, F32), *d1 = g_get(gd, n, BF), *d2 = g_get(gz, n, BF);
        report("cross_entropy in place (exact)", shape, mismatches(l1, l2, 1) + mismatches(d1, d2, n), 0);
        free(l1);
        free(l2);
        free(d1);
        free(d2);
        gfree(gl2);
    }
    free(z);
    free(t);
    gfree(gz);
    gfree(gt);
    gfree(gl);
    gfree(gd);
    cfree(cz);
    cfree(cl);
    cfree(cd);
}

/* Tensor parallelism: each of tp vocabulary slices, GPU against CPU. */
static void test_embedding_vp(uint64_t seed, int N, int D, int V, int tp)
{
    char shape[96];
    int32_t *ids = xmalloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(dx_hash64(seed * 1000003u + (uint64_t)i) % (uint64_t)V);
    const int Vl = V / tp;
    size_t nt = (size_t)Vl * D, no = (size_t)N * D;
    void *gids = g_ints(ids, N);
    for (int r = 0; r < tp; r++) {
        snprintf(shape, sizeof shape, "N=%d D=%d V=%d slice %d/%d", N, D, V, r, tp);
        float *tab = hrand(nt, seed + 3 * r, 1, 0, 1), *dout = hrand(no, seed + 3 * r + 1, 1, 0, 1);
        float *pre = hrand(nt, seed + 3 * r + 2, 1, 0, 0);
        void *gt = g_from(tab, nt, BF), *go = g_nan(no, BF), *ct = c_from(tab, nt), *co = c_nan(no);
        gpu->embedding_vp_fwd(gpu, go, gids, gt, N, D, r * Vl, Vl);
        cpu->embedding_vp_fwd(cpu, co, ids, ct, N, D, r * Vl, Vl);
        float *o = g_get(go, no, BF);
        report("embedding_vp_fwd (exact)", shape, mismatches(o, (const float *)co, no), 0);
        free(o);
        void *gdo = g_from(dout, no, BF), *gdt = g_from(pre, nt, F32);
        void *cdo = c_from(dout, no), *cdt = c_from(pre, nt);
        gpu->embedding_vp_bwd(gpu, gdt, gdo, gids, N, D, r * Vl, Vl);
        cpu->embedding_vp_bwd(cpu, cdt, cdo, ids, N, D, r * Vl, Vl);
        float *t = g_get(gdt, nt, F32);
        report("embedding_vp_bwd (+=, exact)", shape, mismatches(t, (const float *)cdt, nt), 0);
        free(t);
        free(tab);
        free(dout);
        free(pre);
        void *gb[] = {gt, go, gdo, gdt};
        for (size_t i = 0; i < 4; i++) gfree(gb[i]);
        void *cb[] = {ct, co, cdo, cdt};
        for (size_t i = 0; i < 4; i++) cfree(cb[i]);
    }
    free(ids);
    gfree(gids);
}

static void test_ce_vp(uint64_t seed, int N, int V, int tp)
{
    char shape[96];
    const int Vl = V / tp;
    const size_t nl = (size_t)N * Vl;
    int32_t *t = xmalloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        t[i] = i % 4 == 1 ? -1 : (int32_t)(dx_hash64(seed + 7 * (uint64_t)i) % (uint64_t)V);
    void *gt = g_ints(t, N);
    float **z = xmalloc((size_t)tp * sizeof *z);
    float *gath_c = xmalloc((size_t)tp * N * 2 * sizeof(float)), *gath_g = xmalloc((size_t)tp * N * 2 * sizeof(float));
    /* part 1 on every slice; the gathers are made on the host in rank order */
    for (int r = 0; r < tp; r++) {
        snprintf(shape, sizeof shape, "N=%d V=%d slice %d/%d", N, V, r, tp);
        z[r] = hrand(nl, seed + (uint64_t)r, 2.5, 0, 1); /* logits X: bf16 values */
        void *gz = g_from(z[r], nl, BF), *gs = g_nan((size_t)N * 2, F32), *cz = c_from(z[r], nl), *cs = c_nan((size_t)N * 2);
        gpu->ce_vp_stats(gpu, gs, gz, gt, N, Vl, r * Vl);
        cpu->ce_vp_stats(cpu, cs, cz, t, N, Vl, r * Vl);
        cmp("ce_vp_stats", shape, gs, F32, cs, (size_t)N * 2, B_A);
        float *hs = g_get(gs, (size_t)N * 2, F32);
        memcpy(gath_g + (size_t)r * N * 2, hs, (size_t)N * 2 * sizeof(float));
        memcpy(gath_c + (size_t)r * N * 2, cs, (size_t)N * 2 * sizeof(float));
        free(hs);
        gfree(gz);
        gfree(gs);
        cfree(cz);
        cfree(cs);
    }
    void *gg = g_from(gath_g, (size_t)tp * N * 2, F32), *cg = c_from(gath_c, (size_t)tp * N * 2);
    const float dscale = 1.0f / (float)N, pre = 0.25f;
    for (int r = 0; r < tp; r++) {
        snprintf(shape, sizeof shape, "N=%d V=%d slice %d/%d", N, V, r, tp);
        void *gz = g_from(z[r], nl, BF), *gl = g_from(&pre, 1, F32), *gd = g_nan(nl, BF);
        void *cz = c_from(z[r], nl), *cl = c_from(&pre, 1), *cd = c_nan(nl);
        gpu->ce_vp_finish(gpu, gl, gd, gz, gg, tp, gt, N, Vl, r * Vl, dscale);
        cpu->ce_vp_finish(cpu, cl, cd, cz, cg, tp, t, N, Vl, r * Vl, dscale);
        cmp("ce_vp_finish loss (+=)", shape, gl, F32, cl, 1, B_A);
        cmp("ce_vp_finish dlogits", shape, gd, BF, cd, nl, B_X);
        /* loss only, then dlogits only: the same bits as both at once (fixed-order kernels) */
        void *gl2 = g_from(&pre, 1, F32), *gd2 = g_nan(nl, BF);
        gpu->ce_vp_finish(gpu, gl2, NULL, gz, gg, tp, gt, N, Vl, r * Vl, dscale);
        gpu->ce_vp_finish(gpu, NULL, gd2, gz, gg, tp, gt, N, Vl, r * Vl, dscale);
        float *l1 = g_get(gl, 1, F32), *l2 = g_get(gl2, 1, F32);
        float *d1 = g_get(gd, nl, BF), *d2 = g_get(gd2, nl, BF);
        report("ce_vp_finish NULL out (exact)", shape, mismatches(l1, l2, 1) + mismatches(d1, d2, nl), 0);
        free(l1);
        free(l2);
        free(d2);
        /* in place (dlogits overwrite the logits, as in the model): the same bits */
        gpu->ce_vp_finish(gpu, NULL, gz, gz, gg, tp, gt, N, Vl, r * Vl, dscale);
        d2 = g_get(gz, nl, BF);
        report("ce_vp_finish in place (exact)", shape, mismatches(d1, d2, nl), 0);
        free(d1);
        free(d2);
        gfree(gl2);
        gfree(gd2);
        gfree(gz);
        gfree(gl);
        gfree(gd);
        cfree(cz);
        cfree(cl);
        cfree(cd);
        free(z[r]);
    }
    free(z);
    free(gath_c);
    free(gath_g);
    free(t);
    gfree(gt);
    gfree(gg);
    cfree(cg);
}

static void test_adamw(uint64_t seed, size_t n, int with_work)
{
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu%s", n, with_work ? "" : " work=NULL");
    dx_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = 0.1, .grad_scale = 0.5, .step = 7};
    float *p = hrand(n, seed, 1, 0, 0), *g = hrand(n, seed + 1, 0.1, 0, 0);
    float *m = hrand(n, seed + 2, 0.01, 0, 0), *v = hrand(n, seed + 3, 1e-2, 0, 0);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    void *gp = g_from(p, n, F32), *gg = g_from(g, n, F32), *gm = g_from(m, n, F32);
    void *gv = g_from(v, n, F32), *gw = with_work ? g_nan(n, BF) : NULL;
    void *cp = c_from(p, n), *cg = c_from(g, n), *cm = c_from(m, n), *cv = c_from(v, n);
    void *cw = with_work ? c_nan(n) : NULL;
    gpu->adamw(gpu, gp, gw, gg, gm, gv, n, &hp);
    cpu->adamw(cpu, cp, cw, cg, cm, cv, n, &hp);
    cmp("adamw master", shape, gp, F32, cp, n, B_A);
    cmp("adamw m", shape, gm, F32, cm, n, B_A);
    cmp("adamw v", shape, gv, F32, cv, n, B_A);
    /* the update itself (p_new - p_old), element by element: within 1e-4 of the CPU's update
     * plus 2 spacings of the stored fp32 p_new. One spacing of p is ~1e-5 of a typical update
     * at lr = 1e-2, but where the decay nearly cancels the Adam step the update is known to no
     * better than p_new's rounding on either side. The worst element's error over its tolerance
     * must stay below 1. */
    float *pn = g_get(gp, n, F32);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const float ref = ((float *)cp)[i];
        const double du = (double)pn[i] - p[i], dr = (double)ref - p[i];
        const double tol = 1e-4 * fabs(dr) + 2.0 * ((double)nextafterf(fabsf(ref), INFINITY) - fabsf(ref));
        const double e = fabs(du - dr) / tol;
        if (isnan(e) || e > worst) worst = e; /* (a NaN stays: NaN > e is false) */
    }
    report("adamw update", shape, worst, 1.0);
    if (with_work) {
        cmp("adamw work", shape, gw, BF, cp, n, B_X);
        float *w = g_get(gw, n, BF);
        for (size_t i = 0; i < n; i++) pn[i] = bf16_round(pn[i]);
        report("adamw work == bf16(master)", shape, mismatches(w, pn, n), 0);
        free(w);
    }
    free(pn);
    free(p);
    free(g);
    free(m);
    free(v);
    gfree(gp);
    gfree(gg);
    gfree(gm);
    gfree(gv);
    gfree(gw);
    cfree(cp);
    cfree(cg);
    cfree(cm);
    cfree(cv);
    cfree(cw);
}

static void test_sumsq_scale_cast(uint64_t seed, size_t n)
{
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    float *x = hrand(n, seed, 1.5, 0.25, 0), pre = 3.0f;
    void *gx = g_from(x, n, F32), *go = g_from(&pre, 1, F32);
    void *cx = c_from(x, n), *co = c_from(&pre, 1);
    gpu->sumsq(gpu, go, gx, n);
    cpu->sumsq(cpu, co, cx, n);
    cmp("sumsq (+=)", shape, go, F32, co, 1, B_A);

    void *gd = g_nan(n, BF), *cd = c_nan(n);
    gpu->acc_to_act(gpu, gd, gx, n);
    cpu->acc_to_act(cpu, cd, cx, n);
    cmp("acc_to_act", shape, gd, BF, cd, n, B_X);
    float *d = g_get(gd, n, BF), *r = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) r[i] = bf16_round(x[i]);
    report("acc_to_act == rne(x)", shape, mismatches(d, r, n), 0);
    /* acc_add_act: fp32 x += bf16 rne(x), exact against the host's fp32 sum */
    void *ga = g_from(x, n, F32);
    gpu->acc_add_act(gpu, ga, gd, n);
    float *a = g_get(ga, n, F32);
    for (size_t i = 0; i < n; i++) r[i] = x[i] + r[i];
    report("acc_add_act == x + rne(x)", shape, mismatches(a, r, n), 0);
    free(a);
    gfree(ga);
    free(d);
    free(r);

    gpu->scale(gpu, gx, n, 0.37f);
    cpu->scale(cpu, cx, n, 0.37f);
    cmp("scale", shape, gx, F32, cx, n, B_A);
    free(x);
    gfree(gx);
    gfree(go);
    gfree(gd);
    cfree(cx);
    cfree(co);
    cfree(cd);
}

/* ============================================================================================ */

/* The embedding's forward and backward, whole table and vocab-parallel slices. The backward
 * adds each id's rows in position order (sorted by id, no atomics): bitwise the CPU's result. */
static void embedding_checks(uint64_t *seed)
{
    /* (the last two: a TinyLlama micro-batch's rows; 4,096 rows over 3 ids) */
    const int en[] = {7, 129, 64, 11200, 4096}, ed[] = {13, 96, 2048, 2048, 64}, ev[] = {1001, 1001, 5, 32000, 3};
    for (int a = 0; a < 5; a++) test_embedding(*seed += 10, en[a], ed[a], ev[a]);
    test_embedding_vp(*seed += 10, 7, 13, 1001, 1);
    test_embedding_vp(*seed += 10, 129, 96, 1000, 2);
    test_embedding_vp(*seed += 10, 64, 2048, 32000, 4);
    test_embedding_vp(*seed += 10, 4096, 64, 12, 4); /* 3 ids per slice, many rows each */
}

/* kernels.h power_counters around ~0.3 s of 4096^3 GEMMs: the device drew energy at a plausible
 * mean power (between 20 W and 2 kW), and the power-capped time lies within the elapsed time
 * (NVML's counters advance in steps of tens of ms: 0.15 s of slack). Skipped where the driver's
 * NVML cannot be loaded (a container without libnvidia-ml.so.1). */
static void test_power_counters(void)
{
    if (!gpu->power_counters) {
        report("power_counters", "missing on the CUDA backend", 1, 0);
        return;
    }
    double e0, c0, e1, c1;
    gpu->sync(gpu);
    if (gpu->power_counters(gpu, &e0, &c0)) {
        const int no_lib = strstr(dx_last_error(), "libnvidia-ml") != NULL;
        printf("power_counters: %s%s\n", dx_last_error(), no_lib ? " (skipped)" : "");
        if (!no_lib) report("power_counters", "NVML counters", 1, 0);
        return;
    }
    const int n = 4096;
    void *a = g_alloc((size_t)n * n, DX_BF16), *b = g_alloc((size_t)n * n, DX_BF16), *c = g_alloc((size_t)n * n, DX_BF16);
    if (cudaMemset(a, 0x3c, (size_t)n * n * 2) != cudaSuccess || cudaMemset(b, 0x3c, (size_t)n * n * 2) != cudaSuccess)
        die("cudaMemset");
    const uint64_t t0 = dx_now_ns();
    for (int i = 0; i < 1500 && dx_now_ns() - t0 < 2000000000ull; i++) {
        gpu->gemm(gpu, 0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, 0);
        if (i % 100 == 99) gpu->sync(gpu);
    }
    gpu->sync(gpu);
    const uint64_t t1 = dx_now_ns();
    const double dt = (double)(t1 - t0) * 1e-9;
    const int rc = gpu->power_counters(gpu, &e1, &c1);
    const double watts = (e1 - e0) / dt, capped = c1 - c0, call_us = (double)(dx_now_ns() - t1) * 1e-3;
    printf("power_counters: %.3f s of GEMMs, %.1f J (%.0f W), power-capped %.3f s; the call took %.1f us\n", dt,
           e1 - e0, watts, capped, call_us);
    report("power_counters: mean power", "4096^3 GEMMs, W in [20, 2000]", rc == 0 && watts >= 20 && watts <= 2000 ? 0 : 1, 0);
    report("power_counters: capped time", "in [0, elapsed + 0.15 s]", rc == 0 && capped >= 0 && capped <= dt + 0.15 ? 0 : 1, 0);
    gfree(a);
    gfree(b);
    gfree(c);
}

int main(void)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev <= 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    unsetenv("DX_CUDA_ATTENTION"); /* the default (tensor-core) attention first */
    unsetenv("DX_CUDA_DETERMINISTIC");
    unsetenv("DX_CUDA_ATT_CHUNK");
    setenv("DX_CUDA_ROPE_FOLD", "1", 1); /* attention_bwd_rope checked whatever the default */
    gpu = dx_backend_cuda_create(0, 4);
    if (!gpu) die("dx_backend_cuda_create");
    cpu = dx_backend_cpu_create(4);
    if (!cpu) die("dx_backend_cpu_create");
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) printf("device 0: %s\n", prop.name);
    printf("%-30s %-40s %11s %8s  %s\n", "op", "shape", "rel_err", "bound", "ok");

    uint64_t seed = 1000;
    /* DX_CUDA_TEST_ONLY=attention: the attention tests and timings only; =embedding: the
     * embedding's checks only */
    const char *only = getenv("DX_CUDA_TEST_ONLY");
    const int skip_attention = only && (strcmp(only, "power") == 0 || strcmp(only, "embedding") == 0);
    if (only && strcmp(only, "embedding") == 0) {
        embedding_checks(&seed);
        only = "none";
    }
    if (only && strcmp(only, "power") == 0) {
        test_power_counters();
        only = "none";
    }
    if (!only || (strcmp(only, "attention") != 0 && strcmp(only, "none") != 0)) {
        test_memory();
        test_power_counters();
        test_gemm_sm_target();

        const int gs[][3] = {{7, 13, 96}, {129, 1001, 64}, {64, 2048, 2048}, {33, 7, 1}, {5, 9, 0}};
        for (size_t s = 0; s < sizeof gs / sizeof gs[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int c_acc = 0; c_acc < 2; c_acc++) {
                        test_gemm(seed += 10, ta, tb, gs[s][0], gs[s][1], gs[s][2], 0.0f, c_acc);
                        test_gemm(seed += 10, ta, tb, gs[s][0], gs[s][1], gs[s][2], 0.5f, c_acc);
                    }
        /* 2^30 and 2^31 multiply-adds, dense: the cuBLASLt route and its tile choice */
        const int gl[][3] = {{1024, 2048, 512}, {2048, 1024, 1024}};
        for (size_t s = 0; s < sizeof gl / sizeof gl[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int c_acc = 0; c_acc < 2; c_acc++) {
                        test_gemm_ld(seed += 10, ta, tb, gl[s][0], gl[s][1], gl[s][2], 0.0f, c_acc, GEMM_DENSE);
                        test_gemm_ld(seed += 10, ta, tb, gl[s][0], gl[s][1], gl[s][2], 0.5f, c_acc, GEMM_DENSE);
                    }
        /* the same route with aligned padded strides (C a column block of a wider matrix) */
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int c_acc = 0; c_acc < 2; c_acc++) {
                    test_gemm_ld(seed += 10, ta, tb, gl[0][0], gl[0][1], gl[0][2], 0.0f, c_acc, GEMM_ALIGNED);
                    test_gemm_ld(seed += 10, ta, tb, gl[0][0], gl[0][1], gl[0][2], 0.5f, c_acc, GEMM_ALIGNED);
                }
        /* gemm_res: the residual layer shape (ta 0, tb 1) and the others, dense and padded */
        const int rs[][3] = {{128, 256, 512}, {40, 64, 96}, {7, 13, 96}, {64, 2048, 2048}};
        for (size_t s = 0; s < sizeof rs / sizeof rs[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    const int pad = rs[s][1] % 8 ? 3 : 0;
                    test_gemm_res(seed += 10, ta, tb, rs[s][0], rs[s][1], rs[s][2], pad, 0);
                    if (ta == 0 && tb == 1) {
                        test_gemm_res(seed += 10, ta, tb, rs[s][0], rs[s][1], rs[s][2], pad, 1);
                        if (!pad) test_gemm_res(seed += 10, ta, tb, rs[s][0], rs[s][1], rs[s][2], 5, 0);
                    }
                }

        const int rn[] = {7, 129}, rd[] = {13, 96, 2048};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++) test_rmsnorm(seed += 10, rn[a], rd[b]);
        test_rmsnorm(seed += 10, 20000, 13); /* > 256 chunks of 64 rows for dw */
        test_rmsnorm(seed += 10, 129, 8192); /* D > 4096: not held in registers */
        test_rmsnorm(seed += 10, 129, 4096); /* 2048 < D <= 4096: two warps per row */
        test_rmsnorm(seed += 10, 7, 4096);
        test_rmsnorm(seed += 10, 20000, 3000); /* two warps per row, a partial last vector round */
        test_rmsnorm(seed += 10, 7, 2560);   /* registers, D / 256 not a power of 2 */
        test_rmsnorm(seed += 10, 2800, 4096); /* Llama-2-7B, 8 x 350 tokens: 256 chunks of 11 rows */

        const int ts[] = {1, 7, 129}, dhs[] = {32, 64, 128};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) test_rope(seed += 10, 2, ts[a], 8, dhs[b], 0);
        test_rope(seed += 10, 2, 7, 2, 64, 0); /* after a longer T: reuses the cached table */
        test_rope(seed += 10, 2, 129, 4, 64, 4 * 64); /* the K block of a fused K|V buffer */
        test_rope(seed += 10, 2, 7, 2, 32, 2);        /* rows not a multiple of 8: scalar */

        const size_t ns[] = {1, 13, 1001, (1u << 20) + 3};
        for (int a = 0; a < 4; a++) {
            test_swiglu(seed += 10, 1, (int)ns[a], 0);
            test_add(seed += 10, ns[a]);
            test_adamw(seed += 10, ns[a], 1);
            test_adamw(seed += 10, ns[a], 0);
            test_sumsq_scale_cast(seed += 10, ns[a]);
        }
        test_sumsq_scale_cast(seed += 10, (1u << 22) + 7);
        test_dropout(seed += 10, 7, 13, 0.1f);
        test_nf4(seed += 10, 1, 0);
        test_nf4(seed += 10, 999, 0);                      /* 62 chunks, then a 7-element tail */
        test_nf4(seed += 10, 999, 3);                      /* unaligned output: scalar only */
        test_nf4(seed += 10, (size_t)5632 * 2048 + 64, 0); /* a TinyLlama MLP matrix: 704 groups */
        test_nf4(seed += 10, (size_t)4096 * 4096 + 40, 8); /* a Llama-2-7B matrix; out + 16 bytes */
        test_dropout(seed += 10, 2048, 2048, 0.05f);
        test_swiglu(seed += 10, 129, 5632 / 8, 1); /* fused gate|up, vector form */
        test_swiglu(seed += 10, 7, 13, 1);         /* fused, scalar form */
        test_gemm_swiglu(seed += 10, 1000, 136, 200); /* wgmma kernel: partial tiles, K not a multiple of 64 */
        test_gemm_swiglu(seed += 10, 300, 704, 2048); /* TinyLlama's K, 5.5 column tiles */
        test_gemm_swiglu(seed += 10, 4100, 128, 64);  /* 33 row tiles: more tiles than some GPUs' SMs */
        test_gemm_swiglu(seed += 10, 7, 13, 24);      /* F % 8 != 0: cuBLAS + swiglu_fwd */
        test_gemm_swiglu(seed += 10, 4200, 1152, 128); /* 297 tiles: > 2 per block on a 132-SM GPU (persistent) */
        test_gemm_rope(seed += 10, 2, 300, 8, 2, 64, 200, 1);   /* wgmma kernel: a tile half rotated, K % 64 != 0 */
        test_gemm_rope(seed += 10, 3, 129, 4, 4, 128, 64, 1);   /* head dim 128 */
        test_gemm_rope(seed += 10, 2, 350, 32, 4, 64, 2048, 1); /* TinyLlama's layer, 10 column tiles */
        test_gemm_rope(seed += 10, 4, 1024, 16, 4, 64, 128, 1); /* 192 tiles: > 1 per block (persistent) */
        test_gemm_rope(seed += 10, 2, 77, 4, 1, 64, 72, 1);     /* F 384: the last tile's second W box past F */
        test_gemm_rope(seed += 10, 2, 65, 5, 1, 128, 64, 1);    /* F 896 at head dim 128, R 768 */
        test_gemm_rope(seed += 10, 2, 7, 2, 1, 32, 24, 0);      /* head dim 32: cuBLAS + rope_fwd */
        test_gemm_swiglu_bwd(seed += 10, 1000, 136, 200); /* wgmma kernel: partial tiles, K % 64 != 0 */
        test_gemm_swiglu_bwd(seed += 10, 300, 704, 2048);
        test_gemm_swiglu_bwd(seed += 10, 4100, 128, 64);  /* 33 row tiles */
        test_gemm_swiglu_bwd(seed += 10, 7, 13, 24);      /* F % 8 != 0: cuBLAS + swiglu_bwd */
        test_gemm_swiglu_bwd(seed += 10, 4200, 1152, 128); /* 297 tiles: > 2 per block (persistent) */
        test_gemm_swiglu_bwd(seed += 10, 8400, 1280, 40); /* 330 tiles of 128 x 256: > 2 per block, K % 32 != 0 */

        embedding_checks(&seed);

        test_cross_entropy(seed += 10, 7, 1001, 1);
        test_cross_entropy(seed += 10, 33, 32000, 1);
        test_cross_entropy(seed += 10, 1, 13, 1);
        test_cross_entropy(seed += 10, 33, 32000, 0);
        test_cross_entropy(seed += 10, 1200, 96, 1); /* more rows than k_xent8's grid */

        /* tensor parallelism: vocab-parallel embedding and cross-entropy */
        test_ce_vp(seed += 10, 7, 1001, 1);
        test_ce_vp(seed += 10, 7, 1000, 2);
        test_ce_vp(seed += 10, 33, 32000, 4);
    }

    /* attention: tensor-core kernels (default), then CUDA-core ones (a fresh backend) */
    const int ats[] = {1, 7, 129, 512}, hkvs[] = {8, 2}, adhs[] = {32, 64, 128};
    for (int pass = 0; pass < 9 && !skip_attention; pass++) {
        if (pass > 0) { /* a fresh backend reads the environment */
            gpu->destroy(gpu);
            if (pass == 1) {
                setenv("DX_CUDA_DETERMINISTIC", "1", 1); /* two-kernel backward */
                /* the Hopper forward's persistent grid at 7 blocks, so that each walks several
                 * work tiles (its K/V stages and barrier phases run on across them) at these
                 * small shapes */
                setenv("DX_CUDA_ATT_GRID", "7", 1);
            }
            if (pass == 2) {
                unsetenv("DX_CUDA_DETERMINISTIC");
                unsetenv("DX_CUDA_ATT_GRID");
                setenv("DX_CUDA_ATTENTION", "simple", 1);
            }
            if (pass == 3) {
                /* the tensor-core kernels again, the Hopper backward's blocks launched in chunks
                 * of 3 (b, kv head) pairs (the order it picks where dq would not fit L2; these
                 * shapes fit), the last chunk short (B Hkv = 16 or 4) */
                unsetenv("DX_CUDA_ATTENTION");
                setenv("DX_CUDA_ATT_CHUNK", "3", 1);
                /* and the forward's longest-first order (variant 15; the default walks head
                 * after head) on 7 persistent blocks */
                setenv("DX_CUDA_ATT_FWD", "15", 1);
                setenv("DX_CUDA_ATT_GRID", "7", 1);
            }
            if (pass == 4) { /* the Hopper backward's dq accumulator zeroed, every piece added
                              * by producer warp 1, tiles converted in the kernel (Dh 64) */
                unsetenv("DX_CUDA_ATT_CHUNK");
                unsetenv("DX_CUDA_ATT_FWD");
                unsetenv("DX_CUDA_ATT_GRID");
                setenv("DX_CUDA_ATT_BWD", "16", 1);
            }
            if (pass == 5) /* first contributions copied, tiles converted in the kernel (Dh 64) */
                setenv("DX_CUDA_ATT_BWD", "17", 1);
            if (pass == 6) /* every contribution added by the consumers, the separate pass */
                setenv("DX_CUDA_ATT_BWD", "14", 1);
            if (pass == 7) /* the key-tile-major grid (the default from 8 waves of blocks up) */
                setenv("DX_CUDA_ATT_BWD", "10", 1);
            if (pass == 8) /* 64-query tiles at Dh 64 (the default has 128-query tiles) */
                setenv("DX_CUDA_ATT_BWD", "21", 1);
            gpu = dx_backend_cuda_create(0, 4);
            if (!gpu) die("dx_backend_cuda_create");
        }
        att_tag = pass == 0   ? "[tc]"
                  : pass == 1 ? "[tc-det]"
                  : pass == 2 ? "[simple]"
                  : pass == 3 ? "[tc-chunk]"
                  : pass == 4 ? "[tc-add]"
                  : pass == 5 ? "[tc-conv]"
                  : pass == 6 ? "[tc-sep]"
                  : pass == 7 ? "[tc-keymaj]"
                              : "[tc-q64]";
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++)
                    test_attention(seed += 10, 2, ats[a], 8, hkvs[b], adhs[c], (a + b + c) % 3);
        /* past seq 1024 (64-query tiles) and 2048 (128-query tiles) the Hopper backward at Dh
         * 64 zeroes the dq accumulator and every contribution is added (mode bit 4 off) */
        test_attention(seed += 10, 1, 1100, 8, 2, 64, 2);
        test_attention(seed += 10, 1, 2100, 4, 1, 64, 2);
        if (!getenv("DX_CUDA_TEST_NO_PERF") && pass < 3) { /* set by host-side simulators of the kernels */
            if (getenv("DX_CUDA_ATT_GRID")) { /* timed on the full grid */
                gpu->destroy(gpu);
                unsetenv("DX_CUDA_ATT_GRID");
                gpu = dx_backend_cuda_create(0, 4);
                if (!gpu) die("dx_backend_cuda_create");
            }
            time_attention(8, 2048, 32, 4, 64); /* TinyLlama-1.1B */
            time_attention(4, 2048, 32, 8, 128);
            time_attention(8, 1024, 16, 16, 64);
        }
    }

    gpu->sync(gpu);
    gpu->destroy(gpu);
    cpu->destroy(cpu);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
