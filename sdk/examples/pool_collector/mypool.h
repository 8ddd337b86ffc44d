/* A user's memory pool: the thing the collector reports. Stands for any
 * allocator a framework or application has of its own. */
#ifndef MYPOOL_H
#define MYPOOL_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* A block of n bytes for `tag` (e.g. "weights", "activations"). */
void* mypool_alloc(size_t n, const char* tag);
void mypool_free(void* p);
#ifdef __cplusplus
}
#endif
#endif
