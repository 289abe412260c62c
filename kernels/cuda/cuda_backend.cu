/* dissect CUDA backend: memory, transfers, gemm (cuBLAS) and the element-wise / reduction ops.
 * Attention lives in attention.cu. The math of every op is documented in kernels/kernels.h and
 * matches the CPU twin (kernels/cpu/cpu_ops.c); comments below note where the evaluation
 * order or precision differs.
 *
 * Conventions: X = bf16 (__nv_bfloat16), A = f32. Every kernel reads bf16 into fp32 registers,
 * computes in fp32 (adamw, loss sums and sum of squares in fp64) and rounds to bf16 once, with
 * round-to-nearest-even, when it stores an X output. Reductions are deterministic: fixed block
 * shapes, tree reductions in shared memory or warp shuffles, partial results reduced by a second
 * kernel in a fixed order; no floating-point atomics (the embedding's backward sorts its rows by
 * id first).
 */
#include "cuda_internal.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DXC_THREADS 256
#define DXC_BLAS_WS_BYTES ((size_t)32 << 20) /* cuBLAS workspace (NVIDIA recommends 32 MiB on Hopper) */

[[noreturn]] void dxc_die(const char *op, const char *file, int line, const char *what,
                          const char *msg)
{
    fprintf(stderr, "dissect cuda backend: %s: %s:%d: %s: %s\n", op, file, line, what, msg);
    fflush(stderr);
    abort();
}

/* ============================================================================================
 * Allocation table: open addressing, linear probing, backward-shift deletion.
 * ========================================================================================== */

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int tab_grow(dxc_impl *im)
{
    size_t ncap = im->cap ? im->cap * 2 : 256;
    dxc_slot *ns = (dxc_slot *)calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < im->cap; i++) {
        if (!im->slots[i].p) continue;
        size_t j = ptr_hash(im->slots[i].p) & (ncap - 1);
        while (ns[j].p) j = (j + 1) & (ncap - 1);
        ns[j] = im->slots[i];
    }
    free(im->slots);
    im->slots = ns;
    im->cap = ncap;
    return 0;
}

static int tab_insert(dxc_impl *im, void *p, size_t bytes, int cat)
{
    if ((im->count + 1) * 2 > im->cap && tab_grow(im)) return -1;
    size_t mask = im->cap - 1, j = ptr_hash(p) & mask;
    while (im->slots[j].p) j = (j + 1) & mask;
    im->slots[j].p = p;
    im->slots[j].bytes = bytes;
    im->slots[j].cat = cat;
    im->count++;
    return 0;
}

static long tab_find(const dxc_impl *im, const void *p)
{
    if (!im->cap) return -1;
    size_t mask = im->cap - 1, j = ptr_hash(p) & mask;
    while (im->slots[j].p) {
        if (im->slots[j].p == p) return (long)j;
        j = (j + 1) & mask;
    }
    return -1;
}

static void tab_remove(dxc_impl *im, size_t i)
{
    size_t mask = im->cap - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!im->slots[j].p) break;
        size_t home = ptr_hash(im->slots[j].p) & mask;
        /* the entry at j stays if its home lies cyclically in (i, j] */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        im->slots[i] = im->slots[j];
        i = j;
    }
    im->slots[i].p = NULL;
    im->slots[i].bytes = 0;
    im->slots[i].cat = 0;
    im->count--;
}

/* ============================================================================================
 * Memory and transfers
 * ========================================================================================== */

static void *cuda_alloc(dx_backend *be, size_t bytes, dx_mem_cat cat)
{
    if ((int)cat < 0 || cat >= DX_MEM_NCAT) cat = DX_MEM_OTHER;
    dxc_impl *im = dxc(be);
    void *p = NULL;
    cudaError_t e = cudaSetDevice(im->device);
    if (e == cudaSuccess) e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess || !p) {
        (void)cudaGetLastError(); /* clear a non-sticky out-of-memory error */
        dx_fail("cuda backend: cannot allocate %zu bytes for %s on device %d: %s", bytes,
                dx_mem_cat_name(cat), im->device, cudaGetErrorString(e));
        return NULL;
    }
    if (tab_insert(im, p, bytes, (int)cat)) {
        cudaFree(p);
        dx_fail("cuda backend: out of host memory for the allocation table");
        return NULL;
    }
    dx_mem_account(&be->mem, cat, (long long)bytes);
    return p;
}

static void cuda_free(dx_backend *be, void *p)
{
    if (!p) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "free");
    long i = tab_find(im, p);
    if (i < 0) dxc_die("free", __FILE__, __LINE__, "lookup", "pointer not allocated by this backend");
    /* queued ops may still read p: wait for them (cudaFree alone does not order with them) */
    DXC_CHECK("free", cudaStreamSynchronize(im->stream));
    DXC_CHECK("free", cudaFree(p));
    dx_mem_account(&be->mem, (dx_mem_cat)im->slots[i].cat, -(long long)im->slots[i].bytes);
    tab_remove(im, (size_t)i);
}

static void cuda_zero(dx_backend *be, void *p, size_t bytes)
{
    if (!bytes) return;
    DXC_ENTER(be, "zero");
    DXC_CHECK("zero", cudaMemsetAsync(p, 0, bytes, dxc(be)->stream));
    if (dxc(be)->sync_each_op) DXC_CHECK("zero", cudaStreamSynchronize(dxc(be)->stream));
}

static void cuda_copy(dx_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return;
    DXC_ENTER(be, "copy");
    DXC_CHECK("copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dxc(be)->stream));
    if (dxc(be)->sync_each_op) DXC_CHECK("copy", cudaStreamSynchronize(dxc(be)->stream));
}

/* Copies and waits; returns the first error (also errors of earlier queued work). */
static cudaError_t memcpy_sync(dx_backend *be, void *dst, const void *src, size_t bytes,
                               cudaMemcpyKind kind)
{
    dxc_impl *im = dxc(be);
    cudaError_t e = cudaSetDevice(im->device);
    if (e == cudaSuccess && bytes) e = cudaMemcpyAsync(dst, src, bytes, kind, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    return e;
}

static int cuda_upload(dx_backend *be, void *dst, const void *host_src, size_t bytes)
{
    cudaError_t e = memcpy_sync(be, dst, host_src, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        return dx_fail("cuda backend: upload of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return 0;
}

static int cuda_download(dx_backend *be, void *host_dst, const void *src, size_t bytes)
{
    cudaError_t e = memcpy_sync(be, host_dst, src, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return dx_fail("cuda backend: download of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return 0;
}

/* Same rounding as the CPU backend: round to nearest even, NaN stays a (quiet) NaN. */
static uint16_t host_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float host_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define DXC_STAGE_ELEMS ((size_t)1 << 22) /* bf16 conversions go through an 8 MiB host buffer */

static int cuda_upload_f32(dx_backend *be, void *dst, dx_dtype dt, const float *src, size_t n)
{
    if (dt == DX_F32) return cuda_upload(be, dst, src, n * sizeof(float));
    if (dt != DX_BF16)
        return dx_fail("cuda backend: upload_f32: unsupported dtype %s", dx_dtype_name(dt));
    if (!n) return 0;
    size_t chunk = n < DXC_STAGE_ELEMS ? n : DXC_STAGE_ELEMS;
    uint16_t *st = (uint16_t *)malloc(chunk * sizeof(uint16_t));
    if (!st) return dx_fail("cuda backend: upload_f32: out of host memory");
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        size_t m = n - i0 < chunk ? n - i0 : chunk;
        for (size_t i = 0; i < m; i++) st[i] = host_f32_to_bf16(src[i0 + i]);
        /* synchronous per chunk: the staging buffer is reused */
        cudaError_t e = memcpy_sync(be, (uint16_t *)dst + i0, st, m * sizeof(uint16_t),
                                    cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            free(st);
            return dx_fail("cuda backend: upload_f32 of %zu bf16 values: %s", n,
                           cudaGetErrorString(e));
        }
    }
    free(st);
    return 0;
}

static int cuda_download_f32(dx_backend *be, float *dst, const void *src, dx_dtype dt, size_t n)
{
    if (dt == DX_F32) return cuda_download(be, dst, src, n * sizeof(float));
    if (dt != DX_BF16)
        return dx_fail("cuda backend: download_f32: unsupported dtype %s", dx_dtype_name(dt));
    if (!n) return 0;
    size_t chunk = n < DXC_STAGE_ELEMS ? n : DXC_STAGE_ELEMS;
    uint16_t *st = (uint16_t *)malloc(chunk * sizeof(uint16_t));
    if (!st) return dx_fail("cuda backend: download_f32: out of host memory");
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        size_t m = n - i0 < chunk ? n - i0 : chunk;
        cudaError_t e = memcpy_sync(be, st, (const uint16_t *)src + i0, m * sizeof(uint16_t),
                                    cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            free(st);
            return dx_fail("cuda backend: download_f32 of %zu bf16 values: %s", n,
                           cudaGetErrorString(e));
        }
        for (size_t i = 0; i < m; i++) dst[i0 + i] = host_bf16_to_f32(st[i]);
    }
    free(st);
    return 0;
}

/* ---- CPU offload: pinned host memory and copies on the two copy streams ---- */

static void *cuda_host_alloc(dx_backend *be, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaSetDevice(dxc(be)->device);
    if (e == cudaSuccess) e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess || !p) {
        (void)cudaGetLastError();
        dx_fail("cuda backend: cannot allocate %zu bytes of page-locked host memory: %s", bytes,
                cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_host_free(dx_backend *be, void *p)
{
    (void)be;
    if (p) cudaFreeHost(p);
}

/* Lazily creates the copy streams and events; returns the CUDA error. */
static cudaError_t copy_setup(dxc_impl *im)
{
    if (im->copy_stream[0]) return cudaSuccess;
    cudaError_t e = cudaEventCreateWithFlags(&im->copy_before, cudaEventDisableTiming);
    for (int i = 0; e == cudaSuccess && i < DX_COPY_TICKETS; i++)
        e = cudaEventCreateWithFlags(&im->copy_ev[i], cudaEventDisableTiming);
    for (int i = 0; e == cudaSuccess && i < DX_COPY_TICKETS; i++)
        e = cudaEventCreateWithFlags(&im->fence_ev[i], cudaEventDisableTiming);
    for (int d = 0; e == cudaSuccess && d < 2; d++)
        e = cudaStreamCreateWithFlags(&im->copy_stream[d], cudaStreamNonBlocking);
    return e;
}

/* Queues a copy on copy stream `dir` after the compute stream's queued work; returns the ticket.
 * Uploads make the compute stream's later work wait for them unless `detached`. */
static int copy_async(dx_backend *be, int dir, void *dst, const void *src, size_t bytes, int detached,
                      int fence)
{
    dxc_impl *im = dxc(be);
    const char *what = dir ? "upload_async" : "download_async";
    cudaError_t e = cudaSetDevice(im->device);
    if (e == cudaSuccess) e = copy_setup(im);
    int t = im->copy_next;
    cudaEvent_t ev = im->copy_ev[t % DX_COPY_TICKETS];
    /* the event's previous copy (DX_COPY_TICKETS tickets ago) must be over before reuse */
    if (e == cudaSuccess && t >= DX_COPY_TICKETS) e = cudaEventSynchronize(ev);
    if (fence >= 0) { /* after the compute stream's point at be->fence (or later, if reused) */
        if (e == cudaSuccess) e = cudaStreamWaitEvent(im->copy_stream[dir], im->fence_ev[fence % DX_COPY_TICKETS], 0);
    } else {
        if (e == cudaSuccess) e = cudaEventRecord(im->copy_before, im->stream);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(im->copy_stream[dir], im->copy_before, 0);
    }
    if (e == cudaSuccess && bytes)
        e = cudaMemcpyAsync(dst, src, bytes, dir ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                            im->copy_stream[dir]);
    if (e == cudaSuccess) e = cudaEventRecord(ev, im->copy_stream[dir]);
    if (e == cudaSuccess && dir && !detached) e = cudaStreamWaitEvent(im->stream, ev, 0); /* later compute waits */
    if (e != cudaSuccess)
        return dx_fail("cuda backend: %s of %zu bytes: %s", what, bytes, cudaGetErrorString(e));
    im->copy_next = t + 1 < (1 << 30) ? t + 1 : DX_COPY_TICKETS; /* stays >= DX_COPY_TICKETS */
    return t;
}

static int cuda_download_async(dx_backend *be, void *host_dst, const void *src, size_t bytes, int fence)
{
    return copy_async(be, 0, host_dst, src, bytes, 0, fence);
}

static int cuda_fence(dx_backend *be)
{
    dxc_impl *im = dxc(be);
    cudaError_t e = cudaSetDevice(im->device);
    if (e == cudaSuccess) e = copy_setup(im);
    int f = im->fence_next;
    if (e == cudaSuccess) e = cudaEventRecord(im->fence_ev[f % DX_COPY_TICKETS], im->stream);
    if (e != cudaSuccess) return dx_fail("cuda backend: fence: %s", cudaGetErrorString(e));
    im->fence_next = f + 1 < (1 << 30) ? f + 1 : 0;
    return f;
}

static int cuda_upload_async(dx_backend *be, void *dst, const void *host_src, size_t bytes)
{
    return copy_async(be, 1, dst, host_src, bytes, 0, -1);
}

static int cuda_upload_async_detached(dx_backend *be, void *dst, const void *host_src, size_t bytes)
{
    return copy_async(be, 1, dst, host_src, bytes, 1, -1);
}

static int cuda_copy_join(dx_backend *be, int ticket)
{
    dxc_impl *im = dxc(be);
    if (ticket < 0 || ticket >= im->copy_next || !im->copy_stream[0]) return 0;
    if (im->copy_next - ticket > DX_COPY_TICKETS) return 0; /* its event was reused: it is over */
    cudaError_t e = cudaSetDevice(im->device);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(im->stream, im->copy_ev[ticket % DX_COPY_TICKETS], 0);
    if (e != cudaSuccess) return dx_fail("cuda backend: copy_join: %s", cudaGetErrorString(e));
    return 0;
}

static int cuda_copy_wait(dx_backend *be, int ticket)
{
    dxc_impl *im = dxc(be);
    if (ticket < 0 || ticket >= im->copy_next || !im->copy_stream[0]) return 0;
    if (im->copy_next - ticket > DX_COPY_TICKETS) return 0; /* its event was reused: it is over */
    cudaError_t e = cudaEventSynchronize(im->copy_ev[ticket % DX_COPY_TICKETS]);
    if (e != cudaSuccess) return dx_fail("cuda backend: copy_wait: %s", cudaGetErrorString(e));
    return 0;
}

static void *cuda_copy_stream(dx_backend *be, int dir)
{
    dxc_impl *im = dxc(be);
    if (dir < 0 || dir > 1 || cudaSetDevice(im->device) != cudaSuccess || copy_setup(im) != cudaSuccess)
        return NULL;
    return (void *)im->copy_stream[dir];
}

static void cuda_sync(dx_backend *be)
{
    DXC_ENTER(be, "sync");
    DXC_CHECK("sync", cudaStreamSynchronize(dxc(be)->stream));
}

/* The side stream (kernels.h). It is created with the lowest priority the device has (the
 * compute stream's too, unless DX_CUDA_COMPUTE_PRIORITY=high gave the compute stream the
 * highest), so the two streams' blocks are scheduled alike, or the compute stream's first. */
static void cuda_side_begin(dx_backend *be)
{
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "side_begin");
    if (im->compute_stream) dxc_die("side_begin", __FILE__, __LINE__, "side_begin", "already on the side stream");
    if (!im->side_stream) {
        int least = 0, greatest = 0;
        DXC_CHECK("side_begin", cudaDeviceGetStreamPriorityRange(&least, &greatest));
        DXC_CHECK("side_begin", cudaStreamCreateWithPriority(&im->side_stream, cudaStreamNonBlocking, least));
        DXC_CHECK("side_begin", cudaEventCreateWithFlags(&im->side_start, cudaEventDisableTiming));
    }
    DXC_CHECK("side_begin", cudaEventRecord(im->side_start, im->stream));
    DXC_CHECK("side_begin", cudaStreamWaitEvent(im->side_stream, im->side_start, 0));
    im->compute_stream = im->stream;
    im->stream = im->side_stream;
}

/* Makes (*ev)[slot] exist: grows the array of *n events (created with `flags`) as needed. */
static int grow_events(cudaEvent_t **ev, int *n, int slot, unsigned flags, const char *op)
{
    if (slot < *n) return 0;
    int m = slot + 1 > 2 * *n ? slot + 1 : 2 * *n;
    cudaEvent_t *e = (cudaEvent_t *)realloc(*ev, (size_t)m * sizeof *e);
    if (!e) return dx_fail("cuda backend: %s: out of host memory", op);
    *ev = e;
    for (int i = *n; i < m; i++) {
        cudaError_t r = cudaEventCreateWithFlags(&e[i], flags);
        if (r != cudaSuccess) {
            *n = i;
            return dx_fail("cuda backend: %s: cudaEventCreate: %s", op, cudaGetErrorString(r));
        }
    }
    *n = m;
    return 0;
}

static int cuda_side_record(dx_backend *be, int slot)
{
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "side_record");
    if (!im->compute_stream || slot < 0)
        return dx_fail("cuda backend: side_record(%d) outside side_begin / side_end", slot);
    if (grow_events(&im->side_ev, &im->side_nev, slot, cudaEventDisableTiming, "side_record")) return -1;
    cudaError_t e = cudaEventRecord(im->side_ev[slot], im->stream);
    if (e != cudaSuccess) return dx_fail("cuda backend: side_record: %s", cudaGetErrorString(e));
    return 0;
}

/* The stopwatch (kernels.h): timing events on the compute stream, one per slot. */
static int cuda_stamp(dx_backend *be, int slot)
{
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "stamp");
    if (slot < 0) return dx_fail("cuda backend: stamp(%d): the slot must be >= 0", slot);
    if (grow_events(&im->stamp_ev, &im->stamp_nev, slot, cudaEventDefault, "stamp")) return -1;
    cudaError_t e = cudaEventRecord(im->stamp_ev[slot], im->compute_stream ? im->compute_stream : im->stream);
    if (e != cudaSuccess) return dx_fail("cuda backend: stamp: %s", cudaGetErrorString(e));
    return 0;
}

static int cuda_stamp_seconds(dx_backend *be, int a, int b, double *s)
{
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "stamp_seconds");
    if (a < 0 || b < 0 || a >= im->stamp_nev || b >= im->stamp_nev)
        return dx_fail("cuda backend: stamp_seconds(%d, %d): slot never recorded", a, b);
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, im->stamp_ev[a], im->stamp_ev[b]);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not ready / never recorded: not a sticky error */
        return dx_fail("cuda backend: stamp_seconds(%d, %d): %s", a, b, cudaGetErrorString(e));
    }
    *s = (double)ms * 1e-3;
    return 0;
}

