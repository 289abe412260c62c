/* The launch order of the Hopper attention backward (attention_mma.cu, att_bwd_wg): which
 * (batch x kv head pair, key tile) a block takes when the blocks are launched in chunks of C
 * pairs, and the choice of C; and the order in which the forward's blocks (att_fwd_wg) take
 * their work tiles. Plain C for the host and the device, so that tests/test_att_order.c checks
 * them on a CPU. Sources of the arguments: benchmarks/NOTES.md item 22 (the backward's dq tiles
 * stay in L2 when fewer pairs run at once) and item 32 (the forward's K and V rows stay in L2
 * when the blocks running at once share heads). */
#ifndef DX_ATT_ORDER_H
#define DX_ATT_ORDER_H

#include <stdlib.h>

#ifdef __CUDACC__
#define DX_ATT_HD __host__ __device__
#else
#define DX_ATT_HD
#endif

/* Block lin (0 <= lin < nbh nkt, in launch order) of a grid of nbh (b, kv head) pairs by nkt
 * 128-key tiles, launched in chunks of C >= 1 pairs: chunk after chunk; within a chunk key tile
 * 0 (the longest: every query sees it) of each of its pairs, then key tile 1 of each, ...; the
 * last chunk holds nbh - C floor((nbh - 1) / C) pairs. C >= nbh is the plain order (pair
 * fastest, key tile 0 first). Sets *bk (the pair, b Hkv + kv head) and *kt (the key tile). A
 * bijection of [0, nbh nkt) onto [0, nbh) x [0, nkt) (tests/test_att_order.c). */
static inline DX_ATT_HD void dx_att_chunk_map(int lin, int nbh, int nkt, int C, int *bk, int *kt)
{
    const int per = C * nkt, ch = lin / per, w = lin % per;
    const int cc = C < nbh - ch * C ? C : nbh - ch * C; /* the chunk's pairs */
    *bk = ch * C + w % cc;
    *kt = w / cc;
}

/* The chunk size C for att_bwd_wg over nbh = B Hkv pairs, nkt = ceil(T / 128) key tiles, T
 * queries, G = H / Hkv query heads per kv head and head dim DH, on nsm SMs (one block each)
 * with l2_bytes of L2 cache. Returns nbh (no chunks) where the dq pieces of the pairs one wave
 * of the plain order touches (min(nsm, nbh) x G x T x DH x 4 bytes) fit half the L2, where
 * there is one key tile, or where every block fits one wave (each order then runs alike).
 * Otherwise simulates a greedy list schedule of the blocks (each, in launch order, to the SM
 * that frees first; a block costs G x its 64-query tiles + 2, in units of one 64-query tile's
 * products) for each candidate C (1, 2, 3, 4, 5, 6, 8, ..., 256 below nbh, and nbh) and returns
 * the smallest whose schedule ends within 2% of the best one: the fewest pairs live at once at
 * about the best balance. Returns nbh if it cannot allocate its nsm doubles. */
static inline int dx_att_bwd_chunk(int nbh, int nkt, int T, int G, int DH, int nsm, double l2_bytes)
{
    static const int cand[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256};
    enum { NC = (int)(sizeof cand / sizeof cand[0]) };
    const double live = (double)(nbh < nsm ? nbh : nsm) * G * T * DH * 4;
    if (live <= 0.5 * l2_bytes || nbh <= 1 || nkt <= 1 || nsm < 1 || (long)nbh * nkt <= nsm) return nbh;
    double *free_at = (double *)malloc((size_t)nsm * sizeof(double)), M[NC + 1];
    if (!free_at) return nbh;
    for (int k = 0; k <= NC; k++) {
        const int C = k < NC ? cand[k] : nbh;
        M[k] = -1.0; /* not a candidate */
        if (k < NC && C >= nbh) continue;
        for (int s = 0; s < nsm; s++) free_at[s] = 0.0;
        for (int ch = 0; ch < nbh; ch += C) {
            const int cc = C < nbh - ch ? C : nbh - ch;
            for (int j = 0; j < nkt; j++) {
                const double d = (double)G * ((T - 128 * j + 63) / 64) + 2.0;
                for (int i = 0; i < cc; i++) { /* the next block to the first SM free */
                    int s = 0;
                    for (int x = 1; x < nsm; x++)
                        if (free_at[x] < free_at[s]) s = x;
                    free_at[s] += d;
                }
            }
        }
        M[k] = 0.0;
        for (int s = 0; s < nsm; s++)
            if (free_at[s] > M[k]) M[k] = free_at[s];
    }
    free(free_at);
    double best = M[NC];
    for (int k = 0; k < NC; k++)
        if (M[k] >= 0.0 && M[k] < best) best = M[k];
    for (int k = 0; k < NC; k++)
        if (M[k] >= 0.0 && M[k] <= 1.02 * best) return cand[k];
    return nbh;
}

/* The forward's work tile L (0 <= L < nqt nbh: 128 queries of one of nbh = B H (batch, query
 * head) pairs, nqt = ceil(T / 128) query tiles per head): sets *qt (the query tile) and *bh (the
 * pair, b H + h). hm = 0: longest first, the query tiles at one position of every head before
 * the next (qt = nqt - 1 - L / nbh, bh = L % nbh); hm = 1: head after head, each head's longest
 * tile first (qt = nqt - 1 - L % nqt, bh = L / nqt). A bijection of [0, nqt nbh) onto
 * [0, nqt) x [0, nbh) (tests/test_att_order.c). */
static inline DX_ATT_HD void dx_att_fwd_work(int L, int nqt, int nbh, int hm, int *qt, int *bh)
{
    *qt = hm ? nqt - 1 - L % nqt : nqt - 1 - L / nbh;
    *bh = hm ? L / nqt : L % nbh;
}

/* The n-th work tile (n >= 0) of block blk of a grid of G blocks: n G + blk, or (hm) in odd
 * rounds n G + G - 1 - blk, a snake over the rounds of G tiles. With the plain stride and G a
 * multiple of nqt, head after head gives every block one query-tile position of every head it
 * visits: on 132 SMs the busiest block's work is 1.38 times the mean at B 32 T 350 H 32, 1.60
 * at B 16 T 700 (tests/test_att_order.c's model: a tile costs its key tiles + 1); the snake
 * pairs a block's long tiles of one round with short ones of the next (1.031 at both, as the
 * longest-first order; with under ~3 rounds of tiles it can be worse than that order, e.g.
 * 1.146 against 1.031 at B 4 T 350, or better, 1.031 against 1.194 at B 1 T 2048). Each round
 * of G tiles is a permutation of [n G, n G + G), and a block's tiles increase with n, so a
 * block stops at its first tile >= the grid's tiles. */
static inline DX_ATT_HD int dx_att_fwd_nth(int n, int blk, int G, int hm)
{
    return n * G + (hm && (n & 1) ? G - 1 - blk : blk);
}

#endif
