/* dissect CPU backends: "cpu" (f32) and "cpu64" (f64). Memory is plain host memory; the math
 * ops live in cpu_ops.c (built once per real type). */
#include "cpu_ops.h"
#include "nf4.h"
#include "common/common.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS extension; weak so that another CBLAS still links (then it is simply not called). */
void openblas_set_num_threads(int) __attribute__((weak));

size_t dx_dtype_size(dx_dtype dt)
{
    switch (dt) {
    case DX_F32: return 4;
    case DX_F64: return 8;
    case DX_BF16: return 2;
    }
    return 0;
}

const char *dx_dtype_name(dx_dtype dt)
{
    switch (dt) {
    case DX_F32: return "f32";
    case DX_F64: return "f64";
    case DX_BF16: return "bf16";
    }
    return "?";
}

const char *dx_mem_cat_name(dx_mem_cat c)
{
    switch (c) {
    case DX_MEM_PARAMS: return "params";
    case DX_MEM_GRADS: return "grads";
    case DX_MEM_OPTIM: return "optim";
    case DX_MEM_ACTIVATIONS: return "activations";
    case DX_MEM_OTHER: return "other";
    case DX_MEM_NCAT: break;
    }
    return "?";
}

void dx_mem_account(dx_mem_stats *s, dx_mem_cat cat, long long delta)
{
    if ((int)cat < 0 || cat >= DX_MEM_NCAT) cat = DX_MEM_OTHER;
    s->current[cat] = (size_t)((long long)s->current[cat] + delta);
    s->current_total = (size_t)((long long)s->current_total + delta);
    if (s->current[cat] > s->peak[cat]) s->peak[cat] = s->current[cat];
    if (s->current_total > s->peak_total) s->peak_total = s->current_total;
}

/* ---- memory: a 64-byte header before each block records its size and category ---- */

#define DX_ALIGN 64

typedef struct {
    size_t bytes;
    int cat;
} cpu_hdr;

static void *cpu_alloc(dx_backend *be, size_t bytes, dx_mem_cat cat)
{
    if ((int)cat < 0 || cat >= DX_MEM_NCAT) cat = DX_MEM_OTHER;
    size_t total = DX_ALIGN + ((bytes + DX_ALIGN - 1) / DX_ALIGN) * DX_ALIGN;
    if (bytes > SIZE_MAX - 2 * DX_ALIGN) total = 0;
    unsigned char *base = total ? aligned_alloc(DX_ALIGN, total) : NULL;
    if (!base) {
        dx_fail("%s backend: cannot allocate %zu bytes for %s", be->name, bytes,
                dx_mem_cat_name(cat));
        return NULL;
    }
    cpu_hdr *h = (cpu_hdr *)base;
    h->bytes = bytes;
    h->cat = (int)cat;
    dx_mem_account(&be->mem, cat, (long long)bytes);
    return base + DX_ALIGN;
}

static void cpu_free(dx_backend *be, void *p)
{
    if (!p) return;
    unsigned char *base = (unsigned char *)p - DX_ALIGN;
    cpu_hdr *h = (cpu_hdr *)base;
    dx_mem_account(&be->mem, (dx_mem_cat)h->cat, -(long long)h->bytes);
    free(base);
}

static void cpu_zero(dx_backend *be, void *p, size_t bytes)
{
    (void)be;
    if (bytes) memset(p, 0, bytes);
}

static void cpu_copy(dx_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
}

static int cpu_upload(dx_backend *be, void *dst, const void *host_src, size_t bytes)
{
    (void)be;
    if (bytes) memcpy(dst, host_src, bytes);
    return 0;
}

static int cpu_download(dx_backend *be, void *host_dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes) memcpy(host_dst, src, bytes);
    return 0;
}

/* Host staging and "asynchronous" copies: host memory is backend memory, so each copy is done
 * before the call returns and every ticket is complete. */
static void *cpu_host_alloc(dx_backend *be, size_t bytes)
{
    size_t total = ((bytes ? bytes : 1) + DX_ALIGN - 1) / DX_ALIGN * DX_ALIGN;
    void *p = bytes > SIZE_MAX - DX_ALIGN ? NULL : aligned_alloc(DX_ALIGN, total);
    if (!p) dx_fail("%s backend: cannot allocate %zu bytes of host staging memory", be->name, bytes);
    return p;
}

static void cpu_host_free(dx_backend *be, void *p)
{
    (void)be;
    free(p);
}

static int cpu_fence(dx_backend *be)
{
    (void)be;
    return 0;
}

static int cpu_download_async(dx_backend *be, void *host_dst, const void *src, size_t bytes, int fence)
{
    (void)fence;
    return cpu_download(be, host_dst, src, bytes);
}

static int cpu_upload_async(dx_backend *be, void *dst, const void *host_src, size_t bytes)
{
    return cpu_upload(be, dst, host_src, bytes);
}

static int cpu_copy_join(dx_backend *be, int ticket)
{
    (void)be;
    (void)ticket;
    return 0;
}

