/* dissect run configuration: JSON parsing (cJSON), flag overrides, validation, serialisation.
 *
 * The accepted keys are described once, by the schema tables below; the file parser
 * (dx_config_parse) and the flag parser (dx_config_set) both end in apply_value(), so the type
 * and range checks and their messages are the same for both.
 */
#include "config.h"

#include "common/common.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Largest seed that a JSON number (an IEEE double) holds exactly. */
#define SEED_MAX 9007199254740992.0 /* 2^53 */

/* ------------------------------------------------------------------------------------------ */
/* Model presets                                                                               */

typedef struct {
    const char *name;
    int vocab, hidden, inter, layers, heads, kv_heads, max_pos;
    double eps;
} preset_def;

static const preset_def presets[] = {
    {"tiny", 64, 32, 88, 2, 4, 2, 64, 1e-5},
    {"brown-small", 4096, 256, 688, 4, 8, 4, 512, 1e-5},
    {"tinyllama-1.1b", 32000, 2048, 5632, 22, 32, 4, 2048, 1e-5},
    {"llama2-7b", 32000, 4096, 11008, 32, 32, 32, 4096, 1e-5},
    {"llama2-13b", 32000, 5120, 13824, 40, 40, 40, 4096, 1e-5},
    {"llama2-70b", 32000, 8192, 28672, 80, 64, 8, 4096, 1e-5},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const preset_def *find_preset(const char *name)
{
    for (size_t i = 0; name && i < N_PRESETS; i++)
        if (strcmp(name, presets[i].name) == 0) return &presets[i];
    return NULL;
}

int dx_model_preset(dx_model_config *m, const char *name)
{
    const preset_def *p = find_preset(name);
    if (p) {
        memset(m, 0, sizeof *m);
        snprintf(m->preset, sizeof m->preset, "%s", p->name);
        m->vocab_size = p->vocab;
        m->hidden_size = p->hidden;
        m->intermediate_size = p->inter;
        m->num_hidden_layers = p->layers;
        m->num_attention_heads = p->heads;
        m->num_key_value_heads = p->kv_heads;
        m->max_position_embeddings = p->max_pos;
        m->rms_norm_eps = p->eps;
        m->rope_theta = 10000.0;
        m->initializer_range = 0.02;
        return 0;
    }
    char known[256] = "";
    for (size_t i = 0; i < N_PRESETS; i++) {
        size_t n = strlen(known);
        snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", presets[i].name);
    }
    return dx_fail("unknown model preset '%s' (known: %s)", name ? name : "(null)", known);
}

/* a x b and a + b of non-negative counts, saturated at INT64_MAX (sizes up to INT_MAX each: a
 * model of 2^31 layers of width 2^31 has more parameters than int64 holds) */
static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t dx_model_num_params(const dx_model_config *m)
{
    int64_t V = m->vocab_size, D = m->hidden_size, I = m->intermediate_size;
    int64_t L = m->num_hidden_layers, H = m->num_attention_heads, Hkv = m->num_key_value_heads;
    int64_t Dh = H > 0 ? D / H : 0;
    int64_t per_layer = sat_mul(2, D);                                  /* attention and MLP RMSNorm weights */
    per_layer = sat_add(per_layer, sat_mul(D, sat_mul(H, Dh)));         /* q_proj */
    per_layer = sat_add(per_layer, sat_mul(sat_mul(2, D), sat_mul(Hkv, Dh))); /* k_proj, v_proj */
    per_layer = sat_add(per_layer, sat_mul(sat_mul(H, Dh), D));         /* o_proj */
    per_layer = sat_add(per_layer, sat_mul(sat_mul(3, D), I));          /* gate, up, down */
    return sat_add(sat_add(sat_mul(V, D), sat_mul(L, per_layer)), sat_add(D, sat_mul(V, D)));
}

int64_t dx_num_trainable_params(const dx_config *c)
{
    const dx_model_config *m = &c->model;
    if (c->lora_r <= 0) return dx_model_num_params(m);
    int64_t n = 0;
    for (int t = 0; t < DX_LORA_NTARGETS; t++) {
        int64_t in, out;
        dx_lora_target_dims(m, t, &in, &out);
        if (c->lora_targets & (1u << t)) n += c->lora_r * (in + out);
    }
    return n * m->num_hidden_layers;
}

void dx_lora_target_dims(const dx_model_config *m, int t, int64_t *in, int64_t *out)
{
    const int64_t D = m->hidden_size, Dh = D / m->num_attention_heads, HD = (int64_t)m->num_attention_heads * Dh,
                  KD = (int64_t)m->num_key_value_heads * Dh, I = m->intermediate_size;
    const int64_t ins[DX_LORA_NTARGETS] = {D, D, D, HD, D, D, I}, outs[DX_LORA_NTARGETS] = {HD, KD, KD, D, I, I, D};
    *in = ins[t];
    *out = outs[t];
}

int64_t dx_model_num_params_nonembed(const dx_model_config *m)
{
    return dx_model_num_params(m) - sat_mul(m->vocab_size, m->hidden_size);
}

double dx_model_flops_per_token(const dx_config *c)
{
    const dx_model_config *m = &c->model;
    if (c->lora_r > 0 || dx_model_num_params(m) == INT64_MAX) return NAN;
    return 6.0 * (double)dx_model_num_params_nonembed(m) +
           12.0 * (double)m->num_hidden_layers * (double)m->hidden_size * (double)c->seq_length;
}

/* ------------------------------------------------------------------------------------------ */
/* Defaults                                                                                    */

void dx_config_defaults(dx_config *c)
{
    memset(c, 0, sizeof *c);
    dx_model_preset(&c->model, "brown-small");
    c->seq_length = 128;
    c->micro_batch = 8;
    c->grad_accum = 1;
    c->global_batch = 0;
    c->train_batch_size_set = 0;
    c->train_iters = 1000;
    c->lr = 1e-3;
    c->min_lr = 1e-4;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->adam_eps = 1e-8;
    c->weight_decay = 0.1;
    c->grad_clip = 1.0;
    c->lr_warmup_iters = 100;
    c->lr_decay_iters = 0;
    c->seed = 1234;
    c->zero_stage = 0;
    c->tp = 1;
    c->pp = 1;
    c->pp_schedule = DX_PP_1F1B;
    c->eval_interval = 100;
    c->eval_iters = 10;
    c->log_interval = 1;
    c->sample_tokens = 64;
    c->sample_temperature = 0.8;
    c->distributed_timeout_minutes = 10; /* Megatron-LM's and PyTorch's default */
    c->trace_level = DX_TRACE_STEP;
    c->lora_alpha = 8;                                            /* PEFT's LoraConfig defaults */
    c->lora_targets = (1u << DX_LORA_Q) | (1u << DX_LORA_V);
    snprintf(c->device, sizeof c->device, "auto"); /* cuda when a GPU is present, else cpu */
    snprintf(c->source, sizeof c->source, "defaults");
}

/* ------------------------------------------------------------------------------------------ */
/* Schema                                                                                      */

typedef enum {
    K_OBJECT,  /* nested object: children */
    K_INT,     /* int field */
    K_LONG,    /* long field (int range) */
    K_SEED,    /* uint64_t field, 0..2^53 */
    K_DOUBLE,  /* double field */
    K_STRING,  /* char[size] field */
    K_ENUM,    /* string handled by a function */
    K_BETAS,   /* [beta1, beta2] */
    K_TBS,     /* train_batch_size: int + "given" flag */
    K_COMMENT, /* string, ignored */
    K_BOOL,    /* int field, 0 or 1, from true / false */
} key_kind;

/* Range flags */
#define R_LO 1u      /* value >= lo */
#define R_LO_OPEN 2u /* value > lo */
#define R_HI 4u      /* value <= hi */
#define R_HI_OPEN 8u /* value < hi */
#define K_FIRST 16u  /* applied before its siblings (model.preset) */

typedef int (*enum_fn)(dx_config *c, const char *value, const char *source, const char *path);

typedef struct key_spec {
    const char *name;
    key_kind kind;
    size_t offset; /* into dx_config */
    size_t size;   /* K_STRING buffer size */
    unsigned flags;
    double lo, hi;
    const struct key_spec *children; /* K_OBJECT: terminated by name == NULL */
    enum_fn set_enum;                /* K_ENUM */
} key_spec;

static int set_preset(dx_config *c, const char *value, const char *source, const char *path)
{
    dx_model_config m;
    if (dx_model_preset(&m, value) < 0) return dx_fail_prefix("%s: key '%s'", source, path);
    c->model = m;
    return 0;
}

static int set_optimizer_type(dx_config *c, const char *value, const char *source,
                              const char *path)
{
    (void)c;
    if (strcasecmp(value, "AdamW") != 0)
        return dx_fail("%s: key '%s': unsupported optimizer '%s' (only \"AdamW\")", source, path,
                       value);
    return 0;
}

static const char *const trace_level_names[] = {"step", "module", "op"};

static int set_trace_level(dx_config *c, const char *value, const char *source, const char *path)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(value, trace_level_names[i]) == 0) {
            c->trace_level = (dx_trace_level)i;
            return 0;
        }
    return dx_fail("%s: key '%s': must be \"step\", \"module\" or \"op\", got '%s'", source, path,
                   value);
}

