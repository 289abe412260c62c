/* dissect checkpoint -> Hugging Face Llama directory; see hf_export.h. */
#include "hf_export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "common/common.h"
#include "config/config.h"
#include "safetensors.h"
#include "trace/h5util.h"

/* LlamaForCausalLM's state dict in order: embedding, per layer 9 tensors, final norm, head */
#define PER_LAYER 9
static const char *const layer_suffix[PER_LAYER] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight",  "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight",     "mlp.up_proj.weight",
    "mlp.down_proj.weight",    "input_layernorm.weight",   "post_attention_layernorm.weight"};

typedef struct {
    const char *ckpt;
    hid_t file;
    const dx_st_spec *t;
} reader;

/* dx_st_write's source: /params/<name> of the checkpoint, checked against the spec's shape */
static int read_param(void *ctx, int i, float *out)
{
    const reader *r = ctx;
    char name[200];
    snprintf(name, sizeof name, "params/%s", r->t[i].name);
    hid_t d = H5Dopen2(r->file, name, H5P_DEFAULT);
    int rc = d < 0 || H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0;
    if (d >= 0) H5Dclose(d);
    if (rc) return dx_fail("checkpoint '%s': cannot read %s", r->ckpt, name);
    size_t n = (size_t)r->t[i].shape[0] * (r->t[i].ndim == 2 ? (size_t)r->t[i].shape[1] : 1);
    return dx_checkpoint_check_params(r->file, r->ckpt, r->t[i].name, out, n);
}

/* The tensor's shape in the file matches the spec, or -1 + dx_fail. */
static int check_shape(hid_t f, const char *ckpt, const dx_st_spec *t)
{
    char name[200];
    snprintf(name, sizeof name, "params/%s", t->name);
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0) return dx_fail("checkpoint '%s': tensor %s missing", ckpt, name);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT), sp = d < 0 ? -1 : H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (nd >= 1 && nd <= 2) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (nd != t->ndim || dims[0] != (hsize_t)t->shape[0] || (nd == 2 && dims[1] != (hsize_t)t->shape[1]))
        return dx_fail("checkpoint '%s': tensor %s is not of shape [%lld%s%.0lld] (the model of its config_json)",
                       ckpt, name, (long long)t->shape[0], t->ndim == 2 ? ", " : "",
                       t->ndim == 2 ? (long long)t->shape[1] : 0LL);
    return 0;
}

/* transformers' LlamaConfig for model m; NULL + dx_fail on OOM */
static char *hf_config_json(const dx_model_config *m, int bf16)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    cJSON *arch = ok ? cJSON_AddArrayToObject(o, "architectures") : NULL;
    ok = ok && arch && cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    ok = ok && cJSON_AddStringToObject(o, "model_type", "llama");
    ok = ok && cJSON_AddStringToObject(o, "hidden_act", "silu");
    ok = ok && cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    ok = ok && cJSON_AddNumberToObject(o, "hidden_size", m->hidden_size);
    ok = ok && cJSON_AddNumberToObject(o, "intermediate_size", m->intermediate_size);
    ok = ok && cJSON_AddNumberToObject(o, "num_hidden_layers", m->num_hidden_layers);
    ok = ok && cJSON_AddNumberToObject(o, "num_attention_heads", m->num_attention_heads);
    ok = ok && cJSON_AddNumberToObject(o, "num_key_value_heads", m->num_key_value_heads);
    ok = ok && cJSON_AddNumberToObject(o, "head_dim", m->hidden_size / m->num_attention_heads);
    ok = ok && cJSON_AddNumberToObject(o, "max_position_embeddings", m->max_position_embeddings);
    ok = ok && cJSON_AddNumberToObject(o, "rms_norm_eps", m->rms_norm_eps);
    ok = ok && cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta);
    ok = ok && cJSON_AddNullToObject(o, "rope_scaling");
    ok = ok && cJSON_AddNumberToObject(o, "initializer_range", m->initializer_range);
    ok = ok && cJSON_AddNumberToObject(o, "bos_token_id", 1);
    ok = ok && cJSON_AddNumberToObject(o, "eos_token_id", 2);
    ok = ok && cJSON_AddFalseToObject(o, "tie_word_embeddings");
    ok = ok && cJSON_AddFalseToObject(o, "attention_bias");
    ok = ok && cJSON_AddFalseToObject(o, "mlp_bias");
    ok = ok && cJSON_AddStringToObject(o, "torch_dtype", bf16 ? "bfloat16" : "float32");
    char *s = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!s) dx_fail("config.json: out of memory");
    return s;
}

