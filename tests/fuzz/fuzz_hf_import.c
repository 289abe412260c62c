/* Fuzz harness: Hugging Face weight import (checkpoints/safetensors.c: dx_hf_load_weights, i.e.
 * the single-file and sharded-index layouts, the name / shape / dtype checks against the model,
 * data_offsets and the conversions) into the tiny model of rig.h, structure-aware.
 *
 * The input bytes drive a generator that writes a Hugging Face model directory for the model's
 * tensors: model.safetensors, or model.safetensors.index.json and two shards, with the tensors
 * perturbed (missing, renamed, duplicated across shards, shape or dtype changed, data_offsets
 * overlapping, reversed, past the data or of the wrong length, the header length field wrong,
 * an extra rotary_emb.inv_freq buffer, __metadata__) and the index perturbed (a tensor mapped
 * to the wrong shard or to a missing file, a non-string entry, no weight_map). The 0 choice of
 * every decision (and the empty input) is a valid single-file checkpoint.
 *
 * Checked: dx_hf_load_weights returns 0 or -1; -1 names a file of the directory; 0 means every
 * parameter was in the files with its shape and a float dtype, and the master weights then hold
 * the file's values (F32 exactly, BF16 and F16 converted). The safetensors reader's own header
 * parsing is fuzzed on raw bytes by fuzz_safetensors. */
#include "fuzz_util.h"
#include "rig.h"

#include "checkpoints/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    rig_setup(argc, argv, 1);
    return 0;
}

#define MAX_T 24

typedef struct {
    char name[128];
    const char *dtype; /* "F32", "BF16", "F16" or another */
    int esz;           /* bytes per element written */
    int ndim;
    long long shape[3];
    size_t numel;
    long long begin, end; /* data_offsets as written */
    int shard;            /* 0 or 1 */
    int param;            /* index in the model's table, -1: not a parameter */
} st_entry;

/* The value of element i of parameter p (exact in F32, BF16 and F16: small multiples of 1/4). */
static float value_of(unsigned salt, int p, size_t i)
{
    return (float)((salt + (unsigned)p * 11u + (unsigned)i) % 61u) * 0.25f - 7.5f;
}

