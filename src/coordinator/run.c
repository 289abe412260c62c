/* The coordinator's training loop; see run.h. */
#include "run.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/peft.h"
#include "comm/grid.h"
#include "comm/watchdog.h"
#include "plan/plan.h"
#include "pp/schedule.h"
#include "common/common.h"
#include "trace/tracer.h"
#include "trace/trace.h"
#include "worker/tokenizer.h"
#include "worker/worker.h"
#include "zero/zero.h"

int dx_agree_and_report(dx_comm *c, int rc)
{
    /* rc == -2: this rank only learnt of another rank's failure; that rank reports */
    int mine = rc == -1 ? c->size - c->rank : 0, worst = 0;
    if (c->max_int(c, mine, &worst)) {
        fprintf(stderr, "dissect: error: rank %d: %s\n", c->rank, dx_last_error());
        return -1;
    }
    if (worst == 0) return 0;
    if (rc == -1 && c->size - worst == c->rank) fprintf(stderr, "dissect: error: %s\n", dx_last_error());
    return -1;
}

/* Per-rank figures sent to rank 0 each step. */
enum { F_FWD, F_BWD, F_OPT, F_COMM, F_ENERGY, F_CAPPED, F_STEP, F_PEAK, F_PARAMS, F_GRADS, F_OPTIM, F_ACTS, F_HOST,
       F_N };
enum { N_COLS = F_CAPPED + 1 }; /* the per-rank f64 columns of a /steps row: F_FWD .. F_CAPPED */

/* Offsets that map each rank's CLOCK_MONOTONIC onto rank 0's (rank 0 only fills offset[]):
 * ping-pong, keeping the exchange with the smallest round trip (Cristian 1989). Collective. */
static int measure_clock_offsets(dx_comm *c, int64_t *offset)
{
    enum { ROUNDS = 16 };
    for (int r = 1; r < c->size; r++) {
        int64_t best_rtt = INT64_MAX, best = 0;
        for (int k = 0; k < ROUNDS; k++) {
            if (c->rank == 0) {
                int64_t t0 = (int64_t)dx_now_ns(), tr;
                if (c->send(c, &t0, sizeof t0, r, 7) || c->recv(c, &tr, sizeof tr, r, 7)) return -1;
                int64_t t1 = (int64_t)dx_now_ns();
                if (t1 - t0 < best_rtt) { best_rtt = t1 - t0; best = t0 + (t1 - t0) / 2 - tr; }
            } else if (c->rank == r) {
                int64_t t0, tr;
                if (c->recv(c, &t0, sizeof t0, 0, 7)) return -1;
                tr = (int64_t)dx_now_ns();
                if (c->send(c, &tr, sizeof tr, 0, 7)) return -1;
            }
        }
        if (c->rank == 0) offset[r] = best;
    }
    if (c->rank == 0) offset[0] = 0;
    return 0;
}

/* Moves every rank's recorded events whose times are resolved to rank 0, onto rank 0's clock
 * relative to t_start, and appends them to the trace; events still pending stay with the rank
 * for a later call. Collective. */
static int gather_events(dx_comm *c, dx_tracer *tr, dx_trace_writer *tw, const int64_t *offset,
                         int64_t t_start)
{
    size_t ready = dx_tr_partition(tr);
    size_t mine = tr->failed ? 0 : ready * sizeof(dx_event), *sizes = NULL;
    dx_event *all = NULL;
    int rc = 0;
    if (c->rank == 0) sizes = calloc((size_t)c->size, sizeof *sizes);
    if (c->gather(c, &mine, sizes, sizeof mine, 0)) rc = -1;
    size_t total = 0;
    if (c->rank == 0 && !rc) {
        for (int r = 0; r < c->size; r++) total += sizes[r];
        all = malloc(total ? total : 1);
        if (!all) rc = dx_fail("trace: out of memory gathering %zu bytes of events", total);
    }
    if (!rc || c->rank != 0) rc = c->gatherv(c, tr->buf.ev, mine, all, sizes, 0) || rc;
    if (c->rank == 0 && !rc) {
        size_t n = total / sizeof(dx_event);
        for (size_t i = 0; i < n; i++) {
            int64_t d = offset[all[i].rank] - t_start;
            all[i].start_ns += d;
            all[i].end_ns += d;
        }
        rc = dx_trace_append_events(tw, all, n);
    }
    if (tr->failed) rc = dx_fail("rank %d: trace: out of memory recording events", c->rank);
    dx_tr_drop(tr, tr->failed ? tr->buf.n : ready);
    free(all);
    free(sizes);
    return rc;
}

static void fmt_bytes(char *buf, size_t n, double b)
{
    if (b >= 1 << 30) snprintf(buf, n, "%.2f GiB", b / (1 << 30));
    else snprintf(buf, n, "%.1f MiB", b / (1 << 20));
}