static void cuda_side_end(dx_backend *be)
{
    dxc_impl *im = dxc(be);
    if (!im->compute_stream) return;
    im->stream = im->compute_stream;
    im->compute_stream = NULL;
}

static void cuda_side_wait(dx_backend *be, int slot)
{
    dxc_impl *im = dxc(be);
    if (slot < 0 || slot >= im->side_nev) return;
    DXC_ENTER(be, "side_wait"); /* (an event never recorded: no wait, as CUDA defines it) */
    DXC_CHECK("side_wait", cudaStreamWaitEvent(im->stream, im->side_ev[slot], 0));
}

/* The SM count the compute stream's GEMMs are planned for (0: all): DX_CUDA_GEMM_SMS's target
 * (gemm_sms), or while the overlap stream holds aux_sms SMs the rest, whichever is smaller. */
static int gemm_sm_target(const dxc_impl *im)
{
    if (!im->aux_sms) return im->gemm_sms;
    const int left = im->num_sms - im->aux_sms;
    return im->gemm_sms > 0 && im->gemm_sms < left ? im->gemm_sms : left;
}

/* The overlap stream (kernels.h). */
static int cuda_overlap_begin(dx_backend *be, int sms)
{
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "overlap_begin");
    if (sms < 1 || sms >= im->num_sms)
        return dx_fail("cuda backend: overlap_begin(%d): the SMs must be 1 .. %d", sms, im->num_sms - 1);
    if (im->compute_stream || im->aux_saved || im->aux_sms)
        return dx_fail("cuda backend: overlap_begin inside side_begin / side_end or another overlap");
    if (!im->aux_stream) {
        int least = 0, greatest = 0;
        DXC_CHECK("overlap_begin", cudaDeviceGetStreamPriorityRange(&least, &greatest));
        DXC_CHECK("overlap_begin", cudaStreamCreateWithPriority(&im->aux_stream, cudaStreamNonBlocking, greatest));
        DXC_CHECK("overlap_begin", cudaEventCreateWithFlags(&im->aux_fork, cudaEventDisableTiming));
        DXC_CHECK("overlap_begin", cudaEventCreateWithFlags(&im->aux_done, cudaEventDisableTiming));
    }
    DXC_CHECK("overlap_begin", cudaEventRecord(im->aux_fork, im->stream));
    DXC_CHECK("overlap_begin", cudaStreamWaitEvent(im->aux_stream, im->aux_fork, 0));
    im->aux_sms = sms;
    if (cublasSetSmCountTarget(im->blas, gemm_sm_target(im)) != CUBLAS_STATUS_SUCCESS) {
        im->aux_sms = 0;
        return dx_fail("cuda backend: overlap_begin: cublasSetSmCountTarget failed");
    }
    im->aux_saved = im->stream;
    im->stream = im->aux_stream;
    return 0;
}

static void cuda_overlap_end(dx_backend *be)
{
    dxc_impl *im = dxc(be);
    if (!im->aux_saved) return;
    DXC_ENTER(be, "overlap_end");
    DXC_CHECK("overlap_end", cudaEventRecord(im->aux_done, im->aux_stream));
    im->stream = im->aux_saved;
    im->aux_saved = NULL;
}

static void cuda_overlap_join(dx_backend *be)
{
    dxc_impl *im = dxc(be);
    if (!im->aux_sms) return;
    cuda_overlap_end(be);
    DXC_ENTER(be, "overlap_join");
    DXC_CHECK("overlap_join", cudaStreamWaitEvent(im->stream, im->aux_done, 0));
    im->aux_sms = 0;
    DXC_BLAS("overlap_join", cublasSetSmCountTarget(im->blas, gemm_sm_target(im))); /* DX_CUDA_GEMM_SMS's again */
}

void *dxc_scratch(dx_backend *be, size_t bytes, const char *op)
{
    dxc_impl *im = dxc(be);
    if (bytes <= im->scratch_bytes && im->scratch) return im->scratch;
    size_t nb = bytes > 2 * im->scratch_bytes ? bytes : 2 * im->scratch_bytes;
    nb = (nb + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1); /* whole MiB */
    if (im->scratch) { /* free waits for the queued ops that use it */
        be->free(be, im->scratch);
        im->scratch = NULL;
        im->scratch_bytes = 0;
    }
    void *p = be->alloc(be, nb, DX_MEM_ACTIVATIONS);
    if (!p) dxc_die(op, __FILE__, __LINE__, "workspace allocation", dx_last_error());
    im->scratch = p;
    im->scratch_bytes = nb;
    return p;
}

void dxc_set_smem(dx_backend *be, const void *func, size_t bytes, const char *op)
{
    dxc_impl *im = dxc(be);
    if (bytes > (size_t)im->smem_optin) {
        char msg[160];
        snprintf(msg, sizeof msg, "kernel needs %zu bytes of shared memory, device allows %d",
                 bytes, im->smem_optin);
        dxc_die(op, __FILE__, __LINE__, "shared memory", msg);
    }
    DXC_CHECK(op, cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bytes));
}

/* ============================================================================================
 * Device helpers
 * ========================================================================================== */

static __device__ __forceinline__ float ld(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ bf16 tobf(float f) { return __float2bfloat16_rn(f); }

template <typename V> static __device__ __forceinline__ V warp_sum(V v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
 * Fixed order for a fixed blockDim: deterministic. Every thread must call it. */
template <typename V> static __device__ V block_sum(V v)
{
    __shared__ V sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (V)0;
    return warp_sum(v);
}

/* Grid-stride loop over [0, n). */
#define DXC_FOR(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                    \
         i += (size_t)gridDim.x * blockDim.x)

/* Blocks for a grid-stride loop over n > 0 elements. */
static unsigned grid_for(dx_backend *be, size_t n)
{
    size_t b = (n + DXC_THREADS - 1) / DXC_THREADS;
    size_t cap = (size_t)dxc(be)->num_sms * 32;
    return (unsigned)(b < cap ? b : cap);
}

/* Grid-stride loop over [start, n) (the scalar tail after a vector loop). */
#define DXC_FOR_FROM(i, start, n)                                                              \
    for (size_t i = (start) + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);          \
         i += (size_t)gridDim.x * blockDim.x)

/* 16-byte vectors of 8 bf16 (uint4): element e of vector v is p[8 v + e], in 32-bit word e / 2,
 * low half for even e (little endian). ldg8 is for data the kernel does not write (read-only
 * path), ld8 / st8 for in-place data. The pointer must be 16-byte aligned. */
static __device__ __forceinline__ uint4 ldg8(const bf16 *p, size_t v)
{
    return __ldg(reinterpret_cast<const uint4 *>(p) + v);
}
static __device__ __forceinline__ uint4 ld8(const bf16 *p, size_t v)
{
    return reinterpret_cast<const uint4 *>(p)[v];
}
static __device__ __forceinline__ void st8(bf16 *p, size_t v, uint4 val)
{
    reinterpret_cast<uint4 *>(p)[v] = val;
}

/* bf16 -> f32 is exact (the bits shifted up), as __bfloat162float. */
static __device__ __forceinline__ void unpack8(uint4 v, float f[8])
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = __uint_as_float(w[k] << 16);
        f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}

/* f32 -> bf16 round to nearest even (cvt.rn.bf16x2.f32: the same rounding as tobf). */
static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}
static __device__ __forceinline__ uint4 pack8(const float f[8])
{
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

/* Host: whether p is 16-byte aligned (vector paths need every pointer they access so). */
static inline bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ============================================================================================
 * gemm (cuBLAS)
 * ========================================================================================== */

/* C = beta * C (beta == 0: C = 0 without reading it), for K == 0. */
static __global__ void k_scale_c(void *C, int ldc, int M, int N, float beta, int c_acc)
{
    size_t total = (size_t)M * N;
    DXC_FOR(idx, total)
    {
        size_t i = idx / (size_t)N, j = idx % (size_t)N, o = i * (size_t)ldc + j;
        if (c_acc) {
            float *c = (float *)C;
            c[o] = beta == 0.0f ? 0.0f : beta * c[o];
        } else {
            bf16 *c = (bf16 *)C;
            c[o] = beta == 0.0f ? tobf(0.0f) : tobf(beta * __bfloat162float(c[o]));
        }
    }
}

/* cuBLASLt plans, for gemm_res and for cuda_gemm's large shapes.
 *
 * gemm_res: C = op(A) op(B) + R with R and C distinct matrices, which cublasGemmEx (C in, C out)
 * cannot do. The mapping to column-major is cuda_gemm's, with R as cuBLASLt's C and C as its D.
 * cuda_gemm's shapes of at least im->lt_gemm_min multiply-adds (M N K; DX_CUDA_GEMM_LT_MIN in
 * units of 2^20, default 1024, i.e. 2^30; DX_CUDA_GEMM_LT=0: none) with 16-byte aligned operands
 * and row strides go through the same plans with R = C, in place, so that they get the
 * algorithm chosen below instead of cublasGemmEx's (which keeps the rest).
 * Descriptors and the algorithm are kept per shape, C type and pointer alignment (a transformer
 * has a handful of GEMM shapes); reduced-precision split-K reductions are excluded as in
 * cuda_gemm (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION).
 *
 * The algorithm: among cuBLASLt's first DXC_LT_CANDS heuristic candidates, the first whose tile
 * is 256 x 128 (cuBLAS's m x n: 256 output columns by 128 rows), else the first candidate
 * (DX_CUDA_GEMM_TILE=0: always the first). Why (benchmarks/NOTES.md item 38,
 * benchmarks/gemm_algo_probe.cu): a training step runs at the GPU's power limit, and there,
 * each candidate timed back to back for 0.35 s per turn on one H200, the 256 x 128 tile beat
 * the first candidate (192 x 192 mostly; cublasGemmEx picks the same) by 2.3-5.4% on
 * TinyLlama's input-gradient and residual GEMMs at 11,200 tokens and by 2.6% on the LM head's
 * weight gradient, and lost at most 0.8% (the other weight gradients). The choice depends on
 * cuBLAS's heuristic list only, so a run's results do not depend on timings.
 * (Tried and dropped, 2026-11-25: timing cublasGemmEx and cuBLASLt's first 8 candidates per
 * shape at its first call, alone, and keeping the fastest. Alone, the fastest beat cublasGemmEx
 * by up to 17% on Llama-2-7B's layer shapes, 4% over a layer; in the training step, which runs
 * at the H100's power limit, it gained nothing: 51,311 / 51,441 / 51,238 against 51,399 /
 * 51,279 / 51,470 tokens/s untimed, same call. A kernel's rate at the full clock is not its
 * rate at the power limit.) */
#define DXC_LT_PLANS 64
#define DXC_LT_CANDS 8
struct dxc_lt_plan {
    int key[15]; /* trans_a, trans_b, M, N, K, lda, ldb, ldr, ldc, alignments of A, B, R, C, c_acc,
                    SM count target (0: all) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algo;
    int ok; /* the heuristic found an algorithm */
};

static void lt_plan_free(struct dxc_lt_plan *p)
{
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatrixLayout_t *l[4] = {&p->la, &p->lb, &p->lc, &p->ld};
    for (int i = 0; i < 4; i++)
        if (*l[i]) cublasLtMatrixLayoutDestroy(*l[i]);
    memset(p, 0, sizeof *p);
}

/* The largest power of two <= 256 dividing p's address (cuBLASLt's alignment preferences). */
static uint32_t align_of(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    uint32_t al = 1;
    while (al < 256 && !(a & (uintptr_t)al)) al <<= 1;
    return al;
}

/* The candidate of res[0 .. n) to run (see above): the first with a 256 x 128 tile when
 * prefer_tile, else 0. */
static int lt_pick(const cublasLtMatmulHeuristicResult_t *res, int n, int prefer_tile)
{
    for (int i = 0; prefer_tile && i < n; i++) {
        int tile = 0;
        size_t w = 0;
        if (res[i].state == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w) ==
                CUBLAS_STATUS_SUCCESS &&
            tile == CUBLASLT_MATMUL_TILE_256x128)
            return i;
    }
    return 0;
}

/* The plan of a call (made on the shape's first call); NULL without cuBLASLt, when an operand
 * or a row stride is not 16-byte aligned, when cuBLASLt has no algorithm for it or the table is
 * full. C (and R) are fp32 when c_acc, else bf16. Planned for the SMs that
 * cublasGemmEx would be given (gemm_sm_target): DX_CUDA_GEMM_SMS's, or fewer between
 * overlap_begin and overlap_join (kernels.h), else all. */
