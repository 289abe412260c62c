/* Fuzz harness: the run configuration (src/config/config.c: dx_config_parse, dx_config_set,
 * dx_config_finalize, dx_config_to_json, dx_model_num_params) and the Hugging Face config.json
 * reader (src/config/hf_config.c: dx_hf_load_config).
 *
 * Input: up to three parts separated by NUL bytes:
 *   A  the run config JSON text (what `--config FILE` reads),
 *   B  (optional) a Hugging Face config.json, written to the scratch directory, which becomes
 *      the config's hf_model directory (otherwise hf_model is cleared: no file outside the
 *      scratch directory is read),
 *   C  (optional) flag overrides, one "key=value" per line (what the command-line flags set).
 * Checked: a rejected file, key or config.json leaves its struct unchanged and names the
 * source; an accepted config round-trips through dx_config_to_json exactly (every field); an
 * accepted dx_config_finalize satisfies what the rest of dissect relies on (world = PP x DP x TP,
 * global batch = micro x accumulation x DP, model shape divisible, stage layer counts that add up to
 * the model's layers); dx_model_num_params of a finalized model is positive. */
#include "fuzz_util.h"

#include <math.h>

#include "config/config.h"

#define SOURCE "fuzz.json"

static int same_str(const char *a, const char *b) { return strcmp(a, b) == 0; }

/* Every field but source (and, when !tbs, train_batch_size_set). */
static int same_config(const dx_config *a, const dx_config *b, int tbs)
{
    const dx_model_config *x = &a->model, *y = &b->model;
    /* a custom shape (preset "": a Hugging Face config.json) is written without a preset, so it
     * reads back with the starting config's preset name (a label only) */
    return (!x->preset[0] || same_str(x->preset, y->preset)) && x->vocab_size == y->vocab_size &&
           x->hidden_size == y->hidden_size && x->intermediate_size == y->intermediate_size &&
           x->num_hidden_layers == y->num_hidden_layers && x->num_attention_heads == y->num_attention_heads &&
           x->num_key_value_heads == y->num_key_value_heads &&
           x->max_position_embeddings == y->max_position_embeddings && x->rms_norm_eps == y->rms_norm_eps &&
           x->rope_theta == y->rope_theta && x->initializer_range == y->initializer_range &&
           same_str(a->train_path, b->train_path) && same_str(a->valid_path, b->valid_path) &&
           same_str(a->tokenizer_path, b->tokenizer_path) && same_str(a->save_path, b->save_path) &&
           same_str(a->save_dir, b->save_dir) && a->save_interval == b->save_interval &&
           a->async_save == b->async_save &&
           a->keep_last == b->keep_last && a->distributed_timeout_minutes == b->distributed_timeout_minutes &&
           same_str(a->resume, b->resume) && same_str(a->hf_model, b->hf_model) &&
           a->seq_length == b->seq_length && a->micro_batch == b->micro_batch && a->grad_accum == b->grad_accum &&
           a->global_batch == b->global_batch && (!tbs || a->train_batch_size_set == b->train_batch_size_set) &&
           a->train_iters == b->train_iters && a->lr == b->lr && a->min_lr == b->min_lr &&
           a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->adam_eps == b->adam_eps &&
           a->weight_decay == b->weight_decay && a->grad_clip == b->grad_clip &&
           a->lr_warmup_iters == b->lr_warmup_iters && a->lr_decay_iters == b->lr_decay_iters &&
           a->seed == b->seed && a->zero_stage == b->zero_stage && a->tp == b->tp && a->pp == b->pp &&
           a->sequence_parallel == b->sequence_parallel && a->pp_schedule == b->pp_schedule &&
           a->layers_per_virtual_stage == b->layers_per_virtual_stage &&
           a->first_stage_layers == b->first_stage_layers && a->last_stage_layers == b->last_stage_layers &&
           a->offload_optimizer == b->offload_optimizer && a->offload_pin_memory == b->offload_pin_memory &&
           a->offload_param == b->offload_param && a->offload_param_pin_memory == b->offload_param_pin_memory &&
           a->recompute == b->recompute && a->recompute_method_set == b->recompute_method_set &&
           (!a->recompute_method_set || a->recompute_method == b->recompute_method) &&
           a->recompute_num_layers == b->recompute_num_layers && a->eval_interval == b->eval_interval &&
           a->eval_iters == b->eval_iters && a->eval_on_start == b->eval_on_start && a->log_interval == b->log_interval &&
           a->sample_tokens == b->sample_tokens && a->sample_temperature == b->sample_temperature &&
           same_str(a->trace_path, b->trace_path) && a->trace_level == b->trace_level &&
           same_str(a->device, b->device) && a->lora_r == b->lora_r && a->lora_alpha == b->lora_alpha &&
           a->lora_dropout == b->lora_dropout && a->lora_targets == b->lora_targets &&
           same_str(a->lora_save, b->lora_save) && a->quantize_nf4 == b->quantize_nf4;
}

