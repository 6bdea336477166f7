/* official.h - official infini-gram shards read in place (internal). */
#ifndef IG_OFFICIAL_H
#define IG_OFFICIAL_H

#include "common.h"

/* Map and validate the official shard whose files are tokenized{suffix}, table{suffix},
   offset{suffix} in dirfd; count its unigram when count_uni (a sidecar brings its own). */
int ig_official_open_shard(ig_shard *s, int dirfd, const char *dir, const char *suffix, int width, uint32_t vocab,
                           int count_uni, char *err, size_t errlen);
void ig_close_shard(ig_shard *s);

#endif
