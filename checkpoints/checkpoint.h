/* dissect checkpoints: one HDF5 file of logical, unsharded tensors that a run resumes from under
 * any layout.
 *
 * Layout (format_version 2): root attributes format = "dissect-checkpoint", format_version,
 * step (steps done), consumed_samples (training sequences consumed: the data order's position),
 * seed (the whole random state: initialisation, data order and sampling are counter-based
 * functions of the seed and a position), config_json; float32 datasets of each tensor's logical
 * shape ([rows, cols] or [rows]) under its Hugging Face name in
 *   /params/<name>                   the fp32 master weights,
 *   /optimizer/exp_avg/<name>        AdamW's first moment (torch.optim.AdamW's state name),
 *   /optimizer/exp_avg_sq/<name>     its second moment;
 * and /checksums, uint64 [3, tensors]: row 0 the /params tensors', rows 1 and 2 the moments', the
 * column of each tensor in the int64 attribute checksum_column of its three datasets. A tensor's
 * checksum is the XOR over its elements of fmix64(rot32(e) ^ bits), e the element's row-major
 * index in the logical tensor, bits its float32 bit pattern, fmix64 MurmurHash3's 64-bit
 * finalizer (Appleby) and rot32 a rotation by 32 bits: independent of the order and the ranks
 * that hashed the pieces, so that any layout can check what any other wrote; a changed bit or two
 * swapped values change it (all but 2^-64 of the time). Files written before checksums have no
 * /checksums and load unchecked.
 * The learning-rate schedule's position is the step.
 *
 * Saving is collective over the world and parallel (MPI-IO through parallel HDF5): the ranks
 * create the datasets together, then every rank writes the pieces it owns as hyperslabs of the
 * logical tensors (its ZeRO shard of its TP slice of its pipeline stage's parameters; with ZeRO
 * stage 0 DP rank 0 of each (stage, TP rank) writes; parameters every TP rank holds are written
 * by TP rank 0). Nothing goes through rank 0. The file is written as PATH.tmp and renamed to PATH
 * once complete, so a crash or a signal during the save never leaves a torn file under a
 * checkpoint's name, and the previous checkpoint stays.
 *
 * Loading reads by logical coordinates, so a checkpoint written under any DP, TP or PP size,
 * ZeRO stage or offload setting resumes under any other. Each rank hashes the part of each tensor
 * it writes (saving) or would write (loading: the same partition in the loading layout); the
 * parts' checksums are XORed over the world, and a load whose sums differ from /checksums fails.
 */
#ifndef DX_CHECKPOINT_H
#define DX_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "zero/zero.h"

/* The training position a checkpoint records besides the tensors. */
typedef struct {
    int64_t step;             /* optimizer steps done */
    int64_t consumed_samples; /* training sequences consumed (global) */
    uint64_t seed;            /* the run's seed */
    double grad_norm;         /* load only: the last step's global gradient norm (-1: not in the
                                 file); saves write dx_zero_last_grad_norm, loads set it */
} dx_ckpt_state;

/* Bytes one checkpoint of a model of total_params parameters takes on disk: three fp32 tensors
 * per parameter (master weights, exp_avg, exp_avg_sq) and 1 MiB for HDF5's metadata and the
 * config text (an upper bound for the models dissect builds). */
uint64_t dx_checkpoint_file_bytes(int64_t total_params);

/* Writes a full checkpoint (master weights, AdamW moments, *st). Before any byte of it, rank 0
 * reserves dx_checkpoint_file_bytes of room for PATH.tmp (fallocate; statvfs where the file
 * system cannot): a full disk, a quota or a file-size limit fails there, cleanly, instead of
 * inside HDF5's writes (which then cannot close the file). world: every rank (an MPI group);
 * dp: this rank's DP group (of z); tp_rank: this rank's TP index; config_json: the same text on
 * every rank. Collective over the world. Returns 0 on every rank, or, PATH then untouched, -1 +
 * dx_fail naming the path (unwritable directory, failed write or rename) on a rank that failed
 * itself and -2 on the others (dx_comm_agree: the failing rank reports). */
int dx_checkpoint_save(const char *path, dx_model *m, dx_zero *z, dx_comm *world, dx_comm *dp,
                       int tp_rank, const dx_ckpt_state *st, const char *config_json);

