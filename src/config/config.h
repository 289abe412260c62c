/* dissect run configuration: one JSON file, flags override keys.
 *
 * Key names follow the projects users already know:
 *   "model": Hugging Face config.json names (hidden_size, intermediate_size, num_hidden_layers,
 *            num_attention_heads, num_key_value_heads, vocab_size, rms_norm_eps, rope_theta,
 *            max_position_embeddings, initializer_range) plus "preset" (a named shape whose keys
 *            the other model keys override): tiny, brown-small, tinyllama-1.1b, llama2-7b,
 *            llama2-13b, llama2-70b.
 *   DeepSpeed: train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size
 *            (optional; must equal micro x accumulation x DP), gradient_clipping,
 *            optimizer {type: "AdamW", params {lr, betas [b1, b2], eps, weight_decay}},
 *            zero_optimization {stage}.
 *   Megatron-LM: seq_length, train_iters, lr_warmup_iters, lr_decay_iters, min_lr,
 *            eval_interval, eval_iters, log_interval, seed.
 *   Hugging Face Trainer: eval_on_start.
 *   dissect: data {train, valid, tokenizer}, save (checkpoint path), save_dir, save_interval, keep_last,
 *            resume, trace {path, level}, device, sample {tokens,
 *            temperature}, hf_model (a Hugging Face Llama directory: config.json + safetensors; its
 *            config.json replaces the "model" keys in dx_config_finalize, and its weights are the
 *            initial parameters, see checkpoints/safetensors.h).
 * Unknown keys, wrong types and impossible values are errors naming the file and the key path
 * (e.g. "run.json: key 'model.hidden_size': must be divisible by num_attention_heads").
 */
#ifndef DX_CONFIG_H
#define DX_CONFIG_H

#include <stdint.h>

typedef struct {
    char preset[64];
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    double initializer_range;
} dx_model_config;

typedef enum { DX_TRACE_STEP = 0, DX_TRACE_MODULE = 1, DX_TRACE_OP = 2 } dx_trace_level;

/* LoRA targets (PEFT's target_modules names), bit t = 1 << t, in a layer's order. */
enum { DX_LORA_Q = 0, DX_LORA_K, DX_LORA_V, DX_LORA_O, DX_LORA_GATE, DX_LORA_UP, DX_LORA_DOWN, DX_LORA_NTARGETS };
extern const char *const dx_lora_target_names[DX_LORA_NTARGETS];
/* Each target's module in a Hugging Face Llama layer: "self_attn" (q, k, v, o) or "mlp". */
extern const char *const dx_lora_target_modules[DX_LORA_NTARGETS];
/* The full input and output widths of target t's base layer W [out, in] in model m (no TP split):
 * q [H Dh, D], k and v [Hkv Dh, D], o [D, H Dh], gate and up [I, D], down [D, I]. */
void dx_lora_target_dims(const dx_model_config *m, int t, int64_t *in, int64_t *out);

/* Pipeline schedules (key pipeline_schedule): 1F1B (PipeDream-Flush, Narayanan et al. 2021,
 * Megatron-LM's default), GPipe (all forwards, then all backwards; Huang et al. 2019), and
 * interleaved 1F1B over virtual stages (Narayanan et al. 2021, sec. 2.2). */
typedef enum { DX_PP_1F1B = 0, DX_PP_GPIPE = 1, DX_PP_INTERLEAVED = 2 } dx_pp_schedule;
/* The most model chunks one pipeline rank holds (interleaved schedule). */
#define DX_PP_MAX_CHUNKS 16
extern const char *const dx_pp_schedule_names[3];

/* Activation recomputation (Megatron-LM's keys; Korthikanti et al. 2022): recompute_granularity
 * null (none), "selective" (keep the GEMM outputs and the fused attention's output and
 * log-sum-exp; the RMSNorm outputs and the SwiGLU product are recomputed in backward) or "full" (keep each recomputed layer's input;
 * the whole layer's forward runs again in its backward). recompute_method (full only):
 * "uniform" (every layer; recompute_num_layers = 1: each layer's input is kept) or "block" (the
 * first recompute_num_layers layers of each pipeline stage's model chunk). */
