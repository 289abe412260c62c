/* The model the checkpoint and Hugging Face import harnesses load into: MPI initialised once
 * (one rank, a singleton), the float CPU backend, a tiny Llama (vocab 23, hidden 16, 4 heads, 2 KV
 * heads, FFN 20, 2 layers: 17 tensors) and its ZeRO state over the one-rank world. Built once
 * per process in LLVMFuzzerInitialize; every input loads into the same objects (a successful
 * load overwrites every value the harness then compares). Header-only (static). */
#ifndef DX_FUZZ_RIG_H
#define DX_FUZZ_RIG_H

#include "fuzz_util.h"

#include "comm/comm.h"
#include "config/config.h"
#include "kernels.h"
#include "model/model.h"
#include "zero/zero.h"

/* Open MPI's start-up and shut-down allocate memory it never frees; those allocations are made
 * with leak detection off (LeakSanitizer never reports them), so the per-input leak checks need
 * neither suppressions nor slow full-stack unwinding. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_HAVE_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FZ_HAVE_LSAN 1
#endif
#ifdef FZ_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#define FZ_LSAN_OFF() __lsan_disable()
#define FZ_LSAN_ON() __lsan_enable()
#else
#define FZ_LSAN_OFF() ((void)0)
#define FZ_LSAN_ON() ((void)0)
#endif

typedef struct {
    dx_comm *world;
    dx_backend *be;
    dx_model *m;
    dx_zero *z;
    dx_model_config cfg;
    int64_t total_params;
} fz_rig;

static fz_rig rig;

static inline void rig_teardown(void)
{
    if (rig.z) dx_zero_destroy(rig.z);
    if (rig.m) dx_model_destroy(rig.m);
    if (rig.be) rig.be->destroy(rig.be);
    FZ_LSAN_OFF();
    if (rig.world) rig.world->destroy(rig.world);
    dx_comm_mpi_finalize();
    FZ_LSAN_ON();
}

static inline void rig_setup(int *argc, char ***argv, int zero_stage)
{
    /* Open MPI's handlers of SIGSEGV, SIGABRT, ... would print their own trace instead of
     * libFuzzer's crash report (and its reproducer) */
    setenv("OMPI_MCA_opal_signal", "", 0);
    FZ_LSAN_OFF();
    rig.world = dx_comm_mpi_world(argc, argv);
    FZ_LSAN_ON();
    if (!rig.world || rig.world->size != 1) {
        fprintf(stderr, "fuzz rig: needs one MPI rank: %s\n", dx_last_error());
        abort();
    }
    dx_model_config *c = &rig.cfg;
    memset(c, 0, sizeof *c);
    c->vocab_size = 23;
    c->hidden_size = 16;
    c->intermediate_size = 20;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->max_position_embeddings = 64;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 10000.0;
    c->initializer_range = 0.02;
    rig.total_params = dx_model_num_params(c);
    rig.be = dx_backend_cpu_create(1);
    rig.m = rig.be ? dx_model_create(c, rig.be, 1, 4) : NULL;
    int rc = 0;
    rig.z = rig.m ? dx_zero_create(rig.m, rig.be, rig.world, rig.world, zero_stage, 0, 1, &rc) : NULL;
    if (!rig.z) {
        fprintf(stderr, "fuzz rig: %s\n", dx_last_error());
        abort();
    }
    atexit(rig_teardown);
}

#endif
