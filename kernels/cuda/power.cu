/* dissect CUDA backend: the device's energy and power-limit counters (kernels.h power_counters)
 * from NVML, the NVIDIA driver's management library. libnvidia-ml.so.1 comes with the driver, not
 * with the toolkit, so it is opened with dlopen at the first call instead of linked: a build
 * needs neither NVML's header nor its library, and a machine whose driver lacks it still trains
 * (the counters are then reported unavailable). The few declarations used are NVML's C API
 * (https://docs.nvidia.com/deploy/nvml-api/: nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2,
 * nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetViolationStatus, nvmlShutdown).
 *
 * Reading the two counters took 3.5 ms of host time on an H200 (2026-11-28). Read at a step's
 * boundaries by the training loop itself, that held the next step's launches back by ~7 ms per
 * step, time the GPU spent idle (or on the previous step's AdamW alone) outside the step's timed
 * window, and the measured tokens/s rose by 2% (benchmarks/NOTES.md item 37). So a helper thread
 * reads them every SAMPLE_MS and power_counters returns its latest sample without waiting (only
 * the first call waits for the first sample). */
#include "cuda_internal.cuh"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

namespace {

typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
struct nvml_violation_time {                /* nvmlViolationTime_t */
    unsigned long long reference_time;      /* CPU timestamp, us */
    unsigned long long violation_time;      /* ns */
};
constexpr int NVML_SUCCESS = 0, NVML_PERF_POLICY_POWER = 0;
constexpr long SAMPLE_MS = 20; /* the helper thread's pause between two readings */

} /* namespace */

struct dxc_nvml {
    void *lib;
    int failed; /* 1: NVML or a counter was not available (final) */
    nvml_device dev;
    int (*energy)(nvml_device, unsigned long long *);
    int (*violation)(nvml_device, int, nvml_violation_time *);
    int (*shutdown)(void);
    /* the helper thread and its latest sample (under mu; `have` set once the first one is in,
     * `stop` asks the thread to end) */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int have, stop, read_rc;
    double energy_j, capped_s;
};

/* Opens NVML and finds this backend's device by its PCI bus id (CUDA_VISIBLE_DEVICES renumbers
 * CUDA's devices, NVML's do not). 0, or -1 + dx_fail naming what is missing. */
static int nvml_open(dx_backend *be, dxc_nvml *n)
{
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) return dx_fail("power counters: cannot load libnvidia-ml.so.1 (%s)", dlerror());
    int (*init)(void) = (int (*)(void))dlsym(n->lib, "nvmlInit_v2");
    int (*by_bus)(const char *, nvml_device *) =
        (int (*)(const char *, nvml_device *))dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    n->energy = (int (*)(nvml_device, unsigned long long *))dlsym(n->lib, "nvmlDeviceGetTotalEnergyConsumption");
    n->violation = (int (*)(nvml_device, int, nvml_violation_time *))dlsym(n->lib, "nvmlDeviceGetViolationStatus");
    n->shutdown = (int (*)(void))dlsym(n->lib, "nvmlShutdown");
    if (!init || !by_bus || !n->energy || !n->violation || !n->shutdown) {
        n->shutdown = NULL;
        return dx_fail("power counters: libnvidia-ml.so.1 lacks a function this build uses");
    }
    int rc = init();
    if (rc != NVML_SUCCESS) {
        n->shutdown = NULL; /* (nothing to shut down) */
        return dx_fail("power counters: nvmlInit_v2 returned %d", rc);
    }
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dxc(be)->device) != cudaSuccess)
        return dx_fail("power counters: no PCI bus id for CUDA device %d", dxc(be)->device);
    if ((rc = by_bus(bus, &n->dev)) != NVML_SUCCESS)
        return dx_fail("power counters: NVML has no device at PCI bus id %s (%d)", bus, rc);
    return 0;
}

/* The helper thread: both counters every SAMPLE_MS until stop (or a failed read, kept in read_rc). */
static void *nvml_sampler(void *arg)
{
    dxc_nvml *n = (dxc_nvml *)arg;
    for (;;) {
        unsigned long long mj = 0;
        nvml_violation_time v = {0, 0};
        int rc = n->energy(n->dev, &mj);
        if (rc == NVML_SUCCESS) rc = n->violation(n->dev, NVML_PERF_POLICY_POWER, &v);
        pthread_mutex_lock(&n->mu);
        if (rc == NVML_SUCCESS) {
            n->energy_j = (double)mj * 1e-3;
            n->capped_s = (double)v.violation_time * 1e-9;
        }
        n->read_rc = rc;
        n->have = 1;
        const int stop = n->stop || rc != NVML_SUCCESS;
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
        if (stop) return NULL;
        const struct timespec ts = {0, SAMPLE_MS * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&n->mu);
        const int s = n->stop;
        pthread_mutex_unlock(&n->mu);
        if (s) return NULL;
    }
}

int dxc_power_counters(dx_backend *be, double *energy_j, double *power_capped_s)
{
    dxc_impl *im = dxc(be);
    if (!im->nvml) {
        dxc_nvml *n = (dxc_nvml *)calloc(1, sizeof *n);
        if (!n) return dx_fail("power counters: out of host memory");
        im->nvml = n;
        pthread_mutex_init(&n->mu, NULL);
        pthread_cond_init(&n->cv, NULL);
        if (nvml_open(be, n)) {
            n->failed = 1;
            return -1;
        }
        if (pthread_create(&n->thread, NULL, nvml_sampler, n) != 0) {
            n->failed = 1;
            return dx_fail("power counters: cannot start the sampling thread");
        }
        n->started = 1;
    }
    dxc_nvml *n = im->nvml;
    if (n->failed) return dx_fail("power counters: not available on this device (NVML)");
    pthread_mutex_lock(&n->mu);
    while (!n->have) pthread_cond_wait(&n->cv, &n->mu);
    const int rc = n->read_rc;
    *energy_j = n->energy_j;
    *power_capped_s = n->capped_s;
    pthread_mutex_unlock(&n->mu);
    if (rc != NVML_SUCCESS) {
        n->failed = 1;
        return dx_fail("power counters: NVML returned %d for the energy or power-violation counter", rc);
    }
    return 0;
}

void dxc_power_release(dx_backend *be)
{
    dxc_impl *im = dxc(be);
    dxc_nvml *n = im->nvml;
    if (!n) return;
    if (n->started) {
        pthread_mutex_lock(&n->mu);
        n->stop = 1;
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
    }
    if (n->lib) {
        if (n->shutdown) n->shutdown();
        dlclose(n->lib);
    }
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
    im->nvml = NULL;
}
