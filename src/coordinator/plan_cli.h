/* dissect plan: prints the memory plan (src/plan) of a config for a world of ranks. */
#ifndef DX_PLAN_CLI_H
#define DX_PLAN_CLI_H

#include "config/config.h"

/* Prints, for each of `world` ranks of config c (finalised for `world`), its predicted bytes of
 * parameters, gradients, optimizer states, activations and other buffers and the peak, then
 * whether the largest peak fits memory_gib GiB per rank (<= 0: the memory available now on the
 * config's device) and the largest micro-batch that would. Returns 0 or -1 + dx_fail. */
int dx_plan_print(const dx_config *c, int world, double memory_gib);

#endif
