/* Hugging Face import: safetensors reader and weight loading; see safetensors.h (config.json: src/config/hf_config.c). */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

#define ST_HEADER_MAX 100000000ull /* the format's limit on N (safetensors: HeaderTooLarge) */

/* ------------------------------------------------------------------------------------------ */
/* safetensors files                                                                           */

static const struct {
    const char *name;
    int bytes;
} st_dtypes[] = {
    {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4},
    {"U32", 4}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1},
    {"F8_E5M2", 1},
};

void dx_st_close(dx_st_file *f)
{
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->map_bytes);
    for (int i = 0; f->t && i < f->n; i++) free(f->t[i].name);
    free(f->t);
    memset(f, 0, sizeof *f);
}

/* "[a, b, c]" of a shape. */
static void fmt_shape(char *buf, size_t cap, const int64_t *shape, int ndim)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* A JSON number that is a non-negative integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* Parses one header entry into t. */
static int parse_entry(const dx_st_file *f, const cJSON *e, dx_st_tensor *t)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return dx_fail("%s: tensor '%s': header entry is not an object", f->path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return dx_fail("%s: tensor '%s': missing or non-string 'dtype'", f->path, name);
    if (strlen(dt->valuestring) >= sizeof t->dtype)
        return dx_fail("%s: tensor '%s': unknown dtype '%.32s'", f->path, name, dt->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    t->elem_bytes = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(t->dtype, st_dtypes[i].name)) t->elem_bytes = st_dtypes[i].bytes;
    if (!cJSON_IsArray(sh)) return dx_fail("%s: tensor '%s': missing or non-array 'shape'", f->path, name);
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > DX_ST_MAX_DIMS)
        return dx_fail("%s: tensor '%s': %d dimensions (at most %d supported)", f->path, name, t->ndim,
                       DX_ST_MAX_DIMS);
    t->numel = 1;
    int overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        if (json_uint(cJSON_GetArrayItem(sh, i), &d))
            return dx_fail("%s: tensor '%s': shape[%d] is not a non-negative integer", f->path, name, i);
        t->shape[i] = (int64_t)d;
        if (d && t->numel > UINT64_MAX / d) overflow = 1;
        t->numel *= d;
    }
    if (overflow) return dx_fail("%s: tensor '%s': shape too large", f->path, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        json_uint(cJSON_GetArrayItem(off, 0), &t->begin) || json_uint(cJSON_GetArrayItem(off, 1), &t->end))
        return dx_fail("%s: tensor '%s': 'data_offsets' must be [begin, end] (non-negative integers)",
                       f->path, name);
    if (t->begin > t->end || t->end > f->data_bytes)
        return dx_fail("%s: tensor '%s': data_offsets [%llu, %llu] out of range of the %llu-byte data "
                       "section (file truncated?)",
                       f->path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)f->data_bytes);
    if (t->elem_bytes && (t->numel > UINT64_MAX / (uint64_t)t->elem_bytes ||
                          t->end - t->begin != t->numel * (uint64_t)t->elem_bytes)) {
        char s[160];
        fmt_shape(s, sizeof s, t->shape, t->ndim);
        return dx_fail("%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs "
                       "%llu",
                       f->path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin), t->dtype, s,
                       (unsigned long long)(t->numel * (uint64_t)t->elem_bytes));
    }
    t->name = dx_strdup(name);
    if (!t->name) return dx_fail("%s: out of memory", f->path);
    return 0;
}

