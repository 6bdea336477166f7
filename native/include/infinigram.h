/* infinigram.h - the whole public C API of the infinigram_hf core.
 *
 * Conventions (see docs/FORMAT.md for the files):
 *  - Token ids cross the API as uint32_t whatever the on-disk width; lengths are explicit.
 *  - Every function returns IG_OK (0) or a negative IG_ERR_* code; when `err` is given it
 *    receives a NUL-terminated message of at most `errlen` bytes.
 *  - Handles are opaque and created/freed in pairs. An open index is read-only and safe to
 *    query from many threads at once. No global mutable state.
 *  - Outputs are caller-owned buffers with explicit capacities.
 */
#ifndef INFINIGRAM_H
#define INFINIGRAM_H

#include <stddef.h>
#include <stdint.h>

#define IG_OK 0
#define IG_ERR_ARG (-1)       /* bad argument (id out of range, NULL, bad length) */
#define IG_ERR_IO (-2)        /* open/read/write/mmap failed */
#define IG_ERR_FORMAT (-3)    /* a file is not a valid index file */
#define IG_ERR_NOMEM (-4)     /* allocation failed */
#define IG_ERR_CAPACITY (-5)  /* an output buffer is too small; *needed says how large */
#define IG_ERR_LIMIT (-6)     /* a work cap was hit */
#define IG_ERR_CANCELLED (-7) /* the caller set the call's cancel flag */

#define IG_FORMAT_VERSION 1
#define IG_HEADER_SIZE 64
#define IG_MAX_SHARD_TOKENS ((int64_t)2147483646) /* SA-IS works on int32 positions */

/* ------------------------------------------------------------------ building a shard */

typedef struct ig_writer ig_writer;

/* Start a shard in directory `dir` (must exist). token_width is 1, 2 or 4 bytes; valid ids are
   [0, vocab_size) and vocab_size <= separator = 2^(8*token_width) - 1. */
int ig_writer_new(ig_writer **out, const char *dir, int token_width, uint32_t vocab_size,
                  char *err, size_t errlen);
/* Append n_docs documents: document i is ids[offsets[i] .. offsets[i+1]) (offsets has n_docs+1
   entries, offsets[0] may be nonzero). Every id is checked against vocab_size. */
int ig_writer_add_docs(ig_writer *w, const uint32_t *ids, const int64_t *offsets,
                       int64_t n_docs, char *err, size_t errlen);
/* The same with ids of id_width bytes each (1, 2 or 4: uint8/uint16/uint32), so callers need not
   widen their arrays. */
int ig_writer_add_docs_w(ig_writer *w, const void *ids, int id_width, const int64_t *offsets,
                         int64_t n_docs, char *err, size_t errlen);
/* Append one document in parts, so that a very long one need not be held whole by the caller:
   the first call starts it, every call appends ids[0..n) (ids of id_width bytes, checked against
   vocab_size), and the call with end_doc != 0 ends it (its separator). Until it is ended,
   ig_writer_add_docs_w and ig_writer_finish refuse, and ig_writer_total_len does not count
   its separator yet. */
int ig_writer_add_part_w(ig_writer *w, const void *ids, int id_width, int64_t n, int end_doc,
                         char *err, size_t errlen);
/* Tokens (separators included) held so far: what a shard's memory budget is measured on. */
int64_t ig_writer_total_len(const ig_writer *w);
int64_t ig_writer_num_docs(const ig_writer *w);
/* Build the suffix array and write tokens.bin, sa.bin, docs.bin, unigram.bin into the
   directory. The writer is spent afterwards (free it). */
int ig_writer_finish(ig_writer *w, char *err, size_t errlen);
void ig_writer_free(ig_writer *w);
/* Bytes of memory a shard of `total_len` tokens needs at peak while finishing. */
int64_t ig_writer_peak_bytes(int64_t total_len, int token_width);

/* ------------------------------------------------------------------ opening */

typedef struct ig_index ig_index;

/* Open and validate shards (each a directory written by ig_writer_finish). All shards must
   agree on token width and vocab size. The files are memory-mapped, not read. Each file is
   opened inside its shard directory without following links or blocking, and must be a regular
   file with one link (a link, FIFO or hard-linked file is IG_ERR_FORMAT naming it). */