/* dx_config_to_json, parsed back over a different starting config, gives the same config. */
static void check_round_trip(const dx_config *c, int tbs, const char *when)
{
    char *json = dx_config_to_json(c);
    FZ_CHECK(json != NULL, "dx_config_to_json failed (%s)", when);
    dx_config back;
    dx_config_defaults(&back);
    dx_model_preset(&back.model, "llama2-70b"); /* every field must be overwritten */
    back.seed = 999;
    back.tp = back.pp = 2;
    back.train_batch_size_set = !c->train_batch_size_set;
    int rc = dx_config_parse(&back, json, "roundtrip.json");
    FZ_CHECK(rc == 0, "the config written by dx_config_to_json (%s) does not parse back:\n%s", when, json);
    FZ_CHECK(same_config(c, &back, tbs), "round trip (%s) changed the config:\n%s", when, json);
    free(json);
}

/* A rejected input names its source and leaves the struct as it was. */
static void check_rejected(const char *what, const void *before, const void *after, size_t n,
                           const char *source)
{
    FZ_CHECK(memcmp(before, after, n) == 0, "%s failed but changed the struct", what);
    FZ_CHECK(strstr(dx_last_error(), source) != NULL, "%s: the message does not name '%s': %s", what,
             source, dx_last_error());
}

static void check_finalized(const dx_config *c, int world)
{
    const dx_model_config *m = &c->model;
    FZ_CHECK(c->tp >= 1 && c->pp >= 1 && c->dp >= 1 && (int64_t)c->tp * c->pp * c->dp == world,
             "finalize accepted tp %d x pp %d x dp %d for world %d", c->tp, c->pp, c->dp, world);
    FZ_CHECK((int64_t)c->global_batch == (int64_t)c->micro_batch * c->grad_accum * c->dp,
             "global batch %d != %d x %d x %d", c->global_batch, c->micro_batch, c->grad_accum, c->dp);
    FZ_CHECK(m->num_attention_heads >= 1 && m->num_key_value_heads >= 1 &&
                 m->hidden_size % m->num_attention_heads == 0 &&
                 m->num_attention_heads % m->num_key_value_heads == 0 &&
                 (m->hidden_size / m->num_attention_heads) % 2 == 0,
             "finalize accepted an impossible shape: hidden %d, heads %d, kv heads %d", m->hidden_size,
             m->num_attention_heads, m->num_key_value_heads);
    FZ_CHECK(c->seq_length <= m->max_position_embeddings, "seq_length %d > max_position_embeddings %d",
             c->seq_length, m->max_position_embeddings);
    FZ_CHECK(c->pp <= m->num_hidden_layers, "pp %d > layers %d", c->pp, m->num_hidden_layers);
    FZ_CHECK(c->min_lr <= c->lr, "min_lr %g > lr %g", c->min_lr, c->lr);
    if (c->pp_schedule != DX_PP_INTERLEAVED) {
        int64_t total = 0;
        int next = 0;
        for (int s = 0; s < c->pp; s++) {
            int first = -1, n = dx_stage_layers(c, s, &first);
            FZ_CHECK(n >= 1 && first == next, "stage %d of %d: %d layers from %d (expected from %d)", s,
                     c->pp, n, first, next);
            next = first + n;
            total += n;
        }
        FZ_CHECK(total == m->num_hidden_layers, "stages hold %lld layers, the model %d", (long long)total,
                 m->num_hidden_layers);
    } else {
        FZ_CHECK(c->layers_per_virtual_stage >= 1 &&
                     m->num_hidden_layers % (c->pp * c->layers_per_virtual_stage) == 0,
                 "interleaved: %d layers, pp %d, %d per virtual stage", m->num_hidden_layers, c->pp,
                 c->layers_per_virtual_stage);
    }
    int64_t np = dx_model_num_params(m), ne = dx_model_num_params_nonembed(m);
    FZ_CHECK(np > 0 && ne > 0 && ne < np, "parameter counts %lld (non-embedding %lld)", (long long)np,
             (long long)ne);
}

