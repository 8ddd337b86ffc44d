/* The pool: blocks carved from malloc'ed chunks would do; plain malloc keeps
 * the example short. */
#include "mypool.h"

#include <stdlib.h>

void* mypool_alloc(size_t n, const char* tag) {
    (void)tag;
    return malloc(n ? n : 1);
}

void mypool_free(void* p) { free(p); }
