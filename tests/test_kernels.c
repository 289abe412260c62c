/* dissect: tests of the CPU kernels ("cpu" f32 and "cpu64" f64 backends).
 *
 * Every op is checked against an independent naive float64 reference written here:
 *   forward:  f32 backend vs reference            (relative L2 error, bounds printed per line)
 *             f64 backend vs reference            (< 1e-12)
 *   backward: f64 backend vs central finite differences of the reference forward on
 *             L = sum(out * R), R random          (< 1e-6)
 *             f32 backend vs f64 backend          (< 1e-4)
 *   "(+=)" outputs: result with a random prefill == prefill + result with a zero prefill.
 * Outputs are poisoned with NaN before each call, so unwritten elements fail. Inputs are
 * rounded to float once, so all backends and the reference see the same numbers.
 * Ends with "N passed, M failed"; exits 1 if anything failed.
 */
#include "kernels.h"
#include "common/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
static dx_backend *be32, *be64; /* 2 threads each */

static void check(int ok, const char *fmt, ...) DX_PRINTF(2, 3);

static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) n_pass++;
    else n_fail++;
}

/* relative L2 error ||a - ref|| / ||ref||; NaN anywhere gives NaN (a failure) */
static double relerr(const double *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    /* floor: a reference whose RMS is below 1e-6 (a vanishing gradient) is compared absolutely */
    if (den < 1e-12 * (double)n) den = 1e-12 * (double)n;
    return sqrt(num / den);
}

static void check_err(const char *what, const char *be_name, double err, double bound)
{
    check(err < bound, "%-52s %-5s err=%.2e (bound %.0e)", what, be_name, err, bound);
}

/* ---- host arrays ---- */

static double *dalloc(size_t n)
{
    double *p = malloc((n ? n : 1) * sizeof(double));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static double *dcopy(const double *x, size_t n)
{
    double *p = dalloc(n);
    memcpy(p, x, n * sizeof(double));
    return p;
}

/* random normal * scale + shift, rounded to float */
static double *drand_(size_t n, uint64_t seed, double scale, double shift)
{
    double *p = dalloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (double)(float)(shift + scale * dx_normal(seed, 7, i));
    return p;
}
#define drand(n, seed) drand_(n, seed, 1.0, 0.0)

/* ---- backend buffers (CPU memory; element type = be->act = be->acc) ---- */

static int is64(const dx_backend *be) { return be->act == DX_F64; }

static void bset(dx_backend *be, void *p, const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (is64(be)) ((double *)p)[i] = x[i];
        else ((float *)p)[i] = (float)x[i];
    }
}

static void bget(dx_backend *be, const void *p, double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = is64(be) ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void *balloc(dx_backend *be, size_t n)
{
    void *p = be->alloc(be, (n ? n : 1) * dx_dtype_size(be->act), DX_MEM_OTHER);
    if (!p) {
        fprintf(stderr, "alloc failed: %s\n", dx_last_error());
        exit(2);
    }
    return p;
}

static void *bnan(dx_backend *be, size_t n)
{
    void *p = balloc(be, n);
    for (size_t i = 0; i < n; i++) {
        if (is64(be)) ((double *)p)[i] = NAN;
        else ((float *)p)[i] = NAN;
    }
    return p;
}

static void *bfrom(dx_backend *be, const double *x, size_t n)
{
    void *p = balloc(be, n);
    bset(be, p, x, n);
    return p;
}

static double *bto(dx_backend *be, const void *p, size_t n)
{
    double *x = dalloc(n);
    bget(be, p, x, n);
    return x;
}

static double *dadd(const double *a, const double *b, size_t n)
{
    double *p = dalloc(n);
    for (size_t i = 0; i < n; i++) p[i] = a[i] + b[i];
    return p;
}

static double ddot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- central finite differences of a scalar objective ---- */

typedef double (*objfn)(void *ctx);

static void fd_grad(objfn f, void *ctx, double *param, size_t n, double *g)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double s = param[i];
        param[i] = s + h;
        double lp = f(ctx);
        param[i] = s - h;
        double lm = f(ctx);
        param[i] = s;
        g[i] = (lp - lm) / (2 * h);
    }
}

#define F32_FWD 1e-5
#define F32_FWD_GEMM 2e-5
#define F32_FWD_ATT 3e-5
#define F64_FWD 1e-12
#define FD_BOUND 1e-6
#define F32_BWD 1e-4
#define ACC_BOUND_32 1e-6
#define ACC_BOUND_64 1e-13

static double accb(dx_backend *be) { return is64(be) ? ACC_BOUND_64 : ACC_BOUND_32; }
static double fwdb(dx_backend *be, double b32) { return is64(be) ? F64_FWD : b32; }

/* ============================================================================================
 * Reference implementations (float64, naive)
 * ========================================================================================== */

static void ref_gemm(int ta, int tb, int M, int N, int K, double alpha, const double *A, int lda,
                     const double *B, int ldb, double beta, double *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
            }
            double c = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = alpha * s + c;
        }
}

static void ref_rmsnorm(double *y, double *rstd, const double *x, const double *w, int N, int D,
                        double eps)
{
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int j = 0; j < D; j++) ss += x[i * D + j] * x[i * D + j];
        double r = 1.0 / sqrt(ss / D + eps);
        if (rstd) rstd[i] = r;
        for (int j = 0; j < D; j++) y[i * D + j] = w[j] * (x[i * D + j] * r);
    }
}

static void ref_rope(double *x, int B, int T, int H, int Dh, double theta)
{
    int half = Dh / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                double *xv = x + (((size_t)b * T + t) * H + h) * Dh;
                for (int i = 0; i < half; i++) {
                    double f = t * pow(theta, -2.0 * i / Dh);
                    double a = xv[i], c = xv[i + half];
                    xv[i] = a * cos(f) - c * sin(f);
                    xv[i + half] = c * cos(f) + a * sin(f);
                }
            }
}

static void ref_attention(double *o, double *lse, const double *q, const double *k,
                          const double *v, int B, int T, int H, int Hkv, int Dh)
{
    double *s = dalloc((size_t)T);
    double sc = 1.0 / sqrt((double)Dh);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                int kh = h / (H / Hkv);
                const double *qi = q + (((size_t)b * T + i) * H + h) * Dh;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    s[j] = ddot(qi, k + (((size_t)b * T + j) * Hkv + kh) * Dh, Dh) * sc;
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
                double l = mx + log(sum);
                if (lse) lse[((size_t)b * H + h) * T + i] = l;
                double *oi = o + (((size_t)b * T + i) * H + h) * Dh;
                for (int d = 0; d < Dh; d++) oi[d] = 0;
                for (int j = 0; j <= i; j++) {
                    double p = exp(s[j] - l);
                    const double *vj = v + (((size_t)b * T + j) * Hkv + kh) * Dh;
                    for (int d = 0; d < Dh; d++) oi[d] += p * vj[d];
                }
            }
    free(s);
}

static void ref_swiglu(double *h, const double *g, const double *u, size_t n)
{
    for (size_t i = 0; i < n; i++) h[i] = g[i] / (1 + exp(-g[i])) * u[i];
}

static void ref_embedding(double *out, const int32_t *ids, const double *table, int N, int D)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) out[(size_t)i * D + j] = table[(size_t)ids[i] * D + j];
}

static double ref_ce(const double *logits, const int32_t *t, int N, int V)
{
    double tot = 0;
    for (int i = 0; i < N; i++) {
        if (t[i] < 0) continue;
        const double *z = logits + (size_t)i * V;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < V; j++) s += exp(z[j] - mx);
        tot += mx + log(s) - z[t[i]];
    }
    return tot;
}

/* ============================================================================================
 * gemm
 * ========================================================================================== */

static void test_gemm(uint64_t seed, int ta, int tb, int M, int N, int K, double beta)
{
    const float alpha = 0.75f;
    int lda = (ta ? M : K) + 3, ra = ta ? K : M;
    int ldb = (tb ? K : N) + 2, rb = tb ? N : K;
    int ldc = N + 1;
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)M * ldc;
    double *A = drand(na, seed), *Bm = drand(nb, seed + 1), *C0 = drand(nc, seed + 2);
    double *Cr = dcopy(C0, nc);
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cr, ldc);
    dx_backend *bes[2] = {be32, be64};
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *a = bfrom(be, A, na), *b = bfrom(be, Bm, nb);
        void *c = beta == 0 ? bnan(be, nc) : bfrom(be, C0, nc);
        be->gemm(be, ta, tb, M, N, K, alpha, a, lda, b, ldb, (float)beta, c, ldc, 0);
        double *C = bto(be, c, nc);
        double *blk = dalloc((size_t)M * N), *rblk = dalloc((size_t)M * N);
        int pad_ok = 1;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                blk[(size_t)i * N + j] = C[(size_t)i * ldc + j];
                rblk[(size_t)i * N + j] = Cr[(size_t)i * ldc + j];
            }
            if (beta != 0 && C[(size_t)i * ldc + N] != (is64(be) ? C0[(size_t)i * ldc + N]
                                                                 : (double)(float)C0[(size_t)i * ldc + N]))
                pad_ok = 0;
        }
        char what[128];
        snprintf(what, sizeof what, "gemm ta=%d tb=%d M=%d N=%d K=%d beta=%g", ta, tb, M, N, K,
                 beta);
        check_err(what, be->name, relerr(blk, rblk, (size_t)M * N), fwdb(be, F32_FWD_GEMM));
        if (beta != 0) check(pad_ok, "%-52s %-5s ldc padding untouched", what, be->name);
        free(C);
        free(blk);
        free(rblk);
        be->free(be, a);
        be->free(be, b);
        be->free(be, c);
    }
    free(A);
    free(Bm);
    free(C0);
    free(Cr);
}

