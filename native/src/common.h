/* common.h - internal structures shared by the core's .c files (not part of the public API). */
#ifndef IG_COMMON_H
#define IG_COMMON_H

#include <stdarg.h>
#include <string.h>

#include "infinigram.h"

/* Every binary index file starts with this 64-byte little-endian header. */
typedef struct {
    char magic[8];     /* "IGHF-TOK", "IGHF-SA\0", "IGHF-DOC", "IGHF-UNI" */
    uint32_t version;  /* IG_FORMAT_VERSION */
    uint32_t width;    /* bytes per element */
    uint64_t count;    /* number of elements */
    uint64_t aux1;     /* tokens: vocab_size; sa/docs: total_len; unigram: num_tokens */
    uint64_t aux2;     /* tokens: num_docs */
    uint8_t reserved[24];
} ig_header;

typedef struct {
    const uint8_t *base; /* whole mapped file */
    size_t size;
} ig_map;

/* Readahead policy (measured: eval/bench_cold.py, docs/PERFORMANCE.md). Files above this size are
   mapped MADV_RANDOM: a search touches a few scattered pages, and the default read-around
   fetched the device's read_ahead_kb (8 MiB here) per fault. Smaller files are read whole. */
#define IG_SMALL_FILE ((size_t)8 << 20)

/* index.c: before a sequential read of bytes [p, p + n) of mapping m (a document's tokens),
   ask for them in one go (MADV_WILLNEED), as MADV_RANDOM would fault them in page by page. */
void ig_will_read(const ig_map *m, const void *p, size_t n);

#define IG_NTC_DEPTHS 3 /* contexts of 1..3 tokens may be cached (ntd_cache.h) */

typedef struct {
    ig_map tok_map, sa_map, docs_map, uni_map;
    const uint8_t *tokens;   /* total_len tokens of token_width bytes */
    const uint8_t *sa;       /* num_tokens pointers of sa_width bytes (+8 bytes of padding) */
    const uint64_t *docs;    /* num_docs + 1 document start offsets, last = total_len */
    const uint64_t *uni;     /* n_uni (token, count) pairs sorted by token */
    int64_t *uni_start;      /* dense first-token SA ranks (vocab_size + 1) or NULL */
    int64_t *uni_rank;       /* else: first SA rank of each unigram entry (n_uni + 1) */
    int64_t total_len, num_tokens, num_docs, n_uni;
    int sa_width;
    uint64_t sa_mask;
    /* optional ntdcache.bin: precomputed distributions of short contexts (ntd_cache.h) */
    ig_map ntc_map;
    const int64_t *ntc_rec;  /* ntc_n records {depth, lo, hi, first entry} */
    const uint32_t *ntc_ent; /* ntc_entries (token, count) pairs */
    int64_t ntc_n, ntc_entries;
    int64_t ntc_min_count; /* contexts this frequent (depth 1..3) are all cached */
    int64_t *ntc_lo;        /* each record's lo, copied at open (sorted within a depth) */
    int64_t ntc_depth_at[IG_NTC_DEPTHS + 2]; /* first record of each depth 1..3 (and the end) */
    uint32_t *ntc_bucket;   /* per depth: first record of each bucket of 2^ntc_shift[d] ranks */
    int64_t ntc_bucket_at[IG_NTC_DEPTHS + 2]; /* where depth d's buckets start in ntc_bucket */
    int ntc_shift[IG_NTC_DEPTHS + 1];
    uint8_t *ntc_checked;   /* per record: 0 not yet, 1 entries valid, 2 corrupt (checked on first use) */
    uint32_t ntc_vocab, ntc_sep;
    /* An official infini-gram shard read in place (official.c); 0 for our own format. Its
       tokens are read at virtual positions shifted by one (the separator before each document
       becomes one after it; the end of the file is a virtual final separator, read but not
       mapped), its pointers are byte offsets, and its suffixes are ordered by byte-swapped ids
       with the end of the file first: see ig_key_at. */
    int links;               /* IG_LINKS_HUB when the index was opened with IG_OPEN_HUB_LINKS, else 0 */
    int official;
    int official_docs;       /* its tokens and offsets are official files (1 also with a sidecar,
                                whose suffix array orders by id: then official is 0) */
    int64_t tok_end;         /* positions [0, tok_end) are read from the mapping, others are separators */
    int64_t sa_fast_n;       /* ranks below this may load 8 bytes (our sa.bin is padded, theirs is not) */
    int sa_shift;            /* pointer >> sa_shift = file position (log2 token width for theirs) */
    int doc_shift;           /* likewise for docs[] */
    int64_t sa_bias;         /* subtracted from a pointer's position (1 for theirs) */
    uint64_t *uni_owned;     /* official: the unigram counted at open (else NULL) */
    int64_t *uni_key_rank;   /* official: first rank of each unigram entry (entries sorted by id, ranks by key) */
} ig_shard;

