/* LoRA linear layer; see lora.h. Four GEMMs forward-and-backward beside the base layer's:
 * t = x A^T, y += s t B^T; dB += s dy^T t, dt = s dy B, dA += dt^T x, dx += dt A (x through the
 * adapter's dropout when p > 0, its mask regenerated in backward rather than stored). */
#include "lora.h"

/* x's dropout into sh->xd (p > 0), or x */
static const void *dropped(dx_backend *be, const void *x, int N, const dx_lora_shape *sh)
{
    if (sh->p <= 0) return x;
    be->dropout(be, sh->xd, x, N, sh->in, sh->p, sh->stream, sh->row0, sh->row_len, sh->col0);
    return sh->xd;
}

void dx_lora_fwd(dx_backend *be, void *y, int ldy, void *t, const void *x, const void *A,
                 const void *B, int N, const dx_lora_shape *sh)
{
    x = dropped(be, x, N, sh);
    be->gemm(be, 0, 1, N, sh->r, sh->in, 1.0f, x, sh->in, A, sh->in, 0.0f, t, sh->r, 0);
    be->gemm(be, 0, 1, N, sh->out, sh->r, sh->scale, t, sh->r, B, sh->r, 1.0f, y, ldy, 0);
}

void dx_lora_bwd(dx_backend *be, void *dx, void *dA, void *dB, void *dt, const void *dy, int ldy,
                 const void *x, const void *t, const void *A, const void *B, int N,
                 const dx_lora_shape *sh)
{
    be->gemm(be, 1, 0, sh->out, sh->r, N, sh->scale, dy, ldy, t, sh->r, 1.0f, dB, sh->r, 1);
    be->gemm(be, 0, 0, N, sh->r, sh->out, sh->scale, dy, ldy, B, sh->r, 0.0f, dt, sh->r, 0);
    x = dropped(be, x, N, sh);
    be->gemm(be, 1, 0, sh->r, sh->in, N, 1.0f, dt, sh->r, x, sh->in, 1.0f, dA, sh->in, 1);
    if (sh->p <= 0) {
        be->gemm(be, 0, 0, N, sh->in, sh->r, 1.0f, dt, sh->r, A, sh->in, 1.0f, dx, sh->in, 0);
        return;
    }
    /* dx += mask (dt A) / (1 - p): dt A into the scratch (xd is no longer needed), masked */
    be->gemm(be, 0, 0, N, sh->in, sh->r, 1.0f, dt, sh->r, A, sh->in, 0.0f, sh->xd, sh->in, 0);
    be->dropout(be, sh->xd, sh->xd, N, sh->in, sh->p, sh->stream, sh->row0, sh->row_len, sh->col0);
    be->add(be, dx, dx, sh->xd, (size_t)N * sh->in);
}