static struct dxc_lt_plan *lt_plan(dx_backend *be, int trans_a, int trans_b, int M, int N, int K,
                                   const void *A, int lda, const void *B, int ldb, const void *R,
                                   int ldr, const void *C, int ldc, int c_acc)
{
    dxc_impl *im = dxc(be);
    if (!im->lt || !al16(A) || !al16(B) || !al16(R) || !al16(C) || lda % 8 || ldb % 8 || ldr % 8 || ldc % 8)
        return NULL;
    const int sms = gemm_sm_target(im);
    const int key[15] = {trans_a, trans_b, M, N, K, lda, ldb, ldr, ldc, (int)align_of(A),
                         (int)align_of(B), (int)align_of(R), (int)align_of(C), c_acc, sms};
    for (int i = 0; i < im->lt_nplans; i++)
        if (!memcmp(im->lt_plans[i].key, key, sizeof key))
            return im->lt_plans[i].ok ? &im->lt_plans[i] : NULL;
    if (!im->lt_plans) im->lt_plans = (struct dxc_lt_plan *)calloc(DXC_LT_PLANS, sizeof *im->lt_plans);
    if (!im->lt_plans || im->lt_nplans == DXC_LT_PLANS) return NULL;
    struct dxc_lt_plan *p = &im->lt_plans[im->lt_nplans++];
    memset(p, 0, sizeof *p);
    memcpy(p->key, key, sizeof key);
    cublasOperation_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[DXC_LT_CANDS];
    const cudaDataType_t ct = c_acc ? CUDA_R_32F : CUDA_R_16BF;
    int found = 0;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    const uint64_t ws = im->blas_ws_bytes;
    /* cuBLASLt's A, B, C, D are B, A, R, C here */
    const uint32_t al[4] = {align_of(B), align_of(A), align_of(R), align_of(C)};
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    bool good = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS &&
                (sms <= 0 ||
                 cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms) ==
                     CUBLAS_STATUS_SUCCESS) &&
                /* stored (before op) column-major: A' = B is N x K (K x N transposed), B' = A K x M */
                cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p->lc, ct, N, M, ldr) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p->ld, ct, N, M, ldc) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme,
                                                     sizeof scheme) == CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 4 && good; i++)
        good = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]) == CUBLAS_STATUS_SUCCESS;
    good = good &&
           cublasLtMatmulAlgoGetHeuristic(im->lt, p->desc, p->la, p->lb, p->lc, p->ld, pref, DXC_LT_CANDS, res,
                                          &found) == CUBLAS_STATUS_SUCCESS &&
           found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!good) { /* kept (ok = 0, key set) so the shape is not looked up again */
        lt_plan_free(p);
        memcpy(p->key, key, sizeof key);
        return NULL;
    }
    p->algo = res[lt_pick(res, found, im->lt_tile)].algo;
    p->ok = 1;
    return p;
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C is column-major C^T[N,M] = alpha op(B)^T op(A)^T
 * + beta C^T, and a row-major matrix with row stride ld is its transpose in column-major with
 * leading dimension ld: so cuBLAS gets (B, A) swapped, m = N, n = M, the same transpose flags
 * and the same strides. */
static void cuda_gemm(dx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                      int c_acc)
{
    if (M <= 0 || N <= 0) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "gemm");
    if (K <= 0) {
        k_scale_c<<<grid_for(be, (size_t)M * N), DXC_THREADS, 0, im->stream>>>(C, ldc, M, N, beta,
                                                                               c_acc);
        DXC_LAUNCHED(be, "gemm");
        return;
    }
    if ((double)M * N * K >= im->lt_gemm_min) {
        struct dxc_lt_plan *p = lt_plan(be, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, C, ldc, c_acc);
        if (p) { /* in place: cuBLASLt's C and D are both C */
            DXC_BLAS("gemm", cublasLtMatmul(im->lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->ld,
                                            &p->algo, im->blas_ws, im->blas_ws_bytes, im->stream));
            if (im->sync_each_op) DXC_CHECK("gemm", cudaStreamSynchronize(im->stream));
            return;
        }
    }
    cublasOperation_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    DXC_BLAS("gemm", cublasGemmEx(im->blas, opa, opb, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A,
                                  CUDA_R_16BF, lda, &beta, C, c_acc ? CUDA_R_32F : CUDA_R_16BF,
                                  ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (im->sync_each_op) DXC_CHECK("gemm", cudaStreamSynchronize(im->stream));
}

static void cuda_gemm_res(dx_backend *be, int trans_a, int trans_b, int M, int N, int K,
                          const void *A, int lda, const void *B, int ldb, const void *R, int ldr,
                          void *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "gemm_res");
    struct dxc_lt_plan *p =
        K > 0 && !im->lt_off ? lt_plan(be, trans_a, trans_b, M, N, K, A, lda, B, ldb, R, ldr, C, ldc, 0) : NULL;
    if (!p) { /* R copied into C, then C += op(A) op(B) */
        if (R != C)
            DXC_CHECK("gemm_res", cudaMemcpy2DAsync(C, (size_t)ldc * 2, R, (size_t)ldr * 2, (size_t)N * 2, (size_t)M,
                                                    cudaMemcpyDeviceToDevice, im->stream));
        cuda_gemm(be, trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, 0);
        return;
    }
    const float alpha = 1.0f, beta = 1.0f;
    DXC_BLAS("gemm_res", cublasLtMatmul(im->lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, R, p->lc, C, p->ld,
                                        &p->algo, im->blas_ws, im->blas_ws_bytes, im->stream));
    if (im->sync_each_op) DXC_CHECK("gemm_res", cudaStreamSynchronize(im->stream));
}

/* ============================================================================================
 * RMSNorm: one warp per row (DXC_RMS_ROWS rows per 256-thread block), row sums by warp
 * shuffles (each lane sums its columns in order, then a fixed xor butterfly: deterministic).
 *
 * Fast path (D % 8 == 0, D <= DXC_RMS_MAXD, every bf16 pointer 16-byte aligned): WPR warps per
 * row (1 up to D = 2048, 2 above: at most 8 vectors per lane, so that 2 or more blocks fit an
 * SM; with 16, D = 4096 ran at 2.1 TB/s), thread i of a row's 32 WPR holds the 16-byte vectors
 * v = 32 WPR k + i (k < MAXV) of its row in registers, so x (and dy) are read from memory once;
 * the backward also accumulates dw in the same pass (see k_rmsnorm_bwd_reg). A row's sum over
 * its warps is added in warp order through shared memory.
 * Otherwise (any D, unaligned pointers): the same warp-per-row kernels reading the row twice,
 * with 16-byte loads when D % 8 == 0 and the pointers are aligned, 2-byte loads otherwise, and
 * dw by a separate column-partial kernel. Either way dw is summed per chunk of rows (a chunking
 * that depends on N only), chunk partials in fp32, then over the chunks in order in fp64.
 * ========================================================================================== */

#define DXC_RMS_ROWS (DXC_THREADS / 32) /* rows per block: one warp per row */
#define DXC_RMS_MAXD 4096               /* rows up to this long are held in registers */

/* MAXV (vectors per lane) for the register fast path, 0 if D does not qualify; *wpr: warps
 * per row. */
static int rms_maxv(int D, int *wpr)
{
    *wpr = 1;
    if (D % 8 != 0 || D > DXC_RMS_MAXD) return 0;
    const int nv = (D / 8 + 31) / 32;
    if (nv > 8) *wpr = 2;
    return nv <= 1 ? 1 : nv <= 2 ? 2 : nv <= 4 ? 4 : 8;
}

/* The sum of s over the WPR warps of a row (slot `slot` of the block), added in warp order;
 * red: shared [2][DXC_RMS_ROWS], used alternately (parity par) by successive calls; the row's
 * warps meet at named barrier 1 + slot. */
template <int WPR>
static __device__ __forceinline__ float row_sum(float s, float (*red)[DXC_RMS_ROWS], int par, int slot)
{
    static_assert(WPR == 1 || DXC_RMS_ROWS / WPR <= 4, "row_sum: named barriers 1-4, one per row slot");
    s = warp_sum(s);
    if (WPR == 1) return s;
    const int wid = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[par][wid] = s;
    switch (slot) { /* (constant barrier ids: a register id reserves all 16) */
    case 0: asm volatile("bar.sync 1, %0;" ::"n"(32 * WPR) : "memory"); break;
    case 1: asm volatile("bar.sync 2, %0;" ::"n"(32 * WPR) : "memory"); break;
    case 2: asm volatile("bar.sync 3, %0;" ::"n"(32 * WPR) : "memory"); break;
    default: asm volatile("bar.sync 4, %0;" ::"n"(32 * WPR) : "memory"); break;
    }
    float t = red[par][slot * WPR];
#pragma unroll
    for (int i = 1; i < WPR; i++) t += red[par][slot * WPR + i];
    return t;
}

/* y, rstd for one row per WPR warps, x and w read with 16-byte loads (fast path); the row stays
 * in registers (xv) between the sum of squares and the output. Threads past the row's last
 * vector (D / 8 not a multiple of 32 WPR) hold zeros, which add nothing. */
template <int MAXV, int WPR>
static __global__ void __launch_bounds__(DXC_THREADS)
    k_rmsnorm_fwd_reg(bf16 *__restrict__ y, float *__restrict__ rstd, const bf16 *__restrict__ x,
                      const bf16 *__restrict__ w, int N, int D, float eps)
{
    constexpr int RPB = DXC_RMS_ROWS / WPR, TPR = 32 * WPR; /* rows per block, threads per row */
    __shared__ float red[2][DXC_RMS_ROWS];
    const int slot = (threadIdx.x >> 5) / WPR, tr = threadIdx.x % TPR;
    const size_t row = (size_t)blockIdx.x * RPB + slot;
    if (row >= (size_t)N) return; /* whole rows (a row's warps meet only each other) */
    const int nvec = D >> 3;
    const bf16 *xr = x + row * D;
    bf16 *yr = y + row * D;
    uint4 xv[MAXV];
#pragma unroll
    for (int k = 0; k < MAXV; k++) {
        const int v = k * TPR + tr;
        xv[k] = v < nvec ? ldg8(xr, v) : make_uint4(0, 0, 0, 0);
    }
    float ss = 0;
#pragma unroll
    for (int k = 0; k < MAXV; k++) {
        float f[8];
        unpack8(xv[k], f);
#pragma unroll
        for (int e = 0; e < 8; e++) ss = fmaf(f[e], f[e], ss);
    }
    ss = row_sum<WPR>(ss, red, 0, slot);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (tr == 0) rstd[row] = r;
#pragma unroll
    for (int k = 0; k < MAXV; k++) {
        const int v = k * TPR + tr;
        if (v >= nvec) break;
        float f[8], wf[8], o[8];
        unpack8(xv[k], f);
        unpack8(ldg8(w, v), wf);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = wf[e] * (f[e] * r);
        st8(yr, v, pack8(o));
    }
}

/* Generic forward: one warp per row, x read twice; vec: 16-byte loads (D % 8 == 0, x, y, w
 * aligned), else 2-byte loads (any D, any alignment). */
