/* infinigram_search.h - document search (the paper's SEARCHDOC, App. A.4-A.5): which documents
 * contain an n-gram, or satisfy a CNF of n-grams (an AND of clauses, each an OR of n-grams).
 * (Part of infinigram.h: include that.)
 *
 * A CNF crosses the API flat: term k is ids[term_off[k] .. term_off[k+1]) (at least one token),
 * clause c is terms clause_off[c] .. clause_off[c+1]) (at least one term), clause_off[0] == 0 and
 * clause_off[n_clauses] == n_terms.
 *
 * Semantics: a document matches when every clause has at least one of its n-grams occurring in
 * it; with max_diff_tokens >= 0, when moreover one occurrence per clause can be picked so that
 * their start positions are all within max_diff_tokens tokens of each other.
 *
 * Method: the rarest clause (the "anchor") gives the candidate documents (suffix-array ranks ->
 * positions -> documents by binary search over docs.bin). Every other clause is checked exactly
 * per candidate, either against its sorted occurrence positions or, for frequent clauses, by
 * scanning the candidate document. Only the anchor is ever sampled: when it has more than
 * max_clause_freq occurrences, max_clause_freq of them are drawn (stratified over the suffix
 * array, seeded) and the number of matching documents is estimated without bias (each sampled
 * occurrence of a matching document d weighs (stratum size) / (anchor occurrences in d)).
 */
#ifndef INFINIGRAM_SEARCH_H
#define INFINIGRAM_SEARCH_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define IG_SEARCH_MAX_CLAUSES 64
#define IG_SEARCH_MAX_TERMS 256
#define IG_SEARCH_MAX_CLAUSE_FREQ 67108864 /* 2^26 */

typedef struct {
    uint64_t max_clause_freq; /* 1 .. IG_SEARCH_MAX_CLAUSE_FREQ: anchor occurrences examined */
    int64_t max_diff_tokens;  /* -1: anywhere in the document */
    uint64_t seed;            /* for sampling the anchor when it is too frequent */
    int check;                /* how other clauses are checked: IG_SEARCH_CHECK_* (tests, benchmarks) */
} ig_search_opts;

#define IG_SEARCH_CHECK_AUTO 0   /* by cost: sorted positions if cheaper than scanning candidates */
#define IG_SEARCH_CHECK_SORTED 1 /* sorted positions whenever count <= max_clause_freq */
#define IG_SEARCH_CHECK_SCAN 2   /* always scan the candidate documents */

typedef struct {
    uint64_t num_matches;  /* matching documents found (all of them unless approximate) */
    double estimate;       /* estimated number of matching documents (== num_matches if exact) */
    int approximate;       /* the anchor clause was sampled */
    int64_t anchor_clause; /* index of the rarest clause */
    uint64_t anchor_count; /* its occurrences (sum over its n-grams and all shards) */
    uint64_t anchor_used;  /* occurrences examined (== anchor_count unless sampled) */
} ig_search_stats;

/* Matching documents as global ids (shard-major, i.e. increasing) into doc_ids[0..cap);
   *n_out = number written. cap >= max_clause_freq always suffices (a match needs a candidate).
   A clause with zero occurrences gives no match (and no error). */
int ig_search_docs(const ig_index *ix, const uint32_t *ids, const int64_t *term_off, int64_t n_terms,
                   const int64_t *clause_off, int64_t n_clauses, const ig_search_opts *opts,
                   int64_t *doc_ids, int64_t cap, int64_t *n_out, ig_search_stats *stats,
                   char *err, size_t errlen);

/* Every occurrence of terms 0..n_terms-1 (same flat layout) inside document `doc` of `shard`:
   offsets (from the document start, increasing; ties by term) and term indexes, *n_out of them.
   When the document holds more than cap, the first cap are written (*n_out = cap) and
   IG_ERR_CAPACITY is returned: work and memory follow cap, never the number of matches. */
int ig_doc_spans(const ig_index *ix, int shard, int64_t doc, const uint32_t *ids,
                 const int64_t *term_off, int64_t n_terms, int64_t *offsets, int32_t *terms,
                 int64_t cap, int64_t *n_out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_SEARCH_H */
