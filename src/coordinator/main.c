/* dissect: command-line entry point.
 *
 *   mpirun -np N dissect train --config run.json [flags]
 *   mpirun -np 1 dissect dump --config run.json [flags] --out OUT.h5
 *
 * Rank 0 (the coordinator) reads and validates the config, applies flag overrides, checks it
 * against the world size, and broadcasts it; every rank then trains (see run.h), or runs one
 * forward + backward and writes it out (dump.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/common.h"
#include "checkpoints/hf_export.h"
#include "config/config.h"
#include "dump.h"
#include "plan_cli.h"
#include "report/report.h"
#include "run.h"

/* Flags that override config keys: flag name -> dotted key path (noarg: a switch that sets the
 * boolean key to true). */
static const struct {
    const char *flag, *key, *help;
    int noarg;
} overrides[] = {
    {"model", "model.preset", "model preset (tiny, brown-small, tinyllama-1.1b, llama2-7b, ...)", 0},
    {"train-iters", "train_iters", "optimizer steps", 0},
    {"micro-batch", "train_micro_batch_size_per_gpu", "sequences per micro-batch per rank", 0},
    {"grad-accum", "gradient_accumulation_steps", "micro-batches per step", 0},
    {"global-batch", "train_batch_size", "sequences per step over all ranks (checked)", 0},
    {"seq-length", "seq_length", "tokens per sequence", 0},
    {"lr", "optimizer.params.lr", "peak learning rate", 0},
    {"min-lr", "min_lr", "final learning rate of the cosine decay", 0},
    {"warmup-iters", "lr_warmup_iters", "linear warm-up steps", 0},
    {"weight-decay", "optimizer.params.weight_decay", "AdamW decoupled weight decay", 0},
    {"clip-grad", "gradient_clipping", "global gradient-norm clip (0 = off)", 0},
    {"seed", "seed", "random seed (init, data order, sampling)", 0},
    {"zero-stage", "zero_optimization.stage", "ZeRO stage 0..3", 0},
    {"trace", "trace.path", "HDF5 trace file to write", 0},
    {"trace-level", "trace.level", "step | module | op", 0},
    {"device", "device", "auto | cpu | cuda (auto: cuda when a GPU is present)", 0},
    {"eval-interval", "eval_interval", "steps between validation runs (0 = never)", 0},
    {"eval-iters", "eval_iters", "validation batches per run", 0},
    {"eval-on-start", "eval_on_start", "a validation run before the first step (no value)", 1},
    {"log-interval", "log_interval", "steps between progress lines", 0},
    {"train-data", "data.train", "training token shard", 0},
    {"valid-data", "data.valid", "validation token shard", 0},
    {"tokenizer", "data.tokenizer", "SentencePiece model for decoding samples", 0},
    {"sample-tokens", "sample.tokens", "tokens to sample at the end (0 = none)", 0},
    {"save", "save", "HDF5 checkpoint at the end (weights and optimizer states)", 0},
    {"save-dir", "save_dir", "run directory for periodic and preemption checkpoints (iter_<step>.h5)", 0},
    {"save-interval", "save_interval", "steps between checkpoints in save_dir (0 = none)", 0},
    {"keep-last", "keep_last", "periodic checkpoints kept in save_dir (0 = all)", 0},
    {"async-save", "async_save", "write periodic checkpoints in the background (no value)", 1},
    {"distributed-timeout-minutes", "distributed_timeout_minutes",
     "a collective incomplete after this long ends the job with a message (0 = no watchdog; default 10)", 0},
    {"resume", "resume", "checkpoint to resume from: PATH, or auto (newest in save_dir)", 0},
    {"hf-model", "hf_model", "Hugging Face Llama directory: shape (config.json) and initial weights (safetensors)", 0},
    {"num-layers", "model.num_hidden_layers", "decoder layers (after --model)", 0},
    {"tp", "tensor_model_parallel_size", "tensor-parallel size (TP ranks, innermost in the grid)", 0},
    {"pp", "pipeline_model_parallel_size", "pipeline-parallel size (stages)", 0},
    {"sequence-parallel", "sequence_parallel", "sequence parallelism with TP (no value)", 1},
    {"pipeline-schedule", "pipeline_schedule", "1f1b | gpipe | interleaved-1f1b", 0},
    {"num-layers-per-virtual-pipeline-stage", "num_layers_per_virtual_pipeline_stage",
     "layers per model chunk (interleaved 1F1B)", 0},
    {"decoder-first-pipeline-num-layers", "decoder_first_pipeline_num_layers", "layers of the first stage (uneven split)", 0},
    {"decoder-last-pipeline-num-layers", "decoder_last_pipeline_num_layers", "layers of the last stage (uneven split)", 0},
    {"offload-optimizer", "zero_optimization.offload_optimizer.device", "cpu | none: fp32 master and AdamW states on the host", 0},
    {"offload-param", "zero_optimization.offload_param.device", "cpu | none: ZeRO-3 parameter shards on the host", 0},
    {"recompute-granularity", "recompute_granularity", "activation recomputation: selective | full | none", 0},
    {"recompute-method", "recompute_method", "full recomputation: uniform | block", 0},
    {"recompute-num-layers", "recompute_num_layers", "block: recomputed layers per model chunk", 0},
    {"lora-rank", "lora.r", "LoRA rank r: train adapters, the base model frozen (0 = off)", 0},
    {"lora-alpha", "lora.lora_alpha", "LoRA alpha: adapter outputs scaled by alpha / r (default 8)", 0},
    {"lora-dropout", "lora.lora_dropout", "LoRA dropout p on each adapter's input (PEFT's; default 0)", 0},
    {"lora-targets", "lora.target_modules", "LoRA targets, e.g. q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", 0},
    {"quantize", "quantize", "nf4 | none: QLoRA, the frozen base's decoder matrices in 4-bit NormalFloat (needs --lora-rank)", 0},
    {"lora-save", "lora.save", "directory for the trained LoRA adapters in PEFT's format (adapter_config.json, adapter_model.safetensors)", 0},
};
#define N_OVERRIDES (int)(sizeof overrides / sizeof overrides[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: mpirun -np N dissect train --config FILE [flags]\n"
               "       mpirun -np 1 dissect dump --config FILE [flags] --out OUT.h5\n"
               "       dissect report RUN.h5 [--steps A:B] [--top N] [--chrome OUT.json]\n"
               "       dissect plan --config FILE [flags] [--world N] [--memory-gib G]   (memory per rank)\n"
               "       dissect export CHECKPOINT.h5 OUT_DIR [--dtype float32|bfloat16]   (a Hugging Face Llama directory)\n"
               "       dissect --version\n\n"
               "Trains a Llama-2-family model; rank 0 also coordinates and writes the trace.\n\n"
               "  --config FILE          JSON config (Hugging Face / DeepSpeed / Megatron-LM key names)\n"
               "  --out OUT.h5           (dump) HDF5 file for the inputs, logits, loss and gradients of\n"
               "                         one forward + backward on the first training batch\n");
    for (int i = 0; i < N_OVERRIDES; i++)
        fprintf(f, "  --%-20s %s (key '%s')\n", overrides[i].flag, overrides[i].help, overrides[i].key);
}

