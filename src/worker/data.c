/* dissect data: memory-mapped token shards and the per-rank batch order (contract: data.h). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "data.h"

#include "common/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Stream tag mixed into the epoch so the data order never shares dx_uniform streams with
 * parameter initialisation (which uses small stream numbers) under the same seed. */
#define DX_DATA_STREAM_TAG 0x6461746100000000ull /* "data" */

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd_u64(const uint8_t *p) { return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32; }

uint32_t dx_shard_get(const dx_shard *s, uint64_t i)
{
    const uint8_t *p = (const uint8_t *)s->ids;
    if (s->id_bytes == 2) {
        p += i * 2;
        return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    }
    return rd_u32(p + i * 4);
}

void dx_shard_close(dx_shard *s)
{
    if (!s) return;
    if (s->map) munmap((void *)s->map, s->map_bytes);
    memset(s, 0, sizeof *s);
}

int dx_shard_open(dx_shard *s, const char *path, int vocab_size)
{
    memset(s, 0, sizeof *s);
    if (!path || !*path) return dx_fail("shard: empty path");
    size_t plen = strlen(path);
    if (plen >= sizeof s->path) return dx_fail("shard %.64s...: path longer than %zu bytes", path, sizeof s->path - 1);
    memcpy(s->path, path, plen + 1);
    if (vocab_size <= 0) return dx_fail("shard %s: invalid vocab_size %d", path, vocab_size);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dx_fail("shard %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dx_fail("shard %s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dx_fail("shard %s: not a regular file", path);
    }
    uint64_t actual = (uint64_t)st.st_size;
    if (actual < DX_SHARD_HEADER_BYTES) {
        close(fd);
        return dx_fail("shard %s: truncated: expected at least %d header bytes, got %llu bytes", path,
                       DX_SHARD_HEADER_BYTES, (unsigned long long)actual);
    }
    if (actual > (uint64_t)SIZE_MAX) {
        close(fd);
        return dx_fail("shard %s: %llu bytes do not fit the address space", path, (unsigned long long)actual);
    }
    void *map = mmap(NULL, (size_t)actual, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return dx_fail("shard %s: mmap failed: %s", path, strerror(map_errno));
    s->map = map;
    s->map_bytes = (size_t)actual;

    const uint8_t *h = s->map;
    if (memcmp(h, DX_SHARD_MAGIC, 8) != 0) {
        char got[33];
        int n = 0;
        for (int i = 0; i < 8; i++) {
            unsigned c = h[i];
            n += snprintf(got + n, sizeof got - (size_t)n, (c >= 32 && c < 127 && c != '\\') ? "%c" : "\\x%02x", c);
        }
        dx_shard_close(s);
        return dx_fail("shard %s: bad magic \"%s\" (expected \"%s\"; not a dissect token shard)", path, got,
                       DX_SHARD_MAGIC);
    }
    uint32_t version = rd_u32(h + 8), dtype = rd_u32(h + 12);
    uint64_t count = rd_u64(h + 16);
    if (version != DX_SHARD_VERSION) {
        dx_shard_close(s);
        return dx_fail("shard %s: unsupported version %u (expected %d)", path, version, DX_SHARD_VERSION);
    }
    if (dtype != 2 && dtype != 4) {
        dx_shard_close(s);
        return dx_fail("shard %s: bad dtype %u (expected 2 = uint16 or 4 = uint32 bytes per id)", path, dtype);
    }
    /* expected = 32 + count * dtype, without overflow */
    if (count > (UINT64_MAX - DX_SHARD_HEADER_BYTES) / dtype) {
        dx_shard_close(s);
        return dx_fail("shard %s: header count %llu is impossibly large (file is %llu bytes)", path,
                       (unsigned long long)count, (unsigned long long)actual);
    }
    uint64_t expected = DX_SHARD_HEADER_BYTES + count * dtype;
    if (actual != expected) {
        dx_shard_close(s);
        return dx_fail("shard %s: %s: expected %llu bytes (%d + %llu ids x %u), got %llu bytes", path,
                       actual < expected ? "truncated" : "oversized (trailing bytes)",
                       (unsigned long long)expected, DX_SHARD_HEADER_BYTES, (unsigned long long)count, dtype,
                       (unsigned long long)actual);
    }
    s->ids = h + DX_SHARD_HEADER_BYTES;
    s->id_bytes = (int)dtype;
    s->count = count;

    /* Validate every id once, so that training never indexes an embedding out of range. */
    const uint32_t vocab = (uint32_t)vocab_size;
    if (dtype == 2 && vocab >= 65536) return 0; /* every uint16 is < vocab */
    if (count) posix_madvise((void *)s->map, s->map_bytes, POSIX_MADV_SEQUENTIAL);
    for (uint64_t i = 0; i < count; i++) {
        uint32_t v = dx_shard_get(s, i);
        if (v >= vocab) {
            dx_shard_close(s);
            return dx_fail("shard %s: id at index %llu is %u, not < vocab_size %d", path, (unsigned long long)i, v,
                           vocab_size);
        }
    }
    if (count) posix_madvise((void *)s->map, s->map_bytes, POSIX_MADV_RANDOM);
    return 0;
}

int dx_batcher_init(dx_batcher *b, const dx_shard *s, int T, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    if (T <= 0) return dx_fail("shard %s: invalid sequence length T = %d", s->path, T);
    uint64_t need = (uint64_t)T + 1;
    if (s->count < need)
        return dx_fail("shard %s: too short: holds %llu ids, needs at least T + 1 = %llu for one window of T = %d",
                       s->path, (unsigned long long)s->count, (unsigned long long)need, T);
    uint64_t n = (s->count - 1) / (uint64_t)T;
    if (n > SIZE_MAX / sizeof(uint64_t)) return dx_fail("shard %s: %llu windows do not fit in memory", s->path,
                                                        (unsigned long long)n);
    b->perm = malloc((size_t)n * sizeof(uint64_t));
    if (!b->perm)
        return dx_fail("shard %s: out of memory for the order of %llu windows", s->path, (unsigned long long)n);
    b->shard = s;
    b->T = T;
    b->seed = seed;
    b->n_seq = n;
    b->perm_epoch = UINT64_MAX; /* none built yet */
    return 0;
}

void dx_batcher_free(dx_batcher *b)
{
    if (!b) return;
    free(b->perm);
    memset(b, 0, sizeof *b);
}

/* Fisher-Yates over 0..n_seq-1, step i drawing j uniformly in [0, i] from
 * dx_uniform(seed, DX_DATA_STREAM_TAG ^ epoch, i): a pure function of (seed, epoch, n_seq). */
static void build_perm(dx_batcher *b, uint64_t epoch)
{
    uint64_t n = b->n_seq, *p = b->perm;
    uint64_t stream = DX_DATA_STREAM_TAG ^ epoch;
    for (uint64_t i = 0; i < n; i++) p[i] = i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = (uint64_t)(dx_uniform(b->seed, stream, i) * (double)(i + 1));
        if (j > i) j = i; /* rounding guard */
        uint64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    b->perm_epoch = epoch;
}

uint64_t dx_batcher_window(dx_batcher *b, uint64_t g)
{
    uint64_t epoch = g / b->n_seq;
    if (epoch != b->perm_epoch) build_perm(b, epoch);
    return b->perm[g % b->n_seq];
}

void dx_batcher_fill(dx_batcher *b, uint64_t g0, int n, int32_t *inputs, int32_t *targets)
{
    const dx_shard *s = b->shard;
    const size_t T = (size_t)b->T;
    for (int k = 0; k < n; k++) {
        uint64_t base = dx_batcher_window(b, g0 + (uint64_t)k) * (uint64_t)T;
        int32_t *in = inputs + (size_t)k * T, *tg = targets + (size_t)k * T;
        uint32_t prev = dx_shard_get(s, base);
        for (size_t t = 0; t < T; t++) {
            uint32_t next = dx_shard_get(s, base + t + 1);
            in[t] = (int32_t)prev;
            tg[t] = (int32_t)next;
            prev = next;
        }
    }
}
