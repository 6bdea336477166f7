/* draft.c - draft continuations for speculative decoding (see infinigram_draft.h).
 *
 * Every rule reads its corpus through an ig_src (source.h): an index, or an index minus an
 * index of a subset of its documents (the ig_diff_draft_* calls). Over a difference the ranges
 * of a state hold the index's shards then the removed index's, every count is the net count
 * (infinigram_diff.h), and a draft is the one an index rebuilt without the removed documents
 * would give; the rules themselves are written once.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "state_internal.h"
#include "parallel.h"
#include "source.h"

typedef struct {
    uint32_t tok;
    uint64_t cnt;
} tc;

static int by_tok(const void *a, const void *b) {
    uint32_t x = ((const tc *)a)->tok, y = ((const tc *)b)->tok;
    return x < y ? -1 : x > y;
}

/* Most frequent first; ties: smaller id (a stable, documented order). */
static int by_cnt_desc(const void *a, const void *b) {
    const tc *x = a, *y = b;
    if (x->cnt != y->cnt) return x->cnt > y->cnt ? -1 : 1;
    return x->tok < y->tok ? -1 : x->tok > y->tok;
}

/* Sort by token and sum the counts of equal tokens; returns the distinct count. */
static int64_t merge_equal(tc *v, int64_t n) {
    if (n <= 1) return n;
    qsort(v, (size_t)n, sizeof *v, by_tok);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m > 0 && v[m - 1].tok == v[i].tok) v[m - 1].cnt += v[i].cnt;
        else v[m++] = v[i];
    }
    return m;
}

/* ---------------------------------------------------------------- the corpus drafted from (source.h) */

static int64_t src_state_size(const ig_src *x) { return 2 + 2 * (int64_t)x->ns; }

/* The source of a call over a difference, once the pair is checked (the ig_diff_* entry points). */
static int diff_src(const ig_index *plus, const ig_index *minus, ig_src *x, char *err, size_t errlen) {
    int rc = ig_diff_check_pair(plus, minus, err, errlen);
    if (!rc) *x = ig_src_of(plus, minus);
    return rc;
}

static void src_store(const ig_src *x, int64_t suffix_len, const ig_range *rs, int64_t *state) {
    if (!x->M) {
        ig_state_store(x->P, suffix_len, rs, state);
        return;
    }
    for (int i = 0; i < x->ns; i++) {
        state[2 + 2 * i] = rs[i].lo;
        state[3 + 2 * i] = rs[i].hi;
    }
    state[0] = suffix_len;
    state[1] = ig_src_total(x, rs);
}

/* ig_state_begin over an ig_src: scratch of ns ranges, the state (state_len values) checked and
   loaded into sc->a. */
static int64_t src_begin(const ig_src *x, const int64_t *state, int64_t state_len, ig_scratch *sc, char *err,
                         size_t errlen) {
    if (!x->M) return ig_state_begin(x->P, state, state_len, sc, err, errlen);
    int rc = ig_check_state_len(state_len, src_state_size(x), "state", "difference", err, errlen);
    if (!rc) rc = ig_scratch_init(sc, x->ns, err, errlen);
    if (rc) return rc;
    if (!state) {
        ig_scratch_free(sc);
        return ig_fail(err, errlen, IG_ERR_ARG, "state: NULL state");
    }
    for (int i = 0; i < x->ns; i++) {
        int64_t lo = state[2 + 2 * i], hi = state[3 + 2 * i];
        if (lo < 0 || hi < lo || hi > ig_src_shard(x, i)->num_tokens) {
            ig_scratch_free(sc);
            return ig_fail(err, errlen, IG_ERR_ARG, "state: range [%lld, %lld) of shard %d is not a state of this "
                           "difference", (long long)lo, (long long)hi, i);
        }
        sc->a[i] = (ig_range){lo, hi};
    }
    int64_t c = ig_src_total(x, sc->a);
    if (state[0] < 0 || state[0] > IG_MAX_SHARD_TOKENS || c < 0 || c != state[1] || (c == 0 && state[0] > 0)) {
        ig_scratch_free(sc);
        return ig_fail(err, errlen, IG_ERR_ARG, "state: suffix_len %lld / count %lld are not a state of this difference",
                       (long long)state[0], (long long)state[1]);
    }
    return state[0];
}

/* ig_state_step over an ig_src: *cur (length l, ctx[0..len-1)) becomes the state of ctx[0..len).
   Over a difference: one narrowing while the net match grows, else the back-off of dense
   scoring (diff.c): the long LCE back-off, then the net search of at most IG_BACKOFF_SHORT. */
static int64_t src_step(ig_src *x, const uint32_t *ctx, int64_t len, int64_t l, ig_range **cur, ig_range **next,
                        ig_range *tmp, ig_lce_memo **memo) {
    if (!x->M) return ig_state_step(x->P, ctx, len, l, cur, next, tmp, memo);
    if (ig_src_extend(x, *cur, l, ctx[len - 1], *next) > 0) {
        ig_range *t = *cur;
        *cur = *next;
        *next = t;
        return l + 1;
    }
    int neg = 0, SP = x->SP;
    int64_t k = -1;
    if (l > IG_BACKOFF_SHORT) {
        k = ig_backoff_long(x->P, x->M, ctx, len, l, IG_BACKOFF_SHORT, *cur, *cur + SP, tmp, tmp + SP, memo, &neg);
        if (k == -1) l = IG_BACKOFF_SHORT;
    }
    if (k < 0) k = ig_net_longest(x->P, x->M, ctx, len, l, *cur, *cur + SP, tmp, tmp + SP, &neg);
    if (neg) x->fail = IG_ERR_ARG;
    return k;
}

/* ---------------------------------------------------------------- candidates over a difference */

