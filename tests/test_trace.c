/* Writes a small trace file for tests/check_trace.py: world_size 2, 3 /steps rows (the first
 * flushed on its own, the other two at close), clock offsets, and a synthetic op-level /events
 * set; and checks that creating a file in a missing directory fails with a message naming the
 * path.
 *   usage: test_trace OUT.h5 && python3 tests/check_trace.py OUT.h5
 * The values here are repeated in check_trace.py (and the derived numbers in test_report.sh).
 * Run as a plain single process (MPI singleton).
 * Last line: "N passed, M failed"; exit status 1 if any failed.
 *
 * Synthetic events. Steps 10, 20, 30 (= the /steps rows) have spans S = 750, 1750, 2750 ms on
 * both ranks; u = S / 100. Each rank/step, in units u from the step start:
 *   host     memcpy (data, forward)                       [0, 2)
 *   compute  forward ops: embedding 2, per layer 0..1: gemm 3 + attention 2 (attention),
 *            gemm 4 + swiglu 1 (mlp); lm_head gemm 4, cross_entropy 2       [2, 30)
 *   compute  backward ops: cross_entropy 1, lm_head gemm 8, per layer 1..0: gemm 8 + swiglu 1
 *            (mlp), attention 4 + gemm 6 (attention; rank 1 layer 0: gemm 8), embedding 3
 *                                                         [30, 80)  (rank 1: [30, 82))
 *   comm     all_reduce (layer, backward)                 [60, 85)
 *   compute  optimizer: grad_norm 2, adamw 8              [85, 95)
 *   host     step span                                    [0, 100)
 * plus module spans (op "module") around each layer's attention and mlp ops. So per step:
 * forward 30u, backward 50u (rank 1: 52u), optimizer 10u, exposed communication 5u (rank 1: 3u),
 * idle 5u. Rank 1's times are shifted by 50 us. Flops: gemm 50/ns, attention 20/ns, adamw 1/ns;
 * bytes: memcpy 10/ns, all_reduce 2/ns, other ops 4/ns (so gemm runs at 50 GFLOP/s).
 * Events are appended rank by rank (the step span last), step 10 first, then 20 and 30.
 * With a second argument "host-cover": also, per rank and step, host work (op adamw on stream
 * host, phase backward, as the offloaded AdamW inside the backward) from the end of the
 * backward's compute (80u, rank 1: 82u) to 85u, covering the rest of the all-reduce: no
 * exposed communication, backward 55u on both ranks (tests/test_report.sh). */
#include "common/common.h"
#include "trace/events.h"
#include "trace/trace.h"
#include "check.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int64_t step_ms[3] = {750, 1750, 2750}, base_ms[3] = {100, 1000, 3000};
static int host_cover; /* argv[2] "host-cover" */

static void push(dx_event_buf *b, int rank, int r, int64_t u0, int64_t u1, int phase, int module,
                 int op, int stream, int layer, int micro)
{
    const int64_t u = step_ms[r] * 10000; /* S / 100 in ns */
    const int64_t base = base_ms[r] * 1000000 + rank * 50000;
    dx_event e;
    memset(&e, 0, sizeof e);
    e.start_ns = base + u0 * u;
    e.end_ns = base + u1 * u;
    int64_t d = e.end_ns - e.start_ns;
    e.flops = op == DX_OP_GEMM ? 50 * d : op == DX_OP_ATTENTION ? 20 * d : op == DX_OP_ADAMW ? d : 0;
    e.bytes = op == DX_OP_MEMCPY ? 10 * d : op == DX_OP_ALL_REDUCE ? 2 * d
            : (op == DX_OP_MODULE || op == DX_OP_STEP) ? 0 : 4 * d;
    e.rank = rank;
    e.step = 10 * (r + 1);
    e.micro = (int16_t)micro;
    e.layer = (int16_t)layer;
    e.phase = (uint8_t)phase;
    e.module = (uint8_t)module;
    e.op = (uint8_t)op;
    e.stream = (uint8_t)stream;
    e.dp = (int16_t)rank; /* the synthetic job is DP = 2 */
    e.group = op == DX_OP_ALL_REDUCE ? DX_GROUP_DP : DX_GROUP_NONE; /* (its one collective) */
    if (dx_event_push(b, &e)) {
        fprintf(stderr, "%s\n", dx_last_error());
        exit(1);
    }
}

/* Sequential compute ops starting at *t: {module, op, duration} */
typedef struct {
    int module, op, dur;
} seq_op;

static void push_seq(dx_event_buf *b, int rank, int r, int64_t *t, int phase, int layer,
                     const seq_op *ops, int n)
{
    for (int i = 0; i < n; i++) {
        push(b, rank, r, *t, *t + ops[i].dur, phase, ops[i].module, ops[i].op, DX_STREAM_COMPUTE,
             layer, 0);
        *t += ops[i].dur;
    }
}

