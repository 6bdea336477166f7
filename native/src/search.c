/* search.c - document search over a CNF of n-grams (see infinigram_search.h for the contract).
 *
 * Plan of one search:
 *   1. every term's suffix-array range in every shard; a clause's count is the sum over its terms;
 *   2. the rarest clause is the anchor: its occurrences (all, or a stratified sample of
 *      max_clause_freq) are mapped to positions, sorted, and grouped by document;
 *   3. every other clause is checked per candidate document, exactly: a clause that is cheap to
 *      enumerate gets its sorted positions (membership = one binary search per document), a
 *      frequent one is found by scanning the candidate document's tokens;
 *   4. with max_diff_tokens, all occurrences of every clause in the document go through a
 *      sliding window looking for one occurrence per clause within the distance.
 */
#include <stdlib.h>

#include "query_internal.h"

/* ---------------------------------------------------------------- small helpers */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Start of document d of a shard, clamped into the token array (docs.bin is not trusted). */
static int64_t doc_start(const ig_shard *s, int64_t d) { return ig_doc_start(s, d); }

/* Document containing position pos: the last d with start(d) <= pos. */
static int64_t doc_of(const ig_shard *s, int64_t pos) {
    int64_t a = 0, b = s->num_docs;
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if (doc_start(s, mid) <= pos) a = mid; else b = mid;
    }
    return a;
}

/* First index in sorted v[0..n) with v[i] >= x. */
static int64_t lower_bound(const int64_t *v, int64_t n, int64_t x) {
    int64_t a = 0, b = n;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (v[mid] < x) a = mid + 1; else b = mid;
    }
    return a;
}

/* A growable array of (position, tag) pairs. */
typedef struct {
    int64_t pos;
    int32_t tag; /* clause (search) or term (spans) */
} occ_t;
typedef struct {
    occ_t *v;
    int64_t n, cap;
} occ_buf;

static int occ_push(occ_buf *b, int64_t pos, int32_t tag) {
    if (b->n == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 256;
        occ_t *v = realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) return IG_ERR_NOMEM;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n].pos = pos;
    b->v[b->n++].tag = tag;
    return IG_OK;
}

static int cmp_occ(const void *x, const void *y) {
    const occ_t *a = x, *b = y;
    if (a->pos != b->pos) return (a->pos > b->pos) - (a->pos < b->pos);
    return (a->tag > b->tag) - (a->tag < b->tag);
}

/* ---------------------------------------------------------------- scanning a document */

/* The terms looked for by a scan. Positions are tested on the first token: against up to
   IG_SCAN_FIRSTS distinct first tokens directly, in blocks the compiler vectorizes (a block
   without any of them costs a few instructions per token), otherwise through a 1024-bit filter. */
#define IG_SCAN_FIRSTS 4
#define IG_SCAN_BLOCK 32
typedef struct {
    int64_t n;
    const uint32_t *q[IG_SEARCH_MAX_TERMS];
    int64_t len[IG_SEARCH_MAX_TERMS];
    int32_t tag[IG_SEARCH_MAX_TERMS];
    uint64_t filter[16];
    uint32_t first[IG_SCAN_FIRSTS]; /* distinct first tokens, padded with first[0] */
    int n_first;                    /* > IG_SCAN_FIRSTS: use the filter */
    int64_t max_len;                /* longest term */
} scanner;

static inline unsigned filter_bit(uint32_t t) { return (unsigned)((t * 2654435761u) >> 22); }

static void scanner_add(scanner *sc, const uint32_t *q, int64_t len, int32_t tag) {
    sc->q[sc->n] = q;
    sc->len[sc->n] = len;
    sc->tag[sc->n++] = tag;
    if (len > sc->max_len) sc->max_len = len;
    unsigned b = filter_bit(q[0]);
    sc->filter[b >> 6] |= (uint64_t)1 << (b & 63);
    int known = 0;
    for (int k = 0; k < sc->n_first && k < IG_SCAN_FIRSTS; k++) known |= sc->first[k] == q[0];
    if (known) return;
    if (sc->n_first < IG_SCAN_FIRSTS) sc->first[sc->n_first] = q[0];
    if (sc->n_first == 0)
        for (int k = 1; k < IG_SCAN_FIRSTS; k++) sc->first[k] = q[0];
    sc->n_first++;
}