typedef enum { DX_RECOMPUTE_NONE = 0, DX_RECOMPUTE_SELECTIVE = 1, DX_RECOMPUTE_FULL = 2 } dx_recompute;
typedef enum { DX_RECOMPUTE_UNIFORM = 0, DX_RECOMPUTE_BLOCK = 1 } dx_recompute_method;

typedef struct {
    dx_model_config model;

    /* data */
    char train_path[1024];     /* token shard for training (required for train) */
    char valid_path[1024];     /* token shard for validation ("" = none) */
    char tokenizer_path[1024]; /* SentencePiece model for decoding samples ("" = none) */
    char save_path[1024];      /* "save": HDF5 checkpoint written at the end ("" = none) */
    /* run directory and resumption (checkpoints/checkpoint.h): Megatron-LM's save_interval,
     * DeepSpeed-style keep_last; periodic and preemption checkpoints go to
     * save_dir/iter_<step>.h5; "resume": a checkpoint path, "auto" (the newest in save_dir;
     * none: a fresh start) or "" */
    char save_dir[1024];
    long save_interval; /* 0 = none */
    int keep_last;      /* periodic checkpoints kept (0 = all) */
    int async_save;     /* Megatron-LM's --async-save: periodic checkpoints written by a thread
                           while training goes on (checkpoints/checkpoint.h) */
    /* Megatron-LM's --distributed-timeout-minutes: a collective still incomplete after this
     * many minutes ends the rank with a message (src/comm/watchdog.h); 0 = no watchdog */
    double distributed_timeout_minutes;
    char resume[1024];
    char hf_model[1024];       /* "hf_model": Hugging Face model directory: shape from its
                                  config.json, initial weights from its safetensors ("" = none) */

    /* batch */
    int seq_length;
    int micro_batch;  /* train_micro_batch_size_per_gpu */
    int grad_accum;   /* gradient_accumulation_steps */
    int global_batch; /* train_batch_size: 0 in the file = derived; set by dx_config_finalize */
    int train_batch_size_set; /* 1 when train_batch_size was given (nonzero) in a file or flag:
                                 dx_config_finalize then checks it instead of deriving it */

    /* optimisation */
    long train_iters;
    double lr, min_lr, beta1, beta2, adam_eps, weight_decay, grad_clip;
    long lr_warmup_iters, lr_decay_iters; /* decay 0 in the file = train_iters */
    uint64_t seed;

    /* parallelism: the process grid world = PP x DP x TP (TP innermost), Megatron-LM's keys */
    int zero_stage;
    int tp;                /* tensor_model_parallel_size */
    int pp;                /* pipeline_model_parallel_size */
    int dp;                /* data-parallel size: derived by dx_config_finalize (not a key) */
    int sequence_parallel; /* sequence_parallel: reduce-scatter / all-gather around the norms */
    dx_pp_schedule pp_schedule;   /* pipeline_schedule: "1f1b", "gpipe", "interleaved-1f1b" */
    int layers_per_virtual_stage; /* num_layers_per_virtual_pipeline_stage (interleaved) */
    int first_stage_layers;       /* decoder_first_pipeline_num_layers (0 = even split) */
    int last_stage_layers;        /* decoder_last_pipeline_num_layers (0 = even split) */

    /* CPU offload (DeepSpeed's zero_optimization.offload_optimizer): the fp32 master weights and
     * AdamW moments of the rank's shard in host memory, AdamW on the host */
    int offload_optimizer;  /* offload_optimizer.device == "cpu" */
    int offload_pin_memory; /* offload_optimizer.pin_memory: page-locked host states (cudaHostAlloc) */
    /* DeepSpeed's zero_optimization.offload_param (ZeRO-Infinity, ZeRO stage 3): the rank's shard
     * of the working (bf16) parameters in host memory, copied up before each all-gather */
    int offload_param;            /* offload_param.device == "cpu" */
    int offload_param_pin_memory; /* offload_param.pin_memory: page-locked (asynchronous copies) */

    /* activation recomputation */
    dx_recompute recompute;              /* recompute_granularity */
    dx_recompute_method recompute_method; /* recompute_method (full) */
    int recompute_method_set;            /* recompute_method was given */
    int recompute_num_layers;            /* recompute_num_layers (0 = not given) */

    /* evaluation, logging, sampling */
    long eval_interval, eval_iters, log_interval;
    int eval_on_start; /* Hugging Face Trainer's eval_on_start: a validation run before step 1 (the
                        * starting model's loss: a fine-tuning's baseline) */
    int sample_tokens;
    double sample_temperature;

    /* tracing */
    char trace_path[1024]; /* "" = no trace file */
    dx_trace_level trace_level;

    char device[16]; /* "auto" (cuda if a GPU is present, else cpu), "cpu" or "cuda" */

    /* LoRA fine-tuning (Hu et al. 2021), "lora" with Hugging Face PEFT's LoraConfig names:
     * r (rank; 0 = off, the default), lora_alpha (default 8, PEFT's; the adapter output is
     * scaled by lora_alpha / r), lora_dropout (only 0 so far), target_modules (an array of the
     * decoder's linear layers' names, or one comma-separated string: q_proj k_proj v_proj o_proj
     * gate_proj up_proj down_proj; default q_proj, v_proj as PEFT's for Llama). The base model
     * (its initial or hf_model weights) is frozen: no gradients or optimizer states. For now:
     * ZeRO stage 0-2 without offload, TP = PP = 1. Checkpoints hold the adapters and their
     * optimizer states only: a resumed run gets its base from hf_model (or the seed) again.
     * lora.save (dissect's): a directory for the trained adapters in PEFT's format. */
    int lora_r;
    double lora_alpha, lora_dropout;
    unsigned lora_targets; /* bit mask over DX_LORA_* */
    char lora_save[1024];  /* "lora.save": PEFT adapter directory written at the end ("" = none;
                              checkpoints/peft.h) */
    /* "quantize": "none" or "nf4" (QLoRA, Dettmers et al. 2023: with lora.r > 0, the frozen
     * decoder layers' matrices stored as NF4 with double-quantized absmaxes, src/zero/zero.h's
     * DX_ZERO_QUANTIZE_NF4; CPU backends only so far) */
    int quantize_nf4;

    char source[1024]; /* file the config came from (for messages) */
} dx_config;