/* ============================================================================================
 * rmsnorm
 * ========================================================================================== */

typedef struct {
    int N, D;
    double *x, *w, *R, *y;
} rms_ctx;

static double rms_obj(void *c_)
{
    rms_ctx *c = c_;
    ref_rmsnorm(c->y, NULL, c->x, c->w, c->N, c->D, 1e-5);
    return ddot(c->y, c->R, (size_t)c->N * c->D);
}

static void test_rmsnorm(uint64_t seed, int N, int D, int fd)
{
    const float eps = 1e-5f;
    size_t nx = (size_t)N * D;
    double *x = drand(nx, seed), *w = drand_(D, seed + 1, 0.5, 1.0), *R = drand(nx, seed + 2);
    double *Pdx = drand(nx, seed + 3), *Pdw = drand(D, seed + 4);
    double *yr = dalloc(nx), *rr = dalloc(N);
    ref_rmsnorm(yr, rr, x, w, N, D, eps);
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    double *gdx[2], *gdw[2];
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bx = bfrom(be, x, nx), *bw = bfrom(be, w, D), *by = bnan(be, nx), *brs = bnan(be, N);
        be->rmsnorm_fwd(be, by, brs, bx, bw, N, D, eps);
        double *y = bto(be, by, nx), *rs = bto(be, brs, N);
        snprintf(what, sizeof what, "rmsnorm_fwd N=%d D=%d y", N, D);
        check_err(what, be->name, relerr(y, yr, nx), fwdb(be, F32_FWD));
        snprintf(what, sizeof what, "rmsnorm_fwd N=%d D=%d rstd", N, D);
        check_err(what, be->name, relerr(rs, rr, N), fwdb(be, F32_FWD));
        /* backward: zero prefill gives the contribution; random prefill must add to it */
        double *z = calloc(nx, sizeof(double));
        void *bdy = bfrom(be, R, nx), *bdx = bfrom(be, z, nx), *bdw = bfrom(be, z, D);
        be->rmsnorm_bwd(be, bdx, bdw, bdy, bx, bw, brs, N, D);
        gdx[e] = bto(be, bdx, nx);
        gdw[e] = bto(be, bdw, D);
        bset(be, bdx, Pdx, nx);
        bset(be, bdw, Pdw, D);
        be->rmsnorm_bwd(be, bdx, bdw, bdy, bx, bw, brs, N, D);
        double *adx = bto(be, bdx, nx), *adw = bto(be, bdw, D);
        double *edx = dadd(Pdx, gdx[e], nx), *edw = dadd(Pdw, gdw[e], D);
        snprintf(what, sizeof what, "rmsnorm_bwd N=%d D=%d dx accumulates (+=)", N, D);
        check_err(what, be->name, relerr(adx, edx, nx), accb(be));
        snprintf(what, sizeof what, "rmsnorm_bwd N=%d D=%d dw accumulates (+=)", N, D);
        check_err(what, be->name, relerr(adw, edw, D), accb(be));
        free(z);
        free(y);
        free(rs);
        free(adx);
        free(adw);
        free(edx);
        free(edw);
        be->free(be, bx);
        be->free(be, bw);
        be->free(be, by);
        be->free(be, brs);
        be->free(be, bdy);
        be->free(be, bdx);
        be->free(be, bdw);
    }
    if (fd) {
        rms_ctx c = {N, D, dcopy(x, nx), dcopy(w, D), R, dalloc(nx)};
        double *fdx = dalloc(nx), *fdw = dalloc(D);
        fd_grad(rms_obj, &c, c.x, nx, fdx);
        fd_grad(rms_obj, &c, c.w, D, fdw);
        snprintf(what, sizeof what, "rmsnorm_bwd N=%d D=%d dx vs finite diff", N, D);
        check_err(what, be64->name, relerr(gdx[1], fdx, nx), FD_BOUND);
        snprintf(what, sizeof what, "rmsnorm_bwd N=%d D=%d dw vs finite diff", N, D);
        check_err(what, be64->name, relerr(gdw[1], fdw, D), FD_BOUND);
        free(c.x);
        free(c.w);
        free(c.y);
        free(fdx);
        free(fdw);
    }
    snprintf(what, sizeof what, "rmsnorm_bwd N=%d D=%d dx f32 vs f64", N, D);
    check_err(what, be32->name, relerr(gdx[0], gdx[1], nx), F32_BWD);
    snprintf(what, sizeof what, "rmsnorm_bwd N=%d D=%d dw f32 vs f64", N, D);
    check_err(what, be32->name, relerr(gdw[0], gdw[1], D), F32_BWD);
    for (int e = 0; e < 2; e++) {
        free(gdx[e]);
        free(gdw[e]);
    }
    free(x);
    free(w);
    free(R);
    free(Pdx);
    free(Pdw);
    free(yr);
    free(rr);
}

/* ============================================================================================
 * rope
 * ========================================================================================== */

typedef struct {
    int B, T, H, Dh;
    double theta, *x, *R, *tmp;
} rope_ctx;

static double rope_obj(void *c_)
{
    rope_ctx *c = c_;
    size_t n = (size_t)c->B * c->T * c->H * c->Dh;
    memcpy(c->tmp, c->x, n * sizeof(double));
    ref_rope(c->tmp, c->B, c->T, c->H, c->Dh, c->theta);
    return ddot(c->tmp, c->R, n);
}

static void test_rope(uint64_t seed, int B, int T, int H, int Dh, int fd)
{
    const float theta = 10000.0f;
    size_t n = (size_t)B * T * H * Dh;
    double *x = drand(n, seed), *R = drand(n, seed + 1);
    double *xr = dcopy(x, n);
    ref_rope(xr, B, T, H, Dh, theta);
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    double *g[2];
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bx = bfrom(be, x, n);
        be->rope_fwd(be, bx, H * Dh, B, T, H, Dh, theta);
        double *y = bto(be, bx, n);
        snprintf(what, sizeof what, "rope_fwd B=%d T=%d H=%d Dh=%d", B, T, H, Dh);
        check_err(what, be->name, relerr(y, xr, n), fwdb(be, F32_FWD));
        bset(be, bx, R, n);
        be->rope_bwd(be, bx, H * Dh, B, T, H, Dh, theta);
        g[e] = bto(be, bx, n);
        free(y);
        be->free(be, bx);
    }
    if (fd) {
        rope_ctx c = {B, T, H, Dh, theta, dcopy(x, n), R, dalloc(n)};
        double *fg = dalloc(n);
        fd_grad(rope_obj, &c, c.x, n, fg);
        snprintf(what, sizeof what, "rope_bwd B=%d T=%d H=%d Dh=%d vs finite diff", B, T, H, Dh);
        check_err(what, be64->name, relerr(g[1], fg, n), FD_BOUND);
        free(c.x);
        free(c.tmp);
        free(fg);
    }
    snprintf(what, sizeof what, "rope_bwd B=%d T=%d H=%d Dh=%d f32 vs f64", B, T, H, Dh);
    check_err(what, be32->name, relerr(g[0], g[1], n), F32_BWD);
    free(g[0]);
    free(g[1]);
    free(x);
    free(R);
    free(xr);
}

/* ============================================================================================
 * attention
 * ========================================================================================== */

typedef struct {
    int B, T, H, Hkv, Dh;
    double *q, *k, *v, *R, *o;
} att_ctx;

static double att_obj(void *c_)
{
    att_ctx *c = c_;
    ref_attention(c->o, NULL, c->q, c->k, c->v, c->B, c->T, c->H, c->Hkv, c->Dh);
    return ddot(c->o, c->R, (size_t)c->B * c->T * c->H * c->Dh);
}

