/* Tests for src/worker/data.c (token shards and the batch order). Standalone: prints one line
 * per check and ends with "N passed, M failed"; exits non-zero if any check failed.
 *
 * Usage: test_data [SHARD COUNT [VOCAB [ID...]]]
 *   With SHARD, also checks that this externally written shard (e.g. by examples/make_shards.py)
 *   opens with vocab VOCAB (default 2^31-1), holds exactly COUNT ids, and starts with ID... .
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "worker/data.h"

#include "common/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int n_pass, n_fail;

static int check(int ok, const char *fmt, ...) DX_PRINTF(2, 3);
static int check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) n_pass++;
    else n_fail++;
    fflush(stdout);
    return ok;
}

/* ---- temp dir and shard writers ---- */

static char tmpdir[512];
static char created[64][600];
static int n_created;

static const char *tpath(const char *name)
{
    static char buf[8][600];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static void put_u32(FILE *f, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fwrite(b, 1, 4, f);
}

static void put_u64(FILE *f, uint64_t v)
{
    put_u32(f, (uint32_t)v);
    put_u32(f, (uint32_t)(v >> 32));
}

/* Writes a shard with explicit header fields: header says `hdr_count` ids, but `n_ids` ids of
 * `dtype` bytes (dtype 3 is written as 4 bytes) are written, then `extra` zero bytes. */
static const char *write_raw(const char *name, const char *magic, uint32_t version, uint32_t dtype,
                             uint64_t hdr_count, const uint32_t *ids, uint64_t n_ids, int extra)
{
    const char *path = tpath(name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (n_created < 64) snprintf(created[n_created++], sizeof created[0], "%s", path);
    fwrite(magic, 1, 8, f);
    put_u32(f, version);
    put_u32(f, dtype);
    put_u64(f, hdr_count);
    put_u64(f, 0);
    for (uint64_t i = 0; i < n_ids; i++) {
        if (dtype == 2) {
            uint8_t b[2] = {(uint8_t)ids[i], (uint8_t)(ids[i] >> 8)};
            fwrite(b, 1, 2, f);
        } else {
            put_u32(f, ids[i]);
        }
    }
    for (int i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
    return path;
}

static const char *write_good(const char *name, uint32_t dtype, const uint32_t *ids, uint64_t n)
{
    return write_raw(name, DX_SHARD_MAGIC, DX_SHARD_VERSION, dtype, n, ids, n, 0);
}

/* Raw header-only file of `bytes` bytes (shorter than a header). */
static const char *write_bytes(const char *name, const char *data, size_t bytes)
{
    const char *path = tpath(name);
    FILE *f = fopen(path, "wb");
    if (!f) exit(2);
    if (n_created < 64) snprintf(created[n_created++], sizeof created[0], "%s", path);
    fwrite(data, 1, bytes, f);
    fclose(f);
    return path;
}

/* Checks that opening fails with a message naming the path and containing each of the given
 * substrings (NULL-terminated). */
static void expect_open_fail(const char *what, const char *path, int vocab, ...)
{
    dx_shard s;
    int rc = dx_shard_open(&s, path, vocab);
    const char *msg = dx_last_error();
    int ok = rc == -1 && strstr(msg, path) != NULL;
    va_list ap;
    va_start(ap, vocab);
    for (const char *sub; (sub = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, sub)) ok = 0;
    va_end(ap);
    check(ok, "%s fails with a message naming the path and the problem: rc=%d \"%s\"", what, rc, msg);
    if (rc == 0) dx_shard_close(&s);
    else check(s.map == NULL, "%s leaves no mapping behind", what);
}

/* ---- shard tests ---- */

static void test_good_shards(void)
{
    enum { N16 = 1000, N32 = 5000 };
    static uint32_t a[N16], b[N32];
    for (uint32_t i = 0; i < N16; i++) a[i] = (i * 7919u + 13u) % 1000u;
    a[0] = 0;
    a[N16 - 1] = 999; /* vocab - 1 is allowed */
    const char *p16 = write_good("good16.bin", 2, a, N16);
    dx_shard s;
    int rc = dx_shard_open(&s, p16, 1000);
    if (check(rc == 0, "uint16 shard opens (%s)", rc ? dx_last_error() : "ok")) {
        check(s.count == N16 && s.id_bytes == 2, "uint16 shard: count %llu (want %d), id_bytes %d (want 2)",
              (unsigned long long)s.count, N16, s.id_bytes);
        check(strcmp(s.path, p16) == 0, "uint16 shard: path recorded");
        int bad = -1;
        for (uint32_t i = 0; i < N16 && bad < 0; i++)
            if (dx_shard_get(&s, i) != a[i]) bad = (int)i;
        check(bad < 0, "uint16 shard: all %d ids read back exactly (first mismatch %d)", N16, bad);
        dx_shard_close(&s);
        check(s.map == NULL && s.count == 0, "dx_shard_close clears the shard");
    }

    for (uint32_t i = 0; i < N32; i++) b[i] = (uint32_t)(((uint64_t)i * 2654435761u) % 100003u);
    b[1] = 100002;
    b[2] = 65536; /* needs more than 16 bits */
    const char *p32 = write_good("good32.bin", 4, b, N32);
    rc = dx_shard_open(&s, p32, 100003);
    if (check(rc == 0, "uint32 shard opens (%s)", rc ? dx_last_error() : "ok")) {
        check(s.count == N32 && s.id_bytes == 4, "uint32 shard: count %llu (want %d), id_bytes %d (want 4)",
              (unsigned long long)s.count, N32, s.id_bytes);
        int bad = -1;
        for (uint32_t i = 0; i < N32 && bad < 0; i++)
            if (dx_shard_get(&s, i) != b[i]) bad = (int)i;
        check(bad < 0, "uint32 shard: all %d ids read back exactly (first mismatch %d)", N32, bad);
        dx_shard_close(&s);
    }

    /* an empty shard is well-formed (only the batcher needs a window) */
    const char *pe = write_good("empty.bin", 2, NULL, 0);
    rc = dx_shard_open(&s, pe, 10);
    check(rc == 0 && s.count == 0, "empty shard (header only) opens with count 0 (%s)", rc ? dx_last_error() : "ok");
    if (rc == 0) {
        dx_batcher bt;
        rc = dx_batcher_init(&bt, &s, 4, 1);
        const char *m = dx_last_error();
        check(rc == -1 && strstr(m, pe) && strstr(m, "5"), "batcher on empty shard fails naming path and needed size: \"%s\"", m);
        if (rc == 0) dx_batcher_free(&bt);
        dx_shard_close(&s);
    }
}

static void test_bad_shards(void)
{
    static uint32_t ids[200];
    for (uint32_t i = 0; i < 200; i++) ids[i] = i % 300;
    char msg[64];

    expect_open_fail("wrong magic", write_raw("magic.bin", "DXTOKENX", 1, 2, 100, ids, 100, 0), 300, "magic", NULL);
    expect_open_fail("wrong version", write_raw("version.bin", DX_SHARD_MAGIC, 2, 2, 100, ids, 100, 0), 300,
                     "version", "2", NULL);
    expect_open_fail("bad dtype 3", write_raw("dtype3.bin", DX_SHARD_MAGIC, 1, 3, 100, ids, 100, 0), 300, "dtype",
                     "3", NULL);
    expect_open_fail("bad dtype 8", write_raw("dtype8.bin", DX_SHARD_MAGIC, 1, 8, 50, ids, 100, 0), 300, "dtype",
                     "8", NULL);
    /* header says 100 uint16 ids = 232 bytes, file has 99 = 230 bytes */
    expect_open_fail("truncated file", write_raw("trunc.bin", DX_SHARD_MAGIC, 1, 2, 100, ids, 99, 0), 300,
                     "truncated", "expected 232", "230", NULL);
    expect_open_fail("truncated uint32 file (odd bytes)",
                     write_raw("trunc32.bin", DX_SHARD_MAGIC, 1, 4, 100, ids, 99, 3), 300, "truncated",
                     "expected 432", "431", NULL);
    expect_open_fail("oversized file", write_raw("over.bin", DX_SHARD_MAGIC, 1, 2, 100, ids, 100, 1), 300,
                     "expected 232", "233", NULL);
    expect_open_fail("file shorter than the header", write_bytes("short.bin", "DXTOKENS\1\0\0\0", 12), 300,
                     "truncated", NULL);
    expect_open_fail("empty file", write_bytes("zero.bin", "", 0), 300, "truncated", NULL);
    expect_open_fail("huge count in header", write_raw("huge.bin", DX_SHARD_MAGIC, 1, 4, UINT64_MAX / 2, ids, 10, 0),
                     300, NULL);

    ids[137] = 777;
    expect_open_fail("id >= vocab (uint16)", write_good("badid16.bin", 2, ids, 200), 300, "777", "137", NULL);
    ids[137] = 300; /* == vocab: also out of range */
    expect_open_fail("id == vocab (uint16)", write_good("badid16b.bin", 2, ids, 200), 300, "300", "137", NULL);
    ids[137] = 137;
    ids[199] = 4000000000u;
    expect_open_fail("id >= vocab (uint32, last id)", write_good("badid32.bin", 4, ids, 200), 300, "4000000000",
                     "199", NULL);
    ids[199] = 199;

    const char *missing = tpath("no_such_shard.bin");
    snprintf(msg, sizeof msg, "%s", strerror(ENOENT));
    expect_open_fail("missing file", missing, 300, msg, NULL);
    expect_open_fail("a directory", tmpdir, 300, NULL);
    expect_open_fail("vocab_size 0", write_good("vocab0.bin", 2, ids, 200), 0, "vocab", NULL);
}

/* ---- batcher tests ---- */

static int too_short_case(const char *name, uint64_t n_ids, int T, int want_ok)
{
    static uint32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (uint32_t)i;
    const char *p = write_good(name, 2, ids, n_ids);
    dx_shard s;
    if (dx_shard_open(&s, p, 100) != 0) return check(0, "%s: open failed: %s", name, dx_last_error());
    dx_batcher b;
    int rc = dx_batcher_init(&b, &s, T, 7);
    char need[32];
    snprintf(need, sizeof need, "%d", T + 1);
    const char *m = dx_last_error();
    int ok;
    if (want_ok) {
        ok = check(rc == 0 && b.n_seq == (n_ids - 1) / (uint64_t)T,
                   "%llu ids, T=%d: batcher has %llu window(s)", (unsigned long long)n_ids, T,
                   (unsigned long long)(rc == 0 ? b.n_seq : 0));
    } else {
        ok = check(rc == -1 && strstr(m, p) && strstr(m, need),
                   "%llu ids, T=%d: batcher fails naming the path and needed size %s: \"%s\"",
                   (unsigned long long)n_ids, T, need, m);
    }
    if (rc == 0) dx_batcher_free(&b);
    dx_shard_close(&s);
    return ok;
}

/* Fills n windows from g0 with a fresh batcher (as a separate rank process would). */
static void fill_fresh(const dx_shard *s, int T, uint64_t seed, uint64_t g0, int n, int32_t *in, int32_t *tg)
{
    dx_batcher b;
    if (dx_batcher_init(&b, s, T, seed) != 0) {
        fprintf(stderr, "batcher init: %s\n", dx_last_error());
        exit(2);
    }
    dx_batcher_fill(&b, g0, n, in, tg);
    dx_batcher_free(&b);
}

static void test_batcher(void)
{
    too_short_case("short8.bin", 8, 8, 0);
    too_short_case("short9.bin", 9, 8, 1);
    too_short_case("short1.bin", 1, 1, 0);
    too_short_case("short2.bin", 2, 1, 1);
    too_short_case("short17.bin", 17, 8, 1); /* (17-1)/8 = 2 windows, last id used only as a target */

    enum { N = 1001, T = 16, V = 5000 };
    static uint32_t ids[N];
    for (uint32_t i = 0; i < N; i++) ids[i] = (i * 31u + 7u) % V;
    const char *p = write_good("batch.bin", 2, ids, N);
    dx_shard s;
    if (!check(dx_shard_open(&s, p, V) == 0, "batcher shard opens")) return;
    dx_batcher b, b2, b3;
    if (!check(dx_batcher_init(&b, &s, T, 1234) == 0, "batcher init")) return;
    const uint64_t n = b.n_seq;
    check(n == (N - 1) / T, "n_seq = (count - 1) / T = %llu", (unsigned long long)n);
    dx_batcher_init(&b2, &s, T, 1234);
    dx_batcher_init(&b3, &s, T, 1235);

    /* windows are shifted slices of the shard */
    int32_t in[T], tg[T];
    int shift_ok = 1;
    for (uint64_t g = 0; g < 3 * n; g++) {
        uint64_t w = dx_batcher_window(&b, g);
        dx_batcher_fill(&b, g, 1, in, tg);
        if (w >= n) shift_ok = 0;
        for (int t = 0; t < T && shift_ok; t++)
            if (in[t] != (int32_t)ids[w * T + (uint64_t)t] || tg[t] != (int32_t)ids[w * T + (uint64_t)t + 1])
                shift_ok = 0;
    }
    check(shift_ok, "inputs = shard[w*T .. w*T+T-1], targets = shard[w*T+1 .. w*T+T] for 3 epochs");

    /* each window exactly once per epoch; epochs differ; not the identity order */
    uint64_t *e0 = calloc(n, sizeof *e0), *e1 = calloc(n, sizeof *e1);
    char *seen = calloc(n, 1);
    for (int epoch = 0; epoch < 4; epoch++) {
        memset(seen, 0, n);
        int once = 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t w = dx_batcher_window(&b, (uint64_t)epoch * n + i);
            if (w >= n || seen[w]) once = 0;
            else seen[w] = 1;
            if (epoch == 0) e0[i] = w;
            if (epoch == 1) e1[i] = w;
        }
        check(once, "epoch %d visits each of the %llu windows exactly once", epoch, (unsigned long long)n);
    }
    int diff01 = 0, identity = 1;
    for (uint64_t i = 0; i < n; i++) {
        diff01 += e0[i] != e1[i];
        if (e0[i] != i) identity = 0;
    }
    check(diff01 > 0, "epoch 0 and epoch 1 orders differ (%d positions)", diff01);
    check(!identity, "epoch 0 order is shuffled, not the identity");

    /* determinism: same seed -> same order (also after jumping back across epochs) */
    int same = 1, differ = 0;
    uint64_t *fwd = calloc(3 * n, sizeof *fwd);
    for (uint64_t g = 0; g < 3 * n; g++) fwd[g] = dx_batcher_window(&b, g);
    for (uint64_t k = 0; k < 3 * n; k++) {
        uint64_t g = (k * 7919) % (3 * n); /* 7919 is prime and does not divide 3n: a permutation */
        if (dx_batcher_window(&b2, g) != fwd[g]) same = 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (fwd[i] != e0[i]) same = 0;
    free(fwd);
    for (uint64_t i = 0; i < n; i++) differ += dx_batcher_window(&b3, i) != e0[i];
    check(same, "same seed -> same window order (random access over 3 epochs)");
    check(differ > 0, "different seed -> different order (%d of %llu positions differ)", differ, (unsigned long long)n);

    /* Fisher-Yates reaches every position: over many seeds, every window appears first and last */
    memset(seen, 0, n);
    char *seen_last = calloc(n, 1);
    for (uint64_t seed = 0; seed < 3000; seed++) {
        dx_batcher bs;
        dx_batcher_init(&bs, &s, T, seed);
        seen[dx_batcher_window(&bs, 0)] = 1;
        seen_last[dx_batcher_window(&bs, n - 1)] = 1;
        dx_batcher_free(&bs);
    }
    int all_first = 1, all_last = 1;
    for (uint64_t i = 0; i < n; i++) {
        all_first &= seen[i];
        all_last &= seen_last[i];
    }
    check(all_first && all_last, "over 3000 seeds every window appears in the first and last position");
    free(seen_last);

    /* DP slicing: the global batch of step k split over ranks equals the single-rank batch */
    const int micro = 2, accum = 3;
    const int G = micro * accum * 4; /* DP = 4 */
    int32_t *fin = malloc(sizeof(int32_t) * (size_t)G * T), *ftg = malloc(sizeof(int32_t) * (size_t)G * T);
    int32_t *hin = malloc(sizeof(int32_t) * (size_t)G * T), *htg = malloc(sizeof(int32_t) * (size_t)G * T);
    uint64_t steps[3] = {0, n / (uint64_t)G, n / (uint64_t)G + 1}; /* 2nd crosses into epoch 1 */
    for (int si = 0; si < 3; si++) {
        uint64_t g0 = steps[si] * (uint64_t)G;
        fill_fresh(&s, T, 99, g0, G, fin, ftg); /* DP = 1 */
        /* two halves */
        fill_fresh(&s, T, 99, g0, G / 2, hin, htg);
        fill_fresh(&s, T, 99, g0 + (uint64_t)G / 2, G / 2, hin + (size_t)(G / 2) * T, htg + (size_t)(G / 2) * T);
        int halves = !memcmp(fin, hin, sizeof(int32_t) * (size_t)G * T) && !memcmp(ftg, htg, sizeof(int32_t) * (size_t)G * T);
        check(halves, "step %llu (g0=%llu%s): fill(g0, G) == fill(g0, G/2) ++ fill(g0+G/2, G/2)",
              (unsigned long long)steps[si], (unsigned long long)g0,
              g0 / n != (g0 + (uint64_t)G - 1) / n ? ", crosses epoch" : "");
        /* DP = 4 ranks, each `accum` micro-batches of `micro` windows */
        memset(hin, 0xff, sizeof(int32_t) * (size_t)G * T);
        for (int r = 0; r < 4; r++) {
            dx_batcher br;
            dx_batcher_init(&br, &s, T, 99);
            for (int j = 0; j < accum; j++) {
                uint64_t off = (uint64_t)r * micro * accum + (uint64_t)j * micro;
                dx_batcher_fill(&br, g0 + off, micro, hin + off * T, htg + off * T);
            }
            dx_batcher_free(&br);
        }
        int ranks = !memcmp(fin, hin, sizeof(int32_t) * (size_t)G * T) && !memcmp(ftg, htg, sizeof(int32_t) * (size_t)G * T);
        check(ranks, "step %llu: DP=4 x accum=%d x micro=%d slices reassemble the DP=1 global batch",
              (unsigned long long)steps[si], accum, micro);
    }
    free(fin);
    free(ftg);
    free(hin);
    free(htg);
    free(e0);
    free(e1);
    free(seen);
    dx_batcher_free(&b);
    dx_batcher_free(&b2);
    dx_batcher_free(&b3);
    dx_shard_close(&s);
}

/* ---- a shard written by another tool ---- */

static void test_external(int argc, char **argv)
{
    const char *path = argv[1];
    unsigned long long want = strtoull(argv[2], NULL, 10);
    long vocab = argc > 3 ? strtol(argv[3], NULL, 10) : 2147483647L;
    dx_shard s;
    int rc = dx_shard_open(&s, path, (int)vocab);
    if (!check(rc == 0, "external shard %s opens with vocab %ld (%s)", path, vocab, rc ? dx_last_error() : "ok")) return;
    check(s.count == want, "external shard holds %llu ids (want %llu)", (unsigned long long)s.count, want);
    if (argc > 4) {
        int n = argc - 4, ok = (uint64_t)n <= s.count;
        for (int i = 0; i < n && ok; i++)
            if (dx_shard_get(&s, (uint64_t)i) != (uint32_t)strtoul(argv[4 + i], NULL, 10)) ok = 0;
        check(ok, "external shard starts with the %d expected ids", n);
    }
    dx_shard_close(&s);
}

int main(int argc, char **argv)
{
    if (argc == 2 || (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: %s [SHARD COUNT [VOCAB [ID...]]]\n", argv[0]);
        return 2;
    }
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/dx_test_data_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", tmpdir, strerror(errno));
        return 2;
    }

    test_good_shards();
    test_bad_shards();
    test_batcher();
    if (argc >= 3) test_external(argc, argv);

    for (int i = 0; i < n_created; i++) unlink(created[i]);
    rmdir(tmpdir);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail > 0;
}
