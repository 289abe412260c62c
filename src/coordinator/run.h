/* dissect coordinator: the training run (rank 0 also coordinates; every rank works). */
#ifndef DX_RUN_H
#define DX_RUN_H

#include "comm/comm.h"
#include "config/config.h"

/* Agrees on an error over the group: rc is this rank's 0, -1 (it failed), or -2 (it stopped
 * because another rank failed; see dx_comm_agree). If any rank failed, the lowest rank that
 * failed itself prints "dissect: error: <its message>" to stderr, and every rank gets -1. */
int dx_agree_and_report(dx_comm *c, int rc);

/* Trains with config c (identical on every rank, already finalised for world->size ranks):
 * creates the workers, runs c->train_iters steps, evaluates every eval_interval steps, prints
 * one line per log_interval steps on rank 0, writes the trace file (rank 0), and prints a
 * decoded sample at the end. Collective. Returns 0, or -1 after an error was reported. */
int dx_run_train(const dx_config *c, dx_comm *world);

#endif