int dx_hf_export(const char *ckpt, const char *out_dir, int bf16)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(ckpt, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return dx_fail("checkpoint '%s': cannot open (missing, unreadable or not HDF5)", ckpt);
    int rc = 0;
    int64_t ver = 0;
    char *cj = NULL;
    char *fmt = dx_h5_read_vlen_str_attr(f, "format");
    if (!fmt || strcmp(fmt, "dissect-checkpoint") ||
        dx_h5_read_scalar_attr(f, "format_version", H5T_NATIVE_INT64, &ver))
        rc = dx_fail("checkpoint '%s': not a dissect checkpoint (format attribute %s%s%s)", ckpt, fmt ? "'" : "",
                     fmt ? fmt : "missing", fmt ? "'" : "");
    free(fmt);
    if (!rc && !(cj = dx_h5_read_vlen_str_attr(f, "config_json")))
        rc = dx_fail("checkpoint '%s': no config_json attribute (the model's shape)", ckpt);
    dx_config c;
    dx_config_defaults(&c);
    char src[1200];
    snprintf(src, sizeof src, "checkpoint '%s' (config_json)", ckpt);
    if (!rc && dx_config_parse(&c, cj, src)) rc = -1;
    free(cj);
    if (!rc && c.lora_r > 0)
        rc = dx_fail("checkpoint '%s': a LoRA run's checkpoint holds its adapters only (lora.r = %d; the base is "
                     "%s): save the adapters in PEFT's format with lora.save / --lora-save",
                     ckpt, c.lora_r, c.hf_model[0] ? c.hf_model : "its hf_model");
    const dx_model_config *m = &c.model;
    const int L = m->num_hidden_layers, n = rc ? 0 : 3 + PER_LAYER * L;
    if (!rc && (m->num_attention_heads < 1 || m->hidden_size % m->num_attention_heads))
        rc = dx_fail("%s: model.hidden_size %d is not divisible by num_attention_heads %d", src, m->hidden_size,
                     m->num_attention_heads);
    dx_st_spec *t = rc ? NULL : calloc((size_t)n, sizeof *t);
    char(*names)[96] = rc ? NULL : calloc((size_t)n, sizeof *names);
    if (!rc && (!t || !names)) rc = dx_fail("export: out of memory");
    if (!rc) {
        const int64_t H = m->hidden_size, F = m->intermediate_size, V = m->vocab_size;
        const int64_t kv = (int64_t)m->num_key_value_heads * (H / m->num_attention_heads);
        const int64_t rows[PER_LAYER] = {H, kv, kv, H, F, F, H, H, H}, cols[PER_LAYER] = {H, H, H, H, H, H, F, 0, 0};
        int k = 0;
        snprintf(names[k], sizeof names[k], "model.embed_tokens.weight");
        t[k] = (dx_st_spec){names[k], 2, {V, H}}, k++;
        for (int l = 0; l < L; l++)
            for (int j = 0; j < PER_LAYER; j++) {
                snprintf(names[k], sizeof names[k], "model.layers.%d.%s", l, layer_suffix[j]);
                t[k] = (dx_st_spec){names[k], cols[j] ? 2 : 1, {rows[j], cols[j]}}, k++;
            }
        snprintf(names[k], sizeof names[k], "model.norm.weight");
        t[k] = (dx_st_spec){names[k], 1, {H, 0}}, k++;
        snprintf(names[k], sizeof names[k], "lm_head.weight");
        t[k] = (dx_st_spec){names[k], 2, {V, H}}, k++;
    }
    /* every tensor present with its shape, and nothing else in /params */
    for (int i = 0; !rc && i < n; i++) rc = check_shape(f, ckpt, &t[i]);
    int64_t held = 0;
    if (!rc && dx_h5_count_elems(f, "params", &held)) rc = dx_fail("checkpoint '%s': cannot list /params", ckpt);
    if (!rc && held != dx_model_num_params(m))
        rc = dx_fail("checkpoint '%s': /params holds %lld parameters, a Llama of its config %lld (tensors that are "
                     "not Llama's?)", ckpt, (long long)held, (long long)dx_model_num_params(m));
    char *hc = rc ? NULL : hf_config_json(m, bf16);
    if (!rc && !hc) rc = -1;
    if (!rc && mkdir(out_dir, 0777) && errno != EEXIST) rc = dx_fail("%s: cannot create: %s", out_dir, strerror(errno));
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    reader r = {ckpt, f, t};
    if (!rc) rc = dx_st_write(path, t, n, bf16, read_param, &r);
    if (!rc) {
        snprintf(path, sizeof path, "%s/config.json", out_dir);
        char tmp[1300];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *o = fopen(tmp, "w");
        int ok = o && fputs(hc, o) >= 0 && fputc('\n', o) != EOF;
        if (o && fclose(o)) ok = 0;
        if (!ok) {
            remove(tmp);
            rc = dx_fail("%s: cannot write: %s", path, strerror(errno));
        } else if (rename(tmp, path)) {
            rc = dx_fail("%s: cannot rename %s: %s", path, tmp, strerror(errno));
        }
    }
    free(hc);
    free(t);
    free(names);
    H5Fclose(f);
    return rc;
}

int dx_hf_export_main(int argc, char **argv)
{
    const char *usage = "usage: dissect export CHECKPOINT.h5 OUT_DIR [--dtype float32|bfloat16]\n";
    const char *pos[2] = {NULL, NULL};
    int npos = 0, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") || !strncmp(argv[i], "--dtype=", 8)) {
            const char *v = argv[i][7] == '=' ? argv[i] + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (v && (!strcmp(v, "float32") || !strcmp(v, "fp32"))) bf16 = 0;
            else if (v && (!strcmp(v, "bfloat16") || !strcmp(v, "bf16"))) bf16 = 1;
            else {
                fprintf(stderr, "dissect export: --dtype: expected float32 or bfloat16, got '%s'\n%s", v ? v : "",
                        usage);
                return 2;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' || npos == 2) {
            fprintf(stderr, "dissect export: unexpected argument '%s'\n%s", argv[i], usage);
            return 2;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 2) {
        fputs(usage, stderr);
        return 2;
    }
    if (dx_hf_export(pos[0], pos[1], bf16)) {
        fprintf(stderr, "dissect export: error: %s\n", dx_last_error());
        return 1;
    }
    printf("wrote %s/config.json and %s/model.safetensors (%s) from %s\n", pos[1], pos[1],
           bf16 ? "bfloat16" : "float32", pos[0]);
    return 0;
}
