/* conv_direct.c's direct 3x3 stride-1 convolution, as conv.c routes to it.  Internal to the
 * plugin; not part of the ABI. */
#ifndef EMBER_CPU_CONV_DIRECT_H
#define EMBER_CPU_CONV_DIRECT_H

#include <stdint.h>

#include "ember.h"

/* Input channels up to which the direct kernel beats Winograd (measurements in conv_direct.c). */
#define EMBER_CPU_DIRECT_MAX_CHANNELS 4

/* 1 when ember_cpu_conv3x3_direct takes this call: float32, few input channels, AVX-512. */
int ember_cpu_conv3x3_direct_takes(const ember_tensor *out, const ember_tensor *x);

/* out = relu?(conv2d(x, weight) + bias) for 3x3 kernels at stride 1, padding (ph, pw); the operands
 * as conv.c's ember_cpu_conv2d_3x3 validated them (contiguous NCHW, OIHW, C > 0, out not empty). */
int ember_cpu_conv3x3_direct(const ember_tensor *out, const ember_tensor *x, const ember_tensor *weight,
                             const ember_tensor *bias, int64_t ph, int64_t pw, int relu);

#endif
