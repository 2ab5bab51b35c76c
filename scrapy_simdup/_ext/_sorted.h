/* Look-up in an ascending uint64 array (binary search). */
#ifndef SIMDUP_SORTED_H
#define SIMDUP_SORTED_H

#include <stddef.h>
#include <stdint.h>

/* Position of x in the ascending a[0..n), or -1 (a may be NULL when n is 0). */
static inline ptrdiff_t simdup_find_u64(const uint64_t *a, ptrdiff_t n, uint64_t x) {
    ptrdiff_t lo = 0, hi = n;
    while (lo < hi) {
        ptrdiff_t mid = lo + ((hi - lo) >> 1);
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return (lo < n && a[lo] == x) ? lo : -1;
}

#endif