template <bool vec>
static __global__ void __launch_bounds__(DXC_THREADS)
    k_rmsnorm_fwd(bf16 *__restrict__ y, float *__restrict__ rstd, const bf16 *__restrict__ x,
                  const bf16 *__restrict__ w, int N, int D, float eps)
{
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * DXC_RMS_ROWS + (threadIdx.x >> 5);
    if (row >= (size_t)N) return; /* whole warps */
    const bf16 *xr = x + row * D;
    bf16 *yr = y + row * D;
    const int nvec = D >> 3;
    float ss = 0;
    if (vec) {
        for (int v = lane; v < nvec; v += 32) {
            float f[8];
            unpack8(ldg8(xr, v), f);
#pragma unroll
            for (int e = 0; e < 8; e++) ss = fmaf(f[e], f[e], ss);
        }
    } else {
        for (int j = lane; j < D; j += 32) {
            const float v = ld(xr, j);
            ss = fmaf(v, v, ss);
        }
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[row] = r;
    if (vec) {
        for (int v = lane; v < nvec; v += 32) {
            float f[8], wf[8], o[8];
            unpack8(ldg8(xr, v), f);
            unpack8(ldg8(w, v), wf);
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = wf[e] * (f[e] * r);
            st8(yr, v, pack8(o));
        }
    } else {
        for (int j = lane; j < D; j += 32) yr[j] = tobf(ld(w, j) * (ld(xr, j) * r));
    }
}

typedef void (*rms_fwd_reg_fn)(bf16 *, float *, const bf16 *, const bf16 *, int, int, float);

static rms_fwd_reg_fn rms_fwd_reg_kernel(int maxv, int wpr)
{
    if (wpr == 2) return k_rmsnorm_fwd_reg<8, 2>;
    switch (maxv) {
    case 1: return k_rmsnorm_fwd_reg<1, 1>;
    case 2: return k_rmsnorm_fwd_reg<2, 1>;
    case 4: return k_rmsnorm_fwd_reg<4, 1>;
    default: return k_rmsnorm_fwd_reg<8, 1>;
    }
}

static void cuda_rmsnorm_fwd(dx_backend *be, void *y, void *rstd, const void *x, const void *w,
                             int N, int D, float eps)
{
    if (N <= 0 || D <= 0) return;
    DXC_ENTER(be, "rmsnorm_fwd");
    const bool aligned = al16(y) && al16(x) && al16(w);
    int wpr;
    const int maxv = aligned ? rms_maxv(D, &wpr) : 0;
    const int rpb = DXC_RMS_ROWS / (maxv ? wpr : 1);
    const unsigned nb = (unsigned)(((size_t)N + rpb - 1) / rpb);
    if (maxv) {
        rms_fwd_reg_kernel(maxv, wpr)<<<nb, DXC_THREADS, 0, dxc(be)->stream>>>(
            (bf16 *)y, (float *)rstd, (const bf16 *)x, (const bf16 *)w, N, D, eps);
    } else {
        const bool vec = aligned && D % 8 == 0;
        (vec ? k_rmsnorm_fwd<true> : k_rmsnorm_fwd<false>)<<<nb, DXC_THREADS, 0,
                                                              dxc(be)->stream>>>(
            (bf16 *)y, (float *)rstd, (const bf16 *)x, (const bf16 *)w, N, D, eps);
    }
    DXC_LAUNCHED(be, "rmsnorm_fwd");
}

#define DXC_DW_CHUNKS 256 /* at most this many row chunks (dw partial rows) */

/* Fused backward, fast path. Each (virtual) block walks chunks c = its index, + their count, ...
 * (one chunk each when the grid has nchunks blocks; VB = 2: a block of 512 threads is two
 * virtual blocks, as overlap_begin launches it on a few SMs). For chunk c, rows
 * [c rows_per, (c + 1) rows_per):
 * row slot s (WPR warps) takes rows r0 + s, r0 + s + RPB, ...; per row it holds dy and x in
 * registers (16-byte loads), reduces sum_j g xh (shuffles, then over its warps in order),
 * updates dx (+=, 16-byte read-modify-write) and adds dy * xh for its columns into the slot's
 * fp32 dw accumulator in shared memory (no races: a thread owns its columns). At the end
 * part[c, j] = sum over the slots in order 0..RPB-1.
 * Dynamic shared memory: RPB * D floats, as float4: slot s's accumulator for columns
 * 8 v + 4 h .. 8 v + 4 h + 3 at acc[(2 s + h) nvec + v] (conflict-free 16-byte accesses). */
template <int MAXV, int WPR, int VB>
static __global__ void __launch_bounds__(DXC_THREADS * VB)
    k_rmsnorm_bwd_reg(bf16 *dx, float *__restrict__ part, const bf16 *__restrict__ dy,
                      const bf16 *__restrict__ x, const bf16 *__restrict__ w,
                      const float *__restrict__ rstd, int N, int D, int rows_per, int nchunks)
{
    static_assert(VB == 1 || WPR == 1, "k_rmsnorm_bwd_reg: two virtual blocks only with one warp per row");
    constexpr int RPB = DXC_RMS_ROWS / WPR, TPR = 32 * WPR; /* rows per block, threads per row */
    DXC_DYNAMIC_SMEM(float4, dxc_rms_acc);
    __shared__ float red[2][DXC_RMS_ROWS];
    /* VB = 2: the block's two halves of DXC_THREADS threads are two independent blocks of the
     * VB = 1 kernel (own accumulators, own barrier), so the results are bitwise the same */
    const int half = VB == 1 ? 0 : (int)(threadIdx.x / DXC_THREADS), tid = threadIdx.x % DXC_THREADS;
    const int slot = (tid >> 5) / WPR, tr = tid % TPR;
    const int nvec = D >> 3;
    float4 *const accs = dxc_rms_acc + (size_t)half * RPB * 2 * nvec; /* this virtual block's */
    float4 *acc = accs + (size_t)slot * 2 * nvec;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto vsync = [&]() {
        if (VB == 1) __syncthreads();
        else if (half == 0) asm volatile("bar.sync 5, %0;" ::"n"(DXC_THREADS) : "memory");
        else asm volatile("bar.sync 6, %0;" ::"n"(DXC_THREADS) : "memory");
    };
    int par = 0;
    for (int cb = blockIdx.x * VB + half; cb < nchunks; cb += gridDim.x * VB) {
#pragma unroll
        for (int k = 0; k < MAXV; k++) {
            const int v = k * TPR + tr;
            if (v < nvec) {
                acc[v] = zero4;
                acc[nvec + v] = zero4;
            }
        }
        const int r0 = cb * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
        for (int r = r0 + slot; r < r1; r += RPB, par ^= 1) { /* (a slot's warps: the same rows) */
            const size_t base = (size_t)r * D;
            const bf16 *dyr = dy + base, *xr = x + base;
            bf16 *dxr = dx + base;
            uint4 dyv[MAXV], xv[MAXV];
#pragma unroll
            for (int k = 0; k < MAXV; k++) {
                const int v = k * TPR + tr;
                dyv[k] = v < nvec ? ldg8(dyr, v) : make_uint4(0, 0, 0, 0);
                xv[k] = v < nvec ? ldg8(xr, v) : make_uint4(0, 0, 0, 0);
            }
            const float rs = rstd[r];
            float c = 0;
#pragma unroll
            for (int k = 0; k < MAXV; k++) {
                const int v = k * TPR + tr;
                if (v >= nvec) break;
                float df[8], xf[8], wf[8];
                unpack8(dyv[k], df);
                unpack8(xv[k], xf);
                unpack8(ldg8(w, v), wf);
#pragma unroll
                for (int e = 0; e < 8; e++) c = fmaf(df[e] * wf[e], xf[e] * rs, c);
            }
            c = row_sum<WPR>(c, red, par, slot);
            const float cm = c / (float)D;
#pragma unroll
            for (int k = 0; k < MAXV; k++) {
                const int v = k * TPR + tr;
                if (v >= nvec) break;
                float df[8], xf[8], wf[8], of[8];
                unpack8(dyv[k], df);
                unpack8(xv[k], xf);
                unpack8(ldg8(w, v), wf);
                unpack8(ld8(dxr, v), of);
                float xh[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    xh[e] = xf[e] * rs;
                    of[e] = of[e] + rs * (df[e] * wf[e] - xh[e] * cm);
                }
                st8(dxr, v, pack8(of));
                float4 a0 = acc[v], a1 = acc[nvec + v];
                a0.x = fmaf(df[0], xh[0], a0.x);
                a0.y = fmaf(df[1], xh[1], a0.y);
                a0.z = fmaf(df[2], xh[2], a0.z);
                a0.w = fmaf(df[3], xh[3], a0.w);
                a1.x = fmaf(df[4], xh[4], a1.x);
                a1.y = fmaf(df[5], xh[5], a1.y);
                a1.z = fmaf(df[6], xh[6], a1.z);
                a1.w = fmaf(df[7], xh[7], a1.w);
                acc[v] = a0;
                acc[nvec + v] = a1;
            }
        }
        vsync();
        /* output float4 o = 2 v + h (columns 8 v + 4 h ..): coalesced stores */
        float4 *pc = reinterpret_cast<float4 *>(part + (size_t)cb * D);
        for (int o = tid; o < 2 * nvec; o += DXC_THREADS) {
            const int v = o >> 1, h = o & 1;
            float4 s = accs[(size_t)h * nvec + v];
#pragma unroll
            for (int k = 1; k < RPB; k++) {
                const float4 t = accs[(size_t)(2 * k + h) * nvec + v];
                s.x += t.x;
                s.y += t.y;
                s.z += t.z;
                s.w += t.w;
            }
            pc[o] = s;
        }
        vsync(); /* (the next chunk zeroes what the sums above read) */
    }
}

/* Generic backward dx: one warp per row, dy and x read twice; vec: 16-byte loads (D % 8 == 0,
 * dx, dy, x, w aligned), else 2-byte loads (any D, any alignment). */
template <bool vec>
static __global__ void __launch_bounds__(DXC_THREADS)
    k_rmsnorm_bwd_dx(bf16 *dx, const bf16 *__restrict__ dy, const bf16 *__restrict__ x,
                     const bf16 *__restrict__ w, const float *__restrict__ rstd, int N, int D)
{
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * DXC_RMS_ROWS + (threadIdx.x >> 5);
    if (row >= (size_t)N) return; /* whole warps */
    const bf16 *dyr = dy + row * D, *xr = x + row * D;
    bf16 *dxr = dx + row * D;
    const int nvec = D >> 3;
    const float rs = rstd[row];
    float c = 0;
    if (vec) {
        for (int v = lane; v < nvec; v += 32) {
            float df[8], xf[8], wf[8];
            unpack8(ldg8(dyr, v), df);
            unpack8(ldg8(xr, v), xf);
            unpack8(ldg8(w, v), wf);
#pragma unroll
            for (int e = 0; e < 8; e++) c = fmaf(df[e] * wf[e], xf[e] * rs, c);
        }
    } else {
        for (int j = lane; j < D; j += 32) c = fmaf(ld(dyr, j) * ld(w, j), ld(xr, j) * rs, c);
    }
    c = warp_sum(c);
    const float cm = c / (float)D;
    if (vec) {
        for (int v = lane; v < nvec; v += 32) {
            float df[8], xf[8], wf[8], of[8];
            unpack8(ldg8(dyr, v), df);
            unpack8(ldg8(xr, v), xf);
            unpack8(ldg8(w, v), wf);
            unpack8(ld8(dxr, v), of);
#pragma unroll
            for (int e = 0; e < 8; e++) of[e] = of[e] + rs * (df[e] * wf[e] - (xf[e] * rs) * cm);
            st8(dxr, v, pack8(of));
        }
    } else {
        for (int j = lane; j < D; j += 32) {
            const float g = ld(dyr, j) * ld(w, j), xh = ld(xr, j) * rs;
            dxr[j] = tobf(ld(dxr, j) + rs * (g - xh * cm));
        }
    }
}

/* Generic dw partials: part[chunk, j] = sum over the chunk's rows of dy * (x * rstd). Block
 * (32, 8) covers 256 columns; thread (tx, ty) owns the 8 consecutive columns j0 = 8 (32 bx + tx)
 * .. j0 + 7 and sums rows r0 + ty, r0 + ty + 8, ... in order; the 8 partials per column are then
 * added in order ty = 0..7 (the same order as k_rmsnorm_bwd_reg). vec: 16-byte loads (D % 8
 * == 0, dy and x aligned), else 2-byte loads with per-column bounds. */
template <bool vec>
static __global__ void __launch_bounds__(DXC_THREADS)
    k_rmsnorm_bwd_dw_part(float *__restrict__ part, const bf16 *__restrict__ dy,
                          const bf16 *__restrict__ x, const float *__restrict__ rstd, int N, int D,
                          int rows_per)
{
    __shared__ float sh[8][256];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int j0 = (blockIdx.x * 32 + tx) * 8;
    const int chunk = blockIdx.y;
    const int r0 = chunk * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float a[8];
#pragma unroll
    for (int e = 0; e < 8; e++) a[e] = 0;
    if (j0 < D) {
        for (int r = r0 + ty; r < r1; r += 8) {
            const float rs = rstd[r];
            const size_t base = (size_t)r * D + j0;
            if (vec) {
                float df[8], xf[8];
                unpack8(ldg8(dy, base >> 3), df);
                unpack8(ldg8(x, base >> 3), xf);
#pragma unroll
                for (int e = 0; e < 8; e++) a[e] = fmaf(df[e], xf[e] * rs, a[e]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    if (j0 + e < D) a[e] = fmaf(ld(dy, base + e), ld(x, base + e) * rs, a[e]);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 8; e++) sh[ty][tx * 8 + e] = a[e];
    __syncthreads();
    const int l = ty * 32 + tx, j = blockIdx.x * 256 + l;
    if (j < D) {
        float s = sh[0][l];
#pragma unroll
        for (int k = 1; k < 8; k++) s += sh[k][l];
        part[(size_t)chunk * D + j] = s;
    }
}

/* out[j] += sum_c part[c, j] in double: thread (tx, ty) of a (32, TY) block, TY =
 * DXC_COLSUM_TY, sums the chunks ty, ty + TY, ... in order, then the TY sums are added in order
 * ty = 0..TY-1 (a fixed order: deterministic). 32 rows of threads (8 chunks each at 256 chunks)
 * keep more loads in flight than 8 did: 4.5 against 7.5 us at D = 2048 (benchmarks/NOTES.md
 * item 19). */
#define DXC_COLSUM_TY 32
static __global__ void __launch_bounds__(32 * DXC_COLSUM_TY)
    k_colsum_add(float *__restrict__ out, const float *__restrict__ part, int nchunks, int D)
{
    constexpr int TY = DXC_COLSUM_TY;
    __shared__ double sh[TY][32];
    const int tx = threadIdx.x, ty = threadIdx.y, j = blockIdx.x * 32 + tx;
    double s = 0;
    if (j < D) {
#pragma unroll 4
        for (int c = ty; c < nchunks; c += TY) s += (double)part[(size_t)c * D + j];
    }
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < D) {
        double t = sh[0][tx];
#pragma unroll
        for (int k = 1; k < TY; k++) t += sh[k][tx];
        out[j] += (float)t;
    }
}

typedef void (*rms_bwd_reg_fn)(bf16 *, float *, const bf16 *, const bf16 *, const bf16 *,
                               const float *, int, int, int, int);

template <int VB> static rms_bwd_reg_fn rms_bwd_reg_one_warp(int maxv)
{
    switch (maxv) {
    case 1: return k_rmsnorm_bwd_reg<1, 1, VB>;
    case 2: return k_rmsnorm_bwd_reg<2, 1, VB>;
    case 4: return k_rmsnorm_bwd_reg<4, 1, VB>;
    default: return k_rmsnorm_bwd_reg<8, 1, VB>;
    }
}

/* vb 2: two virtual blocks per block (wpr 1 only) */
static rms_bwd_reg_fn rms_bwd_reg_kernel(int maxv, int wpr, int vb)
{
    if (wpr == 2) return k_rmsnorm_bwd_reg<8, 2, 1>;
    return vb == 2 ? rms_bwd_reg_one_warp<2>(maxv) : rms_bwd_reg_one_warp<1>(maxv);
}

static void cuda_rmsnorm_bwd(dx_backend *be, void *dx, void *dw, const void *dy, const void *x,
                             const void *w, const void *rstd, int N, int D)
{
    if (N <= 0 || D <= 0) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "rmsnorm_bwd");
    /* chunks of >= 8 rows (one per warp), as many as DXC_DW_CHUNKS allows: a few thousand rows
     * (LoRA's 8 x 350 tokens) then still fill every SM (64-row chunks gave 44 blocks for 132 SMs) */
    int nchunks = (N + 7) / 8;
    if (nchunks > DXC_DW_CHUNKS) nchunks = DXC_DW_CHUNKS;
    int rows_per = (N + nchunks - 1) / nchunks; /* a function of N only: deterministic */
    nchunks = (N + rows_per - 1) / rows_per;
    float *part = (float *)dxc_scratch(be, (size_t)nchunks * D * sizeof(float), "rmsnorm_bwd");
    const bool aligned = al16(dx) && al16(dy) && al16(x) && al16(w);
    int wpr;
    const int maxv = aligned ? rms_maxv(D, &wpr) : 0;
    if (maxv) { /* dx and the dw partials in one pass */
        /* on the overlap stream (overlap_begin): at most aux_sms blocks of two virtual blocks
         * each, one per SM (their registers leave no room for a GEMM's block beside them), the
         * same chunks, so the same results */
        const int vb = im->aux_sms > 0 && im->stream == im->aux_stream && wpr == 1 ? 2 : 1;
        const rms_bwd_reg_fn kern = rms_bwd_reg_kernel(maxv, wpr, vb);
        const size_t smem = (size_t)vb * (DXC_RMS_ROWS / wpr) * D * sizeof(float);
        dxc_set_smem(be, (const void *)kern, smem, "rmsnorm_bwd");
        int grid = (nchunks + vb - 1) / vb;
        if (vb == 2 && grid > im->aux_sms) grid = im->aux_sms;
        kern<<<grid, vb * DXC_THREADS, smem, im->stream>>>((bf16 *)dx, part, (const bf16 *)dy,
                                                           (const bf16 *)x, (const bf16 *)w,
                                                           (const float *)rstd, N, D, rows_per, nchunks);
        DXC_LAUNCHED(be, "rmsnorm_bwd");
    } else {
        const bool vec = aligned && D % 8 == 0;
        const unsigned nb = (unsigned)(((size_t)N + DXC_RMS_ROWS - 1) / DXC_RMS_ROWS);
        (vec ? k_rmsnorm_bwd_dx<true> : k_rmsnorm_bwd_dx<false>)<<<nb, DXC_THREADS, 0,
                                                                    im->stream>>>(
            (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, (const float *)rstd,
            N, D);
        DXC_LAUNCHED(be, "rmsnorm_bwd");
        dim3 grid((D + 255) / 256, nchunks), block(32, 8);
        (vec ? k_rmsnorm_bwd_dw_part<true> : k_rmsnorm_bwd_dw_part<false>)<<<grid, block, 0,
                                                                              im->stream>>>(
            part, (const bf16 *)dy, (const bf16 *)x, (const float *)rstd, N, D, rows_per);
        DXC_LAUNCHED(be, "rmsnorm_bwd");
    }
    k_colsum_add<<<(D + 31) / 32, dim3(32, DXC_COLSUM_TY), 0, im->stream>>>((float *)dw, part, nchunks, D);
    DXC_LAUNCHED(be, "rmsnorm_bwd");
}

/* ============================================================================================
 * RoPE: a cos/sin table per position, computed in double like the CPU twin and cached
 * (positions 0..rope_T-1 for the last Dh and theta), then an element-wise rotation: 8 pairs
 * per thread with 16-byte accesses when Dh/2 % 8 == 0 and x is aligned, else one pair.
 * ========================================================================================== */

static __global__ void k_rope_table(float *tab, int T, int half, int Dh, float theta)
{
    const size_t n = (size_t)T * half;
    DXC_FOR(idx, n)
    {
        const int t = (int)(idx / half), i = (int)(idx % half);
        const double f = (double)t * pow((double)theta, -2.0 * i / Dh);
        tab[idx] = (float)cos(f);
        tab[n + idx] = (float)sin(f);
    }
}

/* Scalar rotation: one (i, i + half) pair per thread and iteration; any even Dh, any alignment
 * of x (the fallback of k_rope_vec). */
static __global__ void k_rope(bf16 *x, const float *__restrict__ tab, size_t sin_off,
                              size_t nrows, int T, int H, int half, size_t ld, float dir)
{
    const size_t n = nrows * half;
    DXC_FOR(idx, n)
    {
        const size_t row = idx / half; /* (b*T + t)*H + h */
        const int i = (int)(idx % half), t = (int)((row / H) % T);
        bf16 *xr = x + (row / H) * ld + (row % H) * 2 * half;
        const float c = tab[(size_t)t * half + i], s = dir * tab[sin_off + (size_t)t * half + i];
        const float a = __bfloat162float(xr[i]), b = __bfloat162float(xr[i + half]);
        xr[i] = tobf(a * c - b * s);
        xr[i + half] = tobf(b * c + a * s);
    }
}

/* Vector rotation (half % 8 == 0, x 16-byte aligned): work item q of a row (q < half / 8) takes
 * i = 8 q .. 8 q + 7 and the matching i + half with one 16-byte load and store each, and cos /
 * sin as two float4 each from the table (rows of half floats: 32-byte aligned). Consecutive
 * items are consecutive q and heads of the same position, so a warp shares its table rows.
 * I: index type of the item loop, unsigned when there are at most 2^31 items (cheap 32-bit
 * divisions; the loop index then cannot wrap), else size_t. */
template <typename I>
static __global__ void k_rope_vec(bf16 *x, const float *__restrict__ tab, size_t sin_off,
                                  size_t nrows, int T, int H, int half, size_t ld, float dir)
{
    const int q8 = half >> 3;
    const I n = (I)(nrows * q8);
    for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (I)gridDim.x * blockDim.x) {
        const I row = idx / (I)q8; /* (b*T + t)*H + h */
        const I tok = row / (I)H;
        const int q = (int)(idx - row * (I)q8), t = (int)(tok % (I)T);
        bf16 *xr = x + (size_t)tok * ld + (size_t)(row - tok * (I)H) * 2 * half;
        const float *tr = tab + (size_t)t * half;
        const float4 *tc = reinterpret_cast<const float4 *>(tr) + 2 * q;
        const float4 *ts = reinterpret_cast<const float4 *>(tr + sin_off) + 2 * q;
        const float4 c0 = __ldg(tc), c1 = __ldg(tc + 1), s0 = __ldg(ts), s1 = __ldg(ts + 1);
        const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
        const float s[8] = {dir * s0.x, dir * s0.y, dir * s0.z, dir * s0.w,
                            dir * s1.x, dir * s1.y, dir * s1.z, dir * s1.w};
        float a[8], b[8], oa[8], ob[8];
        unpack8(ld8(xr, q), a);
        unpack8(ld8(xr, q + q8), b);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            oa[e] = a[e] * c[e] - b[e] * s[e];
            ob[e] = b[e] * c[e] + a[e] * s[e];
        }
        st8(xr, q, pack8(oa));
        st8(xr, q + q8, pack8(ob));
    }
}

const float *dxc_rope_table(dx_backend *be, int T, int Dh, float theta, size_t *sin_off, const char *op)
{
    dxc_impl *im = dxc(be);
    const int half = Dh / 2;
    if (!im->rope_tab || im->rope_Dh != Dh || im->rope_theta != theta || im->rope_T < T) {
        const int Tn = T; /* positions 0..T-1; reused while later calls have T <= Tn */
        if (im->rope_tab) { /* free waits for queued ops that read the old table */
            be->free(be, im->rope_tab);
            im->rope_tab = NULL;
            im->rope_T = 0;
        }
        im->rope_tab = (float *)be->alloc(be, (size_t)2 * Tn * half * sizeof(float),
                                          DX_MEM_ACTIVATIONS);
        if (!im->rope_tab) dxc_die(op, __FILE__, __LINE__, "rope table", dx_last_error());
        k_rope_table<<<grid_for(be, (size_t)Tn * half), DXC_THREADS, 0, im->stream>>>(
            im->rope_tab, Tn, half, Dh, theta);
        DXC_LAUNCHED(be, op);
        im->rope_T = Tn;
        im->rope_Dh = Dh;
        im->rope_theta = theta;
    }
    *sin_off = (size_t)im->rope_T * half;
    return im->rope_tab;
}

void dxc_rope_apply(dx_backend *be, void *x, int ld, int B, int T, int H, int Dh, float theta,
                    float dir, const char *op)
{
    if (B <= 0 || T <= 0 || H <= 0 || Dh < 2) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, op);
    const int half = Dh / 2;
    size_t sin_off;
    const float *tab = dxc_rope_table(be, T, Dh, theta, &sin_off, op);
    const size_t nrows = (size_t)B * T * H;
    if (half % 8 == 0 && ld % 8 == 0 && al16(x))
        (nrows * (half / 8) <= ((size_t)1 << 31) ? k_rope_vec<unsigned> : k_rope_vec<size_t>)
            <<<grid_for(be, nrows * (half / 8)), DXC_THREADS, 0, im->stream>>>(
                (bf16 *)x, tab, sin_off, nrows, T, H, half, (size_t)ld, dir);
    else
        k_rope<<<grid_for(be, nrows * half), DXC_THREADS, 0, im->stream>>>(
            (bf16 *)x, tab, sin_off, nrows, T, H, half, (size_t)ld, dir);
    DXC_LAUNCHED(be, op);
}

