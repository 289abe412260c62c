/* dissect Hugging Face import: safetensors reader and weight loading (config.json: config.h).
 *
 * safetensors format (https://github.com/huggingface/safetensors, README "Format"):
 *   bytes [0, 8)        N: uint64, little-endian, the header length
 *   bytes [8, 8 + N)    header: UTF-8 JSON object
 *                         {"NAME": {"dtype": "F32", "shape": [d0, d1, ...],
 *                                   "data_offsets": [begin, end]}, ...,
 *                          "__metadata__": {"key": "value", ...}}     (metadata optional)
 *                       The writer may pad the JSON with trailing spaces (to 8-byte alignment).
 *   bytes [8 + N, EOF)  data section: each tensor's elements, row-major, little-endian, at
 *                       data section bytes [begin, end) (offsets relative to the data section,
 *                       end - begin = numel x element size).
 * A model too large for one file is split into shards described by model.safetensors.index.json:
 *   {"metadata": {...}, "weight_map": {"NAME": "model-00001-of-00002.safetensors", ...}}.
 *
 * Hugging Face checkpoint directory (what LlamaForCausalLM.save_pretrained writes): config.json
 * plus model.safetensors, or model.safetensors.index.json and its shards. Tensor names and shapes
 * are those of dissect's parameter table (worker/model.h), which follows HF's Llama layout:
 * linear weights [out_features, in_features], norm weights [hidden_size].
 *
 * Errors: every function returns 0 (or a pointer) on success and -1 (or NULL) after dx_fail()
 * with a message naming the file and, where one is at fault, the key or tensor.
 */
#ifndef DX_SAFETENSORS_H
#define DX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"
#include "zero/zero.h"

#define DX_ST_MAX_DIMS 8

/* One tensor of a safetensors header. */
typedef struct {
    char *name;                     /* tensor name (owned by the file) */
    char dtype[16];                 /* the header's dtype string: "F32", "BF16", "F16", "I64", ... */
    int elem_bytes;                 /* bytes per element; 0 for a dtype unknown to this reader */
    int ndim;                       /* 0 (scalar) .. DX_ST_MAX_DIMS */
    int64_t shape[DX_ST_MAX_DIMS];
    uint64_t numel;                 /* product of the shape (1 for a scalar) */
    uint64_t begin, end;            /* data_offsets: bytes [begin, end) of the data section */
} dx_st_tensor;

/* An open, memory-mapped safetensors file. */
typedef struct {
    char path[1100];
    const uint8_t *map;   /* whole file, read-only mapping */
    size_t map_bytes;
    const uint8_t *data;  /* data section (map + 8 + N) */
    uint64_t data_bytes;  /* bytes in the data section */
    int n;                /* tensors (the __metadata__ entry is not one) */
    dx_st_tensor *t;      /* [n], in header order */
} dx_st_file;

/* Opens and memory-maps PATH and parses its header (cJSON). Checks: the file holds the 8-byte
 * length; N <= 100,000,000 (the format's limit) and 8 + N <= file size; the header is one JSON
 * object (trailing blanks allowed); every entry but "__metadata__" is an object with a string
 * "dtype", a "shape" array of at most DX_ST_MAX_DIMS non-negative integers and "data_offsets"
 * [begin, end] with begin <= end <= data section size ("out of range: file truncated?") and, for
 * a known dtype, end - begin = numel x element size. Errors name PATH and the tensor.
 * On failure *f is left closed (dx_st_close is a no-op on it). */
int dx_st_open(dx_st_file *f, const char *path);
void dx_st_close(dx_st_file *f);

/* The tensor named `name`, or NULL. */
const dx_st_tensor *dx_st_find(const dx_st_file *f, const char *name);

/* Converts all t->numel elements of tensor t (of file f) to float into out[numel]. Supported
 * dtypes: F32 (copied), BF16 (exact: the top half of an fp32), F16 (exact, IEEE binary16 with
 * subnormals, infinities and NaN). Other dtypes: -1 + dx_fail naming the file, tensor and dtype. */
int dx_st_read_f32(const dx_st_file *f, const dx_st_tensor *t, float *out);

/* Loads the initial weights of model m from DIR's safetensors (DIR/model.safetensors if present,
 * else DIR/model.safetensors.index.json and the shards of its weight_map) into the fp32 master
 * weights of z (and so the working copy), via dx_zero_set_master for every parameter of the
 * model's table, found by its HF name. Every rank reads the files and keeps its own shard.
 *
 * Checks, before any weight is set (errors name the file and the tensor):
 *   - every parameter has a tensor of exactly its shape ([rows, cols] or [rows]);
 *     "expected [a, b], got [c, d]" otherwise; missing tensors are errors;
 *   - every tensor is a parameter, except names ending in "rotary_emb.inv_freq" (a buffer old
 *     transformers versions saved); a tensor in two shards is an error;
 *   - index: weight_map is an object of strings, and each listed tensor is in its shard;
 *   - dtypes F32, BF16 or F16 (converted to float, see dx_st_read_f32).
 * Collective over dp (the DP group of z; NULL or size 1 = alone): after its own checks each rank
 * takes part in one agreement (MPI max), so all ranks fail together, and a rank whose checks passed
 * reports the failing rank's message ("rank R: ..."); only then are the weights set
 * (dx_zero_set_master is collective for ZeRO stages 1-2).
 * A rank that failed before it could call this (e.g. while creating its model) must still take
 * part: it calls with m = z = NULL, which joins the agreement as a failure, keeps (and, when it is
 * the lowest failing rank, broadcasts) its current error message, and returns -1. */
int dx_hf_load_weights(const char *dir, dx_model *m, dx_zero *z, dx_comm *dp);

/* ---- writing ---------------------------------------------------------------------------- */

/* One tensor to write: its name and logical shape (ndim 1 or 2). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} dx_st_spec;

/* Supplies tensor i's numel floats (fp32, row-major) into out; 0, or -1 + dx_fail. */
typedef int (*dx_st_fill_fn)(void *ctx, int i, float *out);

/* Writes a safetensors file of the n tensors t[0..n-1], in that order: the 8-byte little-endian
 * header length, the JSON header (each name -> dtype, shape, data_offsets; "__metadata__":
 * {"format": "pt"}, what torch's save_file writes), padded with spaces to a multiple of 8, then
 * each tensor's elements as fill(ctx, i, buf) gives them, stored as "F32" (bf16 = 0) or "BF16"
 * (bf16 = 1: each fp32 value rounded to nearest-even, NaN kept quiet). Streams: one buffer of the
 * largest tensor. The file is written as PATH.tmp and renamed to PATH when complete (a failure
 * leaves no PATH and removes PATH.tmp). Returns 0, or -1 + dx_fail naming PATH (or fill's error).
 * Duplicate names and empty names are refused (safetensors keys are unique). */
int dx_st_write(const char *path, const dx_st_spec *t, int n, int bf16, dx_st_fill_fn fill, void *ctx);

#endif