/* Ranks of r (sharing a prefix of length d) whose token at depth d is below t. */
static int64_t below(const ig_shard *s, int w, ig_range r, int64_t d, uint64_t t) {
    int64_t a = r.lo, b = r.hi;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if ((uint64_t)tok_rank(s, w, mid, d) < t) a = mid + 1;
        else b = mid;
    }
    return a - r.lo;
}

/* Net occurrences whose next token is below t: non-decreasing in t. */
static int64_t net_below(const ig_src *x, const ig_range *rs, int64_t d, uint64_t t) {
    int64_t c = 0;
    for (int i = 0; i < x->ns; i++)
        if (rs[i].hi > rs[i].lo) c += (i < x->SP ? 1 : -1) * below(ig_src_shard(x, i), x->P->token_width, rs[i], d, t);
    return c;
}

/* The next token at net rank r of the remaining occurrences (sorted by suffix, so by next
   token): the largest t with net_below(t) <= r, galloped up from `from` (the answer for a
   smaller rank), as the ranks sampled come in order. */
static uint32_t net_token_at(const ig_src *x, const ig_range *rs, int64_t d, int64_t r, uint32_t from) {
    uint64_t ok = from, bad = (uint64_t)x->P->separator + 1, step = 1;
    while (ok + step < bad) {
        if (net_below(x, rs, d, ok + step) > r) {
            bad = ok + step;
            break;
        }
        ok += step;
        step *= 2;
    }
    while (bad - ok > 1) {
        uint64_t mid = ok + (bad - ok) / 2;
        if (net_below(x, rs, d, mid) <= r) ok = mid;
        else bad = mid;
    }
    return (uint32_t)ok;
}

/* Distinct next tokens of shards [from, to) of rs, summed by token, into (toks, cnts): their
   number, -1 when out of memory. room: entries available. */
static int64_t walk_shards(const ig_src *x, const ig_range *rs, int64_t d, int from, int to, uint32_t *toks,
                           uint64_t *cnts, int64_t room) {
    int64_t n = 0;
    for (int i = from; i < to; i++) {
        if (rs[i].hi <= rs[i].lo) continue;
        int64_t m = ig_walk_range(ig_src_shard(x, i), x->P->token_width, rs[i], d, toks + n, cnts + n, room - n);
        n += m < room - n ? m : room - n; /* (room holds every distinct token of every shard) */
    }
    return ig_sort_merge_tc(toks, cnts, n);
}

/* Entries enough for the distinct next tokens of shards [from, to) of rs. */
static int64_t walk_room(const ig_src *x, const ig_range *rs, int from, int to) {
    int64_t room = 0, per = (int64_t)x->P->vocab_size + 1;
    for (int i = from; i < to; i++) {
        int64_t size = rs[i].hi - rs[i].lo;
        room += size < per ? (size > 0 ? size : 0) : per;
    }
    return room > 0 ? room : 1;
}

/* The whole net next-token distribution, most frequent first (ties: smaller id), up to cap. */
static int64_t exact_net(ig_src *x, const ig_range *rs, int64_t d, tc *out, int64_t cap) {
    int64_t rp = walk_room(x, rs, 0, x->SP), rm = walk_room(x, rs, x->SP, x->ns);
    uint32_t *toks = malloc((size_t)(rp + rm) * sizeof *toks);
    uint64_t *cnts = malloc((size_t)(rp + rm) * sizeof *cnts);
    tc *all = malloc((size_t)rp * sizeof *all);
    int64_t np = -1, nm = -1, n = 0;
    if (toks && cnts && all) {
        np = walk_shards(x, rs, d, 0, x->SP, toks, cnts, rp);
        nm = walk_shards(x, rs, d, x->SP, x->ns, toks + rp, cnts + rp, rm);
    }
    if (np < 0 || nm < 0) {
        x->fail = IG_ERR_NOMEM;
    } else {
        const uint32_t *mt = toks + rp;
        const uint64_t *mc = cnts + rp;
        int64_t j = 0;
        for (int64_t i = 0; i < np && !x->fail; i++) {
            uint64_t c = cnts[i];
            if (j < nm && mt[j] < toks[i]) x->fail = IG_ERR_ARG; /* removed has a continuation the index lacks */
            else if (j < nm && mt[j] == toks[i]) {
                if (mc[j] > c) x->fail = IG_ERR_ARG;
                else c -= mc[j++];
            }
            if (c && !x->fail) all[n++] = (tc){toks[i], c};
        }
        if (j < nm) x->fail = IG_ERR_ARG;
        if (x->fail) n = 0;
        qsort(all, (size_t)n, sizeof *all, by_cnt_desc);
        if (n > cap) n = cap;
        memcpy(out, all, (size_t)n * sizeof *out);
    }
    free(toks);
    free(cnts);
    free(all);
    return n;
}

/* candidates() over a difference: what one shard holding the remaining documents would give.
   Up to IG_DRAFT_EXACT_MAX net occurrences, the exact distribution; above, the tokens at
   IG_DRAFT_SAMPLES evenly spaced net ranks, the best counted exactly. */
static int64_t candidates_net(ig_src *x, const ig_range *rs, int64_t d, tc *out, int64_t cap, uint64_t *total,
                              ig_range *tmp) {
    int64_t c = ig_src_total(x, rs);
    if (c < 0) {
        x->fail = IG_ERR_ARG;
        c = 0;
    }
    *total = (uint64_t)c;
    if (c == 0 || cap <= 0) return 0;
    if (c <= IG_DRAFT_EXACT_MAX) return exact_net(x, rs, d, out, cap);
    tc hit[IG_DRAFT_SAMPLES];
    uint32_t t = 0;
    for (int64_t j = 0; j < IG_DRAFT_SAMPLES; j++) {
        int64_t r = (int64_t)(((double)j + 0.5) * (double)c / (double)IG_DRAFT_SAMPLES);
        t = net_token_at(x, rs, d, r, t);
        hit[j] = (tc){t, 1};
    }
    int64_t h = merge_equal(hit, IG_DRAFT_SAMPLES);
    qsort(hit, (size_t)h, sizeof *hit, by_cnt_desc);
    int64_t want = cap + 2 < h ? cap + 2 : h;
    for (int64_t j = 0; j < want; j++) hit[j].cnt = (uint64_t)ig_src_extend(x, rs, d, hit[j].tok, tmp);
    qsort(hit, (size_t)want, sizeof *hit, by_cnt_desc);
    int64_t n = want < cap ? want : cap;
    memcpy(out, hit, (size_t)n * sizeof *out);
    return n;
}