static void test_attention(uint64_t seed, int B, int T, int H, int Hkv, int Dh, double qscale,
                           int fd)
{
    size_t nq = (size_t)B * T * H * Dh, nk = (size_t)B * T * Hkv * Dh, nl = (size_t)B * H * T;
    double *q = drand_(nq, seed, qscale, 0), *k = drand(nk, seed + 1), *v = drand(nk, seed + 2);
    double *R = drand(nq, seed + 3);
    double *orf = dalloc(nq), *lr = dalloc(nl);
    ref_attention(orf, lr, q, k, v, B, T, H, Hkv, Dh);
    char what[160], shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d Hkv=%d Dh=%d", B, T, H, Hkv, Dh);
    dx_backend *bes[2] = {be32, be64};
    double *g[2][3];
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bq = bfrom(be, q, nq), *bk = bfrom(be, k, nk), *bv = bfrom(be, v, nk);
        void *bo = bnan(be, nq), *bl = bnan(be, nl);
        be->attention_fwd(be, bo, bl, bq, bk, bv, H * Dh, Hkv * Dh, B, T, H, Hkv, Dh);
        double *o = bto(be, bo, nq), *l = bto(be, bl, nl);
        snprintf(what, sizeof what, "attention_fwd %s o", shape);
        check_err(what, be->name, relerr(o, orf, nq), fwdb(be, F32_FWD_ATT));
        snprintf(what, sizeof what, "attention_fwd %s lse", shape);
        check_err(what, be->name, relerr(l, lr, nl), fwdb(be, F32_FWD));
        void *bdo = bfrom(be, R, nq), *bdq = bnan(be, nq), *bdk = bnan(be, nk), *bdv = bnan(be, nk);
        be->attention_bwd(be, bdq, bdk, bdv, bdo, bq, bk, bv, bo, bl, H * Dh, Hkv * Dh, B, T, H, Hkv, Dh);
        g[e][0] = bto(be, bdq, nq);
        g[e][1] = bto(be, bdk, nk);
        g[e][2] = bto(be, bdv, nk);
        free(o);
        free(l);
        void *bufs[] = {bq, bk, bv, bo, bl, bdo, bdq, bdk, bdv};
        for (int i = 0; i < 9; i++) be->free(be, bufs[i]);
    }
    const char *gn[3] = {"dq", "dk", "dv"};
    size_t gsz[3] = {nq, nk, nk};
    if (fd) {
        att_ctx c = {B, T, H, Hkv, Dh, dcopy(q, nq), dcopy(k, nk), dcopy(v, nk), R, dalloc(nq)};
        double *par[3] = {c.q, c.k, c.v};
        for (int t = 0; t < 3; t++) {
            double *fg = dalloc(gsz[t]);
            fd_grad(att_obj, &c, par[t], gsz[t], fg);
            snprintf(what, sizeof what, "attention_bwd %s %s vs finite diff", shape, gn[t]);
            check_err(what, be64->name, relerr(g[1][t], fg, gsz[t]), FD_BOUND);
            free(fg);
        }
        free(c.q);
        free(c.k);
        free(c.v);
        free(c.o);
    }
    for (int t = 0; t < 3; t++) {
        snprintf(what, sizeof what, "attention_bwd %s %s f32 vs f64", shape, gn[t]);
        check_err(what, be32->name, relerr(g[0][t], g[1][t], gsz[t]), F32_BWD);
        free(g[0][t]);
        free(g[1][t]);
    }
    free(q);
    free(k);
    free(v);
    free(R);
    free(orf);
    free(lr);
}

/* ============================================================================================
 * swiglu
 * ========================================================================================== */

typedef struct {
    size_t n;
    double *g, *u, *R, *h;
} swi_ctx;

static double swi_obj(void *c_)
{
    swi_ctx *c = c_;
    ref_swiglu(c->h, c->g, c->u, c->n);
    return ddot(c->h, c->R, c->n);
}

static void test_swiglu(uint64_t seed, size_t n, double gscale, int fd)
{
    double *g = drand_(n, seed, gscale, 0), *u = drand(n, seed + 1), *R = drand(n, seed + 2);
    double *hr = dalloc(n);
    ref_swiglu(hr, g, u, n);
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    double *gg[2], *gu[2];
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bg = bfrom(be, g, n), *bu = bfrom(be, u, n), *bh = bnan(be, n);
        be->swiglu_fwd(be, bh, bg, bu, 1, (int)n, (int)n);
        double *h = bto(be, bh, n);
        snprintf(what, sizeof what, "swiglu_fwd n=%zu |g|~%g", n, gscale);
        check_err(what, be->name, relerr(h, hr, n), fwdb(be, F32_FWD));
        void *bdh = bfrom(be, R, n), *bdg = bnan(be, n), *bdu = bnan(be, n);
        be->swiglu_bwd(be, bdg, bdu, bdh, bg, bu, 1, (int)n, (int)n);
        gg[e] = bto(be, bdg, n);
        gu[e] = bto(be, bdu, n);
        free(h);
        void *bufs[] = {bg, bu, bh, bdh, bdg, bdu};
        for (int i = 0; i < 6; i++) be->free(be, bufs[i]);
    }
    if (fd) {
        swi_ctx c = {n, dcopy(g, n), dcopy(u, n), R, dalloc(n)};
        double *fg = dalloc(n), *fu = dalloc(n);
        fd_grad(swi_obj, &c, c.g, n, fg);
        fd_grad(swi_obj, &c, c.u, n, fu);
        snprintf(what, sizeof what, "swiglu_bwd n=%zu |g|~%g dg vs finite diff", n, gscale);
        check_err(what, be64->name, relerr(gg[1], fg, n), FD_BOUND);
        snprintf(what, sizeof what, "swiglu_bwd n=%zu |g|~%g du vs finite diff", n, gscale);
        check_err(what, be64->name, relerr(gu[1], fu, n), FD_BOUND);
        free(c.g);
        free(c.u);
        free(c.h);
        free(fg);
        free(fu);
    }
    snprintf(what, sizeof what, "swiglu_bwd n=%zu |g|~%g dg f32 vs f64", n, gscale);
    check_err(what, be32->name, relerr(gg[0], gg[1], n), F32_BWD);
    snprintf(what, sizeof what, "swiglu_bwd n=%zu |g|~%g du f32 vs f64", n, gscale);
    check_err(what, be32->name, relerr(gu[0], gu[1], n), F32_BWD);
    for (int e = 0; e < 2; e++) {
        free(gg[e]);
        free(gu[e]);
    }
    free(g);
    free(u);
    free(R);
    free(hr);
}

/* ============================================================================================
 * embedding
 * ========================================================================================== */

typedef struct {
    int N, D;
    const int32_t *ids;
    double *table, *R, *out;
} emb_ctx;

static double emb_obj(void *c_)
{
    emb_ctx *c = c_;
    ref_embedding(c->out, c->ids, c->table, c->N, c->D);
    return ddot(c->out, c->R, (size_t)c->N * c->D);
}

static void test_embedding(uint64_t seed, int V, int N, int D, int fd)
{
    size_t nt = (size_t)V * D, no = (size_t)N * D;
    int32_t *ids = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(dx_uniform(seed, 1, i) * V) % V;
    double *table = drand(nt, seed), *R = drand(no, seed + 1), *P = drand(nt, seed + 2);
    double *outr = dalloc(no);
    ref_embedding(outr, ids, table, N, D);
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    double *gt[2];
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bt = bfrom(be, table, nt), *bo = bnan(be, no);
        be->embedding_fwd(be, bo, ids, bt, N, D);
        double *out = bto(be, bo, no);
        snprintf(what, sizeof what, "embedding_fwd V=%d N=%d D=%d", V, N, D);
        check_err(what, be->name, relerr(out, outr, no), 1e-300);
        double *z = calloc(nt, sizeof(double));
        void *bdo = bfrom(be, R, no), *bdt = bfrom(be, z, nt);
        be->embedding_bwd(be, bdt, bdo, ids, N, D);
        gt[e] = bto(be, bdt, nt);
        bset(be, bdt, P, nt);
        be->embedding_bwd(be, bdt, bdo, ids, N, D);
        double *acc = bto(be, bdt, nt), *exp_ = dadd(P, gt[e], nt);
        snprintf(what, sizeof what, "embedding_bwd V=%d N=%d D=%d accumulates (+=)", V, N, D);
        check_err(what, be->name, relerr(acc, exp_, nt), accb(be));
        free(out);
        free(z);
        free(acc);
        free(exp_);
        be->free(be, bt);
        be->free(be, bo);
        be->free(be, bdo);
        be->free(be, bdt);
    }
    if (fd) {
        emb_ctx c = {N, D, ids, dcopy(table, nt), R, dalloc(no)};
        double *fg = dalloc(nt);
        fd_grad(emb_obj, &c, c.table, nt, fg);
        snprintf(what, sizeof what, "embedding_bwd V=%d N=%d D=%d vs finite diff", V, N, D);
        check_err(what, be64->name, relerr(gt[1], fg, nt), FD_BOUND);
        free(c.table);
        free(c.out);
        free(fg);
    }
    snprintf(what, sizeof what, "embedding_bwd V=%d N=%d D=%d f32 vs f64", V, N, D);
    check_err(what, be32->name, relerr(gt[0], gt[1], nt), F32_BWD);
    free(gt[0]);
    free(gt[1]);
    free(ids);
    free(table);
    free(R);
    free(P);
    free(outr);
}

/* ============================================================================================
 * cross entropy
 * ========================================================================================== */

typedef struct {
    int N, V;
    const int32_t *t;
    double *logits, dscale;
} ce_ctx;

static double ce_obj(void *c_)
{
    ce_ctx *c = c_;
    return c->dscale * ref_ce(c->logits, c->t, c->N, c->V);
}