static int set_device(dx_config *c, const char *value, const char *source, const char *path)
{
    if (strcmp(value, "cpu") != 0 && strcmp(value, "cuda") != 0 && strcmp(value, "auto") != 0)
        return dx_fail("%s: key '%s': must be \"auto\", \"cpu\" or \"cuda\", got '%s'", source, path, value);
    snprintf(c->device, sizeof c->device, "%s", value);
    return 0;
}

const char *const dx_pp_schedule_names[3] = {"1f1b", "gpipe", "interleaved-1f1b"};

static int set_pp_schedule(dx_config *c, const char *value, const char *source, const char *path)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(value, dx_pp_schedule_names[i]) == 0) {
            c->pp_schedule = (dx_pp_schedule)i;
            return 0;
        }
    return dx_fail("%s: key '%s': must be \"1f1b\", \"gpipe\" or \"interleaved-1f1b\", got '%s'",
                   source, path, value);
}

const char *const dx_lora_target_modules[DX_LORA_NTARGETS] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                               "mlp",       "mlp",       "mlp"};
const char *const dx_lora_target_names[DX_LORA_NTARGETS] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"};

/* lora.target_modules from a comma-separated list (the flag's form, or a string in the file) */
static int set_lora_targets(dx_config *c, const char *value, const char *source, const char *path)
{
    unsigned mask = 0;
    const char *p = value;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && isspace((unsigned char)*p)) p++, n--;
        while (n && isspace((unsigned char)p[n - 1])) n--;
        int t = -1;
        for (int i = 0; i < DX_LORA_NTARGETS; i++)
            if (strlen(dx_lora_target_names[i]) == n && !strncmp(p, dx_lora_target_names[i], n)) t = i;
        if (t < 0)
            return dx_fail("%s: key '%s': '%.*s' is not a Llama linear layer (q_proj, k_proj, v_proj, o_proj, "
                           "gate_proj, up_proj, down_proj)", source, path, (int)n, p);
        mask |= 1u << t;
        if (!e) break;
        p = e + 1;
    }
    if (!mask) return dx_fail("%s: key '%s': no target module given", source, path);
    c->lora_targets = mask;
    return 0;
}

static int set_quantize(dx_config *c, const char *value, const char *source, const char *path)
{
    if (strcmp(value, "none") && strcmp(value, "nf4"))
        return dx_fail("%s: key '%s': must be \"nf4\" or \"none\", got '%s'", source, path, value);
    c->quantize_nf4 = !strcmp(value, "nf4");
    return 0;
}

static const char *const recompute_names[3] = {"none", "selective", "full"};
static const char *const recompute_method_names[2] = {"uniform", "block"};

static int set_recompute(dx_config *c, const char *value, const char *source, const char *path)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(value, recompute_names[i]) == 0) {
            c->recompute = (dx_recompute)i;
            return 0;
        }
    return dx_fail("%s: key '%s': must be \"selective\", \"full\" or \"none\", got '%s'", source, path, value);
}

static int set_recompute_method(dx_config *c, const char *value, const char *source, const char *path)
{
    for (int i = 0; i < 2; i++)
        if (strcmp(value, recompute_method_names[i]) == 0) {
            c->recompute_method = (dx_recompute_method)i;
            c->recompute_method_set = 1;
            return 0;
        }
    return dx_fail("%s: key '%s': must be \"uniform\" or \"block\", got '%s'", source, path, value);
}

#define OFF(f) offsetof(dx_config, f)
#define MOFF(f) (offsetof(dx_config, model) + offsetof(dx_model_config, f))
#define STR(f) OFF(f), sizeof(((dx_config *)0)->f)
#define POS_INT(n, k, off) {n, k, off, 0, R_LO, 1, 0, NULL, NULL}
#define NONNEG(n, k, off) {n, k, off, 0, R_LO, 0, 0, NULL, NULL}
#define POS_DBL(n, off) {n, K_DOUBLE, off, 0, R_LO_OPEN, 0, 0, NULL, NULL}
#define NONNEG_DBL(n, off) {n, K_DOUBLE, off, 0, R_LO, 0, 0, NULL, NULL}
#define END {NULL, K_OBJECT, 0, 0, 0, 0, 0, NULL, NULL}

static const key_spec model_keys[] = {
    {"preset", K_ENUM, 0, 0, K_FIRST, 0, 0, NULL, set_preset},
    POS_INT("vocab_size", K_INT, MOFF(vocab_size)),
    POS_INT("hidden_size", K_INT, MOFF(hidden_size)),
    POS_INT("intermediate_size", K_INT, MOFF(intermediate_size)),
    POS_INT("num_hidden_layers", K_INT, MOFF(num_hidden_layers)),
    POS_INT("num_attention_heads", K_INT, MOFF(num_attention_heads)),
    POS_INT("num_key_value_heads", K_INT, MOFF(num_key_value_heads)),
    POS_INT("max_position_embeddings", K_INT, MOFF(max_position_embeddings)),
    POS_DBL("rms_norm_eps", MOFF(rms_norm_eps)),
    POS_DBL("rope_theta", MOFF(rope_theta)),
    NONNEG_DBL("initializer_range", MOFF(initializer_range)), /* >= 0, as config.json */
    END,
};

static const key_spec data_keys[] = {
    {"train", K_STRING, STR(train_path), 0, 0, 0, NULL, NULL},
    {"valid", K_STRING, STR(valid_path), 0, 0, 0, NULL, NULL},
    {"tokenizer", K_STRING, STR(tokenizer_path), 0, 0, 0, NULL, NULL},
    END,
};

static const key_spec optimizer_params_keys[] = {
    POS_DBL("lr", OFF(lr)),
    {"betas", K_BETAS, 0, 0, 0, 0, 0, NULL, NULL},
    POS_DBL("eps", OFF(adam_eps)),
    NONNEG_DBL("weight_decay", OFF(weight_decay)),
    END,
};

