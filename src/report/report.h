/* dissect report: reads a trace file (layout: trace.h) and prints where the time went.
 *
 *   dissect report RUN.h5 [--steps A:B] [--top N] [--chrome OUT.json]
 *
 * Sections: run summary, step breakdown (forward / backward / optimizer / exposed communication /
 * idle, the shape of Table V of Zhang et al. 2023, "Dissecting the Runtime Performance of the
 * Training, Fine-tuning, and Inference of LLMs"), top operators, per-layer modules, ranks
 * (straggler), idle. With /events the numbers come from the op events (or the module spans when
 * the trace has no op events); without, from /steps' per-rank times.
 *
 * Definitions, for each rank and step (events clipped to the step span, the event with op "step"):
 *   forward / backward / optimizer: summed durations of the compute- and host-stream events of that
 *       phase (ops other than module / step, collectives excluded);
 *   exposed communication: time covered by collectives (all_reduce, reduce_scatter, all_gather,
 *       broadcast, send, recv) and not by any compute-stream non-collective op;
 *   idle: the step span minus the union of all ops (module and step spans excluded).
 * The default step range is every step but the first (warm-up) when there are two or more.
 *
 * The file is validated before anything is printed: a file that is not HDF5, not a dissect trace
 * (root attribute format != "dissect-trace"), truncated or unreadable gives one error line naming
 * it and a non-zero return. --chrome writes OUT.json.tmp and renames it only on success.
 * Needs no MPI (serial HDF5 access).
 */
#ifndef DX_REPORT_H
#define DX_REPORT_H

/* argv[0] is "report". Returns the process exit status (0 ok, 1 error, 2 usage); errors are
 * printed to stderr as one "dissect: error: ..." line. */
int dx_report_main(int argc, char **argv);

#endif
