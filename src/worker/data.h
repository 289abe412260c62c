/* dissect data: memory-mapped token shards and the per-rank batch order.
 *
 * Shard file format (little-endian), written by examples/make_shards.py:
 *   offset 0   char[8]  magic "DXTOKENS"
 *   offset 8   uint32   version (1)
 *   offset 12  uint32   dtype: 2 = uint16 ids, 4 = uint32 ids (bytes per id)
 *   offset 16  uint64   count: number of token ids
 *   offset 24  uint64   reserved (0)
 *   offset 32  ids[count]
 * The file size must be exactly 32 + count * dtype bytes.
 *
 * Sequences: the shard is cut into n_seq = (count - 1) / T windows of T + 1 tokens (window s
 * covers ids [s*T, s*T + T]; inputs are its first T ids, targets its last T). Each epoch visits
 * the windows in a permutation seeded by (seed, epoch). The global batch of step k is the
 * G = micro x accum x DP consecutive windows k*G .. k*G + G - 1 of that order; DP rank r takes
 * the slice [r*micro*accum, (r+1)*micro*accum), micro-batch j of it the j-th `micro` windows.
 * The order therefore depends only on (seed, T, G), so runs with different DP sizes and the
 * same global batch see the same tokens.
 */
#ifndef DX_DATA_H
#define DX_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DX_SHARD_MAGIC "DXTOKENS"
#define DX_SHARD_VERSION 1
#define DX_SHARD_HEADER_BYTES 32

typedef struct {
    char path[1024];
    const uint8_t *map; /* whole file, read-only mapping */
    size_t map_bytes;
    const void *ids;    /* first id */
    int id_bytes;       /* 2 or 4 */
    uint64_t count;     /* ids in the shard */
} dx_shard;

/* Opens and memory-maps a shard; checks magic, version, dtype, that the size matches count, and
 * that every id < vocab_size. Errors name the path and, for a bad id, its index and value. */
int dx_shard_open(dx_shard *s, const char *path, int vocab_size);
void dx_shard_close(dx_shard *s);
/* Token id at index i (i < count). */
uint32_t dx_shard_get(const dx_shard *s, uint64_t i);

typedef struct {
    const dx_shard *shard;
    int T;          /* sequence length */
    uint64_t seed;
    uint64_t n_seq; /* windows per epoch */
    uint64_t *perm; /* current epoch's permutation (n_seq) */
    uint64_t perm_epoch;
} dx_batcher;

/* Prepares the window order for sequence length T. Fails (naming the shard) if the shard holds
 * fewer than one window. */
int dx_batcher_init(dx_batcher *b, const dx_shard *s, int T, uint64_t seed);
void dx_batcher_free(dx_batcher *b);
/* Window index (into the shard) of global sequence number g (g = step * G + position). */
uint64_t dx_batcher_window(dx_batcher *b, uint64_t g);
/* Fills inputs[n*T] and targets[n*T] (int32, host memory) with the n windows starting at global
 * sequence number g0. */
void dx_batcher_fill(dx_batcher *b, uint64_t g0, int n, int32_t *inputs, int32_t *targets);

#endif
