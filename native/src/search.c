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

#include "infinigram_search.h"
#include "query_internal.h"

/* ---------------------------------------------------------------- small helpers */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Start of document d of a shard, clamped into the token array (docs.bin is not trusted). */
static int64_t doc_start(const ig_shard *s, int64_t d) {
    uint64_t v = s->docs[d];
    return v > (uint64_t)s->total_len ? s->total_len : (int64_t)v;
}

/* Document containing position pos: the last d with start(d) <= pos. */
static int64_t doc_of(const ig_shard *s, int64_t pos) {
    int64_t a = 0, b = s->num_docs;
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if (doc_start(s, mid) <= pos) a = mid; else b = mid;
    }
    return a;
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
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

/* The terms looked for by a scan, with a 1024-bit filter on their first tokens so that most
   positions cost one token read and one bit test. */
typedef struct {
    int64_t n;
    const uint32_t *q[IG_SEARCH_MAX_TERMS];
    int64_t len[IG_SEARCH_MAX_TERMS];
    int32_t tag[IG_SEARCH_MAX_TERMS];
    uint64_t filter[16];
} scanner;

static inline unsigned filter_bit(uint32_t t) { return (unsigned)((t * 2654435761u) >> 22); }

static void scanner_add(scanner *sc, const uint32_t *q, int64_t len, int32_t tag) {
    sc->q[sc->n] = q;
    sc->len[sc->n] = len;
    sc->tag[sc->n++] = tag;
    unsigned b = filter_bit(q[0]);
    sc->filter[b >> 6] |= (uint64_t)1 << (b & 63);
}

/* Occurrences of the scanner's terms starting in [a, b) of a shard. For each hit: counts[tag]++
   (when counts), and (pos, tag) appended to out (when out). With stop_tags > 0 the scan ends as
   soon as that many distinct tags were seen (existence checks). */