/* Preemption (SIGTERM: Slurm's scancel and preemption; SIGUSR1: sbatch --signal=B:USR1@T): the
 * handler only records the signal; the ranks agree at the next step boundary, write a checkpoint
 * to save_dir and exit 0. A second signal during the save changes nothing (the save goes to a
 * .tmp name and is renamed once complete). */
static volatile sig_atomic_t stop_signal;
static void on_stop_signal(int sig)
{
    stop_signal = sig;
    dx_watch_signal(sig); /* the watchdog says where the rank was, if it was in a collective */
}

/* Watchdog thread, before a timeout exit (the main thread is blocked in a collective, not in
 * HDF5): the steps and events written so far reach the file. */
static void flush_trace_on_timeout(void *tw)
{
    if (dx_trace_flush(tw)) fprintf(stderr, "dissect: warning: %s\n", dx_last_error());
}

static void install_stop_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    /* a file-size limit (ulimit -f) makes a write fail with EFBIG, reported as an error, instead
     * of killing the rank */
    signal(SIGXFSZ, SIG_IGN);
}

/* mkdir -p (as Megatron-LM's and DeepSpeed's save paths), then a probe file: a directory that
 * cannot be created or written is an error before training, and so is one whose file system has
 * less room than one file of `need_bytes` (statvfs; 0 = no check). */
static int prepare_dir(const char *dir, const char *key, uint64_t need_bytes)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *q = buf + 1; ; q++) {
        if (*q == '/' || *q == '\0') {
            char ch = *q;
            *q = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST)
                return dx_fail("key '%s': cannot create directory '%s': %s", key, buf, strerror(errno));
            *q = ch;
            if (!ch) break;
        }
    }
    char probe[1100];
    snprintf(probe, sizeof probe, "%s/.dissect_write_probe", dir);
    FILE *f = fopen(probe, "w");
    if (!f || fputs("probe\n", f) < 0 || fclose(f)) {
        int e = errno;
        if (f) remove(probe);
        return dx_fail("key '%s': directory '%s' is not writable: %s", key, dir, strerror(e));
    }
    remove(probe);
    struct statvfs fs;
    if (need_bytes && !statvfs(dir, &fs) && (uint64_t)fs.f_bavail * fs.f_frsize < need_bytes)
        return dx_fail("key '%s': directory '%s' has %.1f MiB free, one checkpoint of this model takes %.1f MiB",
                       key, dir, (double)fs.f_bavail * (double)fs.f_frsize / (1 << 20), (double)need_bytes / (1 << 20));
    return 0;
}

/* p's canonical form into out[cap]: realpath of its directory, then its last component (the file
 * need not exist). 0, or -1 where the directory cannot be resolved. */
static int canon_path(const char *p, char *out, size_t cap)
{
    char dir[1100], rp[PATH_MAX];
    const char *slash = strrchr(p, '/'), *base = slash ? slash + 1 : p;
    if (!realpath(dx_path_dir(p, dir, sizeof dir), rp)) return -1;
    snprintf(out, cap, "%s/%s", rp, base);
    return 0;
}

/* Do paths a and b name one file? Both existing: the same device and inode (links included);
 * else the same canonical path (canon_path), or the same string where one cannot be resolved. */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!stat(a, &sa) && !stat(b, &sb)) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ca[PATH_MAX + 256], cb[PATH_MAX + 256];
    if (canon_path(a, ca, sizeof ca) || canon_path(b, cb, sizeof cb)) return !strcmp(a, b);
    return !strcmp(ca, cb);
}

/* Before anything is written (rank 0): training data is named, no output file (trace.path, save)
 * is an input of the run (the config file, data.train, data.valid, the tokenizer, resume,
 * hf_model) or the other output, so that a bad path stops the run before it overwrites a file
 * (check_save_dir: before it trains for nothing). save may be the resumed checkpoint (it is
 * replaced by rename once the new one is complete). Returns 0 or -1 + dx_fail. */
static int check_paths(const dx_config *c)
{
    if (!c->train_path[0])
        return dx_fail("key 'data.train': no training data (a token shard: --train-data PATH, "
                       "examples/make_shards.py writes one)");
    /* (no config file: source "defaults"; resume "auto": a checkpoint of save_dir) */
    const struct { const char *what, *path; } in[] = {
        {"the config file", strcmp(c->source, "defaults") ? c->source : ""},
        {"key 'data.train'", c->train_path},
        {"key 'data.valid'", c->valid_path},
        {"key 'tokenizer'", c->tokenizer_path},
        {"key 'resume'", strcmp(c->resume, "auto") ? c->resume : ""},
        {"key 'hf_model'", c->hf_model}};
    const struct { const char *key, *path; } out[] = {{"trace.path", c->trace_path}, {"save", c->save_path}};
    for (size_t o = 0; o < sizeof out / sizeof *out; o++) {
        if (!out[o].path[0]) continue;
        for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
            if (!in[i].path[0] || (o == 1 && in[i].path == c->resume)) continue;
            if (same_file(out[o].path, in[i].path))
                return dx_fail("key '%s': '%s' is also %s: the run would overwrite its own input", out[o].key,
                               out[o].path, in[i].what);
        }
    }
    if (c->trace_path[0] && c->save_path[0] && same_file(c->trace_path, c->save_path))
        return dx_fail("key 'trace.path': '%s' is also key 'save': the checkpoint and the trace need two files",
                       c->trace_path);
    return 0;
}

