/* The Hopper attention's launch orders (kernels/cuda/att_order.h), on the CPU:
 *   dx_att_chunk_map is a bijection of the launch indices onto (pair, key tile) for every grid
 *   and chunk size, in the documented order (chunk after chunk, key tile after key tile within
 *   a chunk, pairs ascending within a key tile);
 *   dx_att_bwd_chunk's choices on an H100 / H200 (132 SMs, 50 MiB of L2) for the shapes measured
 *   in benchmarks/NOTES.md item 22 (TinyLlama's heads: G 8, Dh 64), where it must not chunk (the
 *   pairs of one wave fit half the L2; one key tile; one wave of blocks), and that each choice's
 *   simulated schedule is within 2% of the best candidate's (an independent simulation here);
 *   the forward's work tiles (dx_att_fwd_work, dx_att_fwd_nth): every tile once, in either
 *   order, on persistent grids of 1 .. 140 blocks and on one block per tile; each block's tiles
 *   increasing; round k's tiles in [k G, k G + G) (so each round is a permutation); and the
 *   busiest block's work (key tiles + 1 per tile) on 132 SMs within 4% of the mean for the
 *   measured shapes with the snake, where the plain stride head after head gives 1.38 / 1.60.
 * Prints one line per check and exits 1 on any failure. */
#include "../kernels/cuda/att_order.h"

#include <stdio.h>
#include <string.h>

static int fails, checks;

static void check(int ok, const char *what)
{
    checks++;
    if (!ok) fails++;
    printf("%-72s %s\n", what, ok ? "ok" : "FAIL");
}

/* every launch index once, in the documented order */
static int map_ok(int nbh, int nkt, int C)
{
    static unsigned char seen[256 * 24];
    memset(seen, 0, (size_t)nbh * nkt);
    int prev_ch = 0, prev_kt = 0, prev_bk = -1;
    for (int lin = 0; lin < nbh * nkt; lin++) {
        int bk = -1, kt = -1;
        dx_att_chunk_map(lin, nbh, nkt, C, &bk, &kt);
        if (bk < 0 || bk >= nbh || kt < 0 || kt >= nkt || seen[bk * nkt + kt]) return 0;
        seen[bk * nkt + kt] = 1;
        const int ch = C >= nbh ? 0 : bk / C;
        /* chunks ascending; within a chunk key tiles ascending; within a key tile pairs ascending */
        if (ch < prev_ch) return 0;
        if (ch == prev_ch && (kt < prev_kt || (kt == prev_kt && bk <= prev_bk))) return 0;
        if (ch > prev_ch && kt != 0) return 0;
        prev_ch = ch, prev_kt = kt, prev_bk = bk;
    }
    return 1;
}

/* the makespan of the greedy list schedule of the blocks in chunk order (written apart from
 * att_order.h's: a running minimum over SM finish times kept sorted) */
static double makespan(int nbh, int nkt, int T, int G, int C, int nsm)
{
    double fin[256];
    for (int s = 0; s < nsm; s++) fin[s] = 0.0;
    for (int lin = 0; lin < nbh * nkt; lin++) {
        int bk, kt;
        dx_att_chunk_map(lin, nbh, nkt, C, &bk, &kt);
        const double d = (double)G * ((T - 128 * kt + 63) / 64) + 2.0;
        /* fin sorted ascending: the first SM frees first; insert its new finish time in place */
        const double t = fin[0] + d;
        int s = 1;
        for (; s < nsm && fin[s] < t; s++) fin[s - 1] = fin[s];
        fin[s - 1] = t;
    }
    return fin[nsm - 1];
}

/* the forward's work tiles on a grid of G blocks (G = the tiles: one block per tile): every tile
 * once, each block's tiles increasing, round k's tiles in [k G, k G + G) (either order) */
static int fwd_order_ok(int nbh, int nqt, int hm, int G)
{
    static unsigned char seen[80 * 10];
    const int nt = nbh * nqt;
    memset(seen, 0, (size_t)nt);
    int count = 0;
    for (int blk = 0; blk < G; blk++) {
        int prev = -1;
        for (int k = 0;; k++) {
            const int L = dx_att_fwd_nth(k, blk, G, hm);
            if (L <= prev) return 0;
            if (L >= nt) break;
            if (L / G != k) return 0; /* round k's tiles lie in [k G, k G + G) */
            prev = L;
            int qt, bh;
            dx_att_fwd_work(L, nqt, nbh, hm, &qt, &bh);
            if (qt < 0 || qt >= nqt || bh < 0 || bh >= nbh || seen[bh * nqt + qt]) return 0;
            seen[bh * nqt + qt] = 1, count++;
        }
    }
    return count == nt;
}

