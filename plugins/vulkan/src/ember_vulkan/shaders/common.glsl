// Shared by every ember-vulkan shader: buffer-reference types (memory is reached through device
// addresses in push constants), the parameter block, and strided index helpers.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

#define WG 256u  // threads per workgroup of the 1-d kernels

layout(buffer_reference, std430, buffer_reference_align = 1) buffer BufU8 { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BufU16 { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BufF16 { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BufU32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BufI32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BufF32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BufU64 { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BufI64 { int64_t v[]; };
#if defined(HAS_FLOAT64)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BufF64 { double v[]; };
#endif
// Shapes, strides and offsets (in elements) written by the host for one dispatch.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Params { int v[]; };

// The element offset of flat index `i` (C order) in a view of `ndim` dims whose shape starts at
// p.v[shape_at] and whose strides start at p.v[strides_at].
// The outermost dim needs no division (i is in range), so a coalesced contiguous view costs one
// multiply: integer division is the slowest instruction here on most devices.
int strided_offset(Params p, int shape_at, int strides_at, int ndim, uint i) {
    int offset = 0;
    uint rest = i;
    for (int d = ndim - 1; d > 0; d--) {
        uint n = uint(p.v[shape_at + d]);
        offset += int(rest % n) * p.v[strides_at + d];
        rest /= n;
    }
    return ndim > 0 ? offset + int(rest) * p.v[strides_at] : offset;
}

// Elementwise parameter blocks: [ndim, shape..., then per operand (output first): offset, strides...].
int operand_offset(Params p, int ndim, int k, uint i) {
    int base = 1 + ndim + k * (ndim + 1);
    return p.v[base] + strided_offset(p, 1, base + 1, ndim, i);
}

// IEEE helpers the GLSL library lacks.
float copysign_f(float x, float s) {
    return uintBitsToFloat((floatBitsToUint(x) & 0x7fffffffu) | (floatBitsToUint(s) & 0x80000000u));
}
bool signbit_f(float x) { return (floatBitsToUint(x) & 0x80000000u) != 0u; }
