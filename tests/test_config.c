/* Tests of the run configuration (src/coordinator/config.c): defaults, presets and their
 * parameter counts, a full valid file, every error class, flag overrides, JSON round trip.
 * One line per check; the last line is "N passed, M failed"; exit status 1 if any failed. */
#define _POSIX_C_SOURCE 200809L
#include "common/common.h"
#include "config/config.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses `json` (source "bad.json") over defaults, then (if dp > 0 and parsing worked)
 * finalizes for dp ranks; expects -1 and a message containing "bad.json" and each needle. */
static void expect_error(const char *what, const char *json, int dp, const char *needle1,
                         const char *needle2)
{
    dx_config c;
    dx_config_defaults(&c);
    dx_fail("%s", "");
    int rc = dx_config_parse(&c, json, "bad.json");
    if (rc == 0 && dp > 0) rc = dx_config_finalize(&c, dp);
    const char *msg = dx_last_error();
    int ok = rc == -1 && strstr(msg, "bad.json") && (!needle1 || strstr(msg, needle1)) &&
             (!needle2 || strstr(msg, needle2));
    check(ok, "error %-34s -> %s", what, msg);
}

/* Same for a flag override over defaults. */
static void expect_set_error(const char *key, const char *value, const char *flag,
                             const char *needle)
{
    dx_config c, before;
    dx_config_defaults(&c);
    before = c;
    dx_fail("%s", "");
    int rc = dx_config_set(&c, key, value, flag);
    const char *msg = dx_last_error();
    int ok = rc == -1 && strstr(msg, flag) && strstr(msg, key) && (!needle || strstr(msg, needle)) &&
             memcmp(&c, &before, sizeof c) == 0;
    check(ok, "set error %s=%s -> %s", key, value, msg);
}

static int same_config(const dx_config *a, const dx_config *b)
{
    const dx_model_config *x = &a->model, *y = &b->model;
    return strcmp(x->preset, y->preset) == 0 && x->vocab_size == y->vocab_size &&
           x->hidden_size == y->hidden_size && x->intermediate_size == y->intermediate_size &&
           x->num_hidden_layers == y->num_hidden_layers &&
           x->num_attention_heads == y->num_attention_heads &&
           x->num_key_value_heads == y->num_key_value_heads &&
           x->max_position_embeddings == y->max_position_embeddings &&
           x->rms_norm_eps == y->rms_norm_eps && x->rope_theta == y->rope_theta &&
           x->initializer_range == y->initializer_range &&
           strcmp(a->train_path, b->train_path) == 0 && strcmp(a->valid_path, b->valid_path) == 0 &&
           strcmp(a->tokenizer_path, b->tokenizer_path) == 0 && a->seq_length == b->seq_length &&
           a->micro_batch == b->micro_batch && a->grad_accum == b->grad_accum &&
           a->global_batch == b->global_batch && a->train_iters == b->train_iters &&
           a->lr == b->lr && a->min_lr == b->min_lr && a->beta1 == b->beta1 &&
           a->beta2 == b->beta2 && a->adam_eps == b->adam_eps &&
           a->weight_decay == b->weight_decay && a->grad_clip == b->grad_clip &&
           a->lr_warmup_iters == b->lr_warmup_iters && a->lr_decay_iters == b->lr_decay_iters &&
           a->seed == b->seed && a->zero_stage == b->zero_stage &&
           a->eval_interval == b->eval_interval && a->eval_iters == b->eval_iters &&
           a->log_interval == b->log_interval && a->sample_tokens == b->sample_tokens &&
           a->sample_temperature == b->sample_temperature &&
           strcmp(a->trace_path, b->trace_path) == 0 && a->trace_level == b->trace_level &&
           strcmp(a->device, b->device) == 0;
}

/* to_json -> parse over a *different* starting config -> compare. */
static void round_trip(const char *what, const dx_config *c, int compare_tbs_flag)
{
    char *json = dx_config_to_json(c);
    dx_config back;
    dx_config_defaults(&back);
    dx_model_preset(&back.model, "llama2-70b"); /* must be fully overwritten */
    back.seed = 999;
    back.train_batch_size_set = !c->train_batch_size_set;
    int rc = json ? dx_config_parse(&back, json, "roundtrip.json") : -1;
    int ok = rc == 0 && same_config(c, &back) &&
             (!compare_tbs_flag || back.train_batch_size_set == c->train_batch_size_set);
    check(ok, "round trip %s%s%s", what, rc ? ": " : "", rc ? dx_last_error() : "");
    free(json);
}