static void cuda_rope_fwd(dx_backend *be, void *x, int ld, int B, int T, int H, int Dh, float theta)
{
    dxc_rope_apply(be, x, ld, B, T, H, Dh, theta, 1.0f, "rope_fwd");
}

static int cuda_gemm_rope_fused(dx_backend *be, const void *y, const void *x, const void *W, int N, int F, int K,
                                int T, int H, int Hkv, int Dh)
{
    return dxc(be)->rope_gemm && N > 0 && T > 0 && N % T == 0 &&
           dxc_gemm_rope_fits(be, y, F, x, K, W, K, N, F, K, T, (H + Hkv) * Dh, Dh);
}

static void cuda_gemm_rope(dx_backend *be, void *y, const void *x, const void *W, int N, int F, int K, int T, int H,
                           int Hkv, int Dh, float theta)
{
    if (N <= 0 || F <= 0 || T <= 0) return;
    if (dxc(be)->rope_gemm && N % T == 0 &&
        dxc_gemm_rope(be, y, F, x, K, W, K, N, F, K, T, (H + Hkv) * Dh, Dh, theta) == 0)
        return;
    cuda_gemm(be, 0, 1, N, F, K, 1.0f, x, K, W, K, 0.0f, y, F, 0);
    dxc_rope_apply(be, y, F, N / T, T, H, Dh, theta, 1.0f, "rope_fwd");
    dxc_rope_apply(be, (bf16 *)y + (size_t)H * Dh, F, N / T, T, Hkv, Dh, theta, 1.0f, "rope_fwd");
}

static void cuda_rope_bwd(dx_backend *be, void *dx, int ld, int B, int T, int H, int Dh, float theta)
{
    dxc_rope_apply(be, dx, ld, B, T, H, Dh, theta, -1.0f, "rope_bwd");
}

/* ============================================================================================
 * SwiGLU, add: element-wise. Each thread takes 8 consecutive elements per iteration with 16-byte
 * loads / stores (nv = n / 8 vectors) when every pointer is 16-byte aligned, then the grid does
 * the n % 8 tail elements with 2-byte accesses; with any pointer unaligned nv = 0 and the
 * scalar loop does all of [0, n). The math is the same function in both loops.
 * ========================================================================================== */

/* SwiGLU over N rows of F: h [N, F] dense, g/u (dg/du) rows `rs` apart. Vector form (F % 8 == 0,
 * rs % 8 == 0, every pointer 16-byte aligned): item v = row * (F/8) + column vector; scalar
 * form otherwise: item i = row * F + column. Ix: the item index type, unsigned when the items
 * fit 32 bits (cheap divisions), else size_t. */
template <typename Ix>
static __global__ void k_swiglu_fwd(bf16 *__restrict__ h, const bf16 *__restrict__ g,
                                    const bf16 *__restrict__ u, size_t N, int F, size_t rs,
                                    bool vec)
{
    const Ix step = (Ix)gridDim.x * blockDim.x, first = (Ix)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        const Ix iv = (Ix)(F >> 3), n = (Ix)(N * iv);
        for (Ix v = first; v < n; v += step) {
            const Ix r = v / iv;
            const size_t gv = (size_t)r * (rs >> 3) + (v - r * iv);
            float gf[8], uf[8], hf[8];
            unpack8(ldg8(g, gv), gf);
            unpack8(ldg8(u, gv), uf);
#pragma unroll
            for (int e = 0; e < 8; e++) hf[e] = swiglu_h(gf[e], uf[e]);
            st8(h, v, pack8(hf));
        }
        return;
    }
    const Ix n = (Ix)(N * (size_t)F);
    for (Ix i = first; i < n; i += step) {
        const Ix r = i / (Ix)F;
        const size_t gi = (size_t)r * rs + (i - r * (Ix)F);
        h[i] = tobf(swiglu_h(ld(g, gi), ld(u, gi)));
    }
}

template <typename Ix>
static __global__ void k_swiglu_bwd(bf16 *__restrict__ dg, bf16 *__restrict__ du,
                                    const bf16 *__restrict__ dh, const bf16 *__restrict__ g,
                                    const bf16 *__restrict__ u, size_t N, int F, size_t rs,
                                    bool vec)
{
    const Ix step = (Ix)gridDim.x * blockDim.x, first = (Ix)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        const Ix iv = (Ix)(F >> 3), n = (Ix)(N * iv);
        for (Ix v = first; v < n; v += step) {
            const Ix r = v / iv;
            const size_t gv = (size_t)r * (rs >> 3) + (v - r * iv);
            float dhf[8], gf[8], uf[8], dgf[8], duf[8];
            unpack8(ldg8(dh, v), dhf);
            unpack8(ldg8(g, gv), gf);
            unpack8(ldg8(u, gv), uf);
#pragma unroll
            for (int e = 0; e < 8; e++) swiglu_d(dhf[e], gf[e], uf[e], dgf[e], duf[e]);
            st8(dg, gv, pack8(dgf));
            st8(du, gv, pack8(duf));
        }
        return;
    }
    const Ix n = (Ix)(N * (size_t)F);
    for (Ix i = first; i < n; i += step) {
        const Ix r = i / (Ix)F;
        const size_t gi = (size_t)r * rs + (i - r * (Ix)F);
        float dgi, dui;
        swiglu_d(ld(dh, i), ld(g, gi), ld(u, gi), dgi, dui);
        dg[gi] = tobf(dgi);
        du[gi] = tobf(dui);
    }
}

/* Vectors for n elements when all pointers are aligned (nv = 0: scalar loop only). */
static size_t vec8_count(size_t n, bool aligned) { return aligned ? n / 8 : 0; }

static void cuda_swiglu_fwd(dx_backend *be, void *h, const void *g, const void *u, int N, int F,
                            int ld)
{
    if (N <= 0 || F <= 0) return;
    DXC_ENTER(be, "swiglu_fwd");
    const size_t n = (size_t)N * F;
    const bool vec = F % 8 == 0 && ld % 8 == 0 && al16(h) && al16(g) && al16(u);
    const bool narrow = n + (size_t)DXC_THREADS * grid_for(be, vec ? n / 8 : n) < ((size_t)1 << 32);
    (narrow ? k_swiglu_fwd<unsigned> : k_swiglu_fwd<size_t>)
        <<<grid_for(be, vec ? n / 8 : n), DXC_THREADS, 0, dxc(be)->stream>>>(
        (bf16 *)h, (const bf16 *)g, (const bf16 *)u, (size_t)N, F, (size_t)ld, vec);
    DXC_LAUNCHED(be, "swiglu_fwd");
}

static void cuda_gemm_swiglu(dx_backend *be, void *gu, void *h, const void *x, const void *W, int N, int F,
                             int K)
{
    if (N <= 0 || F <= 0) return;
    bf16 *u = (bf16 *)gu + F;
    if (dxc(be)->swiglu_gemm && dxc_gemm_swiglu(be, gu, u, 2 * F, h, F, x, K, W, K, N, F, K) == 0) return;
    cuda_gemm(be, 0, 1, N, 2 * F, K, 1.0f, x, K, W, K, 0.0f, gu, 2 * F, 0);
    cuda_swiglu_fwd(be, h, gu, u, N, F, 2 * F);
}

static void cuda_swiglu_bwd(dx_backend *be, void *dg, void *du, const void *dh, const void *g,
                            const void *u, int N, int F, int ld)
{
    if (N <= 0 || F <= 0) return;
    DXC_ENTER(be, "swiglu_bwd");
    const size_t n = (size_t)N * F;
    const bool vec = F % 8 == 0 && ld % 8 == 0 && al16(dg) && al16(du) && al16(dh) && al16(g) &&
                     al16(u);
    const bool narrow = n + (size_t)DXC_THREADS * grid_for(be, vec ? n / 8 : n) < ((size_t)1 << 32);
    (narrow ? k_swiglu_bwd<unsigned> : k_swiglu_bwd<size_t>)
        <<<grid_for(be, vec ? n / 8 : n), DXC_THREADS, 0, dxc(be)->stream>>>(
        (bf16 *)dg, (bf16 *)du, (const bf16 *)dh, (const bf16 *)g, (const bf16 *)u, (size_t)N, F,
        (size_t)ld, vec);
    DXC_LAUNCHED(be, "swiglu_bwd");
}

static void cuda_gemm_swiglu_bwd(dx_backend *be, void *dgu, void *dh, const void *dy, const void *W, const void *gu,
                                 int N, int F, int K)
{
    if (N <= 0 || F <= 0) return;
    bf16 *du = (bf16 *)dgu + F;
    const bf16 *u = (const bf16 *)gu + F;
    if (dxc(be)->swiglu_gemm && dxc_gemm_swiglu_bwd(be, dgu, du, gu, u, 2 * F, dy, K, W, F, N, F, K) == 0) return;
    cuda_gemm(be, 0, 0, N, F, K, 1.0f, dy, K, W, F, 0.0f, dh, F, 0);
    cuda_swiglu_bwd(be, dgu, du, dh, gu, u, N, F, 2 * F);
}

/* y may alias a or b: element i (vector v) is read before it is written, by the same thread;
 * no __restrict__, plain (not read-only path) loads */
static __global__ void k_add(bf16 *y, const bf16 *a, const bf16 *b, size_t n, size_t nv)
{
    DXC_FOR(v, nv)
    {
        float af[8], bf[8], yf[8];
        unpack8(ld8(a, v), af);
        unpack8(ld8(b, v), bf);
#pragma unroll
        for (int e = 0; e < 8; e++) yf[e] = af[e] + bf[e];
        st8(y, v, pack8(yf));
    }
    DXC_FOR_FROM(i, nv * 8, n) y[i] = tobf(ld(a, i) + ld(b, i));
}

static void cuda_add(dx_backend *be, void *y, const void *a, const void *b, size_t n)
{
    if (!n) return;
    DXC_ENTER(be, "add");
    const size_t nv = vec8_count(n, al16(y) && al16(a) && al16(b));
    k_add<<<grid_for(be, nv ? nv : n), DXC_THREADS, 0, dxc(be)->stream>>>(
        (bf16 *)y, (const bf16 *)a, (const bf16 *)b, n, nv);
    DXC_LAUNCHED(be, "add");
}

/* QLoRA's NF4 dequantization (kernels/nf4.h): the block absmax fp8 * scale + offset with each
 * operation rounded (no FMA), then code * absmax rounded to bf16, as on the CPU (bit for bit).
 * The code table sits in shared memory: lanes index it with different nibbles, which constant
 * memory would serialize. Vector path: one thread per 8 index bytes (16 elements, all in one
 * block of 64), one 8-byte load and two 16-byte stores; a scalar kernel (one thread per index
 * byte) does the tail and unaligned pointers. */
static __device__ const float g_nf4_code[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

static __device__ __forceinline__ float fp8_e4m3(uint8_t v)
{
    const int e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) return __int_as_float(0x7fc00000);
    const float mag = e == 0 ? ldexpf((float)m * 0.125f, -6) : ldexpf(1.0f + (float)m * 0.125f, e - 7);
    return v & 0x80 ? -mag : mag;
}

static __device__ __forceinline__ float nf4_absmax(const uint8_t *absmax8, const float *scale, float offset, size_t b)
{
    return __fadd_rn(__fmul_rn(fp8_e4m3(__ldg(absmax8 + b)), __ldg(scale + b / 256)), offset);
}

/* elements [16 c, 16 c + 16) for c < nchunks; idx 8-byte and out 16-byte aligned */
static __global__ void k_nf4_dequantize_vec(bf16 *__restrict__ out, const uint8_t *__restrict__ idx,
                                            const uint8_t *__restrict__ absmax8, const float *__restrict__ scale,
                                            float offset, size_t nchunks)
{
    __shared__ float code[16];
    if (threadIdx.x < 16) code[threadIdx.x] = g_nf4_code[threadIdx.x];
    __syncthreads();
    DXC_FOR(c, nchunks) {
        const float a = nf4_absmax(absmax8, scale, offset, c / 4); /* 4 chunks of 16 per block of 64 */
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(idx) + c);
        uint32_t w[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t byte = ((k < 4 ? v.x : v.y) >> (8 * (k & 3))) & 0xffu;
            w[k] = pack2(__fmul_rn(code[byte >> 4], a), __fmul_rn(code[byte & 15], a));
        }
        st8(out, 2 * c, make_uint4(w[0], w[1], w[2], w[3]));
        st8(out, 2 * c + 1, make_uint4(w[4], w[5], w[6], w[7]));
    }
}

