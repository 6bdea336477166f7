/* infinigram_index.h - opening an index; its sizes, suffix-array positions and documents (part
 * of infinigram.h: include that).
 */
#ifndef INFINIGRAM_INDEX_H
#define INFINIGRAM_INDEX_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

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
/* The same where some shards are official infini-gram shards (infini-gram 2.6.0's layout:
   tokenized{suffix}, table{suffix}, offset{suffix} in the shard's directory, e.g. suffix ".0",
   or "" for unsuffixed names), served in place: nothing is written or converted. Entry i of
   official_suffixes (or the whole array) NULL: shard i is ours. Official files hold neither
   token width nor vocabulary, so token_width (1, 2, 4) and vocab_size are the caller's; our
   shards must agree with them. An official shard's unigram is counted at open (one walk over
   its suffix array: a binary search per distinct token). */
int ig_open_mixed_at(ig_index **out, const int *shard_dirfds, const char *const *shard_names,
                     const char *const *official_suffixes, int n_shards, int token_width, uint32_t vocab_size,
                     char *err, size_t errlen);
/* The same, where an official shard i may take a sidecar (`infinigram-hf prepare`): the
   directory sidecar_dirfds[i] (-1 or a NULL array: none) holding sa.bin, unigram.bin and
   optionally ntdcache.bin of our format over the shard's documents. The shard then reads its
   tokens and document offsets from the official files and orders its suffixes by id, as ours
   do, through the sidecar's suffix array (the official table is then only size-checked), so
   every query of our format works on it. The sidecar's headers must match the shard's sizes.
   flags: IG_OPEN_HUB_LINKS also opens index files that are huggingface_hub cache links (exactly
   "../../blobs/<hex hash>", relative: a snapshot folder of its cache) by their target. */
#define IG_OPEN_HUB_LINKS 1
int ig_open_official_at(ig_index **out, const int *shard_dirfds, const char *const *shard_names,
                        const char *const *official_suffixes, const int *sidecar_dirfds,
                        const char *const *sidecar_names, int n_shards, int token_width, uint32_t vocab_size,
                        int flags, char *err, size_t errlen);
/* 1 when some shard of ix is an official one read in place whose suffixes are in the official
   engine's byte order (no sidecar): the smoothed LM, count-of-counts and differences refuse it. */
int ig_index_has_official(const ig_index *ix);
void ig_close(ig_index *ix);

/* How a query steps through the shards of a multi-shard index. AUTO (the default): one after
   another while the index is warm; all at once, on a pool of one thread per shard kept by the
   index (started at the first need, joined by ig_close), while its steps are slow enough to be
   reading the device (cold). PARALLEL: always on the pool; SERIAL: never. Answers are the same
   in every mode. ig_set_shard_mode returns IG_OK or IG_ERR_ARG (an unknown mode). */
#define IG_SHARDS_SERIAL 0
#define IG_SHARDS_PARALLEL 1
#define IG_SHARDS_AUTO 2
int ig_set_shard_mode(ig_index *ix, int mode);
int ig_get_shard_mode(const ig_index *ix);
/* Steps (one search, narrowing or walk over every shard) run on the pool so far: shows whether
   and how often AUTO chose it. */
int64_t ig_shard_pool_steps(const ig_index *ix);

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

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_INDEX_H */