static const key_spec optimizer_keys[] = {
    {"type", K_ENUM, 0, 0, 0, 0, 0, NULL, set_optimizer_type},
    {"params", K_OBJECT, 0, 0, 0, 0, 0, optimizer_params_keys, NULL},
    END,
};

/* offload_*.device: "cpu" or "none" into *flag. */
static int offload_device(int *flag, const char *value, const char *source, const char *path)
{
    if (strcmp(value, "cpu") && strcmp(value, "none"))
        return dx_fail("%s: key '%s': must be \"cpu\" or \"none\", got '%s'", source, path, value);
    *flag = !strcmp(value, "cpu");
    return 0;
}
static int set_offload_device(dx_config *c, const char *value, const char *source, const char *path)
{
    return offload_device(&c->offload_optimizer, value, source, path);
}
static int set_offload_param_device(dx_config *c, const char *value, const char *source, const char *path)
{
    return offload_device(&c->offload_param, value, source, path);
}

static const key_spec offload_param_keys[] = {
    {"device", K_ENUM, 0, 0, 0, 0, 0, NULL, set_offload_param_device},
    {"pin_memory", K_BOOL, OFF(offload_param_pin_memory), 0, 0, 0, 0, NULL, NULL},
    END,
};

static const key_spec offload_optimizer_keys[] = {
    {"device", K_ENUM, 0, 0, 0, 0, 0, NULL, set_offload_device},
    {"pin_memory", K_BOOL, OFF(offload_pin_memory), 0, 0, 0, 0, NULL, NULL},
    END,
};

static const key_spec zero_keys[] = {
    {"stage", K_INT, OFF(zero_stage), 0, R_LO | R_HI, 0, 3, NULL, NULL},
    {"offload_optimizer", K_OBJECT, 0, 0, 0, 0, 0, offload_optimizer_keys, NULL},
    {"offload_param", K_OBJECT, 0, 0, 0, 0, 0, offload_param_keys, NULL},
    END,
};

static const key_spec trace_keys[] = {
    {"path", K_STRING, STR(trace_path), 0, 0, 0, NULL, NULL},
    {"level", K_ENUM, 0, 0, 0, 0, 0, NULL, set_trace_level},
    END,
};

static const key_spec sample_keys[] = {
    NONNEG("tokens", K_INT, OFF(sample_tokens)),
    POS_DBL("temperature", OFF(sample_temperature)),
    END,
};

static const key_spec lora_keys[] = {
    NONNEG("r", K_INT, OFF(lora_r)),
    POS_DBL("lora_alpha", OFF(lora_alpha)),
    NONNEG_DBL("lora_dropout", OFF(lora_dropout)),
    {"target_modules", K_ENUM, 0, 0, 0, 0, 0, NULL, set_lora_targets},
    {"save", K_STRING, STR(lora_save), 0, 0, 0, NULL, NULL},
    END,
};

static const key_spec top_keys[] = {
    {"comment", K_COMMENT, 0, 0, 0, 0, 0, NULL, NULL},
    {"model", K_OBJECT, 0, 0, 0, 0, 0, model_keys, NULL},
    {"data", K_OBJECT, 0, 0, 0, 0, 0, data_keys, NULL},
    {"save", K_STRING, STR(save_path), 0, 0, 0, NULL, NULL},
    {"save_dir", K_STRING, STR(save_dir), 0, 0, 0, NULL, NULL},
    NONNEG("save_interval", K_LONG, OFF(save_interval)),
    NONNEG("keep_last", K_INT, OFF(keep_last)),
    {"async_save", K_BOOL, OFF(async_save), 0, 0, 0, 0, NULL, NULL},
    NONNEG_DBL("distributed_timeout_minutes", OFF(distributed_timeout_minutes)),
    {"resume", K_STRING, STR(resume), 0, 0, 0, NULL, NULL},
    {"hf_model", K_STRING, STR(hf_model), 0, 0, 0, NULL, NULL},
    POS_INT("seq_length", K_INT, OFF(seq_length)),
    POS_INT("train_micro_batch_size_per_gpu", K_INT, OFF(micro_batch)),
    POS_INT("gradient_accumulation_steps", K_INT, OFF(grad_accum)),
    {"train_batch_size", K_TBS, OFF(global_batch), 0, R_LO, 0, 0, NULL, NULL},
    POS_INT("train_iters", K_LONG, OFF(train_iters)),
    NONNEG("lr_warmup_iters", K_LONG, OFF(lr_warmup_iters)),
    NONNEG("lr_decay_iters", K_LONG, OFF(lr_decay_iters)),
    NONNEG_DBL("min_lr", OFF(min_lr)),
    NONNEG_DBL("gradient_clipping", OFF(grad_clip)),
    {"seed", K_SEED, OFF(seed), 0, R_LO | R_HI, 0, SEED_MAX, NULL, NULL},
    NONNEG("eval_interval", K_LONG, OFF(eval_interval)), /* 0 = never */
    POS_INT("eval_iters", K_LONG, OFF(eval_iters)),
    {"eval_on_start", K_BOOL, OFF(eval_on_start), 0, 0, 0, 0, NULL, NULL},
    POS_INT("log_interval", K_LONG, OFF(log_interval)),
    {"optimizer", K_OBJECT, 0, 0, 0, 0, 0, optimizer_keys, NULL},
    {"zero_optimization", K_OBJECT, 0, 0, 0, 0, 0, zero_keys, NULL},
    POS_INT("tensor_model_parallel_size", K_INT, OFF(tp)),
    POS_INT("pipeline_model_parallel_size", K_INT, OFF(pp)),
    {"sequence_parallel", K_BOOL, OFF(sequence_parallel), 0, 0, 0, 0, NULL, NULL},
    {"pipeline_schedule", K_ENUM, 0, 0, 0, 0, 0, NULL, set_pp_schedule},
    NONNEG("num_layers_per_virtual_pipeline_stage", K_INT, OFF(layers_per_virtual_stage)),
    NONNEG("decoder_first_pipeline_num_layers", K_INT, OFF(first_stage_layers)),
    NONNEG("decoder_last_pipeline_num_layers", K_INT, OFF(last_stage_layers)),
    {"recompute_granularity", K_ENUM, 0, 0, 0, 0, 0, NULL, set_recompute},
    {"recompute_method", K_ENUM, 0, 0, 0, 0, 0, NULL, set_recompute_method},
    POS_INT("recompute_num_layers", K_INT, OFF(recompute_num_layers)),
    {"trace", K_OBJECT, 0, 0, 0, 0, 0, trace_keys, NULL},
    {"device", K_ENUM, 0, 0, 0, 0, 0, NULL, set_device},
    {"sample", K_OBJECT, 0, 0, 0, 0, 0, sample_keys, NULL},
    {"lora", K_OBJECT, 0, 0, 0, 0, 0, lora_keys, NULL},
    {"quantize", K_ENUM, 0, 0, 0, 0, 0, NULL, set_quantize},
    END,
};

static const key_spec root_spec = {"", K_OBJECT, 0, 0, 0, 0, 0, top_keys, NULL};

/* ------------------------------------------------------------------------------------------ */
/* Applying values                                                                             */

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsObject(v)) return "object";
    return "invalid value";
}

static const char *kind_name(key_kind k)
{
    switch (k) {
    case K_OBJECT: return "object";
    case K_INT:
    case K_LONG:
    case K_SEED:
    case K_TBS: return "integer";
    case K_DOUBLE: return "number";
    case K_STRING:
    case K_ENUM:
    case K_COMMENT: return "string";
    case K_BETAS: return "array of 2 numbers";
    case K_BOOL: return "boolean";
    }
    return "?";
}