/* index bytes [j0, (n + 1) / 2): elements 2 j and 2 j + 1 (< n) */
static __global__ void k_nf4_dequantize(bf16 *__restrict__ out, const uint8_t *__restrict__ idx,
                                        const uint8_t *__restrict__ absmax8, const float *__restrict__ scale,
                                        float offset, size_t n, size_t j0)
{
    __shared__ float code[16];
    if (threadIdx.x < 16) code[threadIdx.x] = g_nf4_code[threadIdx.x];
    __syncthreads();
    DXC_FOR_FROM(j, j0, (n + 1) / 2) {
        const size_t i = 2 * j; /* both elements are in block i / 64 (64 is even) */
        const float a = nf4_absmax(absmax8, scale, offset, i / 64);
        const uint8_t v = idx[j];
        out[i] = tobf(__fmul_rn(code[v >> 4], a));
        if (i + 1 < n) out[i + 1] = tobf(__fmul_rn(code[v & 15], a));
    }
}

static void cuda_nf4_dequantize(dx_backend *be, void *out, const uint8_t *idx, const uint8_t *absmax8,
                                const float *scale, float offset, size_t n)
{
    if (!n) return;
    DXC_ENTER(be, "nf4_dequantize");
    const size_t nchunks = al16(out) && ((uintptr_t)idx & 7u) == 0 ? n / 16 : 0;
    if (nchunks)
        k_nf4_dequantize_vec<<<grid_for(be, nchunks), DXC_THREADS, 0, dxc(be)->stream>>>(
            (bf16 *)out, idx, absmax8, scale, offset, nchunks);
    if (nchunks * 16 < n)
        k_nf4_dequantize<<<grid_for(be, (n + 1) / 2 - nchunks * 8), DXC_THREADS, 0, dxc(be)->stream>>>(
            (bf16 *)out, idx, absmax8, scale, offset, n, nchunks * 8);
    DXC_LAUNCHED(be, "nf4_dequantize");
}

/* Inverted dropout over y, x bf16 [N, F] (y may alias x): element e = i F + j kept by the
 * counter-based mask of kernels.h (the CPU backends' mask, bit for bit), scaled by 1 / (1 - p). */
static __global__ void k_dropout(bf16 *y, const bf16 *x, size_t N, int F, uint32_t th, float keep_scale,
                                 uint64_t stream, uint64_t row0, uint64_t row_len, uint64_t col0)
{
    const size_t n = N * (size_t)F, step = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
        const size_t i = e / (size_t)F, j = e - i * (size_t)F;
        const uint64_t c = (row0 + i) * row_len + col0 + j;
        y[e] = tobf(dx_dropout_keep(stream, c, th) ? ld(x, e) * keep_scale : 0.0f);
    }
}

static void cuda_dropout(dx_backend *be, void *y, const void *x, int N, int F, float p, uint64_t stream,
                         uint64_t row0, uint64_t row_len, uint64_t col0)
{
    if (N <= 0 || F <= 0) return;
    DXC_ENTER(be, "dropout");
    const size_t n = (size_t)N * F;
    k_dropout<<<grid_for(be, n), DXC_THREADS, 0, dxc(be)->stream>>>(
        (bf16 *)y, (const bf16 *)x, (size_t)N, F, dx_dropout_threshold(p), 1.0f / (1.0f - p), stream, row0, row_len,
        col0);
    DXC_LAUNCHED(be, "dropout");
}

/* ============================================================================================
 * Embedding
 * ========================================================================================== */

static __global__ void k_embedding_fwd(bf16 *__restrict__ out, const int32_t *__restrict__ ids,
                                       const bf16 *__restrict__ table, int D)
{
    const size_t row = blockIdx.x;
    const bf16 *src = table + (size_t)ids[row] * D;
    bf16 *dst = out + row * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) dst[j] = src[j];
}

/* The embedding's backward without atomics: the rows' (id, position) pairs sorted by id (CUB's
 * radix sort, stable: positions ascend within an id), then one block per id adds the rows of
 * its run to the table row in position order, as the CPU twin's loop over positions does: the
 * same fp32 additions in the same order, so bitwise the CPU's result and the same from run to
 * run (PyTorch's deterministic index_put / embedding_dense_backward sorts likewise). */
static __global__ void k_iota(int32_t *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = i;
}

/* Block blockIdx.x's run: false unless sorted index i = blockIdx.x starts a run of equal ids
 * whose table row r = id - v0 lies in [0, Vl); then *r, and *end = the run's end, found 32 keys
 * per step (a ballot per warp; every warp of the block finds the same end). */
static __device__ __forceinline__ bool block_run(const int32_t *__restrict__ keys, int N, int v0, int Vl,
                                                 int *r, int *end)
{
    const int i = blockIdx.x;
    const int id = keys[i];
    if (i > 0 && keys[i - 1] == id) return false;
    *r = id - v0;
    if (*r < 0 || *r >= Vl) return false;
    const int lane = threadIdx.x & 31;
    for (int e = i + 1;; e += 32) {
        const int k = e + lane;
        const unsigned same = __ballot_sync(0xffffffffu, k < N && keys[k] == id);
        if (same != 0xffffffffu) {
            *end = e + __ffs(~same) - 1;
            return true;
        }
    }
}

#define DXC_EMB_ROWS 8 /* rows loaded ahead per step of a run (their additions stay in order) */

/* Block i: the run of equal ids starting at sorted index i (blocks inside a run return); its
 * table row ids - v0 (skipped outside [0, Vl)) += the run's dout rows, in position order. A
 * thread owns 8 columns (16-byte loads; D % 8 == 0, 16-byte aligned rows) and loads the next
 * DXC_EMB_ROWS rows before adding them, so a frequent id's long run (an end-of-document token:
 * hundreds of rows per micro-batch) costs its length / DXC_EMB_ROWS memory latencies, not its
 * length. */
static __global__ void k_embedding_runs(float *dtable, const bf16 *__restrict__ dout,
                                        const int32_t *__restrict__ keys,
                                        const int32_t *__restrict__ pos, int N, int D, int v0, int Vl)
{
    const int i = blockIdx.x;
    int r, end;
    if (!block_run(keys, N, v0, Vl, &r, &end)) return;
    float4 *dst = reinterpret_cast<float4 *>(dtable + (size_t)r * D);
    for (int v = threadIdx.x; v < D / 8; v += blockDim.x) {
        const float4 a = dst[2 * v], b = dst[2 * v + 1];
        float acc[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        for (int k = i; k < end; k += DXC_EMB_ROWS) {
            uint4 x[DXC_EMB_ROWS];
#pragma unroll
            for (int u = 0; u < DXC_EMB_ROWS; u++)
                if (k + u < end) x[u] = ldg8(dout + (size_t)pos[k + u] * D, v);
#pragma unroll
            for (int u = 0; u < DXC_EMB_ROWS; u++) {
                if (k + u >= end) break;
                float f[8];
                unpack8(x[u], f);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] += f[e];
            }
        }
        dst[2 * v] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        dst[2 * v + 1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
}

/* The same, one column per thread and one row at a time (any D, any alignment). */
static __global__ void k_embedding_runs1(float *dtable, const bf16 *__restrict__ dout,
                                         const int32_t *__restrict__ keys,
                                         const int32_t *__restrict__ pos, int N, int D, int v0, int Vl)
{
    const int i = blockIdx.x;
    int r, end;
    if (!block_run(keys, N, v0, Vl, &r, &end)) return;
    float *dst = dtable + (size_t)r * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float acc = dst[j];
        for (int k = i; k < end; k++) acc += ld(dout + (size_t)pos[k] * D, j);
        dst[j] = acc;
    }
}

/* dtable rows [v0, v0 + Vl) += dout rows by ids (embedding_bwd: v0 0, Vl INT_MAX). */
static void embedding_bwd_sorted(dx_backend *be, float *dtable, const bf16 *dout, const int32_t *ids,
                                 int N, int D, int v0, int Vl, const char *op)
{
    cudaStream_t st = dxc(be)->stream;
    size_t cub_bytes = 0;
    DXC_CHECK(op, cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, ids, (int32_t *)nullptr,
                                                  (const int32_t *)nullptr, (int32_t *)nullptr, N, 0, 32, st));
    const size_t arr = ((size_t)N * sizeof(int32_t) + 255) & ~(size_t)255;
    char *w = (char *)dxc_scratch(be, 3 * arr + cub_bytes, op);
    int32_t *keys = (int32_t *)w, *pos_in = (int32_t *)(w + arr), *pos = (int32_t *)(w + 2 * arr);
    k_iota<<<(N + DXC_THREADS - 1) / DXC_THREADS, DXC_THREADS, 0, st>>>(pos_in, N);
    DXC_LAUNCHED(be, op);
    DXC_CHECK(op, cub::DeviceRadixSort::SortPairs(w + 3 * arr, cub_bytes, ids, keys, pos_in, pos, N, 0, 32, st));
    if (D % 8 == 0 && al16(dtable) && al16(dout))
        k_embedding_runs<<<N, DXC_THREADS, 0, st>>>(dtable, dout, keys, pos, N, D, v0, Vl);
    else
        k_embedding_runs1<<<N, DXC_THREADS, 0, st>>>(dtable, dout, keys, pos, N, D, v0, Vl);
    DXC_LAUNCHED(be, op);
}

static void cuda_embedding_fwd(dx_backend *be, void *out, const int32_t *ids, const void *table,
                               int N, int D)
{
    if (N <= 0 || D <= 0) return;
    DXC_ENTER(be, "embedding_fwd");
    k_embedding_fwd<<<N, DXC_THREADS, 0, dxc(be)->stream>>>((bf16 *)out, ids,
                                                            (const bf16 *)table, D);
    DXC_LAUNCHED(be, "embedding_fwd");
}

static void cuda_embedding_bwd(dx_backend *be, void *dtable, const void *dout, const int32_t *ids,
                               int N, int D)
{
    if (N <= 0 || D <= 0) return;
    DXC_ENTER(be, "embedding_bwd");
    embedding_bwd_sorted(be, (float *)dtable, (const bf16 *)dout, ids, N, D, 0, INT_MAX, "embedding_bwd");
}

/* ============================================================================================
 * Cross-entropy: a block per row, online max / sum-of-exp per thread (Milakov & Gimelshein
 * 2018), merged over the block; row losses in fp64 to a workspace, summed in order by a
 * second kernel. k_xent (any V; one block per row) and k_xent8 (V % 8 == 0, aligned rows:
 * vectorized, blocks walking the rows on an L2-sized grid).
 * ========================================================================================== */

/* (m, s) <- merge of two partial (max, sum of exp(z - max)); m = -inf means empty. */
static __device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2)
{
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) { /* both empty */
        s = s + s2;
        return;
    }
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

/* Every thread's (m, s) merged over the block (warp shuffles, then the warps' partials in
 * shm, shs, 32 floats each of shared memory, in the same order in every thread): afterwards all
 * threads hold the block's (m, s). Has a __syncthreads: every thread of the block calls it. */
static __device__ __forceinline__ void ms_block_merge(float &m, float &s, float *shm, float *shs)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        ms_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        shm[wid] = m;
        shs[wid] = s;
    }
    __syncthreads();
    m = shm[0];
    s = shs[0];
    for (int k = 1; k < nw; k++) ms_merge(m, s, shm[k], shs[k]);
}

static __global__ void __launch_bounds__(DXC_THREADS)
    k_xent(double *__restrict__ rowloss, bf16 *dl, const bf16 *logits,
           const int32_t *__restrict__ targets, int V, float dscale)
{
    __shared__ float shm[32], shs[32];
    const size_t row = blockIdx.x;
    const bf16 *z = logits + row * V;
    bf16 *d = dl ? dl + row * V : NULL;
    const int t = targets[row];
    if (t < 0) { /* ignored: no loss, zero gradient (uniform over the block) */
        if (d)
            for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = tobf(0.0f);
        if (threadIdx.x == 0) rowloss[row] = 0.0;
        return;
    }
    float m = -INFINITY, s = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float zj = ld(z, j);
        if (zj > m) {
            s = s * expf(m - zj) + 1.0f;
            m = zj;
        } else if (zj == zj) {
            if (m != -INFINITY) s += expf(zj - m);
        } else {
            s = NAN; /* NaN logits give a NaN loss, as on the CPU */
        }
    }
    const float zt = threadIdx.x == 0 ? ld(z, t) : 0.0f; /* before the barrier: d may alias z */
    ms_block_merge(m, s, shm, shs);
    if (threadIdx.x == 0) rowloss[row] = (double)m + log((double)s) - (double)zt;
    if (d) {
        const float f = (float)((double)dscale / (double)s);
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float p = expf(ld(z, j) - m) * f;
            if (j == t) p -= dscale;
            d[j] = tobf(p);
        }
    }
}

/* k_xent for V % 8 == 0 with 16-byte aligned rows (logits and dlogits): 8 logits per thread
 * and step (one 16-byte load, one 16-byte store of dlogits), one rescale of the running sum
 * per 8, exponentials as ex2.approx of z log2(e) - m log2(e) (relative error ~2^-22). The
 * blocks walk the rows (row blockIdx.x, then + gridDim.x, ...) on a grid of XENT8_BLOCKS_PER_SM
 * per SM, so that the rows in flight (2 x 132 x 64 KB at vocab 32000 on an H100) fit the L2
 * and the second pass re-reads its row from there: one block per row kept ~1000 rows in
 * flight, and both passes read DRAM (1.75 ms at 2048 x 8 x 32000, 3 TB/s for 5.2 GB, when the
 * logits were fp32). */
#define XENT8_THREADS 512
#define XENT8_BLOCKS_PER_SM 2
/* one row of k_xent8 (the whole block); shm, shs: 32 floats each of shared memory */
static __device__ __forceinline__ void xent8_row(double *__restrict__ rowloss, bf16 *dl,
                                                 const bf16 *logits,
                                                 const int32_t *__restrict__ targets, size_t row,
                                                 int V, float dscale, float *shm, float *shs)
{
    constexpr float L2E = 1.4426950408889634f;
    const bf16 *z = logits + row * V;
    const uint4 *z8 = (const uint4 *)z;
    const int V8 = V / 8;
    uint4 *d8 = dl ? (uint4 *)(dl + row * V) : NULL;
    const int t = targets[row];
    if (t < 0) { /* ignored: no loss, zero gradient (uniform over the block) */
        if (d8)
            for (int j = threadIdx.x; j < V8; j += blockDim.x) d8[j] = make_uint4(0, 0, 0, 0);
        if (threadIdx.x == 0) rowloss[row] = 0.0;
        return;
    }
    float m = -INFINITY, s = 0;
    bool nan = false;
#pragma unroll 2
    for (int j = threadIdx.x; j < V8; j += blockDim.x) {
        float f[8];
        unpack8(z8[j], f);
        float cm = f[0];
#pragma unroll
        for (int k = 1; k < 8; k++) cm = fmaxf(cm, f[k]); /* fmaxf skips NaN: flagged below */
        if (cm > m) {
            s *= ex2((m - cm) * L2E); /* m = -inf: s is 0, ex2(-inf) = 0 */
            m = cm;
        }
        if (m != -INFINITY) {
            const float ml = m * L2E;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                nan |= f[k] != f[k];
                s += ex2(fmaf(f[k], L2E, -ml));
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) nan |= f[k] != f[k];
        }
    }
    if (nan) s = NAN; /* NaN logits give a NaN loss, as on the CPU */
    const float zt = threadIdx.x == 0 ? ld(z, t) : 0.0f; /* before the barrier: d8 may alias z */
    ms_block_merge(m, s, shm, shs);
    if (threadIdx.x == 0) rowloss[row] = (double)m + log((double)s) - (double)zt;
    if (d8) {
        const float fs = (float)((double)dscale / (double)s), ml = m * L2E;
        for (int j = threadIdx.x; j < V8; j += blockDim.x) {
            float f[8], p[8];
            unpack8(z8[j], f); /* last use (a plain load: d8 may alias z8) */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                p[k] = ex2(fmaf(f[k], L2E, -ml)) * fs;
                if (8 * j + k == t) p[k] -= dscale;
            }
            d8[j] = pack8(p);
        }
    }
}

