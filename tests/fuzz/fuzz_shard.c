/* Fuzz harness: the token shard reader and the batch order (src/worker/data.c: dx_shard_open,
 * dx_shard_get, dx_batcher_init, dx_batcher_window, dx_batcher_fill).
 *
 * Input: 5 bytes of parameters, then the shard file's bytes (the header and ids of data.h):
 *   bytes 0..3  vocab_size (int32, little-endian; values <= 0 are passed as they are),
 *   byte 4      sequence length T - 1 (T = 1..256),
 *   bytes 5..   the file (written to the scratch directory and opened by path).
 * Inputs shorter than 5 bytes are the whole file, with vocab_size 64 and T = 4.
 * Checked: a rejected shard names its path; an accepted one has the size its header says, every
 * id < vocab_size; the batcher's windows of the first two epochs are permutations of the
 * shard's windows and the filled inputs / targets are the shard's ids, shifted by one. */
#include "fuzz_util.h"

#include "worker/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int vocab = 64, T = 4;
    if (size >= 5) {
        vocab = (int)((uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                      (uint32_t)data[3] << 24);
        T = 1 + data[4];
        data += 5;
        size -= 5;
    }
    char path[300];
    fz_path(path, sizeof path, "shard.bin");
    fz_write_file(path, data, size);

    dx_shard s;
    if (dx_shard_open(&s, path, vocab) != 0) {
        FZ_CHECK(strstr(dx_last_error(), path) != NULL, "error does not name the shard: %s", dx_last_error());
        FZ_CHECK(s.map == NULL, "a failed open left the shard mapped");
        return 0;
    }
    FZ_CHECK(vocab > 0, "opened with vocab_size %d", vocab);
    FZ_CHECK(s.id_bytes == 2 || s.id_bytes == 4, "id_bytes %d", s.id_bytes);
    FZ_CHECK(s.map_bytes == size && size == DX_SHARD_HEADER_BYTES + s.count * (uint64_t)s.id_bytes,
             "accepted %zu bytes for %llu ids of %d bytes", size, (unsigned long long)s.count, s.id_bytes);
    for (uint64_t i = 0; i < s.count; i++)
        FZ_CHECK(dx_shard_get(&s, i) < (uint32_t)vocab, "id %llu = %u >= vocab %d", (unsigned long long)i,
                 dx_shard_get(&s, i), vocab);

    dx_batcher b;
    uint64_t seed = size;
    if (dx_batcher_init(&b, &s, T, seed) != 0) {
        FZ_CHECK(s.count < (uint64_t)T + 1, "batcher refused %llu ids for T = %d: %s",
                 (unsigned long long)s.count, T, dx_last_error());
        FZ_CHECK(strstr(dx_last_error(), path) != NULL, "error does not name the shard: %s", dx_last_error());
    } else {
        const uint64_t n = b.n_seq;
        FZ_CHECK(n == (s.count - 1) / (uint64_t)T && n >= 1, "%llu windows of %llu ids, T = %d",
                 (unsigned long long)n, (unsigned long long)s.count, T);
        /* two epochs: each a permutation of 0..n-1 */
        unsigned char *seen = calloc(n, 1);
        FZ_CHECK(seen != NULL, "out of memory for %llu windows", (unsigned long long)n);
        for (uint64_t epoch = 0; epoch < 2; epoch++) {
            memset(seen, 0, n);
            for (uint64_t k = 0; k < n; k++) {
                uint64_t w = dx_batcher_window(&b, epoch * n + k);
                FZ_CHECK(w < n && !seen[w], "epoch %llu position %llu: window %llu (of %llu) %s",
                         (unsigned long long)epoch, (unsigned long long)k, (unsigned long long)w,
                         (unsigned long long)n, w < n ? "repeated" : "out of range");
                seen[w] = 1;
            }
        }
        free(seen);
        /* a batch across the epoch boundary */
        int nb = n < 3 ? (int)n + 1 : 3;
        int32_t *in = malloc((size_t)nb * (size_t)T * sizeof *in), *tg = malloc((size_t)nb * (size_t)T * sizeof *tg);
        FZ_CHECK(in && tg, "out of memory");
        uint64_t g0 = n - 1;
        dx_batcher_fill(&b, g0, nb, in, tg);
        for (int k = 0; k < nb; k++) {
            uint64_t base = dx_batcher_window(&b, g0 + (uint64_t)k) * (uint64_t)T;
            for (int t = 0; t < T; t++) {
                size_t j = (size_t)k * (size_t)T + (size_t)t;
                FZ_CHECK(in[j] == (int32_t)dx_shard_get(&s, base + (uint64_t)t) &&
                             tg[j] == (int32_t)dx_shard_get(&s, base + (uint64_t)t + 1),
                         "window %d token %d: input %d target %d", k, t, in[j], tg[j]);
                FZ_CHECK(in[j] >= 0 && in[j] < vocab && tg[j] >= 0 && tg[j] < vocab, "id out of the vocabulary");
            }
        }
        free(in);
        free(tg);
        dx_batcher_free(&b);
    }
    dx_shard_close(&s);
    return 0;
}