static void test_ce(uint64_t seed, int N, int V, double lscale, double ignore_frac, int fd)
{
    const float dscale = 0.37f;
    const double P = 1.25;
    size_t n = (size_t)N * V;
    int32_t *t = malloc((size_t)N * sizeof(int32_t));
    int nign = 0;
    for (int i = 0; i < N; i++) {
        t[i] = (int32_t)(dx_uniform(seed, 1, i) * V) % V;
        if (dx_uniform(seed, 2, i) < ignore_frac) {
            t[i] = -1;
            nign++;
        }
    }
    double *logits = drand_(n, seed, lscale, 0);
    double lref = ref_ce(logits, t, N, V);
    char what[128], shape[64];
    snprintf(shape, sizeof shape, "N=%d V=%d |z|~%g ignored=%d", N, V, lscale, nign);
    dx_backend *bes[2] = {be32, be64};
    double *gl[2];
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bz = bfrom(be, logits, n), *bdz = bnan(be, n), *bls = bfrom(be, &P, 1);
        be->cross_entropy(be, bls, bdz, bz, t, N, V, dscale);
        double ls;
        bget(be, bls, &ls, 1);
        double got = ls - P;
        snprintf(what, sizeof what, "cross_entropy %s loss (+= prefill)", shape);
        check_err(what, be->name, relerr(&got, &lref, 1), fwdb(be, F32_FWD));
        gl[e] = bto(be, bdz, n);
        int zero_ok = 1;
        for (int i = 0; i < N; i++)
            if (t[i] < 0)
                for (int j = 0; j < V; j++) zero_ok &= gl[e][(size_t)i * V + j] == 0;
        snprintf(what, sizeof what, "cross_entropy %s ignored rows zero grad", shape);
        check(zero_ok, "%-52s %-5s", what, be->name);
        /* dlogits == NULL: same loss */
        double z0 = 0;
        bset(be, bls, &z0, 1);
        be->cross_entropy(be, bls, NULL, bz, t, N, V, dscale);
        double ls2, ls3;
        bget(be, bls, &ls2, 1);
        /* in place: dlogits aliases logits (act == acc), same loss and gradient bitwise */
        bset(be, bls, &z0, 1);
        be->cross_entropy(be, bls, bz, bz, t, N, V, dscale);
        bget(be, bls, &ls3, 1);
        double *ga = bto(be, bz, n);
        int same = memcmp(ga, gl[e], n * sizeof(double)) == 0;
        snprintf(what, sizeof what, "cross_entropy %s NULL dlogits / in-place", shape);
        check(same && ls2 == ls3 && fabs(ls2 - got) <= 1e-6 * fabs(lref) + 1e-6, "%-52s %-5s",
              what, be->name);
        free(ga);
        be->free(be, bz);
        be->free(be, bdz);
        be->free(be, bls);
    }
    if (fd) {
        ce_ctx c = {N, V, t, dcopy(logits, n), dscale};
        double *fg = dalloc(n);
        fd_grad(ce_obj, &c, c.logits, n, fg);
        snprintf(what, sizeof what, "cross_entropy %s dlogits vs finite diff", shape);
        check_err(what, be64->name, relerr(gl[1], fg, n), FD_BOUND);
        free(c.logits);
        free(fg);
    }
    snprintf(what, sizeof what, "cross_entropy %s dlogits f32 vs f64", shape);
    check_err(what, be32->name, relerr(gl[0], gl[1], n), F32_BWD);
    free(gl[0]);
    free(gl[1]);
    free(t);
    free(logits);
}

/* ============================================================================================
 * add, adamw, sumsq, scale, acc_to_act
 * ========================================================================================== */

static void test_add(uint64_t seed, size_t n)
{
    double *a = drand(n, seed), *b = drand(n, seed + 1), *yr = dadd(a, b, n);
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *ba = bfrom(be, a, n), *bb = bfrom(be, b, n), *by = bnan(be, n);
        be->add(be, by, ba, bb, n);
        double *y = bto(be, by, n);
        snprintf(what, sizeof what, "add n=%zu", n);
        check_err(what, be->name, relerr(y, yr, n), fwdb(be, 1e-7));
        be->add(be, ba, ba, bb, n); /* y aliases a */
        be->add(be, bb, by, bb, n); /* y aliases b: b = (a + b) + b */
        double *ya = bto(be, ba, n), *yb = bto(be, bb, n);
        int ok = memcmp(ya, y, n * sizeof(double)) == 0;
        double *r2 = dadd(yr, b, n);
        snprintf(what, sizeof what, "add n=%zu aliased y=a, y=b", n);
        check(ok && relerr(yb, r2, n) < fwdb(be, 1e-7), "%-52s %-5s", what, be->name);
        free(y);
        free(ya);
        free(yb);
        free(r2);
        be->free(be, ba);
        be->free(be, bb);
        be->free(be, by);
    }
    free(a);
    free(b);
    free(yr);
}

static void ref_adamw(double *p, double *m, double *v, const double *g_, size_t n,
                      const dx_adamw_hparams *hp)
{
    for (size_t i = 0; i < n; i++) {
        double g = g_[i] * hp->grad_scale;
        p[i] = p[i] * (1 - hp->lr * hp->weight_decay);
        m[i] = hp->beta1 * m[i] + (1 - hp->beta1) * g;
        v[i] = hp->beta2 * v[i] + (1 - hp->beta2) * g * g;
        double mh = m[i] / (1 - pow(hp->beta1, (double)hp->step));
        double vh = v[i] / (1 - pow(hp->beta2, (double)hp->step));
        p[i] -= hp->lr * mh / (sqrt(vh) + hp->eps);
    }
}

static void test_adamw(uint64_t seed, size_t n)
{
    dx_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = 0.1, .grad_scale = 0.6, .step = 1};
    double *p = drand(n, seed), *g1 = drand(n, seed + 1), *g2 = drand_(n, seed + 2, 0.01, 0);
    double *pr = dcopy(p, n), *mr = calloc(n, sizeof(double)), *vr = calloc(n, sizeof(double));
    ref_adamw(pr, mr, vr, g1, n, &hp);
    hp.step = 2;
    ref_adamw(pr, mr, vr, g2, n, &hp);
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        double *z = calloc(n, sizeof(double));
        void *bp = bfrom(be, p, n), *bm = bfrom(be, z, n), *bv = bfrom(be, z, n);
        void *bg = bfrom(be, g1, n), *bw = bnan(be, n);
        hp.step = 1;
        be->adamw(be, bp, NULL, bg, bm, bv, n, &hp);
        bset(be, bg, g2, n);
        hp.step = 2;
        be->adamw(be, bp, bw, bg, bm, bv, n, &hp);
        double *pp = bto(be, bp, n), *mm = bto(be, bm, n), *vv = bto(be, bv, n), *ww = bto(be, bw, n);
        double bound = is64(be) ? 1e-13 : 1e-6;
        snprintf(what, sizeof what, "adamw n=%zu 2 steps master", n);
        check_err(what, be->name, relerr(pp, pr, n), bound);
        snprintf(what, sizeof what, "adamw n=%zu 2 steps m", n);
        check_err(what, be->name, relerr(mm, mr, n), bound);
        snprintf(what, sizeof what, "adamw n=%zu 2 steps v", n);
        check_err(what, be->name, relerr(vv, vr, n), bound);
        snprintf(what, sizeof what, "adamw n=%zu work == master", n);
        check(memcmp(pp, ww, n * sizeof(double)) == 0, "%-52s %-5s", what, be->name);
        free(z);
        free(pp);
        free(mm);
        free(vv);
        free(ww);
        void *bufs[] = {bp, bm, bv, bg, bw};
        for (int i = 0; i < 5; i++) be->free(be, bufs[i]);
    }
    free(p);
    free(g1);
    free(g2);
    free(pr);
    free(mr);
    free(vr);
}

/* dx_host_adamw (the offload's host update) with bf16 output, at `off` floats past an aligned
 * address (so the streaming-store path's unaligned head runs too), with its streaming stores
 * forced off and on (DX_HOST_ADAMW_STREAM), the latter with the default prefetch distance, none
 * and one block (DX_HOST_ADAMW_PREFETCH), and 1 to 3 threads: master, m and v bitwise the CPU
 * backend's fp32 adamw op, the bf16 output bitwise dx_host_convert_f32 of the master. */
static void test_host_adamw(uint64_t seed, size_t n, size_t off)
{
    dx_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = 0.1, .grad_scale = 0.6, .step = 1};
    double *p = drand(n, seed), *g1 = drand(n, seed + 1), *g2 = drand_(n, seed + 2, 0.01, 0);
    /* the reference: the CPU backend's op, two steps */
    double *z = calloc(n, sizeof(double));
    void *bp = bfrom(be32, p, n), *bm = bfrom(be32, z, n), *bv = bfrom(be32, z, n), *bg = bfrom(be32, g1, n);
    be32->adamw(be32, bp, NULL, bg, bm, bv, n, &hp);
    bset(be32, bg, g2, n);
    hp.step = 2;
    be32->adamw(be32, bp, NULL, bg, bm, bv, n, &hp);
    const float *rp = bp, *rm = bm, *rv = bv;
    uint16_t *want = malloc(n * 2 + 2);
    dx_host_convert_f32(want, DX_BF16, rp, n);
    float *buf = aligned_alloc(64, (4 * (n + off) * sizeof(float) + 63) / 64 * 64);
    uint16_t *obuf = aligned_alloc(64, ((n + off) * 2 + 63) / 64 * 64);
    static const char *const pf[] = {"", "", "0", "64"}; /* per mode: "" = the default distance */
    for (int mode = 0; mode < 4; mode++)
        for (int nt = 1; nt <= 3; nt++) {
            float *hpm = buf + off, *hm = hpm + n + off, *hv = hm + n + off, *hg = hv + n + off;
            uint16_t *out = obuf + off;
            for (size_t i = 0; i < n; i++) hpm[i] = (float)p[i], hm[i] = hv[i] = 0, hg[i] = (float)g1[i];
            setenv("DX_HOST_ADAMW_STREAM", mode ? "1" : "0", 1);
            setenv("DX_HOST_ADAMW_PREFETCH", pf[mode], 1);
            hp.step = 1;
            dx_host_adamw(hpm, hm, hv, hg, out, DX_BF16, n, &hp, nt);
            for (size_t i = 0; i < n; i++) hg[i] = (float)g2[i];
            memset(out, 0xff, n * 2);
            hp.step = 2;
            dx_host_adamw(hpm, hm, hv, hg, out, DX_BF16, n, &hp, nt);
            int ok = !memcmp(hpm, rp, n * 4) && !memcmp(hm, rm, n * 4) && !memcmp(hv, rv, n * 4) &&
                     !memcmp(out, want, n * 2);
            check(ok, "host adamw n=%zu +%zu, %d thread(s), streaming %s, prefetch '%s' = cpu op (bitwise)", n, off,
                  nt, mode ? "on" : "off", pf[mode]);
        }
    unsetenv("DX_HOST_ADAMW_STREAM");
    unsetenv("DX_HOST_ADAMW_PREFETCH");
    void *bb[] = {bp, bm, bv, bg};
    for (int i = 0; i < 4; i++) be32->free(be32, bb[i]);
    free(buf);
    free(obuf);
    free(want);
    free(z);
    free(p);
    free(g1);
    free(g2);
}

