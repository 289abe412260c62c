/* dissect model: the LoRA linear layer's math on a dx_backend (Hu et al. 2021, "LoRA: Low-Rank
 * Adaptation of Large Language Models", sec. 4.1; Hugging Face PEFT's LoraLayer):
 *   y = x W^T + s (x A^T) B^T,   s = lora_alpha / r,
 * with the base weight W [out, in] frozen and the adapters A [r, in], B [out, r] trained (PEFT
 * initialises A at random and B at zero, so training starts from the base model's outputs).
 * These functions add the adapter's part to a base linear layer's output and input gradient;
 * the caller runs the base GEMMs. Buffers are backend memory: x, y, dy, dx, t, dt, A, B in the
 * act dtype X; dA, dB in the accumulator dtype A (fp32 gradients, accumulated). Row-major; y and
 * dy may be a column block of a wider buffer (row stride ldy >= out, e.g. the k or v block of
 * the fused K|V GEMM output). */
#ifndef DX_LORA_H
#define DX_LORA_H

#include "kernels.h"

typedef struct {
    int in, out; /* the base layer's W [out, in] */
    int r;       /* adapter rank (PEFT's r) */
    float scale; /* s = lora_alpha / r */
    /* PEFT's lora_dropout on the adapter's input: xd = dropout_p(x) (kernels.h's dropout with
     * stream, rows row0.., row_len and col0: x's element (i, j) is global (row0 + i, col0 + j) of
     * rows of row_len), t = xd A^T. p = 0: none (xd is x, the scratch unused). */
    float p;
    uint64_t stream, row0, row_len, col0;
    void *xd; /* X [N, in] scratch when p > 0 (the forward's xd; in backward, xd and then dt A) */
} dx_lora_shape;

/* y[N, out] (+=, rows ldy apart) s * t B^T, where t[N, r] = xd[N, in] A^T is written to t (kept
 * for the backward), xd = x, or its dropout when sh->p > 0. */
void dx_lora_fwd(dx_backend *be, void *y, int ldy, void *t, const void *x, const void *A,
                 const void *B, int N, const dx_lora_shape *sh);

/* Backward, from dy[N, out] (rows ldy apart) and the forward's x and t:
 *   dB[out, r] (+=) s dy^T t ;  dt[N, r] = s dy B (scratch, overwritten) ;
 *   dA[r, in]  (+=) dt^T xd  ;  dx[N, in] (+=) dropout'(dt A)   (dx already holds the base's dy W),
 * where xd is x's dropout again (the same mask) and dropout' applies the mask and 1 / (1 - p)
 * (identity when sh->p = 0). */
void dx_lora_bwd(dx_backend *be, void *dx, void *dA, void *dB, void *dt, const void *dy, int ldy,
                 const void *x, const void *t, const void *A, const void *B, int N,
                 const dx_lora_shape *sh);

#endif
