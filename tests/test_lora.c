/* The LoRA linear layer (src/model/lora.h) on the CPU backends:
 *   - forward: y = x W^T + s (x A^T) B^T against a direct f64 sum, with y a column block of a
 *     wider buffer (row stride > out) whose other columns stay as they were; B = 0 (PEFT's
 *     initialisation) gives the base output bitwise;
 *   - backward on the f64 backend against central finite differences of L = sum(R . y) with
 *     respect to x, A and B (the base W is frozen: no gradient is formed for it);
 *   - the f32 backend against the f64 one;
 *   - with PEFT's lora_dropout (p > 0): the same three checks, the reference dropping the
 *     adapter's input by the mask of kernels.h (dx_dropout_keep) with 1 / (1 - p);
 *   - the dropout op itself: the kept fraction is 1 - p within 5 sigma over 2^20 elements, kept
 *     values are x / (1 - p) (to rounding), the mask of an element depends on its global (row, column)
 *     only (the same when the rows or the columns are split over two calls, as over DP/PP or TP
 *     ranks), another stream gives an independent mask, in place works, f32 and f64 masks agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/common.h"
#include "kernels.h"
#include "model/lora.h"


static double *drand(size_t n, uint64_t seed, double scale)
{
    double *p = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) p[i] = (double)(float)(scale * dx_normal(seed, 3, i));
    return p;
}

/* backend buffer from / to host doubles (act = acc on the CPU backends) */
static void *bfrom(dx_backend *be, const double *x, size_t n)
{
    void *p = be->alloc(be, (n ? n : 1) * dx_dtype_size(be->act), DX_MEM_OTHER);
    for (size_t i = 0; i < n; i++) {
        if (be->act == DX_F64) ((double *)p)[i] = x[i];
        else ((float *)p)[i] = (float)x[i];
    }
    return p;
}
static void bget(dx_backend *be, const void *p, double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = be->act == DX_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

static double relerr(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 1e-300 ? den : 1e-300));
}

typedef struct {
    int N, in, out, r, ld;
    double s;
    double *x, *W, *A, *B, *R;
    double p;          /* lora_dropout */
    uint64_t stream;   /* its mask's stream; rows row0.., columns of row_len */
} prob;

#define ROW0 1000
/* the adapter's input element (n, i) after dropout */
static double xdrop(const prob *p, int n, int i)
{
    const double v = p->x[(size_t)n * p->in + i];
    if (p->p <= 0) return v;
    const uint64_t c = (uint64_t)(ROW0 + n) * (uint64_t)p->in + (uint64_t)i;
    return dx_dropout_keep(p->stream, c, dx_dropout_threshold((float)p->p)) ? v / (1 - (double)(float)p->p) : 0;
}

/* L = sum_{n, o < out} R[n,o] y[n,o], y = x W^T + s x A^T B^T, directly in f64 */
static double loss_ref(const prob *p, double *y)
{
    double L = 0;
    for (int n = 0; n < p->N; n++)
        for (int o = 0; o < p->out; o++) {
            double base = 0, ad = 0;
            for (int i = 0; i < p->in; i++) base += p->x[(size_t)n * p->in + i] * p->W[(size_t)o * p->in + i];
            for (int k = 0; k < p->r; k++) {
                double t = 0;
                for (int i = 0; i < p->in; i++) t += xdrop(p, n, i) * p->A[(size_t)k * p->in + i];
                ad += t * p->B[(size_t)o * p->r + k];
            }
            const double v = base + p->s * ad;
            if (y) y[(size_t)n * p->out + o] = v;
            L += p->R[(size_t)n * p->out + o] * v;
        }
    return L;
}

/* runs base + LoRA forward and backward on be; returns y [N, out] (from the strided buffer) and
 * the gradients dx, dA, dB (host, malloc'd); *gap_ok: the strided buffer's other columns kept */