static void check_preset(const char *name, int64_t want_total, int64_t want_nonembed)
{
    dx_model_config m;
    int rc = dx_model_preset(&m, name);
    int64_t t = rc ? -1 : dx_model_num_params(&m), ne = rc ? -1 : dx_model_num_params_nonembed(&m);
    check(rc == 0 && t == want_total && ne == want_nonembed,
          "preset %-15s params %lld (want %lld), non-embedding %lld (want %lld)", name,
          (long long)t, (long long)want_total, (long long)ne, (long long)want_nonembed);
    /* every preset passes the cross-key checks with its own max_position_embeddings */
    dx_config c;
    dx_config_defaults(&c);
    c.model = m;
    c.seq_length = m.max_position_embeddings;
    check(dx_config_finalize(&c, 1) == 0, "preset %-15s finalizes: %s", name,
          dx_last_error());
}

static const char *full_json =
    "{\n"
    "  \"comment\": \"a full example\",\n"
    "  \"model\": {\"num_hidden_layers\": 3, \"preset\": \"tiny\", \"vocab_size\": 128,\n"
    "            \"rms_norm_eps\": 1e-6, \"rope_theta\": 500000, \"initializer_range\": 0.01},\n"
    "  \"data\": {\"train\": \"data/train.bin\", \"valid\": \"data/valid.bin\",\n"
    "           \"tokenizer\": \"data/tok.model\"},\n"
    "  \"seq_length\": 32,\n"
    "  \"train_micro_batch_size_per_gpu\": 4,\n"
    "  \"gradient_accumulation_steps\": 2,\n"
    "  \"train_batch_size\": 16,\n"
    "  \"train_iters\": 500,\n"
    "  \"lr_warmup_iters\": 50,\n"
    "  \"lr_decay_iters\": 0,\n"
    "  \"min_lr\": 3e-5,\n"
    "  \"gradient_clipping\": 0,\n"
    "  \"seed\": 42,\n"
    "  \"eval_interval\": 25,\n"
    "  \"eval_iters\": 5,\n"
    "  \"log_interval\": 10,\n"
    "  \"optimizer\": {\"type\": \"adamw\",\n"
    "                \"params\": {\"lr\": 3e-4, \"betas\": [0.9, 0.999], \"eps\": 1e-6,\n"
    "                           \"weight_decay\": 0.01}},\n"
    "  \"zero_optimization\": {\"stage\": 2},\n"
    "  \"trace\": {\"path\": \"runs/t.h5\", \"level\": \"module\"},\n"
    "  \"device\": \"cuda\",\n"
    "  \"sample\": {\"tokens\": 20, \"temperature\": 1.5}\n"
    "}\n";

