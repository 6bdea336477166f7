/* infinigram_build.h - writing a shard (part of infinigram.h: include that). A shard is a
 * directory of files (docs/FORMAT.md) written by one ig_writer: documents in, then the suffix
 * array built and everything written by ig_writer_finish.
 */
#ifndef INFINIGRAM_BUILD_H
#define INFINIGRAM_BUILD_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ig_writer ig_writer;

/* Start a shard in directory `dir` (must exist). token_width is 1, 2 or 4 bytes; valid ids are
   [0, vocab_size) and vocab_size <= separator = 2^(8*token_width) - 1. */
int ig_writer_new(ig_writer **out, const char *dir, int token_width, uint32_t vocab_size,
                  char *err, size_t errlen);
/* Precompute the next-token distributions of 1- to 3-token contexts whose walk would take
   about min_cost suffix-array probes or more (file ntdcache.bin; default 2048; 0 = none). */
int ig_writer_set_ntd_cache(ig_writer *w, int64_t min_cost);
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
/* Build the suffix array and write tokens.bin, sa.bin, docs.bin, unigram.bin (and ntdcache.bin)
   into the directory. The writer is spent afterwards (free it). */
int ig_writer_finish(ig_writer *w, char *err, size_t errlen);
void ig_writer_free(ig_writer *w);
/* Bytes of memory a shard of `total_len` tokens needs at peak while finishing. */
int64_t ig_writer_peak_bytes(int64_t total_len, int token_width);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_BUILD_H */