typedef struct {
    const scanner *sc;
    uint64_t *counts; /* counts[tag]++ per hit, when not NULL */
    occ_buf *out;     /* (pos, tag) per hit, when not NULL */
    int32_t n_tags;
    int stop_tags; /* > 0: stop once that many distinct tags were seen */
    int64_t max_out; /* > 0: stop once out holds that many hits */
    int n_seen;
    uint8_t seen[IG_SEARCH_MAX_TERMS];
} scan_ctx;

/* Terms starting at i (whose token is t): 0 go on, 1 stop (enough tags seen), < 0 error. */
static int scan_hit(const ig_shard *s, int w, int64_t i, uint32_t t, scan_ctx *cx) {
    const scanner *sc = cx->sc;
    for (int64_t k = 0; k < sc->n; k++) {
        const uint32_t *q = sc->q[k];
        if (q[0] != t) continue;
        int64_t m = sc->len[k], j = 1;
        /* terms hold no separator, so a match never runs past the document's end */
        while (j < m && ig_tok(s, w, i + j) == q[j]) j++;
        if (j < m) continue;
        int32_t tag = sc->tag[k];
        if (cx->counts) cx->counts[tag]++;
        if (cx->out && occ_push(cx->out, i, tag)) return IG_ERR_NOMEM;
        if (cx->max_out > 0 && cx->out && cx->out->n >= cx->max_out) return 1;
        if (tag < cx->n_tags && !cx->seen[tag]) {
            cx->seen[tag] = 1;
            if (cx->stop_tags > 0 && ++cx->n_seen >= cx->stop_tags) return 1;
        }
    }
    return 0;
}

