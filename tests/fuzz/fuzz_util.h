/* Helpers shared by the fuzz harnesses (tests/fuzz/fuzz_*.c): a reader that turns the fuzzer's
 * bytes into choices (for the structure-aware generators), the harness's own checks, one
 * scratch directory per process, and silencing of the code under test's stdout / stderr.
 *
 * Every harness defines LLVMFuzzerTestOneInput (and, where it needs set-up such as MPI,
 * LLVMFuzzerInitialize). Built with clang and -Dfuzzing=true they link libFuzzer; with other
 * compilers they link replay.c, a main() that runs the harness over corpus files. One
 * translation unit per harness: everything here is static. */
#ifndef DX_FUZZ_UTIL_H
#define DX_FUZZ_UTIL_H

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property the harness asserts about the code under test: on failure prints the message and
 * aborts, which libFuzzer (and the replay driver) report as a crash with the input saved. */
#define FZ_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) fz_fail_check(__FILE__, __LINE__, #cond, __VA_ARGS__);                        \
    } while (0)

static inline void fz_fail_check(const char *file, int line, const char *cond, const char *fmt, ...)
    DX_PRINTF(4, 5);
static inline void fz_fail_check(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\n%s:%d: harness check failed: %s\n  ", file, line, cond);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n  last dissect error: %s\n", dx_last_error());
    va_end(ap);
    abort();
}

/* ------------------------------------------------------------------------------------------ */
/* Choices from the input bytes. Past the end every read returns 0, so the 0 choice of each
 * decision is the ordinary one: an empty input generates a valid file. */

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_bytes;

static inline uint8_t fz_u8(fz_bytes *b)
{
    if (!b->n) return 0;
    b->n--;
    return *b->p++;
}

static inline uint32_t fz_u32(fz_bytes *b)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)fz_u8(b) << (8 * i);
    return v;
}

static inline uint64_t fz_u64(fz_bytes *b)
{
    uint64_t v = fz_u32(b);
    return v | (uint64_t)fz_u32(b) << 32;
}

/* An integer in [0, n) (n >= 1; one byte for n <= 256). */
static inline unsigned fz_below(fz_bytes *b, unsigned n)
{
    if (n <= 1) return 0;
    unsigned v = n <= 256 ? fz_u8(b) : (unsigned)fz_u32(b);
    return v % n;
}

/* 1 with probability about k / 256 (0 past the end). */
static inline int fz_rare(fz_bytes *b, unsigned k) { return fz_u8(b) >= 256 - k; }

/* An "interesting" 64-bit integer: small values mostly, sometimes a limit or raw bytes. */
static inline int64_t fz_i64_wild(fz_bytes *b)
{
    static const int64_t edge[] = {0, 1, -1, 2, 3, 7, 8, 16, 255, 256, 32767, 32768, 65535, 65536,
                                   INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN, (int64_t)INT32_MIN - 1,
                                   (int64_t)1 << 40, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1};
    unsigned k = fz_u8(b);
    if (k < 128) return (int64_t)k;
    if (k < 224) return edge[k % (sizeof edge / sizeof edge[0])];
    if (k < 240) return -(int64_t)fz_u8(b);
    return (int64_t)fz_u64(b);
}

/* ------------------------------------------------------------------------------------------ */
/* Scratch files: one directory per process (several fuzzer processes may run at once), the
 * same paths reused by every input, removed at exit (kept with DX_FUZZ_KEEP set, to look at the
 * files a reproducer generates). */

static char fz_dir_path[256];

static inline void fz_rm_tree(const char *path);

static inline void fz_cleanup(void)
{
    if (fz_dir_path[0] && !getenv("DX_FUZZ_KEEP")) fz_rm_tree(fz_dir_path);
}

static inline void fz_rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) continue;
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                fz_rm_tree(sub);
            else
                unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

/* The process's scratch directory (created on first use). */
static inline const char *fz_dir(void)
{
    if (!fz_dir_path[0]) {
        snprintf(fz_dir_path, sizeof fz_dir_path, "/tmp/dissect-fuzz-%ld", (long)getpid());
        atexit(fz_cleanup);
    }
    /* (re)created when missing: a tmp cleaner may remove it during a long run */
    if (access(fz_dir_path, W_OK) != 0 && mkdir(fz_dir_path, 0700) != 0 && access(fz_dir_path, W_OK) != 0) {
        perror(fz_dir_path);
        abort();
    }
    return fz_dir_path;
}

/* dir/name into out. */
static inline void fz_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fz_dir(), name);
}

/* Writes data[size] to path (truncating); aborts on an I/O error (not the code under test's). */
static inline void fz_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The code under test prints its report and its error lines; thousands of inputs a second
 * would flood the terminal. fz_quiet swaps the stdio streams (not file descriptors 1 and 2, so
 * sanitizer reports, written to fd 2, still show). */

static FILE *fz_null, *fz_saved_out, *fz_saved_err;

static inline void fz_quiet(int on)
{
    if (!fz_null) {
        fz_null = fopen("/dev/null", "w");
        if (!fz_null) abort();
    }
    if (getenv("DX_FUZZ_VERBOSE")) return;
    if (on) {
        fflush(stdout);
        fflush(stderr);
        fz_saved_out = stdout;
        fz_saved_err = stderr;
        stdout = fz_null;
        stderr = fz_null;
    } else {
        fflush(fz_null);
        stdout = fz_saved_out;
        stderr = fz_saved_err;
    }
}

#endif
