/* infinigram_draft.h - draft continuations for speculative decoding (part of infinigram.h:
 * include that).
 *
 * A drafter proposes the next few tokens cheaply; the model verifies them all in one forward
 * pass and keeps the prefix it agrees with. Two sources:
 *
 *  - the ∞-gram (ig_draft_chain): from a decoding state (infinigram_state.h, the longest suffix
 *    of the context that occurs in the corpus), repeatedly take the most frequent next token of
 *    the matched suffix and narrow the suffix-array ranges by it. The match only grows along
 *    the draft, so each drafted token costs one narrowing (a binary search in a range that
 *    shrinks) and the walk of a small range. It stops when the continuation becomes rare
 *    (count), uncertain (its share of the context's occurrences, or the product of those
 *    shares along the draft) or when the draft is long enough.
 *  - the sequence itself (ig_draft_lookup): prompt lookup, the longest suffix of the sequence
 *    that also occurs earlier in it, and what followed that occurrence.
 *
 * Most frequent next token: exact (a walk over the range) when the matched suffix occurs at
 * most IG_DRAFT_EXACT_MAX times; above that, the tokens hit by IG_DRAFT_SAMPLES evenly spaced
 * ranks are the candidates and the best few are counted exactly. Any token holding more than
 * 1/IG_DRAFT_SAMPLES of the occurrences is always among the candidates (ranks are sorted by the
 * next token), so a confident draft is never missed; counts reported are always exact.
 */
#ifndef INFINIGRAM_DRAFT_H
#define INFINIGRAM_DRAFT_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define IG_DRAFT_EXACT_MAX 2048
#define IG_DRAFT_SAMPLES 64

/* Every call here that takes a decoding state takes its length in int64 values too (state_len,
   checked as in infinigram_state.h: ig_state_size(ix), or ig_diff_state_size over a difference;
   any other length is IG_ERR_ARG). */

/* Greedy ∞-gram draft from a decoding state (ig_state_size(ix) values; suffix_len 0 drafts
   nothing). Token i of the draft is the most frequent continuation of the matched suffix
   followed by tokens 0..i-1; counts[i] = occurrences of that continuation, totals[i] =
   occurrences of its context (so counts[i] / totals[i] is its ∞-gram probability). The draft
   stops before a token with counts < min_count, counts / totals < min_share, or a running
   product of shares < min_joint, and after max_tokens tokens. A document end (the separator)
   as the most frequent continuation is drafted as eos_id and ends the draft (eos_id < 0: the
   draft ends before it). tokens/counts/totals hold max_tokens entries (counts/totals may be
   NULL); *n_out = tokens drafted. */
int ig_draft_chain(const ig_index *ix, const int64_t *state, int64_t state_len, int64_t max_tokens,
                   uint64_t min_count, double min_share, double min_joint, int64_t eos_id, uint32_t *tokens,
                   uint64_t *counts, uint64_t *totals, int64_t *n_out, char *err, size_t errlen);

/* The (up to) k most frequent next tokens of a state's matched suffix, most frequent first
   (ties: smaller id), with their exact counts and the states of context + token
   (child_states: k * state_len values, may be NULL). A document end is reported as
   the separator id and has no state (its row is left as the parent's). *total = occurrences
   of the matched suffix; *n_out = tokens written. With more than IG_DRAFT_EXACT_MAX
   occurrences the list holds the sampled candidates only (see above). */
int ig_draft_children(const ig_index *ix, const int64_t *state, int64_t state_len, int64_t k, uint32_t *tokens,
                      uint64_t *counts, int64_t *child_states, uint64_t *total, int64_t *n_out, char *err,
                      size_t errlen);

/* The state of ctx[0..len) from `state`, that of ctx[0..len - n_new): the last n_new tokens
   added one by one (a narrowing each while the match grows, a bounded backoff search when it
   does not). ctx may be any tail of the context holding the state's matched suffix and the new
   tokens. out (state_len values) may alias state. */
int ig_draft_advance(const ig_index *ix, const int64_t *state, int64_t state_len, const uint32_t *ctx, int64_t len,
                     int64_t n_new, int64_t *out, char *err, size_t errlen);