/* Asynchronous saves (Megatron-LM's --async-save): the same file as dx_checkpoint_save, written
 * while training goes on. A saver holds a page-locked snapshot buffer (this rank's owned master
 * weights and both moments: 12 bytes per owned parameter; host_alloc of the model's backend),
 * kept between saves so that each snapshot is one device-to-host copy, and at most one save in
 * flight. dx_checkpoint_async_create: NULL + dx_fail on out of memory. destroy joins a writer
 * still running (its file stays .tmp) and frees the buffer. */
typedef struct dx_ckpt_async dx_ckpt_async;
dx_ckpt_async *dx_checkpoint_async_create(void);
void dx_checkpoint_async_destroy(dx_ckpt_async *a);
/* Collective. Reserves the room, has rank 0 write the header and the layout (serial HDF5;
 * contiguous datasets allocated at creation, so each has a fixed file offset) to PATH.tmp, copies
 * this rank's owned pieces into the snapshot, and starts a thread that pwrite()s them to their
 * offsets and fdatasync()s: no HDF5 call leaves the main thread. 0, or -1 + dx_fail on every rank
 * (PATH.tmp removed); also -1 while a save is in flight. */
int dx_checkpoint_save_start(dx_ckpt_async *a, const char *path, dx_model *m, dx_zero *z, dx_comm *world,
                             dx_comm *dp, int tp_rank, const dx_ckpt_state *st, const char *config_json);
/* Collective (one all-reduce while a save is in flight). 2: no save in flight; 0: some rank's
 * writer is still busy (wait = 0); 1: every writer is done, rank 0 renamed PATH.tmp to PATH and
 * *seconds (if not NULL) holds the time since the start. When a write or the rename failed:
 * PATH.tmp removed, earlier checkpoints untouched, -1 + dx_fail on the ranks that failed and -2
 * on the others (as dx_comm_agree). wait = 1 first joins this rank's writer. */
int dx_checkpoint_save_poll(dx_ckpt_async *a, dx_comm *world, int wait, double *seconds);

/* Loads a full checkpoint into the model's ZeRO state: each rank reads its TP slice of each of
 * its parameters (master weights, set through dx_zero_set_master) and its owned pieces of the
 * moments; *st receives the position, and the last step's gradient norm goes to
 * dx_zero_set_last_grad_norm. dp: this rank's DP group; tp_rank: its TP index (which rank
 * checksums a TP-replicated tensor). Collective over the world. Errors (missing file, not a
 * dissect checkpoint, format_version 1 without optimizer states, a tensor missing or of another
 * shape, /params holding another number of parameters than total_params, the trained ones:
 * the whole model's, or LoRA's adapters (a frozen base is not in checkpoints), a tensor whose
 * values do not match /checksums, /checksums or a checksum_column unreadable)
 * name the path and the tensor: -1 + dx_fail on the lowest rank that failed itself (it reports:
 * dx_agree_and_report), -2 on the others (their message names that rank); 0 on every rank. The
 * model's state is then partly overwritten: a failed load ends the run. */
int dx_checkpoint_load(const char *path, dx_model *m, dx_zero *z, dx_comm *world, dx_comm *dp, int tp_rank,
                       int64_t total_params, dx_ckpt_state *st);

/* The checksum (above) of a whole tensor of n float32 values in row-major order. */
uint64_t dx_checkpoint_checksum(const float *v, size_t n);

/* Checks whole tensor /params/<name> of an open checkpoint (file: its hid_t), as read into
 * v[n] (row-major, float32), against /checksums: 0 when it matches or the file has no checksums,
 * -1 + dx_fail naming path and tensor otherwise (a mismatch, an unreadable /checksums or
 * checksum_column). */
int dx_checkpoint_check_params(int64_t file, const char *path, const char *name, const float *v, size_t n);

/* Periodic checkpoints of a run directory: DIR/iter_<step, 7 digits>.h5 (Megatron-LM's naming). */
void dx_checkpoint_name(char *out, size_t cap, const char *dir, int64_t step);

/* The newest complete checkpoint in dir (iter_*.h5; never a .tmp): its path into out and its step
 * into *step. Returns 1 when found, 0 when the directory holds none (or does not exist), -1 +
 * dx_fail when dir cannot be read. */
int dx_checkpoint_latest(const char *dir, char *out, size_t cap, int64_t *step);

/* Removes the periodic checkpoints of dir but the newest keep_last (keep_last <= 0: keeps all).
 * Returns the number removed, or -1 + dx_fail. */
int dx_checkpoint_prune(const char *dir, int keep_last);

#endif