static int cpu_copy_wait(dx_backend *be, int ticket)
{
    (void)be;
    (void)ticket;
    return 0;
}

static void *cpu_copy_stream(dx_backend *be, int dir)
{
    (void)be;
    (void)dir;
    return NULL;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void cpu_nf4_dequantize(dx_backend *be, void *out, const uint8_t *idx, const uint8_t *absmax8,
                               const float *scale, float offset, size_t n)
{
    const dx_nf4_tensor q = {n, (uint8_t *)idx, (uint8_t *)absmax8, (float *)scale, offset};
    const size_t nb = dx_nf4_blocks(n);
#pragma omp parallel for num_threads(be->nthreads) schedule(static) if (n >= ((size_t)1 << 16))
    for (size_t b = 0; b < nb; b++) {
        float v[DX_NF4_BLOCK];
        const size_t i0 = b * DX_NF4_BLOCK, cnt = n - i0 < DX_NF4_BLOCK ? n - i0 : DX_NF4_BLOCK;
        dx_nf4_dequantize(&q, i0, cnt, v);
        for (size_t j = 0; j < cnt; j++) {
            if (be->act == DX_F64) ((double *)out)[i0 + j] = v[j];
            else ((float *)out)[i0 + j] = v[j];
        }
    }
}

static int cpu_upload_f32(dx_backend *be, void *dst, dx_dtype dt, const float *src, size_t n)
{
    switch (dt) {
    case DX_F32:
        if (n) memcpy(dst, src, n * sizeof(float));
        return 0;
    case DX_F64:
        for (size_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
        return 0;
    case DX_BF16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_bf16(src[i]);
        return 0;
    }
    return dx_fail("%s backend: upload_f32: unknown dtype %d", be->name, (int)dt);
}

static int cpu_download_f32(dx_backend *be, float *dst, const void *src, dx_dtype dt, size_t n)
{
    switch (dt) {
    case DX_F32:
        if (n) memcpy(dst, src, n * sizeof(float));
        return 0;
    case DX_F64:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const double *)src)[i];
        return 0;
    case DX_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(((const uint16_t *)src)[i]);
        return 0;
    }
    return dx_fail("%s backend: download_f32: unknown dtype %d", be->name, (int)dt);
}

static void cpu_sync(dx_backend *be) { (void)be; }

static void cpu_destroy(dx_backend *be) { free(be); }

/* /proc/cpuinfo's first "model name" (x86; "cpu" where there is none, as on most ARM kernels). */
static void cpu_model_name(char *buf, size_t n)
{
    snprintf(buf, n, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        size_t len = strcspn(colon, "\n");
        if (len) snprintf(buf, n, "%.*s", (int)len, colon);
        break;
    }
    fclose(f);
}

static dx_backend *cpu_create(int nthreads, int f64)
{
    const char *name = f64 ? "cpu64" : "cpu";
    if (nthreads < 1) {
        dx_fail("%s backend: nthreads must be >= 1 (got %d)", name, nthreads);
        return NULL;
    }
    dx_backend *be = calloc(1, sizeof *be);
    if (!be) {
        dx_fail("%s backend: out of memory", name);
        return NULL;
    }
    be->name = name;
    be->act = be->acc = f64 ? DX_F64 : DX_F32;
    be->nthreads = nthreads;
    be->impl = NULL;
    cpu_model_name(be->device_name, sizeof be->device_name);
    be->peak_tflops = 0; /* no table of CPU peaks: the report asks for --peak-tflops */
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->zero = cpu_zero;
    be->copy = cpu_copy;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->upload_f32 = cpu_upload_f32;
    be->nf4_dequantize = cpu_nf4_dequantize;
    be->download_f32 = cpu_download_f32;
    be->sync = cpu_sync;
    be->host_alloc = cpu_host_alloc;
    be->host_free = cpu_host_free;
    be->download_async = cpu_download_async;
    be->upload_async = cpu_upload_async;
    be->copy_wait = cpu_copy_wait;
    be->upload_async_detached = cpu_upload_async; /* synchronous: nothing to join */
    be->copy_join = cpu_copy_join;
    be->fence = cpu_fence;
    be->copy_stream = cpu_copy_stream;
    be->destroy = cpu_destroy;
    if (f64) DX_CPU_OPS_FILL(be, dx_cpu_f64_);
    else DX_CPU_OPS_FILL(be, dx_cpu_f32_);
    omp_set_num_threads(nthreads);
    if (openblas_set_num_threads) openblas_set_num_threads(nthreads);
    return be;
}

dx_backend *dx_backend_cpu_create(int nthreads) { return cpu_create(nthreads, 0); }

dx_backend *dx_backend_cpu64_create(int nthreads) { return cpu_create(nthreads, 1); }

int dx_read_acc_scalar(dx_backend *be, const void *p, double *out)
{
    if (be->acc == DX_F64) return be->download(be, out, p, sizeof *out);
    float f;
    if (be->download_f32(be, &f, p, be->acc, 1)) return -1;
    *out = f;
    return 0;
}
