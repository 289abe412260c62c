/* NF4 with double-quantized FP8 absmaxes (QLoRA); see kernels/nf4.h. */
#include "nf4.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

const float dx_nf4_code[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

size_t dx_nf4_blocks(size_t n) { return (n + DX_NF4_BLOCK - 1) / DX_NF4_BLOCK; }
size_t dx_nf4_groups(size_t n) { return (dx_nf4_blocks(n) + DX_NF4_DQ_BLOCK - 1) / DX_NF4_DQ_BLOCK; }
size_t dx_nf4_bytes(size_t n)
{
    return (n + 1) / 2 + dx_nf4_blocks(n) + dx_nf4_groups(n) * sizeof(float) + sizeof(float);
}

float dx_fp8_e4m3_to_float(uint8_t v)
{
    const int e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) return NAN;
    const float mag = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return v & 0x80 ? -mag : mag;
}

uint8_t dx_fp8_e4m3_from_float(float x)
{
    if (isnan(x)) return 0x7F;
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const float a = fabsf(x);
    if (a >= 448.0f) return sign | 0x7E;
    /* codes 0 .. 0x7E are ascending in value: the nearest one, ties to the even code */
    int lo = 0, hi = 0x7E; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (dx_fp8_e4m3_to_float((uint8_t)mid) <= a) lo = mid;
        else hi = mid;
    }
    const float dl = a - dx_fp8_e4m3_to_float((uint8_t)lo), dh = dx_fp8_e4m3_to_float((uint8_t)hi) - a;
    const int v = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | (uint8_t)v;
}

/* index of the code nearest to x in [-1, 1], ties to the lower index */
static int nearest_code(float x)
{
    int k = 0;
    for (int i = 0; i < 15; i++)
        if ((double)x > 0.5 * ((double)dx_nf4_code[i] + (double)dx_nf4_code[i + 1])) k = i + 1;
    return k;
}

void dx_nf4_free(dx_nf4_tensor *q)
{
    if (!q) return;
    free(q->idx);
    free(q->absmax8);
    free(q->scale);
    memset(q, 0, sizeof *q);
}

int dx_nf4_quantize(const float *w, size_t n, dx_nf4_tensor *q)
{
    memset(q, 0, sizeof *q);
    if (n == 0) return dx_fail("nf4: empty tensor");
    const size_t nb = dx_nf4_blocks(n), ng = dx_nf4_groups(n);
    float *absmax = malloc(nb * sizeof(float));
    q->idx = calloc((n + 1) / 2, 1);
    q->absmax8 = malloc(nb);
    q->scale = malloc(ng * sizeof(float));
    if (!absmax || !q->idx || !q->absmax8 || !q->scale) {
        free(absmax);
        dx_nf4_free(q);
        return dx_fail("nf4: out of memory for %zu elements", n);
    }
    q->n = n;
    /* blocks in parallel (each owns its 32 index bytes; 64 is even), the first non-finite element
     * found by a min reduction; the offset is summed in order afterwards, as nf4.h defines it */
    size_t bad = SIZE_MAX;
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (size_t b = 0; b < nb; b++) {
        const size_t i0 = b * DX_NF4_BLOCK, i1 = i0 + DX_NF4_BLOCK < n ? i0 + DX_NF4_BLOCK : n;
        float a = 0;
        for (size_t i = i0; i < i1; i++) {
            if (!isfinite(w[i]) && i < bad) bad = i;
            a = fabsf(w[i]) > a ? fabsf(w[i]) : a;
        }
        absmax[b] = a;
        if (!isfinite(a)) continue;
        for (size_t i = i0; i < i1; i++) {
            const int k = a > 0 ? nearest_code(w[i] / a) : 7;
            q->idx[i / 2] |= (uint8_t)(i % 2 == 0 ? k << 4 : k);
        }
    }
    if (bad != SIZE_MAX) {
        free(absmax);
        dx_nf4_free(q);
        return dx_fail("nf4: element %zu is not finite", bad);
    }
    double sum = 0;
    for (size_t b = 0; b < nb; b++) sum += absmax[b];
    q->offset = (float)(sum / (double)nb);
#pragma omp parallel for schedule(static)
    for (size_t g = 0; g < ng; g++) {
        const size_t b0 = g * DX_NF4_DQ_BLOCK, b1 = b0 + DX_NF4_DQ_BLOCK < nb ? b0 + DX_NF4_DQ_BLOCK : nb;
        float mx = 0;
        for (size_t b = b0; b < b1; b++) {
            const float d = fabsf(absmax[b] - q->offset);
            mx = d > mx ? d : mx;
        }
        const float s = mx > 0 ? mx / 448.0f : 1.0f;
        q->scale[g] = s;
        for (size_t b = b0; b < b1; b++) q->absmax8[b] = dx_fp8_e4m3_from_float((absmax[b] - q->offset) / s);
    }
    free(absmax);
    return 0;
}

float dx_nf4_block_absmax(const dx_nf4_tensor *q, size_t b)
{
    return dx_fp8_e4m3_to_float(q->absmax8[b]) * q->scale[b / DX_NF4_DQ_BLOCK] + q->offset;
}

void dx_nf4_dequantize(const dx_nf4_tensor *q, size_t start, size_t count, float *out)
{
    size_t cur = (size_t)-1;
    float a = 0;
    for (size_t j = 0; j < count; j++) {
        const size_t i = start + j, b = i / DX_NF4_BLOCK;
        if (b != cur) {
            cur = b;
            a = dx_nf4_block_absmax(q, b);
        }
        const int k = i % 2 == 0 ? q->idx[i / 2] >> 4 : q->idx[i / 2] & 15;
        out[j] = dx_nf4_code[k] * a;
    }
}