/* dx_host_adamw_redo (the repair of the offload's speculative early update): a step run with
 * gradient factor 1 and then redone with factor `scale` against the step run with `scale`
 * directly, from fresh states (step 1: m = v = 0, v made only of this gradient) and from states
 * one step old; 1 and 3 threads, f32 and bf16 output. Bound: 1e-6 relative (RMS) on master, m
 * and v, a few fp32 ulps; the bf16 output bitwise the conversion of the repaired master. */
static void test_host_adamw_redo(uint64_t seed, size_t n, double scale)
{
    dx_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    double *p = drand(n, seed), *g1 = drand(n, seed + 1), *g2 = drand_(n, seed + 2, 3.0, 0);
    float *a = malloc(3 * n * sizeof(float)), *b = malloc(3 * n * sizeof(float)), *g = malloc(n * sizeof(float));
    uint16_t *oa = malloc(n * 2 + 2), *ob = malloc(n * 2 + 2), *conv = malloc(n * 2 + 2);
    double *x = dalloc(n), *y = dalloc(n);
    for (int old = 0; old < 2; old++)
        for (int nt = 1; nt <= 3; nt += 2) {
            for (size_t i = 0; i < n; i++) a[i] = (float)p[i], a[n + i] = a[2 * n + i] = 0;
            if (old) { /* one ordinary step first */
                for (size_t i = 0; i < n; i++) g[i] = (float)g1[i];
                hp.grad_scale = 1.0, hp.step = 1;
                dx_host_adamw(a, a + n, a + 2 * n, g, oa, DX_BF16, n, &hp, nt);
            }
            memcpy(b, a, 3 * n * sizeof(float));
            for (size_t i = 0; i < n; i++) g[i] = (float)g2[i];
            hp.step = old ? 2 : 1;
            hp.grad_scale = scale; /* direct */
            dx_host_adamw(a, a + n, a + 2 * n, g, oa, DX_BF16, n, &hp, nt);
            hp.grad_scale = 1.0; /* speculative, then repaired */
            dx_host_adamw(b, b + n, b + 2 * n, g, ob, DX_BF16, n, &hp, nt);
            hp.grad_scale = scale;
            dx_host_adamw_redo(b, b + n, b + 2 * n, g, ob, DX_BF16, n, &hp, nt);
            static const char *const nm[3] = {"master", "m", "v"};
            for (int k = 0; k < 3; k++) {
                for (size_t i = 0; i < n; i++) x[i] = b[k * n + i], y[i] = a[k * n + i];
                char what[128];
                snprintf(what, sizeof what, "host adamw redo x%.3g %s, %s states, %d thr", scale, nm[k],
                         old ? "1-step" : "fresh", nt);
                check_err(what, "cpu", relerr(x, y, n), 1e-6);
            }
            dx_host_convert_f32(conv, DX_BF16, b, n);
            check(!memcmp(conv, ob, n * 2), "host adamw redo n=%zu bf16 output = the repaired master", n);
            float *fo = malloc(n * sizeof(float));
            memcpy(b, a, 3 * n * sizeof(float)); /* f32 output: the master itself */
            hp.grad_scale = 1.0;
            dx_host_adamw(b, b + n, b + 2 * n, g, fo, DX_F32, n, &hp, nt);
            hp.grad_scale = scale;
            dx_host_adamw_redo(b, b + n, b + 2 * n, g, fo, DX_F32, n, &hp, nt);
            check(!memcmp(fo, b, n * sizeof(float)), "host adamw redo n=%zu f32 output = the repaired master", n);
            free(fo);
        }
    free(a);
    free(b);
    free(g);
    free(oa);
    free(ob);
    free(conv);
    free(x);
    free(y);
    free(p);
    free(g1);
    free(g2);
}

static void test_sumsq_scale_copy(uint64_t seed, size_t n)
{
    double *x = drand(n, seed);
    double P = 2.5, ref = ddot(x, x, n);
    const float s = 0.37f;
    double *xs = dalloc(n);
    for (size_t i = 0; i < n; i++) xs[i] = x[i] * (double)s;
    char what[128];
    dx_backend *bes[2] = {be32, be64};
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        void *bx = bfrom(be, x, n), *bo = bfrom(be, &P, 1), *bd = bnan(be, n);
        be->sumsq(be, bo, bx, n);
        double got;
        bget(be, bo, &got, 1);
        got -= P;
        snprintf(what, sizeof what, "sumsq n=%zu (+= prefill)", n);
        check_err(what, be->name, relerr(&got, &ref, 1), fwdb(be, 1e-6));
        be->acc_to_act(be, bd, bx, n);
        double *c = bto(be, bd, n);
        snprintf(what, sizeof what, "acc_to_act n=%zu", n);
        check_err(what, be->name, relerr(c, x, n), 1e-300);
        void *b2 = bfrom(be, x, n);
        be->acc_add_act(be, b2, bd, n);
        double *c2 = bto(be, b2, n);
        for (size_t i = 0; i < n; i++) c2[i] *= 0.5; /* x + x, exact */
        snprintf(what, sizeof what, "acc_add_act n=%zu", n);
        check_err(what, be->name, relerr(c2, x, n), 1e-300);
        free(c2);
        be->free(be, b2);
        be->scale(be, bx, n, s);
        double *y = bto(be, bx, n);
        snprintf(what, sizeof what, "scale n=%zu", n);
        check_err(what, be->name, relerr(y, xs, n), fwdb(be, 1e-7));
        free(c);
        free(y);
        be->free(be, bx);
        be->free(be, bo);
        be->free(be, bd);
    }
    free(x);
    free(xs);
}

/* ============================================================================================
 * memory accounting, transfers
 * ========================================================================================== */

static void test_mem(void)
{
    dx_backend *be = dx_backend_cpu_create(1);
    dx_mem_stats *s = &be->mem;
    void *a = be->alloc(be, 100, DX_MEM_PARAMS);
    void *b = be->alloc(be, 1000, DX_MEM_GRADS);
    void *c = be->alloc(be, 64, DX_MEM_PARAMS);
    int ok = a && b && c && ((uintptr_t)a % 64 == 0) && ((uintptr_t)b % 64 == 0) &&
             ((uintptr_t)c % 64 == 0);
    check(ok, "alloc returns 64-byte aligned pointers");
    check(s->current[DX_MEM_PARAMS] == 164 && s->current[DX_MEM_GRADS] == 1000 &&
              s->current_total == 1164 && s->peak_total == 1164,
          "alloc counts current per category and total");
    be->free(be, b);
    void *d = be->alloc(be, 50, DX_MEM_OTHER);
    check(s->current[DX_MEM_GRADS] == 0 && s->peak[DX_MEM_GRADS] == 1000 &&
              s->current_total == 214 && s->peak_total == 1164 && s->peak[DX_MEM_OTHER] == 50,
          "free uncounts; peaks kept");
    be->free(be, NULL);
    be->free(be, a);
    be->free(be, c);
    be->free(be, d);
    int zero = s->current_total == 0;
    for (int k = 0; k < DX_MEM_NCAT; k++) zero &= s->current[k] == 0;
    check(zero && s->peak[DX_MEM_PARAMS] == 164 && s->peak_total == 1164,
          "all freed: current 0, peaks right");
    /* transfers */
    float src[5] = {1.5f, -2.25f, 3e-5f, 1e20f, 0}, back[5];
    void *p = be->alloc(be, 5 * sizeof(double), DX_MEM_OTHER);
    ok = 1;
    dx_dtype dts[3] = {DX_F32, DX_F64, DX_BF16};
    for (int k = 0; k < 3; k++) {
        ok &= be->upload_f32(be, p, dts[k], src, 5) == 0 && be->download_f32(be, back, p, dts[k], 5) == 0;
        for (int i = 0; i < 5; i++)
            ok &= fabsf(back[i] - src[i]) <= (dts[k] == DX_BF16 ? 4e-3f * fabsf(src[i]) : 0);
    }
    check(ok, "upload_f32/download_f32 round trip f32, f64, bf16");
    be->free(be, p);
    check(dx_dtype_size(DX_F32) == 4 && dx_dtype_size(DX_F64) == 8 && dx_dtype_size(DX_BF16) == 2 &&
              !strcmp(dx_dtype_name(DX_F64), "f64") && !strcmp(dx_mem_cat_name(DX_MEM_OPTIM), "optim"),
          "dtype sizes and names");
    be->destroy(be);
}

/* ============================================================================================
 * determinism across thread counts (f32)
 * ========================================================================================== */