/* Best-first token tree from a state: nodes are added in order of their estimated probability
   (the product of ∞-gram shares count / total along the path from the root), the candidates
   below a node being the `width` most frequent continuations of its context. Stops after
   max_nodes nodes or when the best remaining candidate's probability is below min_prob; paths
   are at most max_depth deep. tokens/parents/probs hold max_nodes entries; parents[i] is -1 for
   a child of the root, else an earlier node. A document end becomes a leaf drafted as eos_id
   (none when eos_id < 0). A state with suffix_len 0 gives no tree. */
int ig_draft_tree(const ig_index *ix, const int64_t *state, int64_t state_len, int64_t max_nodes, int64_t max_depth,
                  int64_t width, double min_prob, int64_t eos_id, int64_t *tokens, int64_t *parents, double *probs,
                  int64_t *n_out, char *err, size_t errlen);

/* Prompt lookup over seq[0..n) (any int64 ids, no index needed): the longest suffix of seq,
   between min_len and max_len tokens, that also ends at an earlier position j < n - 1 (the
   most recent such j on ties). The draft is what followed it, seq[j+1 ..], continued
   periodically past the end of seq (a repeated pattern keeps repeating), at most max_tokens
   ids into out. Returns the match length (0 = none; *n_out = 0). *pos_out = j (may be NULL). */
int64_t ig_draft_lookup(const int64_t *seq, int64_t n, int64_t min_len, int64_t max_len, int64_t max_tokens,
                        int64_t *out, int64_t *n_out, int64_t *pos_out);

/* ------------------------------------------------------------------ one decoding step */

/* Where a step's draft comes from (ig_draft_params.source). */
#define IG_DRAFT_LONGEST 0       /* the longer match wins (ties: the ∞-gram) */
#define IG_DRAFT_LOOKUP_FIRST 1  /* prompt lookup when it has a draft, else the ∞-gram */
#define IG_DRAFT_INFGRAM_FIRST 2 /* the ∞-gram when it has a draft, else prompt lookup */
#define IG_DRAFT_INFGRAM 3       /* the ∞-gram only */
#define IG_DRAFT_LOOKUP 4        /* prompt lookup only */

typedef struct {
    int64_t max_draft;   /* most tokens drafted */
    int64_t min_match;   /* the ∞-gram drafts only from a matched suffix at least this long */
    double match_ratio;  /* draft cap = ceil(match_ratio * match length) (0: max_draft) */
    uint64_t min_count;  /* ig_draft_chain's thresholds */
    double min_share;
    double min_joint;
    int64_t lookup_min;  /* prompt-lookup match lengths considered; lookup_min <= 0: no lookup */
    int64_t lookup_max;
    int source;          /* IG_DRAFT_* */
    int64_t eos_id;      /* document boundary in seq, and what a corpus document end drafts as (-1: none) */
    int64_t infgram_cap; /* per-call caps of each source's draft (< 0: none; 0: the source is off), */
    int64_t lookup_cap;  /* e.g. from how well the source's drafts have been accepted lately */
} ig_draft_params;

/* One step of a decoding loop for one sequence seq[0..n) (model ids, int64): first the state
   (the ∞-gram decoding state of seq without its last n_new tokens, updated in place) is
   advanced through those tokens — an eos_id or an id >= the index's vocabulary starts a new
   document, whose context is empty — then the draft is made: prompt lookup over seq and the
   greedy ∞-gram chain from the state, combined as p->source says, capped by the match length
   rule and by max_tokens. out/counts/totals hold max_tokens entries (counts/totals: for ∞-gram
   drafts, else zeros; may be NULL). *source_out = IG_DRAFT_INFGRAM or IG_DRAFT_LOOKUP (or -1:
   no draft), *match_len = the match drafted from. ix may be NULL (prompt lookup only; state and
   state_len are then ignored, as they are when p->source is IG_DRAFT_LOOKUP). */
int ig_draft_step(const ig_index *ix, int64_t *state, int64_t state_len, const int64_t *seq, int64_t n,
                  int64_t n_new, const ig_draft_params *p, int64_t max_tokens, int64_t *out, uint64_t *counts,
                  uint64_t *totals, int64_t *n_out, int64_t *match_len, int *source_out, char *err, size_t errlen);

