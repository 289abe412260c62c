// CUDA-event timing marks for traces; see marks.h.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_backend.h"
#include "marks.h"

extern "C" {
#include "common/common.h"
}

namespace {
struct pool {
    dx_backend *be = nullptr;
    cudaEvent_t *ev = nullptr;
    int64_t *ns = nullptr;
    int n = 0, cap = 0;
    cudaEvent_t ref = nullptr; /* the reference: a compute-stream position and its host time */
    int64_t t_ref = 0;
    int anchored = 0;          /* anchor() took it for the next resolve */
};
pool P;

int mark(dx_backend *be, void *stream)
{
    if (P.n == P.cap) {
        int cap = P.cap ? 2 * P.cap : 1024;
        cudaEvent_t *ev = (cudaEvent_t *)realloc(P.ev, (size_t)cap * sizeof *ev);
        int64_t *ns = (int64_t *)realloc(P.ns, (size_t)cap * sizeof *ns);
        if (ev) P.ev = ev;
        if (ns) P.ns = ns;
        if (!ev || !ns) return -1;
        for (int i = P.cap; i < cap; i++)
            if (cudaEventCreate(&P.ev[i]) != cudaSuccess) return -1;
        P.cap = cap;
    }
    cudaStream_t s = stream ? (cudaStream_t)stream : (cudaStream_t)dx_cuda_stream(be);
    if (cudaEventRecord(P.ev[P.n], s) != cudaSuccess) return -1;
    return P.n++;
}

/* Records the reference on the compute stream, waits for it and reads the host clock. */
cudaError_t take_ref(dx_backend *be)
{
    cudaError_t e = P.ref ? cudaSuccess : cudaEventCreate(&P.ref);
    if (e == cudaSuccess) e = cudaEventRecord(P.ref, (cudaStream_t)dx_cuda_stream(be));
    if (e == cudaSuccess) e = cudaEventSynchronize(P.ref);
    P.t_ref = (int64_t)dx_now_ns();
    return e;
}

int anchor(dx_backend *be)
{
    cudaError_t e = take_ref(be);
    if (e != cudaSuccess) return dx_fail("trace: timing marks' reference: %s", cudaGetErrorString(e));
    P.anchored = 1;
    return 0;
}

int resolve(dx_backend *be, int wait_all, const int64_t **ns)
{
    cudaError_t e = cudaSuccess;
    for (int i = 0; wait_all && e == cudaSuccess && i < P.n; i++) e = cudaEventSynchronize(P.ev[i]);
    /* the reference anchor() took (no wait now), or a new one */
    if (e == cudaSuccess && (wait_all || !P.anchored)) e = take_ref(be);
    P.anchored = 0;
    const int64_t t_ref = P.t_ref;
    /* a mark not yet complete moves to the front (the next ids), swapping its event with a
     * resolved one; P.ns stays indexed by the ids the caller holds. A mark after the reference
     * (recorded since anchor()) gets a negative elapsed time: a host time after t_ref. */
    int kept = 0;
    for (int i = 0; e == cudaSuccess && i < P.n; i++) {
        cudaError_t q = cudaEventQuery(P.ev[i]);
        if (q == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error: do not leave it for later checks */
            cudaEvent_t t = P.ev[kept];
            P.ev[kept] = P.ev[i];
            P.ev[i] = t;
            P.ns[i] = -1 - (int64_t)kept++;
            continue;
        }
        float ms = 0;
        e = q == cudaSuccess ? cudaEventElapsedTime(&ms, P.ev[i], P.ref) : q;
        P.ns[i] = t_ref - (int64_t)((double)ms * 1e6);
    }
    if (e != cudaSuccess) return dx_fail("trace: resolving %d CUDA timing marks: %s", P.n, cudaGetErrorString(e));
    int n = P.n;
    P.n = kept;
    *ns = P.ns;
    return n;
}
} // namespace

extern "C" int dx_cuda_enable_marks(dx_backend *be)
{
    if (!dx_cuda_stream(be)) return dx_fail("timing marks need the CUDA backend");
    P.be = be;
    be->mark = mark;
    be->resolve_marks = resolve;
    be->anchor_marks = anchor;
    return 0;
}
