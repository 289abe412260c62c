/* The check of the C unit tests: prints "ok   <what>" or "FAIL <what>" (printf format) and
 * counts passes and failures in n_pass / n_fail, which each test reports on its last line as
 * "N passed, M failed". One translation unit per test: everything here is static. */
#ifndef DX_TESTS_CHECK_H
#define DX_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#include "common/common.h"

static int n_pass, n_fail;

static void check(int ok, const char *fmt, ...) DX_PRINTF(2, 3);
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        n_pass++;
    else
        n_fail++;
}

#endif