static void run(dx_backend *be, const prob *p, double **y, double **dx, double **dA, double **dB, int *gap_ok)
{
    const int N = p->N, in = p->in, out = p->out, r = p->r, ld = p->ld;
    dx_lora_shape sh = {in, out, r, (float)p->s, (float)p->p, p->stream, ROW0, (uint64_t)in, 0, NULL};
    double *fill = malloc((size_t)N * ld * sizeof(double)), *Rw = malloc((size_t)N * ld * sizeof(double));
    for (size_t i = 0; i < (size_t)N * ld; i++) fill[i] = 5.0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < ld; c++) Rw[(size_t)n * ld + c] = c < out ? p->R[(size_t)n * out + c] : 0;
    double *zr = calloc((size_t)r * in + (size_t)out * r + 1, sizeof(double));
    void *bx = bfrom(be, p->x, (size_t)N * in), *bW = bfrom(be, p->W, (size_t)out * in);
    void *bA = bfrom(be, p->A, (size_t)r * in), *bB = bfrom(be, p->B, (size_t)out * r);
    void *by = bfrom(be, fill, (size_t)N * ld), *bdy = bfrom(be, Rw, (size_t)N * ld);
    double *zn = calloc((size_t)N * (r > in ? r : in) + 1, sizeof(double));
    void *bt = bfrom(be, zn, (size_t)N * r), *bdt = bfrom(be, zn, (size_t)N * r);
    void *bdx = bfrom(be, zn, (size_t)N * in), *bdA = bfrom(be, zr, (size_t)r * in), *bdB = bfrom(be, zr, (size_t)out * r);
    void *bxd = bfrom(be, zn, (size_t)N * in);
    if (p->p > 0) sh.xd = bxd;
    /* base: y[:, :out] = x W^T; dx = dy W */
    be->gemm(be, 0, 1, N, out, in, 1.0f, bx, in, bW, in, 0.0f, by, ld, 0);
    dx_lora_fwd(be, by, ld, bt, bx, bA, bB, N, &sh);
    be->gemm(be, 0, 0, N, in, out, 1.0f, bdy, ld, bW, in, 0.0f, bdx, in, 0);
    dx_lora_bwd(be, bdx, bdA, bdB, bdt, bdy, ld, bx, bt, bA, bB, N, &sh);
    double *yw = malloc((size_t)N * ld * sizeof(double));
    bget(be, by, yw, (size_t)N * ld);
    *y = malloc((size_t)N * out * sizeof(double));
    *gap_ok = 1;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < ld; c++) {
            if (c < out) (*y)[(size_t)n * out + c] = yw[(size_t)n * ld + c];
            else if (yw[(size_t)n * ld + c] != 5.0) *gap_ok = 0;
        }
    *dx = malloc((size_t)N * in * sizeof(double));
    *dA = malloc((size_t)r * in * sizeof(double));
    *dB = malloc((size_t)out * r * sizeof(double));
    bget(be, bdx, *dx, (size_t)N * in);
    bget(be, bdA, *dA, (size_t)r * in);
    bget(be, bdB, *dB, (size_t)out * r);
    void *bufs[] = {bx, bW, bA, bB, by, bdy, bt, bdt, bdx, bdA, bdB, bxd};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]);
    free(fill), free(Rw), free(zr), free(zn), free(yw);
}

/* central differences of loss_ref with respect to every element of v[n] */
static void fd(prob *p, double *v, size_t n, double *g)
{
    for (size_t i = 0; i < n; i++) {
        const double keep = v[i], h = 1e-6 * (fabs(keep) > 1 ? fabs(keep) : 1);
        v[i] = keep + h;
        const double lp = loss_ref(p, NULL);
        v[i] = keep - h;
        const double lm = loss_ref(p, NULL);
        v[i] = keep;
        g[i] = (lp - lm) / (2 * h);
    }
}

