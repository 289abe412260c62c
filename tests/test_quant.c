/* NF4 with double-quantized FP8 absmaxes (kernels/nf4.h) against the QLoRA paper:
 *   - the 16 code values against the paper's construction (appendix E: quantiles of N(0, 1) at
 *     bitsandbytes' offset 0.9677083, normalised to [-1, 1]), computed here from erfc;
 *   - OCP FP8 E4M3: known encodings, round-to-nearest-even ties, saturation, every code's round
 *     trip;
 *   - quantize: every element's index is its nearest code (checked against the true absmax),
 *     nibble order, absmaxes within FP8's rounding after double quantization, an exact round
 *     trip of inputs on the code grid, the 4.127 bits per parameter, bad input refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/common.h"
#include "nf4.h"

/* inverse of the standard normal CDF, by bisection on 0.5 erfc(-x / sqrt 2) */
static double norm_ppf(double p)
{
    double lo = -10, hi = 10;
    for (int it = 0; it < 200; it++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_code_table(void)
{
    const double off = 0.9677083;
    double v[16];
    int k = 0;
    for (int i = 0; i < 8; i++) v[k++] = norm_ppf(off + i * (0.5 - off) / 8);  /* 8 positive */
    v[k++] = 0;
    for (int i = 0; i < 7; i++) v[k++] = -norm_ppf(off + i * (0.5 - off) / 7); /* 7 negative */
    qsort(v, 16, sizeof v[0], cmp_double);
    double mx = 0, err = 0;
    for (int i = 0; i < 16; i++) mx = fabs(v[i]) > mx ? fabs(v[i]) : mx;
    for (int i = 0; i < 16; i++) {
        const double d = fabs(v[i] / mx - dx_nf4_code[i]);
        err = d > err ? d : err;
    }
    check(err < 1e-6, "NF4 code table = the paper's construction (quantiles of N(0,1), offset 0.9677083): max |diff| %.2e", err);
    int asc = 1;
    for (int i = 0; i < 15; i++) asc &= dx_nf4_code[i] < dx_nf4_code[i + 1];
    check(asc && dx_nf4_code[7] == 0.0f && dx_nf4_code[0] == -1.0f && dx_nf4_code[15] == 1.0f,
          "NF4 code ascending, exact -1, 0, 1");
}

static void test_fp8(void)
{
    struct { float x; uint8_t v; } cases[] = {
        {0.0f, 0x00}, {1.0f, 0x38}, {-2.0f, 0xC0}, {448.0f, 0x7E}, {500.0f, 0x7E}, {-1e9f, 0xFE},
        {0.001953125f, 0x01}, /* 2^-9: the smallest subnormal */
        {0.0009765625f, 0x00}, /* 2^-10: halfway to it, ties to even (0) */
        {1.0625f, 0x38},       /* halfway between 1 and 1.125: even mantissa */
        {1.1875f, 0x3A},       /* halfway between 1.125 and 1.25: even mantissa */
        {0.015625f, 0x08},     /* 2^-6: the smallest normal */
        {240.0f, 0x77},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint8_t v = dx_fp8_e4m3_from_float(cases[i].x);
        if (v != cases[i].v) {
            printf("  fp8(%g) = 0x%02X, want 0x%02X\n", cases[i].x, v, cases[i].v);
            ok = 0;
        }
    }
    check(ok, "FP8 E4M3: known encodings, ties to even, saturation at 448");
    int rt = 1;
    for (int v = 0; v < 256; v++) {
        if ((v & 0x7F) == 0x7F) continue; /* NaN */
        const float f = dx_fp8_e4m3_to_float((uint8_t)v);
        if (dx_fp8_e4m3_from_float(f) != (uint8_t)v) rt = 0;
    }
    check(rt && isnan(dx_fp8_e4m3_to_float(0x7F)) && dx_fp8_e4m3_to_float(0x7E) == 448.0f,
          "FP8 E4M3: every finite code round-trips, 0x7F is NaN, 0x7E is 448");
}

static void test_quantize(void)
{
    /* inputs on the code grid, one block: exact round trip */
    float w[64], out[64];
    for (int i = 0; i < 64; i++) w[i] = dx_nf4_code[(i * 7) % 16] * 2.5f;
    dx_nf4_tensor q;
    check(dx_nf4_quantize(w, 64, &q) == 0, "quantize 64 values on the code grid");
    dx_nf4_dequantize(&q, 0, 64, out);
    check(!memcmp(w, out, sizeof w), "values on the code grid x absmax round-trip exactly");
    check((q.idx[0] >> 4) == 0 && (q.idx[0] & 15) == 7, "nibble order: element 0 high (index %d), element 1 low (index %d)",
          q.idx[0] >> 4, q.idx[0] & 15);
    dx_nf4_free(&q);

    /* normal data over several groups and a partial block */
    const size_t n = (size_t)DX_NF4_BLOCK * 600 + 17;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)dx_normal(42, 1, i) * (1.0f + (float)(i / 6400));
    check(dx_nf4_quantize(x, n, &q) == 0, "quantize %zu normal values (%zu blocks, %zu groups)", n,
          dx_nf4_blocks(n), dx_nf4_groups(n));
    int nearest = 1, amax_ok = 1, elem_ok = 1;
    double se = 0, sx = 0;
    dx_nf4_dequantize(&q, 0, n, y);
    for (size_t b = 0; b < dx_nf4_blocks(n); b++) {
        const size_t i0 = b * DX_NF4_BLOCK, i1 = i0 + DX_NF4_BLOCK < n ? i0 + DX_NF4_BLOCK : n;
        float a = 0;
        for (size_t i = i0; i < i1; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
        const float a2 = dx_nf4_block_absmax(&q, b), s = q.scale[b / DX_NF4_DQ_BLOCK];
        /* FP8 rounding: half a unit in the last place (1/16 relative for normals) or half the
         * smallest subnormal step */
        if (fabsf(a2 - a) > fabsf(a - q.offset) / 16 + s * 0.0009765625f + 1e-6f * a) amax_ok = 0;
        for (size_t i = i0; i < i1; i++) {
            const int k = i % 2 == 0 ? q.idx[i / 2] >> 4 : q.idx[i / 2] & 15;
            const double r = x[i] / a;
            for (int j = 0; j < 16; j++)
                if (fabs(r - dx_nf4_code[j]) < fabs(r - dx_nf4_code[k]) - 1e-7) nearest = 0;
            /* |w - w'| <= a * (largest half gap 0.152) + |a - a'| */
            if (fabsf(x[i] - y[i]) > a * 0.1520f + fabsf(a - a2) + 1e-6f) elem_ok = 0;
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            sx += (double)x[i] * x[i];
        }
    }
    check(nearest, "every element's index is the code nearest to w / absmax");
    check(amax_ok, "double-quantized absmaxes within FP8 E4M3 rounding (offset %.4f)", q.offset);
    check(elem_ok, "every element within absmax x 0.152 + absmax error");
    const double rel = sqrt(se / sx);
    check(rel > 0.05 && rel < 0.15, "relative RMS error of N(0,1) data %.4f (NF4's expected ~0.1)", rel);
    float part[5];
    dx_nf4_dequantize(&q, 6397, 5, part); /* across a block boundary, odd start */
    check(!memcmp(part, y + 6397, sizeof part), "dequantizing a sub-range equals the whole's slice");
    dx_nf4_free(&q);
    free(x);
    free(y);

    const size_t big = (size_t)1 << 30;
    const double bits = 8.0 * (double)dx_nf4_bytes(big) / (double)big;
    check(bits > 4.126 && bits < 4.128, "storage: %.4f bits per parameter (the paper: 4.127)", bits);

    float bad[3] = {1, NAN, 2};
    check(dx_nf4_quantize(bad, 3, &q) == -1 && strstr(dx_last_error(), "element 1"),
          "a NaN is refused, naming its index: '%s'", dx_last_error());
    check(dx_nf4_quantize(bad, 0, &q) == -1, "an empty tensor is refused");
}

int main(void)
{
    test_code_table();
    test_fp8();
    test_quantize();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
