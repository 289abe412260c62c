/* dissect: small shared utilities (errors, clocks, deterministic random numbers).
 *
 * Errors: every fallible function in dissect returns 0 on success and -1 on failure, after
 * calling dx_fail() with a message that names the input at fault (file, key, rank, tensor).
 * The message is thread-local; main() prints it and exits non-zero.
 */
#ifndef DX_COMMON_H
#define DX_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define DX_VERSION "0.1.0"

#if defined(__GNUC__)
#define DX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DX_PRINTF(a, b)
#endif

/* Sets the current error message (printf-style) and returns -1, so callers can write
 * `return dx_fail("config %s: key '%s' ...", path, key);`. */
int dx_fail(const char *fmt, ...) DX_PRINTF(1, 2);

/* Prefixes the current error message with "prefix: " and returns -1. */
int dx_fail_prefix(const char *fmt, ...) DX_PRINTF(1, 2);

/* The last message set by dx_fail on this thread ("" if none). */
const char *dx_last_error(void);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
uint64_t dx_now_ns(void);

/* Wall clock in nanoseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t dx_wall_ns(void);

/* Counter-based random numbers: the value depends only on (seed, stream, index), so tensors
 * initialise identically whatever the parallel layout. SplitMix64 finaliser (Steele et al. 2014)
 * over a mixed key; normals by Box-Muller on two such uniforms. */
uint64_t dx_hash64(uint64_t x);
/* Uniform in (0, 1). */
double dx_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal N(0, 1). */
double dx_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* Duplicates a string with malloc (NULL on NULL). */
char *dx_strdup(const char *s);

/* The directory part of path into out[cap] (truncated to fit): everything before the last '/'
 * ("/" for "/name"), or "." where path has no '/'. Returns out. */
char *dx_path_dir(const char *path, char *out, size_t cap);

/* Reads a whole file into a malloc'd NUL-terminated buffer; *len gets the byte count (may be
 * NULL). Returns NULL and sets the error (naming the path) on failure. */
char *dx_read_file(const char *path, size_t *len);

/* Dense bf16 tensor-core peak in TFLOP/s of a GPU named as cudaDeviceProp.name names it
 * ("NVIDIA H100 80GB HBM3"), for MFU: NVIDIA's datasheet figures, which are quoted with 2:4
 * sparsity, halved (H100 / H200 / H800 / GH200 SXM 989, H100 and H800 PCIe 756, H100 and H200
 * NVL 835, H20 148; the SXM figure rounded down to the 989 the benchmarks use). Only the Hopper
 * GPUs this build's kernels target are listed; 0 for any other name (also NULL) and for a MIG
 * instance (" MIG " in the name: a slice of the GPU): the caller then asks the user for the peak. */
double dx_peak_tflops(const char *device_name);
/* The summed peak of n ranks' devices (peaks[i] from dx_peak_tflops), for MFU over a job; 0 when
 * one is unknown (not a finite positive number): no MFU then. */
double dx_peak_tflops_sum(const double *peaks, size_t n);

#endif
