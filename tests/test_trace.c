/* Writes a small trace file for tests/check_trace.py: world_size 2, 3 /steps rows (the first
 * flushed on its own, the other two at close), and checks that creating a file in a missing
 * directory fails with a message naming the path.
 *   usage: test_trace OUT.h5 && python3 tests/check_trace.py OUT.h5
 * The values here are repeated in check_trace.py. Run as a plain single process (MPI singleton).
 * Last line: "N passed, M failed"; exit status 1 if any failed. */
#include "common/common.h"
#include "coordinator/trace.h"

#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int n_pass, n_fail;

static void check(int ok, const char *fmt, ...) DX_PRINTF(2, 3);
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        n_pass++;
    else
        n_fail++;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const char *path = argc > 1 ? argv[1] : "test_trace.h5";

    const char *hosts[2] = {"node-a", "node-b.example.org"};
    dx_trace_meta meta = {
        .config_json = "{\"model\": {\"preset\": \"tiny\"}, \"seq_length\": 32}",
        .world_size = 2,
        .hosts = hosts,
        .device = "cpu",
        .trace_level = "step",
    };

    /* failure: missing directory */
    dx_fail("%s", "");
    dx_trace_writer *bad = dx_trace_create("/nonexistent/dir/x.h5", &meta);
    check(bad == NULL && strstr(dx_last_error(), "/nonexistent/dir/x.h5") != NULL,
          "create in a missing directory fails: %s", dx_last_error());
    check(dx_trace_close(NULL) == 0, "dx_trace_close(NULL) is a no-op");

    dx_trace_writer *w = dx_trace_create(path, &meta);
    check(w != NULL, "create %s%s%s", path, w ? "" : ": ", w ? "" : dx_last_error());
    if (!w) {
        printf("%d passed, %d failed\n", n_pass, n_fail);
        MPI_Finalize();
        return 1;
    }

    /* row r (0..2): step 10*(r+1); per-rank values distinct per rank and row */
    int ok_append = 1;
    for (int r = 0; r < 3; r++) {
        double fwd[2], bwd[2], opt[2], comm[2];
        int64_t mem[2];
        for (int k = 0; k < 2; k++) {
            fwd[k] = 0.125 * (r + 1) + 0.5 * k;
            bwd[k] = 0.25 * (r + 1) + 0.5 * k;
            opt[k] = 0.0625 * (r + 1) + k;
            comm[k] = 0.01 * (r + 1) + 0.001 * k;
            mem[k] = (int64_t)1000000 * (r + 1) + k + ((int64_t)1 << 40);
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
            .peak_mem_bytes = mem,
        };
        if (dx_trace_append_step(w, &row) != 0) ok_append = 0;
        if (r == 0) {
            int rc = dx_trace_flush(w);
            check(rc == 0, "flush after the first row%s%s", rc ? ": " : "", rc ? dx_last_error() : "");
        }
    }
    check(ok_append, "append 3 rows%s%s", ok_append ? "" : ": ", ok_append ? "" : dx_last_error());
    int rc = dx_trace_close(w);
    check(rc == 0, "close%s%s", rc ? ": " : "", rc ? dx_last_error() : "");

    printf("%d passed, %d failed\n", n_pass, n_fail);
    MPI_Finalize();
    return n_fail ? 1 : 0;
}
