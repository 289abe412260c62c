#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char dx_err_buf[1024];

int dx_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dx_err_buf, sizeof dx_err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int dx_fail_prefix(const char *fmt, ...)
{
    char msg[sizeof dx_err_buf];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    size_t used = (size_t)n < sizeof msg - 3 ? (size_t)n : sizeof msg - 3;
    memcpy(msg + used, ": ", 3);
    used += 2;
    size_t rest = strlen(dx_err_buf);
    if (rest > sizeof msg - 1 - used) rest = sizeof msg - 1 - used;
    memcpy(msg + used, dx_err_buf, rest);
    msg[used + rest] = 0;
    memcpy(dx_err_buf, msg, used + rest + 1);
    return -1;
}

const char *dx_last_error(void) { return dx_err_buf; }

uint64_t dx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t dx_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t dx_hash64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double dx_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t h = dx_hash64(dx_hash64(dx_hash64(seed) ^ stream) ^ index);
    /* 53 random bits, shifted off zero so log() is finite */
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double dx_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    double u1 = dx_uniform(seed, stream, 2 * index);
    double u2 = dx_uniform(seed, stream, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

char *dx_path_dir(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(out, cap, ".");
    return out;
}

char *dx_strdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *dx_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dx_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) { free(buf); buf = NULL; }
        else buf = nb;
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!buf || err) {
        free(buf);
        dx_fail("%s: %s", path, !buf ? "out of memory reading it" : err == EISDIR ? "is a directory, not a file"
                                                                              : strerror(err));
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* Does `name` contain `model` as a word of its own (not followed by a digit or letter: "H20"
 * must not match "H200")? */
static int has_model(const char *name, const char *model)
{
    size_t n = strlen(model);
    for (const char *p = strstr(name, model); p; p = strstr(p + 1, model))
        if (!isalnum((unsigned char)p[n])) return 1;
    return 0;
}

double dx_peak_tflops(const char *device_name)
{
    /* a MIG instance ("NVIDIA H100 80GB HBM3 MIG 1g.10gb") has a part of the GPU's peak */
    if (!device_name || strstr(device_name, " MIG ")) return 0;
    /* the PCIe and NVL boards first: their names contain the SXM part's */
    static const struct {
        const char *model, *board;
        double tflops;
    } peaks[] = {
        {"H100", "PCIe", 756}, {"H800", "PCIe", 756}, {"H100", "NVL", 835}, {"H200", "NVL", 835},
        {"H100", NULL, 989},   {"H200", NULL, 989},   {"H800", NULL, 989},  {"H20", NULL, 148},
    };
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
        if (has_model(device_name, peaks[i].model) && (!peaks[i].board || strstr(device_name, peaks[i].board)))
            return peaks[i].tflops;
    return 0;
}

double dx_peak_tflops_sum(const double *peaks, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(peaks[i] > 0) || !isfinite(peaks[i])) return 0;
        sum += peaks[i];
    }
    return sum;
}
