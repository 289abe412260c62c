/* dissect kernels: 4-bit NormalFloat (NF4) weights with double-quantized scales, the storage
 * format of QLoRA's frozen base weights (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of
 * Quantized LLMs", sec. 3 and appendix E). Host (CPU) code: the quantizer that runs once when
 * the base weights are loaded, and the dequantizer, which is also the CPU twin of the GPU
 * kernels that dequantize on the fly.
 *
 * Format of a tensor of n elements (n > 0), in row-major order:
 *   - blocks of DX_NF4_BLOCK = 64 consecutive elements; block b has absmax a_b = max |w| over it;
 *   - each element is the 4-bit index of the NF4 code value c (dx_nf4_code, 16 values in
 *     [-1, 1]) nearest to w / a_b (ties to the lower index); two per byte, the even element in
 *     the high nibble (bitsandbytes' order); a_b = 0 stores index 7 (code 0);
 *   - double quantization (the paper's "DQ"): the absmaxes are stored as 8-bit floats. With
 *     offset = mean_b a_b (fp32), the a_b - offset of each group of DX_NF4_DQ_BLOCK = 256
 *     blocks are divided by the group's scale s_g = max |a_b - offset| / 448 (fp32; 1 when the
 *     max is 0) and rounded to OCP FP8 E4M3 (nearest, ties to even; 448 its largest finite
 *     value);
 *   - dequantized: w' = c[index] * (fp8(a_b) * s_g + offset).
 * Storage: n/2 bytes of indices + n/64 bytes of FP8 absmaxes + 4 bytes per 256 x 64 elements +
 * 4 bytes: 4.127 bits per parameter, the paper's 4 + 0.127. */
#ifndef DX_NF4_H
#define DX_NF4_H

#include <stddef.h>
#include <stdint.h>

#define DX_NF4_BLOCK 64
#define DX_NF4_DQ_BLOCK 256

/* The 16 NF4 values (QLoRA appendix E; bitsandbytes' create_normal_map(0.9677083)): quantiles
 * of N(0, 1) normalised to [-1, 1], with an exact 0. Ascending. */
extern const float dx_nf4_code[16];

typedef struct {
    size_t n;           /* elements */
    uint8_t *idx;       /* [(n + 1) / 2] packed 4-bit indices */
    uint8_t *absmax8;   /* [nblocks] FP8 E4M3 of (a_b - offset) / s_g */
    float *scale;       /* [ngroups] s_g */
    float offset;       /* mean absmax */
} dx_nf4_tensor;

/* Blocks and double-quantization groups of an n-element tensor. */
size_t dx_nf4_blocks(size_t n);
size_t dx_nf4_groups(size_t n);
/* Bytes the quantized form of n elements takes (indices, FP8 absmaxes, group scales, offset). */
size_t dx_nf4_bytes(size_t n);

/* Quantizes w[n] (fp32, finite) into q, allocating its arrays (dx_nf4_free releases them).
 * Returns 0, or -1 + dx_fail on n == 0, a non-finite input (naming its index) or no memory. */
int dx_nf4_quantize(const float *w, size_t n, dx_nf4_tensor *q);
void dx_nf4_free(dx_nf4_tensor *q);

/* out[i] = w'_i for elements [start, start + count) of q (fp32). */
void dx_nf4_dequantize(const dx_nf4_tensor *q, size_t start, size_t count, float *out);
/* The dequantized absmax of block b: fp8(a_b) * s_g + offset. */
float dx_nf4_block_absmax(const dx_nf4_tensor *q, size_t b);

/* OCP FP8 E4M3 (bias 7, no infinities, 0x7F / 0xFF NaN): x rounded to nearest (ties to even),
 * saturated to +-448; NaN gives 0x7F. And back to float (exact). */
uint8_t dx_fp8_e4m3_from_float(float x);
float dx_fp8_e4m3_to_float(uint8_t v);

#endif