/* One layer's ops in one phase, with the attention and mlp module spans around them. */
static void push_layer(dx_event_buf *b, int rank, int r, int64_t *t, int phase, int layer,
                       const seq_op *attn, const seq_op *mlp, int attn_first)
{
    for (int part = 0; part < 2; part++) {
        int is_attn = (part == 0) == attn_first;
        const seq_op *ops = is_attn ? attn : mlp;
        int64_t t0 = *t;
        push_seq(b, rank, r, t, phase, layer, ops, 2);
        push(b, rank, r, t0, *t, phase, is_attn ? DX_MOD_ATTENTION : DX_MOD_MLP, DX_OP_MODULE,
             DX_STREAM_COMPUTE, layer, 0);
    }
}

static void synth_events(dx_event_buf *b, int rank, int r)
{
    int64_t t = 0;
    push(b, rank, r, 0, 2, DX_PH_FORWARD, DX_MOD_DATA, DX_OP_MEMCPY, DX_STREAM_HOST, -1, 0);
    t = 2;
    const seq_op emb_f = {DX_MOD_EMBEDDING, DX_OP_EMBEDDING, 2};
    push_seq(b, rank, r, &t, DX_PH_FORWARD, -1, &emb_f, 1);
    for (int l = 0; l < 2; l++) {
        const seq_op attn[2] = {{DX_MOD_ATTENTION, DX_OP_GEMM, 3}, {DX_MOD_ATTENTION, DX_OP_ATTENTION, 2}};
        const seq_op mlp[2] = {{DX_MOD_MLP, DX_OP_GEMM, 4}, {DX_MOD_MLP, DX_OP_SWIGLU, 1}};
        push_layer(b, rank, r, &t, DX_PH_FORWARD, l, attn, mlp, 1);
    }
    const seq_op head_f[2] = {{DX_MOD_LM_HEAD, DX_OP_GEMM, 4}, {DX_MOD_LOSS, DX_OP_CROSS_ENTROPY, 2}};
    push_seq(b, rank, r, &t, DX_PH_FORWARD, -1, head_f, 2);
    /* backward from 30 */
    const seq_op head_b[2] = {{DX_MOD_LOSS, DX_OP_CROSS_ENTROPY, 1}, {DX_MOD_LM_HEAD, DX_OP_GEMM, 8}};
    push_seq(b, rank, r, &t, DX_PH_BACKWARD, -1, head_b, 2);
    for (int l = 1; l >= 0; l--) {
        const seq_op mlp[2] = {{DX_MOD_MLP, DX_OP_GEMM, 8}, {DX_MOD_MLP, DX_OP_SWIGLU, 1}};
        const seq_op attn[2] = {{DX_MOD_ATTENTION, DX_OP_ATTENTION, 4},
                                {DX_MOD_ATTENTION, DX_OP_GEMM, rank == 1 && l == 0 ? 8 : 6}};
        push_layer(b, rank, r, &t, DX_PH_BACKWARD, l, attn, mlp, 0);
    }
    const seq_op emb_b = {DX_MOD_EMBEDDING, DX_OP_EMBEDDING, 3};
    push_seq(b, rank, r, &t, DX_PH_BACKWARD, -1, &emb_b, 1);
    push(b, rank, r, 60, 85, DX_PH_BACKWARD, DX_MOD_LAYER, DX_OP_ALL_REDUCE, DX_STREAM_COMM, -1, -1);
    if (host_cover)
        push(b, rank, r, rank == 1 ? 82 : 80, 85, DX_PH_BACKWARD, DX_MOD_OPTIMIZER, DX_OP_ADAMW, DX_STREAM_HOST, -1, -1);
    push(b, rank, r, 85, 87, DX_PH_OPTIMIZER, DX_MOD_OPTIMIZER, DX_OP_GRAD_NORM, DX_STREAM_COMPUTE, -1, -1);
    push(b, rank, r, 87, 95, DX_PH_OPTIMIZER, DX_MOD_OPTIMIZER, DX_OP_ADAMW, DX_STREAM_COMPUTE, -1, -1);
    push(b, rank, r, 0, 100, DX_PH_STEP, DX_MOD_STEP, DX_OP_STEP, DX_STREAM_HOST, -1, -1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const char *path = argc > 1 ? argv[1] : "test_trace.h5";
    host_cover = argc > 2 && strcmp(argv[2], "host-cover") == 0;

    const char *hosts[2] = {"node-a", "node-b.example.org"};
    const char *devices[2] = {"Test GPU", "Test GPU"};
    const double peaks[2] = {1e-4, 1e-4}; /* TFLOP/s: test_report.sh's MFU 0.2504 */
    dx_trace_meta meta = {
        .config_json = "{\"model\": {\"preset\": \"tiny\"}, \"seq_length\": 32}",
        .world_size = 2,
        .hosts = hosts,
        .device = "cpu",
        .device_names = devices,
        .device_peak_tflops = peaks,
        .trace_level = "op",
    };

    /* failure: missing directory */
    dx_fail("%s", "");
    dx_trace_writer *bad = dx_trace_create("/nonexistent/dir/x.h5", &meta);
    check(bad == NULL && strstr(dx_last_error(), "/nonexistent/dir/x.h5") != NULL,
          "create in a missing directory fails: %s", dx_last_error());
    check(dx_trace_close(NULL) == 0, "dx_trace_close(NULL) is a no-op");

    int rc;
    dx_trace_writer *w = dx_trace_create(path, &meta);
    check(w != NULL, "create %s%s%s", path, w ? "" : ": ", w ? "" : dx_last_error());
    if (!w) {
        printf("%d passed, %d failed\n", n_pass, n_fail);
        MPI_Finalize();
        return 1;
    }

    /* failures: wrong world size / NULL arrays name the file */
    const int64_t offsets[2] = {0, -123456789};
    check(dx_trace_set_clock_offsets(w, offsets, 3) == -1 && strstr(dx_last_error(), path),
          "clock offsets for world 3 (trace world 2) fail: %s", dx_last_error());
    check(dx_trace_append_events(w, NULL, 5) == -1 && strstr(dx_last_error(), path),
          "append of NULL events fails: %s", dx_last_error());
    rc = dx_trace_set_clock_offsets(w, offsets, 2);
    check(rc == 0, "clock offsets%s%s", rc ? ": " : "", rc ? dx_last_error() : "");

    /* row r (0..2): step 10*(r+1); per-rank values distinct per rank and row */
    int ok_append = 1;
    dx_event_buf evb = {0};
    for (int r = 0; r < 3; r++) {
        double fwd[2], bwd[2], opt[2], comm[2], energy[2], capped[2];
        int64_t mem[2], params[2], grads[2], optim[2], act[2], host[2];
        for (int k = 0; k < 2; k++) {
            fwd[k] = 0.125 * (r + 1) + 0.5 * k;
            bwd[k] = 0.25 * (r + 1) + 0.5 * k;
            opt[k] = 0.0625 * (r + 1) + k;
            comm[k] = 0.01 * (r + 1) + 0.001 * k;
            energy[k] = 512.5 * (r + 1) + 8 * k;
            capped[k] = 0.375 * (r + 1) + 0.125 * k;
            mem[k] = (int64_t)1000000 * (r + 1) + k + ((int64_t)1 << 40);
            params[k] = (int64_t)4096 * (r + 1) + k;
            grads[k] = (int64_t)2048 * (r + 1) + k;
            optim[k] = (int64_t)8192 * (r + 1) + k + ((int64_t)1 << 35);
            act[k] = (int64_t)100000 * (r + 1) + k;
            host[k] = (int64_t)3 * (r + 1) + k + ((int64_t)1 << 37);
        }
        dx_step_row row = {
            .step = 10 * (r + 1),
            .loss = 4.0 - 0.5 * r,
            .grad_norm = 1.5 + r,
            .lr = 1e-3 * (r + 1),
            .tokens = 256 * (r + 1),
            .step_time_s = 0.75 + r,
            .tokens_per_s = 256.0 * (r + 1) / (0.75 + r),
            .val_loss = r == 1 ? 3.25 : NAN,
            .forward_s = fwd,
            .backward_s = bwd,
            .optimizer_s = opt,
            .comm_s = comm,
            .energy_j = energy,
            .power_capped_s = r == 2 ? NULL : capped, /* stored as NaN */
            .peak_mem_bytes = mem,
            .params_bytes = params,
            .grads_bytes = grads,
            .optim_bytes = optim,
            .activations_bytes = r == 2 ? NULL : act, /* stored as -1 */
            .host_peak_bytes = host,
        };
        if (dx_trace_append_step(w, &row) != 0) ok_append = 0;
        for (int k = 0; k < 2; k++) synth_events(&evb, k, r);
        if (r == 0 || r == 2) { /* step 10's events, then 20 and 30 together */
            if (dx_trace_append_events(w, evb.ev, evb.n) != 0) ok_append = 0;
            evb.n = 0;
        }
        if (r == 0) {
            rc = dx_trace_flush(w);
            check(rc == 0, "flush after the first row%s%s", rc ? ": " : "", rc ? dx_last_error() : "");
        }
    }
    dx_event_buf_free(&evb);
    check(ok_append, "append 3 rows and 210 events%s%s", ok_append ? "" : ": ",
          ok_append ? "" : dx_last_error());
    rc = dx_trace_close(w);
    check(rc == 0, "close%s%s", rc ? ": " : "", rc ? dx_last_error() : "");

    printf("%d passed, %d failed\n", n_pass, n_fail);
    MPI_Finalize();
    return n_fail ? 1 : 0;
}