static void test_determinism(void)
{
    int nts[3] = {1, 2, 3};
    dx_backend *bs[3];
    for (int i = 0; i < 3; i++) bs[i] = dx_backend_cpu_create(nts[i]);
    /* attention_bwd */
    {
        int B = 2, T = 80, H = 4, Hkv = 2, Dh = 16;
        size_t nq = (size_t)B * T * H * Dh, nk = (size_t)B * T * Hkv * Dh, nl = (size_t)B * H * T;
        double *q = drand(nq, 901), *k = drand(nk, 902), *v = drand(nk, 903), *R = drand(nq, 904);
        float *out[3];
        for (int r = 0; r < 3; r++) {
            dx_backend *be = bs[r];
            void *bq = bfrom(be, q, nq), *bk = bfrom(be, k, nk), *bv = bfrom(be, v, nk);
            void *bo = bnan(be, nq), *bl = bnan(be, nl), *bdo = bfrom(be, R, nq);
            void *bdq = bnan(be, nq), *bdk = bnan(be, nk), *bdv = bnan(be, nk);
            be->attention_fwd(be, bo, bl, bq, bk, bv, H * Dh, Hkv * Dh, B, T, H, Hkv, Dh);
            be->attention_bwd(be, bdq, bdk, bdv, bdo, bq, bk, bv, bo, bl, H * Dh, Hkv * Dh, B, T, H, Hkv, Dh);
            out[r] = malloc((nq * 2 + nk * 2 + nl) * sizeof(float));
            memcpy(out[r], bo, nq * 4);
            memcpy(out[r] + nq, bl, nl * 4);
            memcpy(out[r] + nq + nl, bdq, nq * 4);
            memcpy(out[r] + 2 * nq + nl, bdk, nk * 4);
            memcpy(out[r] + 2 * nq + nl + nk, bdv, nk * 4);
            void *bufs[] = {bq, bk, bv, bo, bl, bdo, bdq, bdk, bdv};
            for (int i = 0; i < 9; i++) be->free(be, bufs[i]);
        }
        size_t tot = (nq * 2 + nk * 2 + nl) * sizeof(float);
        check(!memcmp(out[0], out[1], tot) && !memcmp(out[0], out[2], tot),
              "attention fwd+bwd f32 B=2 T=80 bitwise equal with 1, 2, 3 threads");
        for (int r = 0; r < 3; r++) free(out[r]);
        free(q);
        free(k);
        free(v);
        free(R);
    }
    /* rmsnorm_bwd, cross_entropy, sumsq, embedding_bwd */
    {
        int N = 300, D = 200, V = 150;
        size_t n = (size_t)N * D;
        double *x = drand(n, 911), *w = drand(D, 912), *R = drand(n, 913), *P = drand(n, 914);
        double *tab = drand((size_t)V * D, 915);
        int32_t *ids = malloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N; i++) ids[i] = (int32_t)(dx_uniform(916, 0, i) * V) % V;
        float *out[3];
        size_t tot = n + D + n + 2 + (size_t)V * D;
        for (int r = 0; r < 3; r++) {
            dx_backend *be = bs[r];
            void *bx = bfrom(be, x, n), *bw = bfrom(be, w, D), *by = bnan(be, n), *brs = bnan(be, N);
            void *bdy = bfrom(be, R, n), *bdx = bfrom(be, P, n), *bdw = bfrom(be, P, D);
            void *bls = bfrom(be, P, 1), *bss = bfrom(be, P, 1), *bdt = bfrom(be, tab, (size_t)V * D);
            be->rmsnorm_fwd(be, by, brs, bx, bw, N, D, 1e-5f);
            be->rmsnorm_bwd(be, bdx, bdw, bdy, bx, bw, brs, N, D);
            be->cross_entropy(be, bls, by, by, ids, N, D, 0.5f);
            be->sumsq(be, bss, bdx, n);
            be->embedding_bwd(be, bdt, bdy, ids, N, D);
            out[r] = malloc(tot * sizeof(float));
            memcpy(out[r], bdx, n * 4);
            memcpy(out[r] + n, bdw, D * 4);
            memcpy(out[r] + n + D, by, n * 4);
            memcpy(out[r] + 2 * n + D, bls, 4);
            memcpy(out[r] + 2 * n + D + 1, bss, 4);
            memcpy(out[r] + 2 * n + D + 2, bdt, (size_t)V * D * 4);
            void *bufs[] = {bx, bw, by, brs, bdy, bdx, bdw, bls, bss, bdt};
            for (int i = 0; i < 10; i++) be->free(be, bufs[i]);
        }
        check(!memcmp(out[0], out[1], tot * 4) && !memcmp(out[0], out[2], tot * 4),
              "rmsnorm_bwd, cross_entropy, sumsq, embedding_bwd f32 N=300 D=200 bitwise equal "
              "with 1, 2, 3 threads");
        for (int r = 0; r < 3; r++) free(out[r]);
        free(x);
        free(w);
        free(R);
        free(P);
        free(tab);
        free(ids);
    }
    for (int i = 0; i < 3; i++) bs[i]->destroy(bs[i]);
}

/* ============================================================================================ */

/* Tensor parallelism: the tp vocabulary slices of embedding_vp_* and ce_vp_* together equal
 * embedding_* and cross_entropy on the whole vocabulary. */
static void test_tp_vocab(uint64_t seed, int N, int V, int D, int tp)
{
    const float dscale = 0.37f;
    const int Vl = V / tp;
    char what[160], shape[64];
    snprintf(shape, sizeof shape, "N=%d V=%d D=%d tp=%d", N, V, D, tp);
    int32_t *ids = malloc((size_t)N * sizeof(int32_t)), *t = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)(dx_uniform(seed, 3, i) * V) % V;
        t[i] = dx_uniform(seed, 2, i) < 0.2 ? -1 : (int32_t)(dx_uniform(seed, 1, i) * V) % V;
    }
    double *table = drand_((size_t)V * D, seed, 1, 0), *dout = drand_((size_t)N * D, seed + 1, 1, 0);
    double *logits = drand_((size_t)N * V, seed + 2, 3, 0);
    dx_backend *bes[2] = {be32, be64};
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        const double bound = is64(be) ? 1e-12 : 1e-6;
        /* embedding: the slices' rows summed = the full lookup; the slices' gradients side by side
         * = the full gradient */
        void *bt = bfrom(be, table, (size_t)V * D), *bo = bnan(be, (size_t)N * D), *bdo = bfrom(be, dout, (size_t)N * D);
        void *bdt = bnan(be, (size_t)V * D);
        be->zero(be, bdt, (size_t)V * D * dx_dtype_size(be->acc));
        be->embedding_fwd(be, bo, ids, bt, N, D);
        be->embedding_bwd(be, bdt, bdo, ids, N, D);
        double *full = bto(be, bo, (size_t)N * D), *dfull = bto(be, bdt, (size_t)V * D);
        double *sum = calloc((size_t)N * D, sizeof(double)), *dcat = malloc((size_t)V * D * sizeof(double));
        for (int r = 0; r < tp; r++) {
            void *st = bfrom(be, table + (size_t)r * Vl * D, (size_t)Vl * D), *so = bnan(be, (size_t)N * D);
            double pre = 0.5;
            double *prefill = malloc((size_t)Vl * D * sizeof(double));
            for (size_t i = 0; i < (size_t)Vl * D; i++) prefill[i] = pre;
            void *sdt = bfrom(be, prefill, (size_t)Vl * D);
            be->embedding_vp_fwd(be, so, ids, st, N, D, r * Vl, Vl);
            be->embedding_vp_bwd(be, sdt, bdo, ids, N, D, r * Vl, Vl);
            double *o = bto(be, so, (size_t)N * D), *d = bto(be, sdt, (size_t)Vl * D);
            for (size_t i = 0; i < (size_t)N * D; i++) sum[i] += o[i];
            for (size_t i = 0; i < (size_t)Vl * D; i++) dcat[(size_t)r * Vl * D + i] = d[i] - pre;
            free(o);
            free(d);
            free(prefill);
            be->free(be, st);
            be->free(be, so);
            be->free(be, sdt);
        }
        snprintf(what, sizeof what, "embedding_vp_fwd %s: slices sum to embedding_fwd", shape);
        check(memcmp(sum, full, (size_t)N * D * sizeof(double)) == 0, "%-60s %-5s", what, be->name);
        snprintf(what, sizeof what, "embedding_vp_bwd %s (+=): slices = embedding_bwd", shape);
        check_err(what, be->name, relerr(dcat, dfull, (size_t)V * D), bound);
        free(full);
        free(dfull);
        free(sum);
        free(dcat);
        be->free(be, bt);
        be->free(be, bo);
        be->free(be, bdo);
        be->free(be, bdt);

        /* cross-entropy: stats of each slice, gathered in rank order, then each slice's finish */
        const double P = 1.25, z0 = 0;
        void *bz = bfrom(be, logits, (size_t)N * V), *bdz = bnan(be, (size_t)N * V), *bl = bfrom(be, &z0, 1);
        be->cross_entropy(be, bl, bdz, bz, t, N, V, dscale);
        double lref;
        bget(be, bl, &lref, 1);
        double *dref = bto(be, bdz, (size_t)N * V);
        double *zs = malloc((size_t)N * Vl * sizeof(double)), *gath = malloc((size_t)tp * N * 2 * sizeof(double));
        for (int r = 0; r < tp; r++) {
            for (int i = 0; i < N; i++) memcpy(zs + (size_t)i * Vl, logits + (size_t)i * V + (size_t)r * Vl, (size_t)Vl * sizeof(double));
            void *sz = bfrom(be, zs, (size_t)N * Vl), *ss = bnan(be, (size_t)N * 2);
            be->ce_vp_stats(be, ss, sz, t, N, Vl, r * Vl);
            bget(be, ss, gath + (size_t)r * N * 2, (size_t)N * 2);
            be->free(be, sz);
            be->free(be, ss);
        }
        void *bg = bfrom(be, gath, (size_t)tp * N * 2);
        double worst_loss = 0;
        int same_partial = 1; /* loss_sum or dlogits NULL, dlogits aliasing logits: same bits */
        double *dcat2 = malloc((size_t)N * V * sizeof(double));
        for (int r = 0; r < tp; r++) {
            for (int i = 0; i < N; i++) memcpy(zs + (size_t)i * Vl, logits + (size_t)i * V + (size_t)r * Vl, (size_t)Vl * sizeof(double));
            void *sz = bfrom(be, zs, (size_t)N * Vl), *sd = bnan(be, (size_t)N * Vl), *sl = bfrom(be, &P, 1);
            be->ce_vp_finish(be, sl, sd, sz, bg, tp, t, N, Vl, r * Vl, dscale);
            double l;
            bget(be, sl, &l, 1);
            double err = fabs((l - P) - lref) / fabs(lref);
            if (err > worst_loss) worst_loss = err;
            double *d = bto(be, sd, (size_t)N * Vl);
            for (int i = 0; i < N; i++) memcpy(dcat2 + (size_t)i * V + (size_t)r * Vl, d + (size_t)i * Vl, (size_t)Vl * sizeof(double));
            void *sl2 = bfrom(be, &P, 1), *sa = bfrom(be, zs, (size_t)N * Vl);
            be->ce_vp_finish(be, sl2, NULL, sz, bg, tp, t, N, Vl, r * Vl, dscale);
            be->ce_vp_finish(be, NULL, sa, sa, bg, tp, t, N, Vl, r * Vl, dscale); /* act == acc */
            double l2, *da = bto(be, sa, (size_t)N * Vl);
            bget(be, sl2, &l2, 1);
            if (l2 != l || memcmp(da, d, (size_t)N * Vl * sizeof(double)) != 0) same_partial = 0;
            free(da);
            free(d);
            be->free(be, sz);
            be->free(be, sd);
            be->free(be, sl);
            be->free(be, sl2);
            be->free(be, sa);
        }
        snprintf(what, sizeof what, "ce_vp %s: every slice's loss (+=) = cross_entropy", shape);
        check_err(what, be->name, worst_loss, bound);
        snprintf(what, sizeof what, "ce_vp %s: slices' dlogits = cross_entropy's", shape);
        check_err(what, be->name, relerr(dcat2, dref, (size_t)N * V), bound);
        snprintf(what, sizeof what, "ce_vp_finish %s: NULL loss/dlogits, aliased", shape);
        check(same_partial, "%-60s %-5s (bitwise)", what, be->name);
        free(dcat2);
        free(dref);
        free(zs);
        free(gath);
        be->free(be, bg);
        be->free(be, bz);
        be->free(be, bdz);
        be->free(be, bl);
    }
    free(ids);
    free(t);
    free(table);
    free(dout);
    free(logits);
}

