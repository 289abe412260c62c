/* Fuzz harness: the safetensors reader (checkpoints/safetensors.c: dx_st_open, dx_st_find,
 * dx_st_read_f32), on the raw bytes of a .safetensors file (8-byte header length, JSON header,
 * data section).
 * Checked: a rejected file names its path and leaves the struct closed; in an accepted one every
 * tensor's data_offsets lie inside the data section and hold exactly numel x element size bytes
 * (known dtypes), at most DX_ST_MAX_DIMS dimensions, names are distinct and found by dx_st_find;
 * dx_st_read_f32 converts F32 (bit for bit), BF16 and F16 and refuses every other dtype naming
 * the file and the tensor. */
#include "fuzz_util.h"

#include "checkpoints/safetensors.h"

static float f32_bits(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static int same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[300];
    fz_path(path, sizeof path, "model.safetensors");
    fz_write_file(path, data, size);

    dx_st_file f;
    if (dx_st_open(&f, path) != 0) {
        FZ_CHECK(strstr(dx_last_error(), path) != NULL, "error does not name the file: %s", dx_last_error());
        FZ_CHECK(f.map == NULL && f.t == NULL && f.n == 0, "a failed open left the file open");
        return 0;
    }
    FZ_CHECK(size >= 8 && f.data >= f.map + 8 && f.data + f.data_bytes == f.map + size,
             "data section [%td, +%llu) of a %zu-byte file", f.data - f.map, (unsigned long long)f.data_bytes, size);
    for (int i = 0; i < f.n; i++) {
        const dx_st_tensor *t = &f.t[i];
        FZ_CHECK(t->name != NULL, "tensor %d has no name", i);
        FZ_CHECK(t->ndim >= 0 && t->ndim <= DX_ST_MAX_DIMS, "tensor '%s': %d dims", t->name, t->ndim);
        FZ_CHECK(t->begin <= t->end && t->end <= f.data_bytes, "tensor '%s': offsets [%llu, %llu) of %llu", t->name,
                 (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)f.data_bytes);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            FZ_CHECK(t->shape[d] >= 0, "tensor '%s': shape[%d] = %lld", t->name, d, (long long)t->shape[d]);
            numel *= (uint64_t)t->shape[d];
        }
        FZ_CHECK(numel == t->numel, "tensor '%s': numel %llu, shape product %llu", t->name,
                 (unsigned long long)t->numel, (unsigned long long)numel);
        if (t->elem_bytes)
            FZ_CHECK(t->end - t->begin == t->numel * (uint64_t)t->elem_bytes, "tensor '%s': %llu bytes for %llu x %d",
                     t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)t->numel, t->elem_bytes);
        FZ_CHECK(dx_st_find(&f, t->name) == t, "dx_st_find('%s') is not the tensor", t->name);

        int known = !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "BF16") || !strcmp(t->dtype, "F16");
        /* a known dtype's numel is bounded by the data section; others are never written */
        float *out = malloc((known && t->numel ? (size_t)t->numel : 1) * sizeof *out);
        FZ_CHECK(out != NULL, "out of memory for %llu floats", (unsigned long long)t->numel);
        int rc = dx_st_read_f32(&f, t, out);
        if (!known) {
            FZ_CHECK(rc == -1 && strstr(dx_last_error(), path) && strstr(dx_last_error(), t->name),
                     "dtype %s: rc %d, message %s", t->dtype, rc, dx_last_error());
        } else {
            FZ_CHECK(rc == 0, "tensor '%s' (%s) not read: %s", t->name, t->dtype, dx_last_error());
            const uint8_t *p = f.data + t->begin;
            for (uint64_t k = 0; k < t->numel; k++) {
                float want;
                if (!strcmp(t->dtype, "F32")) {
                    want = f32_bits((uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
                                    (uint32_t)p[4 * k + 3] << 24);
                    FZ_CHECK(same_float(out[k], want), "F32 element %llu changed", (unsigned long long)k);
                } else if (!strcmp(t->dtype, "BF16")) {
                    want = f32_bits(((uint32_t)p[2 * k] | (uint32_t)p[2 * k + 1] << 8) << 16);
                    FZ_CHECK(same_float(out[k], want), "BF16 element %llu", (unsigned long long)k);
                } else {
                    /* F16: the magnitude of a finite half is below 65536; NaN stays NaN */
                    uint16_t h = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
                    int is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
                    FZ_CHECK(is_nan ? out[k] != out[k] : (out[k] == out[k] && (h & 0x8000u ? out[k] <= 0 : out[k] >= 0)),
                             "F16 %04x -> %g", h, (double)out[k]);
                }
            }
        }
        free(out);
    }
    for (int i = 0; i < f.n; i++)
        for (int j = 0; j < i; j++)
            FZ_CHECK(strcmp(f.t[i].name, f.t[j].name) != 0, "tensor '%s' appears twice", f.t[i].name);
    dx_st_close(&f);
    return 0;
}
