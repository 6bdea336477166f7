/* docs.c - from suffix-array ranks and corpus positions back to documents. */
#include "common.h"

static int check_shard(const ig_index *ix, int shard, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (shard < 0 || shard >= ix->n_shards)
        return ig_fail(err, errlen, IG_ERR_ARG, "shard %d out of range (index has %d)", shard, ix->n_shards);
    return IG_OK;
}

/* Start offset of document d, clamped so corrupt offsets never point outside the tokens. */
static int64_t doc_start(const ig_shard *s, int64_t d) { return ig_doc_start(s, d); }

int ig_sa_position(const ig_index *ix, int shard, int64_t rank, int64_t *pos, char *err, size_t errlen) {
    int rc = check_shard(ix, shard, err, errlen);
    if (rc) return rc;
    const ig_shard *s = &ix->shards[shard];
    if (rank < 0 || rank >= s->num_tokens)
        return ig_fail(err, errlen, IG_ERR_ARG, "rank %lld out of range (shard has %lld suffixes)",
                       (long long)rank, (long long)s->num_tokens);
    *pos = ig_sa(s, rank);
    return IG_OK;
}

int ig_locate(const ig_index *ix, int shard, int64_t pos, int64_t *doc, int64_t *offset, char *err,
              size_t errlen) {
    int rc = check_shard(ix, shard, err, errlen);
    if (rc) return rc;
    const ig_shard *s = &ix->shards[shard];
    if (pos < 0 || pos >= s->total_len || s->num_docs == 0)
        return ig_fail(err, errlen, IG_ERR_ARG, "position %lld out of range (shard has %lld tokens)",
                       (long long)pos, (long long)s->total_len);
    int64_t a = 0, b = s->num_docs; /* last document whose start <= pos */
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if (doc_start(s, mid) <= pos) a = mid; else b = mid;
    }
    *doc = a;
    *offset = pos - doc_start(s, a);
    return IG_OK;
}

/* Shard s, first token position *a and length *n (separator dropped) of document doc. */
static int doc_tokens(const ig_index *ix, int shard, int64_t doc, const ig_shard **s, int64_t *a, int64_t *n,
                      char *err, size_t errlen) {
    int rc = check_shard(ix, shard, err, errlen);
    if (rc) return rc;
    *s = &ix->shards[shard];
    if (doc < 0 || doc >= (*s)->num_docs)
        return ig_fail(err, errlen, IG_ERR_ARG, "document %lld out of range (shard has %lld)",
                       (long long)doc, (long long)(*s)->num_docs);
    int64_t b = doc_start(*s, doc + 1) - 1;
    *a = doc_start(*s, doc);
    *n = b > *a ? b - *a : 0;
    return IG_OK;
}

int ig_get_doc(const ig_index *ix, int shard, int64_t doc, uint32_t *out, int64_t cap,
               int64_t *len_out, char *err, size_t errlen) {
    const ig_shard *s;
    int64_t a, n;
    int rc = doc_tokens(ix, shard, doc, &s, &a, &n, err, errlen);
    if (rc) return rc;
    *len_out = n;
    if (n > cap) return ig_fail(err, errlen, IG_ERR_CAPACITY, "document has %lld tokens", (long long)n);
    ig_will_read(&s->tok_map, s->tokens + a * ix->token_width, (size_t)n * (size_t)ix->token_width);
    for (int64_t i = 0; i < n; i++) out[i] = ig_tok(s, ix->token_width, a + i);
    return IG_OK;
}

int ig_doc_window(const ig_index *ix, int shard, int64_t doc, int64_t begin, int64_t end, uint32_t *out,
                  int64_t cap, int64_t *begin_out, int64_t *len_out, char *err, size_t errlen) {
    const ig_shard *s;
    int64_t a, n;
    int rc = doc_tokens(ix, shard, doc, &s, &a, &n, err, errlen);
    if (rc) return rc;
    if (!begin_out || !len_out || (cap > 0 && !out)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    if (begin < 0) begin = 0;
    if (end > n) end = n;
    if (begin > end) begin = end;
    *begin_out = begin;
    *len_out = end - begin;
    if (end - begin > cap) return ig_fail(err, errlen, IG_ERR_CAPACITY, "window has %lld tokens", (long long)(end - begin));
    ig_will_read(&s->tok_map, s->tokens + (a + begin) * ix->token_width, (size_t)(end - begin) * (size_t)ix->token_width);
    for (int64_t i = begin; i < end; i++) out[i - begin] = ig_tok(s, ix->token_width, a + i);
    return IG_OK;
}