/* ============================================================================================
 * row-strided layouts: the model keeps k|v and gate|up as the column blocks of one fused GEMM
 * output. On every backend, rope, attention and SwiGLU on the strided layout give bitwise the
 * dense results and leave the rest of each row alone.
 * ========================================================================================== */

/* [rows, ld] from dense [rows, cols] blocks a (columns 0..cols) and b (cols..2 cols, if not NULL);
 * other entries = fill */
static double *dwide(const double *a, const double *b, size_t rows, size_t cols, size_t ld, double fill)
{
    double *w = dalloc(rows * ld);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++)
            w[r * ld + c] = c < cols ? a[r * cols + c] : (b && c < 2 * cols) ? b[r * cols + c - cols] : fill;
    return w;
}

/* whether block `blk` (columns blk*cols ..) of the strided w equals dense d bitwise */
static int same_block(const double *w, const double *d, size_t rows, size_t cols, size_t ld, size_t blk)
{
    for (size_t r = 0; r < rows; r++)
        if (memcmp(w + r * ld + blk * cols, d + r * cols, cols * sizeof(double))) return 0;
    return 1;
}

/* whether columns from..ld of every row still equal fill */
static int gap_is(const double *w, size_t rows, size_t from, size_t ld, double fill)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = from; c < ld; c++)
            if (w[r * ld + c] != fill) return 0;
    return 1;
}

