/* Timing marks for the CUDA backend's traces: dx_backend.mark / resolve_marks (kernels.h)
 * implemented with CUDA events. */
#ifndef DX_CUDA_MARKS_H
#define DX_CUDA_MARKS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs be->mark and be->resolve_marks on a CUDA backend (dx_backend_cuda_create). Marks are
 * cudaEvents recorded on the given stream (NULL: be's compute stream), from a pool that grows as
 * needed and is reused after each resolve; resolve records a reference event on the compute
 * stream, waits for it (with wait_all, for every mark first) and reads CLOCK_MONOTONIC, and gives
 * each completed mark the host time reference - cudaEventElapsedTime(mark, reference)
 * (resolution about 0.5 us); marks still pending (cudaEventQuery: not ready) keep their events
 * under the lowest ids. One backend per process. Returns 0, or -1 + dx_fail if `be` is not a
 * CUDA backend. */
int dx_cuda_enable_marks(dx_backend *be);

#ifdef __cplusplus
}
#endif

#endif