/* One decoding step for n rows at once: ig_draft_step for every row, the loop in C (threads as in
   infinigram_batch.h). Row i is seqs[i * seq_stride .. + lens[i]) (0 <= lens[i] <= seq_stride), its
   last n_new[i] tokens new, its state states[i * state_len ..] (n_state_values = n * state_len;
   updated in place; ignored, and may be NULL with 0 values, where ig_draft_step ignores it), at
   most max_tokens[i] tokens, caps[2 i] / caps[2 i + 1] its ∞-gram / lookup caps (caps NULL: those
   of p). Its draft goes to out[i * out_stride ..] (counts, totals alike; may be NULL), with
   n_out[i], match_len[i], source_out[i]; out_stride must hold min(max_tokens[i], p->max_draft).
   Every row's answer equals ig_draft_step's. On an error the states and outputs may be partly
   written (the message names the first row that failed). */
int ig_draft_step_batch(const ig_index *ix, int64_t *states, int64_t n_state_values, const int64_t *seqs,
                        int64_t seq_stride, const int64_t *lens, const int64_t *n_new, int64_t n,
                        const ig_draft_params *p, const int64_t *max_tokens, const int64_t *caps, int64_t *out,
                        uint64_t *counts, uint64_t *totals, int64_t out_stride, int64_t *n_out, int64_t *match_len,
                        int *source_out, int n_threads, char *err, size_t errlen);

/* The adaptive draft caps of a decoding loop (InfiniGramDrafter's rule), for n rows: with a
   per-token acceptance rate a = accepted[i] / (accepted[i] + rejected[i]) (1 when both are 0),
   caps[i] = max_draft when a >= 0.999, 0 when a <= verify_cost, else
   min(max_draft, (int64_t)(log(verify_cost) / log(a))). */
void ig_draft_adaptive_caps(const double *accepted, const double *rejected, int64_t n, int64_t max_draft,
                            double verify_cost, int64_t *caps);

/* ------------------------------------------------------------------ drafts over a difference */

/* The same calls over an index difference, plus minus minus (infinigram_diff.h): every count is
   the net count, the ∞-gram state is the longest suffix with a positive net count, and every
   draft, count, total, tree and match length is the one a single-shard index of the remaining
   documents would give (candidates sampled above IG_DRAFT_EXACT_MAX net occurrences are those
   of that index's evenly spaced ranks). A state of a difference holds
   ig_diff_state_size(plus, minus) values: [suffix_len, net count, plus's ranges, minus's ranges];
   make it with ig_diff_state_init. A negative net count met on the way fails with IG_ERR_ARG
   ("not a subset"). */
int64_t ig_diff_state_size(const ig_index *plus, const ig_index *minus);
int ig_diff_state_init(const ig_index *plus, const ig_index *minus, const uint32_t *ctx, int64_t len,
                       int64_t *state, int64_t state_len, char *err, size_t errlen);
int ig_diff_draft_step(const ig_index *plus, const ig_index *minus, int64_t *state, int64_t state_len,
                       const int64_t *seq, int64_t n, int64_t n_new, const ig_draft_params *p, int64_t max_tokens,
                       int64_t *out, uint64_t *counts, uint64_t *totals, int64_t *n_out, int64_t *match_len,
                       int *source_out, char *err, size_t errlen);
int ig_diff_draft_step_batch(const ig_index *plus, const ig_index *minus, int64_t *states, int64_t n_state_values,
                             const int64_t *seqs, int64_t seq_stride, const int64_t *lens, const int64_t *n_new,
                             int64_t n, const ig_draft_params *p, const int64_t *max_tokens, const int64_t *caps,
                             int64_t *out, uint64_t *counts, uint64_t *totals, int64_t out_stride, int64_t *n_out,
                             int64_t *match_len, int *source_out, int n_threads, char *err, size_t errlen);
int ig_diff_draft_chain(const ig_index *plus, const ig_index *minus, const int64_t *state, int64_t state_len,
                        int64_t max_tokens, uint64_t min_count, double min_share, double min_joint, int64_t eos_id,
                        uint32_t *tokens, uint64_t *counts, uint64_t *totals, int64_t *n_out, char *err,
                        size_t errlen);
int ig_diff_draft_children(const ig_index *plus, const ig_index *minus, const int64_t *state, int64_t state_len,
                           int64_t k, uint32_t *tokens, uint64_t *counts, int64_t *child_states, uint64_t *total,
                           int64_t *n_out, char *err, size_t errlen);
int ig_diff_draft_tree(const ig_index *plus, const ig_index *minus, const int64_t *state, int64_t state_len,
                       int64_t max_nodes, int64_t max_depth, int64_t width, double min_prob, int64_t eos_id,
                       int64_t *tokens, int64_t *parents, double *probs, int64_t *n_out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_DRAFT_H */