static void test_strided(uint64_t seed, int B, int T, int H, int Hkv, int Dh, int I)
{
    const size_t rows = (size_t)B * T, qd = (size_t)H * Dh, kd = (size_t)Hkv * Dh;
    const size_t nq = rows * qd, nk = rows * kd, nl = (size_t)B * H * T, ni = rows * (size_t)I;
    const double fill = 3.25;
    dx_backend *bes[2] = {be32, be64};
    for (int e = 0; e < 2; e++) {
        dx_backend *be = bes[e];
        char what[128];
        /* rope on rows of ld = kd + 5 (the gap must stay) */
        {
            const size_t ld = kd + 5;
            double *x = drand(nk, seed);
            double *xw = dwide(x, NULL, rows, kd, ld, fill);
            void *bd = bfrom(be, x, nk), *bw = bfrom(be, xw, rows * ld);
            be->rope_fwd(be, bd, (int)kd, B, T, Hkv, Dh, 10000.0f);
            be->rope_fwd(be, bw, (int)ld, B, T, Hkv, Dh, 10000.0f);
            be->rope_bwd(be, bd, (int)kd, B, T, Hkv, Dh, 10000.0f);
            be->rope_bwd(be, bw, (int)ld, B, T, Hkv, Dh, 10000.0f);
            double *d = bto(be, bd, nk), *w = bto(be, bw, rows * ld);
            snprintf(what, sizeof what, "rope fwd+bwd, rows of %zu = dense, gap kept", ld);
            check(same_block(w, d, rows, kd, ld, 0) && gap_is(w, rows, kd, ld, fill), "%-52s %-5s", what, be->name);
            free(x), free(xw), free(d), free(w);
            be->free(be, bd), be->free(be, bw);
        }
        /* attention with k|v in one [rows, 2 kd] buffer, dk|dv likewise */
        {
            double *q = drand(nq, seed + 1), *k = drand(nk, seed + 2), *v = drand(nk, seed + 3);
            double *dout = drand(nq, seed + 4), *kv = dwide(k, v, rows, kd, 2 * kd, fill);
            void *bq = bfrom(be, q, nq), *bk = bfrom(be, k, nk), *bv = bfrom(be, v, nk);
            void *bkv = bfrom(be, kv, 2 * nk), *bdo = bfrom(be, dout, nq);
            void *bo[2] = {bnan(be, nq), bnan(be, nq)}, *bl[2] = {bnan(be, nl), bnan(be, nl)};
            void *bdq[2] = {bnan(be, nq), bnan(be, nq)}, *bdk = bnan(be, nk), *bdv = bnan(be, nk);
            void *bdkv = bnan(be, 2 * nk);
            const size_t es = dx_dtype_size(be->act);
            void *bv2 = (char *)bkv + kd * es, *bdv2 = (char *)bdkv + kd * es;
            be->attention_fwd(be, bo[0], bl[0], bq, bk, bv, (int)qd, (int)kd, B, T, H, Hkv, Dh);
            be->attention_fwd(be, bo[1], bl[1], bq, bkv, bv2, (int)qd, (int)(2 * kd), B, T, H, Hkv, Dh);
            be->attention_bwd(be, bdq[0], bdk, bdv, bdo, bq, bk, bv, bo[0], bl[0], (int)qd, (int)kd, B, T, H, Hkv, Dh);
            be->attention_bwd(be, bdq[1], bdkv, bdv2, bdo, bq, bkv, bv2, bo[1], bl[1], (int)qd, (int)(2 * kd), B, T, H,
                              Hkv, Dh);
            double *o0 = bto(be, bo[0], nq), *o1 = bto(be, bo[1], nq), *l0 = bto(be, bl[0], nl);
            double *l1 = bto(be, bl[1], nl), *q0 = bto(be, bdq[0], nq), *q1 = bto(be, bdq[1], nq);
            double *dk = bto(be, bdk, nk), *dv = bto(be, bdv, nk), *dkv = bto(be, bdkv, 2 * nk);
            int ok = !memcmp(o0, o1, nq * sizeof(double)) && !memcmp(l0, l1, nl * sizeof(double)) &&
                     !memcmp(q0, q1, nq * sizeof(double)) && same_block(dkv, dk, rows, kd, 2 * kd, 0) &&
                     same_block(dkv, dv, rows, kd, 2 * kd, 1);
            check(ok, "%-52s %-5s", "attention fwd+bwd, K|V fused = dense (bitwise)", be->name);
            double *fr[] = {q, k, v, dout, kv, o0, o1, l0, l1, q0, q1, dk, dv, dkv};
            for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
            void *bb[] = {bq, bk, bv, bkv, bdo, bo[0], bo[1], bl[0], bl[1], bdq[0], bdq[1], bdk, bdv, bdkv};
            for (size_t i = 0; i < sizeof bb / sizeof bb[0]; i++) be->free(be, bb[i]);
        }
        /* attention with q|k|v in one [rows, qd + 2 kd + 8] buffer (the model's Q|K|V GEMM output,
         * plus an 8-column gap), dq|dk|dv likewise: bitwise the dense results, the gap kept */
        {
            const size_t ld3 = qd + 2 * kd + 8;
            double *q = drand(nq, seed + 11), *k = drand(nk, seed + 12), *v = drand(nk, seed + 13);
            double *dout = drand(nq, seed + 14), *qkv = dalloc(rows * ld3), *filled = dalloc(rows * ld3);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < ld3; c++) {
                    qkv[r * ld3 + c] = c < qd ? q[r * qd + c] : c < qd + kd ? k[r * kd + c - qd]
                                     : c < qd + 2 * kd ? v[r * kd + c - qd - kd] : fill;
                    filled[r * ld3 + c] = fill;
                }
            const size_t es = dx_dtype_size(be->act);
            void *bq = bfrom(be, q, nq), *bk = bfrom(be, k, nk), *bv = bfrom(be, v, nk), *bdo = bfrom(be, dout, nq);
            void *bqkv = bfrom(be, qkv, rows * ld3), *bdqkv = bfrom(be, filled, rows * ld3);
            void *bo[2] = {bnan(be, nq), bnan(be, nq)}, *bl[2] = {bnan(be, nl), bnan(be, nl)};
            void *bdq = bnan(be, nq), *bdk = bnan(be, nk), *bdv = bnan(be, nk);
            void *fk = (char *)bqkv + qd * es, *fv = (char *)bqkv + (qd + kd) * es;
            void *fdk = (char *)bdqkv + qd * es, *fdv = (char *)bdqkv + (qd + kd) * es;
            be->attention_fwd(be, bo[0], bl[0], bq, bk, bv, (int)qd, (int)kd, B, T, H, Hkv, Dh);
            be->attention_fwd(be, bo[1], bl[1], bqkv, fk, fv, (int)ld3, (int)ld3, B, T, H, Hkv, Dh);
            be->attention_bwd(be, bdq, bdk, bdv, bdo, bq, bk, bv, bo[0], bl[0], (int)qd, (int)kd, B, T, H, Hkv, Dh);
            be->attention_bwd(be, bdqkv, fdk, fdv, bdo, bqkv, fk, fv, bo[1], bl[1], (int)ld3, (int)ld3, B, T, H,
                              Hkv, Dh);
            double *o0 = bto(be, bo[0], nq), *o1 = bto(be, bo[1], nq), *l0 = bto(be, bl[0], nl);
            double *l1 = bto(be, bl[1], nl), *dq = bto(be, bdq, nq), *dk = bto(be, bdk, nk);
            double *dv = bto(be, bdv, nk), *w = bto(be, bdqkv, rows * ld3);
            int ok = !memcmp(o0, o1, nq * sizeof(double)) && !memcmp(l0, l1, nl * sizeof(double)) &&
                     gap_is(w, rows, qd + 2 * kd, ld3, fill);
            for (size_t r = 0; r < rows && ok; r++)
                ok = !memcmp(w + r * ld3, dq + r * qd, qd * sizeof(double)) &&
                     !memcmp(w + r * ld3 + qd, dk + r * kd, kd * sizeof(double)) &&
                     !memcmp(w + r * ld3 + qd + kd, dv + r * kd, kd * sizeof(double));
            check(ok, "%-52s %-5s", "attention fwd+bwd, Q|K|V fused = dense (bitwise)", be->name);
            double *fr[] = {q, k, v, dout, qkv, filled, o0, o1, l0, l1, dq, dk, dv, w};
            for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
            void *bb[] = {bq, bk, bv, bdo, bqkv, bdqkv, bo[0], bo[1], bl[0], bl[1], bdq, bdk, bdv};
            for (size_t i = 0; i < sizeof bb / sizeof bb[0]; i++) be->free(be, bb[i]);
        }
        /* SwiGLU with g|u in one [rows, 2I] buffer, dg|du likewise */
        {
            double *g = drand_(ni, seed + 5, 3.0, 0), *u = drand(ni, seed + 6), *dh = drand(ni, seed + 7);
            double *gu = dwide(g, u, rows, (size_t)I, 2 * (size_t)I, fill);
            const size_t es = dx_dtype_size(be->act);
            void *bg = bfrom(be, g, ni), *bu = bfrom(be, u, ni), *bgu = bfrom(be, gu, 2 * ni);
            void *bdh = bfrom(be, dh, ni), *bh[2] = {bnan(be, ni), bnan(be, ni)};
            void *bdg = bnan(be, ni), *bdu = bnan(be, ni), *bdgu = bnan(be, 2 * ni);
            be->swiglu_fwd(be, bh[0], bg, bu, (int)rows, I, I);
            be->swiglu_fwd(be, bh[1], bgu, (char *)bgu + (size_t)I * es, (int)rows, I, 2 * I);
            be->swiglu_bwd(be, bdg, bdu, bdh, bg, bu, (int)rows, I, I);
            be->swiglu_bwd(be, bdgu, (char *)bdgu + (size_t)I * es, bdh, bgu, (char *)bgu + (size_t)I * es,
                           (int)rows, I, 2 * I);
            double *h0 = bto(be, bh[0], ni), *h1 = bto(be, bh[1], ni), *dg = bto(be, bdg, ni);
            double *du = bto(be, bdu, ni), *dgu = bto(be, bdgu, 2 * ni);
            int ok = !memcmp(h0, h1, ni * sizeof(double)) && same_block(dgu, dg, rows, (size_t)I, 2 * (size_t)I, 0) &&
                     same_block(dgu, du, rows, (size_t)I, 2 * (size_t)I, 1);
            check(ok, "%-52s %-5s", "swiglu fwd+bwd, gate|up fused = dense (bitwise)", be->name);
            double *fr[] = {g, u, dh, gu, h0, h1, dg, du, dgu};
            for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
            void *bb[] = {bg, bu, bgu, bdh, bh[0], bh[1], bdg, bdu, bdgu};
            for (size_t i = 0; i < sizeof bb / sizeof bb[0]; i++) be->free(be, bb[i]);
        }
    }
}

int main(void)
{
    be32 = dx_backend_cpu_create(2);
    be64 = dx_backend_cpu64_create(2);
    if (!be32 || !be64) {
        fprintf(stderr, "backend: %s\n", dx_last_error());
        return 2;
    }
    uint64_t seed = 1000;

    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            test_gemm(seed += 10, ta, tb, 7, 13, 5, 0.0);
            test_gemm(seed += 10, ta, tb, 33, 17, 29, 0.5);
        }
    test_gemm(seed += 10, 0, 1, 1, 1, 1, 0.0);
    test_gemm(seed += 10, 0, 0, 5, 6, 0, 0.5); /* K = 0: C = beta C */
    test_gemm(seed += 10, 1, 0, 5, 6, 0, 0.0);
    test_gemm(seed += 10, 0, 1, 64, 96, 200, 1.0);

    test_rmsnorm(seed += 10, 7, 13, 1);
    test_rmsnorm(seed += 10, 1, 5, 1);
    test_rmsnorm(seed += 10, 5, 64, 1);
    test_rmsnorm(seed += 10, 33, 130, 1);

    test_rope(seed += 10, 2, 9, 4, 8, 1);
    test_rope(seed += 10, 1, 1, 1, 2, 1);
    test_rope(seed += 10, 2, 5, 3, 6, 1);
    test_rope(seed += 10, 2, 64, 4, 32, 0);

    test_attention(seed += 10, 2, 9, 4, 2, 8, 1.0, 1);
    test_attention(seed += 10, 2, 9, 4, 4, 8, 1.0, 1);
    test_attention(seed += 10, 2, 1, 4, 2, 8, 1.0, 1);
    test_attention(seed += 10, 1, 70, 2, 1, 4, 2.0, 1); /* > 1 online-softmax block */
    test_attention(seed += 10, 2, 150, 4, 2, 16, 2.0, 0);

    test_swiglu(seed += 10, 7, 3.0, 1);
    test_swiglu(seed += 10, 1000, 3.0, 1);
    test_swiglu(seed += 10, 1000, 40.0, 1); /* exp(-g) under- and overflows */
    test_swiglu(seed += 10, 100003, 3.0, 0);

    test_strided(seed += 10, 2, 9, 4, 2, 8, 13);
    test_strided(seed += 10, 1, 70, 2, 1, 4, 64);

    test_embedding(seed += 10, 11, 30, 13, 1);
    test_embedding(seed += 10, 50, 300, 130, 1);

    test_ce(seed += 10, 7, 13, 3.0, 0.3, 1);
    test_ce(seed += 10, 5, 1000, 3.0, 0.3, 1);
    test_ce(seed += 10, 6, 50, 40.0, 0.3, 1); /* most exp() underflow */
    test_ce(seed += 10, 3, 4, 3.0, 1.0, 1);   /* every target ignored */
    test_ce(seed += 10, 40, 1000, 3.0, 0.2, 0);
    test_tp_vocab(seed += 10, 37, 64, 16, 1);
    test_tp_vocab(seed += 10, 37, 64, 16, 2);
    test_tp_vocab(seed += 10, 20, 1000, 8, 4);

    test_add(seed += 10, 7);
    test_add(seed += 10, 100003);
    test_adamw(seed += 10, 7);
    test_adamw(seed += 10, 100003);
    test_host_adamw(seed += 10, 7, 0);
    test_host_adamw(seed += 10, 40000, 0);
    test_host_adamw(seed += 10, 100003, 3);
    test_host_adamw_redo(seed += 10, 7, 0.3);
    test_host_adamw_redo(seed += 10, 100003, 0.3);
    test_host_adamw_redo(seed += 10, 100003, 0.01);
    test_sumsq_scale_copy(seed += 10, 7);
    test_sumsq_scale_copy(seed += 10, 100003);

    test_mem();
    test_determinism();

    int leak = be32->mem.current_total != 0 || be64->mem.current_total != 0;
    check(!leak, "test buffers all freed (be->mem.current_total == 0)");
    be32->destroy(be32);
    be64->destroy(be64);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail > 0;
}
