// Bulk copies for the data plane: std::memcpy / std::memmove, less a slow case of glibc's.
//
// glibc (2.36, Debian 12) copies 2 KiB to 512 KiB with `rep movsb` on CPUs with fast short
// rep movsb. On AMD EPYC (measured on this project's 2-core VMs) that runs at 2-3 GB/s
// instead of 30-45 GB/s when the destination is 1 to 31 bytes past the source modulo 4 KiB:
// exactly what copying a malloc'ed buffer (16 bytes into its page) into page-aligned shared
// memory gives. It made the 2-rank shm allreduce of 256 KiB to 4 MiB 2-4x slower than Open
// MPI's on those machines (docs/benchmarks-steady-lean.md). Such copies go in 64-byte blocks of
// plain moves here (28-30 GB/s there); every other copy is std::memcpy's.
#ifndef HORA_COMMON_COPY_H_
#define HORA_COMMON_COPY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hora {

namespace copy_internal {

// The distances (destination - source, modulo 4 KiB) and sizes of the slow case.
constexpr uintptr_t kShortDistance = 32;
constexpr size_t kMinBytes = 2048;

inline void Blocks(unsigned char* dst, const unsigned char* src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) __builtin_memcpy(dst + i, src + i, 64);
  if (i < n) std::memcpy(dst + i, src + i, n - i);
}

inline bool SlowForMemcpy(const void* dst, const void* src, size_t n) {
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  return n >= kMinBytes && distance != 0 && distance < kShortDistance;
}

}  // namespace copy_internal

// As std::memcpy (the ranges must not overlap); n == 0 touches nothing (null pointers too).
inline void CopyBytes(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (copy_internal::SlowForMemcpy(dst, src, n)) {
    copy_internal::Blocks(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src),
                          n);
    return;
  }
  std::memcpy(dst, src, n);
}

// As std::memmove (the ranges may overlap); n == 0 touches nothing.
inline void MoveBytes(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  if (d + n <= s || s + n <= d) {
    CopyBytes(dst, src, n);
  } else {
    std::memmove(dst, src, n);
  }
}

}  // namespace hora

#endif  // HORA_COMMON_COPY_H_
