/* dissect checkpoints: one HDF5 file of logical, unsharded tensors.
 *
 * Layout: root attributes format = "dissect-checkpoint", format_version = 1, step (int64),
 * config_json; /params/<HF name> float32 datasets of the tensor's logical shape ([rows, cols] or
 * [rows]) holding the fp32 master weights. The file is written to PATH.tmp and renamed to PATH,
 * so a crash never leaves a torn checkpoint under the final name.
 *
 * Saving is collective over the world: in each (PP stage, TP rank) of the grid, the DP group
 * gathers its ZeRO shards to DP rank 0, which sends its slices (tensor-parallel slices, its
 * stage's layers; parameters every TP rank holds only from TP rank 0) to world rank 0; rank 0
 * writes each slice into its place (an HDF5 hyperslab) of the logical tensor. A checkpoint
 * written under any DP, TP or PP size or ZeRO stage therefore holds the same tensors.
 */
#ifndef DX_CHECKPOINT_H
#define DX_CHECKPOINT_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "zero/zero.h"

/* Writes the master weights after `step` steps. world: every rank; dp: this rank's DP group (of
 * z); tp_rank: this rank's TP index. Returns 0 on every rank, or -1 + dx_fail (naming the path)
 * on rank 0's I/O failure or a failed transfer; callers agree on the result. */
int dx_checkpoint_save(const char *path, dx_model *m, dx_zero *z, dx_comm *world, dx_comm *dp,
                       int tp_rank, int64_t step, const char *config_json);

#endif