static void join_path(char *out, size_t cap, const char *prefix, const char *name)
{
    if (prefix && *prefix)
        snprintf(out, cap, "%s.%s", prefix, name);
    else
        snprintf(out, cap, "%s", name);
}

/* Range check of a numeric value against spec->flags/lo/hi. */
static int check_range(const key_spec *s, double v, int integer, const char *source,
                       const char *path)
{
    unsigned f = s->flags;
    int bad = ((f & R_LO) && !(v >= s->lo)) || ((f & R_LO_OPEN) && !(v > s->lo)) ||
              ((f & R_HI) && !(v <= s->hi)) || ((f & R_HI_OPEN) && !(v < s->hi));
    if (!bad) return 0;
    char want[96];
    if (integer && (f & R_LO) && (f & R_HI))
        snprintf(want, sizeof want, "must be in %.16g..%.16g", s->lo, s->hi);
    else if ((f & (R_LO | R_LO_OPEN)) && (f & (R_HI | R_HI_OPEN)))
        snprintf(want, sizeof want, "must be in %c%.16g, %.16g%c", (f & R_LO) ? '[' : '(', s->lo,
                 s->hi, (f & R_HI) ? ']' : ')');
    else if (f & R_LO)
        snprintf(want, sizeof want, "must be >= %.16g", s->lo);
    else if (f & R_LO_OPEN)
        snprintf(want, sizeof want, "must be > %.16g", s->lo);
    else if (f & R_HI)
        snprintf(want, sizeof want, "must be <= %.16g", s->hi);
    else
        snprintf(want, sizeof want, "must be < %.16g", s->hi);
    return dx_fail("%s: key '%s': %s, got %.16g", source, path, want, v);
}

static int apply_object(dx_config *c, const key_spec *spec, const cJSON *obj, const char *path,
                        const char *source);

static int apply_value(dx_config *c, const key_spec *s, const cJSON *v, const char *path,
                       const char *source)
{
    char *base = (char *)c;
    switch (s->kind) {
    case K_OBJECT:
        return apply_object(c, s, v, path, source);

    case K_INT:
    case K_LONG:
    case K_SEED:
    case K_TBS: {
        if (!cJSON_IsNumber(v))
            return dx_fail("%s: key '%s': expected integer, got %s", source, path,
                           json_type_name(v));
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return dx_fail("%s: key '%s': expected integer, got %.16g", source, path, d);
        double lo = s->kind == K_SEED ? 0.0 : (double)INT_MIN;
        double hi = s->kind == K_SEED ? SEED_MAX : (double)INT_MAX;
        if (d < lo || d > hi)
            return dx_fail("%s: key '%s': integer %.16g out of range (%.16g..%.16g)", source,
                           path, d, lo, hi);
        if (check_range(s, d, 1, source, path) < 0) return -1;
        if (s->kind == K_INT)
            *(int *)(base + s->offset) = (int)d;
        else if (s->kind == K_LONG)
            *(long *)(base + s->offset) = (long)d;
        else if (s->kind == K_SEED)
            *(uint64_t *)(base + s->offset) = (uint64_t)d;
        else {
            *(int *)(base + s->offset) = (int)d;
            c->train_batch_size_set = d != 0;
        }
        return 0;
    }

    case K_DOUBLE: {
        if (!cJSON_IsNumber(v))
            return dx_fail("%s: key '%s': expected number, got %s", source, path,
                           json_type_name(v));
        double d = v->valuedouble;
        if (!isfinite(d)) return dx_fail("%s: key '%s': must be a finite number", source, path);
        if (check_range(s, d, 0, source, path) < 0) return -1;
        *(double *)(base + s->offset) = d;
        return 0;
    }

    case K_STRING:
    case K_ENUM:
    case K_COMMENT: {
        if (s->kind == K_ENUM && s->set_enum == set_lora_targets && cJSON_IsArray(v)) {
            /* PEFT's form: a list of names */
            char list[256] = "";
            size_t len = 0;
            int i = 0;
            for (const cJSON *e = v->child; e; e = e->next, i++) {
                if (!cJSON_IsString(e) || !e->valuestring)
                    return dx_fail("%s: key '%s[%d]': expected string, got %s", source, path, i, json_type_name(e));
                int w = snprintf(list + len, sizeof list - len, "%s%s", len ? "," : "", e->valuestring);
                if (w < 0 || (size_t)w >= sizeof list - len)
                    return dx_fail("%s: key '%s': list too long", source, path);
                len += (size_t)w;
            }
            return set_lora_targets(c, list, source, path);
        }
        if (!cJSON_IsString(v) || !v->valuestring)
            return dx_fail("%s: key '%s': expected string, got %s", source, path,
                           json_type_name(v));
        if (s->kind == K_COMMENT) return 0;
        if (s->kind == K_ENUM) return s->set_enum(c, v->valuestring, source, path);
        size_t n = strlen(v->valuestring);
        if (n >= s->size)
            return dx_fail("%s: key '%s': string too long (%zu bytes, at most %zu)", source, path,
                           n, s->size - 1);
        memcpy(base + s->offset, v->valuestring, n + 1);
        return 0;
    }

    case K_BOOL:
        if (!cJSON_IsBool(v))
            return dx_fail("%s: key '%s': expected true or false, got %s", source, path,
                           json_type_name(v));
        *(int *)(base + s->offset) = cJSON_IsTrue(v) ? 1 : 0;
        return 0;

    case K_BETAS: {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        {
            if (cJSON_IsArray(v))
                return dx_fail("%s: key '%s': expected array of 2 numbers, got an array of %d",
                               source, path, cJSON_GetArraySize(v));
            return dx_fail("%s: key '%s': expected array of 2 numbers, got %s", source, path,
                           json_type_name(v));
        }
        double b[2];
        for (int i = 0; i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(e))
                return dx_fail("%s: key '%s[%d]': expected number, got %s", source, path, i,
                               json_type_name(e));
            b[i] = e->valuedouble;
            if (!(b[i] >= 0.0 && b[i] < 1.0))
                return dx_fail("%s: key '%s[%d]': must be in [0, 1), got %.16g", source, path, i,
                               b[i]);
        }
        c->beta1 = b[0];
        c->beta2 = b[1];
        return 0;
    }
    }
    return dx_fail("%s: key '%s': internal error (unknown key kind)", source, path);
}

static const key_spec *find_child(const key_spec *parent, const char *name)
{
    if (parent->kind != K_OBJECT || !parent->children) return NULL;
    for (const key_spec *k = parent->children; k->name; k++)
        if (strcmp(k->name, name) == 0) return k;
    return NULL;
}

static int apply_object(dx_config *c, const key_spec *spec, const cJSON *obj, const char *path,
                        const char *source)
{
    if (!cJSON_IsObject(obj)) {
        if (!*path)
            return dx_fail("%s: expected a JSON object at the top level, got %s", source,
                           json_type_name(obj));
        return dx_fail("%s: key '%s': expected object, got %s", source, path,
                       json_type_name(obj));
    }
    char sub[512];
    /* Unknown and duplicate keys first, so no key is applied from a rejected object. */
    for (const cJSON *e = obj->child; e; e = e->next) {
        const char *name = e->string ? e->string : "";
        join_path(sub, sizeof sub, path, name);
        if (!find_child(spec, name)) return dx_fail("%s: unknown key '%s'", source, sub);
        for (const cJSON *p = obj->child; p != e; p = p->next)
            if (p->string && strcmp(p->string, name) == 0)
                return dx_fail("%s: duplicate key '%s'", source, sub);
    }
    /* Pass 0: keys applied first (model.preset); pass 1: the others, in file order. */
    for (int pass = 0; pass < 2; pass++)
        for (const cJSON *e = obj->child; e; e = e->next) {
            const key_spec *k = find_child(spec, e->string);
            if (((k->flags & K_FIRST) != 0) != (pass == 0)) continue;
            join_path(sub, sizeof sub, path, e->string);
            if (apply_value(c, k, e, sub, source) < 0) return -1;
        }
    return 0;
}