static void test_case(dx_backend *b32, dx_backend *b64, uint64_t seed, int N, int in, int out, int r,
                      int ld, double alpha, int zero_B, double drop)
{
    prob p = {N, in, out, r, ld, alpha / r, drand((size_t)N * in, seed, 1), drand((size_t)out * in, seed + 1, 0.3),
              drand((size_t)r * in, seed + 2, 0.3), drand((size_t)out * r, seed + 3, zero_B ? 0 : 0.3),
              drand((size_t)N * out, seed + 4, 1), drop, dx_mix64(seed)};
    char shape[128];
    snprintf(shape, sizeof shape, "N=%d in=%d out=%d r=%d ld=%d alpha=%g%s%s", N, in, out, r, ld, alpha, zero_B ? " B=0" : "",
             drop > 0 ? " dropout" : "");
    double *yr = malloc((size_t)N * out * sizeof(double));
    loss_ref(&p, yr);
    double *y[2], *dx[2], *dA[2], *dB[2];
    int gap[2];
    dx_backend *bes[2] = {b64, b32};
    for (int e = 0; e < 2; e++) run(bes[e], &p, &y[e], &dx[e], &dA[e], &dB[e], &gap[e]);
    check(relerr(y[0], yr, (size_t)N * out) < 1e-13 && gap[0], "forward f64 vs direct sum, other columns kept  %s (err %.1e)", shape,
          relerr(y[0], yr, (size_t)N * out));
    if (zero_B) {
        /* the base alone, on the same backend */
        prob q = p;
        q.s = 0;
        double *yb = malloc((size_t)N * out * sizeof(double));
        loss_ref(&q, yb);
        check(relerr(y[0], yb, (size_t)N * out) < 1e-13, "B = 0: the output is the base layer's  %s", shape);
        free(yb);
    }
    double *g[3] = {malloc((size_t)N * in * sizeof(double)), malloc((size_t)r * in * sizeof(double)),
                    malloc((size_t)out * r * sizeof(double))};
    fd(&p, p.x, (size_t)N * in, g[0]);
    fd(&p, p.A, (size_t)r * in, g[1]);
    fd(&p, p.B, (size_t)out * r, g[2]);
    const double ex = relerr(dx[0], g[0], (size_t)N * in), eA = relerr(dA[0], g[1], (size_t)r * in);
    const double eB = relerr(dB[0], g[2], (size_t)out * r);
    check(ex < 1e-7 && eA < 1e-7 && eB < 1e-7, "f64 gradients vs finite differences  %s (dx %.1e, dA %.1e, dB %.1e)", shape, ex, eA, eB);
    const double fx = relerr(dx[1], dx[0], (size_t)N * in), fA = relerr(dA[1], dA[0], (size_t)r * in);
    const double fB = relerr(dB[1], dB[0], (size_t)out * r), fy = relerr(y[1], y[0], (size_t)N * out);
    check(fy < 1e-5 && fx < 1e-5 && fA < 1e-5 && (zero_B ? 1 : fB < 1e-5) && gap[1],
          "f32 vs f64  %s (y %.1e, dx %.1e, dA %.1e, dB %.1e)", shape, fy, fx, fA, fB);
    for (int e = 0; e < 2; e++) free(y[e]), free(dx[e]), free(dA[e]), free(dB[e]);
    for (int i = 0; i < 3; i++) free(g[i]);
    free(p.x), free(p.W), free(p.A), free(p.B), free(p.R), free(yr);
}

