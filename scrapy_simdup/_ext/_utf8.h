/* Strict UTF-8 check: what bytes.decode("utf-8") accepts (no overlong forms,
 * surrogates or code points above U+10FFFF). Shared by textfeat and htmlscan. */
#ifndef SIMDUP_UTF8_H
#define SIMDUP_UTF8_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>

static int simdup_utf8_valid(const unsigned char *p, ptrdiff_t n) {
    ptrdiff_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {       /* skip ASCII eight bytes at a time */
            uint64_t word;
            memcpy(&word, p + i, 8);
            if ((word & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        unsigned char b = p[i];
        if (b < 0x80) {
            i += 1;
        } else if (b >= 0xC2 && b <= 0xDF) {
            if (i + 1 >= n || (p[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char b1 = p[i + 1];
            if ((b1 & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80
                    || (b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F)) return 0;
            i += 3;
        } else if (b >= 0xF0 && b <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char b1 = p[i + 1];
            if ((b1 & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80 || (p[i + 3] & 0xC0) != 0x80
                    || (b == 0xF0 && b1 < 0x90) || (b == 0xF4 && b1 > 0x8F)) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

#endif
