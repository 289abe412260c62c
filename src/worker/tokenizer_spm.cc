// SentencePiece-backed implementation of tokenizer.h.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "tokenizer.h"
#include "common/common.h"
}

struct dx_tokenizer {
    sentencepiece::SentencePieceProcessor sp;
};

extern "C" dx_tokenizer *dx_tokenizer_load(const char *path)
{
    dx_tokenizer *t = new dx_tokenizer;
    const auto status = t->sp.Load(path);
    if (!status.ok()) {
        dx_fail("%s: cannot load SentencePiece model: %s", path, status.ToString().c_str());
        delete t;
        return nullptr;
    }
    return t;
}

extern "C" int dx_tokenizer_vocab_size(const dx_tokenizer *t) { return t->sp.GetPieceSize(); }

extern "C" char *dx_tokenizer_decode(const dx_tokenizer *t, const int32_t *ids, int n)
{
    std::vector<int> v;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->sp.GetPieceSize()) {
            dx_fail("tokenizer: id %d at position %d outside the vocabulary of %d", ids[i], i,
                    t->sp.GetPieceSize());
            return nullptr;
        }
        v.push_back(ids[i]);
    }
    std::string text;
    const auto status = t->sp.Decode(v, &text);
    if (!status.ok()) {
        dx_fail("tokenizer: decode failed: %s", status.ToString().c_str());
        return nullptr;
    }
    return dx_strdup(text.c_str());
}

extern "C" void dx_tokenizer_free(dx_tokenizer *t) { delete t; }