/* Line and column (1-based) of byte `off` in text. */
static void line_col(const char *text, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int json_syntax_error(const char *text, const char *end, const char *source,
                             const char *what)
{
    size_t off = end && end >= text ? (size_t)(end - text) : 0;
    int line, col;
    line_col(text, off, &line, &col);
    char near[24] = "";
    size_t n = 0;
    for (const char *p = text + off; *p && *p != '\n' && n < sizeof near - 1; p++)
        near[n++] = isprint((unsigned char)*p) ? *p : '?';
    near[n] = 0;
    if (!text[off])
        return dx_fail("%s: malformed %s: unexpected end of input at line %d, column %d "
                       "(byte %zu)",
                       source, what, line, col, off);
    return dx_fail("%s: malformed %s near line %d, column %d (byte %zu): '%s'", source, what,
                   line, col, off, near);
}

/* Parses JSON text; NULL + message on error. */
static cJSON *parse_json(const char *text, const char *source, const char *what)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        if (!end) end = cJSON_GetErrorPtr();
        json_syntax_error(text, end, source, what);
    }
    return root;
}

int dx_config_parse(dx_config *c, const char *json_text, const char *source)
{
    if (!source) source = "(config)";
    if (!json_text) return dx_fail("%s: no JSON text", source);
    cJSON *root = parse_json(json_text, source, "JSON");
    if (!root) return -1;
    dx_config tmp = *c;
    int rc = apply_object(&tmp, &root_spec, root, "", source);
    cJSON_Delete(root);
    if (rc < 0) return -1;
    snprintf(tmp.source, sizeof tmp.source, "%s", source);
    *c = tmp;
    return 0;
}

int dx_config_load(dx_config *c, const char *path)
{
    char *text = dx_read_file(path, NULL);
    if (!text) return -1;
    int rc = dx_config_parse(c, text, path);
    free(text);
    return rc;
}

/* Strict decimal number: whole string (surrounding blanks allowed), finite. */
static int parse_number_text(const char *s, double *out)
{
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return -1;
    errno = 0;
    char *end;
    double d = strtod(s, &end);
    if (end == s) return -1;
    while (isspace((unsigned char)*end)) end++;
    if (*end || !isfinite(d)) return -1;
    *out = d;
    return 0;
}

int dx_config_set(dx_config *c, const char *key_path, const char *value, const char *source)
{
    if (!source) source = "(flag)";
    if (!key_path || !*key_path) return dx_fail("%s: empty key path", source);
    if (!value) return dx_fail("%s: key '%s': missing value", source, key_path);

    /* Walk the schema along the dotted path. */
    const key_spec *s = &root_spec;
    const char *p = key_path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char name[128];
        if (n == 0 || n >= sizeof name) return dx_fail("%s: unknown key '%s'", source, key_path);
        memcpy(name, p, n);
        name[n] = 0;
        s = find_child(s, name);
        if (!s) return dx_fail("%s: unknown key '%s'", source, key_path);
        p += n;
        if (*p == '.') {
            p++;
            if (!*p) return dx_fail("%s: unknown key '%s'", source, key_path);
        }
    }

    /* Convert the text to a JSON value of the key's type. */
    cJSON *v = NULL;
    switch (s->kind) {
    case K_OBJECT:
        v = parse_json(value, source, "JSON value");
        if (!v) return dx_fail_prefix("key '%s'", key_path);
        break;
    case K_INT:
    case K_LONG:
    case K_SEED:
    case K_TBS:
    case K_DOUBLE: {
        double d;
        if (parse_number_text(value, &d) < 0)
            return dx_fail("%s: key '%s': expected %s, got '%s'", source, key_path,
                           kind_name(s->kind), value);
        v = cJSON_CreateNumber(d);
        break;
    }
    case K_STRING:
    case K_ENUM:
    case K_COMMENT:
        v = cJSON_CreateString(value);
        break;
    case K_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "1")) v = cJSON_CreateTrue();
        else if (!strcmp(value, "false") || !strcmp(value, "0")) v = cJSON_CreateFalse();
        else return dx_fail("%s: key '%s': expected true or false, got '%s'", source, key_path, value);
        break;
    case K_BETAS: {
        const char *q = value;
        while (isspace((unsigned char)*q)) q++;
        size_t n = strlen(value);
        char *text = malloc(n + 3);
        if (!text) return dx_fail("%s: out of memory", source);
        if (*q == '[')
            memcpy(text, value, n + 1);
        else
            snprintf(text, n + 3, "[%s]", value);
        v = cJSON_ParseWithOpts(text, NULL, 1);
        free(text);
        if (!v)
            return dx_fail("%s: key '%s': expected 2 numbers (\"0.9,0.95\"), got '%s'", source,
                           key_path, value);
        break;
    }
    }
    if (!v) return dx_fail("%s: out of memory", source);

    dx_config tmp = *c;
    int rc = apply_value(&tmp, s, v, key_path, source);
    cJSON_Delete(v);
    if (rc < 0) return -1;
    *c = tmp;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Cross-key checks                                                                            */