/* save's directory exists and this rank can write there (every rank writes its part of a
 * checkpoint, so each checks: on several nodes the directory must be on a shared file system).
 * Returns 0 or -1 + dx_fail naming the rank where there are several. */
static int check_save_dir(const dx_config *c, int rank, int P)
{
    if (!c->save_path[0]) return 0;
    char dir[1100], who[32] = "";
    dx_path_dir(c->save_path, dir, sizeof dir);
    if (P > 1) snprintf(who, sizeof who, "rank %d: ", rank);
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return dx_fail("%skey 'save': directory '%s' of '%s' does not exist", who, dir, c->save_path);
    if (access(dir, W_OK))
        return dx_fail("%skey 'save': directory '%s' of '%s' is not writable: %s", who, dir, c->save_path,
                       strerror(errno));
    return 0;
}

/* A full checkpoint after `step` (collective): path, or save_dir/iter_<step>.h5 then pruned to
 * keep_last. */
static int save_checkpoint(const dx_config *c, dx_worker *w, dx_comm *world, const char *path, long step,
                           uint64_t consumed)
{
    char name[1100];
    if (!path) dx_checkpoint_name(name, sizeof name, c->save_dir, step);
    const char *where = path ? path : name;
    char *json = dx_config_to_json(c);
    const dx_grid *g = dx_worker_grid(w);
    dx_ckpt_state st = {.step = step, .consumed_samples = (int64_t)consumed, .seed = c->seed};
    uint64_t t0 = dx_now_ns();
    int rc = dx_checkpoint_save(where, dx_worker_model(w), dx_worker_zero(w), world, g->dp_host, g->tp_rank, &st,
                                json ? json : "{}");
    free(json);
    if (dx_agree_and_report(world, rc)) return -1;
    if (world->rank == 0) {
        printf("checkpoint of step %ld written to %s (%.2f s)\n", step, where, (double)(dx_now_ns() - t0) * 1e-9);
        if (!path && c->keep_last > 0 && dx_checkpoint_prune(c->save_dir, c->keep_last) < 0)
            fprintf(stderr, "dissect: warning: %s\n", dx_last_error());
        fflush(stdout);
    }
    return 0;
}

/* A background save of save_dir/iter_<step>.h5 (async_save): started here, completed by
 * finish_async at a later step boundary (wait: until it is). Collective. */
static int start_async(const dx_config *c, dx_worker *w, dx_comm *world, dx_ckpt_async *saver, long step,
                       uint64_t consumed)
{
    char name[1100];
    dx_checkpoint_name(name, sizeof name, c->save_dir, step);
    char *json = dx_config_to_json(c);
    const dx_grid *g = dx_worker_grid(w);
    dx_ckpt_state st = {.step = step, .consumed_samples = (int64_t)consumed, .seed = c->seed};
    uint64_t t0 = dx_now_ns();
    int rc = dx_checkpoint_save_start(saver, name, dx_worker_model(w), dx_worker_zero(w), world, g->dp_host,
                                      g->tp_rank, &st, json ? json : "{}");
    free(json);
    if (dx_agree_and_report(world, rc)) return -1;
    if (world->rank == 0) {
        printf("checkpoint of step %ld: snapshot taken (%.2f s), writing %s in the background\n", step,
               (double)(dx_now_ns() - t0) * 1e-9, name);
        fflush(stdout);
    }
    return 0;
}

static int finish_async(const dx_config *c, dx_comm *world, dx_ckpt_async *saver, long step, int wait)
{
    double secs = 0;
    int r = dx_checkpoint_save_poll(saver, world, wait, &secs);
    if (r < 0) {
        dx_agree_and_report(world, r); /* the lowest failing rank prints its message */
        return -1;
    }
    if (r == 1 && world->rank == 0) {
        char name[1100];
        dx_checkpoint_name(name, sizeof name, c->save_dir, step);
        printf("checkpoint of step %ld written to %s (%.2f s in the background)\n", step, name, secs);
        if (c->keep_last > 0 && dx_checkpoint_prune(c->save_dir, c->keep_last) < 0)
            fprintf(stderr, "dissect: warning: %s\n", dx_last_error());
        fflush(stdout);
    }
    return 0;
}

