/* The Hopper attention backward's launch order (kernels/cuda/att_order.h), on the CPU:
 *   dx_att_chunk_map is a bijection of the launch indices onto (pair, key tile) for every grid
 *   and chunk size, in the documented order (chunk after chunk, key tile after key tile within
 *   a chunk, pairs ascending within a key tile);
 *   dx_att_bwd_chunk's choices on an H100 / H200 (132 SMs, 50 MiB of L2) for the shapes measured
 *   in benchmarks/NOTES.md item 22 (TinyLlama's heads: G 8, Dh 64), where it must not chunk (the
 *   pairs of one wave fit half the L2; one key tile; one wave of blocks), and that each choice's
 *   simulated schedule is within 2% of the best candidate's (an independent simulation here).
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

    printf("%d passed, %d failed\n", checks - fails, fails);
    return fails ? 1 : 0;
}
