/* Internal to the plugin's C layer: the NHWC workspace and the transposes (layout.c). */
#ifndef EMBER_XNNPACK_LAYOUT_H
#define EMBER_XNNPACK_LAYOUT_H

#include <stddef.h>

#include "ember_xnnpack.h"

enum { EXN_WS_INPUT, EXN_WS_OUTPUT, EXN_WS_PAD, EXN_WORKSPACE_SLOTS };

/* A buffer of `count` floats (plus XNNPACK's over-read margin) in `slot`, kept between calls;
 * NULL when out of memory. */
float *exn_workspace(int slot, size_t count);

/* `x` itself when XNNPACK may over-read it safely, else a copy in `slot` (NULL: out of memory). */
const float *exn_readable_input(const float *x, size_t count, int slot);

/* 1 when x[0..n) holds no special value (NaN, infinity, subnormal), scanned on the pool. */
int exn_all_ordinary(void *pool, const float *x, size_t n);

#endif /* EMBER_XNNPACK_LAYOUT_H */