static int scan_range(const ig_shard *s, int w, int64_t a, int64_t b, const scanner *sc,
                      uint64_t *counts, occ_buf *out, int32_t n_tags, int stop_tags) {
    uint8_t seen[IG_SEARCH_MAX_TERMS] = {0};
    int n_seen = 0;
    for (int64_t i = a; i < b; i++) {
        uint32_t t = ig_tok(s, w, i);
        unsigned fb = filter_bit(t);
        if (!(sc->filter[fb >> 6] >> (fb & 63) & 1)) continue;
        for (int64_t k = 0; k < sc->n; k++) {
            const uint32_t *q = sc->q[k];
            if (q[0] != t) continue;
            int64_t m = sc->len[k], j = 1;
            /* terms hold no separator, so a match never runs past the document's end */
            while (j < m && ig_tok(s, w, i + j) == q[j]) j++;
            if (j < m) continue;
            int32_t tag = sc->tag[k];
            if (counts) counts[tag]++;
            if (out && occ_push(out, i, tag)) return IG_ERR_NOMEM;
            if (tag < n_tags && !seen[tag]) {
                seen[tag] = 1;
                if (stop_tags > 0 && ++n_seen >= stop_tags) return IG_OK;
            }
        }
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
        int64_t len = term_off[k + 1] - term_off[k];
        if (term_off[k] < 0 || len < 1)
            return ig_fail(err, errlen, IG_ERR_ARG, "query: n-gram %lld is empty", (long long)k);
        int rc = check_ids(ix, ids + term_off[k], len, "query n-gram", err, errlen);
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

typedef struct {
    int32_t shard;
    int64_t pos;
    double w; /* inverse inclusion probability (1 when every occurrence is examined) */
} cand_t;

static int cmp_cand(const void *x, const void *y) {
    const cand_t *a = x, *b = y;
    if (a->shard != b->shard) return (a->shard > b->shard) - (a->shard < b->shard);
    return (a->pos > b->pos) - (a->pos < b->pos);
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
                             uint64_t total, uint64_t m, uint64_t seed, cand_t *out) {
    int S = ix->n_shards;
    int64_t n_ranges = (t1 - t0) * S;
    uint64_t state = seed, base = 0;
    int64_t j = 0; /* current range (term-major) */
    for (uint64_t k = 0; k < m; k++) {
        uint64_t idx, w = 1;
        if (m == total) {
            idx = k;
        } else { /* stratum [k*N/m, (k+1)*N/m) without overflow: N/m and N%m parts */
            uint64_t q = total / m, r = total % m;
            uint64_t lo = k * q + (k * r) / m, hi = (k + 1) * q + ((k + 1) * r) / m;
            w = hi - lo;
            idx = lo + splitmix64(&state) % w;
        }
        for (;;) { /* ranges are visited in order and idx only grows */
            const ig_range *r = &rng[t0 * S + j];
            uint64_t size = (uint64_t)(r->hi - r->lo);
            if (idx < base + size) break;
            base += size;
            j++;
            if (j >= n_ranges) return IG_ERR_ARG; /* cannot happen: total is the sum of sizes */
        }
        int shard = (int)(j % S);
        const ig_shard *s = &ix->shards[shard];
        out[k].shard = shard;
        out[k].pos = ig_sa(s, rng[t0 * S + j].lo + (int64_t)(idx - base));
        out[k].w = (double)w;
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
        qsort(c->pos + c->off[sh], (size_t)(n - c->off[sh]), sizeof(int64_t), cmp_i64);
    }
    c->off[S] = n;
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
    const int64_t D = opts->max_diff_tokens;
    const uint64_t maxfreq = opts->max_clause_freq;
    ig_range *rng = malloc((size_t)n_terms * (size_t)S * sizeof *rng);
    clause_t *cl = calloc((size_t)n_clauses, sizeof *cl);
    int64_t *shard_base = malloc(((size_t)S + 1) * sizeof(int64_t));
    cand_t *cand = NULL;
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
                ig_range r = find_in_shard(&ix->shards[sh], w, ids + term_off[t], term_off[t + 1] - term_off[t]);
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
    if (!cand) { rc = IG_ERR_NOMEM; goto done; }
    if ((rc = anchor_candidates(ix, rng, clause_off[anchor], clause_off[anchor + 1], N, m, opts->seed, cand)))
        goto done;
    qsort(cand, (size_t)m, sizeof *cand, cmp_cand);

    /* Total length of the candidate documents: what scanning a clause would cost. */
    uint64_t cand_len = 0;
    for (uint64_t i = 0; i < m;) {
        const int sh = cand[i].shard;
        const ig_shard *s = &ix->shards[sh];
        int64_t d = doc_of(s, cand[i].pos), end = doc_start(s, d + 1);
        cand_len += (uint64_t)(end - doc_start(s, d));
        while (i < m && cand[i].shard == sh && cand[i].pos < end) i++;
    }

    /* 3. how each other clause is checked: sorted positions when that is cheaper than scanning
       the candidates (about 30 scanned tokens cost one random suffix-array read plus sorting). */
    scanner sc;
    memset(&sc, 0, sizeof sc);
    int n_scan = 0;
    cl[anchor].mode = MODE_ANCHOR;
    for (int64_t c = 0; c < n_clauses; c++) {
        if (c == anchor) {
            if (!sampled) continue;
            /* a sampled anchor is scanned: its occurrences per document weigh the estimate */
        } else if (opts->check != IG_SEARCH_CHECK_SCAN && cl[c].count <= maxfreq &&
                   (opts->check == IG_SEARCH_CHECK_SORTED || cl[c].count * 32 <= cand_len)) {
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
        const int sh = cand[i].shard;
        const ig_shard *s = &ix->shards[sh];
        const int64_t d = doc_of(s, cand[i].pos);
        const int64_t a = doc_start(s, d), b = doc_start(s, d + 1);
        uint64_t g0 = i;
        double wsum = 0.0;
        while (i < m && cand[i].shard == sh && cand[i].pos < b) wsum += cand[i++].w;

        int ok = 1;
        uint64_t counts[IG_SEARCH_MAX_CLAUSES] = {0};
        scan_occ.n = 0;
        if (n_scan) {
            /* existence only can stop early; the window and the estimate need every occurrence */
            int stop = (D < 0 && !sampled) ? n_scan : 0;
            if ((rc = scan_range(s, w, a, b, &sc, counts, D >= 0 ? &scan_occ : NULL, (int32_t)n_clauses, stop)))
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
                for (uint64_t k = g0; k < i && !rc; k++) rc = occ_push(&merged, cand[k].pos, (int32_t)anchor);
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
    occ_buf occ = {0};
    int64_t a = doc_start(s, doc), b = doc_start(s, doc + 1);
    rc = scan_range(s, ix->token_width, a, b, &sc, NULL, &occ, 0, 0);
    if (rc) {
        free(occ.v);
        return ig_fail(err, errlen, rc, "spans: out of memory");
    }
    /* the scan emits by position, terms in query order at one position: already sorted */
    *n_out = occ.n;
    if (occ.n > cap) {
        free(occ.v);
        return ig_fail(err, errlen, IG_ERR_CAPACITY, "document has %lld matches", (long long)occ.n);
    }
    for (int64_t k = 0; k < occ.n; k++) {
        offsets[k] = occ.v[k].pos - a;
        terms[k] = occ.v[k].tag;
    }
    free(occ.v);
    return IG_OK;
}