int dx_config_check_grid(const dx_config *c)
{
    const char *src = c->source[0] ? c->source : "config";
    const dx_model_config *m = &c->model;
    const int tp = c->tp, pp = c->pp, L = m->num_hidden_layers;
    if (tp > 1) {
        if (m->num_attention_heads % tp)
            return dx_fail("%s: key 'tensor_model_parallel_size' = %d: must divide "
                           "model.num_attention_heads (%d)", src, tp, m->num_attention_heads);
        /* KV heads are split when tp divides them; with fewer KV heads than TP ranks, each rank
         * uses the one KV head of its query heads and k_proj / v_proj are replicated on every
         * TP rank (gradients summed over TP), which needs tp to be a multiple of them */
        if (m->num_key_value_heads % tp && tp % m->num_key_value_heads)
            return dx_fail("%s: key 'tensor_model_parallel_size' = %d: must divide "
                           "model.num_key_value_heads (%d) or be a multiple of it", src, tp,
                           m->num_key_value_heads);
        if (m->intermediate_size % tp)
            return dx_fail("%s: key 'tensor_model_parallel_size' = %d: must divide "
                           "model.intermediate_size (%d)", src, tp, m->intermediate_size);
        if (m->vocab_size % tp)
            return dx_fail("%s: key 'tensor_model_parallel_size' = %d: must divide "
                           "model.vocab_size (%d) (vocab-parallel embedding and LM head)", src,
                           tp, m->vocab_size);
        if (c->sequence_parallel && ((long)c->micro_batch * c->seq_length) % tp)
            return dx_fail("%s: key 'sequence_parallel': train_micro_batch_size_per_gpu x "
                           "seq_length = %d x %d must be divisible by "
                           "tensor_model_parallel_size (%d)", src, c->micro_batch,
                           c->seq_length, tp);
    }
    if (pp > L)
        return dx_fail("%s: key 'pipeline_model_parallel_size' = %d: more stages than "
                       "model.num_hidden_layers (%d)", src, pp, L);
    if (pp == 1 && (c->first_stage_layers || c->last_stage_layers))
        return dx_fail("%s: key '%s': needs pipeline_model_parallel_size > 1", src,
                       c->first_stage_layers ? "decoder_first_pipeline_num_layers"
                                             : "decoder_last_pipeline_num_layers");
    if (pp > 1) {
        int a = c->first_stage_layers, b = c->last_stage_layers;
        int mid = pp - (a ? 1 : 0) - (b ? 1 : 0);
        int64_t rest = (int64_t)L - a - b; /* a and b up to INT_MAX each */
        if (rest < 0 || (mid == 0 && rest != 0) || (mid > 0 && (rest % mid || rest / mid == 0)))
            return dx_fail("%s: key 'pipeline_model_parallel_size' = %d: model.num_hidden_layers "
                           "(%d) less decoder_first_pipeline_num_layers (%d) and "
                           "decoder_last_pipeline_num_layers (%d) must split evenly over the "
                           "other %d stage(s), at least one layer each", src, pp, L, a, b, mid);
        if (c->zero_stage == 3)
            return dx_fail("%s: key 'zero_optimization.stage' = 3 with "
                           "pipeline_model_parallel_size = %d: ZeRO-3 does not compose with "
                           "pipeline parallelism in dissect (use stage 0-2, as DeepSpeed does)",
                           src, pp);
    }
    if (c->pp_schedule == DX_PP_INTERLEAVED) {
        int v = c->layers_per_virtual_stage;
        if (pp < 2)
            return dx_fail("%s: key 'pipeline_schedule': \"interleaved-1f1b\" needs "
                           "pipeline_model_parallel_size > 1", src);
        if (v < 1)
            return dx_fail("%s: key 'num_layers_per_virtual_pipeline_stage': must be set (>= 1) "
                           "for pipeline_schedule \"interleaved-1f1b\"", src);
        if (c->first_stage_layers || c->last_stage_layers)
            return dx_fail("%s: key 'decoder_first_pipeline_num_layers': uneven stages do not "
                           "combine with pipeline_schedule \"interleaved-1f1b\"", src);
        const int64_t pv = (int64_t)pp * v;
        if (L % pv || L / pv < 2)
            return dx_fail("%s: key 'num_layers_per_virtual_pipeline_stage' = %d: "
                           "model.num_hidden_layers (%d) must be a multiple of "
                           "pipeline_model_parallel_size x it (%lld) with at least 2 model chunks "
                           "per stage", src, v, L, (long long)pv);
        if (L / pv > DX_PP_MAX_CHUNKS)
            return dx_fail("%s: key 'num_layers_per_virtual_pipeline_stage' = %d: %d model chunks per "
                           "stage, at most %d", src, v, (int)(L / pv), DX_PP_MAX_CHUNKS);
        if (c->grad_accum % pp)
            return dx_fail("%s: key 'gradient_accumulation_steps' = %d: the interleaved schedule "
                           "needs a multiple of pipeline_model_parallel_size (%d) micro-batches",
                           src, c->grad_accum, pp);
    } else if (c->layers_per_virtual_stage) {
        return dx_fail("%s: key 'num_layers_per_virtual_pipeline_stage': only with "
                       "pipeline_schedule \"interleaved-1f1b\"", src);
    }
    return 0;
}

int dx_stage_layers(const dx_config *c, int stage, int *first)
{
    const int L = c->model.num_hidden_layers, P = c->pp;
    int a = c->first_stage_layers, b = c->last_stage_layers;
    if (P == 1) { *first = 0; return L; }
    int mid = P - (a ? 1 : 0) - (b ? 1 : 0), rest = L - a - b;
    int each = mid > 0 ? rest / mid : 0;
    int n0 = a ? a : each, nl = b ? b : each;
    if (stage == 0) { *first = 0; return n0; }
    if (stage == P - 1) { *first = L - nl; return nl; }
    *first = n0 + (stage - 1) * each;
    return each;
}

