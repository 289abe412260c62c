/* dissect checkpoints: one HDF5 file of logical, unsharded tensors.
 *
 * Layout: root attributes format = "dissect-checkpoint", format_version = 1, step (int64),
 * config_json; /params/<HF name> float32 datasets of the tensor's logical shape ([rows, cols] or
 * [rows]) holding the fp32 master weights. The file is written to PATH.tmp and renamed to PATH,
 * so a crash never leaves a torn checkpoint under the final name.
 *
 * Saving is collective over the DP group (shards are gathered from their owners); rank 0 writes.
 * A checkpoint written under any DP size or ZeRO stage holds the same tensors.
 */
#ifndef DX_CHECKPOINT_H
#define DX_CHECKPOINT_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "zero/zero.h"

/* Writes the master weights after `step` steps. Returns 0 on every rank, or -1 + dx_fail (naming
 * the path) on rank 0's I/O failure; callers agree on the result. */
int dx_checkpoint_save(const char *path, dx_model *m, dx_zero *z, dx_comm *dp, int64_t step,
                       const char *config_json);

#endif