/* One loop per token width: skip blocks holding none of the first tokens, test the rest. */
#define SCAN_FIRSTS(T)                                                                          \
    do {                                                                                        \
        const T *tk = (const T *)s->tokens;                                                     \
        const T f0 = (T)sc->first[0], f1 = (T)sc->first[1], f2 = (T)sc->first[2],               \
                f3 = (T)sc->first[3];                                                           \
        int64_t i = a;                                                                          \
        while (i < b) {                                                                         \
            if (i + IG_SCAN_BLOCK <= b) {                                                       \
                int any = 0;                                                                    \
                for (int k = 0; k < IG_SCAN_BLOCK; k++) {                                       \
                    T t = tk[i + k];                                                            \
                    any |= (t == f0) | (t == f1) | (t == f2) | (t == f3);                       \
                }                                                                               \
                if (!any) {                                                                     \
                    i += IG_SCAN_BLOCK;                                                         \
                    continue;                                                                   \
                }                                                                               \
            }                                                                                   \
            int64_t end = i + IG_SCAN_BLOCK < b ? i + IG_SCAN_BLOCK : b;                        \
            for (; i < end; i++) {                                                              \
                T t = tk[i];                                                                    \
                if (t == f0 || t == f1 || t == f2 || t == f3) {                                 \
                    int r = scan_hit(s, w, i, t, &cx);                                          \
                    if (r) return r < 0 ? r : IG_OK;                                            \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* Pure counting of one-token terms: a branch-free loop the compiler vectorizes. */
#define COUNT_FIRSTS(T)                                                                         \
    do {                                                                                        \
        const T *tk = (const T *)s->tokens;                                                     \
        const T f0 = (T)sc->first[0], f1 = (T)sc->first[1], f2 = (T)sc->first[2],               \
                f3 = (T)sc->first[3];                                                           \
        uint64_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;                                                \
        if (sc->n_first == 1) {                                                                 \
            for (int64_t i = a; i < b; i++) c0 += tk[i] == f0;                                  \
        } else {                                                                                \
            for (int64_t i = a; i < b; i++) {                                                   \
                T t = tk[i];                                                                    \
                c0 += t == f0;                                                                  \
                c1 += t == f1;                                                                  \
                c2 += t == f2;                                                                  \
                c3 += t == f3;                                                                  \
            }                                                                                   \
        }                                                                                       \
        cf[0] = c0, cf[1] = c1, cf[2] = c2, cf[3] = c3;                                         \
    } while (0)

/* Occurrences of the scanner's terms starting in [a, b) of a shard (see scan_ctx). GCC does not
   vectorize at -O2 before version 12's cheap model, which skips these loops: ask for it here. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize")))
#endif
static int scan_range(const ig_shard *s, int w, int64_t a, int64_t b, const scanner *sc,
                      uint64_t *counts, occ_buf *out, int32_t n_tags, int stop_tags, int64_t max_out) {
    scan_ctx cx;
    memset(&cx, 0, sizeof cx);
    cx.sc = sc;
    cx.counts = counts;
    cx.out = out;
    cx.n_tags = n_tags;
    cx.stop_tags = stop_tags;
    cx.max_out = max_out;
    if (b > s->tok_end) b = s->tok_end; /* (an official shard's final separator is not mapped) */
    if (counts && !out && stop_tags == 0 && sc->max_len == 1 && sc->n_first >= 1 && sc->n_first <= IG_SCAN_FIRSTS) {
        uint64_t cf[IG_SCAN_FIRSTS];
        if (w == 1) COUNT_FIRSTS(uint8_t);
        else if (w == 2) COUNT_FIRSTS(uint16_t);
        else COUNT_FIRSTS(uint32_t);
        for (int64_t k = 0; k < sc->n; k++) {
            int f = 0;
            while (sc->first[f] != sc->q[k][0]) f++;
            counts[sc->tag[k]] += cf[f];
        }
        return IG_OK;
    }
    if (sc->n_first >= 1 && sc->n_first <= IG_SCAN_FIRSTS) {
        /* the token array starts 64 bytes into a page-aligned mapping: aligned for any width */
        if (w == 1) SCAN_FIRSTS(uint8_t);
        else if (w == 2) SCAN_FIRSTS(uint16_t);
        else SCAN_FIRSTS(uint32_t);
        return IG_OK;
    }
    for (int64_t i = a; i < b; i++) {
        uint32_t t = ig_tok(s, w, i);
        unsigned fb = filter_bit(t);
        if (!(sc->filter[fb >> 6] >> (fb & 63) & 1)) continue;
        int r = scan_hit(s, w, i, t, &cx);
        if (r) return r < 0 ? r : IG_OK;
    }
    return IG_OK;
}

/* ---------------------------------------------------------------- argument checks */

static int check_cnf(const ig_index *ix, const uint32_t *ids, const int64_t *term_off, int64_t n_terms,
                     const int64_t *clause_off, int64_t n_clauses, char *err, size_t errlen) {
    if (!ix) return ig_fail(err, errlen, IG_ERR_ARG, "index is closed");
    if (n_terms < 1 || n_terms > IG_SEARCH_MAX_TERMS)
        return ig_fail(err, errlen, IG_ERR_ARG, "query: %lld n-grams, allowed 1 to %d", (long long)n_terms,
                       IG_SEARCH_MAX_TERMS);
    if (!ids || !term_off) return ig_fail(err, errlen, IG_ERR_ARG, "query: NULL n-grams");
    for (int64_t k = 0; k < n_terms; k++) {
        if (term_off[k] < 0 || term_off[k + 1] <= term_off[k]) /* (compared before subtracting) */
            return ig_fail(err, errlen, IG_ERR_ARG, "query: n-gram %lld is empty", (long long)k);
        int64_t len = term_off[k + 1] - term_off[k];
        int rc = ig_check_ids(ix, ids + term_off[k], len, "query n-gram", err, errlen);
        if (rc) return rc;
    }
    if (!clause_off) return IG_OK; /* spans: a plain list of terms */
    if (n_clauses < 1 || n_clauses > IG_SEARCH_MAX_CLAUSES)
        return ig_fail(err, errlen, IG_ERR_ARG, "query: %lld clauses, allowed 1 to %d", (long long)n_clauses,
                       IG_SEARCH_MAX_CLAUSES);
    if (clause_off[0] != 0 || clause_off[n_clauses] != n_terms)
        return ig_fail(err, errlen, IG_ERR_ARG, "query: clause offsets must run from 0 to the number of n-grams");
    for (int64_t c = 0; c < n_clauses; c++)
        if (clause_off[c + 1] <= clause_off[c])
            return ig_fail(err, errlen, IG_ERR_ARG, "query: clause %lld has no n-gram", (long long)c);
    return IG_OK;
}

/* ---------------------------------------------------------------- the search */

/* A candidate (an anchor occurrence) packed into one sortable key: shard, position, and whether
   its stratum was the larger of the two sizes floor(N/m) and floor(N/m) + 1 (positions are
   < 2^31, IG_MAX_SHARD_TOKENS). Sorting keys sorts by (shard, position). */
#define CAND(shard, pos, big) (((uint64_t)(shard) << 33) | ((uint64_t)(pos) << 1) | (uint64_t)(big))
#define CAND_SHARD(k) ((int)((k) >> 33))
#define CAND_POS(k) ((int64_t)(((k) >> 1) & 0xFFFFFFFFu))
#define CAND_BIG(k) ((int)((k) & 1))

/* LSD radix sort of n keys, 11 bits per pass, passes only over the bits in use; tmp holds n. */
static void radix_sort(uint64_t *v, int64_t n, uint64_t *tmp) {
    uint64_t used = 0;
    for (int64_t i = 0; i < n; i++) used |= v[i];
    uint64_t *src = v, *dst = tmp;
    for (int shift = 0; shift < 64 && (used >> shift); shift += 11) {
        int64_t cnt[2048] = {0};
        for (int64_t i = 0; i < n; i++) cnt[(src[i] >> shift) & 2047]++;
        int64_t acc = 0;
        for (int d = 0; d < 2048; d++) {
            int64_t c = cnt[d];
            cnt[d] = acc;
            acc += c;
        }
        for (int64_t i = 0; i < n; i++) dst[cnt[(src[i] >> shift) & 2047]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != v) memcpy(v, src, (size_t)n * sizeof *v);
}

enum { MODE_ANCHOR, MODE_SORTED, MODE_SCAN };

typedef struct {
    int mode;
    uint64_t count;
    int64_t *pos;     /* MODE_SORTED: positions, shard after shard, each shard sorted */
    int64_t *off;     /* n_shards + 1 offsets into pos */
} clause_t;

/* Candidate occurrences of the anchor: all of them, or one drawn uniformly from each of `m`
   strata of the concatenation (terms x shards x ranks) of its ranges. */
static int anchor_candidates(const ig_index *ix, const ig_range *rng, int64_t t0, int64_t t1,
                             uint64_t total, uint64_t m, uint64_t seed, uint64_t *out) {
    int S = ix->n_shards;
    int64_t n_ranges = (t1 - t0) * S;
    uint64_t state = seed, base = 0, q = total / m, r = total % m;
    int64_t j = 0; /* current range (term-major) */
    for (uint64_t k = 0; k < m; k++) {
        uint64_t idx, big = 0;
        if (m == total) {
            idx = k;
        } else { /* stratum [k*N/m, (k+1)*N/m) without overflow: N/m and N%m parts */
            uint64_t lo = k * q + (k * r) / m, hi = (k + 1) * q + ((k + 1) * r) / m;
            big = hi - lo > q;
            idx = lo + splitmix64(&state) % (hi - lo);
        }
        for (;;) { /* ranges are visited in order and idx only grows */
            const ig_range *rg = &rng[t0 * S + j];
            uint64_t size = (uint64_t)(rg->hi - rg->lo);
            if (idx < base + size) break;
            base += size;
            j++;
            if (j >= n_ranges) return IG_ERR_ARG; /* cannot happen: total is the sum of sizes */
        }
        int shard = (int)(j % S);
        const ig_shard *s = &ix->shards[shard];
        out[k] = CAND(shard, ig_sa(s, rng[t0 * S + j].lo + (int64_t)(idx - base)), big);
    }
    return IG_OK;
}

/* Sorted positions of a clause, per shard. */
static int materialize(const ig_index *ix, const ig_range *rng, int64_t t0, int64_t t1, clause_t *c) {
    int S = ix->n_shards;
    c->pos = malloc((size_t)(c->count ? c->count : 1) * sizeof(int64_t));
    c->off = malloc(((size_t)S + 1) * sizeof(int64_t));
    if (!c->pos || !c->off) return IG_ERR_NOMEM;
    int64_t n = 0;
    for (int sh = 0; sh < S; sh++) {
        c->off[sh] = n;
        const ig_shard *s = &ix->shards[sh];
        for (int64_t t = t0; t < t1; t++) {
            ig_range r = rng[t * S + sh];
            for (int64_t k = r.lo; k < r.hi; k++) c->pos[n++] = ig_sa(s, k);
        }
    }
    c->off[S] = n;
    /* positions are non-negative: as unsigned keys they sort the same */
    uint64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp) return IG_ERR_NOMEM;
    for (int sh = 0; sh < S; sh++)
        radix_sort((uint64_t *)c->pos + c->off[sh], c->off[sh + 1] - c->off[sh], tmp);
    free(tmp);
    return IG_OK;
}

/* Is there a window of width <= D holding an occurrence of each of the n_clauses tags?
   occ is sorted by position. */
static int window_match(const occ_t *occ, int64_t n, int32_t n_clauses, int64_t D) {
    int64_t cnt[IG_SEARCH_MAX_CLAUSES] = {0};
    int32_t have = 0;
    int64_t l = 0;
    for (int64_t r = 0; r < n; r++) {
        if (cnt[occ[r].tag]++ == 0) have++;
        while (occ[r].pos - occ[l].pos > D) {
            if (--cnt[occ[l].tag] == 0) have--;
            l++;
        }
        if (have == n_clauses) return 1;
    }
    return 0;
}

int ig_search_docs(const ig_index *ix, const uint32_t *ids, const int64_t *term_off, int64_t n_terms,
                   const int64_t *clause_off, int64_t n_clauses, const ig_search_opts *opts,
                   int64_t *doc_ids, int64_t cap, int64_t *n_out, ig_search_stats *stats,
                   char *err, size_t errlen) {
    int rc = check_cnf(ix, ids, term_off, n_terms, clause_off, n_clauses, err, errlen);
    if (rc) return rc;
    if (!opts || !stats || !n_out || (cap > 0 && !doc_ids))
        return ig_fail(err, errlen, IG_ERR_ARG, "search: NULL output");
    if (opts->max_clause_freq < 1 || opts->max_clause_freq > IG_SEARCH_MAX_CLAUSE_FREQ)
        return ig_fail(err, errlen, IG_ERR_ARG, "max_clause_freq must be in 1..%d, got %llu",
                       IG_SEARCH_MAX_CLAUSE_FREQ, (unsigned long long)opts->max_clause_freq);
    if (opts->check < IG_SEARCH_CHECK_AUTO || opts->check > IG_SEARCH_CHECK_SCAN)
        return ig_fail(err, errlen, IG_ERR_ARG, "search: unknown check mode %d", opts->check);
    if (opts->max_diff_tokens < -1)
        return ig_fail(err, errlen, IG_ERR_ARG, "max_diff_tokens must be >= 0 (or -1 for none)");
    memset(stats, 0, sizeof *stats);
    *n_out = 0;

    const int S = ix->n_shards, w = ix->token_width;
    /* any distance beyond a shard's length means the same (and p +- D cannot overflow) */
    const int64_t D = opts->max_diff_tokens > IG_MAX_SHARD_TOKENS ? IG_MAX_SHARD_TOKENS : opts->max_diff_tokens;
    const uint64_t maxfreq = opts->max_clause_freq;
    ig_range *rng = malloc((size_t)n_terms * (size_t)S * sizeof *rng);
    clause_t *cl = calloc((size_t)n_clauses, sizeof *cl);
    int64_t *shard_base = malloc(((size_t)S + 1) * sizeof(int64_t));
    uint64_t *cand = NULL, *cand_tmp = NULL;
    occ_buf scan_occ = {0}, merged = {0};
    rc = IG_OK;
    if (!rng || !cl || !shard_base) { rc = IG_ERR_NOMEM; goto done; }
    shard_base[0] = 0;
    for (int sh = 0; sh < S; sh++) shard_base[sh + 1] = shard_base[sh] + ix->shards[sh].num_docs;

    /* 1. ranges and clause counts; the anchor is the rarest clause */
    int64_t anchor = 0;
    for (int64_t c = 0; c < n_clauses; c++) {
        for (int64_t t = clause_off[c]; t < clause_off[c + 1]; t++)
            for (int sh = 0; sh < S; sh++) {
                ig_range r = ig_find_in_shard(&ix->shards[sh], w, ids + term_off[t], term_off[t + 1] - term_off[t]);
                rng[t * S + sh] = r;
                cl[c].count += (uint64_t)(r.hi - r.lo);
            }
        if (cl[c].count < cl[anchor].count) anchor = c;
    }
    const uint64_t N = cl[anchor].count;
    stats->anchor_clause = anchor;
    stats->anchor_count = N;
    if (N == 0) goto done; /* some clause never occurs: nothing matches, exactly */

    /* 2. anchor candidates, sorted by (shard, position) */
    const int sampled = N > maxfreq;
    const uint64_t m = sampled ? maxfreq : N;
    stats->anchor_used = m;
    stats->approximate = sampled;
    cand = malloc((size_t)m * sizeof *cand);
    cand_tmp = malloc((size_t)m * sizeof *cand_tmp);
    if (!cand || !cand_tmp) { rc = IG_ERR_NOMEM; goto done; }
    if ((rc = anchor_candidates(ix, rng, clause_off[anchor], clause_off[anchor + 1], N, m, opts->seed, cand)))
        goto done;
    radix_sort(cand, (int64_t)m, cand_tmp);
    const double w_small = sampled ? (double)(N / m) : 1.0; /* stratum sizes */

    /* Total length of the candidate documents: what scanning a clause would cost. */
    uint64_t cand_len = 0;
    for (uint64_t i = 0; i < m;) {
        const int sh = CAND_SHARD(cand[i]);
        const ig_shard *s = &ix->shards[sh];
        int64_t d = doc_of(s, CAND_POS(cand[i])), end = doc_start(s, d + 1);
        cand_len += (uint64_t)(end - doc_start(s, d));
        while (i < m && CAND_SHARD(cand[i]) == sh && CAND_POS(cand[i]) < end) i++;
    }

    /* With a distance limit, an exact anchor is scanned around, not across documents. */
    uint64_t scan_cost = cand_len;
    if (D >= 0 && !sampled && (uint64_t)D < ((uint64_t)1 << 40) / m) {
        uint64_t around = m * (2 * (uint64_t)D + 1);
        if (around < scan_cost) scan_cost = around;
    }

    /* 3. how each other clause is checked: sorted positions when that is cheaper than scanning
       (about 30 scanned tokens cost one random suffix-array read plus sorting). */
    scanner sc;
    memset(&sc, 0, sizeof sc);
    int n_scan = 0;
    cl[anchor].mode = MODE_ANCHOR;
    for (int64_t c = 0; c < n_clauses; c++) {
        if (c == anchor) {
            if (!sampled) continue;
            /* a sampled anchor is scanned: its occurrences per document weigh the estimate */
        } else if (opts->check != IG_SEARCH_CHECK_SCAN && cl[c].count <= maxfreq &&
                   (opts->check == IG_SEARCH_CHECK_SORTED || cl[c].count * 32 <= scan_cost)) {
            cl[c].mode = MODE_SORTED;
            if ((rc = materialize(ix, rng, clause_off[c], clause_off[c + 1], &cl[c]))) goto done;
            continue;
        } else {
            cl[c].mode = MODE_SCAN;
        }
        n_scan++;
        for (int64_t t = clause_off[c]; t < clause_off[c + 1]; t++)
            scanner_add(&sc, ids + term_off[t], term_off[t + 1] - term_off[t], (int32_t)c);
    }

    /* 4. one candidate document at a time */
    uint64_t matches = 0;
    double estimate = 0.0;
    int64_t n_written = 0;
    for (uint64_t i = 0; i < m;) {
        const int sh = CAND_SHARD(cand[i]);
        const ig_shard *s = &ix->shards[sh];
        const int64_t d = doc_of(s, CAND_POS(cand[i]));
        const int64_t a = doc_start(s, d), b = doc_start(s, d + 1);
        uint64_t g0 = i;
        double wsum = 0.0;
        for (; i < m && CAND_SHARD(cand[i]) == sh && CAND_POS(cand[i]) < b; i++) wsum += w_small + CAND_BIG(cand[i]);

        int ok = 1;
        uint64_t counts[IG_SEARCH_MAX_CLAUSES] = {0};
        scan_occ.n = 0;
        if (n_scan && D >= 0 && !sampled) {
            /* every window holds an anchor occurrence (all of them are candidates here), so only
               starts within D of one matter: scan those stretches, merged, once each */
            int64_t lo = 0, hi = 0;
            for (uint64_t k = g0; k <= i && !rc; k++) {
                int64_t l = a, h = b;
                if (k < i) {
                    int64_t p = CAND_POS(cand[k]);
                    l = p - D > a ? p - D : a;
                    h = p + D + 1 < b ? p + D + 1 : b;
                    if (l <= hi && k > g0) {
                        if (h > hi) hi = h;
                        continue;
                    }
                }
                if (k > g0) rc = scan_range(s, w, lo, hi, &sc, counts, &scan_occ, (int32_t)n_clauses, 0, 0);
                lo = l;
                hi = h;
            }
            if (rc) goto done;
        } else if (n_scan) {
            /* existence only can stop early; the window and the estimate need every occurrence */
            int stop = (D < 0 && !sampled) ? n_scan : 0;
            if ((rc = scan_range(s, w, a, b, &sc, counts, D >= 0 ? &scan_occ : NULL, (int32_t)n_clauses, stop, 0)))
                goto done;
        }
        for (int64_t c = 0; c < n_clauses && ok; c++) {
            if (cl[c].mode == MODE_SORTED) {
                const int64_t *p = cl[c].pos + cl[c].off[sh];
                int64_t np = cl[c].off[sh + 1] - cl[c].off[sh], k = lower_bound(p, np, a);
                ok = k < np && p[k] < b;
            } else if (cl[c].mode == MODE_SCAN || (c == anchor && sampled)) {
                ok = counts[c] > 0;
            }
        }
        if (ok && D >= 0) { /* all occurrences of every clause in [a, b), then the window */
            merged.n = 0;
            for (int64_t k = 0; k < scan_occ.n && !rc; k++) rc = occ_push(&merged, scan_occ.v[k].pos, scan_occ.v[k].tag);
            if (!sampled)
                for (uint64_t k = g0; k < i && !rc; k++) rc = occ_push(&merged, CAND_POS(cand[k]), (int32_t)anchor);
            for (int64_t c = 0; c < n_clauses && !rc; c++) {
                if (cl[c].mode != MODE_SORTED) continue;
                const int64_t *p = cl[c].pos + cl[c].off[sh];
                int64_t np = cl[c].off[sh + 1] - cl[c].off[sh];
                for (int64_t k = lower_bound(p, np, a); k < np && p[k] < b && !rc; k++)
                    rc = occ_push(&merged, p[k], (int32_t)c);
            }
            if (rc) goto done;
            qsort(merged.v, (size_t)merged.n, sizeof *merged.v, cmp_occ);
            ok = window_match(merged.v, merged.n, (int32_t)n_clauses, D);
        }
        if (!ok) continue;
        matches++;
        estimate += sampled ? wsum / (double)(counts[anchor] ? counts[anchor] : 1) : 1.0;
        if (n_written < cap) doc_ids[n_written++] = shard_base[sh] + d;
    }
    stats->num_matches = matches;
    stats->estimate = sampled ? estimate : (double)matches;
    *n_out = n_written;

done:
    if (rc == IG_ERR_NOMEM) ig_fail(err, errlen, rc, "search: out of memory");
    else if (rc && rc != IG_OK) ig_fail(err, errlen, rc, "search: internal error");
    for (int64_t c = 0; cl && c < n_clauses; c++) {
        free(cl[c].pos);
        free(cl[c].off);
    }
    free(cl);
    free(rng);
    free(shard_base);
    free(cand);
    free(cand_tmp);
    free(scan_occ.v);
    free(merged.v);
    return rc;
}

/* ---------------------------------------------------------------- spans of one document */

int ig_doc_spans(const ig_index *ix, int shard, int64_t doc, const uint32_t *ids,
                 const int64_t *term_off, int64_t n_terms, int64_t *offsets, int32_t *terms,
                 int64_t cap, int64_t *n_out, char *err, size_t errlen) {
    int rc = check_cnf(ix, ids, term_off, n_terms, NULL, 0, err, errlen);
    if (rc) return rc;
    if (shard < 0 || shard >= ix->n_shards)
        return ig_fail(err, errlen, IG_ERR_ARG, "shard %d out of range (index has %d)", shard, ix->n_shards);
    const ig_shard *s = &ix->shards[shard];
    if (doc < 0 || doc >= s->num_docs)
        return ig_fail(err, errlen, IG_ERR_ARG, "document %lld out of range (shard has %lld)", (long long)doc,
                       (long long)s->num_docs);
    scanner sc;
    memset(&sc, 0, sizeof sc);
    for (int64_t t = 0; t < n_terms; t++) scanner_add(&sc, ids + term_off[t], term_off[t + 1] - term_off[t], (int32_t)t);
    if (cap < 0) return ig_fail(err, errlen, IG_ERR_ARG, "spans: negative capacity %lld", (long long)cap);
    occ_buf occ = {0};
    int64_t a = doc_start(s, doc), b = doc_start(s, doc + 1);
    /* one hit more than fits tells that the list is cut: memory and time follow cap, not the
       document (a run of 200k tokens and 256 n-grams of it held 51.2M hits) */
    rc = scan_range(s, ix->token_width, a, b, &sc, NULL, &occ, 0, 0, cap < INT64_MAX ? cap + 1 : cap);
    if (rc) {
        free(occ.v);
        return ig_fail(err, errlen, rc, "spans: out of memory");
    }
    /* the scan emits by position, terms in query order at one position: already sorted */
    int more = occ.n > cap;
    if (more) occ.n = cap;
    *n_out = occ.n;
    for (int64_t k = 0; k < occ.n; k++) {
        offsets[k] = occ.v[k].pos - a;
        terms[k] = occ.v[k].tag;
    }
    free(occ.v);
    return more ? ig_fail(err, errlen, IG_ERR_CAPACITY, "the document has more than %lld matches", (long long)cap)
                : IG_OK;
}
