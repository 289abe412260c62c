/* tokenizer.h for builds without libsentencepiece: loading fails with a clear message, and
 * callers print token ids instead of text. */
#include "tokenizer.h"

#include <stddef.h>

#include "common/common.h"

struct dx_tokenizer {
    int unused;
};

dx_tokenizer *dx_tokenizer_load(const char *path)
{
    dx_fail("%s: this build has no SentencePiece library (meson -Dsentencepiece=enabled needs libsentencepiece-dev)", path);
    return NULL;
}

int dx_tokenizer_vocab_size(const dx_tokenizer *t)
{
    (void)t;
    return 0;
}

char *dx_tokenizer_decode(const dx_tokenizer *t, const int32_t *ids, int n)
{
    (void)t;
    (void)ids;
    (void)n;
    dx_fail("tokenizer: not available in this build");
    return NULL;
}

void dx_tokenizer_free(dx_tokenizer *t) { (void)t; }
