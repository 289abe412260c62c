/* dissect CPU kernels: internal declarations.
 *
 * kernels/cpu/cpu_ops.c is compiled twice, with -DDX_REAL_F32 (functions dx_cpu_f32_*, real =
 * float, the "cpu" backend) and with -DDX_REAL_F64 (dx_cpu_f64_*, real = double, the "cpu64"
 * reference backend). Each function implements the vtable entry of the same name in
 * kernels.h, with the semantics documented there. Ops run with be->nthreads OpenMP threads and
 * give bitwise-identical results for any thread count (up to OpenBLAS's own gemm).
 */
#ifndef DX_CPU_OPS_H
#define DX_CPU_OPS_H

#include "kernels.h"

/* Declares the full set of math ops for prefix P (dx_cpu_f32_ or dx_cpu_f64_). */
#define DX_CPU_OPS_DECLARE(P)                                                                  \
    void P##gemm(dx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,  \
                 const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc, \
                 int c_acc);                                                                   \
    void P##rmsnorm_fwd(dx_backend *be, void *y, void *rstd, const void *x, const void *w,    \
                        int N, int D, float eps);                                              \
    void P##rmsnorm_bwd(dx_backend *be, void *dx, void *dw, const void *dy, const void *x,    \
                        const void *w, const void *rstd, int N, int D);                        \
    void P##rope_fwd(dx_backend *be, void *x, int ld, int B, int T, int H, int Dh,            \
                     float theta);                                                             \
    void P##rope_bwd(dx_backend *be, void *dx, int ld, int B, int T, int H, int Dh,           \
                     float theta);                                                             \
    void P##attention_fwd(dx_backend *be, void *o, void *lse, const void *q, const void *k,   \
                          const void *v, int ldq, int ldkv, int B, int T, int H, int Hkv,      \
                          int Dh);                                                             \
    void P##attention_bwd(dx_backend *be, void *dq, void *dk, void *dv, const void *dout,     \
                          const void *q, const void *k, const void *v, const void *o,          \
                          const void *lse, int ldq, int ldkv, int B, int T, int H, int Hkv,    \
                          int Dh);                                                             \
    void P##swiglu_fwd(dx_backend *be, void *h, const void *g, const void *u, int N, int F,   \
                       int ld);                                                                \
    void P##swiglu_bwd(dx_backend *be, void *dg, void *du, const void *dh, const void *g,     \
                       const void *u, int N, int F, int ld);                                   \
    void P##embedding_fwd(dx_backend *be, void *out, const int32_t *ids, const void *table,   \
                          int N, int D);                                                       \
    void P##embedding_bwd(dx_backend *be, void *dtable, const void *dout, const int32_t *ids, \
                          int N, int D);                                                       \
    void P##cross_entropy(dx_backend *be, void *loss_sum, void *dlogits, const void *logits,  \
                          const int32_t *targets, int N, int V, float dscale);                 \
    void P##embedding_vp_fwd(dx_backend *be, void *out, const int32_t *ids, const void *table, \
                             int N, int D, int v0, int Vl);                                    \
    void P##embedding_vp_bwd(dx_backend *be, void *dtable, const void *dout,                  \
                             const int32_t *ids, int N, int D, int v0, int Vl);                \
    void P##ce_vp_stats(dx_backend *be, void *stats, const void *logits,                      \
                        const int32_t *targets, int N, int Vl, int v0);                        \
    void P##ce_vp_finish(dx_backend *be, void *loss_sum, void *dlogits, const void *logits,   \
                         const void *gathered, int tp, const int32_t *targets, int N, int Vl,  \
                         int v0, float dscale);                                                \
    void P##add(dx_backend *be, void *y, const void *a, const void *b, size_t n);             \
    void P##dropout(dx_backend *be, void *y, const void *x, int N, int F, float p,            \
                    uint64_t stream, uint64_t row0, uint64_t row_len, uint64_t col0);          \
    void P##adamw(dx_backend *be, void *master, void *work, const void *grad, void *m,        \
                  void *v, size_t n, const dx_adamw_hparams *hp);                              \
    void P##sumsq(dx_backend *be, void *out, const void *x, size_t n);                        \
    void P##scale(dx_backend *be, void *x, size_t n, float s);                                \
    void P##acc_to_act(dx_backend *be, void *dst, const void *src, size_t n);                \
    void P##acc_add_act(dx_backend *be, void *dst, const void *src, size_t n);

DX_CPU_OPS_DECLARE(dx_cpu_f32_)
DX_CPU_OPS_DECLARE(dx_cpu_f64_)

/* Points the math entries of vtable `be` at the ops of prefix P. */
#define DX_CPU_OPS_FILL(be, P)                                                                 \
    do {                                                                                       \
        (be)->gemm = P##gemm;                                                                  \
        (be)->rmsnorm_fwd = P##rmsnorm_fwd;                                                    \
        (be)->rmsnorm_bwd = P##rmsnorm_bwd;                                                    \
        (be)->rope_fwd = P##rope_fwd;                                                          \
        (be)->rope_bwd = P##rope_bwd;                                                          \
        (be)->attention_fwd = P##attention_fwd;                                                \
        (be)->attention_bwd = P##attention_bwd;                                                \
        (be)->swiglu_fwd = P##swiglu_fwd;                                                      \
        (be)->swiglu_bwd = P##swiglu_bwd;                                                      \
        (be)->embedding_fwd = P##embedding_fwd;                                                \
        (be)->embedding_bwd = P##embedding_bwd;                                                \
        (be)->cross_entropy = P##cross_entropy;                                                \
        (be)->embedding_vp_fwd = P##embedding_vp_fwd;                                          \
        (be)->embedding_vp_bwd = P##embedding_vp_bwd;                                          \
        (be)->ce_vp_stats = P##ce_vp_stats;                                                    \
        (be)->ce_vp_finish = P##ce_vp_finish;                                                  \
        (be)->add = P##add;                                                                    \
        (be)->dropout = P##dropout;                                                            \
        (be)->adamw = P##adamw;                                                                \
        (be)->sumsq = P##sumsq;                                                                \
        (be)->scale = P##scale;                                                                \
        (be)->acc_to_act = P##acc_to_act;                                                      \
        (be)->acc_add_act = P##acc_add_act;                                                    \
    } while (0)

#endif