/* Part C: "key=value" lines through dx_config_set. */
static void apply_overrides(dx_config *c, char *text)
{
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char *eq = strchr(line, '=');
        if (eq) {
            *eq = '\0';
            dx_config before = *c;
            if (dx_config_set(c, line, eq + 1, "--flag") != 0)
                check_rejected("dx_config_set", &before, c, sizeof *c, "--flag");
            else
                FZ_CHECK(same_str(c->source, before.source), "dx_config_set changed source");
        }
        line = nl ? nl + 1 : NULL;
    }
}

static void check_hf(const char *dir)
{
    dx_model_config m, before;
    memset(&m, 0x5a, sizeof m);
    before = m;
    char path[300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (dx_hf_load_config(dir, &m) != 0) {
        check_rejected("dx_hf_load_config", &before, &m, sizeof m, path);
        return;
    }
    FZ_CHECK(m.vocab_size >= 1 && m.hidden_size >= 1 && m.intermediate_size >= 1 && m.num_hidden_layers >= 1 &&
                 m.num_attention_heads >= 1 && m.num_key_value_heads >= 1 && m.max_position_embeddings >= 1,
             "config.json accepted with a non-positive size");
    FZ_CHECK(m.hidden_size % m.num_attention_heads == 0 && m.num_attention_heads % m.num_key_value_heads == 0 &&
                 (m.hidden_size / m.num_attention_heads) % 2 == 0,
             "config.json accepted an impossible shape: hidden %d, heads %d, kv %d", m.hidden_size,
             m.num_attention_heads, m.num_key_value_heads);
    FZ_CHECK(m.rms_norm_eps > 0 && isfinite(m.rms_norm_eps) && m.rope_theta > 0 && isfinite(m.rope_theta) &&
                 m.initializer_range >= 0 && isfinite(m.initializer_range),
             "config.json accepted a bad number");
    FZ_CHECK(m.preset[0] == '\0', "config.json gave a preset name '%s'", m.preset);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* split into NUL-terminated parts */
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *part_a = buf, *part_b = NULL, *part_c = NULL;
    size_t la = strlen(part_a);
    if (la < size) {
        part_b = part_a + la + 1;
        size_t lb = strlen(part_b);
        if ((size_t)(part_b - buf) + lb < size) part_c = part_b + lb + 1;
    }
    char hf_dir[300] = "";
    if (part_b) {
        char path[300];
        snprintf(hf_dir, sizeof hf_dir, "%s", fz_dir());
        fz_path(path, sizeof path, "config.json");
        fz_write_file(path, part_b, strlen(part_b));
    }

    fz_quiet(1);
    dx_config c, before;
    dx_config_defaults(&c);
    before = c;
    if (dx_config_parse(&c, part_a, SOURCE) != 0) {
        check_rejected("dx_config_parse", &before, &c, sizeof c, SOURCE);
    } else {
        FZ_CHECK(same_str(c.source, SOURCE), "source is '%s'", c.source);
        check_round_trip(&c, 1, "parsed");
        if (part_c) apply_overrides(&c, part_c);
        check_round_trip(&c, 1, "with overrides");
        /* no file outside the scratch directory is read */
        snprintf(c.hf_model, sizeof c.hf_model, "%s", hf_dir);
        int world = 1 + (int)(size % 8);
        if (dx_config_finalize(&c, world) == 0) {
            check_finalized(&c, world);
            /* train_batch_size is written as the derived global batch: it reads back as given */
            check_round_trip(&c, 0, "finalized");
        } else {
            const char *msg = dx_last_error();
            FZ_CHECK(strstr(msg, SOURCE) || (hf_dir[0] && strstr(msg, hf_dir)),
                     "finalize error names neither the config nor config.json: %s", msg);
        }
    }
    if (part_b) check_hf(hf_dir);
    fz_quiet(0);
    free(buf);
    return 0;
}
