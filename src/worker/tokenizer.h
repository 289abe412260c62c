/* dissect tokenizer: decoding token ids to text with a SentencePiece model (Kudo & Richardson
 * 2018), through libsentencepiece when the build has it. */
#ifndef DX_TOKENIZER_H
#define DX_TOKENIZER_H

#include <stdint.h>

typedef struct dx_tokenizer dx_tokenizer;

/* Loads a SentencePiece model file. NULL + dx_fail naming the path (or saying the build lacks
 * SentencePiece). */
dx_tokenizer *dx_tokenizer_load(const char *path);
/* Vocabulary size of the model. */
int dx_tokenizer_vocab_size(const dx_tokenizer *t);
/* Decodes n ids to UTF-8 text (malloc'd; NULL + dx_fail on an id out of range). */
char *dx_tokenizer_decode(const dx_tokenizer *t, const int32_t *ids, int n);
void dx_tokenizer_free(dx_tokenizer *t);

#endif
