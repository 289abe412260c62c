/* Timing marks for the CUDA backend's traces: dx_backend.mark / resolve_marks (kernels.h)
 * implemented with CUDA events. */
#ifndef DX_CUDA_MARKS_H
#define DX_CUDA_MARKS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs be->mark, be->resolve_marks and be->anchor_marks on a CUDA backend
 * (dx_backend_cuda_create). Marks are cudaEvents recorded on the given stream (NULL: be's compute
 * stream), from a pool that grows as needed and is reused after each resolve. The reference is an
 * event recorded on the compute stream, waited for, and the CLOCK_MONOTONIC time read then:
 * anchor_marks takes it for the next resolve; otherwise resolve takes it itself (with wait_all,
 * after waiting for every mark). Resolve gives each completed mark the host time reference -
 * cudaEventElapsedTime(mark, reference) (resolution about 0.5 us; marks recorded after an anchor
 * come out later than it); marks still pending (cudaEventQuery: not ready) keep their events under
 * the lowest ids. One backend per process. Returns 0, or -1 + dx_fail if `be` is not a CUDA
 * backend. */
int dx_cuda_enable_marks(dx_backend *be);

#ifdef __cplusplus
}
#endif

#endif