/* Builds the config on rank 0: defaults, file, flags, finalise for `dp` ranks. For `dump`
 * (out != NULL) also takes the required --out PATH into out[out_cap]. */
static int build_config(dx_config *c, int argc, char **argv, int dp, char *out, size_t out_cap)
{
    struct option opts[N_OVERRIDES + 4];
    int k = 0;
    for (int i = 0; i < N_OVERRIDES; i++)
        opts[k++] = (struct option){overrides[i].flag, overrides[i].noarg ? no_argument : required_argument,
                                    NULL, 1000 + i};
    opts[k++] = (struct option){"config", required_argument, NULL, 'c'};
    opts[k++] = (struct option){"help", no_argument, NULL, 'h'};
    if (out) opts[k++] = (struct option){"out", required_argument, NULL, 'o'};
    opts[k] = (struct option){NULL, 0, NULL, 0};

    dx_config_defaults(c);
    /* parse argv[1..] (the command stands in for the program name); optind = 0 fully resets GNU getopt */
    argc--;
    argv++;
    /* first pass: the config file, so flags override it whatever their order */
    opterr = 0;
    optind = 0;
    int o, li = -1;
    while ((o = getopt_long(argc, argv, ":", opts, &li)) != -1) {
        /* a flag's value taken from the next argument that is itself a flag: its value is missing
         * (`--trace --eval-on-start`); a value that starts with "--" goes as --flag=VALUE */
        if (o != '?' && o != ':' && optarg && li >= 0 && optarg == argv[optind - 1] && optarg[0] == '-' &&
            optarg[1] == '-' && optarg[2])
            return dx_fail("flag '--%s' needs a value, got the flag '%s' (a value that starts with '--': --%s=VALUE)",
                           opts[li].name, optarg, opts[li].name);
        li = -1;
        if (o == 'c' && dx_config_load(c, optarg)) return -1;
        if (o == 'o') {
            if (strlen(optarg) >= out_cap) return dx_fail("--out: path longer than %zu bytes", out_cap - 1);
            snprintf(out, out_cap, "%s", optarg);
        }
        if (o == '?') return dx_fail("unknown flag '%s' (see dissect --help)", argv[optind - 1]);
        if (o == ':') return dx_fail("flag '%s' needs a value", argv[optind - 1]);
        if (o == 'h') {
            usage(stdout);
            exit(0);
        }
    }
    if (optind < argc) return dx_fail("unexpected argument '%s'", argv[optind]);
    optind = 0;
    while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (o >= 1000) {
            char src[64];
            snprintf(src, sizeof src, "--%s", overrides[o - 1000].flag);
            if (dx_config_set(c, overrides[o - 1000].key, overrides[o - 1000].noarg ? "true" : optarg, src))
                return -1;
        }
    }
    if (out && !*out) return dx_fail("dump: --out OUT.h5 is required");
    return dx_config_finalize(c, dp);
}