int dx_run_train(const dx_config *c, dx_comm *world)
{
    const int rank = world->rank, P = world->size;
    dx_trace_writer *tw = NULL;
    char *cfg_json = NULL;
    int rc = 0;

    /* host names, gathered to rank 0 for the trace metadata */
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    char *hosts = rank == 0 ? calloc((size_t)P, sizeof host) : NULL;
    /* rank 0: every rank's device name (DEV_NAME bytes each) and dense bf16 peak (TFLOP/s, 0 =
     * unknown), gathered once the worker exists */
    enum { DEV_NAME = sizeof ((dx_backend *)0)->device_name };
    char *dev_names = NULL;
    double *dev_peaks = NULL;
    dx_worker *w = NULL;
    /* hangs and dead ranks end the job with a message instead of waiting forever */
    if (c->distributed_timeout_minutes > 0 && dx_watchdog_start(c->distributed_timeout_minutes * 60.0, rank)) rc = -1;
    if (!rc && world->gather(world, host, hosts, sizeof host, 0)) rc = -1;

    /* the memory plan, before anything is allocated: a run that cannot fit stops here with the
     * shortfall and what would make it fit (not in the kernel's OOM killer half-way) */
    const char *device = strcmp(c->device, "auto") ? c->device : dx_cuda_devices() > 0 ? "cuda" : "cpu";
    dx_plan_rank mine_plan;
    if (!rc && dx_plan_rank_bytes(c, rank, device, &mine_plan)) rc = -1;
    const int on_cpu = !strcmp(device, "cpu");
    int64_t avail = rc ? -1 : dx_device_memory_available(device);
    int64_t host_avail = rc || on_cpu ? -1 : dx_device_memory_available("cpu");
    /* on the CPU backend the offloaded states share the host memory with everything else */
    const int64_t need = mine_plan.peak + (on_cpu ? mine_plan.host : 0);
    if (!rc && host_avail > 0 && mine_plan.host > host_avail)
        rc = dx_fail("memory plan: rank %d (pp %d, dp %d, tp %d) needs %.2f GiB of host memory for its offloaded "
                     "optimizer states but %.2f GiB are available (MemAvailable / ranks on the node)",
                     rank, mine_plan.pp, mine_plan.dp, mine_plan.tp, (double)mine_plan.host / (1 << 30),
                     (double)host_avail / (1 << 30));
    if (!rc && avail > 0 && need > avail) {
        char advice[256];
        dx_plan_advice(c, device, avail, advice, sizeof advice);
        const double G = 1 << 30;
        rc = dx_fail("memory plan: rank %d (pp %d, dp %d, tp %d) needs %.2f GiB (params %.2f, grads %.2f, "
                     "optimizer states %.2f, activations %.2f GiB) but %.2f GiB are available on its %s; "
                     "it would fit with %s",
                     rank, mine_plan.pp, mine_plan.dp, mine_plan.tp, (double)need / G,
                     (double)mine_plan.bytes[DX_PLAN_PARAMS] / G, (double)mine_plan.bytes[DX_PLAN_GRADS] / G,
                     (double)(mine_plan.bytes[DX_PLAN_OPTIM] + (on_cpu ? mine_plan.host : 0)) / G,
                     (double)mine_plan.bytes[DX_PLAN_ACTIVATIONS] / G,
                     (double)avail / G, !strcmp(device, "cuda") ? "GPU" : "host (MemAvailable / ranks on the node)",
                     advice);
    }
    if (dx_agree_and_report(world, rc)) goto out_err;

    /* inputs and outputs checked before anything is written */
    if (!rc && rank == 0) rc = check_paths(c);
    if (dx_agree_and_report(world, rc)) goto out_err;
    if (!rc) rc = check_save_dir(c, rank, P);
    if (dx_agree_and_report(world, rc)) goto out_err;

    /* the run directory: created and checked before anything is trained */
    if (!rc && rank == 0 && c->save_dir[0])
        rc = prepare_dir(c->save_dir, "save_dir", dx_checkpoint_file_bytes(dx_num_trainable_params(c)));
    if (dx_agree_and_report(world, rc)) goto out_err;

    if (!rc) w = dx_worker_create(c, world, &rc);
    if (dx_agree_and_report(world, rc)) goto out_err;

    /* each rank's device model and peak, gathered to rank 0 for the trace and the MFU it logs */
    char name_mine[DEV_NAME];
    snprintf(name_mine, sizeof name_mine, "%s", dx_worker_backend(w)->device_name);
    if (rank == 0) {
        dev_names = calloc((size_t)P, DEV_NAME);
        dev_peaks = calloc((size_t)P, sizeof *dev_peaks);
        if (!dev_names || !dev_peaks) rc = dx_fail("rank 0: out of memory");
    }
    if (!rc && (world->gather(world, name_mine, dev_names, DEV_NAME, 0) ||
                world->gather(world, &dx_worker_backend(w)->peak_tflops, dev_peaks, sizeof *dev_peaks, 0)))
        rc = -1;
    if (dx_agree_and_report(world, rc)) goto out_err;
    /* model FLOPs per token (NaN for LoRA) and the ranks' summed peak (0: one is unknown) */
    const double flops_per_token = dx_model_flops_per_token(c);
    const double peak_sum = dev_peaks ? dx_peak_tflops_sum(dev_peaks, (size_t)P) : 0;

    /* resumption: the newest checkpoint of save_dir (auto) or the one named */
    long step0 = 0;
    uint64_t consumed0 = 0;
    if (c->resume[0]) {
        char path[1100] = "";
        int found = 1;
        if (!strcmp(c->resume, "auto")) {
            int64_t s0 = 0;
            found = rank == 0 ? dx_checkpoint_latest(c->save_dir, path, sizeof path, &s0) : 0;
            if (found < 0) rc = -1;
            if (dx_agree_and_report(world, rc)) goto out_err;
            if (world->broadcast(world, &found, sizeof found, 0) || world->broadcast(world, path, sizeof path, 0))
                goto out_err;
            if (!found && rank == 0) printf("resume auto: no checkpoint in %s; starting at step 1\n", c->save_dir);
        } else {
            snprintf(path, sizeof path, "%s", c->resume);
        }
        if (found) {
            dx_ckpt_state st;
            const dx_grid *g = dx_worker_grid(w);
            rc = dx_checkpoint_load(path, dx_worker_model(w), dx_worker_zero(w), world, g->dp_host, g->tp_rank,
                                    dx_num_trainable_params(c), &st);
            if (rc == -1 && P > 1) dx_fail_prefix("rank %d", rank); /* (-2: another rank failed) */
            if (!rc && st.seed != c->seed)
                rc = dx_fail("key 'resume': checkpoint '%s' was written with seed %llu, the config's 'seed' is %llu "
                             "(the data order would differ)", path, (unsigned long long)st.seed,
                             (unsigned long long)c->seed);
            if (dx_agree_and_report(world, rc)) goto out_err;
            step0 = (long)st.step;
            consumed0 = (uint64_t)st.consumed_samples;
            dx_worker_set_data_position(w, step0, consumed0);
            if (rank == 0)
                printf("resumed from %s: step %ld done, %llu sequences consumed\n", path, step0,
                       (unsigned long long)consumed0);
        }
    }
    const uint64_t G = (uint64_t)c->global_batch;
#define CONSUMED_AFTER(step) (consumed0 + (uint64_t)((step) - step0) * G) /* sequences consumed */
    install_stop_handlers();

    /* the trace file is created before training, so an unwritable path fails now */
    if (rank == 0 && !rc && c->trace_path[0]) {
        cfg_json = dx_config_to_json(c);
        const char **hp = calloc((size_t)P, sizeof *hp);
        for (int r = 0; hp && r < P; r++) hp[r] = hosts + (size_t)r * sizeof host;
        const char *levels[] = {"step", "module", "op"};
        const int v = c->pp_schedule == DX_PP_INTERLEAVED
                          ? c->model.num_hidden_layers / (c->pp * c->layers_per_virtual_stage) : 1;
        int32_t *coords = calloc((size_t)P * 3, sizeof *coords);
        for (int r = 0; coords && r < P; r++) {
            int t, d, p;
            dx_grid_coords(r, c->tp, c->dp, &t, &d, &p);
            coords[3 * r] = p;
            coords[3 * r + 1] = d;
            coords[3 * r + 2] = t;
        }
        const char **dn = calloc((size_t)P, sizeof *dn);
        for (int r = 0; dn && r < P; r++) dn[r] = dev_names + (size_t)r * DEV_NAME;
        dx_trace_meta meta = {.config_json = cfg_json ? cfg_json : "{}", .world_size = P,
                              .hosts = hp, .device = c->device, .device_names = dn, .device_peak_tflops = dev_peaks,
                              .trace_level = levels[c->trace_level], .tp = c->tp, .pp = c->pp,
                              .dp = c->dp, .sequence_parallel = c->sequence_parallel && c->tp > 1,
                              .num_model_chunks = v, .num_micro_batches = c->grad_accum,
                              .pipeline_schedule = c->pp > 1 ? dx_pp_schedule_names[c->pp_schedule] : "none",
                              .pipeline_bubble_theory = c->pp > 1 ? dx_pp_bubble_fraction(c->pp_schedule, c->pp, c->grad_accum, v) : 0.0,
                              .grid = coords};
        int64_t *plan = calloc((size_t)P * 7, sizeof *plan);
        for (int r = 0; plan && r < P; r++) {
            dx_plan_rank pr;
            if (dx_plan_rank_bytes(c, r, device, &pr)) continue;
            memcpy(plan + 7 * r, pr.bytes, sizeof pr.bytes);
            plan[7 * r + 5] = pr.peak;
            plan[7 * r + 6] = pr.host;
        }
        meta.plan = plan;
        tw = hp && coords && dn ? dx_trace_create(c->trace_path, &meta) : NULL;
        free(plan);
        free(coords);
        free(dn);
        if (!tw) { dx_fail_prefix("key 'trace.path'"); rc = -1; }
        else dx_watch_on_timeout(flush_trace_on_timeout, tw);
        free(hp);
    }
    if (dx_agree_and_report(world, rc)) goto out_err;

    /* events: clock alignment once; rank 0 keeps the offsets and stores them */
    const int events = c->trace_path[0] && c->trace_level != DX_TRACE_STEP;
    int64_t *offset = calloc((size_t)P, sizeof *offset);
    int64_t t_start = (int64_t)dx_now_ns();
    if (!offset) rc = dx_fail("rank %d: out of memory", rank);
    else if (events) {
        rc = measure_clock_offsets(world, offset);
        if (!rc && rank == 0) rc = dx_trace_set_clock_offsets(tw, offset, P);
    }
    if (dx_agree_and_report(world, rc)) { free(offset); goto out_err; }

    dx_tokenizer *tok = NULL;
    if (rank == 0 && c->tokenizer_path[0]) {
        tok = dx_tokenizer_load(c->tokenizer_path);
        if (!tok) fprintf(stderr, "dissect: warning: %s; samples will be printed as ids\n", dx_last_error());
    }

    if (rank == 0) {
        const dx_model_config *m = &c->model;
        printf("dissect %s | %s | %d rank%s | model %s: %.2fM params (%d layers, hidden %d, heads %d/%d kv, vocab %d)\n",
               DX_VERSION, c->device, P, P > 1 ? "s" : "", m->preset[0] ? m->preset : "custom",
               (double)dx_model_num_params(m) / 1e6, m->num_hidden_layers, m->hidden_size,
               m->num_attention_heads, m->num_key_value_heads, m->vocab_size);
        printf("grid PP %d x DP %d x TP %d%s%s%s | global batch %d sequences x %d tokens (micro-batch %d, accumulation %d), ZeRO stage %d, %ld steps, %d thread%s per rank\n",
               c->pp, c->dp, c->tp, c->tp > 1 && c->sequence_parallel ? " (sequence parallel)" : "",
               c->pp > 1 ? ", schedule " : "", c->pp > 1 ? dx_pp_schedule_names[c->pp_schedule] : "",
               c->global_batch, c->seq_length, c->micro_batch, c->grad_accum, c->zero_stage,
               c->train_iters, dx_worker_backend(w)->nthreads,
               dx_worker_backend(w)->nthreads > 1 ? "s" : "");
        fflush(stdout);
    }

    double mine[F_N], *all = rank == 0 ? calloc((size_t)P * F_N, sizeof(double)) : NULL;
    double *cols = rank == 0 ? calloc((size_t)P * N_COLS, sizeof(double)) : NULL;
    int64_t *mem = rank == 0 ? calloc((size_t)P * 6, sizeof(int64_t)) : NULL; /* peak + 4 cats + host */
    double val_loss = NAN;
    int preempted = 0;
    /* async_save: the saver (snapshot buffer kept between saves) and the step of its save */
    dx_ckpt_async *saver = c->async_save ? dx_checkpoint_async_create() : NULL;
    long pending_step = 0;
    if (c->async_save && dx_agree_and_report(world, saver ? 0 : -1)) rc = -1;
    long last_step = step0;
    /* eval_on_start: the starting model's validation loss (a fine-tuning's baseline; printed, the
     * trace's step rows begin at the first step) */
    if (c->eval_on_start && !c->valid_path[0] && rank == 0)
        fprintf(stderr, "dissect: warning: key 'eval_on_start' without 'data.valid': no validation data, so no "
                        "evaluation\n");
    if (c->eval_on_start && !rc && step0 < c->train_iters) {
        double v0 = NAN;
        if (dx_worker_eval(w, &v0)) {
            fprintf(stderr, "dissect: error: rank %d, evaluation before step %ld: %s\n", rank, step0 + 1,
                    dx_last_error());
            dx_comm_mpi_abort(1);
        }
        if (rank == 0 && !isnan(v0)) {
            printf("step %5ld | validation loss %.4f | perplexity %.2f (before training)\n", step0, v0, exp(v0));
            fflush(stdout);
        }
    }
    for (long step = step0 + 1; step <= c->train_iters && !preempted && !rc; step++) {
        dx_step_stats st;
        dx_watch_step(step);
        if (dx_worker_train_step(w, step, &st)) {
            /* peers may be blocked in a collective: report and take the job down */
            fprintf(stderr, "dissect: error: rank %d, step %ld: %s\n", rank, step, dx_last_error());
            dx_comm_mpi_abort(1);
        }
        /* a non-finite loss or gradient norm (the same on every rank): the update is spoilt, so
         * the run stops before any checkpoint is written (the last one written stays), as
         * Megatron-LM's --check-for-nan-in-loss-and-grad does; the step is still logged and traced */
        if (!isfinite(st.loss) || !isfinite(st.grad_norm)) {
            rc = dx_fail("step %ld: loss %g, gradient norm %g: not finite (training diverged, e.g. the learning "
                         "rate is too high, or the weights or data are corrupt); stopping without a checkpoint",
                         step, st.loss, st.grad_norm);
            if (rank == 0) fprintf(stderr, "dissect: error: %s\n", dx_last_error());
        }
        mine[F_FWD] = st.forward_s;
        mine[F_BWD] = st.backward_s;
        mine[F_OPT] = st.optimizer_s;
        mine[F_COMM] = st.comm_s;
        mine[F_ENERGY] = st.energy_j;
        mine[F_CAPPED] = st.power_capped_s;
        mine[F_STEP] = st.step_s;
        mine[F_PEAK] = (double)st.mem.peak_total;
        mine[F_PARAMS] = (double)st.mem.current[DX_MEM_PARAMS];
        mine[F_GRADS] = (double)st.mem.current[DX_MEM_GRADS];
        mine[F_OPTIM] = (double)st.mem.current[DX_MEM_OPTIM];
        mine[F_ACTS] = (double)st.mem.current[DX_MEM_ACTIVATIONS];
        struct rusage ru; /* the host's high-water mark (Linux: ru_maxrss in KiB) */
        mine[F_HOST] = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : -1.0;
        if (world->gather(world, mine, all, sizeof mine, 0)) {
            fprintf(stderr, "dissect: error: %s\n", dx_last_error());
            dx_comm_mpi_abort(1);
        }
        /* preemption: a signal on any rank stops every rank at this step boundary */
        int stop = 0;
        if (world->max_int(world, stop_signal ? 1 : 0, &stop)) {
            fprintf(stderr, "dissect: error: rank %d: %s\n", rank, dx_last_error());
            dx_comm_mpi_abort(1);
        }
        preempted = stop;
        const int final_step = step == c->train_iters || stop;
        int do_eval = c->eval_interval > 0 && (step % c->eval_interval == 0 || step == c->train_iters);
        val_loss = NAN;
        /* the last step's events are all resolved first (collectives still running included) */
        if (events && (step % 10 == 0 || final_step) &&
            ((final_step && dx_worker_trace_flush(w)) ||
             gather_events(world, dx_worker_tracer(w), tw, offset, t_start))) {
            fprintf(stderr, "dissect: error: rank %d, step %ld: %s\n", rank, step, dx_last_error());
            dx_comm_mpi_abort(1);
        }
        if (do_eval && dx_worker_eval(w, &val_loss)) {
            fprintf(stderr, "dissect: error: rank %d, evaluation at step %ld: %s\n", rank, step, dx_last_error());
            dx_comm_mpi_abort(1);
        }
        last_step = step;
        /* a background save finished? (one all-reduce per step while one is in flight) */
        if (saver && finish_async(c, world, saver, pending_step, 0)) rc = -1;
        const int periodic = c->save_interval > 0 && step % c->save_interval == 0 && step < c->train_iters;
        if (!rc && c->save_dir[0] && periodic && c->async_save && !stop) {
            /* one background save at a time: the previous one completes first */
            if (finish_async(c, world, saver, pending_step, 1) || start_async(c, w, world, saver, step, CONSUMED_AFTER(step)))
                rc = -1;
            pending_step = step;
        } else if (!rc && c->save_dir[0] && (periodic || stop)) {
            if (stop && rank == 0) printf("signal received: checkpoint of step %ld, then exit\n", step);
            if (saver && finish_async(c, world, saver, pending_step, 1)) rc = -1;
            /* a failed save (full disk): the previous checkpoint stays, the trace is closed, exit 1 */
            if (!rc && save_checkpoint(c, w, world, NULL, step, CONSUMED_AFTER(step))) rc = -1; /* ends the loop */
        } else if (stop && rank == 0) {
            fprintf(stderr, "dissect: warning: signal received at step %ld and no 'save_dir': stopping without a "
                            "checkpoint\n", step);
        }
        if (rank != 0) continue;

        double step_s = all[F_STEP], peak = 0;
        for (int r = 0; r < P; r++) {
            for (int f = 0; f < N_COLS; f++) cols[f * P + r] = all[r * F_N + f];
            for (int f = 0; f < 6; f++) mem[f * P + r] = (int64_t)all[r * F_N + F_PEAK + f];
            if (all[r * F_N + F_PEAK] > peak) peak = all[r * F_N + F_PEAK];
        }
        double tps = (double)st.tokens / step_s;
        if (step % c->log_interval == 0 || step == step0 + 1 || final_step) {
            char pk[32];
            fmt_bytes(pk, sizeof pk, peak);
            /* Megatron-LM's "TFLOP/s per GPU": model FLOPs (dx_model_flops_per_token) per rank */
            char fl[64] = "";
            const double tf = tps * flops_per_token / P / 1e12;
            if (!isnan(tf) && peak_sum > 0)
                snprintf(fl, sizeof fl, " | %.1f TFLOP/s per rank | MFU %.3f", tf, tf * P / peak_sum);
            else if (!isnan(tf))
                snprintf(fl, sizeof fl, tf >= 10 ? " | %.1f TFLOP/s per rank" : " | %.3g TFLOP/s per rank", tf);
            printf("step %5ld/%ld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tokens/s | step %.1f ms | peak mem %s%s\n",
                   step, c->train_iters, st.loss, st.lr, st.grad_norm, tps, step_s * 1e3, pk, fl);
        }
        if (step == step0 + 1) {
            char b[4][32];
            for (int f = 0; f < 4; f++) fmt_bytes(b[f], sizeof b[f], all[F_PARAMS + f]);
            size_t hb = dx_zero_host_bytes(dx_worker_zero(w));
            char hs[32] = "";
            if (hb) fmt_bytes(hs, sizeof hs, (double)hb);
            printf("memory held by rank 0 (allocator): params %s | grads %s | optimizer states %s | activations %s%s%s\n",
                   b[0], b[1], b[2], b[3], hb ? " | host (offloaded states, staging) " : "", hs);
        }
        if (do_eval && !isnan(val_loss))
            printf("step %5ld | validation loss %.4f | perplexity %.2f\n", step, val_loss, exp(val_loss));
        fflush(stdout);
        if (tw) {
            dx_step_row row = {.step = step, .loss = st.loss, .grad_norm = st.grad_norm, .lr = st.lr,
                               .tokens = st.tokens, .step_time_s = step_s, .tokens_per_s = tps,
                               .val_loss = val_loss, .forward_s = cols, .backward_s = cols + P,
                               .optimizer_s = cols + 2 * P, .comm_s = cols + 3 * P,
                               .energy_j = cols + 4 * P, .power_capped_s = cols + 5 * P,
                               .peak_mem_bytes = mem, .params_bytes = mem + P,
                               .grads_bytes = mem + 2 * P, .optim_bytes = mem + 3 * P,
                               .activations_bytes = mem + 4 * P, .host_peak_bytes = mem + 5 * P};
            if (dx_trace_append_step(tw, &row) || ((step % 10 == 0) && dx_trace_flush(tw))) {
                fprintf(stderr, "dissect: error: trace %s: %s\n", c->trace_path, dx_last_error());
                dx_comm_mpi_abort(1);
            }
        }
    }
    if (saver && finish_async(c, world, saver, pending_step, 1)) rc = -1;
    dx_checkpoint_async_destroy(saver);
    free(all);
    free(cols);
    free(mem);
    free(offset);

    if (!rc && !preempted && c->save_path[0] &&
        save_checkpoint(c, w, world, c->save_path, last_step, CONSUMED_AFTER(last_step)))
        rc = -1;
    if (!rc && !preempted && c->save_dir[0] && c->save_interval > 0 && last_step > step0 &&
        save_checkpoint(c, w, world, NULL, last_step, CONSUMED_AFTER(last_step)))
        rc = -1;
#undef CONSUMED_AFTER
    if (!rc && !preempted && c->lora_save[0]) {
        if (dx_peft_save(c->lora_save, dx_worker_model(w), dx_worker_zero(w), c, world, dx_worker_grid(w)->tp_host,
                         dx_worker_grid(w)->pp_host)) {
            fprintf(stderr, "dissect: error: rank %d: %s\n", rank, dx_last_error());
            rc = -1;
        } else if (rank == 0) {
            printf("LoRA adapters written to %s (PEFT: adapter_config.json, adapter_model.safetensors)\n", c->lora_save);
        }
    }

    /* a short sample from the trained model */
    if (!rc && !preempted && c->sample_tokens > 0) {
        int32_t *ids = malloc(((size_t)c->sample_tokens + 1) * sizeof *ids);
        int src = ids ? dx_worker_sample(w, c->sample_tokens, c->sample_temperature, c->seed, ids) : -1;
        if (src) {
            fprintf(stderr, "dissect: error: rank %d, sampling: %s\n", rank, dx_last_error());
            rc = -1;
        } else if (rank == 0) {
            char *text = tok ? dx_tokenizer_decode(tok, ids + 1, c->sample_tokens) : NULL;
            if (text) {
                printf("sample (temperature %.2f): %s\n", c->sample_temperature, text);
            } else {
                printf("sample ids (temperature %.2f):", c->sample_temperature);
                for (int i = 0; i <= c->sample_tokens; i++) printf(" %d", ids[i]);
                printf("\n");
            }
            free(text);
        }
        free(ids);
    }
    dx_tokenizer_free(tok);
    dx_worker_destroy(w);
    dx_watch_on_timeout(NULL, NULL);
    if (tw && dx_trace_close(tw)) {
        fprintf(stderr, "dissect: error: %s\n", dx_last_error());
        rc = -1;
    } else if (tw && rank == 0) {
        printf("trace written to %s\n", c->trace_path);
    }
    free(cfg_json);
    free(hosts);
    free(dev_names);
    free(dev_peaks);
    dx_watchdog_stop();
    return rc;

out_err:
    dx_worker_destroy(w);
    dx_watch_on_timeout(NULL, NULL);
    if (tw) dx_trace_close(tw);
    free(cfg_json);
    free(hosts);
    free(dev_names);
    free(dev_peaks);
    dx_watchdog_stop();
    return -1;
}
