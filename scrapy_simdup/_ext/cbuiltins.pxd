# GCC/Clang builtins (no header: the compiler provides them).

cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil
    int ctz32 "__builtin_ctz" (unsigned int x) nogil
    int ctz64 "__builtin_ctzll" (unsigned long long x) nogil