static __global__ void __launch_bounds__(XENT8_THREADS)
    k_xent8(double *__restrict__ rowloss, bf16 *dl, const bf16 *logits,
            const int32_t *__restrict__ targets, int N, int V, float dscale)
{
    __shared__ float shm[32], shs[32];
    for (size_t row = blockIdx.x; row < (size_t)N; row += gridDim.x) {
        xent8_row(rowloss, dl, logits, targets, row, V, dscale, shm, shs);
        __syncthreads(); /* shm, shs read by every thread before the next row's writes */
    }
}

/* out[0] += sum_i part[i] (fixed order; one block) */
static __global__ void __launch_bounds__(DXC_THREADS)
    k_sum_add_f64(float *out, const double *__restrict__ part, size_t n)
{
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] += (float)s;
}

static void cuda_cross_entropy(dx_backend *be, void *loss_sum, void *dlogits, const void *logits,
                               const int32_t *targets, int N, int V, float dscale)
{
    if (N <= 0 || V <= 0) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "cross_entropy");
    double *rl = (double *)dxc_scratch(be, (size_t)N * sizeof(double), "cross_entropy");
    if (V % 8 == 0 && al16(logits) && (!dlogits || al16(dlogits)))
        k_xent8<<<N < XENT8_BLOCKS_PER_SM * im->num_sms ? N : XENT8_BLOCKS_PER_SM * im->num_sms,
                  XENT8_THREADS, 0, im->stream>>>(rl, (bf16 *)dlogits, (const bf16 *)logits,
                                                  targets, N, V, dscale);
    else
        k_xent<<<N, DXC_THREADS, 0, im->stream>>>(rl, (bf16 *)dlogits, (const bf16 *)logits,
                                                  targets, V, dscale);
    DXC_LAUNCHED(be, "cross_entropy");
    k_sum_add_f64<<<1, DXC_THREADS, 0, im->stream>>>((float *)loss_sum, rl, (size_t)N);
    DXC_LAUNCHED(be, "cross_entropy");
}

/* ============================================================================================
 * Tensor parallelism: vocab-parallel embedding and cross-entropy (kernels.h)
 * ========================================================================================== */

static __global__ void k_embedding_vp_fwd(bf16 *__restrict__ out, const int32_t *__restrict__ ids,
                                          const bf16 *__restrict__ table, int D, int v0, int Vl)
{
    const size_t row = blockIdx.x;
    const int r = ids[row] - v0;
    bf16 *dst = out + row * D;
    if (r < 0 || r >= Vl) {
        for (int j = threadIdx.x; j < D; j += blockDim.x) dst[j] = tobf(0.0f);
        return;
    }
    const bf16 *src = table + (size_t)r * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) dst[j] = src[j];
}

static void cuda_embedding_vp_fwd(dx_backend *be, void *out, const int32_t *ids, const void *table,
                                  int N, int D, int v0, int Vl)
{
    if (N <= 0 || D <= 0) return;
    DXC_ENTER(be, "embedding_vp_fwd");
    k_embedding_vp_fwd<<<N, DXC_THREADS, 0, dxc(be)->stream>>>((bf16 *)out, ids, (const bf16 *)table,
                                                               D, v0, Vl);
    DXC_LAUNCHED(be, "embedding_vp_fwd");
}

static void cuda_embedding_vp_bwd(dx_backend *be, void *dtable, const void *dout, const int32_t *ids,
                                  int N, int D, int v0, int Vl)
{
    if (N <= 0 || D <= 0) return;
    DXC_ENTER(be, "embedding_vp_bwd");
    embedding_bwd_sorted(be, (float *)dtable, (const bf16 *)dout, ids, N, D, v0, Vl, "embedding_vp_bwd");
}

/* One block per row: the slice's log-sum-exp (online max / sum, merged as k_xent does) and the
 * target's logit when the slice holds it. */
static __global__ void __launch_bounds__(DXC_THREADS)
    k_ce_vp_stats(float *__restrict__ stats, const bf16 *__restrict__ logits,
                  const int32_t *__restrict__ targets, int Vl, int v0)
{
    __shared__ float shm[32], shs[32];
    const size_t row = blockIdx.x;
    const bf16 *z = logits + row * Vl;
    float m = -INFINITY, s = 0;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
        const float zj = ld(z, j);
        if (zj > m) {
            s = s * expf(m - zj) + 1.0f;
            m = zj;
        } else if (zj == zj) {
            if (m != -INFINITY) s += expf(zj - m);
        } else {
            s = NAN;
        }
    }
    ms_block_merge(m, s, shm, shs);
    if (threadIdx.x == 0) {
        const int t = targets[row] - v0;
        stats[2 * row] = (float)((double)m + log((double)s));
        stats[2 * row + 1] = targets[row] >= 0 && t >= 0 && t < Vl ? ld(z, t) : 0.0f;
    }
}

/* One block per row: the row's log-sum-exp over every slice's stats, its loss (fp64, to a
 * workspace) and this slice's dlogits. */
static __global__ void __launch_bounds__(DXC_THREADS)
    k_ce_vp_finish(double *__restrict__ rowloss, bf16 *dl, const bf16 *logits,
                   const float *__restrict__ gathered, int tp, const int32_t *__restrict__ targets,
                   int N, int Vl, int v0, float dscale)
{
    const size_t row = blockIdx.x;
    const int t = targets[row];
    bf16 *d = dl ? dl + row * Vl : NULL;
    if (t < 0) {
        if (d)
            for (int j = threadIdx.x; j < Vl; j += blockDim.x) d[j] = tobf(0.0f);
        if (threadIdx.x == 0) rowloss[row] = 0.0;
        return;
    }
    double mx = -INFINITY, se = 0, tl = 0; /* every thread the same, in rank order */
    for (int r = 0; r < tp; r++) mx = fmax(mx, (double)gathered[((size_t)r * N + row) * 2]);
    for (int r = 0; r < tp; r++) {
        se += exp((double)gathered[((size_t)r * N + row) * 2] - mx);
        tl += (double)gathered[((size_t)r * N + row) * 2 + 1];
    }
    const double lse = mx + log(se);
    if (threadIdx.x == 0) rowloss[row] = lse - tl;
    if (d) {
        const bf16 *z = logits + row * Vl; /* d may alias z: each element read, then written */
        const float l = (float)lse;
        for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
            float p = expf(ld(z, j) - l) * dscale;
            if (j == t - v0) p -= dscale;
            d[j] = tobf(p);
        }
    }
}

static void cuda_ce_vp_stats(dx_backend *be, void *stats, const void *logits, const int32_t *targets,
                             int N, int Vl, int v0)
{
    if (N <= 0 || Vl <= 0) return;
    DXC_ENTER(be, "ce_vp_stats");
    k_ce_vp_stats<<<N, DXC_THREADS, 0, dxc(be)->stream>>>((float *)stats, (const bf16 *)logits,
                                                          targets, Vl, v0);
    DXC_LAUNCHED(be, "ce_vp_stats");
}

static void cuda_ce_vp_finish(dx_backend *be, void *loss_sum, void *dlogits, const void *logits,
                              const void *gathered, int tp, const int32_t *targets, int N, int Vl,
                              int v0, float dscale)
{
    if (N <= 0 || Vl <= 0) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "ce_vp_finish");
    double *rl = (double *)dxc_scratch(be, (size_t)N * sizeof(double), "ce_vp_finish");
    k_ce_vp_finish<<<N, DXC_THREADS, 0, im->stream>>>(rl, (bf16 *)dlogits, (const bf16 *)logits,
                                                      (const float *)gathered, tp, targets, N, Vl,
                                                      v0, dscale);
    DXC_LAUNCHED(be, "ce_vp_finish");
    if (loss_sum) {
        k_sum_add_f64<<<1, DXC_THREADS, 0, im->stream>>>((float *)loss_sum, rl, (size_t)N);
        DXC_LAUNCHED(be, "ce_vp_finish");
    }
}

/* ============================================================================================
 * AdamW: fp64 arithmetic with the CPU twin's expression order; the _rn intrinsics forbid FMA
 * contraction, so master, m and v match the CPU backend bit for bit (bias corrections are
 * computed on the host with the same pow).
 * ========================================================================================== */

struct adamw_consts {
    double b1, b2, omb1, omb2, eps, gs, decay, step1, ibc2;
};

/* One element's update in fp64 (the CPU twin's order of operations): p, m, v in place. */
static __device__ __forceinline__ void adamw_one(float &p, float &m, float &v, float grad,
                                                 const adamw_consts &c)
{
    const double g = __dmul_rn((double)grad, c.gs);
    double pi = __dmul_rn((double)p, c.decay);
    const double mi = __dadd_rn(__dmul_rn(c.b1, (double)m), __dmul_rn(c.omb1, g));
    const double vi = __dadd_rn(__dmul_rn(c.b2, (double)v), __dmul_rn(__dmul_rn(c.omb2, g), g));
    const double den = __dadd_rn(__dsqrt_rn(__dmul_rn(vi, c.ibc2)), c.eps);
    pi = __dsub_rn(pi, __ddiv_rn(__dmul_rn(c.step1, mi), den));
    p = (float)pi;
    m = (float)mi;
    v = (float)vi;
}

/* elements [i0, n), one per thread (the scalar path, and the tail of the vector one) */
static __global__ void k_adamw(float *__restrict__ p, bf16 *__restrict__ work,
                               const float *__restrict__ grad, float *__restrict__ m,
                               float *__restrict__ v, size_t i0, size_t n, adamw_consts c)
{
    DXC_FOR_FROM(i, i0, n)
    {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_one(pi, mi, vi, grad[i], c);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        if (work) work[i] = tobf(pi);
    }
}

/* 4 elements per thread with 16-byte loads and stores (8-byte stores of work); p, grad, m, v
 * 16-byte aligned, work 8-byte aligned; elements [0, 4 n4) */
static __global__ void k_adamw4(float *__restrict__ p, bf16 *__restrict__ work,
                                const float *__restrict__ grad, float *__restrict__ m,
                                float *__restrict__ v, size_t n4, adamw_consts c)
{
    DXC_FOR(i, n4)
    {
        float4 pi = ((const float4 *)p)[i], mi = ((const float4 *)m)[i];
        float4 vi = ((const float4 *)v)[i];
        const float4 gi = ((const float4 *)grad)[i];
        adamw_one(pi.x, mi.x, vi.x, gi.x, c);
        adamw_one(pi.y, mi.y, vi.y, gi.y, c);
        adamw_one(pi.z, mi.z, vi.z, gi.z, c);
        adamw_one(pi.w, mi.w, vi.w, gi.w, c);
        ((float4 *)p)[i] = pi;
        ((float4 *)m)[i] = mi;
        ((float4 *)v)[i] = vi;
        if (work) {
            uint2 w2;
            w2.x = pack2(pi.x, pi.y);
            w2.y = pack2(pi.z, pi.w);
            ((uint2 *)work)[i] = w2;
        }
    }
}

static void cuda_adamw(dx_backend *be, void *master, void *work, const void *grad, void *m,
                       void *v, size_t n, const dx_adamw_hparams *hp)
{
    if (!n) return;
    DXC_ENTER(be, "adamw");
    adamw_consts c;
    const double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    const double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
    c.b1 = hp->beta1;
    c.b2 = hp->beta2;
    c.omb1 = 1.0 - hp->beta1;
    c.omb2 = 1.0 - hp->beta2;
    c.eps = hp->eps;
    c.gs = hp->grad_scale;
    c.decay = 1.0 - hp->lr * hp->weight_decay;
    c.step1 = hp->lr / bc1;
    c.ibc2 = 1.0 / bc2;
    cudaStream_t st = dxc(be)->stream;
    /* on the side stream, at most side_grid blocks (DX_CUDA_SIDE_BLOCKS) */
    const unsigned cap = dxc(be)->compute_stream && dxc(be)->side_grid > 0 ? (unsigned)dxc(be)->side_grid : ~0u;
    size_t done = 0;
    if (al16(master) && al16(grad) && al16(m) && al16(v) && ((uintptr_t)work & 7u) == 0) {
        const size_t n4 = n / 4;
        if (n4) {
            const unsigned nb = grid_for(be, n4);
            k_adamw4<<<nb < cap ? nb : cap, DXC_THREADS, 0, st>>>(
                (float *)master, (bf16 *)work, (const float *)grad, (float *)m, (float *)v, n4, c);
            DXC_LAUNCHED(be, "adamw");
        }
        done = 4 * n4;
    }
    if (done < n) {
        const unsigned nb = grid_for(be, n - done);
        k_adamw<<<nb < cap ? nb : cap, DXC_THREADS, 0, st>>>(
            (float *)master, (bf16 *)work, (const float *)grad, (float *)m, (float *)v, done, n, c);
        DXC_LAUNCHED(be, "adamw");
    }
}

/* ============================================================================================
 * sumsq (fp64 block partials, summed in order by a second kernel), scale, acc_to_act
 * ========================================================================================== */

#define DXC_SUMSQ_BLOCKS 1024

/* 16-byte loads where x is 16-byte aligned (4 MB in flight over the 1024 x 256 threads, which
 * the HBM's bandwidth-latency product needs; 4-byte loads reached ~2 TB/s), the n % 4 last
 * elements by block 0; 4-byte loads otherwise. */
static __global__ void __launch_bounds__(DXC_THREADS)
    k_sumsq_part(double *__restrict__ part, const float *__restrict__ x, size_t n)
{
    double s = 0;
    if (((uintptr_t)x & 15u) == 0) {
        const size_t n4 = n / 4;
        DXC_FOR(i, n4)
        {
            const float4 v = reinterpret_cast<const float4 *>(x)[i];
            const double a = v.x, b = v.y, c = v.z, d = v.w;
            s += a * a + b * b + c * c + d * d;
        }
        if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) {
            const double xi = (double)x[4 * n4 + threadIdx.x];
            s += xi * xi;
        }
    } else {
        DXC_FOR(i, n)
        {
            const double xi = (double)x[i];
            s += xi * xi;
        }
    }
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

static void cuda_sumsq(dx_backend *be, void *out, const void *x, size_t n)
{
    if (!n) return;
    dxc_impl *im = dxc(be);
    DXC_ENTER(be, "sumsq");
    /* the block count depends on n only, so the summation order is fixed */
    size_t nb = (n + 16 * DXC_THREADS - 1) / (16 * DXC_THREADS);
    if (nb > DXC_SUMSQ_BLOCKS) nb = DXC_SUMSQ_BLOCKS;
    double *part = (double *)dxc_scratch(be, nb * sizeof(double), "sumsq");
    k_sumsq_part<<<(unsigned)nb, DXC_THREADS, 0, im->stream>>>(part, (const float *)x, n);
    DXC_LAUNCHED(be, "sumsq");
    k_sum_add_f64<<<1, DXC_THREADS, 0, im->stream>>>((float *)out, part, nb);
    DXC_LAUNCHED(be, "sumsq");
}

static __global__ void k_scale(float *x, size_t n, float s)
{
    DXC_FOR(i, n) x[i] *= s;
}

static void cuda_scale(dx_backend *be, void *x, size_t n, float s)
{
    if (!n) return;
    DXC_ENTER(be, "scale");
    k_scale<<<grid_for(be, n), DXC_THREADS, 0, dxc(be)->stream>>>((float *)x, n, s);
    DXC_LAUNCHED(be, "scale");
}

