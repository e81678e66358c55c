// CopyBytes and MoveBytes (common/copy.h) copy exactly what memcpy and memmove do, for every
// distance between the ranges (the slow case of glibc's memcpy included) and every size
// around the block size.
#include "common/copy.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hora {
namespace {

std::vector<unsigned char> Pattern(size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 131 + 7);
  return v;
}

TEST_CASE("CopyBytes: equals memcpy at every distance and size", "[copy]") {
  const std::vector<size_t> sizes = {0, 1, 63, 64, 65, 2047, 2048, 2049, 4096 + 17, 70000};
  for (size_t n : sizes) {
    for (size_t distance : {0, 1, 16, 31, 32, 33, 4095, 4096 + 16}) {
      std::vector<unsigned char> src = Pattern(n + 1);  // never empty: data() is not null
      std::vector<unsigned char> dst(n + 8192, 0xEE), want = dst;
      const unsigned char* s = src.data();
      // The offset in dst at which (d - s) mod 4 KiB is `distance`.
      const size_t offset =
          (reinterpret_cast<uintptr_t>(s) + distance - reinterpret_cast<uintptr_t>(dst.data())) &
          4095;
      unsigned char* d = dst.data() + offset;
      std::memcpy(want.data() + offset, s, n);
      CopyBytes(d, s, n);
      INFO("size " << n << ", distance " << distance);
      const size_t page = distance % 4096;
      CHECK(copy_internal::SlowForMemcpy(d, s, n) == (n >= 2048 && page > 0 && page < 32));
      CHECK(dst == want);  // the bytes around the copy untouched too
    }
  }
}

TEST_CASE("MoveBytes: equals memmove for overlapping and separate ranges", "[copy]") {
  for (size_t n : {size_t{100}, size_t{5000}, size_t{70000}}) {
    for (long shift : {-4097L, -16L, -1L, 1L, 16L, 31L, 4097L}) {
      std::vector<unsigned char> buf = Pattern(n + 10000), want = buf;
      unsigned char* src = buf.data() + 5000;
      std::memmove(want.data() + 5000 + shift, want.data() + 5000, n);
      MoveBytes(src + shift, src, n);
      INFO("size " << n << ", shift " << shift);
      CHECK(buf == want);
    }
  }
}

}  // namespace
}  // namespace hora