/* OpenBLAS's name of the kernels it chose at load time (DYNAMIC_ARCH builds); weak, so that
 * linking against another BLAS still works (NULL then) */
char *openblas_get_corename(void) __attribute__((weak));

/* OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU's family and model
 * when it is loaded; on a model its table lacks (virtual CPUs that report a generic model, as the
 * 2-core CI VMs do) it falls back to its SSE3 "Prescott" kernels. On such a VM with AVX-512 the
 * brown-small job ran at 2,338 tokens/s with them, 7,288 with OPENBLAS_CORETYPE=SkylakeX and
 * 4,777 with Haswell (2026-11-29). The variable is read only at load, so where it is unset,
 * OpenBLAS chose Prescott and the CPU and OS support AVX2 and FMA (__builtin_cpu_supports checks
 * both), this sets it from the CPU's features (SkylakeX with AVX-512 F, CD, BW, DQ and VL, else
 * Haswell) and executes the program again (same pid, arguments and environment otherwise, before
 * MPI is initialised). Returns when there is nothing to do or the exec fails (then the run goes
 * on with the slower kernels). The trace's BLAS attribute names the kernels in use. */
static void blas_kernels_upgrade(char **argv)
{
    if (!openblas_get_corename || getenv("OPENBLAS_CORETYPE")) return;
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0) return;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512vl");
    /* the binary's own path, not /proc/self/exe, so that the process keeps its name ("dissect"
     * for ps, pgrep, pkill and Slurm) */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || n >= (ssize_t)sizeof self - 1) return;
    self[n] = '\0';
    if (setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1) != 0) return;
    execv(self, argv);
    unsetenv("OPENBLAS_CORETYPE"); /* the exec failed: go on as loaded */
#else
    (void)argv;
#endif
}

int main(int argc, char **argv)
{
    blas_kernels_upgrade(argv);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("dissect %s\n", DX_VERSION);
        return 0;
    }
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))) {
        usage(stdout);
        return 0;
    }
    /* the report reads a trace file; it needs no MPI (serial HDF5 access) */
    if (argc >= 2 && !strcmp(argv[1], "report")) return dx_report_main(argc - 1, argv + 1);
    /* a checkpoint to a Hugging Face directory: no MPI either */
    if (argc >= 2 && !strcmp(argv[1], "export")) return dx_hf_export_main(argc - 1, argv + 1);
    /* the memory plan of a config for --world ranks: no MPI either */
    if (argc >= 2 && !strcmp(argv[1], "plan")) {
        int world = 1, k = 0;
        double gib = 0;
        char **args = calloc((size_t)argc + 1, sizeof *args);
        if (!args) return 1;
        for (int i = 0; i < argc; i++) {
            if ((!strcmp(argv[i], "--world") || !strcmp(argv[i], "--memory-gib")) && i + 1 < argc) {
                char *end;
                double v = strtod(argv[i + 1], &end);
                if (*end || v <= 0 || (argv[i][2] == 'w' && (v != (int)v || v > 1 << 20))) {
                    fprintf(stderr, "dissect: error: %s: expected a positive %s, got '%s'\n", argv[i],
                            argv[i][2] == 'w' ? "integer" : "number", argv[i + 1]);
                    free(args);
                    return 1;
                }
                if (argv[i][2] == 'w') world = (int)v;
                else gib = v;
                i++;
                continue;
            }
            args[k++] = argv[i];
        }
        dx_config cfg;
        int rc = build_config(&cfg, k, args, world, NULL, 0) || dx_plan_print(&cfg, world, gib);
        if (rc) fprintf(stderr, "dissect: error: %s\n", dx_last_error());
        free(args);
        return rc ? 1 : 0;
    }
    if (argc < 2 || (strcmp(argv[1], "train") && strcmp(argv[1], "dump"))) {
        if (argc < 2) fprintf(stderr, "dissect: error: missing command\n");
        else fprintf(stderr, "dissect: error: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }

    dx_comm *world = dx_comm_mpi_world(&argc, &argv);
    if (!world) {
        fprintf(stderr, "dissect: error: %s\n", dx_last_error());
        return 1;
    }
    /* `dump` uses the worker (and so MPI) like `train` */
    const int dump = !strcmp(argv[1], "dump");
    dx_config cfg;
    char out[1024] = "";
    int rc = 0;
    if (world->rank == 0) rc = build_config(&cfg, argc, argv, world->size, dump ? out : NULL, sizeof out);
    if (dx_agree_and_report(world, rc) == 0 && world->broadcast(world, &cfg, sizeof cfg, 0) == 0 &&
        world->broadcast(world, out, sizeof out, 0) == 0)
        rc = dump ? dx_dump_run(&cfg, world, out) : dx_run_train(&cfg, world);
    else
        rc = -1;
    world->destroy(world);
    dx_comm_mpi_finalize();
    return rc ? 1 : 0;
}