struct ig_shard_pool; /* shard_pool.h */

struct ig_index {
    int n_shards;
    ig_shard *shards;
    struct ig_shard_pool *pool; /* threads for cold multi-shard steps (NULL: one shard) */
    int token_width;
    uint32_t vocab_size, separator;
    uint64_t num_tokens, num_docs;
};

int ig_fail(char *err, size_t errlen, int code, const char *fmt, ...);

/* files.c: open `name` inside the directory dirfd for reading -- a regular file with one link,
   never through a symbolic link, never blocking; `dir` names the directory in messages. An
   absent optional file gives IG_OK with *fd_out = -1. */
struct stat;
/* or-ed into `optional`: also open huggingface_hub cache links (files.c) */
#define IG_LINKS_HUB 2
int ig_open_index_file(int dirfd, const char *dir, const char *name, int optional, int *fd_out,
                       struct stat *st, char *err, size_t errlen);
/* Create path as a new file for writing (any old file of that name is unlinked first, never
   truncated: another process may have it mapped). Returns the descriptor or -1 (errno set). */
int ig_create_index_file(const char *path);

static inline uint32_t ig_sep_for_width(int w) {
    return w == 1 ? 0xFFu : w == 2 ? 0xFFFFu : 0xFFFFFFFFu;
}

/* Token at position i of a shard; positions outside the array read as the separator, so a
   corrupted suffix-array pointer can never make a comparison read outside the mapping. */
static inline uint32_t ig_tok(const ig_shard *s, int w, int64_t i) {
    if ((uint64_t)i >= (uint64_t)s->tok_end) return ig_sep_for_width(w);
    switch (w) {
    case 1: return s->tokens[i];
    case 2: { uint16_t v; memcpy(&v, s->tokens + 2 * i, 2); return v; }
    default: { uint32_t v; memcpy(&v, s->tokens + 4 * i, 4); return v; }
    }
}

/* While building (an in-memory int32 suffix array over ranks [0, n)): the end of the run of
   ranks i.. whose suffixes start with the same token as rank i's, by binary search. */
static inline int64_t ig_first_token_run_end(const ig_shard *v, int width, const int32_t *sa, int64_t i, int64_t n) {
    uint32_t t = ig_tok(v, width, sa[i]);
    int64_t a = i + 1, b = n;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (ig_tok(v, width, sa[mid]) == t) a = mid + 1; else b = mid;
    }
    return a;
}

/* Suffix-array entry r as a token position, clamped into the token array (our file is padded
   by 8 bytes; an official table is not, so its last entries load only their own bytes). */
static inline int64_t ig_sa(const ig_shard *s, int64_t r) {
    uint64_t v;
    if (r < s->sa_fast_n) {
        memcpy(&v, s->sa + (size_t)r * (size_t)s->sa_width, 8);
        v &= s->sa_mask;
    } else {
        v = 0; /* (little-endian host: the low bytes come first) */
        memcpy(&v, s->sa + (size_t)r * (size_t)s->sa_width, (size_t)s->sa_width);
    }
    int64_t p = (int64_t)(v >> s->sa_shift) - s->sa_bias;
    return (uint64_t)p < (uint64_t)s->total_len ? p : s->total_len - 1;
}

/* Start of document d (d == num_docs: the end of the shard), clamped into the token array. */
static inline int64_t ig_doc_start(const ig_shard *s, int64_t d) {
    uint64_t v = s->official_docs && d >= s->num_docs ? (uint64_t)s->total_len : s->docs[d] >> s->doc_shift;
    return v > (uint64_t)s->total_len ? s->total_len : (int64_t)v;
}

/* The sort key of a token: suffixes are ordered by the keys of their tokens. Ours: the id.
   Official: the id's little-endian bytes read big-endian (their tables are sorted by memcmp),
   plus one, so that key 0 is free for the end of the file, which sorts before every token. */
static inline uint64_t ig_key_of(const ig_shard *s, int w, uint32_t t) {
    if (!s->official) return t;
    return (uint64_t)(w == 2 ? __builtin_bswap16((uint16_t)t) : w == 4 ? __builtin_bswap32(t) : t) + 1;
}
static inline uint64_t ig_key_at(const ig_shard *s, int w, int64_t i) {
    if (s->official && i == s->total_len - 1) return 0;
    return ig_key_of(s, w, ig_tok(s, w, i));
}

#endif