static uint16_t to_half(float x) /* exact for the values above */
{
    uint32_t bits;
    memcpy(&bits, &x, 4);
    uint32_t sign = (bits >> 16) & 0x8000u;
    if ((bits & 0x7fffffffu) == 0) return (uint16_t)sign;
    int e = (int)((bits >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (uint32_t)e << 10 | ((bits >> 13) & 0x3ffu));
}

/* Writes one safetensors file of entries ents[] with shard == which. hdr_bias perturbs the
 * header length field. Returns the number of tensors written. */
static int write_st(const char *path, st_entry *ents, int n, int which, unsigned salt, int hdr_bias,
                    int metadata)
{
    size_t cap = 65536, len = 0;
    char *hdr = malloc(cap);
    if (!hdr) abort();
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    if (metadata) len += (size_t)snprintf(hdr + len, cap - len, "\"__metadata__\":{\"format\":\"pt\"},");
    long long data_bytes = 0; /* to the furthest offset, leaving out those put past 1 MiB */
    int count = 0;
    for (int k = 0; k < n; k++) {
        st_entry *e = &ents[k];
        if (e->shard != which) continue;
        len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", count ? "," : "",
                                e->name, e->dtype);
        for (int d = 0; d < e->ndim; d++) len += (size_t)snprintf(hdr + len, cap - len, "%s%lld", d ? "," : "", e->shape[d]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", e->begin, e->end);
        if (e->end > data_bytes && e->end <= (1 << 20)) data_bytes = e->end;
        if (e->begin > data_bytes && e->begin <= (1 << 20)) data_bytes = e->begin;
        count++;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    uint8_t *dat = calloc((size_t)data_bytes + 1, 1);
    if (!dat) abort();
    for (int k = 0; k < n; k++) {
        st_entry *e = &ents[k];
        if (e->shard != which || e->param < 0) continue;
        for (size_t i = 0; i < e->numel; i++) {
            long long at = e->begin + (long long)(i * (size_t)e->esz);
            if (at < 0 || at + e->esz > data_bytes) break;
            float v = value_of(salt, e->param, i);
            uint32_t bits;
            memcpy(&bits, &v, 4);
            uint8_t *p = dat + at;
            if (e->esz == 4) { p[0] = (uint8_t)bits; p[1] = (uint8_t)(bits >> 8); p[2] = (uint8_t)(bits >> 16); p[3] = (uint8_t)(bits >> 24); }
            else if (!strcmp(e->dtype, "F16")) { uint16_t h = to_half(v); p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }
            else { p[0] = (uint8_t)(bits >> 16); p[1] = (uint8_t)(bits >> 24); } /* BF16 */
        }
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    uint64_t n64 = (uint64_t)((long long)len + hdr_bias);
    uint8_t nb[8];
    for (int i = 0; i < 8; i++) nb[i] = (uint8_t)(n64 >> (8 * i));
    if (fwrite(nb, 1, 8, f) != 8 || fwrite(hdr, 1, len, f) != len || fwrite(dat, 1, (size_t)data_bytes, f) != (size_t)data_bytes)
        abort();
    fclose(f);
    free(hdr);
    free(dat);
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes b = {data, size};
    const int np = dx_model_num_params_table(rig.m);
    char single[300], index[300], shard[2][300];
    fz_path(single, sizeof single, "model.safetensors");
    fz_path(index, sizeof index, "model.safetensors.index.json");
    fz_path(shard[0], sizeof shard[0], "model-00001-of-00002.safetensors");
    fz_path(shard[1], sizeof shard[1], "model-00002-of-00002.safetensors");
    remove(single);
    remove(index);
    remove(shard[0]);
    remove(shard[1]);

    int sharded = fz_below(&b, 4) == 3;
    int loadable = 1;
    unsigned salt = fz_u8(&b);
    st_entry ents[MAX_T];
    int n = 0;
    long long off[2] = {0, 0};
    for (int p = 0; p < np && n < MAX_T - 2; p++) {
        const dx_param *pr = dx_model_param(rig.m, p);
        st_entry *e = &ents[n];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", pr->name);
        e->param = p;
        e->dtype = "F32";
        e->esz = 4;
        unsigned dt = fz_below(&b, 16);
        if (dt == 13) e->dtype = "BF16", e->esz = 2;
        if (dt == 14) e->dtype = "F16", e->esz = 2;
        if (dt == 15) e->dtype = "I32", loadable = 0; /* same size as F32, refused */
        e->ndim = pr->cols ? 2 : 1;
        e->shape[0] = pr->full_rows;
        e->shape[1] = pr->full_cols;
        e->numel = pr->numel;
        e->shard = sharded ? (int)fz_below(&b, 2) : 0;
        unsigned c = fz_below(&b, 64);
        if (c == 56) { /* missing */
            loadable = 0;
            continue;
        }
        if (c == 57) { snprintf(e->name, sizeof e->name, "%s.renamed", pr->name); loadable = 0; }
        if (c == 58) { e->shape[0] += 1; e->numel = (size_t)e->shape[0] * (size_t)(e->ndim == 2 ? e->shape[1] : 1); loadable = 0; }
        if (c == 59) { e->ndim = 3; e->shape[2] = 1; loadable = 0; }
        if (c == 60 && e->ndim == 2 && e->shape[0] != e->shape[1]) {
            long long x = e->shape[0];
            e->shape[0] = e->shape[1];
            e->shape[1] = x;
            loadable = 0;
        }
        long long bytes = (long long)e->numel * e->esz;
        e->begin = off[e->shard];
        e->end = e->begin + bytes;
        if (c == 61) { e->end -= e->esz; loadable = 0; }               /* wrong length */
        if (c == 62) { e->begin = e->end + 4; loadable = 0; }           /* reversed */
        if (c == 63) { e->begin += (1 << 21); e->end += (1 << 21); loadable = 0; } /* past the data */
        if (!(c == 62 || c == 63)) off[e->shard] = e->end;
        n++;
        if (c == 55 && n < MAX_T - 2) { /* the same tensor again: in the other shard or the same file */
            ents[n] = *e;
            ents[n].shard = sharded ? 1 - e->shard : e->shard;
            n++;
            loadable = 0;
        }
    }
    if (fz_below(&b, 8) == 7 && n < MAX_T) { /* the buffer old transformers saved: ignored */
        st_entry *e = &ents[n++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "model.layers.0.self_attn.rotary_emb.inv_freq");
        e->dtype = "F32";
        e->esz = 4;
        e->ndim = 1;
        e->shape[0] = 2;
        e->numel = 2;
        e->param = -1;
        e->begin = 0;
        e->end = 8;
    }
    int hdr_bias = 0;
    unsigned hb = fz_below(&b, 64);
    if (hb >= 61) hdr_bias = hb == 61 ? -1 : hb == 62 ? 8 : 1 << 28; /* applied to the first file */
    int metadata = fz_below(&b, 2);

    /* the header length one short (eats a padding blank: fine, or the closing brace) or 8 long
     * (into the data, which may read as trailing NULs): either outcome is right, but the data
     * then sits elsewhere; past the end of the file: refused -- when the file is read at all (a
     * shard that the index maps no tensor to is not) */
    int first_read = 1;
    if (!sharded) {
        write_st(single, ents, n, 0, salt, hdr_bias, metadata);
    } else {
        int written[2];
        written[0] = write_st(shard[0], ents, n, 0, salt, hdr_bias, metadata);
        first_read = written[0] > 0;
        unsigned ik = fz_below(&b, 32);
        /* the first tensor moved to the other shard or left out of the index while that shard
         * holds a copy of it: the shard it left may then not be read at all, and the directory
         * is valid; these two changes are made on tensors without a copy only */
        if ((ik == 29 || ik == 31) && n > 1 && !strcmp(ents[0].name, ents[1].name)) ik = 0;
        if (ik != 27) written[1] = write_st(shard[1], ents, n, 1, salt, 0, 0);
        else { /* the second shard missing: refused when the index maps a tensor to it */
            written[1] = 0;
            for (int k = 0; k < n; k++)
                if (ents[k].shard == 1) loadable = 0;
        }
        (void)written;
        /* the index */
        size_t cap = 16384, len = 0;
        char *js = malloc(cap);
        if (!js) abort();
        len += (size_t)snprintf(js + len, cap - len, "{\"metadata\":{\"total_size\":0},");
        if (ik == 28) { len += (size_t)snprintf(js + len, cap - len, "\"weight_map\":[]}"); loadable = 0; }
        else {
            len += (size_t)snprintf(js + len, cap - len, "\"weight_map\":{");
            int first = 1;
            for (int k = 0; k < n; k++) {
                int sh = ents[k].shard;
                if (k == 0 && ik == 29) { /* mapped to the other shard */
                    sh = 1 - sh;
                    loadable = 0;
                }
                if (k == 0 && ik == 31) { /* not listed */
                    loadable = 0;
                    continue;
                }
                if (k == 0 && ik == 30) { /* not a file name */
                    len += (size_t)snprintf(js + len, cap - len, "%s\"%s\":7", first ? "" : ",", ents[k].name);
                    loadable = 0;
                } else {
                    len += (size_t)snprintf(js + len, cap - len, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"",
                                            first ? "" : ",", ents[k].name, sh + 1);
                }
                first = 0;
            }
            len += (size_t)snprintf(js + len, cap - len, "}}");
        }
        fz_write_file(index, js, len);
        free(js);
    }
    if (hdr_bias && first_read) loadable = hdr_bias == (1 << 28) ? 0 : loadable == 0 ? 0 : -1;

    dx_fail("%s", "");
    fz_quiet(1);
    int rc = dx_hf_load_weights(fz_dir(), rig.m, rig.z, NULL);
    fz_quiet(0);
    FZ_CHECK(rc == 0 || rc == -1, "dx_hf_load_weights returned %d", rc);
    if (rc != 0) {
        FZ_CHECK(loadable != 1, "a valid directory was refused: %s", dx_last_error());
        FZ_CHECK(strstr(dx_last_error(), fz_dir()) != NULL, "the error names no file of the directory: %s",
                 dx_last_error());
        return 0;
    }
    FZ_CHECK(loadable != 0, "a directory the model cannot take was accepted");
    if (loadable < 0) return 0;
    float *v = NULL;
    size_t cap = 0;
    for (int k = 0; k < n; k++) {
        const st_entry *e = &ents[k];
        if (e->param < 0) continue;
        const dx_param *pr = dx_model_param(rig.m, e->param);
        if (pr->numel > cap) {
            free(v);
            v = malloc((cap = pr->numel) * sizeof *v);
            if (!v) abort();
        }
        if (dx_zero_get_master(rig.z, pr->group, pr->offset, pr->numel, v)) abort();
        for (size_t i = 0; i < pr->numel; i++)
            FZ_CHECK(v[i] == value_of(salt, e->param, i), "%s[%zu] = %g, the file holds %g (%s)", pr->name, i,
                     (double)v[i], (double)value_of(salt, e->param, i), e->dtype);
    }
    free(v);
    return 0;
}