/* Fills *c with defaults (the brown-small model preset, micro-batch 8, seq 128, ...). */
void dx_config_defaults(dx_config *c);

/* Fills *m with a named model preset. Returns -1 + dx_fail naming the preset if unknown. */
int dx_model_preset(dx_model_config *m, const char *name);

/* Parses JSON text (from `source`, used in messages) over the current contents of *c.
 * Returns -1 + dx_fail naming source and key path on malformed JSON, unknown keys, wrong types,
 * out-of-range values; *c is then unchanged. On success c->source = source.
 * A top-level "comment" string is accepted and ignored. */
int dx_config_parse(dx_config *c, const char *json_text, const char *source);

/* Sets one key by dotted path from a string (command-line overrides), with the same type and
 * range checks as the file, e.g. ("zero_optimization.stage", "2", "--zero-stage"),
 * ("optimizer.params.lr", "1e-3", "--lr"), ("model.preset", "tiny", "--model").
 * Integer and number keys take decimal text; string keys take the text as is;
 * optimizer.params.betas takes "0.9,0.95" or "[0.9, 0.95]"; object keys ("model", "data", ...)
 * take a JSON object. Setting model.preset replaces the whole model shape, so apply it before
 * other model.* overrides. Messages name `source` (the flag) and the key path. On error *c is
 * unchanged. c->source is not changed. */
int dx_config_set(dx_config *c, const char *key_path, const char *value, const char *source);

/* Reads and parses a file (dx_config_parse on its contents). */
int dx_config_load(dx_config *c, const char *path);

/* Checks cross-key consistency for a job of `world` ranks and derives the data-parallel size
 * dp = world / (tp x pp), global_batch (micro x accum x dp) and lr_decay_iters. Errors name the
 * key: a world size the grid does not divide, a model shape TP or PP cannot split (heads, KV
 * heads, FFN size, vocab, layers), a model of more than DX_MODEL_MAX_PARAMS parameters,
 * impossible schedule settings, ZeRO-3 with PP > 1. With hf_model
 * set, first replaces c->model by HF_MODEL/config.json (dx_hf_load_config; its errors name that
 * file and key). */
