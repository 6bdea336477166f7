/* prefault.h - a buffer whose pages a background thread faults in ahead of use. */
#ifndef IG_PREFAULT_H
#define IG_PREFAULT_H

#include <stddef.h>

typedef struct ig_prefault ig_prefault;

/* Reserve address space for up to max_bytes (no memory yet). NULL when that is not possible
   (no mmap, a strict overcommit policy, no thread): the caller allocates as usual.
   Pages are populated without changing their contents where the kernel can
   (MADV_POPULATE_WRITE), so the caller may write the buffer meanwhile; elsewhere the thread
   writes a zero into each page, which only `touch_ok` buffers (not written before
   ig_prefault_take) allow. */
ig_prefault *ig_prefault_new(size_t max_bytes, int touch_ok);

/* The buffer (valid until ig_prefault_free). */
void *ig_prefault_base(ig_prefault *p);

/* Ask for the first `bytes` to be faulted in; returns at once (the thread does the work). */
void ig_prefault_want(ig_prefault *p, size_t bytes);

/* Stop the thread and return the buffer, its first `bytes` usable (zero where never written),
   or NULL when bytes exceeds the reservation; pages faulted in beyond `bytes` are released.
   The buffer lives until ig_prefault_free. */
void *ig_prefault_take(ig_prefault *p, size_t bytes);

/* Stop the thread (if running) and release the buffer. NULL is fine. */
void ig_prefault_free(ig_prefault *p);

#endif
