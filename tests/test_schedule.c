/* Pipeline schedules (src/pp/schedule.h), checked without running a model:
 *  - every schedule lists each (chunk, micro-batch) forward and backward exactly once, the
 *    forward first;
 *  - 1F1B: the warm-up is min(p - stage - 1, m) forwards and at most p - stage micro-batches are
 *    in flight (the activation slots); GPipe: all forwards first, m in flight;
 *  - interleaved: Megatron-LM's chunk order (rank 0, p = 2, v = 2, m = 4 written out);
 *  - the p ranks' lists run to the end when each forward waits for the previous virtual stage's
 *    forward and each backward for the next virtual stage's backward (sends never block): a
 *    simulation finds no deadlock, and the step length in unit-time actions gives the bubble
 *    (p - 1) / (v m + p - 1) of the theory for equal forward and backward times.
 * Prints one line per check and "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pp/schedule.h"

/* Simulates p ranks executing their lists with unit-time actions; returns the makespan, or -1
 * on a deadlock. done[vs][micro][kind] = finish time. */
static int simulate(dx_pp_schedule kind, int p, int m, int v, double *bubble)
{
    dx_pp_action *a[16];
    int n[16], pos[16], t[16];
    int V = p * v;
    int *fin = malloc(sizeof(int) * (size_t)V * m * 2);
    for (int i = 0; i < V * m * 2; i++) fin[i] = -1;
    for (int s = 0; s < p; s++) {
        a[s] = calloc((size_t)2 * m * v, sizeof **a);
        n[s] = dx_pp_schedule_build(kind, p, s, m, v, a[s]);
        pos[s] = 0;
        t[s] = 0;
    }
#define FIN(vs, k, b) fin[((vs) * m + (k)) * 2 + (b)]
    int progress = 1, left = 0;
    for (int s = 0; s < p; s++) left += n[s];
    while (left && progress) {
        progress = 0;
        for (int s = 0; s < p; s++) {
            if (pos[s] == n[s]) continue;
            const dx_pp_action *x = &a[s][pos[s]];
            int vs = x->chunk * p + s, ready;
            if (x->kind == DX_PP_FORWARD) ready = vs == 0 ? 0 : FIN(vs - 1, x->micro, 0);
            else ready = vs == V - 1 ? FIN(vs, x->micro, 0) : FIN(vs + 1, x->micro, 1);
            if (ready < 0) continue;
            int start = t[s] > ready ? t[s] : ready;
            t[s] = start + 1;
            FIN(vs, x->micro, x->kind) = t[s];
            pos[s]++;
            left--;
            progress = 1;
        }
    }
    int span = 0;
    for (int s = 0; s < p; s++) {
        if (t[s] > span) span = t[s];
        free(a[s]);
    }
    free(fin);
    if (left) return -1;
    /* each rank is busy 2 m v units of the span */
    *bubble = 1.0 - (double)(2 * m * v) / span;
    return span;
}

int main(void)
{
    char what[160];
    const char *names[] = {"1f1b", "gpipe", "interleaved-1f1b"};
    /* completeness and order on every rank */
    for (int kind = 0; kind < 3; kind++)
        for (int p = 1; p <= 4; p *= 2)
            for (int m = p; m <= 8; m += p) {
                int v = kind == DX_PP_INTERLEAVED ? 2 : 1;
                if (kind == DX_PP_INTERLEAVED && p == 1) continue;
                int ok = 1;
                for (int s = 0; s < p; s++) {
                    dx_pp_action *a = calloc((size_t)2 * m * v, sizeof *a);
                    int cnt = dx_pp_schedule_build((dx_pp_schedule)kind, p, s, m, v, a);
                    int *seen = calloc((size_t)m * v * 2, sizeof *seen);
                    ok = ok && cnt == 2 * m * v;
                    for (int i = 0; ok && i < cnt; i++) {
                        int *f = &seen[(a[i].chunk * m + a[i].micro) * 2];
                        if (a[i].kind == DX_PP_BACKWARD && !f[0]) ok = 0; /* backward before its forward */
                        f[a[i].kind]++;
                    }
                    for (int i = 0; ok && i < m * v * 2; i++) ok = seen[i] == 1;
                    if (kind == DX_PP_1F1B) {
                        int warm = 0;
                        while (warm < cnt && a[warm].kind == DX_PP_FORWARD) warm++;
                        int want = p - s - 1 < m ? p - s - 1 : m;
                        /* the steady state starts with one more forward */
                        ok = ok && warm == (want < m ? want + 1 : m);
                        ok = ok && dx_pp_slots(a, cnt, v) == (p - s < m ? p - s : m);
                    }
                    if (kind == DX_PP_GPIPE) ok = ok && dx_pp_slots(a, cnt, v) == m;
                    free(seen);
                    free(a);
                }
                snprintf(what, sizeof what, "%s p=%d m=%d: each pass once, forward first", names[kind], p, m);
                check(ok, "%s", what);
            }
    /* Megatron-LM's interleaved order, rank 0 of p = 2, v = 2, m = 4 (warm-up 2 + 2 = 4) */
    {
        dx_pp_action a[16];
        int cnt = dx_pp_schedule_build(DX_PP_INTERLEAVED, 2, 0, 4, 2, a);
        const char *want = "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3";
        char got[256] = "";
        for (int i = 0; i < cnt; i++) {
            size_t l = strlen(got);
            snprintf(got + l, sizeof got - l, "%s%c%d.%d", i ? " " : "", a[i].kind ? 'B' : 'F', a[i].chunk, a[i].micro);
        }
        int ok = !strcmp(got, want);
        check(ok, "interleaved p=2 v=2 m=4 rank 0: Megatron-LM's order");
        if (!ok) printf("     got  %s\n     want %s\n", got, want);
    }
    /* no deadlock; the simulated bubble equals the theory */
    for (int kind = 0; kind < 3; kind++)
        for (int p = 2; p <= 4; p *= 2)
            for (int m = p; m <= 16; m *= 2) {
                int v = kind == DX_PP_INTERLEAVED ? 2 : 1;
                double bubble = 0, theory = dx_pp_bubble_fraction((dx_pp_schedule)kind, p, m, v);
                int span = simulate((dx_pp_schedule)kind, p, m, v, &bubble);
                snprintf(what, sizeof what, "%s p=%d m=%d: runs (span %d), bubble %.4f vs theory %.4f",
                         names[kind], p, m, span, bubble, theory);
                check(span > 0 && fabs(bubble - theory) < 1e-9, "%s", what);
            }
    /* bad arguments are errors */
    {
        dx_pp_action a[64];
        check(dx_pp_schedule_build(DX_PP_INTERLEAVED, 4, 0, 6, 2, a) < 0, "interleaved with m not a multiple of p: error");
        check(dx_pp_schedule_build(DX_PP_1F1B, 2, 0, 4, 2, a) < 0, "1F1B with 2 chunks: error");
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