int main(void)
{
    dx_config c;

    /* ---- defaults ---- */
    dx_config_defaults(&c);
    check(strcmp(c.model.preset, "brown-small") == 0 && c.model.hidden_size == 256 &&
              c.model.num_hidden_layers == 4 && c.model.vocab_size == 4096,
          "defaults: brown-small model");
    check(c.seq_length == 128 && c.micro_batch == 8 && c.grad_accum == 1 && c.global_batch == 0 &&
              !c.train_batch_size_set,
          "defaults: seq 128, micro 8, accum 1, global 0");
    check(c.train_iters == 1000 && c.lr == 1e-3 && c.min_lr == 1e-4 && c.beta1 == 0.9 &&
              c.beta2 == 0.95 && c.adam_eps == 1e-8 && c.weight_decay == 0.1 &&
              c.grad_clip == 1.0 && c.lr_warmup_iters == 100 && c.lr_decay_iters == 0,
          "defaults: optimiser and schedule");
    check(c.seed == 1234 && c.zero_stage == 0 && c.eval_interval == 100 && c.eval_iters == 10 &&
              c.log_interval == 1 && c.sample_tokens == 64 && c.sample_temperature == 0.8,
          "defaults: seed, stage, eval, sample");
    check(c.trace_path[0] == 0 && c.trace_level == DX_TRACE_STEP && strcmp(c.device, "auto") == 0 &&
              c.train_path[0] == 0 && c.valid_path[0] == 0 && c.tokenizer_path[0] == 0,
          "defaults: trace, device, data paths");
    check(dx_config_finalize(&c, 2) == 0 && c.global_batch == 16 && c.lr_decay_iters == 1000,
          "defaults finalize dp=2: global 16, decay 1000 (%s)", dx_last_error());

    /* ---- presets and parameter counts ----
     * tiny: 64*32*2 + 2*(64 + 3*1024 + ... ) computed by hand:
     *   layer = 2*32 + 32*32 + 2*32*16 + 32*32 + 3*32*88 = 11584 */
    check_preset("tiny", 2 * 64 * 32 + 2 * 11584 + 32, 64 * 32 + 2 * 11584 + 32);
    /* brown-small layer = 2*256 + 256*256 + 2*256*128 + 256*256 + 3*256*688 = 725504 */
    check_preset("brown-small", 2LL * 4096 * 256 + 4 * 725504 + 256, 4096LL * 256 + 4 * 725504 + 256);
    /* Hugging Face's published totals */
    check_preset("tinyllama-1.1b", 1100048384LL, 1100048384LL - 32000LL * 2048);
    check_preset("llama2-7b", 6738415616LL, 6738415616LL - 32000LL * 4096);
    check_preset("llama2-13b", 13015864320LL, 13015864320LL - 32000LL * 5120);
    check_preset("llama2-70b", 68976648192LL, 68976648192LL - 32000LL * 8192);
    {
        dx_model_config m;
        dx_model_preset(&m, "llama2-70b");
        check(m.num_key_value_heads == 8 && m.max_position_embeddings == 4096 &&
                  m.rope_theta == 10000.0 && m.initializer_range == 0.02 && m.rms_norm_eps == 1e-5,
              "preset llama2-70b: GQA 8 kv heads, rope 1e4, init 0.02, eps 1e-5");
        dx_model_config before = m;
        int rc = dx_model_preset(&m, "gpt-5");
        check(rc == -1 && strstr(dx_last_error(), "gpt-5") && memcmp(&m, &before, sizeof m) == 0,
              "dx_model_preset unknown name -> %s", dx_last_error());
    }

    /* ---- full valid JSON ---- */
    dx_config_defaults(&c);
    int rc = dx_config_parse(&c, full_json, "full.json");
    check(rc == 0, "full.json parses (%s)", rc ? dx_last_error() : "");
    check(strcmp(c.model.preset, "tiny") == 0 && c.model.num_hidden_layers == 3 &&
              c.model.vocab_size == 128 && c.model.hidden_size == 32 &&
              c.model.num_key_value_heads == 2 && c.model.rms_norm_eps == 1e-6 &&
              c.model.rope_theta == 500000.0 && c.model.initializer_range == 0.01,
          "full.json: preset applied first, then model keys override it");
    check(strcmp(c.train_path, "data/train.bin") == 0 &&
              strcmp(c.valid_path, "data/valid.bin") == 0 &&
              strcmp(c.tokenizer_path, "data/tok.model") == 0,
          "full.json: data paths");
    check(c.seq_length == 32 && c.micro_batch == 4 && c.grad_accum == 2 && c.global_batch == 16 &&
              c.train_batch_size_set == 1 && c.train_iters == 500 && c.lr_warmup_iters == 50 &&
              c.lr_decay_iters == 0 && c.min_lr == 3e-5 && c.grad_clip == 0.0 && c.seed == 42 &&
              c.eval_interval == 25 && c.eval_iters == 5 && c.log_interval == 10,
          "full.json: batch, schedule, eval keys");
    check(c.lr == 3e-4 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.adam_eps == 1e-6 &&
              c.weight_decay == 0.01 && c.zero_stage == 2,
          "full.json: optimizer (type case-insensitive) and zero stage");
    check(strcmp(c.trace_path, "runs/t.h5") == 0 && c.trace_level == DX_TRACE_MODULE &&
              strcmp(c.device, "cuda") == 0 && c.sample_tokens == 20 &&
              c.sample_temperature == 1.5 && strcmp(c.source, "full.json") == 0,
          "full.json: trace, device, sample, source");
    rc = dx_config_finalize(&c, 2);
    check(rc == 0 && c.global_batch == 16 && c.lr_decay_iters == 500,
          "full.json finalize dp=2: train_batch_size 16 = 4 x 2 x 2, decay = train_iters (%s)",
          rc ? dx_last_error() : "");
    {
        dx_config c2;
        dx_config_defaults(&c2);
        rc = dx_config_parse(&c2, "{\"model\": {\"hidden_size\": 64}}", "m.json");
        check(rc == 0 && strcmp(c2.model.preset, "brown-small") == 0 &&
                  c2.model.hidden_size == 64 && c2.model.num_hidden_layers == 4,
              "model keys without preset override the current model");
        rc = dx_config_parse(&c2, "{\"model\": {\"preset\": \"tiny\"}}", "m.json");
        check(rc == 0 && c2.model.hidden_size == 32, "a later preset replaces the whole model");
    }
    /* load from a file, and a missing file */
    {
        char path[] = "/tmp/dx_test_config_XXXXXX";
        int fd = mkstemp(path);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (f) {
            fputs(full_json, f);
            fclose(f);
        }
        dx_config c3;
        dx_config_defaults(&c3);
        rc = dx_config_load(&c3, path);
        check(rc == 0 && c3.model.num_hidden_layers == 3 && strcmp(c3.source, path) == 0,
              "dx_config_load %s (%s)", path, rc ? dx_last_error() : "");
        unlink(path);
        rc = dx_config_load(&c3, "/nonexistent/run.json");
        check(rc == -1 && strstr(dx_last_error(), "/nonexistent/run.json"),
              "dx_config_load missing file -> %s", dx_last_error());
    }

    /* ---- error classes ---- */
    expect_error("malformed JSON (missing comma)", "{\n  \"seq_length\": 64\n  \"seed\": 1\n}", 0,
                 "line 3", NULL);
    expect_error("malformed JSON (truncated)", "{\"model\": {\"preset\": \"tiny\"", 0, "malformed",
                 NULL);
    expect_error("malformed JSON (trailing garbage)", "{\"seed\": 1} x", 0, "malformed", NULL);
    expect_error("empty text", "", 0, "malformed", NULL);
    expect_error("top level not an object", "[1, 2]", 0, "object", NULL);
    expect_error("unknown top-level key", "{\"seq_len\": 64}", 0, "unknown key 'seq_len'", NULL);
    expect_error("unknown nested key", "{\"model\": {\"preset\": \"tiny\", \"hiden_size\": 8}}", 0,
                 "unknown key 'model.hiden_size'", NULL);
    expect_error("unknown deep key", "{\"optimizer\": {\"params\": {\"momentum\": 0.9}}}", 0,
                 "unknown key 'optimizer.params.momentum'", NULL);
    expect_error("duplicate key", "{\"seed\": 1, \"seed\": 2}", 0, "duplicate key 'seed'", NULL);
    expect_error("wrong type (string for integer)", "{\"seq_length\": \"64\"}", 0,
                 "key 'seq_length': expected integer, got string", NULL);
    expect_error("wrong type (nested)", "{\"model\": {\"hidden_size\": true}}", 0,
                 "key 'model.hidden_size': expected integer, got boolean", NULL);
    expect_error("wrong type (object expected)", "{\"model\": \"tiny\"}", 0,
                 "key 'model': expected object, got string", NULL);
    expect_error("wrong type (string expected)", "{\"data\": {\"train\": 5}}", 0,
                 "key 'data.train': expected string, got number", NULL);
    expect_error("wrong type (comment)", "{\"comment\": 5}", 0, "key 'comment'", NULL);
    expect_error("non-integral integer", "{\"train_iters\": 10.5}", 0,
                 "key 'train_iters': expected integer", NULL);
    expect_error("integer beyond int range", "{\"seq_length\": 3000000000}", 0,
                 "key 'seq_length'", "out of range");
    expect_error("out of range (seq_length 0)", "{\"seq_length\": 0}", 0, "key 'seq_length'",
                 ">= 1");
    expect_error("out of range (negative lr)",
                 "{\"optimizer\": {\"params\": {\"lr\": -1e-3}}}", 0,
                 "key 'optimizer.params.lr'", "> 0");
    expect_error("out of range (beta2 = 1)",
                 "{\"optimizer\": {\"params\": {\"betas\": [0.9, 1.0]}}}", 0,
                 "key 'optimizer.params.betas[1]'", NULL);
    expect_error("betas of wrong length", "{\"optimizer\": {\"params\": {\"betas\": [0.9]}}}", 0,
                 "key 'optimizer.params.betas'", NULL);
    expect_error("out of range (rms_norm_eps 0)", "{\"model\": {\"rms_norm_eps\": 0}}", 0,
                 "key 'model.rms_norm_eps'", NULL);
    expect_error("out of range (temperature 0)", "{\"sample\": {\"temperature\": 0}}", 0,
                 "key 'sample.temperature'", NULL);
    expect_error("out of range (negative clipping)", "{\"gradient_clipping\": -1}", 0,
                 "key 'gradient_clipping'", NULL);
    expect_error("unknown preset", "{\"model\": {\"preset\": \"llama3-8b\"}}", 0,
                 "key 'model.preset'", "llama3-8b");
    expect_error("zero stage 4", "{\"zero_optimization\": {\"stage\": 4}}", 0,
                 "key 'zero_optimization.stage'", "0..3");
    expect_error("unsupported optimizer", "{\"optimizer\": {\"type\": \"SGD\"}}", 0,
                 "key 'optimizer.type'", "SGD");
    expect_error("bad trace level", "{\"trace\": {\"level\": \"kernel\"}}", 0,
                 "key 'trace.level'", NULL);
    expect_error("bad device", "{\"device\": \"tpu\"}", 0, "key 'device'", NULL);
    expect_error("heads not dividing hidden",
                 "{\"model\": {\"preset\": \"tiny\", \"num_attention_heads\": 3, "
                 "\"num_key_value_heads\": 1}}",
                 1, "key 'model.hidden_size'", "num_attention_heads");
    expect_error("kv heads not dividing heads",
                 "{\"model\": {\"preset\": \"tiny\", \"num_key_value_heads\": 3}}", 1,
                 "key 'model.num_key_value_heads'", "num_attention_heads");
    expect_error("odd head dimension",
                 "{\"model\": {\"preset\": \"tiny\", \"hidden_size\": 36, "
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": 4}}",
                 1, "key 'model.hidden_size'", "even");
    expect_error("seq_length > max_position_embeddings",
                 "{\"model\": {\"preset\": \"tiny\"}, \"seq_length\": 128}", 1, "key 'seq_length'",
                 "max_position_embeddings");
    expect_error("min_lr > lr", "{\"min_lr\": 0.1}", 1, "key 'min_lr'", NULL);
    expect_error("train_batch_size mismatch",
                 "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1, "
                 "\"train_batch_size\": 12}",
                 2, "key 'train_batch_size'",
                 "= 12 does not equal train_micro_batch_size_per_gpu (4) x "
                 "gradient_accumulation_steps (1) x data-parallel size (2) = 8");
    expect_error("world size not dividing",
                 "{\"train_micro_batch_size_per_gpu\": 1, \"train_batch_size\": 8}", 3,
                 "key 'train_batch_size'", "data-parallel size 3 does not divide train_batch_size 8");
    /* ---- the process grid (world = PP x DP x TP) ---- */
#define TINY "\"model\": {\"preset\": \"tiny\"}, \"seq_length\": 32, \"train_micro_batch_size_per_gpu\": 2, "
    expect_error("grid not dividing the world", "{" TINY "\"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 2}",
                 6, "key 'tensor_model_parallel_size' (2) x 'pipeline_model_parallel_size' (2) = 4",
                 "does not divide the world size 6");
    expect_error("TP not dividing heads", "{" TINY "\"tensor_model_parallel_size\": 3}", 3,
                 "key 'tensor_model_parallel_size' = 3", "must divide model.num_attention_heads (4)");
    expect_error("TP vs KV heads", "{\"model\": {\"preset\": \"tiny\", \"hidden_size\": 48, "
                 "\"num_attention_heads\": 6, \"num_key_value_heads\": 3}, \"seq_length\": 32, "
                 "\"tensor_model_parallel_size\": 2}", 2, "key 'tensor_model_parallel_size' = 2",
                 "must divide model.num_key_value_heads (3) or be a multiple of it");
    expect_error("TP not dividing FFN", "{\"model\": {\"preset\": \"tiny\", \"intermediate_size\": 90}, "
                 "\"seq_length\": 32, \"tensor_model_parallel_size\": 4}", 4,
                 "key 'tensor_model_parallel_size' = 4", "model.intermediate_size (90)");
    expect_error("TP not dividing vocab", "{\"model\": {\"preset\": \"tiny\", \"vocab_size\": 66}, "
                 "\"seq_length\": 32, \"tensor_model_parallel_size\": 4}", 4,
                 "key 'tensor_model_parallel_size' = 4", "model.vocab_size (66)");
    expect_error("PP more stages than layers", "{" TINY "\"pipeline_model_parallel_size\": 4}", 4,
                 "key 'pipeline_model_parallel_size' = 4", "more stages than model.num_hidden_layers (2)");
    expect_error("ZeRO-3 with PP", "{" TINY "\"pipeline_model_parallel_size\": 2, \"zero_optimization\": {\"stage\": 3}}",
                 2, "key 'zero_optimization.stage' = 3", "pipeline");
    expect_error("interleaved without chunks", "{" TINY "\"pipeline_model_parallel_size\": 2, "
                 "\"pipeline_schedule\": \"interleaved-1f1b\"}", 2,
                 "key 'num_layers_per_virtual_pipeline_stage'", "must be set");
    expect_error("uneven split that does not fit", "{\"model\": {\"preset\": \"tiny\", \"num_hidden_layers\": 8}, "
                 "\"seq_length\": 32, \"pipeline_model_parallel_size\": 3, \"decoder_first_pipeline_num_layers\": 3}",
                 3, "key 'pipeline_model_parallel_size' = 3", "must split evenly");
    expect_error("unknown schedule", "{" TINY "\"pipeline_schedule\": \"zigzag\"}", 1,
                 "key 'pipeline_schedule'", "zigzag");
    expect_error("sequence_parallel not boolean", "{" TINY "\"sequence_parallel\": 1}", 1,
                 "key 'sequence_parallel'", "expected true or false");
    {
        dx_config g;
        dx_config_defaults(&g);
        rc = dx_config_parse(&g, "{\"model\": {\"preset\": \"tiny\", \"num_hidden_layers\": 8}, \"seq_length\": 32, "
                             "\"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 3, "
                             "\"decoder_first_pipeline_num_layers\": 2, \"sequence_parallel\": true}", "grid.json");
        if (rc == 0) rc = dx_config_finalize(&g, 12);
        int f0, f1, f2, n0 = dx_stage_layers(&g, 0, &f0), n1 = dx_stage_layers(&g, 1, &f1), n2 = dx_stage_layers(&g, 2, &f2);
        check(rc == 0 && g.dp == 2 && g.sequence_parallel == 1 && n0 == 2 && f0 == 0 && n1 == 3 && f1 == 2 &&
                  n2 == 3 && f2 == 5,
              "grid TP 2 x PP 3 of 12 ranks: DP %d; stages %d@%d %d@%d %d@%d", g.dp, n0, f0, n1, f1, n2, f2);
        char *json = dx_config_to_json(&g);
        dx_config back;
        dx_config_defaults(&back);
        int prc = json ? dx_config_parse(&back, json, "back.json") : -1;
        check(prc == 0 && back.tp == 2 && back.pp == 3 && back.sequence_parallel == 1 &&
                  back.first_stage_layers == 2 && back.pp_schedule == g.pp_schedule,
              "grid keys serialise and parse back");
        free(json);
    }
    /* activation recomputation keys (Megatron-LM's) */
    expect_error("selective with a method", "{" TINY "\"recompute_granularity\": \"selective\", \"recompute_method\": \"block\"}",
                 1, "key 'recompute_method'", "only with recompute_granularity \"full\"");
    expect_error("full without a method", "{" TINY "\"recompute_granularity\": \"full\"}", 1,
                 "key 'recompute_method'", "must be set");
    expect_error("uniform over several layers", "{" TINY "\"recompute_granularity\": \"full\", \"recompute_method\": \"uniform\", "
                 "\"recompute_num_layers\": 2}", 1, "key 'recompute_num_layers' = 2", "uniform");
    expect_error("block without a count", "{" TINY "\"recompute_granularity\": \"full\", \"recompute_method\": \"block\"}", 1,
                 "key 'recompute_num_layers'", "must be set");
    expect_error("block beyond a chunk", "{" TINY "\"recompute_granularity\": \"full\", \"recompute_method\": \"block\", "
                 "\"recompute_num_layers\": 2, \"pipeline_model_parallel_size\": 2}", 2,
                 "key 'recompute_num_layers' = 2", "more than the 1 layers");
    expect_error("unknown granularity", "{" TINY "\"recompute_granularity\": \"some\"}", 1,
                 "key 'recompute_granularity'", "some");
    expect_error("method without granularity", "{" TINY "\"recompute_method\": \"uniform\"}", 1,
                 "key 'recompute_method'", "needs recompute_granularity");
    {
        dx_config g;
        dx_config_defaults(&g);
        rc = dx_config_parse(&g, "{" TINY "\"recompute_granularity\": \"full\", \"recompute_method\": \"block\", "
                             "\"recompute_num_layers\": 1}", "rc.json");
        if (rc == 0) rc = dx_config_finalize(&g, 1);
        char *json = dx_config_to_json(&g);
        dx_config back;
        dx_config_defaults(&back);
        int prc = json ? dx_config_parse(&back, json, "back.json") : -1;
        if (prc == 0) prc = dx_config_finalize(&back, 1);
        check(rc == 0 && prc == 0 && back.recompute == DX_RECOMPUTE_FULL && back.recompute_method == DX_RECOMPUTE_BLOCK &&
                  back.recompute_num_layers == 1,
              "recompute keys serialise and parse back");
        free(json);
    }
#undef TINY
    {
        /* a failed parse leaves the config unchanged */
        dx_config a, b;
        dx_config_defaults(&a);
        b = a;
        rc = dx_config_parse(&a, "{\"seq_length\": 64, \"model\": {\"hidden_size\": -1}}", "x.json");
        check(rc == -1 && memcmp(&a, &b, sizeof a) == 0, "failed parse leaves *c unchanged");
    }

    /* ---- dx_config_set ---- */
    dx_config_defaults(&c);
    rc = dx_config_set(&c, "zero_optimization.stage", "2", "--zero-stage");
    check(rc == 0 && c.zero_stage == 2, "set zero_optimization.stage=2");
    rc = dx_config_set(&c, "optimizer.params.lr", "1e-3", "--lr");
    check(rc == 0 && c.lr == 1e-3, "set optimizer.params.lr=1e-3");
    rc = dx_config_set(&c, "model.preset", "tiny", "--model");
    check(rc == 0 && strcmp(c.model.preset, "tiny") == 0 && c.model.hidden_size == 32 &&
              c.model.vocab_size == 64,
          "set model.preset=tiny");
    rc = dx_config_set(&c, "model.num_hidden_layers", "6", "--layers");
    check(rc == 0 && c.model.num_hidden_layers == 6 && c.model.hidden_size == 32,
          "set model.num_hidden_layers=6 after the preset");
    rc = dx_config_set(&c, "optimizer.params.betas", "0.8, 0.99", "--betas");
    check(rc == 0 && c.beta1 == 0.8 && c.beta2 == 0.99, "set betas from \"0.8, 0.99\"");
    rc = dx_config_set(&c, "optimizer.params.betas", "[0.85,0.9]", "--betas");
    check(rc == 0 && c.beta1 == 0.85 && c.beta2 == 0.9, "set betas from \"[0.85,0.9]\"");
    rc = dx_config_set(&c, "trace.path", "runs/x.h5", "--trace");
    check(rc == 0 && strcmp(c.trace_path, "runs/x.h5") == 0, "set trace.path");
    rc = dx_config_set(&c, "trace.level", "op", "--trace-level");
    check(rc == 0 && c.trace_level == DX_TRACE_OP, "set trace.level=op");
    rc = dx_config_set(&c, "device", "cuda", "--device");
    check(rc == 0 && strcmp(c.device, "cuda") == 0, "set device=cuda");
    rc = dx_config_set(&c, "seed", "4294967297", "--seed");
    check(rc == 0 && c.seed == 4294967297ull, "set seed=2^32+1 (above int range)");
    rc = dx_config_set(&c, "train_batch_size", "64", "--global-batch");
    check(rc == 0 && c.global_batch == 64 && c.train_batch_size_set == 1,
          "set train_batch_size=64 marks it given");
    rc = dx_config_set(&c, "data", "{\"train\": \"a.bin\", \"valid\": \"b.bin\"}", "--data");
    check(rc == 0 && strcmp(c.train_path, "a.bin") == 0 && strcmp(c.valid_path, "b.bin") == 0,
          "set data from a JSON object");
    check(strcmp(c.source, "defaults") == 0, "dx_config_set leaves source unchanged");
    expect_set_error("zero_optimization.stage", "4", "--zero-stage", "0..3");
    expect_set_error("zero_optimization.stage", "two", "--zero-stage", "expected integer");
    expect_set_error("seq_length", "12.5", "--seq-length", "expected integer");
    expect_set_error("optimizer.params.lr", "fast", "--lr", "expected number");
    expect_set_error("optimizer.params.lr", "-1", "--lr", "> 0");
    expect_set_error("optimizer.params.lr", "inf", "--lr", NULL);
    expect_set_error("model.preset", "gpt2", "--model", "gpt2");
    expect_set_error("model.hiden_size", "8", "--hidden", "unknown key");
    expect_set_error("seq_length.x", "8", "--x", "unknown key");
    expect_set_error("optimizer.params.betas", "0.9", "--betas", NULL);
    expect_set_error("device", "tpu", "--device", NULL);
    expect_set_error("model", "{\"hidden\": 3}", "--model-json", "model.hidden");

    /* ---- to_json round trips ---- */
    dx_config_defaults(&c);
    round_trip("defaults", &c, 1);
    dx_config_defaults(&c);
    dx_config_parse(&c, full_json, "full.json");
    round_trip("full.json (before finalize)", &c, 1);
    dx_config_finalize(&c, 2);
    round_trip("full.json (after finalize)", &c, 1);
    dx_config_defaults(&c);
    dx_config_set(&c, "model.preset", "llama2-70b", "--model");
    dx_config_set(&c, "seed", "9007199254740991", "--seed");
    dx_config_set(&c, "optimizer.params.lr", "0.1", "--lr");
    dx_config_set(&c, "min_lr", "1e-300", "--min-lr");
    dx_config_set(&c, "model.rms_norm_eps", "3.3333333333333333e-6", "--eps");
    dx_config_set(&c, "data.train", "path with \"quotes\" and \\ backslash", "--train");
    dx_config_finalize(&c, 1);
    c.train_batch_size_set = 0;
    round_trip("llama2-70b, awkward numbers and strings (derived global batch)", &c, 0);
    {
        char *json = dx_config_to_json(&c);
        check(json && strstr(json, "\"preset\"") && strstr(json, "\"hidden_size\"") &&
                  strstr(json, "\"llama2-70b\""),
              "to_json holds the preset name and explicit model keys");
        free(json);
    }

    /* model FLOPs per token (6 N + 12 L D T): tiny at seq 32 is test_report.sh's 176064;
     * Llama-2-7B at seq 2048: N = 6,738,415,616 - 32000 x 4096 = 6,607,343,616,
     * 6 N + 12 x 32 x 4096 x 2048 = 39,644,061,696 + 3,221,225,472 */
    {
        dx_config f;
        dx_config_defaults(&f);
        dx_model_preset(&f.model, "tiny");
        f.seq_length = 32;
        check(dx_model_flops_per_token(&f) == 176064.0, "FLOPs per token, tiny seq 32: %.0f (want 176064)",
              dx_model_flops_per_token(&f));
        dx_model_preset(&f.model, "llama2-7b");
        f.seq_length = 2048;
        check(dx_model_flops_per_token(&f) == 42865287168.0,
              "FLOPs per token, llama2-7b seq 2048: %.0f (want 42865287168)", dx_model_flops_per_token(&f));
        f.lora_r = 8;
        check(isnan(dx_model_flops_per_token(&f)), "FLOPs per token of a LoRA run: NaN");
    }
    /* dense bf16 peaks by the names cudaDeviceProp gives (NVIDIA's sparse figures halved) */
    {
        static const struct {
            const char *name;
            double want;
        } peaks[] = {
            {"NVIDIA H100 80GB HBM3", 989}, {"NVIDIA H100 PCIe", 756}, {"NVIDIA H100 NVL", 835},
            {"NVIDIA H200", 989},           {"NVIDIA H200 NVL", 835},  {"NVIDIA GH200 480GB", 989},
            {"NVIDIA H800", 989},           {"NVIDIA H800 PCIe", 756}, {"NVIDIA H20", 148},
            {"NVIDIA A100-SXM4-80GB", 0},   {"NVIDIA H1000", 0},       {"cpu", 0},
            {"", 0},                        {NULL, 0},                 {"NVIDIA H100 80GB HBM3 MIG 1g.10gb", 0},
        };
        for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
            check(dx_peak_tflops(peaks[i].name) == peaks[i].want, "peak of '%s': %g TFLOP/s (want %g)",
                  peaks[i].name ? peaks[i].name : "(null)", dx_peak_tflops(peaks[i].name), peaks[i].want);
    }

    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