int ig_open(ig_index **out, const char *const *shard_dirs, int n_shards, char *err,
            size_t errlen);
/* The same for shard directories the caller opened (descriptors; `shard_names` name them in
   messages): with directories opened relative to each other without following links, nothing
   of the index is ever reached through a link. The descriptors stay the caller's. */
int ig_open_at(ig_index **out, const int *shard_dirfds, const char *const *shard_names, int n_shards,
               char *err, size_t errlen);
void ig_close(ig_index *ix);

typedef struct {
    int token_width;
    uint32_t vocab_size;
    uint32_t separator;
    int n_shards;
    uint64_t num_tokens; /* separators excluded */
    uint64_t num_docs;
} ig_info;
void ig_get_info(const ig_index *ix, ig_info *info);
/* Per-shard sizes: num_tokens (separators excluded), total_len (included), num_docs, sa width. */
int ig_shard_info(const ig_index *ix, int shard, uint64_t *num_tokens, uint64_t *total_len,
                  uint64_t *num_docs, int *sa_width);

/* ------------------------------------------------------------------ exact queries */

/* Suffix-array range [lo[s], hi[s]) of the n-gram in every shard s (arrays of n_shards). */
int ig_find(const ig_index *ix, const uint32_t *q, int64_t len, int64_t *lo, int64_t *hi,
            char *err, size_t errlen);
int ig_count(const ig_index *ix, const uint32_t *q, int64_t len, uint64_t *count, char *err,
             size_t errlen);

/* Next-token distribution after the n-gram q (fixed n = len + 1). Writes up to `cap` distinct
   next tokens in increasing id order with their counts; an occurrence that ends its document
   is counted under the separator id (last, as it is the largest id). *n_out = number written,
   *total = count of q. With cap too small returns IG_ERR_CAPACITY and *n_out = entries needed.
   vocab_size + 1 entries always suffice. */
int ig_ntd(const ig_index *ix, const uint32_t *q, int64_t len, uint32_t *tokens,
           uint64_t *counts, int64_t cap, int64_t *n_out, uint64_t *total, char *err,
           size_t errlen);

/* ∞-gram: the longest suffix of the prompt with a non-zero count (0 = empty suffix, which
   gives the unigram over all tokens). */
int ig_infgram_suffix(const ig_index *ix, const uint32_t *prompt, int64_t len,
                      int64_t *suffix_len, char *err, size_t errlen);

/* P_∞(token | prompt) pieces: count of (suffix + token), count of the suffix, the suffix length
   and whether the estimate is sparse (exactly one distinct next token). */
typedef struct {
    uint64_t count;        /* cnt(suffix + token) */
    uint64_t prompt_count; /* cnt(suffix) */
    int64_t suffix_len;
    int sparse;
} ig_prob;
int ig_infgram_prob(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                    ig_prob *out, char *err, size_t errlen);
/* Fixed-n probability (no backoff): suffix_len = len. */
int ig_ngram_prob(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                  ig_prob *out, char *err, size_t errlen);

/* Dense scoring: for every position i of ids[0..n), P_∞(ids[i] | ids[0..i)) as the pair
   num[i] / den[i], the suffix length (effective n - 1) and the sparse flag. Amortized: about
   one narrowing search per token. Outputs are arrays of n entries (sparse may be NULL). */
int ig_score(const ig_index *ix, const uint32_t *ids, int64_t n, uint64_t *num, uint64_t *den,
             int64_t *suffix_len, uint8_t *sparse, char *err, size_t errlen);

/* Map a corpus position (token offset inside shard) to (document index inside that shard,
   offset inside the document). */
int ig_locate(const ig_index *ix, int shard, int64_t pos, int64_t *doc, int64_t *offset,
              char *err, size_t errlen);
/* Suffix-array entry rank -> token position in shard. */
int ig_sa_position(const ig_index *ix, int shard, int64_t rank, int64_t *pos, char *err,
                   size_t errlen);
/* Copy document `doc` of `shard` (separator excluded) into out[0..cap); *len_out = its length
   (IG_ERR_CAPACITY if cap is too small). */
int ig_get_doc(const ig_index *ix, int shard, int64_t doc, uint32_t *out, int64_t cap,
               int64_t *len_out, char *err, size_t errlen);

const char *ig_strerror(int code);

#endif /* INFINIGRAM_H */