/* the busiest block's work over the mean (per tile: its 128-key tiles + 1) for nbh heads of T
 * queries on G persistent blocks, longest first (hm 0) or head after head, with the snake or
 * (snake 0) the plain stride n G + blk */
static double fwd_imbalance(int nbh, int T, int hm, int G, int snake)
{
    const int nqt = (T + 127) / 128, nt = nbh * nqt;
    double load[256] = {0}, total = 0.0;
    for (int blk = 0; blk < G; blk++)
        for (int k = 0;; k++) {
            const int L = snake ? dx_att_fwd_nth(k, blk, G, hm) : k * G + blk;
            if (L >= nt) break;
            int qt, bh;
            dx_att_fwd_work(L, nqt, nbh, hm, &qt, &bh);
            const int kend = qt * 128 + 128 < T ? qt * 128 + 128 : T;
            const double w = (kend + 127) / 128 + 1.0;
            load[blk] += w, total += w;
        }
    double mx = 0.0;
    for (int blk = 0; blk < G; blk++)
        if (load[blk] > mx) mx = load[blk];
    return mx / (total / G);
}

int main(void)
{
    char what[160];
    /* the mapping: grids of 1 .. 40 pairs, then every 7th up to 194, by 1 .. 20 key tiles, chunk
     * sizes 1 .. nbh + 2 (C >= nbh: the plain order) */
    int bad = 0, n = 0;
    for (int nbh = 1; nbh <= 200; nbh += (nbh < 40 ? 1 : 7))
        for (int nkt = 1; nkt <= 20; nkt++)
            for (int C = 1; C <= nbh + 2; C++, n++)
                if (!map_ok(nbh, nkt, C)) {
                    if (bad++ < 5) printf("  map fails: nbh %d nkt %d C %d\n", nbh, nkt, C);
                }
    snprintf(what, sizeof what, "chunk map: bijection in chunk order (%d grids x chunk sizes)", n);
    check(bad == 0, what);
    int plain = 1;
    for (int lin = 0; lin < 37 * 5; lin++) {
        int bk, kt;
        dx_att_chunk_map(lin, 37, 5, 37, &bk, &kt);
        plain &= bk == lin % 37 && kt == lin / 37;
    }
    check(plain, "chunk map: C = nbh is the plain order (pair fastest)");

    /* the choices: B Hkv, key tiles, T, G, Dh -> C on 132 SMs with 50 MiB of L2 */
    const double l2 = 50.0 * 1024 * 1024;
    const struct {
        int nbh, nkt, T, G, dh, want;
        const char *what;
    } cs[] = {
        {32 * 4, 3, 350, 8, 64, 32, "B 32 T 350 (TinyLlama, measured -14% on an H100)"},
        {8 * 4, 16, 2048, 8, 64, 8, "B 8 T 2048 (measured -9.4%)"},
        {4 * 4, 32, 4096, 8, 64, 4, "B 4 T 4096 (measured -8.3%)"},
        {2 * 4, 64, 8192, 8, 64, 2, "B 2 T 8192"},
        {32 * 32, 3, 350, 1, 128, 32 * 32, "B 32 T 350 Dh 128 Hkv 32: one wave's dq fits half the L2"},
        {2 * 8, 4, 512, 1, 64, 2 * 8, "B 2 T 512 (the GPU test's shapes): fits"},
        {64 * 4, 1, 128, 8, 64, 64 * 4, "one key tile"},
        {4 * 4, 8, 1024, 8, 64, 4 * 4, "B 4 T 1024: 128 blocks, one wave"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = dx_att_bwd_chunk(cs[i].nbh, cs[i].nkt, cs[i].T, cs[i].G, cs[i].dh, 132, l2);
        snprintf(what, sizeof what, "chunk size %d (want %d): %s", C, cs[i].want, cs[i].what);
        check(C == cs[i].want, what);
    }

    /* the L2 threshold: B 32 T 350 chunks just above it and not just below */
    const double live = 128.0 * 8 * 350 * 64 * 4; /* min(SMs, pairs) x G x T x Dh x 4 bytes */
    const int below = dx_att_bwd_chunk(128, 3, 350, 8, 64, 132, 2 * live + 1024);
    const int above = dx_att_bwd_chunk(128, 3, 350, 8, 64, 132, 2 * live - 1024);
    snprintf(what, sizeof what, "L2 threshold: %d pairs per chunk with 2 x dq + 1 KB of L2, %d with - 1 KB",
             below, above);
    check(below == 128 && above == 32, what);

    /* each choice against every candidate, by this file's own simulation */
    static const int cand[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256};
    const int sh[][4] = {{128, 3, 350, 8}, {32, 16, 2048, 8}, {16, 32, 4096, 8}, {64, 6, 700, 8}, {96, 8, 1024, 8}};
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        const int nbh = sh[i][0], nkt = sh[i][1], T = sh[i][2], G = sh[i][3];
        const int C = dx_att_bwd_chunk(nbh, nkt, T, G, 64, 132, l2);
        double best = makespan(nbh, nkt, T, G, nbh, 132);
        int smaller_ok = 0;
        for (size_t k = 0; k < sizeof cand / sizeof cand[0]; k++)
            if (cand[k] < nbh) {
                const double m = makespan(nbh, nkt, T, G, cand[k], 132);
                if (m < best) best = m;
            }
        for (size_t k = 0; k < sizeof cand / sizeof cand[0] && cand[k] < C; k++)
            if (makespan(nbh, nkt, T, G, cand[k], 132) <= 1.02 * best) smaller_ok = 1;
        const double mc = makespan(nbh, nkt, T, G, C, 132);
        snprintf(what, sizeof what, "pairs %d key tiles %d T %d: C %d ends at %.0f, best %.0f, none smaller within 2%%",
                 nbh, nkt, T, C, mc, best);
        check(mc <= 1.02 * best && !smaller_ok, what);
    }

    /* the forward's order: every tile once, each block's tiles increasing */
    bad = 0, n = 0;
    for (int nbh = 1; nbh <= 70; nbh += (nbh < 12 ? 1 : 11))
        for (int nqt = 1; nqt <= 9; nqt++)
            for (int hm = 0; hm <= 1; hm++)
                for (int G = 1; G <= 153; G += (G < 10 ? 1 : 13), n++) /* 153: one block per tile */
                    if (!fwd_order_ok(nbh, nqt, hm, G < 150 ? G : nbh * nqt)) {
                        if (bad++ < 5) printf("  fwd order fails: nbh %d nqt %d hm %d G %d\n", nbh, nqt, hm, G);
                    }
    snprintf(what, sizeof what, "forward order: every work tile once, blocks' tiles increasing (%d grids)", n);
    check(bad == 0, what);
    int lf = 1, hmo = 1;
    for (int L = 0; L < 5 * 3; L++) {
        int qt, bh;
        dx_att_fwd_work(L, 3, 5, 0, &qt, &bh);
        lf &= qt == 2 - L / 5 && bh == L % 5;
        dx_att_fwd_work(L, 3, 5, 1, &qt, &bh);
        hmo &= qt == 2 - L % 3 && bh == L / 3;
    }
    check(lf && hmo, "forward order: longest first by position, or head after head, longest first");
    check(dx_att_fwd_nth(0, 5, 132, 1) == 5 && dx_att_fwd_nth(1, 5, 132, 1) == 132 + 126 &&
              dx_att_fwd_nth(1, 5, 132, 0) == 137 && dx_att_fwd_nth(2, 5, 132, 1) == 269,
          "forward order: the snake reverses odd rounds only where head after head");

    /* balance on 132 SMs: B H = 32 B heads at the measured shapes, B x T ~ 11-16k tokens */
    const int fb[][2] = {{32, 350}, {16, 700}, {8, 2048}, {4, 4096}};
    for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++) {
        const int nbh = fb[i][0] * 32, T = fb[i][1];
        const double snake = fwd_imbalance(nbh, T, 1, 132, 1), plain = fwd_imbalance(nbh, T, 1, 132, 0),
                     lfirst = fwd_imbalance(nbh, T, 0, 132, 0);
        snprintf(what, sizeof what, "B %d T %d: busiest block / mean %.3f (snake), %.3f (plain), %.3f (longest first)",
                 fb[i][0], T, snake, plain, lfirst);
        check(snake <= 1.04 && snake <= lfirst + 1e-9 && (T > 1000 || plain >= 1.3), what);
    }

    printf("%d passed, %d failed\n", checks - fails, fails);
    return fails ? 1 : 0;
}
