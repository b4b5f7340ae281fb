#pragma once
// The reference loop's bf16 storage: numeric/bf16.hpp (shared with comm/, which must not include reference/), named
// in this namespace for the kernels.
#include "numeric/bf16.hpp"

namespace shardplan::reference {

using numeric::accumulate;
using numeric::bf16;
using numeric::bf16_from_float;
using numeric::bf16_to_float;
using numeric::f32_bits;
using numeric::f32_from_bits;
using numeric::load;
using numeric::store_as;

}  // namespace shardplan::reference
