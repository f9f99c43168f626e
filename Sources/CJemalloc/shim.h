#ifndef APN_WORKER_CJEMALLOC_SHIM_H
#define APN_WORKER_CJEMALLOC_SHIM_H
#include <stddef.h>
/* jemalloc's control interface (jemalloc(3)). Declared here instead of through
 * <jemalloc/jemalloc.h>, which also declares malloc and free: linking the library is what makes
 * it the process's allocator, and Swift must see a single malloc. */
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
#endif