int dx_config_finalize(dx_config *c, int world)
{
    const char *src = c->source[0] ? c->source : "config";
    const dx_model_config *m = &c->model;
    if (world < 1) return dx_fail("%s: world size must be >= 1, got %d", src, world);
    /* the process grid: world = PP x DP x TP */
    const int64_t grid = (int64_t)c->tp * c->pp; /* each up to INT_MAX: no int product */
    if (world % grid != 0)
        return dx_fail("%s: key 'tensor_model_parallel_size' (%d) x 'pipeline_model_parallel_size' "
                       "(%d) = %lld does not divide the world size %d",
                       src, c->tp, c->pp, (long long)grid, world);
    int dp = (int)(world / grid);
    c->dp = dp;
    /* a Hugging Face model directory gives the shape (its errors name DIR/config.json) */
    if (c->hf_model[0] && dx_hf_load_config(c->hf_model, &c->model)) return -1;

    if (m->num_attention_heads < 1 || m->num_key_value_heads < 1 || m->hidden_size < 1)
        return dx_fail("%s: key 'model': sizes must be positive", src);
    if (m->hidden_size % m->num_attention_heads != 0)
        return dx_fail("%s: key 'model.hidden_size' = %d: must be divisible by "
                       "model.num_attention_heads (%d)",
                       src, m->hidden_size, m->num_attention_heads);
    if (m->num_attention_heads % m->num_key_value_heads != 0)
        return dx_fail("%s: key 'model.num_key_value_heads' = %d: must divide "
                       "model.num_attention_heads (%d)",
                       src, m->num_key_value_heads, m->num_attention_heads);
    int head_dim = m->hidden_size / m->num_attention_heads;
    if (head_dim % 2 != 0)
        return dx_fail("%s: key 'model.hidden_size': head dimension hidden_size / "
                       "num_attention_heads = %d / %d = %d must be even (rotary embeddings)",
                       src, m->hidden_size, m->num_attention_heads, head_dim);
    if (dx_model_num_params(m) > DX_MODEL_MAX_PARAMS)
        return dx_fail("%s: key 'model': %d layers of hidden size %d (FFN %d, vocabulary %d) make more than "
                       "2^53 parameters", src, m->num_hidden_layers, m->hidden_size, m->intermediate_size,
                       m->vocab_size);
    if (c->seq_length > m->max_position_embeddings)
        return dx_fail("%s: key 'seq_length' = %d: exceeds model.max_position_embeddings (%d)",
                       src, c->seq_length, m->max_position_embeddings);
    if (dx_config_check_grid(c) < 0) return -1;
    if (c->offload_optimizer && c->zero_stage < 1)
        return dx_fail("%s: key 'zero_optimization.offload_optimizer.device' = \"cpu\": needs ZeRO stage 1, 2 "
                       "or 3 (zero_optimization.stage is 0), as in DeepSpeed", src);
    if (c->save_interval > 0 && !c->save_dir[0])
        return dx_fail("%s: key 'save_interval' = %ld: needs 'save_dir' (the run directory the checkpoints go to)",
                       src, c->save_interval);
    if (c->async_save && c->save_interval <= 0)
        return dx_fail("%s: key 'async_save' = true: needs 'save_dir' and 'save_interval' (it applies to the periodic "
                       "checkpoints)", src);
    if (!strcmp(c->resume, "auto") && !c->save_dir[0])
        return dx_fail("%s: key 'resume' = \"auto\": needs 'save_dir' (where to look for the newest checkpoint)", src);
    if (c->quantize_nf4 && c->lora_r == 0)
        return dx_fail("%s: key 'quantize' = \"nf4\": needs lora.r > 0 (QLoRA quantizes the frozen base of LoRA)", src);
    if (c->quantize_nf4 && c->tp > 1)
        return dx_fail("%s: key 'quantize' = \"nf4\": not with tensor_model_parallel_size %d (each TP rank would "
                       "quantize its slice with its own block statistics, so the run would not match one process's); "
                       "use data or pipeline parallelism", src, c->tp);
    if (c->lora_save[0] && c->lora_r == 0)
        return dx_fail("%s: key 'lora.save': needs lora.r > 0 (there are no adapters to save)", src);
    if (c->lora_r > 0) {
        if (c->lora_r > c->model.hidden_size)
            return dx_fail("%s: key 'lora.r' = %d: exceeds model.hidden_size (%d); a low-rank adapter's rank is "
                           "far below the layer widths", src, c->lora_r, c->model.hidden_size);
        if (!(c->lora_dropout < 1))
            return dx_fail("%s: key 'lora.lora_dropout' = %g: must be below 1 (a probability of dropping)", src,
                           c->lora_dropout);
        if (c->offload_optimizer)
            return dx_fail("%s: key 'lora.r' = %d: LoRA with zero_optimization.offload_optimizer is not supported "
                           "yet (the adapters' states are small: use ZeRO stage 0-3 without offload)", src, c->lora_r);
        if (c->tp > 1 && c->model.num_key_value_heads % c->tp != 0 &&
            (c->lora_targets & ((1u << DX_LORA_K) | (1u << DX_LORA_V))))
            return dx_fail("%s: key 'lora.target_modules': k_proj and v_proj adapters need tensor_model_parallel_size "
                           "(%d) to divide model.num_key_value_heads (%d) (replicated KV heads are not supported with "
                           "LoRA)", src, c->tp, c->model.num_key_value_heads);
    }
    if (c->offload_param && c->zero_stage != 3)
        return dx_fail("%s: key 'zero_optimization.offload_param.device' = \"cpu\": needs ZeRO stage 3 "
                       "(zero_optimization.stage is %d), as in DeepSpeed", src, c->zero_stage);
    if (c->offload_param && !c->offload_optimizer)
        return dx_fail("%s: key 'zero_optimization.offload_param.device' = \"cpu\": needs "
                       "zero_optimization.offload_optimizer.device \"cpu\" too (dissect updates host-resident "
                       "parameters with the host AdamW only)", src);
    if (c->recompute == DX_RECOMPUTE_SELECTIVE && (c->recompute_method_set || c->recompute_num_layers))
        return dx_fail("%s: key '%s': only with recompute_granularity \"full\" (selective recomputation "
                       "covers every layer)", src, c->recompute_method_set ? "recompute_method" : "recompute_num_layers");
    if (c->recompute == DX_RECOMPUTE_NONE && (c->recompute_method_set || c->recompute_num_layers))
        return dx_fail("%s: key '%s': needs recompute_granularity \"full\"", src,
                       c->recompute_method_set ? "recompute_method" : "recompute_num_layers");
    if (c->recompute == DX_RECOMPUTE_FULL) {
        if (!c->recompute_method_set)
            return dx_fail("%s: key 'recompute_method': must be set (\"uniform\" or \"block\") with "
                           "recompute_granularity \"full\"", src);
        if (c->recompute_method == DX_RECOMPUTE_UNIFORM && c->recompute_num_layers > 1)
            return dx_fail("%s: key 'recompute_num_layers' = %d: with recompute_method \"uniform\" "
                           "dissect keeps every layer's input (1 layer per recomputed group)", src,
                           c->recompute_num_layers);
        if (c->recompute_method == DX_RECOMPUTE_BLOCK && c->recompute_num_layers < 1)
            return dx_fail("%s: key 'recompute_num_layers': must be set (>= 1) with recompute_method "
                           "\"block\"", src);
        int per_chunk = INT_MAX; /* the fewest layers of any model chunk */
        if (c->pp_schedule == DX_PP_INTERLEAVED && c->pp > 1) per_chunk = c->layers_per_virtual_stage;
        for (int st = 0; c->pp_schedule != DX_PP_INTERLEAVED && st < c->pp; st++) {
            int f, n = dx_stage_layers(c, st, &f);
            if (n < per_chunk) per_chunk = n;
        }
        if (c->recompute_method == DX_RECOMPUTE_BLOCK && c->recompute_num_layers > per_chunk)
            return dx_fail("%s: key 'recompute_num_layers' = %d: more than the %d layers of a pipeline "
                           "stage's model chunk", src, c->recompute_num_layers, per_chunk);
    }

    /* a warm-up longer than the run (short tests) just never reaches the peak lr */
    long decay = c->lr_decay_iters ? c->lr_decay_iters : c->train_iters;
    if (c->min_lr > c->lr)
        return dx_fail("%s: key 'min_lr' = %.16g: exceeds optimizer.params.lr (%.16g)", src,
                       c->min_lr, c->lr);

    int64_t prod = (int64_t)c->micro_batch * c->grad_accum; /* < 2^62; x dp could overflow */
    prod = prod > INT_MAX / dp ? (int64_t)INT_MAX + 1 : prod * dp;
    if (prod > INT_MAX)
        return dx_fail("%s: key 'train_batch_size': train_micro_batch_size_per_gpu (%d) x "
                       "gradient_accumulation_steps (%d) x data-parallel size (%d) is too large",
                       src, c->micro_batch, c->grad_accum, dp);
    if (c->train_batch_size_set && c->global_batch != 0) {
        if (c->global_batch % dp != 0)
            return dx_fail("%s: key 'train_batch_size': data-parallel size %d does not divide "
                           "train_batch_size %d",
                           src, dp, c->global_batch);
        if (c->global_batch != prod)
            return dx_fail("%s: key 'train_batch_size' = %d does not equal "
                           "train_micro_batch_size_per_gpu (%d) x gradient_accumulation_steps "
                           "(%d) x data-parallel size (%d) = %lld",
                           src, c->global_batch, c->micro_batch, c->grad_accum, dp,
                           (long long)prod);
    }
    c->global_batch = (int)prod;
    c->lr_decay_iters = decay;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Serialisation                                                                               */

/* cJSON prints numbers with %1.15g and an approximate comparison, which can lose the last bits
 * of a double (and of integers above 2^49); numbers are therefore added as raw text: the
 * shortest of %.15g/%.16g/%.16g that reads back exactly, integers in decimal. */
static cJSON *add_double(cJSON *obj, const char *name, double v)
{
    char buf[40];
    if (!isfinite(v)) v = 0; /* never produced by the parser */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return obj ? cJSON_AddRawToObject(obj, name, buf) : cJSON_CreateRaw(buf);
}

static cJSON *add_int(cJSON *obj, const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return cJSON_AddRawToObject(obj, name, buf);
}

char *dx_config_to_json(const dx_config *c)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    const dx_model_config *m = &c->model;
    int ok = 1;
#define CHK(x) ok = ok && ((x) != NULL)
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    CHK(model);
    if (ok) {
        if (find_preset(m->preset)) /* an unknown name would not parse back */
            CHK(cJSON_AddStringToObject(model, "preset", m->preset));
        CHK(add_int(model, "vocab_size", (long long)m->vocab_size));
        CHK(add_int(model, "hidden_size", (long long)m->hidden_size));
        CHK(add_int(model, "intermediate_size", (long long)m->intermediate_size));
        CHK(add_int(model, "num_hidden_layers", (long long)m->num_hidden_layers));
        CHK(add_int(model, "num_attention_heads", (long long)m->num_attention_heads));
        CHK(add_int(model, "num_key_value_heads", (long long)m->num_key_value_heads));
        CHK(add_int(model, "max_position_embeddings", (long long)m->max_position_embeddings));
        CHK(add_double(model, "rms_norm_eps", m->rms_norm_eps));
        CHK(add_double(model, "rope_theta", m->rope_theta));
        CHK(add_double(model, "initializer_range", m->initializer_range));
    }
    cJSON *data = cJSON_AddObjectToObject(root, "data");
    CHK(data);
    if (ok) {
        CHK(cJSON_AddStringToObject(data, "train", c->train_path));
        CHK(cJSON_AddStringToObject(data, "valid", c->valid_path));
        CHK(cJSON_AddStringToObject(data, "tokenizer", c->tokenizer_path));
    }
    CHK(cJSON_AddStringToObject(root, "save", c->save_path));
    CHK(cJSON_AddStringToObject(root, "hf_model", c->hf_model));
    CHK(cJSON_AddStringToObject(root, "save_dir", c->save_dir));
    CHK(add_int(root, "save_interval", (long long)c->save_interval));
    CHK(add_int(root, "keep_last", (long long)c->keep_last));
    CHK(cJSON_AddBoolToObject(root, "async_save", c->async_save));
    CHK(add_double(root, "distributed_timeout_minutes", c->distributed_timeout_minutes));
    CHK(cJSON_AddStringToObject(root, "resume", c->resume));
    CHK(add_int(root, "seq_length", (long long)c->seq_length));
    CHK(add_int(root, "train_micro_batch_size_per_gpu", (long long)c->micro_batch));
    CHK(add_int(root, "gradient_accumulation_steps", (long long)c->grad_accum));
    CHK(add_int(root, "train_batch_size", (long long)c->global_batch));
    CHK(add_int(root, "train_iters", (long long)c->train_iters));
    CHK(add_int(root, "lr_warmup_iters", (long long)c->lr_warmup_iters));
    CHK(add_int(root, "lr_decay_iters", (long long)c->lr_decay_iters));
    CHK(add_double(root, "min_lr", c->min_lr));
    CHK(add_double(root, "gradient_clipping", c->grad_clip));
    CHK(add_int(root, "seed", (long long)c->seed));
    CHK(add_int(root, "eval_interval", (long long)c->eval_interval));
    CHK(add_int(root, "eval_iters", (long long)c->eval_iters));
    CHK(cJSON_AddBoolToObject(root, "eval_on_start", c->eval_on_start));
    CHK(add_int(root, "log_interval", (long long)c->log_interval));
    cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
    CHK(opt);
    if (ok) {
        CHK(cJSON_AddStringToObject(opt, "type", "AdamW"));
        cJSON *params = cJSON_AddObjectToObject(opt, "params");
        CHK(params);
        if (ok) {
            CHK(add_double(params, "lr", c->lr));
            cJSON *b = cJSON_AddArrayToObject(params, "betas");
            CHK(b);
            cJSON *b1 = ok ? add_double(NULL, NULL, c->beta1) : NULL;
            CHK(b1);
            if (ok) cJSON_AddItemToArray(b, b1);
            cJSON *b2 = ok ? add_double(NULL, NULL, c->beta2) : NULL;
            CHK(b2);
            if (ok) cJSON_AddItemToArray(b, b2);
            CHK(add_double(params, "eps", c->adam_eps));
            CHK(add_double(params, "weight_decay", c->weight_decay));
        }
    }
    cJSON *zero = cJSON_AddObjectToObject(root, "zero_optimization");
    CHK(zero);
    if (ok) CHK(add_int(zero, "stage", (long long)c->zero_stage));
    const char *off_name[2] = {"offload_optimizer", "offload_param"};
    const int off_on[2] = {c->offload_optimizer, c->offload_param};
    const int off_pin[2] = {c->offload_pin_memory, c->offload_param_pin_memory};
    for (int k = 0; k < 2 && ok; k++) {
        cJSON *off = cJSON_AddObjectToObject(zero, off_name[k]);
        CHK(off);
        if (ok) {
            CHK(cJSON_AddStringToObject(off, "device", off_on[k] ? "cpu" : "none"));
            CHK(cJSON_AddBoolToObject(off, "pin_memory", off_pin[k]));
        }
    }
    CHK(add_int(root, "tensor_model_parallel_size", (long long)c->tp));
    CHK(add_int(root, "pipeline_model_parallel_size", (long long)c->pp));
    CHK(cJSON_AddBoolToObject(root, "sequence_parallel", c->sequence_parallel));
    CHK(cJSON_AddStringToObject(root, "pipeline_schedule", dx_pp_schedule_names[c->pp_schedule]));
    CHK(add_int(root, "num_layers_per_virtual_pipeline_stage", (long long)c->layers_per_virtual_stage));
    CHK(add_int(root, "decoder_first_pipeline_num_layers", (long long)c->first_stage_layers));
    CHK(add_int(root, "decoder_last_pipeline_num_layers", (long long)c->last_stage_layers));
    CHK(cJSON_AddStringToObject(root, "recompute_granularity", recompute_names[c->recompute]));
    if (c->recompute_method_set)
        CHK(cJSON_AddStringToObject(root, "recompute_method", recompute_method_names[c->recompute_method]));
    if (c->recompute_num_layers) CHK(add_int(root, "recompute_num_layers", (long long)c->recompute_num_layers));
    cJSON *trace = cJSON_AddObjectToObject(root, "trace");
    CHK(trace);
    if (ok) {
        CHK(cJSON_AddStringToObject(trace, "path", c->trace_path));
        int lv = (int)c->trace_level;
        CHK(cJSON_AddStringToObject(trace, "level",
                                    trace_level_names[lv >= 0 && lv < 3 ? lv : 0]));
    }
    CHK(cJSON_AddStringToObject(root, "device", c->device));
    if (c->lora_r > 0 || c->lora_alpha != 8 || c->lora_dropout != 0 || c->lora_save[0] ||
        c->lora_targets != ((1u << DX_LORA_Q) | (1u << DX_LORA_V))) {
        cJSON *lora = cJSON_AddObjectToObject(root, "lora");
        CHK(lora);
        CHK(cJSON_AddNumberToObject(lora, "r", c->lora_r));
        CHK(add_double(lora, "lora_alpha", c->lora_alpha));
        CHK(add_double(lora, "lora_dropout", c->lora_dropout));
        if (c->lora_save[0]) CHK(cJSON_AddStringToObject(lora, "save", c->lora_save));
        cJSON *tm = cJSON_AddArrayToObject(lora, "target_modules");
        CHK(tm);
        for (int t = 0; t < DX_LORA_NTARGETS; t++)
            if ((c->lora_targets & (1u << t)) && tm && !cJSON_AddItemToArray(tm, cJSON_CreateString(dx_lora_target_names[t])))
                ok = 0;
    }
    if (c->quantize_nf4) CHK(cJSON_AddStringToObject(root, "quantize", "nf4"));
    cJSON *sample = cJSON_AddObjectToObject(root, "sample");
    CHK(sample);
    if (ok) {
        CHK(add_int(sample, "tokens", (long long)c->sample_tokens));
        CHK(add_double(sample, "temperature", c->sample_temperature));
    }
#undef CHK
    char *out = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!out) return NULL;
    /* cJSON allocates with its own hooks (malloc by default); hand back a plain malloc copy. */
    char *copy = dx_strdup(out);
    cJSON_free(out);
    return copy;
}
