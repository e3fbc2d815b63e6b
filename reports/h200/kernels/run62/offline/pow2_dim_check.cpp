// v / 2^k against v * 2^-k (the reciprocal built from its exponent bits, as the pow2-dim patch's per_dim does) for
// 200,000 random bit patterns (subnormals, infinities, NaNs, signed zeros) at each k in 0..30, in IEEE single
// precision without flushing: g++ -O0 -std=c++17 pow2_dim_check.cpp -o /tmp/pow2 && /tmp/pow2
#include <cstdio>
#include <cstring>
#include <cmath>
#include <random>
static float from_bits(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned bits(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
int main() {
  std::mt19937 gen(1);
  long checked = 0, bad = 0;
  for (int k = 0; k <= 30; ++k) {
    const int dim = 1 << k;
    const float inv = from_bits(unsigned(127 - (__builtin_ffs(dim) - 1)) << 23);
    if (inv != std::ldexp(1.0f, -k)) { printf("k=%d reciprocal wrong\n", k); ++bad; }
    for (int i = 0; i < 200000; ++i) {
      const float v = from_bits(unsigned(gen()));  // every bit pattern: subnormals, infinities, NaNs, signed zeros
      const volatile float q = v / float(dim);
      const volatile float m = v * inv;
      const bool same = std::isnan(q) ? std::isnan(m) : bits(q) == bits(m);
      bad += !same;
      ++checked;
    }
  }
  printf("%ld values x dims checked, %ld differ\n", checked, bad);
  return bad != 0;
}