int dx_st_open(dx_st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    if (strlen(path) >= sizeof f->path) return dx_fail("%.64s...: path too long", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dx_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dx_fail("%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        close(fd);
        return dx_fail("%s: truncated: %llu bytes, less than the 8-byte header length", path,
                       (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return dx_fail("%s: mmap failed: %s", path, strerror(map_errno));
    f->map = map;
    f->map_bytes = (size_t)size;

    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    if (n > ST_HEADER_MAX) {
        dx_st_close(f);
        return dx_fail("%s: header length %llu exceeds the format's limit of %llu bytes (not a "
                       "safetensors file?)",
                       path, (unsigned long long)n, ST_HEADER_MAX);
    }
    if (n > size - 8) {
        dx_st_close(f);
        return dx_fail("%s: header length %llu runs past the end of the %llu-byte file (file "
                       "truncated?)",
                       path, (unsigned long long)n, (unsigned long long)size);
    }
    f->data = f->map + 8 + n;
    f->data_bytes = size - 8 - n;

    const char *hdr = (const char *)f->map + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t pos = at && at >= hdr && at <= hdr + n ? (size_t)(at - hdr) : 0;
        dx_st_close(f);
        return dx_fail("%s: malformed JSON header near byte %zu of %llu", path, pos, (unsigned long long)n);
    }
    for (const char *p = end; p && p < hdr + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            cJSON_Delete(root);
            dx_st_close(f);
            return dx_fail("%s: malformed JSON header: text after the object at byte %zu",
                           path, (size_t)(p - hdr));
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        dx_st_close(f);
        return dx_fail("%s: header is not a JSON object", path);
    }
    int count = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__")) count++;
    f->t = calloc(count ? (size_t)count : 1, sizeof *f->t);
    if (!f->t) {
        cJSON_Delete(root);
        dx_st_close(f);
        return dx_fail("%s: out of memory for %d tensors", path, count);
    }
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        if (parse_entry(f, e, &f->t[f->n])) {
            cJSON_Delete(root);
            dx_st_close(f);
            return -1;
        }
        f->n++;
    }
    cJSON_Delete(root);
    for (int i = 0; i < f->n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(f->t[i].name, f->t[j].name)) {
                int rc = dx_fail("%s: tensor '%s' appears twice in the header", path, f->t[i].name);
                dx_st_close(f);
                return rc;
            }
    return 0;
}

const dx_st_tensor *dx_st_find(const dx_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

static float bits_to_float(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* IEEE binary16 -> binary32 (exact). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* m x 2^-24: zero or subnormal */
        return sign ? -v : v;
    }
    if (e == 31) return bits_to_float(sign | 0x7f800000u | m << 13); /* inf, NaN */
    return bits_to_float(sign | (e + 112) << 23 | m << 13);         /* rebias 15 -> 127 */
}

int dx_st_read_f32(const dx_st_file *f, const dx_st_tensor *t, float *out)
{
    const uint8_t *p = f->data + t->begin;
    const size_t n = (size_t)t->numel;
    if (!strcmp(t->dtype, "F32")) {
        for (size_t i = 0; i < n; i++, p += 4)
            out[i] = bits_to_float((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                   (uint32_t)p[3] << 24);
    } else if (!strcmp(t->dtype, "BF16")) {
        for (size_t i = 0; i < n; i++, p += 2) out[i] = bits_to_float(((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16);
    } else if (!strcmp(t->dtype, "F16")) {
        for (size_t i = 0; i < n; i++, p += 2) out[i] = half_to_float((uint16_t)(p[0] | p[1] << 8));
    } else {
        return dx_fail("%s: tensor '%s': dtype %s is not supported (F32, BF16 or F16)", f->path,
                       t->name, t->dtype);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Weights                                                                                     */

typedef struct {
    int nfiles;
    dx_st_file *files;
    char where[1100]; /* the file that lists the tensors: model.safetensors or the index */
} hf_ckpt;

static void ckpt_close(hf_ckpt *ck)
{
    for (int i = 0; ck->files && i < ck->nfiles; i++) dx_st_close(&ck->files[i]);
    free(ck->files);
    memset(ck, 0, sizeof *ck);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Opens the single file or the index and its shards, and checks the index against the shards. */
static int ckpt_open(hf_ckpt *ck, const char *dir)
{
    memset(ck, 0, sizeof *ck);
    char single[1100];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    struct stat st;
    if (stat(single, &st) == 0) {
        snprintf(ck->where, sizeof ck->where, "%s", single);
        ck->files = calloc(1, sizeof *ck->files);
        if (!ck->files) return dx_fail("%s: out of memory", single);
        if (dx_st_open(&ck->files[0], single)) return -1;
        ck->nfiles = 1;
        return 0;
    }
    snprintf(ck->where, sizeof ck->where, "%s/model.safetensors.index.json", dir);
    if (stat(ck->where, &st) != 0)
        return dx_fail("%s: no model.safetensors or model.safetensors.index.json (%s)", dir,
                       strerror(errno));
    char *text = dx_read_file(ck->where, NULL);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return dx_fail("%s: malformed JSON", ck->where);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int rc = 0;
    if (!cJSON_IsObject(wm)) rc = dx_fail("%s: key 'weight_map': missing or not an object", ck->where);
    int cap = rc ? 0 : cJSON_GetArraySize(wm);
    if (!rc && !(ck->files = calloc(cap ? (size_t)cap : 1, sizeof *ck->files)))
        rc = dx_fail("%s: out of memory", ck->where);
    /* open each distinct shard once */
    for (const cJSON *e = rc ? NULL : wm->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || !*e->valuestring) {
            rc = dx_fail("%s: key 'weight_map.%s': expected a file name", ck->where, e->string);
            break;
        }
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        int have = 0;
        for (int i = 0; i < ck->nfiles && !have; i++) have = !strcmp(ck->files[i].path, path);
        if (!have) {
            if (dx_st_open(&ck->files[ck->nfiles], path)) rc = -1;
            else ck->nfiles++;
        }
    }
    /* every listed tensor is in its shard, and every shard tensor is listed there */
    for (const cJSON *e = rc ? NULL : wm->child; e && !rc; e = e->next) {
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        for (int i = 0; i < ck->nfiles; i++)
            if (!strcmp(ck->files[i].path, path) && !dx_st_find(&ck->files[i], e->string))
                rc = dx_fail("%s: tensor '%s' is mapped to %s, which does not hold it", ck->where,
                             e->string, path);
    }
    for (int i = 0; i < ck->nfiles && !rc; i++)
        for (int j = 0; j < ck->files[i].n && !rc; j++) {
            const char *name = ck->files[i].t[j].name;
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(wm, name);
            char path[1100];
            snprintf(path, sizeof path, "%s/%s", dir, cJSON_IsString(e) ? e->valuestring : "");
            if (!e || strcmp(path, ck->files[i].path))
                rc = dx_fail("%s: tensor '%s' is not mapped to this file by %s", ck->files[i].path,
                             name, ck->where);
        }
    cJSON_Delete(root);
    return rc;
}

/* The tensor `name` in the checkpoint (and its file), or NULL. */
static const dx_st_tensor *ckpt_find(const hf_ckpt *ck, const char *name, const dx_st_file **file)
{
    for (int i = 0; i < ck->nfiles; i++) {
        const dx_st_tensor *t = dx_st_find(&ck->files[i], name);
        if (t) {
            *file = &ck->files[i];
            return t;
        }
    }
    return NULL;
}

/* Names, shapes and dtypes of the whole checkpoint against the model's table. */
static int ckpt_check(const hf_ckpt *ck, const dx_model *m, size_t *max_numel)
{
    *max_numel = 1;
    for (int i = 0; i < ck->nfiles; i++)
        for (int j = 0; j < ck->files[i].n; j++) {
            const dx_st_tensor *t = &ck->files[i].t[j];
            if (!dx_model_is_param_name(m, t->name) && !ends_with(t->name, "rotary_emb.inv_freq"))
                return dx_fail("%s: unexpected tensor '%s' (not a parameter of dissect's Llama model)",
                               ck->files[i].path, t->name);
            for (int k = 0; k < i; k++)
                if (dx_st_find(&ck->files[k], t->name))
                    return dx_fail("%s: tensor '%s' is also in %s", ck->files[i].path, t->name,
                                   ck->files[k].path);
        }
    for (int i = 0; i < dx_model_num_params_table(m); i++) {
        const dx_param *p = dx_model_param(m, i);
        if (p->init) continue; /* LoRA adapters: not in the base model's files */
        const dx_st_file *f = NULL;
        const dx_st_tensor *t = ckpt_find(ck, p->name, &f);
        if (!t) return dx_fail("%s: missing tensor '%s'", ck->where, p->name);
        int64_t want[2] = {p->full_rows, p->full_cols}; /* the logical tensor; this rank keeps its slice */
        int wnd = p->cols ? 2 : 1;
        int same = t->ndim == wnd;
        for (int d = 0; same && d < wnd; d++) same = t->shape[d] == want[d];
        if (!same) {
            char a[160], b[160];
            fmt_shape(a, sizeof a, want, wnd);
            fmt_shape(b, sizeof b, t->shape, t->ndim);
            return dx_fail("%s: tensor '%s': shape expected %s, got %s", f->path, p->name, a, b);
        }
        if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "BF16") && strcmp(t->dtype, "F16"))
            return dx_fail("%s: tensor '%s': dtype %s is not supported (F32, BF16 or F16)", f->path,
                           p->name, t->dtype);
        size_t full = (size_t)p->full_rows * (size_t)(p->full_cols ? p->full_cols : 1);
        if (full > *max_numel) *max_numel = full;
    }
    return 0;
}

int dx_hf_load_weights(const char *dir, dx_model *m, dx_zero *z, dx_comm *dp)
{
    hf_ckpt ck;
    memset(&ck, 0, sizeof ck);
    float *buf = NULL;
    size_t max_numel = 0;
    int rc = -1; /* m == NULL: this rank failed before; keep its message */
    if (m && z) {
        rc = ckpt_open(&ck, dir);
        if (!rc) rc = ckpt_check(&ck, m, &max_numel);
        if (!rc && !(buf = malloc(max_numel * sizeof *buf)))
            rc = dx_fail("%s: out of memory for %zu floats", ck.where, max_numel);
    }

    /* agreement: all ranks go on to the (collective) updates, or all fail */
    if (dp && dp->size > 1) {
        int worst = 0;
        if (dp->max_int(dp, rc ? dp->size - dp->rank : 0, &worst)) {
            rc = -1;
        } else if (worst) {
            int who = dp->size - worst;
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dx_last_error());
            if (dp->broadcast(dp, msg, sizeof msg, who)) rc = -1;
            else if (!rc) rc = dx_fail("rank %d: %s", who, msg);
        }
    }

    for (int i = 0; !rc && i < dx_model_num_params_table(m); i++) {
        const dx_param *p = dx_model_param(m, i);
        if (p->init) continue; /* LoRA adapters keep their PEFT initialisation */
        const dx_st_file *f = NULL;
        const dx_st_tensor *t = ckpt_find(&ck, p->name, &f);
        rc = dx_st_read_f32(f, t, buf);
        /* this rank's slice [row0, row0 + rows) x [col0, col0 + cols) of the logical tensor,
         * moved to the front of buf (row by row, never overtaking the rows still to move) */
        const size_t cols = p->cols ? (size_t)p->cols : 1, fcols = p->cols ? (size_t)p->full_cols : 1;
        for (size_t r = 0; !rc && (p->rows != p->full_rows || cols != fcols) && r < (size_t)p->rows; r++)
            memmove(buf + r * cols, buf + ((size_t)p->row0 + r) * fcols + (size_t)p->col0, cols * sizeof *buf);
        if (!rc) rc = dx_zero_set_master(z, p->group, p->offset, p->numel, buf);
        if (rc) dx_fail_prefix("%s: tensor '%s'", f->path, p->name);
    }
    free(buf);
    ckpt_close(&ck);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* writing                                                                                     */

static uint16_t f32_to_bf16(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu)) return (uint16_t)((b >> 16) | 0x40); /* quiet NaN */
    b += 0x7FFFu + ((b >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(b >> 16);
}

int dx_st_write(const char *path, const dx_st_spec *t, int n, int bf16, dx_st_fill_fn fill, void *ctx)
{
    const size_t esz = bf16 ? 2 : 4;
    cJSON *h = cJSON_CreateObject();
    if (!h) return dx_fail("%s: out of memory", path);
    int rc = 0;
    uint64_t begin = 0, maxn = 1;
    for (int i = 0; !rc && i < n; i++) {
        uint64_t numel = 1;
        if (!t[i].name || !t[i].name[0] || t[i].ndim < 1 || t[i].ndim > 2) {
            rc = dx_fail("%s: tensor %d: empty name or ndim %d (1 or 2 supported)", path, i, t[i].ndim);
            break;
        }
        if (cJSON_GetObjectItemCaseSensitive(h, t[i].name)) {
            rc = dx_fail("%s: tensor '%s' given twice", path, t[i].name);
            break;
        }
        double shape[2];
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0) {
                rc = dx_fail("%s: tensor '%s': negative dimension", path, t[i].name);
                break;
            }
            numel *= (uint64_t)t[i].shape[d];
            shape[d] = (double)t[i].shape[d];
        }
        if (rc) break;
        const double offs[2] = {(double)begin, (double)(begin + numel * esz)};
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddStringToObject(e, "dtype", bf16 ? "BF16" : "F32") ||
            !cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(shape, t[i].ndim)) ||
            !cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray(offs, 2)) ||
            !cJSON_AddItemToObject(h, t[i].name, e)) {
            cJSON_Delete(e);
            rc = dx_fail("%s: out of memory", path);
        }
        begin += numel * esz;
        if (numel > maxn) maxn = numel;
    }
    cJSON *meta = rc ? NULL : cJSON_AddObjectToObject(h, "__metadata__");
    if (!rc && (!meta || !cJSON_AddStringToObject(meta, "format", "pt"))) rc = dx_fail("%s: out of memory", path);
    char *hs = rc ? NULL : cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!rc && !hs) rc = dx_fail("%s: out of memory", path);
    float *buf = rc ? NULL : malloc(maxn * sizeof(float));
    uint16_t *half = rc || !bf16 ? NULL : malloc(maxn * sizeof(uint16_t));
    if (!rc && (!buf || (bf16 && !half)))
        rc = dx_fail("%s: out of memory for a buffer of %llu floats", path, (unsigned long long)maxn);
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = rc ? NULL : fopen(tmp, "wb");
    if (!rc && !f) rc = dx_fail("%s: cannot create: %s", tmp, strerror(errno));
    if (!rc) {
        size_t hn = strlen(hs), padded = (hn + 7) / 8 * 8;
        uint8_t len[8];
        for (int b = 0; b < 8; b++) len[b] = (uint8_t)(((uint64_t)padded >> (8 * b)) & 0xFF); /* little endian */
        int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hs, 1, hn, f) == hn;
        for (size_t k = hn; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
        if (!ok) rc = dx_fail("%s: cannot write: %s", tmp, strerror(errno));
    }
    for (int i = 0; !rc && i < n; i++) {
        size_t numel = (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        if (fill(ctx, i, buf)) {
            rc = -1;
            break;
        }
        if (bf16)
            for (size_t k = 0; k < numel; k++) half[k] = f32_to_bf16(buf[k]);
        /* the values little endian: the host's order on x86-64 and arm64 */
        if (numel && fwrite(bf16 ? (const void *)half : (const void *)buf, esz, numel, f) != numel) rc = dx_fail("%s: cannot write: %s", tmp, strerror(errno));
    }
    if (f && fclose(f) && !rc) rc = dx_fail("%s: cannot write: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path)) rc = dx_fail("%s: cannot rename %s: %s", path, tmp, strerror(errno));
    if (rc && f) remove(tmp);
    free(buf);
    free(half);
    free(hs);
    return rc;
}
