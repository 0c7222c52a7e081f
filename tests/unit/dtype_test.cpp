#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hearth {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << "half 0x" << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

TEST(DType, NamesRoundTrip) {
  for (auto name : {"F32", "F16", "BF16", "I8", "U8", "I32", "I64", "BOOL"}) {
    auto d = dtype_from_name(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(dtype_name(*d), name);
  }
  EXPECT_FALSE(dtype_from_name("F8_E4M3X").has_value());
}

}  // namespace hearth