/* Candidate next tokens at depth d over the ranges rs, most frequent first, exact counts;
   writes up to cap. Exact list when the context is small, sampled candidates otherwise. */
static int64_t candidates(ig_src *x, const ig_range *rs, int64_t d, tc *out, int64_t cap, uint64_t *total,
                          ig_range *tmp) {
    if (x->M) return candidates_net(x, rs, d, out, cap, total, tmp);
    const ig_index *ix = x->P;
    int w = ix->token_width;
    uint64_t c = 0;
    for (int i = 0; i < ix->n_shards; i++) c += (uint64_t)(rs[i].hi > rs[i].lo ? rs[i].hi - rs[i].lo : 0);
    *total = c;
    if (c == 0 || cap <= 0) return 0;
    int64_t n = 0;
    if (c <= IG_DRAFT_EXACT_MAX) {
        tc all[IG_DRAFT_EXACT_MAX];
        uint32_t toks[IG_DRAFT_EXACT_MAX];
        uint64_t cnts[IG_DRAFT_EXACT_MAX];
        for (int i = 0; i < ix->n_shards; i++) {
            if (rs[i].hi <= rs[i].lo) continue;
            int64_t room = IG_DRAFT_EXACT_MAX - n;
            int64_t m = ig_walk_range(&ix->shards[i], w, rs[i], d, toks, cnts, room);
            if (m > room) m = room; /* impossible for a valid index: at most one entry per occurrence */
            for (int64_t j = 0; j < m; j++) all[n + j] = (tc){toks[j], cnts[j]};
            n += m;
        }
        if (ix->n_shards > 1) n = merge_equal(all, n);
        qsort(all, (size_t)n, sizeof *all, by_cnt_desc);
        if (n > cap) n = cap;
        memcpy(out, all, (size_t)n * sizeof *out);
        return n;
    }
    /* Large context: evenly spaced ranks of every shard, in proportion to its share. */
    tc hit[IG_DRAFT_SAMPLES + 64];
    int64_t h = 0;
    for (int i = 0; i < ix->n_shards && h < IG_DRAFT_SAMPLES + 64; i++) {
        int64_t size = rs[i].hi - rs[i].lo;
        if (size <= 0) continue;
        int64_t s = (int64_t)((double)IG_DRAFT_SAMPLES * (double)size / (double)c + 0.5);
        if (s < 1) s = 1;
        if (s > IG_DRAFT_SAMPLES + 64 - h) s = IG_DRAFT_SAMPLES + 64 - h;
        for (int64_t j = 0; j < s; j++) {
            int64_t r = rs[i].lo + (int64_t)(((double)j + 0.5) * (double)size / (double)s);
            hit[h++] = (tc){tok_rank(&ix->shards[i], w, r, d), 1};
        }
    }
    h = merge_equal(hit, h);
    qsort(hit, (size_t)h, sizeof *hit, by_cnt_desc);
    /* Count the best sampled candidates exactly (a few more than asked, as sampling only
       approximates their order). */
    int64_t want = cap + 2 < h ? cap + 2 : h;
    for (int64_t j = 0; j < want; j++) hit[j].cnt = ig_extend_ranges(ix, rs, d, hit[j].tok, tmp);
    qsort(hit, (size_t)want, sizeof *hit, by_cnt_desc);
    n = want < cap ? want : cap;
    memcpy(out, hit, (size_t)n * sizeof *out);
    return n;
}

/* Thresholds of a greedy chain (ig_draft_chain's arguments, ig_draft_params' fields). */
typedef struct {
    uint64_t min_count;
    double min_share, min_joint;
    int64_t eos_id;
} chain_rule;

/* The greedy ∞-gram chain from the ranges cur of a matched suffix of length l (l > 0 to draft
   anything), at most cap tokens into tok32 or tok64 (whichever is not NULL); counts/totals may
   be NULL. cur and next (as many ranges) are scratch afterwards, tmp too. Returns the length. */
static int64_t greedy_chain(ig_src *x, ig_range *cur, ig_range *next, ig_range *tmp, int64_t l, int64_t cap,
                            const chain_rule *rule, uint32_t *tok32, int64_t *tok64, uint64_t *counts,
                            uint64_t *totals) {
    double joint = 1.0;
    int64_t n = 0;
    while (l > 0 && n < cap) {
        tc best;
        uint64_t total;
        if (candidates(x, cur, l, &best, 1, &total, tmp) < 1) break;
        double share = (double)best.cnt / (double)total;
        if (best.cnt < rule->min_count || share < rule->min_share || joint * share < rule->min_joint) break;
        int ends = best.tok == x->P->separator; /* the document ends here: drafted as eos_id, if any */
        if (ends && rule->eos_id < 0) break;
        int64_t t = ends ? rule->eos_id : (int64_t)best.tok;
        if (tok32) tok32[n] = (uint32_t)t;
        else tok64[n] = t;
        if (counts) counts[n] = best.cnt;
        if (totals) totals[n] = total;
        n++;
        if (ends) break;
        joint *= share;
        ig_src_extend(x, cur, l, best.tok, next);
        ig_range *sw = cur; cur = next; next = sw;
        l++;
    }
    return n;
}

