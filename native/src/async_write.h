/* async_write.h - file writes done by a background thread, in order. */
#ifndef IG_ASYNC_WRITE_H
#define IG_ASYNC_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ig_awriter ig_awriter;

/* A writer thread for fd (which stays the caller's). NULL when no thread could be started:
   write synchronously instead. */
ig_awriter *ig_aw_new(int fd);

/* Queue a write of bytes [0, n) of src at file offset off; with pack = p in 1..3, src holds
   n / 4 int32 values (n a multiple of 4) written as their p low-order bytes each (little
   endian), at off. src must stay valid and unchanged until ig_aw_finish. Returns -1 (nothing
   queued) when a previous write failed or memory ran out. */
int ig_aw_put(ig_awriter *a, const void *src, size_t n, int64_t off, int pack);

/* Write all of p at offset off (retrying short and interrupted writes); 0 or -1. */
int ig_pwrite_all(int fd, const void *p, size_t n, int64_t off);

/* Wait for every queued write, stop the thread and free the writer. 0 when all of them were
   written, else -1 (the file's contents are then undefined). */
int ig_aw_finish(ig_awriter *a);

#endif