/* 8 fp32 as two 16-byte accesses (p 16-byte aligned; vector v = p[8 v .. 8 v + 7]) */
static __device__ __forceinline__ void ld8f(const float *p, size_t v, float f[8])
{
    const float4 a = reinterpret_cast<const float4 *>(p)[2 * v], b = reinterpret_cast<const float4 *>(p)[2 * v + 1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
static __device__ __forceinline__ void st8f(float *p, size_t v, const float f[8])
{
    reinterpret_cast<float4 *>(p)[2 * v] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4 *>(p)[2 * v + 1] = make_float4(f[4], f[5], f[6], f[7]);
}

/* nv vectors of 8 (16-byte accesses where every pointer is aligned), the scalar tail after */
static __global__ void k_acc_to_act(bf16 *__restrict__ dst, const float *__restrict__ src, size_t n, size_t nv)
{
    DXC_FOR(v, nv)
    {
        float f[8];
        ld8f(src, v, f);
        st8(dst, v, pack8(f));
    }
    DXC_FOR_FROM(i, nv * 8, n) dst[i] = tobf(src[i]);
}

static void cuda_acc_to_act(dx_backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    DXC_ENTER(be, "acc_to_act");
    const size_t nv = vec8_count(n, al16(dst) && al16(src));
    k_acc_to_act<<<grid_for(be, nv ? nv : n), DXC_THREADS, 0, dxc(be)->stream>>>((bf16 *)dst,
                                                                       (const float *)src, n, nv);
    DXC_LAUNCHED(be, "acc_to_act");
}

static __global__ void k_acc_add_act(float *__restrict__ dst, const bf16 *__restrict__ src, size_t n, size_t nv)
{
    DXC_FOR(v, nv)
    {
        float d[8], x[8];
        ld8f(dst, v, d);
        unpack8(ldg8(src, v), x);
#pragma unroll
        for (int e = 0; e < 8; e++) d[e] += x[e];
        st8f(dst, v, d);
    }
    DXC_FOR_FROM(i, nv * 8, n) dst[i] += __bfloat162float(src[i]);
}

static void cuda_acc_add_act(dx_backend *be, void *dst, const void *src, size_t n)
{
    if (!n) return;
    DXC_ENTER(be, "acc_add_act");
    const size_t nv = vec8_count(n, al16(dst) && al16(src));
    k_acc_add_act<<<grid_for(be, nv ? nv : n), DXC_THREADS, 0, dxc(be)->stream>>>((float *)dst,
                                                                        (const bf16 *)src, n, nv);
    DXC_LAUNCHED(be, "acc_add_act");
}

/* ============================================================================================
 * Attention: attention.cu
 * ========================================================================================== */

static void cuda_attention_fwd(dx_backend *be, void *o, void *lse, const void *q, const void *k,
                               const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv, int Dh)
{
    dxc_attention_fwd(be, o, lse, q, k, v, ldq, ldkv, B, T, H, Hkv, Dh);
}

static void cuda_attention_bwd(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                               const void *q, const void *k, const void *v, const void *o,
                               const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv,
                               int Dh)
{
    dxc_attention_bwd(be, dq, dk, dv, dout, q, k, v, o, lse, ldq, ldkv, B, T, H, Hkv, Dh, 0.0f);
}

static void cuda_attention_bwd_rope(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,
                                    const void *q, const void *k, const void *v, const void *o,
                                    const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv,
                                    int Dh, float theta)
{
    dxc_attention_bwd(be, dq, dk, dv, dout, q, k, v, o, lse, ldq, ldkv, B, T, H, Hkv, Dh, theta);
}

/* ============================================================================================
 * Creation / destruction
 * ========================================================================================== */

/* The developer switch `name` (a decimal integer in 0 .. 2^20): its value, or dflt when it is
 * unset or empty; anything else keeps dflt and prints a warning naming the variable and what it
 * should be (`what`). */
static int env_int(const char *name, int dflt, const char *what)
{
    const char *v = getenv(name);
    if (!v || !v[0]) return dflt;
    char *end;
    errno = 0;
    const long n = strtol(v, &end, 10);
    if (*end || errno || n < 0 || n > 1L << 20) {
        fprintf(stderr, "dissect cuda backend: %s=%s is not %s; the default is used\n", name, v, what);
        return dflt;
    }
    return (int)n;
}

static void cuda_destroy(dx_backend *be)
{
    if (!be) return;
    dxc_impl *im = dxc(be);
    if (im) {
        cudaError_t e = cudaSetDevice(im->device);
        if (im->compute_stream) im->stream = im->compute_stream; /* (side_end never came) */
        if (im->aux_saved) im->stream = im->aux_saved;          /* (nor overlap_end) */
        if (e == cudaSuccess && im->aux_stream) e = cudaStreamSynchronize(im->aux_stream);
        if (e == cudaSuccess && im->stream) e = cudaStreamSynchronize(im->stream);
        if (e == cudaSuccess && im->side_stream) e = cudaStreamSynchronize(im->side_stream);
        if (e != cudaSuccess)
            fprintf(stderr, "dissect cuda backend: destroy: %s (releasing anyway)\n",
                    cudaGetErrorString(e));
        dxc_power_release(be);
        if (im->blas) cublasDestroy(im->blas);
        for (int i = 0; i < im->lt_nplans; i++) lt_plan_free(&im->lt_plans[i]);
        free(im->lt_plans);
        if (im->lt) cublasLtDestroy(im->lt);
        for (size_t i = 0; i < im->cap; i++) { /* the backend's own buffers and any leftovers */
            if (!im->slots[i].p) continue;
            cudaFree(im->slots[i].p);
            dx_mem_account(&be->mem, (dx_mem_cat)im->slots[i].cat,
                           -(long long)im->slots[i].bytes);
        }
        for (int d = 0; d < 2; d++)
            if (im->copy_stream[d]) {
                cudaStreamSynchronize(im->copy_stream[d]);
                cudaStreamDestroy(im->copy_stream[d]);
            }
        for (int i = 0; i < DX_COPY_TICKETS; i++) {
            if (im->copy_ev[i]) cudaEventDestroy(im->copy_ev[i]);
            if (im->fence_ev[i]) cudaEventDestroy(im->fence_ev[i]);
        }
        if (im->copy_before) cudaEventDestroy(im->copy_before);
        for (int i = 0; i < im->side_nev; i++) cudaEventDestroy(im->side_ev[i]);
        free(im->side_ev);
        for (int i = 0; i < im->stamp_nev; i++) cudaEventDestroy(im->stamp_ev[i]);
        free(im->stamp_ev);
        if (im->side_start) cudaEventDestroy(im->side_start);
        if (im->side_stream) cudaStreamDestroy(im->side_stream);
        if (im->aux_fork) cudaEventDestroy(im->aux_fork);
        if (im->aux_done) cudaEventDestroy(im->aux_done);
        if (im->aux_stream) cudaStreamDestroy(im->aux_stream);
        if (im->stream) cudaStreamDestroy(im->stream);
        free(im->slots);
        free(im);
    }
    free(be);
}

/* be is a CUDA backend (the public accessors below take any backend) */
static int is_cuda(const dx_backend *be) { return be && be->name && strcmp(be->name, "cuda") == 0 && be->impl; }

extern "C" void *dx_cuda_stream(dx_backend *be)
{
    if (!is_cuda(be)) return NULL;
    return (void *)dxc(be)->stream;
}

extern "C" int dx_cuda_gemm_sm_target(dx_backend *be)
{
    if (!is_cuda(be)) return -1;
    int n = -1;
    if (cublasGetSmCountTarget(dxc(be)->blas, &n) != CUBLAS_STATUS_SUCCESS) return -1;
    return n;
}

extern "C" dx_backend *dx_backend_cuda_create(int device, int nthreads)
{
    if (nthreads < 1) {
        dx_fail("cuda backend: nthreads must be >= 1 (got %d)", nthreads);
        return NULL;
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        dx_fail("cuda backend: no usable CUDA device: %s", cudaGetErrorString(e));
        return NULL;
    }
    if (ndev <= 0) {
        dx_fail("cuda backend: no CUDA device");
        return NULL;
    }
    if (device < 0 || device >= ndev) {
        dx_fail("cuda backend: device %d does not exist (%d visible)", device, ndev);
        return NULL;
    }
    int major = 0, minor = 0, nsm = 0, smem = 0, l2 = 0;
    e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    if (e != cudaSuccess) {
        dx_fail("cuda backend: device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    if (major < 9) {
        dx_fail("cuda backend: device %d has compute capability %d.%d; this build targets "
                "sm_90 (Hopper) and newer", device, major, minor);
        return NULL;
    }

    dx_backend *be = (dx_backend *)calloc(1, sizeof *be);
    dxc_impl *im = (dxc_impl *)calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        dx_fail("cuda backend: out of host memory");
        return NULL;
    }
    be->impl = im;
    be->name = "cuda";
    be->act = DX_BF16;
    be->acc = DX_F32;
    be->nthreads = nthreads;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(be->device_name, sizeof be->device_name, "%.95s", prop.name);
    else
        snprintf(be->device_name, sizeof be->device_name, "cuda device %d", device);
    be->peak_tflops = dx_peak_tflops(be->device_name);
    im->device = device;
    im->num_sms = nsm > 0 ? nsm : 1;
    im->smem_optin = smem;
    im->l2_bytes = l2;
    im->wgmma = major == 9; /* the build's sm_90a code; newer GPUs JIT the compute_90 PTX */
    const char *sync_env = getenv("DX_CUDA_SYNC");
    im->sync_each_op = sync_env && sync_env[0] && strcmp(sync_env, "0") != 0;
    const char *att_env = getenv("DX_CUDA_ATTENTION");
    im->attn_simple = att_env && strcmp(att_env, "simple") == 0;
    const char *det_env = getenv("DX_CUDA_DETERMINISTIC");
    im->attn_det = det_env && det_env[0] && strcmp(det_env, "0") != 0;
    im->attn_fwd_var = env_int("DX_CUDA_ATT_FWD", 0, "an attention forward variant number");
    im->attn_bwd_var = env_int("DX_CUDA_ATT_BWD", 0, "an attention backward variant number");
    im->attn_grid = env_int("DX_CUDA_ATT_GRID", 0, "a block count (0: the SM count)");
    /* unset or empty: chosen per shape */
    im->attn_chunk = env_int("DX_CUDA_ATT_CHUNK", -1, "a count of (batch, kv head) pairs (0: no chunks)");
    im->chunk_key[0] = -1;
    im->attn_skip = env_int("DX_CUDA_ATT_SKIP", 0, "a bit mask (timing only: 1 the D pass left out, 2 the dq conversion left out, 4 the dq conversion twice, 8 the D pass twice)");
    const char *sg = getenv("DX_CUDA_SWIGLU_GEMM");
    im->swiglu_gemm = !(sg && strcmp(sg, "0") == 0);
    const char *rg = getenv("DX_CUDA_ROPE_GEMM");
    im->rope_gemm = !(rg && strcmp(rg, "0") == 0);
    im->gemm_wg_ep = env_int("DX_GEMM_WG_EP", 0, "a GEMM epilogue variant number");
    const char *rf = getenv("DX_CUDA_ROPE_FOLD");
    im->rope_fold = !(rf && strcmp(rf, "0") == 0);

    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->zero = cuda_zero;
    be->copy = cuda_copy;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->upload_f32 = cuda_upload_f32;
    be->download_f32 = cuda_download_f32;
    be->sync = cuda_sync;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->download_async = cuda_download_async;
    be->upload_async = cuda_upload_async;
    be->copy_wait = cuda_copy_wait;
    be->upload_async_detached = cuda_upload_async_detached;
    be->copy_join = cuda_copy_join;
    be->fence = cuda_fence;
    be->copy_stream = cuda_copy_stream;
    be->gemm = cuda_gemm;
    be->gemm_res = cuda_gemm_res;
    be->gemm_swiglu = cuda_gemm_swiglu;
    be->gemm_rope = cuda_gemm_rope;
    be->gemm_rope_fused = cuda_gemm_rope_fused;
    be->gemm_swiglu_bwd = cuda_gemm_swiglu_bwd;
    be->rmsnorm_fwd = cuda_rmsnorm_fwd;
    be->rmsnorm_bwd = cuda_rmsnorm_bwd;
    be->rope_fwd = cuda_rope_fwd;
    be->rope_bwd = cuda_rope_bwd;
    be->attention_fwd = cuda_attention_fwd;
    be->attention_bwd = cuda_attention_bwd;
    be->attention_bwd_rope = im->rope_fold ? cuda_attention_bwd_rope : NULL;
    be->swiglu_fwd = cuda_swiglu_fwd;
    be->swiglu_bwd = cuda_swiglu_bwd;
    be->embedding_fwd = cuda_embedding_fwd;
    be->embedding_bwd = cuda_embedding_bwd;
    be->cross_entropy = cuda_cross_entropy;
    be->embedding_vp_fwd = cuda_embedding_vp_fwd;
    be->embedding_vp_bwd = cuda_embedding_vp_bwd;
    be->ce_vp_stats = cuda_ce_vp_stats;
    be->ce_vp_finish = cuda_ce_vp_finish;
    be->add = cuda_add;
    be->dropout = cuda_dropout;
    be->nf4_dequantize = cuda_nf4_dequantize;
    be->adamw = cuda_adamw;
    be->sumsq = cuda_sumsq;
    be->scale = cuda_scale;
    be->acc_to_act = cuda_acc_to_act;
    be->acc_add_act = cuda_acc_add_act;
    be->power_counters = dxc_power_counters;
    be->destroy = cuda_destroy;
    be->side_begin = cuda_side_begin;
    be->side_record = cuda_side_record;
    be->stamp = cuda_stamp;
    be->stamp_seconds = cuda_stamp_seconds;
    be->side_end = cuda_side_end;
    be->side_wait = cuda_side_wait;
    be->overlap_begin = cuda_overlap_begin;
    be->overlap_end = cuda_overlap_end;
    be->overlap_join = cuda_overlap_join;
    im->side_grid = env_int("DX_CUDA_SIDE_BLOCKS", 0, "a block count (0: no cap)");

    const char *prio_env = getenv("DX_CUDA_COMPUTE_PRIORITY");
    if (prio_env && !strcmp(prio_env, "high")) {
        int least = 0, greatest = 0;
        e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&im->stream, cudaStreamNonBlocking, greatest);
    } else
        e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        dx_fail("cuda backend: device %d: cannot create a stream: %s", device,
                cudaGetErrorString(e));
        im->stream = NULL;
        cuda_destroy(be);
        return NULL;
    }
    cublasStatus_t bs = cublasCreate(&im->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        im->blas = NULL;
        dx_fail("cuda backend: device %d: cublasCreate: %s", device, cublasGetStatusString(bs));
        cuda_destroy(be);
        return NULL;
    }
    im->blas_ws = cuda_alloc(be, DXC_BLAS_WS_BYTES, DX_MEM_OTHER);
    if (!im->blas_ws) {
        dx_fail_prefix("cuda backend: cuBLAS workspace");
        cuda_destroy(be);
        return NULL;
    }
    im->blas_ws_bytes = DXC_BLAS_WS_BYTES;
    /* cublasSetStream resets the workspace: set the stream first */
    bs = cublasSetStream(im->blas, im->stream);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(im->blas, im->blas_ws, im->blas_ws_bytes);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetMathMode(im->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    const int sms = env_int("DX_CUDA_GEMM_SMS", 0, "an SM count (0: all)");
    if (bs == CUBLAS_STATUS_SUCCESS && sms > 0 && sms < im->num_sms) {
        bs = cublasSetSmCountTarget(im->blas, sms);
        im->gemm_sms = sms;
    }
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasLtCreate(&im->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) im->lt = NULL;
    const char *res_env = getenv("DX_CUDA_GEMM_RES");
    im->lt_off = res_env && !strcmp(res_env, "0");
    im->lt_tile = env_int("DX_CUDA_GEMM_TILE", 1, "0 or 1") != 0;
    im->lt_gemm_min = env_int("DX_CUDA_GEMM_LT", 1, "0 or 1") == 0
                          ? INFINITY
                          : 1048576.0 * env_int("DX_CUDA_GEMM_LT_MIN", 1024, "a count of 2^20 multiply-adds");
    if (bs != CUBLAS_STATUS_SUCCESS) {
        dx_fail("cuda backend: device %d: cuBLAS setup: %s", device, cublasGetStatusString(bs));
        cuda_destroy(be);
        return NULL;
    }
    return be;
}