static int draft_chain(ig_src *x, const int64_t *state, int64_t state_len, int64_t max_tokens, uint64_t min_count,
                       double min_share, double min_joint, int64_t eos_id, uint32_t *tokens, uint64_t *counts,
                       uint64_t *totals, int64_t *n_out, char *err, size_t errlen) {
    if (!n_out || (max_tokens > 0 && !tokens)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    if (max_tokens < 0) return ig_fail(err, errlen, IG_ERR_ARG, "max_tokens must be >= 0, got %lld", (long long)max_tokens);
    *n_out = 0;
    ig_scratch sc;
    int64_t l = src_begin(x, state, state_len, &sc, err, errlen);
    if (l < 0) return (int)l;
    chain_rule rule = {min_count, min_share, min_joint, eos_id};
    int64_t n = greedy_chain(x, sc.a, sc.b, sc.c, l, max_tokens, &rule, tokens, NULL, counts, totals);
    ig_scratch_free(&sc);
    int rc = ig_src_failed(x, err, errlen);
    if (!rc) *n_out = n;
    return rc;
}

int ig_draft_chain(const ig_index *ix, const int64_t *state, int64_t state_len, int64_t max_tokens,
                   uint64_t min_count, double min_share, double min_joint, int64_t eos_id, uint32_t *tokens,
                   uint64_t *counts, uint64_t *totals, int64_t *n_out, char *err, size_t errlen) {
    ig_src x = ig_src_of(ix, NULL);
    return draft_chain(&x, state, state_len, max_tokens, min_count, min_share, min_joint, eos_id, tokens, counts,
                       totals, n_out, err, errlen);
}

int ig_diff_draft_chain(const ig_index *plus, const ig_index *minus, const int64_t *state, int64_t state_len,
                        int64_t max_tokens, uint64_t min_count, double min_share, double min_joint, int64_t eos_id,
                        uint32_t *tokens, uint64_t *counts, uint64_t *totals, int64_t *n_out, char *err,
                        size_t errlen) {
    ig_src x;
    int rc = diff_src(plus, minus, &x, err, errlen);
    return rc ? rc : draft_chain(&x, state, state_len, max_tokens, min_count, min_share, min_joint, eos_id, tokens,
                                 counts, totals, n_out, err, errlen);
}

static int draft_children(ig_src *x, const int64_t *state, int64_t state_len, int64_t k, uint32_t *tokens,
                          uint64_t *counts, int64_t *child_states, uint64_t *total, int64_t *n_out, char *err,
                          size_t errlen) {
    if (!n_out || !total || (k > 0 && (!tokens || !counts))) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    if (k < 0) return ig_fail(err, errlen, IG_ERR_ARG, "k must be >= 0, got %lld", (long long)k);
    *n_out = 0;
    *total = 0;
    ig_scratch sc;
    int64_t l = src_begin(x, state, state_len, &sc, err, errlen);
    if (l < 0) return (int)l;
    tc *best = k > 0 ? malloc((size_t)k * sizeof *best) : NULL;
    if (k > 0 && !best) {
        ig_scratch_free(&sc);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    int64_t n = candidates(x, sc.a, l, best, k, total, sc.c);
    int64_t size = src_state_size(x);
    for (int64_t j = 0; j < n; j++) {
        tokens[j] = best[j].tok;
        counts[j] = best[j].cnt;
        if (!child_states) continue;
        int64_t *cs = child_states + j * size;
        if (best[j].tok == x->P->separator) {
            memcpy(cs, state, (size_t)size * sizeof *cs);
            continue;
        }
        ig_src_extend(x, sc.a, l, best[j].tok, sc.b);
        src_store(x, l + 1, sc.b, cs);
    }
    free(best);
    ig_scratch_free(&sc);
    int rc = ig_src_failed(x, err, errlen);
    if (rc) *total = 0;
    else *n_out = n;
    return rc;
}

int ig_draft_children(const ig_index *ix, const int64_t *state, int64_t state_len, int64_t k, uint32_t *tokens,
                      uint64_t *counts, int64_t *child_states, uint64_t *total, int64_t *n_out, char *err,
                      size_t errlen) {
    ig_src x = ig_src_of(ix, NULL);
    return draft_children(&x, state, state_len, k, tokens, counts, child_states, total, n_out, err, errlen);
}

int ig_diff_draft_children(const ig_index *plus, const ig_index *minus, const int64_t *state, int64_t state_len,
                           int64_t k, uint32_t *tokens, uint64_t *counts, int64_t *child_states, uint64_t *total,
                           int64_t *n_out, char *err, size_t errlen) {
    ig_src x;
    int rc = diff_src(plus, minus, &x, err, errlen);
    return rc ? rc : draft_children(&x, state, state_len, k, tokens, counts, child_states, total, n_out, err, errlen);
}

int64_t ig_draft_lookup(const int64_t *seq, int64_t n, int64_t min_len, int64_t max_len, int64_t max_tokens,
                        int64_t *out, int64_t *n_out, int64_t *pos_out) {
    if (n_out) *n_out = 0;
    if (pos_out) *pos_out = -1;
    if (!seq || n < 2 || max_len < 1 || max_len < min_len) return 0;
    if (min_len < 1) min_len = 1;
    int64_t best = 0, at = -1;
    const int64_t last = seq[n - 1];
    for (int64_t j = n - 2; j >= 0 && best < max_len; j--) { /* most recent first: ties keep it */
        if (seq[j] != last) continue;
        int64_t k = 1;
        while (k < max_len && j - k >= 0 && seq[j - k] == seq[n - 1 - k]) k++;
        if (k > best) {
            best = k;
            at = j;
        }
    }
    if (best < min_len) return 0;
    int64_t m = 0;
    if (out) {
        /* out[i] = (seq + out)[at + 1 + i]: past the end of seq, copy what was just drafted. */
        for (; m < max_tokens; m++) {
            int64_t src = at + 1 + m;
            out[m] = src < n ? seq[src] : out[src - n];
        }
    }
    if (n_out) *n_out = m;
    if (pos_out) *pos_out = at;
    return best;
}

int ig_draft_advance(const ig_index *ix, const int64_t *state, int64_t state_len, const uint32_t *ctx, int64_t len,
                     int64_t n_new, int64_t *out, char *err, size_t errlen) {
    if (!out || (len > 0 && !ctx)) return ig_fail(err, errlen, IG_ERR_ARG, "NULL context or output");
    if (n_new < 0 || n_new > len)
        return ig_fail(err, errlen, IG_ERR_ARG, "n_new must be in [0, %lld], got %lld", (long long)len, (long long)n_new);
    ig_scratch sc;
    int64_t l = ig_state_begin(ix, state, state_len, &sc, err, errlen);
    if (l < 0) return (int)l;
    int rc = IG_OK;
    if (len - n_new < l)
        rc = ig_fail(err, errlen, IG_ERR_ARG, "the context given has %lld tokens before the new ones; the state's "
                     "matched suffix needs %lld", (long long)(len - n_new), (long long)l);
    else rc = ig_check_ids(ix, ctx + len - n_new - l, l + n_new, "context", err, errlen);
    if (rc) {
        ig_scratch_free(&sc);
        return rc;
    }
    ig_range *cur = sc.a, *next = sc.b;
    ig_lce_memo *memo = NULL;
    for (int64_t p = len - n_new; p < len; p++) /* ctx[0..p) has state (l, cur); add ctx[p] */
        l = ig_state_step(ix, ctx, p + 1, l, &cur, &next, sc.c, &memo);
    ig_lce_memo_free(memo);
    ig_state_store(ix, l, cur, out);
    ig_scratch_free(&sc);
    return IG_OK;
}

/* ---------------------------------------------------------------- one decoding step */

static int64_t draft_cap(const ig_draft_params *p, int64_t match, int64_t limit) {
    int64_t cap = p->max_draft;
    if (p->match_ratio > 0) {
        double c = ceil(p->match_ratio * (double)match);
        if (c < (double)cap) cap = (int64_t)c;
    }
    return cap < limit ? cap : limit;
}

/* A document boundary in a decoding loop's sequence: eos_id, or an id the index cannot hold. */
static int is_boundary(const ig_index *ix, int64_t t, int64_t eos_id) {
    return t < 0 || t >= (int64_t)ix->vocab_size || t == eos_id;
}

/* Where the ∞-gram context of seq[0..to) starts when only seq[from..to) is looked at: after its
   last document boundary, else at from. */
static int64_t context_start(const ig_index *ix, const int64_t *seq, int64_t from, int64_t to, int64_t eos_id) {
    for (int64_t i = to; i > from; i--)
        if (is_boundary(ix, seq[i - 1], eos_id)) return i;
    return from;
}

/* Advance the state (suffix length *l, ranges *cur; *next: scratch) of seq[0..n - n_new) through
   the new tokens: narrow while the match grows, back off otherwise; the context starts anew
   after a document boundary. */
static int advance(ig_src *x, int64_t *l_io, ig_range **cur, ig_range **next, ig_range *tmp,
                   const int64_t *seq, int64_t n, int64_t n_new, int64_t eos_id, char *err, size_t errlen) {
    const ig_index *ix = x->P;
    int64_t l = *l_io;
    if (n_new <= 0) return IG_OK;
    int64_t first = n - n_new - l; /* the context from here is what the state matches */
    if (first < 0) return ig_fail(err, errlen, IG_ERR_ARG, "state: its matched suffix (%lld tokens) is longer than the "
                                  "sequence before the new tokens", (long long)l);
    int64_t bad = context_start(ix, seq, first, n - n_new, eos_id) - 1;
    if (bad >= first)
        return ig_fail(err, errlen, IG_ERR_ARG, "state: its matched suffix holds id %lld at position %lld",
                       (long long)seq[bad], (long long)bad);
    int64_t from = n - n_new, base = context_start(ix, seq, from, n, eos_id); /* ctx[j] = seq[base + j] */
    if (base == from) base = first; /* no boundary among the new tokens: the context holds the matched suffix */
    if (base > from) { /* a new document among the new tokens: its context starts empty */
        l = 0;
        ig_src_full(x, *cur);
        from = base;
    }
    uint32_t *ctx = malloc((size_t)(n - base > 0 ? n - base : 1) * sizeof *ctx);
    if (!ctx) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    for (int64_t i = base; i < n; i++) ctx[i - base] = (uint32_t)seq[i];
    ig_lce_memo *memo = NULL;
    for (int64_t pos = from; pos < n; pos++) l = src_step(x, ctx, pos - base + 1, l, cur, next, tmp, &memo);
    ig_lce_memo_free(memo);
    free(ctx);
    *l_io = l;
    return IG_OK;
}

static int draft_step(ig_src *x, int64_t *state, int64_t state_len, const int64_t *seq, int64_t n, int64_t n_new,
                      const ig_draft_params *p, int64_t max_tokens, int64_t *out, uint64_t *counts, uint64_t *totals,
                      int64_t *n_out, int64_t *match_len, int *source_out, char *err, size_t errlen) {
    const ig_index *ix = x->P;
    if (!p || !n_out || !match_len || !source_out || (max_tokens > 0 && !out) || (n > 0 && !seq))
        return ig_fail(err, errlen, IG_ERR_ARG, "NULL argument");
    if (n < 0 || n_new < 0 || n_new > n) return ig_fail(err, errlen, IG_ERR_ARG, "bad lengths n=%lld n_new=%lld",
                                                        (long long)n, (long long)n_new);
    *n_out = 0;
    *match_len = 0;
    *source_out = -1;
    if (max_tokens > p->max_draft) max_tokens = p->max_draft;
    if (max_tokens < 0) max_tokens = 0;
    int src = p->source;
    int use_look = p->lookup_min > 0 && src != IG_DRAFT_INFGRAM && p->lookup_cap != 0;
    int use_inf = ix != NULL && src != IG_DRAFT_LOOKUP;
    int rc = IG_OK;
    ig_scratch sc;
    int64_t l = 0;
    ig_range *cur = NULL, *next = NULL;
    if (use_inf) {
        if (!state) return ig_fail(err, errlen, IG_ERR_ARG, "NULL state");
        if ((l = src_begin(x, state, state_len, &sc, err, errlen)) < 0) return (int)l;
        cur = sc.a;
        next = sc.b;
        if ((rc = advance(x, &l, &cur, &next, sc.c, seq, n, n_new, p->eos_id, err, errlen)) ||
            (rc = ig_src_failed(x, err, errlen))) {
            ig_scratch_free(&sc);
            return rc;
        }
        src_store(x, l, cur, state);
    }
    int64_t look_len = 0, look_n = 0;
    if (use_look && max_tokens > 0) {
        look_len = ig_draft_lookup(seq, n, p->lookup_min, p->lookup_max, max_tokens, out, &look_n, NULL);
        look_n = look_len ? draft_cap(p, look_len, look_n) : 0;
        if (p->lookup_cap > 0 && look_n > p->lookup_cap) look_n = p->lookup_cap;
    }
    int take_look = look_n > 0 && (src == IG_DRAFT_LOOKUP_FIRST || src == IG_DRAFT_LOOKUP ||
                                   (src == IG_DRAFT_LONGEST && look_len > l));
    int64_t inf_n = 0;
    int64_t inf_cap = draft_cap(p, l, max_tokens);
    if (p->infgram_cap >= 0 && inf_cap > p->infgram_cap) inf_cap = p->infgram_cap;
    if (use_inf && !take_look && inf_cap > 0 && l >= p->min_match) {
        int64_t tmp[256]; /* with a lookup draft in out, chain elsewhere: it stays the fallback */
        int64_t *buf = look_n ? (max_tokens <= 256 ? tmp : malloc((size_t)max_tokens * sizeof *buf)) : out;
        if (!buf) rc = ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
        else {
            chain_rule rule = {p->min_count, p->min_share, p->min_joint, p->eos_id};
            inf_n = greedy_chain(x, cur, next, sc.c, l, inf_cap, &rule, NULL, buf, counts, totals);
            if (inf_n > 0 && buf != out) memcpy(out, buf, (size_t)inf_n * sizeof *out);
            if (buf != out && buf != tmp) free(buf);
        }
    }
    if (use_inf) ig_scratch_free(&sc);
    if (!rc) rc = ig_src_failed(x, err, errlen);
    if (rc) return rc;
    if (inf_n > 0) {
        *n_out = inf_n;
        *match_len = l;
        *source_out = IG_DRAFT_INFGRAM;
    } else if (look_n > 0 && src != IG_DRAFT_INFGRAM) {
        *n_out = look_n;
        *match_len = look_len;
        *source_out = IG_DRAFT_LOOKUP;
        if (counts) memset(counts, 0, (size_t)look_n * sizeof *counts);
        if (totals) memset(totals, 0, (size_t)look_n * sizeof *totals);
    }
    return IG_OK;
}

int ig_draft_step(const ig_index *ix, int64_t *state, int64_t state_len, const int64_t *seq, int64_t n,
                  int64_t n_new, const ig_draft_params *p, int64_t max_tokens, int64_t *out, uint64_t *counts,
                  uint64_t *totals, int64_t *n_out, int64_t *match_len, int *source_out, char *err, size_t errlen) {
    ig_src x = ig_src_of(ix, NULL);
    return draft_step(&x, state, state_len, seq, n, n_new, p, max_tokens, out, counts, totals, n_out, match_len,
                      source_out, err, errlen);
}

int ig_diff_draft_step(const ig_index *plus, const ig_index *minus, int64_t *state, int64_t state_len,
                       const int64_t *seq, int64_t n, int64_t n_new, const ig_draft_params *p, int64_t max_tokens,
                       int64_t *out, uint64_t *counts, uint64_t *totals, int64_t *n_out, int64_t *match_len,
                       int *source_out, char *err, size_t errlen) {
    ig_src x;
    int rc = diff_src(plus, minus, &x, err, errlen);
    return rc ? rc : draft_step(&x, state, state_len, seq, n, n_new, p, max_tokens, out, counts, totals, n_out,
                                match_len, source_out, err, errlen);
}

/* ---------------------------------------------------------------- many rows at once */

typedef struct {
    const ig_src *x;
    int64_t *states;
    int64_t state_len;
    const int64_t *seqs, *lens, *n_new, *max_tokens, *caps;
    int64_t seq_stride, out_stride;
    const ig_draft_params *p;
    int64_t *out, *n_out, *match_len;
    uint64_t *counts, *totals;
    int *source_out;
    pthread_mutex_t mu; /* guards the first failure below */
    int64_t bad_row;
    char msg[256];
} step_job;

static int step_work(void *ctx, int tid, int64_t begin, int64_t end) {
    step_job *j = ctx;
    (void)tid;
    for (int64_t i = begin; i < end; i++) {
        ig_src x = *j->x; /* its own failure flag per row */
        ig_draft_params p = *j->p;
        if (j->caps) {
            p.infgram_cap = j->caps[2 * i];
            p.lookup_cap = j->caps[2 * i + 1];
        }
        int64_t o = i * j->out_stride;
        char e[256];
        e[0] = 0;
        int rc = draft_step(&x, j->states ? j->states + i * j->state_len : NULL, j->state_len,
                            j->seqs + i * j->seq_stride, j->lens[i], j->n_new[i], &p, j->max_tokens[i], j->out + o,
                            j->counts ? j->counts + o : NULL, j->totals ? j->totals + o : NULL, j->n_out + i,
                            j->match_len + i, j->source_out + i, e, sizeof e);
        if (rc) {
            pthread_mutex_lock(&j->mu);
            if (j->bad_row < 0 || i < j->bad_row) {
                j->bad_row = i;
                snprintf(j->msg, sizeof j->msg, "%s", e);
            }
            pthread_mutex_unlock(&j->mu);
            return rc;
        }
    }
    return IG_OK;
}

static int draft_step_batch(const ig_src *x, int64_t *states, int64_t n_state_values, const int64_t *seqs,
                            int64_t seq_stride, const int64_t *lens, const int64_t *n_new, int64_t n,
                            const ig_draft_params *p, const int64_t *max_tokens, const int64_t *caps, int64_t *out,
                            uint64_t *counts, uint64_t *totals, int64_t out_stride, int64_t *n_out,
                            int64_t *match_len, int *source_out, int n_threads, char *err, size_t errlen) {
    if (n < 0) return ig_fail(err, errlen, IG_ERR_ARG, "negative number of rows");
    if (!p) return ig_fail(err, errlen, IG_ERR_ARG, "NULL params");
    int use_inf = x->P != NULL && p->source != IG_DRAFT_LOOKUP;
    int64_t size = use_inf ? src_state_size(x) : 0;
    if (use_inf && n > INT64_MAX / size) return ig_fail(err, errlen, IG_ERR_ARG, "too many rows");
    int rc = use_inf ? ig_check_state_len(n_state_values, n * size, "states", x->M ? "difference" : "index", err,
                                          errlen) : IG_OK;
    if (rc || n == 0) return rc;
    if (use_inf && !states) return ig_fail(err, errlen, IG_ERR_ARG, "NULL states");
    if (!seqs || !lens || !n_new || !max_tokens || !out || !n_out || !match_len || !source_out)
        return ig_fail(err, errlen, IG_ERR_ARG, "NULL argument");
    if (seq_stride < 0 || out_stride < 0) return ig_fail(err, errlen, IG_ERR_ARG, "negative stride");
    for (int64_t i = 0; i < n; i++) {
        int64_t m = max_tokens[i] < p->max_draft ? max_tokens[i] : p->max_draft;
        if (lens[i] < 0 || lens[i] > seq_stride || n_new[i] < 0 || n_new[i] > lens[i])
            return ig_fail(err, errlen, IG_ERR_ARG, "row %lld: bad lengths (len %lld, n_new %lld, stride %lld)",
                           (long long)i, (long long)lens[i], (long long)n_new[i], (long long)seq_stride);
        if (m > out_stride)
            return ig_fail(err, errlen, IG_ERR_ARG, "row %lld: the output holds %lld tokens per row, the draft may "
                           "take %lld", (long long)i, (long long)out_stride, (long long)m);
    }
    step_job j = {x, use_inf ? states : NULL, size, seqs, lens, n_new, max_tokens, caps, seq_stride, out_stride, p,
                  out, n_out, match_len, counts, totals, source_out, PTHREAD_MUTEX_INITIALIZER, -1, ""};
    rc = ig_parallel_for(n, ig_resolve_threads(n_threads, n, 64), 16, step_work, &j);
    pthread_mutex_destroy(&j.mu);
    if (!rc) return IG_OK;
    if (j.bad_row < 0) return ig_fail(err, errlen, rc, "out of memory");
    return ig_fail(err, errlen, rc, "row %lld: %s", (long long)j.bad_row, j.msg);
}

int ig_draft_step_batch(const ig_index *ix, int64_t *states, int64_t n_state_values, const int64_t *seqs,
                        int64_t seq_stride, const int64_t *lens, const int64_t *n_new, int64_t n,
                        const ig_draft_params *p, const int64_t *max_tokens, const int64_t *caps, int64_t *out,
                        uint64_t *counts, uint64_t *totals, int64_t out_stride, int64_t *n_out, int64_t *match_len,
                        int *source_out, int n_threads, char *err, size_t errlen) {
    ig_src x = ig_src_of(ix, NULL);
    return draft_step_batch(&x, states, n_state_values, seqs, seq_stride, lens, n_new, n, p, max_tokens, caps, out,
                            counts, totals, out_stride, n_out, match_len, source_out, n_threads, err, errlen);
}

int ig_diff_draft_step_batch(const ig_index *plus, const ig_index *minus, int64_t *states, int64_t n_state_values,
                             const int64_t *seqs, int64_t seq_stride, const int64_t *lens, const int64_t *n_new,
                             int64_t n, const ig_draft_params *p, const int64_t *max_tokens, const int64_t *caps,
                             int64_t *out, uint64_t *counts, uint64_t *totals, int64_t out_stride, int64_t *n_out,
                             int64_t *match_len, int *source_out, int n_threads, char *err, size_t errlen) {
    ig_src x;
    int rc = diff_src(plus, minus, &x, err, errlen);
    return rc ? rc : draft_step_batch(&x, states, n_state_values, seqs, seq_stride, lens, n_new, n, p, max_tokens,
                                      caps, out, counts, totals, out_stride, n_out, match_len, source_out, n_threads,
                                      err, errlen);
}

void ig_draft_adaptive_caps(const double *accepted, const double *rejected, int64_t n, int64_t max_draft,
                            double verify_cost, int64_t *caps) {
    for (int64_t i = 0; i < n; i++) {
        double acc = accepted[i], rej = rejected[i];
        double a = acc + rej > 0 ? acc / (acc + rej) : 1.0;
        if (a >= 0.999) caps[i] = max_draft;
        else if (a <= verify_cost) caps[i] = 0;
        else {
            int64_t c = (int64_t)(log(verify_cost) / log(a)); /* as Python's int(): toward zero */
            caps[i] = c < max_draft ? c : max_draft;
        }
    }
}

/* ---------------------------------------------------------------- best-first trees */

typedef struct {
    double p;
    int64_t parent; /* node index, -1 = the root */
    uint32_t tok;
} tree_cand;

static int draft_tree(ig_src *x, const int64_t *state, int64_t state_len, int64_t max_nodes, int64_t max_depth,
                      int64_t width, double min_prob, int64_t eos_id, int64_t *tokens, int64_t *parents, double *probs,
                      int64_t *n_out, char *err, size_t errlen) {
    if (!n_out || (max_nodes > 0 && (!tokens || !parents || !probs))) return ig_fail(err, errlen, IG_ERR_ARG, "NULL output");
    if (max_nodes < 0 || max_depth < 0 || width < 0)
        return ig_fail(err, errlen, IG_ERR_ARG, "max_nodes, max_depth and width must be >= 0");
    *n_out = 0;
    ig_scratch sc;
    int64_t l = src_begin(x, state, state_len, &sc, err, errlen);
    if (l < 0) return (int)l;
    if (l == 0 || max_nodes == 0 || max_depth == 0 || width == 0) {
        ig_scratch_free(&sc);
        return IG_OK;
    }
    int ns = x->ns;
    int64_t cap = (max_nodes + 1) * width;
    ig_range *node_r = malloc((size_t)(max_nodes + 1) * (size_t)ns * sizeof *node_r); /* slot max_nodes = root */
    int64_t *depth = malloc((size_t)max_nodes * sizeof *depth);
    tree_cand *heap = malloc((size_t)cap * sizeof *heap);
    tc *cands = malloc((size_t)width * sizeof *cands);
    if (!node_r || !depth || !heap || !cands) {
        free(node_r); free(depth); free(heap); free(cands);
        ig_scratch_free(&sc);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    }
    memcpy(node_r + max_nodes * ns, sc.a, (size_t)ns * sizeof *node_r);
    int64_t h = 0, n = 0, node = -1; /* node: the one whose children are pushed next (-1 = root) */
    for (;;) {
        if (node >= -1) { /* push the children of `node` */
            const ig_range *r = node < 0 ? node_r + max_nodes * ns : node_r + node * ns;
            int64_t d = node < 0 ? 0 : depth[node];
            double base = node < 0 ? 1.0 : probs[node];
            uint64_t total;
            int64_t k = candidates(x, r, l + d, cands, width, &total, sc.c);
            for (int64_t j = 0; j < k && h < cap; j++) {
                double p = base * (double)cands[j].cnt / (double)total;
                if (p >= min_prob) heap[h++] = (tree_cand){p, node, cands[j].tok};
            }
        }
        if (n >= max_nodes || h == 0) break;
        int64_t best = 0; /* the most probable candidate becomes the next node */
        for (int64_t j = 1; j < h; j++)
            if (heap[j].p > heap[best].p) best = j;
        tree_cand c = heap[best];
        heap[best] = heap[--h];
        node = -2; /* nothing to expand unless the new node is an inner one */
        if (c.tok == x->P->separator && eos_id < 0) continue; /* a document end we cannot draft */
        int64_t pd = c.parent < 0 ? 0 : depth[c.parent];
        const ig_range *pr = c.parent < 0 ? node_r + max_nodes * ns : node_r + c.parent * ns;
        parents[n] = c.parent;
        probs[n] = c.p;
        depth[n] = pd + 1;
        if (c.tok == x->P->separator) {
            tokens[n++] = eos_id; /* a leaf: the document ends */
            continue;
        }
        tokens[n] = (int64_t)c.tok;
        ig_src_extend(x, pr, l + pd, c.tok, node_r + n * ns);
        if (depth[n] < max_depth) node = n;
        n++;
    }
    free(node_r); free(depth); free(heap); free(cands);
    ig_scratch_free(&sc);
    int rc = ig_src_failed(x, err, errlen);
    if (!rc) *n_out = n;
    return rc;
}

int ig_draft_tree(const ig_index *ix, const int64_t *state, int64_t state_len, int64_t max_nodes, int64_t max_depth,
                  int64_t width, double min_prob, int64_t eos_id, int64_t *tokens, int64_t *parents, double *probs,
                  int64_t *n_out, char *err, size_t errlen) {
    ig_src x = ig_src_of(ix, NULL);
    return draft_tree(&x, state, state_len, max_nodes, max_depth, width, min_prob, eos_id, tokens, parents, probs,
                      n_out, err, errlen);
}

int ig_diff_draft_tree(const ig_index *plus, const ig_index *minus, const int64_t *state, int64_t state_len,
                       int64_t max_nodes, int64_t max_depth, int64_t width, double min_prob, int64_t eos_id,
                       int64_t *tokens, int64_t *parents, double *probs, int64_t *n_out, char *err, size_t errlen) {
    ig_src x;
    int rc = diff_src(plus, minus, &x, err, errlen);
    return rc ? rc : draft_tree(&x, state, state_len, max_nodes, max_depth, width, min_prob, eos_id, tokens, parents,
                                probs, n_out, err, errlen);
}

/* ---------------------------------------------------------------- states of a difference */

int64_t ig_diff_state_size(const ig_index *plus, const ig_index *minus) {
    return plus && minus ? 2 + 2 * ((int64_t)plus->n_shards + minus->n_shards) : 0;
}

int ig_diff_state_init(const ig_index *plus, const ig_index *minus, const uint32_t *ctx, int64_t len, int64_t *state,
                       int64_t state_len, char *err, size_t errlen) {
    ig_src x;
    int rc = diff_src(plus, minus, &x, err, errlen);
    if (!rc) rc = ig_check_ids(plus, ctx, len, "context", err, errlen);
    if (!rc) rc = ig_check_state_len(state_len, src_state_size(&x), "state", "difference", err, errlen);
    if (rc) return rc;
    if (!state) return ig_fail(err, errlen, IG_ERR_ARG, "state: NULL output");
    ig_scratch sc;
    if ((rc = ig_scratch_init(&sc, x.ns, err, errlen))) return rc;
    int neg = 0;
    int64_t l = ig_net_longest(plus, minus, ctx, len, len, sc.a, sc.a + x.SP, sc.b, sc.b + x.SP, &neg);
    if (!neg) src_store(&x, l, sc.a, state);
    ig_scratch_free(&sc);
    return neg ? ig_diff_not_subset(err, errlen) : IG_OK;
}
