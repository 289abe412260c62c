/* dissect report: reads a trace file (layout: trace.h) and prints where the time went.
 *
 *   dissect report RUN.h5 [--steps A:B] [--top N] [--chrome OUT.json] [--peak-tflops P]
 *
 * Sections: run summary (with the PP x DP x TP grid, sequence parallelism, pipeline schedule,
 * model chunks per rank, micro-batches per step, tokens/s, model FLOPs per token, model TFLOP/s
 * per rank and MFU), step breakdown (forward / backward / optimizer /
 * exposed communication / idle, the shape of Table V of Zhang et al. 2023, "Dissecting the Runtime
 * Performance of the Training, Fine-tuning, and Inference of LLMs"), pipeline stages (PP > 1), top
 * operators, exposed communication, tensor-parallel collectives per layer (TP > 1), per-layer
 * modules, ranks (straggler; with TP or PP each rank's grid coordinates), idle. With /events the
 * numbers come from the op events (or, when the trace has no kernel events -- trace level module
 * -- from the module spans and the collectives); without, from /steps' per-rank times.
 *
 * Definitions, for each rank and step (events clipped to the step span, the event with op "step"):
 *   forward / backward / optimizer: summed durations of the compute- and host-stream events of that
 *       phase (ops other than module / step, collectives excluded);
 *   exposed communication: time covered by collectives (all_reduce, reduce_scatter, all_gather,
 *       broadcast, send, recv) and not by any compute-stream non-collective op;
 *   idle: the step span minus the union of all ops (module and step spans excluded).
 * Pipeline table (one row per pp stage; ms per step, mean over the stage's ranks and the steps):
 *   step = the step span; busy = compute-stream, non-collective time in the forward and backward
 *       phases; recv wait = summed pipeline recv spans (all phases: the wait for an input or an
 *       output gradient, bubble plus transfer); send = summed pipeline send spans; sent MiB =
 *       bytes of the stage's sends per step (all its ranks); bubble = recv wait in the forward and
 *       backward phases / step span (sums over the stage's (step, rank) pairs), next to
 *       /metadata pipeline_bubble_theory. The last lines give every stage's bytes sent per step.
 * Tensor-parallel table: all_reduce, all_gather and reduce_scatter of the embedding, attention,
 *   mlp, rmsnorm and lm_head modules in the forward and backward phases (not the optimizer's, the
 *   loss's, a parameter group's or the pipeline's), per layer (layer -1: one row per module, named
 *   by it): calls and ms per step, mean over the ranks that recorded the row; exposed ms = the
 *   part not covered by compute-stream ops. The collectives are those of the TP group (/events
 *   field group); traces before 2026-11-29 lack the field, and there the embedding and lm_head
 *   rows also hold the DP gradient reductions of those modules' parameter groups.
 * The default step range is every step but the first (warm-up) when there are two or more.
 * Model FLOPs (the summary): per token 6 N + 12 L D T (PaLM, Chowdhery et al. 2022, appendix B;
 *   Megatron-LM's MFU count): N = parameters without the token embedding (LM head included), L
 *   layers, D hidden size, T sequence length, from /metadata config_json; recomputation is not
 *   counted. Model TFLOP/s per rank = tokens/s x FLOPs per token / world size / 1e12 over the
 *   step range; MFU = that / P, P a rank's peak in TFLOP/s (--peak-tflops, a positive number;
 *   e.g. 989 for an H100 SXM in dense bf16); without --peak-tflops, MFU = tokens/s x FLOPs per
 *   token / the sum of /metadata/device_peak_tflops over the ranks (dx_peak_tflops of each rank's
 *   GPU, recorded since 2026-11-26), shown as "-" when the trace has none or a rank's device has no
 *   known peak (every CPU). FLOPs are shown as "-" with the reason for a trace without a
 *   usable config (older or newer writer) and for LoRA runs (frozen weights get no weight
 *   gradient, so 6 N does not hold); never an error.
 *
 * The file is validated before anything is printed: a file that is not HDF5, not a dissect trace
 * (root attribute format != "dissect-trace"), truncated or unreadable, with a /metadata grid
 * that does not fit its world size, with /steps or /events extents past the rows the file stores
 * (a file cut short or forged), or with a per-rank /steps field that is not an array of
 * world_size values gives one error line naming it and a non-zero return. Events with unknown
 * enum values, end < start or times past +-2^61 ns are skipped (and counted in the summary),
 * events of ranks outside the world left out, in the tables and in the Chrome file alike.
 * Traces written before the process grid (no grid attributes in /metadata, no pp / dp / tp fields
 * in /events) are read as a DP-only job: TP = PP = 1, DP = world, schedule "none", rank r at
 * (pp 0, dp r, tp 0).
 *
 * --chrome writes OUT.json.tmp and renames it only on success: Chrome trace-event JSON (Perfetto,
 * chrome://tracing; ts / dur in microseconds) with one process per rank (pid = rank, sorted by
 * rank; named "rank R (pp P, dp D, tp T)" unless the job is DP only, then "rank R"), one thread
 * per stream (tid = the stream's enum value) and, with PP > 1, a thread "micro-batches" (tid 3,
 * shown first) with one span "F<k>" / "B<k>" per run of consecutive compute-stream events of
 * micro-batch k in the forward / backward, so the schedule (1F1B's staircase) is visible.
 * Needs no MPI (serial HDF5 access).
 */
#ifndef DX_REPORT_H
#define DX_REPORT_H

/* argv[0] is "report". Returns the process exit status (0 ok, 1 error, 2 usage); errors are
 * printed to stderr as one "dissect: error: ..." line. */
int dx_report_main(int argc, char **argv);

#endif