int dx_config_finalize(dx_config *c, int world);

/* The grid checks of dx_config_finalize alone (model shape against tp and pp, schedule keys).
 * Returns 0 or -1 + dx_fail naming the key. */
int dx_config_check_grid(const dx_config *c);

/* Decoder layers of pipeline stage `stage` (0 .. pp-1): returns the count and sets *first to the
 * first layer's index. Contiguous; decoder_first/last_pipeline_num_layers give the first and
 * last stage's counts when set, the other stages split the rest evenly (Megatron-LM's rule). For
 * the interleaved schedule, a stage holds several chunks instead (see src/pp). */
int dx_stage_layers(const dx_config *c, int stage, int *first);

/* Serialises the resolved config as JSON (malloc'd string; NULL on OOM). The output parses back
 * with dx_config_parse to the same struct (except `source`; and train_batch_size is written as
 * global_batch, so after dx_config_finalize it reads back as given: train_batch_size_set = 1). */
char *dx_config_to_json(const dx_config *c);

/* The most parameters a model may have (dx_config_finalize refuses more): 2^53, so that byte
 * counts derived from it (x 16 for weights, gradients and AdamW moments) stay far inside int64. */
#define DX_MODEL_MAX_PARAMS ((int64_t)1 << 53)

/* Parameter counts of the model (embedding + layers + final norm + untied head); INT64_MAX when
 * the count does not fit int64 (sizes are not checked here: see dx_config_finalize). */
int64_t dx_model_num_params(const dx_model_config *m);
/* Non-embedding parameters (everything but the token embedding table). */
int64_t dx_model_num_params_nonembed(const dx_model_config *m);
/* Parameters a run trains: the model's, or with LoRA (lora.r > 0) the adapters' alone,
 * num_hidden_layers x sum over targets of r x (in + out). */
int64_t dx_num_trainable_params(const dx_config *c);
/* Model FLOPs per trained token, as PaLM (Chowdhery et al. 2022, appendix B) and Megatron-LM
 * count them: 6 N (forward 2 N, backward 4 N, N = dx_model_num_params_nonembed) plus
 * 12 x layers x hidden x seq_length for the attention scores (forward 4 L D T: Q K^T and P V;
 * backward twice that), the causal mask not subtracted, recomputation not counted. The MFU the
 * benchmarks, `dissect report` and the training log print is tokens/s x this / peak FLOP/s.
 * NaN for a LoRA run (its frozen weights get no weight gradient, so 6 N does not hold) or when
 * the parameter count overflows int64 (sizes are not checked here: see dx_config_finalize). */
double dx_model_flops_per_token(const dx_config *c);

/* Reads DIR/config.json (a Hugging Face LlamaConfig) into *m (preset "" = custom shape):
 *   vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads:
 *     required positive integers;
 *   num_key_value_heads (default num_attention_heads), max_position_embeddings (default 2048):
 *     positive integers; rms_norm_eps (default 1e-6): positive number; initializer_range
 *     (default 0.02): non-negative number;
 *   rope_theta: top-level number (transformers 4.x) or rope_parameters.rope_theta
 *     (transformers 5.x), default 10000.
 * Errors (naming DIR/config.json and the key) when the model is not one dissect computes
 * exactly: model_type missing or not "llama"; hidden_act not "silu"; tie_word_embeddings,
 * attention_bias or mlp_bias true; rope_scaling (4.x) or rope_parameters (5.x) other than null
 * or a plain {"rope_type": "default", "rope_theta": x}; head_dim other than
 * hidden_size / num_attention_heads; partial_rotary_factor other than 1; hidden_size not
 * divisible by num_attention_heads, num_key_value_heads not dividing num_attention_heads, or an
 * odd head dimension. On error *m is unchanged. */
int dx_hf_load_config(const char *dir, dx_model_config *m);

#endif