/* the dropout op (kernels.h) on the CPU backends */
static void test_dropout(dx_backend *b32, dx_backend *b64)
{
    const int N = 1024, F = 1024;
    const size_t n = (size_t)N * F;
    const float p = 0.25f;
    const uint64_t st = 0x1234567u, row0 = 77;
    double *x = drand(n, 9, 1), *y = malloc(n * sizeof(double)), *y2 = malloc(n * sizeof(double));
    void *bx = bfrom(b64, x, n), *by = bfrom(b64, x, n);
    b64->dropout(b64, by, bx, N, F, p, st, row0, F, 0);
    bget(b64, by, y, n);
    size_t kept = 0, exact = 0;
    for (size_t i = 0; i < n; i++) {
        if (y[i] != 0) kept++;
        if (y[i] == 0 || fabs(y[i] - x[i] / (1 - (double)p)) <= 4e-16 * fabs(x[i] / (1 - (double)p))) exact++;
    }
    const double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    check(fabs(frac - (1 - p)) < 5 * sd && exact == n, "dropout p=%.2f: kept %.5f of 2^20 (1 - p within 5 sigma = %.1e), kept values x / (1 - p) (to 4e-16)",
          (double)p, frac, 5 * sd);
    /* rows split over two calls (row0 offsets), columns split over two calls (col0 offsets) */
    void *top = bfrom(b64, x, n), *bot = bfrom(b64, x + n / 2, n / 2);
    b64->dropout(b64, top, top, N / 2, F, p, st, row0, F, 0);               /* in place */
    b64->dropout(b64, bot, bot, N / 2, F, p, st, row0 + N / 2, F, 0);
    bget(b64, top, y2, n / 2);
    bget(b64, bot, y2 + n / 2, n / 2);
    int rows_same = !memcmp(y, y2, n * sizeof(double));
    int cols_same = 1;
    double *xl = malloc(n / 2 * sizeof(double)), *yl = malloc(n / 2 * sizeof(double));
    for (int half = 0; half < 2; half++) { /* columns [half F/2, (half + 1) F/2) of every row */
        for (int i = 0; i < N; i++) memcpy(xl + (size_t)i * F / 2, x + (size_t)i * F + half * F / 2, F / 2 * sizeof(double));
        void *bl = bfrom(b64, xl, n / 2);
        b64->dropout(b64, bl, bl, N, F / 2, p, st, row0, F, (uint64_t)half * F / 2);
        bget(b64, bl, yl, n / 2);
        for (int i = 0; i < N; i++)
            cols_same &= !memcmp(yl + (size_t)i * F / 2, y + (size_t)i * F + half * F / 2, F / 2 * sizeof(double));
        b64->free(b64, bl);
    }
    check(rows_same && cols_same, "dropout: an element's mask depends on its global (row, column) only (rows split: %s, columns split: %s), in place",
          rows_same ? "same" : "differs", cols_same ? "same" : "differs");
    /* another stream: independent (both kept ~ (1 - p)^2) */
    b64->dropout(b64, by, bx, N, F, p, st + 1, row0, F, 0);
    bget(b64, by, y2, n);
    size_t both = 0;
    for (size_t i = 0; i < n; i++) both += y[i] != 0 && y2[i] != 0;
    const double fb = (double)both / (double)n, q = (1 - p) * (1 - p);
    check(fabs(fb - q) < 5 * sqrt(q * (1 - q) / (double)n), "dropout: another stream's mask is independent (both kept %.5f, (1 - p)^2 = %.5f)", fb, q);
    /* f32: the same mask */
    void *fx = bfrom(b32, x, n), *fy = bfrom(b32, x, n);
    b32->dropout(b32, fy, fx, N, F, p, st, row0, F, 0);
    double *yf = malloc(n * sizeof(double));
    bget(b32, fy, yf, n);
    size_t agree = 0;
    for (size_t i = 0; i < n; i++) agree += (yf[i] != 0) == (y[i] != 0);
    check(agree == n, "dropout: f32 and f64 masks agree (%zu of %zu)", agree, n);
    void *bufs[] = {bx, by, top, bot};
    for (size_t i = 0; i < 4; i++) b64->free(b64, bufs[i]);
    b32->free(b32, fx), b32->free(b32, fy);
    free(x), free(y), free(y2), free(xl), free(yl), free(yf);
}

int main(void)
{
    dx_backend *b32 = dx_backend_cpu_create(2), *b64 = dx_backend_cpu64_create(2);
    if (!b32 || !b64) {
        fprintf(stderr, "backend: %s\n", dx_last_error());
        return 2;
    }
    test_case(b32, b64, 100, 5, 12, 7, 2, 7, 16, 0, 0);
    test_case(b32, b64, 200, 9, 16, 8, 4, 24, 8, 0, 0);  /* y a column block of rows of 24 */
    test_case(b32, b64, 300, 3, 10, 6, 1, 6, 1, 0, 0);   /* rank 1 */
    test_case(b32, b64, 400, 4, 8, 5, 3, 5, 16, 1, 0);   /* PEFT's initialisation B = 0 */
    test_case(b32, b64, 500, 6, 12, 7, 2, 9, 16, 0, 0.3); /* lora_dropout 0.3 */
    test_case(b32, b64, 600, 9, 16, 8, 4, 8, 8, 0, 0.1);
    test_dropout(b32, b64);
    check(b32->mem.current_total == 0 && b64->mem.current_total == 0, "test buffers all freed");
    b32->destroy(b32);
    b64->destroy(b64);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
