/* lm_coc.c - count-of-counts over a whole corpus, what discount estimates start from: for each
 * n, how many distinct n-grams occur k times, and how many have k distinct left tokens. One pass
 * over the suffix arrays merged in order, n-grams being the groups of suffixes that share their
 * first n tokens. Over a difference the removed index's suffixes join the merge and subtract, so
 * the counts are those of an index rebuilt without the removed documents.
 */
#include <stdlib.h>

#include "lm_internal.h"

/* Order of two suffixes by their first max_n tokens (the separator, the largest id, ends one). */
static int cmp_prefix(const ig_shard *a, int64_t p1, const ig_shard *b, int64_t p2, int w, uint32_t sep,
                      int64_t max_n) {
    for (int64_t k = 0; k < max_n; k++) {
        uint32_t x = ig_tok(a, w, p1 + k), y = ig_tok(b, w, p2 + k);
        if (x != y) return x < y ? -1 : 1;
        if (x == sep) return 0;
    }
    return 0;
}

/* Counters of the n-grams open at each depth j (n = j + 1). */
typedef struct {
    int64_t max_n, kmax;
    uint64_t *raw, *cont, *types; /* the outputs */
    int64_t *size;                /* net occurrences of the open n-gram */
    lm_tally *left;               /* its distinct left tokens */
    int neg;                      /* a closed n-gram had a negative net count */
} coc_state;

/* The n-gram open at depth j ends: count it (an n-gram whose occurrences were all removed is
   not one). */
static void flush(coc_state *c, int64_t j) {
    int64_t n = c->size[j], dl = (int64_t)c->left[j].n;
    if (n < 0) c->neg = 1;
    if (n > 0) {
        if (c->types) c->types[j]++;
        if (n <= c->kmax) c->raw[j * c->kmax + n - 1]++;
        if (dl >= 1 && dl <= c->kmax) c->cont[j * c->kmax + dl - 1]++;
    }
    c->size[j] = 0;
}

static int coc_run(const ig_src *x, int64_t max_n, int64_t kmax, uint64_t *raw, uint64_t *cont, uint64_t *types,
                   char *err, size_t errlen) {
    const ig_index *ix = x->P;
    int S = x->ns, w = ix->token_width;
    uint32_t sep = ix->separator;
    uint64_t slots = (uint64_t)ix->vocab_size + 1;
    memset(raw, 0, (size_t)(max_n * kmax) * sizeof *raw);
    memset(cont, 0, (size_t)(max_n * kmax) * sizeof *cont);
    if (types) memset(types, 0, (size_t)max_n * sizeof *types);
    uint32_t *stamp = calloc((size_t)(slots * (uint64_t)max_n), sizeof *stamp);
    int64_t *cnt = x->M ? calloc((size_t)(slots * (uint64_t)max_n), sizeof *cnt) : NULL;
    coc_state c = {max_n, kmax, raw, cont, types, calloc((size_t)max_n, sizeof(int64_t)),
                   calloc((size_t)max_n, sizeof(lm_tally)), 0};
    int64_t *cur = calloc((size_t)S, sizeof *cur);
    if (!stamp || (x->M && !cnt) || !c.size || !c.left || !cur) {
        free(stamp); free(cnt); free(c.size); free(c.left); free(cur);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    for (int64_t j = 0; j < max_n; j++)
        c.left[j] = (lm_tally){stamp + (size_t)j * slots, cnt ? cnt + (size_t)j * slots : NULL, 0, 0, 0};
    const ig_shard *prev = NULL;
    int64_t prev_p = 0, prev_avail = 0, open_max = 0;
    for (;;) {
        /* the next suffix in the merged order */
        int bs = -1;
        for (int s = 0; s < S; s++) {
            if (cur[s] >= ig_src_shard(x, s)->num_tokens) continue;
            if (bs < 0 || cmp_prefix(ig_src_shard(x, s), ig_sa(ig_src_shard(x, s), cur[s]), ig_src_shard(x, bs),
                                     ig_sa(ig_src_shard(x, bs), cur[bs]), w, sep, max_n) < 0)
                bs = s;
        }
        if (bs < 0) break;
        const ig_shard *sh = ig_src_shard(x, bs);
        int sign = bs < x->SP ? 1 : -1;
        int64_t p = ig_sa(sh, cur[bs]++);
        int64_t avail = 0;
        while (avail < max_n && ig_tok(sh, w, p + avail) != sep) avail++;
        int64_t lcp = 0;
        if (prev) {
            int64_t lim = avail < prev_avail ? avail : prev_avail;
            while (lcp < lim && ig_tok(sh, w, p + lcp) == ig_tok(prev, w, prev_p + lcp)) lcp++;
        }
        for (int64_t j = lcp; j < open_max; j++) flush(&c, j); /* n-grams longer than lcp end */
        uint32_t left = ig_tok(sh, w, p - 1);
        left = left >= ix->vocab_size ? ix->vocab_size : left; /* the separator (or a corrupt id) */
        for (int64_t j = 0; j < avail; j++) {
            if (j >= lcp) { /* a new n-gram (deeper than the one shared with the previous suffix) */
                c.left[j].gen = lm_next_gen(c.left[j].stamp, &c.left[j].gen, slots);
                c.left[j].n = 0;
            }
            c.size[j] += sign;
            tally_add(&c.left[j], left, sign);
        }
        open_max = avail;
        prev = sh;
        prev_p = p;
        prev_avail = avail;
    }
    for (int64_t j = 0; j < open_max; j++) flush(&c, j);
    free(stamp); free(cnt); free(c.size); free(c.left); free(cur);
    return c.neg ? ig_diff_not_subset(err, errlen) : IG_OK;
}

static int coc_checked(const ig_src *x, int64_t max_n, int64_t kmax, uint64_t *raw, uint64_t *cont,
                       uint64_t *types, char *err, size_t errlen) {
    const ig_index *ix = x->P;
    if (ig_index_has_official(ix) || (x->M && ig_index_has_official(x->M)))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s needs our suffix order, which an official infini-gram index read in place lacks: open it with a sidecar (InfiniGramIndex.open(path, cache_dir=SIDE_DIR), or infinigram-hf prepare PATH --out SIDE_DIR), or convert it (infinigram-hf convert)", "count-of-counts");
    if (max_n < 1 || max_n > 4096) return ig_fail(err, errlen, IG_ERR_ARG, "max_n must be in 1..4096, got %lld", (long long)max_n);
    if (kmax < 1) return ig_fail(err, errlen, IG_ERR_ARG, "kmax must be positive, got %lld", (long long)kmax);
    if (!raw || !cont) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    if (((uint64_t)ix->vocab_size + 1) * (uint64_t)max_n > ((uint64_t)1 << 31))
        return ig_fail(err, errlen, IG_ERR_LIMIT, "vocab_size * max_n too large for count-of-counts");
    return coc_run(x, max_n, kmax, raw, cont, types, err, errlen);
}

int ig_lm_count_of_counts(const ig_index *ix, int64_t max_n, int64_t kmax, uint64_t *raw,
                          uint64_t *cont, uint64_t *types, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    ig_src x = ig_src_of(ix, NULL);
    return coc_checked(&x, max_n, kmax, raw, cont, types, err, errlen);
}

int ig_diff_lm_count_of_counts(const ig_index *plus, const ig_index *minus, int64_t max_n, int64_t kmax,
                               uint64_t *raw, uint64_t *cont, uint64_t *types, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(plus, minus, err, errlen);
    if (rc) return rc;
    ig_src x = ig_src_of(plus, minus);
    return coc_checked(&x, max_n, kmax, raw, cont, types, err, errlen);
}
